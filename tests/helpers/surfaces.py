"""Everything a user can read of a sweep, collected from where they read it: the sweep's
console, answer.md, report.md (the sweep's and that of ``python -m jacbench.report`` run again
on the sweep folder), and the MLflow parent and child runs through MLflow's API (issue 42:
they must say the same)."""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from jacbench.record.mlflow_run import JOB_TAG, significant
from jacbench.report.display import time_text
from jacbench.report.problems import latest_ok, normalise, problems

PREFIX = "Recommended: "


def recommendations_md(markdown: str) -> list[str]:
    """The bullets under report.md's "Recommendation" heading, without markdown emphasis."""
    section = markdown.split("## Recommendation\n", 1)[1].split("\n#", 1)[0]
    return [line[2:].replace("**", "") for line in section.splitlines() if line.startswith("- ")]


def tables_md(markdown: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(problem, strategy label) -> (its time, its round) in report.md's problem tables."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    problem, columns = "", []
    for line in markdown.split("## Problems\n", 1)[1].split("\n## Plots", 1)[0].splitlines():
        if line.startswith("### "):
            problem, columns = line[4:], []
        elif line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            if not columns:
                columns = cells
                continue
            if "median [95% interval]" in columns:
                row = dict(zip(columns, cells, strict=True))
                label = re.sub(r" \(\d+ colours\)$", "", row["strategy"])
                found[(problem, label)] = (row["median [95% interval]"], row.get("round", ""))
    return found


def said_alike(printed: str, sentences: list[str]) -> bool:
    """Whether ``printed`` says exactly these recommendations, in this order."""
    words = " ".join(printed.split())
    found = [words.find(PREFIX + " ".join(s.split())) for s in sentences]
    return words.count(PREFIX) == len(sentences) and -1 not in found and found == sorted(found)


def parent_lines(description: str) -> list[str]:
    """The per-problem lines of the parent's description (wrapped lines joined, brackets
    unescaped)."""
    lines: list[str] = []
    for line in description.split("\n\n", 2)[1].splitlines():
        if line.startswith("- "):
            lines.append(line[2:])
        elif line.startswith("  ") and lines:
            lines[-1] += " " + line.strip()
    return [line.replace("\\[", "[").replace("\\]", "]") for line in lines]


def answer_tables(answer: str) -> dict[tuple[str, str], str]:
    """(model, strategy) -> time in an experiment's answer tables (seed004's: a title line
    ``model: N=...`` above each table)."""
    found: dict[tuple[str, str], str] = {}
    model, columns = "", []
    for line in answer.splitlines():
        if re.match(r"^\w+: N=\d+", line):
            model, columns = line.split(":", 1)[0], []
        elif re.match(r"strategy\s{2,}", line):
            columns = re.split(r"\s{2,}", line.strip())
        elif columns and line.strip() and model:
            cells = re.split(r"\s{2,}", line.strip())
            if len(cells) == len(columns):
                row = dict(zip(columns, cells, strict=True))
                found[(model, row["strategy"])] = row["median [95% interval]"]
            else:
                columns = []
    return found


def report_again(sweep_dir: Path, out: Path) -> tuple[str, str]:
    """``python -m jacbench.report SWEEP_DIR --out OUT`` in this process: (printed, report.md)."""
    from jacbench.report.__main__ import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main([str(sweep_dir), "--out", str(out)]) == 0
    return printed.getvalue(), (out / "report.md").read_text()


@dataclass
class Surfaces:
    """What a user reads of one sweep."""

    printed: str  # the sweep's console
    sweep_dir: Path
    tracking_uri: str
    rows: pd.DataFrame = field(init=False)  # summary.parquet

    def __post_init__(self) -> None:
        self.rows = pd.read_parquet(self.sweep_dir / "summary.parquet")

    def assert_one_truth(self, scratch: Path) -> None:
        """Every recommendation and figure the same wherever it is read, and each figure a
        recorded row's, shown by that row's MLflow child run."""
        again_printed, again_md = report_again(self.sweep_dir, scratch)
        swept_md = (self.sweep_dir / "report" / "report.md").read_text()
        said = recommendations_md(swept_md)
        assert said and said == recommendations_md(again_md)
        assert said_alike(self.printed, said), (said, self.printed)
        assert said_alike(again_printed, said), (said, again_printed)
        tables = tables_md(swept_md)
        assert tables and tables == tables_md(again_md)
        self._figures_are_rows(tables)
        self._parent_says_the_same(said, tables)
        answer = self.sweep_dir / "answer.md"
        if answer.exists():
            by_model = {title.split(" ", 1)[0]: title for title, _ in tables}
            for (model, strategy), shown in answer_tables(answer.read_text()).items():
                assert shown == tables[(by_model[model], strategy)][0], (model, strategy)

    def _figures_are_rows(self, tables: dict[tuple[str, str], tuple[str, str]]) -> None:
        """Each table figure is the newest ok row of its strategy, and that row's child run
        shows it (its round tagged)."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.tracking_uri)
        labelled, _ = normalise(self.rows)
        for title, group in problems(labelled):
            for _, row in latest_ok(group).iterrows():
                shown, round_ = tables[(title, row["label"])]
                assert shown == time_text(row), (title, row["label"])
                run = client.get_run(row["mlflow_run_id"])
                assert run.data.tags[JOB_TAG] == row["job_id"]
                assert run.data.tags["round"] == row["round"]
                assert round_ in ("", row["round"].replace("_", " "))
                for metric, column in (
                    ("time_median_ms", "time_median_s"),
                    ("time_ci_low_ms", "time_ci_low_s"),
                    ("time_ci_high_ms", "time_ci_high_s"),
                ):
                    assert run.data.metrics[metric] == significant(row[column] * 1e3)

    def _parent_says_the_same(
        self, said: list[str], tables: dict[tuple[str, str], tuple[str, str]]
    ) -> None:
        from helpers.tracking import mlflow_runs

        parents, _ = mlflow_runs(self.tracking_uri)
        (parent,) = [p for p in parents if p.data.params["sweep_dir"] == str(self.sweep_dir)]
        lines = parent_lines(parent.data.tags["mlflow.note.content"])
        assert len(lines) == len(said)
        picks = []
        for sentence, line in zip(said, lines, strict=True):
            problem = sentence.split(": ", 1)[0]
            assert line.startswith(problem + ": ")
            unsettled = re.search(r"no settled winner between (\S+) and (\S+):", sentence)
            if unsettled:
                assert line.startswith(f"{problem}: {unsettled[1]} or {unsettled[2]} (not settled)")
                picks.append(f"{unsettled[1]} or {unsettled[2]} (not settled)")
                continue
            best = re.search(r": use (\S+) \(", sentence)
            if best is None:
                continue
            # the parent's choice may name the other kind's fastest: "use **A (B is ...)**"
            shown = re.match(
                rf"{re.escape(problem)}: use \*\*{re.escape(best[1])}( \([^*]+\))?\*\*, ", line
            )
            assert shown is not None, (sentence, line)
            assert line[shown.end() :].startswith(tables[(problem, best[1])][0] + ","), line
            picks.append(best[1])
        if len(picks) == len(said):
            assert parent.data.tags["recommended_strategy"] == ", ".join(dict.fromkeys(picks))
        self._answers_say_the_same(parent, said)

    def _answers_say_the_same(self, parent, said: list[str]) -> None:
        """The answer in metrics: on the parent (one problem) or on one answer run per
        problem under it, the settled winner's figures those of its newest ok row."""
        from helpers.tracking import answer_runs

        runs = [
            r
            for r in answer_runs(self.tracking_uri)
            if r.data.tags["mlflow.parentRunId"] == parent.info.run_id
        ]
        labelled, _ = normalise(self.rows)
        newest = {title: latest_ok(group) for title, group in problems(labelled)}
        assert len(runs) == (0 if len(said) == 1 else len(said))
        for sentence in said:
            problem = sentence.split(": ", 1)[0]
            if len(said) == 1:
                metrics = parent.data.metrics
            else:
                (run,) = [r for r in runs if r.info.run_name.endswith(": " + problem)]
                metrics = run.data.metrics
            best = re.search(r": use (\S+) \(", sentence)
            if best is None or "no settled winner" in sentence:
                assert metrics["settled"] == 0 and "time_median_ms" not in metrics, sentence
                continue
            if len(said) > 1:
                assert run.data.tags["recommended_strategy"] == best[1]
            row = newest[problem]
            row = row[row["label"] == best[1]].iloc[0]
            assert metrics["settled"] == 1, sentence
            for metric, column in (
                ("time_median_ms", "time_median_s"),
                ("time_ci_low_ms", "time_ci_low_s"),
                ("time_ci_high_ms", "time_ci_high_s"),
            ):
                assert metrics[metric] == significant(row[column] * 1e3), (problem, metric)
