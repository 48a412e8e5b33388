"""The report and console output where a new user found them wrong (issue 10): failures
before setup listed, exact strategies preferred unless an approximate one is clearly faster,
named plot points, and a failed run's table without placeholders."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from rich.console import Console

from conftest import make_result
from jacbench.display import result_table
from jacbench.report.build import write_report
from jacbench.report.problems import normalise, problems

NO_CUDA = "device=cuda requested but CUDA is not available on this machine; use device=cpu"


def frame(*results) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in results])


def before_setup(strategy: str, message: str, **changes):
    """A job that failed before its problem was built: no shape, kind or mode recorded."""
    return make_result(
        strategy=strategy,
        status="failed",
        error_message=message,
        strategy_kind="",
        strategy_mode="",
        wrt="",
        n_in=None,
        n_out=None,
        time_median_s=None,
        time_iqr_s=None,
        n_timed=None,
        first_call_s=None,
        rel_err=None,
        err_eps=None,
        max_abs_err=None,
        within_tol=None,
        peak_mem_bytes=None,
        memory_method="",
        reference_method="",
        reference_uncertainty=None,
        device_name="",
        job_id=f"{strategy}{len(message):>16}"[-16:],
        **changes,
    )


def test_jobs_that_failed_before_setup_are_in_the_report(tmp_path):
    rows = frame(
        make_result(strategy="jacrev"),
        before_setup("jacrev", NO_CUDA, device="cuda"),
        before_setup("functional", NO_CUDA, device="cuda"),
        before_setup("jacfwd", "cannot build model 'broken': no such file", model="broken"),
    )
    titles = [title for title, _ in problems(normalise(rows)[0])]
    assert "mlp float32 cuda (failed before setup: shape unknown)" in titles
    assert "broken float32 cpu (failed before setup: shape unknown)" in titles
    assert "mlp (N=3, M=2) float32 cpu" in titles  # no model options from failed rows
    write_report(rows, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert report.count(NO_CUDA) == 2  # jacrev and functional, each once
    assert "| jacfwd | failed | cannot build model 'broken': no such file |" in report
    assert "mlp float32 cuda (failed before setup: shape unknown): no strategy finished" in report


def rendered(table) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def test_failed_run_table_shows_only_what_is_known_and_the_reason_once():
    text = rendered(result_table(before_setup("jacrev", NO_CUDA, device="cuda")))
    for placeholder in ("wrt ?", "M=-", "(, )", "- s", "()", "IQR -"):
        assert placeholder not in text, text
    assert text.count(NO_CUDA) == 1
    assert "config_hash" in text and "median time" not in text
    assert NO_CUDA not in rendered(result_table(before_setup("jacrev", NO_CUDA), False))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_failed_single_run_prints_its_reason_once(launch):
    code, lines, printed = launch("strategy=jacrev", "device=cuda")
    assert code == 1 and len(lines) == 1 and lines[0].startswith("jacbench: failed: ")
    reason = lines[0].removeprefix("jacbench: failed: ")
    assert printed.count(reason) == 1, printed
    assert "wrt ?" not in printed and "M=-" not in printed and "(, )" not in printed


def timed(strategy: str, ms: float, kind: str = "exact", noisy: bool = False, **changes):
    return make_result(
        strategy=strategy,
        strategy_kind=kind,
        strategy_mode="numeric" if kind == "approximate" else "reverse",
        time_median_s=ms * 1e-3,
        time_iqr_s=ms * 1e-5,
        timing_warning="Interquartile range is 40% of the median" if noisy else "",
        err_eps=1e3 if kind == "approximate" else 2.0,
        job_id=f"{strategy}{ms}".ljust(16, "0")[:16],
        **changes,
    )


def recommendation(*results):
    from jacbench.report.analysis import recommend

    ((title, group),) = problems(normalise(frame(*results))[0])
    return recommend(title, group)


def test_exact_is_recommended_unless_an_approximate_one_is_clearly_faster():
    near = recommendation(timed("fd_central", 1.0, "approximate"), timed("jacrev", 1.4))
    assert near.best == "jacrev" and near.alternative.name == "fd_central"
    assert near.alternative.faster == pytest.approx(1.4)
    text = near.sentence()
    assert "use **jacrev** (1.4 ms)" in text
    assert "Approximate alternative: fd_central (1 ms, err_eps 1e+03), 1.40x faster" in text
    assert near.choice() == "jacrev (fd_central is 1.4x faster but approximate)"

    noisy = recommendation(timed("fd_central", 1.0, "approximate", noisy=True), timed("jacrev", 3))
    assert noisy.best == "jacrev" and "noisy" in noisy.sentence()

    clear = recommendation(
        timed("fd_central", 1.0, "approximate"), timed("jacrev", 2.0), timed("jacfwd", 2.5)
    )
    assert clear.best == "fd_central" and clear.alternative.name == "jacrev"
    text = clear.sentence()
    assert "use **fd_central** (1 ms), approximate (err_eps 1e+03)" in text
    assert "Exact alternative: jacrev (2 ms, err_eps 2), 2.00x slower" in text

    slower = recommendation(timed("fd_central", 3.0, "approximate"), timed("jacrev", 1.0))
    assert slower.best == "jacrev" and slower.alternative is None


def test_report_and_mlflow_description_show_the_same_pick_and_alternative(tmp_path):
    from jacbench.report.overview import overview

    rows = frame(
        timed("fd_central", 1.0, "approximate"), timed("jacrev", 1.2), timed("functional", 6)
    )
    write_report(rows, tmp_path)
    report = (tmp_path / "report.md").read_text()
    view = overview(rows)
    sentence = recommendation(*[make_result(**r) for r in rows.to_dict("records")]).sentence()
    assert sentence in report and sentence in view.description
    assert "Approximate alternative: fd_central" in sentence and "exact first" in report
    assert view.description.startswith(
        "**Recommended: jacrev (fd_central is 1.2x faster but approximate)**"
    )
    assert view.tags["recommended_strategy"] == "jacrev"
    assert view.tags["recommended_with_alternative"].startswith("jacrev (fd_central is 1.2x")
