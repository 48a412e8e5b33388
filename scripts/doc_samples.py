"""Regenerate the sample answers in the docs from real runs, so they cannot go stale.

Each sample is a fenced ``text`` block between ``<!-- sample: NAME -->`` and
``<!-- /sample -->`` in README.md or docs/*.md; this script runs ``python -m jacbench -m
+experiment=NAME`` (MLflow off) in a scratch folder and puts the answer it wrote (answer.md)
in place of the block. tests/test_experiments.py checks that every sample's title and column
names are those the current code prints.

    python scripts/doc_samples.py              # every sample but the map's (about 5 minutes)
    python scripts/doc_samples.py seed003      # one
    python scripts/doc_samples.py map --from multirun/2026-11-25/21-36-30.155177
                                               # the answer a sweep already wrote

The map (``+experiment=map``, 1950 jobs: 35-45 minutes here) runs only when named; ``--from
FOLDER`` takes the answer.md of a sweep run earlier (with the preset as it is) instead.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = re.compile(r"(<!-- sample: (\w+) -->\n)```text\n(.*?)```\n(<!-- /sample -->)", re.S)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def samples(text: str) -> dict[str, str]:
    """The sample blocks of a document: experiment name -> the text inside its fence."""
    return {m.group(2): m.group(3) for m in SAMPLE.finditer(text)}


EXPENSIVE = {"map"}  # run only when named


def answer_of(folder: Path) -> str:
    """The text inside answer.md's fence, as the sweep in ``folder`` wrote it."""
    return (folder / "answer.md").read_text().split("```text\n", 1)[1].rsplit("```", 1)[0]


def run(name: str) -> str:
    """The answer ``+experiment=NAME`` prints, from a real sweep in a scratch folder."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "jacbench", "-m", f"+experiment={name}"]
        subprocess.run(
            [*command, "mlflow.enabled=false"], cwd=folder, check=True, stdout=subprocess.DEVNULL
        )
        (answer,) = Path(folder).glob("multirun/*/*/answer.md")
        return answer_of(answer.parent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="experiments to run (default: every sample's)")
    parser.add_argument("--from", dest="folder", type=Path, help="a sweep folder: its answer")
    args = parser.parse_args(argv)
    everything = {n for d in documents() for n in samples(d.read_text())} - EXPENSIVE
    wanted = set(args.names) or everything
    if args.folder is not None:
        if len(wanted) != 1 or not args.names:
            parser.error("--from FOLDER takes the one experiment NAME its sweep ran")
        answers = {name: answer_of(args.folder) for name in wanted}
    else:
        answers = {name: run(name) for name in sorted(wanted)}
    for document in documents():
        text = document.read_text()
        new = SAMPLE.sub(
            lambda m: (
                m.group(0)
                if m.group(2) not in answers
                else f"{m.group(1)}```text\n{answers[m.group(2)]}```\n{m.group(4)}"
            ),
            text,
        )
        if new != text:
            document.write_text(new)
            print(f"updated {document.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
