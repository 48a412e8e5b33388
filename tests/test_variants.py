"""Issue 59: one short name per strategy variant, the same on every surface, made from what
its options change (``auto (eager)``, ``fd_central eps=1e-4``), never an option dump."""

from __future__ import annotations

import json

from helpers.cli import compose_job
from helpers.results import frame, make_result, timed_row
from jacbench.record import variant
from jacbench.record.mlflow_run import run_name
from jacbench.report.display import make_console, result_table, summary_table
from jacbench.report.problems import normalise


def _job(*overrides: str):
    from jacbench.core.registry import load_registry
    from jacbench.run.identity import identify
    from jacbench.run.job import make_job

    cfg = compose_job(*overrides)
    return make_job(cfg, load_registry(), identify(cfg))


def _variant_of(*overrides: str) -> str:
    return _job(*overrides).columns["variant"]


def test_a_preset_and_a_swept_option_get_short_labels_from_what_differs():
    assert _variant_of("strategy=auto_eager") == "auto (eager)"
    assert _variant_of("strategy=jacfwd_folded_eager") == "jacfwd_folded (eager)"
    assert _variant_of("strategy=fd_central", "strategy.eps=1e-4") == "fd_central eps=1e-4"
    assert _variant_of("strategy=auto") == "auto"  # its defaults: nothing to add
    long = _variant_of("strategy=auto", "strategy.compile=false", "strategy.patience=2.5")
    assert long == "auto (eager) patience=2.5"
    assert "calibration_time" not in long and "[" not in long


def test_numbers_read_as_written_by_hand():
    assert [variant.number_text(v) for v in (1e-4, 0.05, 2.5e-7, 300.0, 1e-3)] == [
        "1e-4",
        "0.05",
        "2.5e-7",
        "300",
        "0.001",
    ]


def _two_fd_central(recorded: bool) -> list[dict]:
    rows = []
    for eps, ms in ((1e-4, 1.0), (1e-6, 2.0)):
        options = json.dumps({"eps": eps})
        label = variant.label("fd_central", {"eps": eps}) if recorded else ""
        rows.append(
            timed_row(f"fd_central{eps}", ms, 0.01, strategy="fd_central", strategy_options=options)
            | {"variant": label}
        )
    return rows


def test_the_report_label_is_the_recorded_variant_and_older_rows_get_the_same():
    recorded = frame(*_two_fd_central(recorded=True))
    older = frame(*_two_fd_central(recorded=False))  # rows of a jacbench before `variant`
    assert list(recorded["label"]) == ["fd_central eps=1e-4", "fd_central eps=1e-6"]
    assert list(older["label"]) == list(recorded["label"])


def test_an_older_auto_eager_row_names_only_the_option_that_differs():
    full = {"compile": True, "calibrate": True, "calibration_time": 0.05, "cache": True}
    rows = [
        timed_row("auto", 1.0, 0.01, strategy_options=json.dumps(full)),
        timed_row(
            "auto_e",
            2.0,
            0.01,
            strategy="auto",
            strategy_options=json.dumps(full | {"compile": False}),
        ),
    ]
    labels = list(frame(*rows)["label"])
    assert labels == ["auto (compiled)", "auto (eager)"]


def test_every_surface_of_one_row_shows_its_variant():
    result = make_result(
        strategy="auto", variant="auto (eager)", strategy_options='{"compile": false}'
    )
    assert run_name(result).startswith("auto (eager) ")
    console = make_console()
    with console.capture() as captured:
        console.print(result_table(result))
        rows, _ = normalise(frame(result.__dict__).assign(job_num=0, resumed=False))
        console.print(summary_table(rows, []))
    printed = captured.get()
    assert printed.count("auto (eager)") >= 3  # title, strategy line, summary row
