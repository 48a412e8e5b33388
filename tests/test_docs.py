"""The documentation cannot go stale silently (issue 28): every result column, strategy option
and report file is documented, nothing documented is gone, and the README's links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from helpers.cli import load_script
from helpers.results import make_result
from jacbench.core.registry import load_registry
from jacbench.record.parquet import SCHEMA
from jacbench.report.build import write_report

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _table_names(path: Path) -> set[str]:
    """The backticked names in the first cell of each row of the page's tables."""
    names = set()
    for line in path.read_text().splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def test_every_column_is_documented_and_every_documented_column_exists():
    documented = _table_names(DOCS / "columns.md")
    assert set(SCHEMA.names) - documented == set(), "columns without a line in docs/columns.md"
    assert documented - set(SCHEMA.names) == set(), "docs/columns.md names columns that are gone"


def test_every_strategy_and_its_options_are_documented():
    text = (DOCS / "configuration.md").read_text()
    rows = {
        m.group(1): line for line in text.splitlines() if (m := re.match(r"\| `(\w+)` \|", line))
    }
    registry = load_registry()
    for name, spec in registry.strategies.items():
        assert name in rows, f"strategy {name} is not in docs/configuration.md"
        for option in spec.options.__dataclass_fields__:
            assert f"`{option}`" in rows[name], f"{name}'s option {option} is not documented"


def test_every_report_file_is_documented(tmp_path: Path):
    rows = pd.DataFrame(
        [
            make_result(
                strategy=s,
                time_median_s=t,
                err_eps=e,
                within_tol=True,
                n_in=3,
                n_out=2,
                dtype="float32",
                device="cpu",
                job_id=f"{i:016d}",
                config_hash=s,
            ).__dict__
            for i, (s, t, e) in enumerate([("jacrev", 1e-3, 1.0), ("jacfwd", 2e-3, 2.0)])
        ]
    )
    write_report(rows, tmp_path)
    text = (DOCS / "reports.md").read_text()
    for path in tmp_path.iterdir():
        assert f"`{path.name}`" in text, f"{path.name} is written but not in docs/reports.md"


def test_the_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+\.(?:md|png))\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_every_forum_experiment_has_a_sample_the_script_generates():
    """Each preset's printed answer is in the docs between the markers scripts/doc_samples.py
    fills from a real run (tests/test_experiments.py checks each one's title and columns)."""
    doc_samples = load_script("doc_samples")
    documented = [n for d in doc_samples.documents() for n in doc_samples.samples(d.read_text())]
    presets = {p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")}
    assert presets and presets <= set(documented), presets - set(documented)
    assert set(documented) <= presets, set(documented) - presets


def test_ci_installs_exactly_as_the_readme_says():
    """.ci/run's install line is the README's, with the benchmark's extra (issue 61)."""
    readme, ci = ((ROOT / p).read_text().splitlines() for p in ("README.md", ".ci/run"))
    install = [line for line in readme if line.startswith("python3 -m venv")]
    assert install == [line for line in ci if line.startswith("python3 -m venv")]
    assert '-e ".[bench,dev]"' in install[0]


def test_contributing_keeps_commands_and_rules_under_200_lines():
    assert len((ROOT / "CONTRIBUTING.md").read_text().splitlines()) < 200
