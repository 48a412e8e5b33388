"""An experiment's answer to its forum question, from the sweep's rows: printed, saved as
answer.md, shown in the MLflow parent run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.panel import Panel
from rich.text import Text

from jacbench.record.atomic import write_atomic
from jacbench.record.markdown import markdown_safe, wrapped_prose
from jacbench.record.text import one_line, shown_lines
from jacbench.run.inputs import load_analysis
from jacbench.run.sweep.state import SweepState


def reused_note(rows: Any) -> str:
    """One line on the rows reused from earlier commands: how many, when, which are stale."""
    if "resumed" not in rows or not rows["resumed"].any():
        return ""
    reused = rows[rows["resumed"].astype(bool)]
    when = reused["started_at"]
    first, last = f"{when.min():%Y-%m-%d %H:%M}", f"{when.max():%Y-%m-%d %H:%M}"
    span = first if first == last else f"{first} to {last}"
    changed = [str(s) for s in reused["stale"].fillna("") if s] if "stale" in reused else []
    stale_text = (
        f" {len(changed)} of them STALE, kept by reuse_stale=true "
        f"({'; '.join(dict.fromkeys(changed))})."
        if changed
        else ""
    )
    return (
        f"\n\nReused {len(when)} row(s) measured by earlier commands ({span} UTC, under that "
        f"load; force=true measures them again).{stale_text}"
    )


def answer_paragraph(answer: str) -> str:
    """The answer's own paragraph (the last one starting "Answer:"), joined into one line:
    answer.md shows it first, above the tables it rests on ("" where there is none)."""
    paragraphs = [p.strip() for p in answer.split("\n\n")]
    found = ""
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("Answer:")), None)
        if start is not None:
            found = " ".join(line.strip() for line in lines[start:])
    return found


def answer_experiment(
    state: SweepState, rows: Any, console: Any, retimed: list[str] | None = None
) -> tuple[str, bool]:
    """Run the experiment's analysis on the rows (``retimed``: the re-timings among them),
    print it and save it as answer.md; returns the answer and whether the analysis gave one."""
    path = Path(state.sweep_dir) / "answer.md"
    try:
        answer = load_analysis(str(state.analysis))(rows)
        answered = isinstance(answer, str)
    except Exception as exc:
        answer = f"The analysis {state.analysis} could not answer: {type(exc).__name__}: {exc}"
        answered = False
        print(f"jacbench: {one_line(answer)}", file=sys.stderr)
    if not isinstance(answer, str):
        answer = (
            f"The analysis {state.analysis} returned a {type(answer).__name__}, not the text "
            "of an answer: an analysis takes the sweep's rows and returns a str"
        )
        print(f"jacbench: {answer}", file=sys.stderr)
    answer = answer.rstrip() + reused_note(rows)
    if retimed:
        answer += "\n\nTimed again side by side before naming a winner:\n" + "\n".join(
            f"- {line}" for line in retimed
        )
    answer = shown_lines(answer)  # names in it: their escape sequences escaped
    console.print(Panel(Text(answer), title="answer", expand=False))
    title = f"# Answer: {str(state.analysis).partition(':')[0].rpartition('.')[2]}"
    lead = answer_paragraph(answer)
    first = f"{wrapped_prose(markdown_safe(lead))}\n\nThe figures it rests on:\n\n" if lead else ""
    try:
        write_atomic(path, f"{title}\n\n{first}```text\n{wrapped_prose(answer.rstrip())}\n```\n")
    except OSError as exc:  # e.g. a full disk: the answer is on screen and in the parent run
        print(f"jacbench: could not write {path} ({exc.strerror or exc})", file=sys.stderr)
    return answer, answered
