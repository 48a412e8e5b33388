"""Names are data (issue 60): a model name holding ``../``, ``/``, a literal ``${oc.env:...}``,
terminal escape sequences or 300 characters is recorded as typed, logged to MLflow under keys
MLflow takes, never interpolated again (a preset's side-by-side job included), and printed
with its escape sequences escaped, on the terminal and in the report."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from helpers.results import make_result
from helpers.tracking import seed_store, sqlite_uri
from jacbench import sync
from jacbench.record.mlflow_run import JOB_TAG
from jacbench.record.parquet import write_result
from jacbench.record.text import one_line, shown, terminal_text
from jacbench.run.pair import Pair, literal

SECRET = "hunter2-name-secret"
HOSTILE = [
    "../x",
    "..",
    "a/b",
    "/etc/passwd",
    "lit${oc.env:JB_NAME_SECRET}",
    "E\x1b[31mred\x1b[0m\x07\u202e",
    "[bold]markup[/bold]",
    "n" * 300,
]


def _all_runs(folder) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(folder))
    experiment = client.get_experiment_by_name("jacbench")
    return client.search_runs([experiment.experiment_id], max_results=1000)


def test_escape_sequences_are_shown_escaped():
    name = "E\x1b[31mred\x1b[0m\x07\u202e tab\there"
    assert shown(name) == "E\\x1b[31mred\\x1b[0m\\x07\\u202e tab\\there"
    assert shown("../lit${x} é") == "../lit${x} é"  # printable text as typed
    assert "\x1b" not in one_line(f"failed on {name}")
    assert terminal_text("[bold]x\x1b") == "\\[bold]x\\x1b"


def test_a_pairs_configs_keep_their_text_literal(monkeypatch):
    """A side-by-side job rebuilt its contestants' configs with OmegaConf.create, which
    resolved a literal ``${oc.env:...}`` a user had escaped on the command line."""
    monkeypatch.setenv("JB_NAME_SECRET", SECRET)
    from jacbench.run.identity import plain

    texts = ["lit${oc.env:JB_NAME_SECRET}", "a\\${x}", "x\\", "${", "}${a}{"]
    config = {"model": {"name": texts[0], "list": texts}, "seed": 0}
    pair = Pair("p", ("a", "b"), (0, 1), (config, config), "2026-01-01T00:00:00")
    for cfg in pair.contestant_configs():
        assert plain(cfg.model) == {"name": texts[0], "list": texts}
    assert literal(7) == 7


def test_sync_logs_rows_whatever_their_names(tmp_path, monkeypatch, capsys):
    """A name starting with ``../`` made MLflow refuse the run's per-problem metric key: no
    run logged, runs left RUNNING, and sync failed on it for good."""
    for i, name in enumerate(HOSTILE):
        write_result(make_result(job_id=f"{i:016x}", config_hash=f"h{i}", model=name), tmp_path)
    seed_store(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = sync.main([str(tmp_path)])
    printed = capsys.readouterr()
    assert code == 0, printed
    runs = _all_runs(tmp_path)
    assert sorted(r.data.params["model"] for r in runs) == sorted(HOSTILE)
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert len({r.data.tags[JOB_TAG] for r in runs}) == len(HOSTILE)
    assert "\x1b" not in printed.out + printed.err


@pytest.mark.slow
def test_a_hostile_name_through_a_preset_its_side_by_side_job_report_and_sync(
    launch, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("JB_NAME_SECRET", SECRET)
    typed = "../lit\\${oc.env:JB_NAME_SECRET}/E\x1b[31mred\x1b[0m\x07[bold]b[/bold]"
    typed += "n" * (300 - len(typed))
    name = typed.replace("\\${", "${")
    code, lines, printed = launch("+experiment=seed003", f'model.name="{typed}"', mlflow=True)
    assert code == 0, printed
    assert "\x1b" not in printed and "\x07" not in printed and SECRET not in printed
    assert "\\x1b[31mred" in printed  # shown escaped

    rows = [pq.read_table(f).to_pylist()[0] for f in (tmp_path / "results").glob("*.parquet")]
    assert {r["model"] for r in rows} == {name}  # the side-by-side rows' too, as typed
    assert "side_by_side" in {str(r["round"]) for r in rows}
    hashes = {r["round"]: set() for r in rows}
    for r in rows:
        hashes[r["round"]].add(r["config_hash"])
    assert hashes["side_by_side"] <= hashes["first"]  # the same problems as the first round

    runs = _all_runs(tmp_path)
    jobs = [r for r in runs if JOB_TAG in r.data.tags]
    assert len(jobs) == len(rows) and {r.info.status for r in jobs} == {"FINISHED"}
    for run in runs:
        values = [*run.data.tags.values(), *run.data.params.values()]
        assert not any(SECRET in str(v) for v in values), run.info.run_name
    for report in tmp_path.glob("multirun/*/*/report/*"):
        if report.suffix in (".md", ".html", ".svg"):
            text = report.read_text(errors="replace")
            assert SECRET not in text, report
            assert "\x1b" not in text, report

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert sync.main(["results"]) == 0, capsys.readouterr()
    assert "0 row(s) without an MLflow run now have one" in capsys.readouterr().out
