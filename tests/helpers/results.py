"""Hand-built results for tests of code that only reads them."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from jacbench.record.result import Result


def make_result(**changes) -> Result:
    """A hand-built Result for tests of code that only reads results (schema, reports)."""
    base = {f.name: None for f in dataclasses.fields(Result)}
    base.update(
        model="mlp",
        strategy="jacrev",
        strategy_kind="exact",
        strategy_mode="reverse",
        chosen_strategy="",
        dtype="float32",
        device="cpu",
        wrt="input",
        n_in=3,
        n_out=2,
        batch=1,
        seed=0,
        status="ok",
        error_message="",
        time_median_s=1e-4,
        time_iqr_s=1e-6,
        n_timed=100,
        timing_warning="",
        first_call_s=2e-3,
        measure_s=0.5,
        ref_norm=1.0,
        out_norm=2.0,
        jacobian=[1.0, 2.0],
        threads=1,
        peak_mem_bytes=1024,
        memory_method="cpu",
        max_abs_err=1e-8,
        rel_err=2e-7,
        err_eps=1.7,
        tolerance=1.2e-5,
        within_tol=True,
        undecided_reason="",
        pattern_source="",
        decided_by="",
        tier="",
        reference_method="forward_float64",
        reference_uncertainty=1e-16,
        strategy_options="{}",
        model_options="{}",
        config_hash="abc",
        mlflow_run_id="",
        torch_version="2",
        device_name="cpu",
        git_commit="",
        job_id="0123456789abcdef",
        started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        round="first",
        pair_id="",
        jacbench_version="",
        code_digest="",
        hostname="",
        cpu_model="",
    )
    base.update(changes)
    median = base["time_median_s"]
    if median is not None and "n_blocks" not in changes:  # a settled timing: 10 blocks, +-2%
        interval = {"median_s": median, "ci_low_s": median * 0.98, "ci_high_s": median * 1.02}
        base.update({f"time_{k}": v for k, v in interval.items() if k != "median_s"})
        base.update({f"cpu_{k}": v for k, v in interval.items()})
        settled = {"n_blocks": 10, "cpu_wall_ratio": 1.0, "load_avg_1m": 0.5}
        base.update({k: v for k, v in settled.items() if k not in changes})
    return Result(**base)
