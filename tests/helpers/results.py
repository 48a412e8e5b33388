"""Hand-built results for tests of code that only reads them."""

from __future__ import annotations

import dataclasses
import random
import statistics
from datetime import datetime, timezone

import pandas as pd

from jacbench.record.result import Result
from jacbench.report.problems import normalise
from jacbench.timing.rule import median_interval


def make_result(**changes) -> Result:
    """A hand-built Result for tests of code that only reads results (schema, reports)."""
    base = {f.name: None for f in dataclasses.fields(Result)}
    base.update(
        model="mlp",
        strategy="jacrev",
        variant="",
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
        allocator="test allocator",
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
        built="",
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
        hostname="test-host",
        cpu_model="test CPU",
    )
    base.update(changes)
    median = base["time_median_s"]
    if median is not None and "n_blocks" not in changes:  # a settled timing: 10 blocks, +-2%
        interval = {"median_s": median, "ci_low_s": median * 0.98, "ci_high_s": median * 1.02}
        base.update({f"time_{k}": v for k, v in interval.items() if k != "median_s"})
        base.update({f"cpu_{k}": v for k, v in interval.items()})
        base.update({f"thread_cpu_{k}": v for k, v in interval.items()})
        settled = {"n_blocks": 10, "cpu_wall_ratio": 1.0, "load_avg_1m": 0.5}
        base.update({k: v for k, v in settled.items() if k not in changes})
    return Result(**base)


def timed_row(name: str, median_ms: float, spread_ms: float, n: int = 10, **changes) -> dict:
    """A result row whose interval comes from ``n`` real block times around the median (the
    timer's own functions compute it), as a recorded row would carry it. ``cpu_ms``: the CPU
    time per call (default: the wall time, as on an idle machine)."""
    rng = random.Random(name)
    blocks = [max(1e-6, (median_ms + rng.uniform(-spread_ms, spread_ms)) / 1e3) for _ in range(n)]
    cpu_share = changes.pop("cpu_ms", median_ms) / median_ms
    cpu_blocks = [b * cpu_share for b in blocks]
    values = {
        "strategy": name,
        "time_iqr_s": 2 * spread_ms / 1e3,
        "n_blocks": n,
        "config_hash": name,
        "job_id": f"{abs(hash(name)) % 10**16:016d}",
    }
    for basis, times in (("time", blocks), ("cpu", cpu_blocks), ("thread_cpu", cpu_blocks)):
        low, high = median_interval(times)
        values.update(
            {
                f"{basis}_median_s": statistics.median(times),
                f"{basis}_ci_low_s": low,
                f"{basis}_ci_high_s": high,
                f"{basis}_blocks_s": times,
            }
        )
    values.update(changes)
    return make_result(**values).__dict__


def frame(*rows: dict) -> pd.DataFrame:
    return normalise(pd.DataFrame(list(rows)))[0]
