"""One job: problem -> strategy -> measurement -> Result. Never raises for a job's own
failure: the exception becomes a ``failed`` or ``skipped`` Result with its message."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from jacbench.config import JobSpec, config_hash, job_labels, make_job
from jacbench.errors import ConfigError, classify
from jacbench.measure import MEMORY_METHODS, first_call, peak_memory, time_steady_state
from jacbench.numerics import compare, tolerance
from jacbench.problem import build_problem, reference_jacobian
from jacbench.registry import Registry
from jacbench.result import SCHEMA, Result
from jacbench.strategy import StrategySkip


@functools.cache
def git_commit() -> str:
    """The commit of the jacbench checkout in use, where it is a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def blank_fields(labels: dict[str, str], job_hash: str, seed: int) -> dict[str, Any]:
    """Every Result field at 'not reached yet'; the job fills in what it gets to."""
    unmeasured = dict.fromkeys(f.name for f in SCHEMA if f.nullable)  # the measured ones
    return {
        **unmeasured,
        **labels,
        "wrt": "",
        "batch": 1,
        "seed": seed,
        "status": "ok",
        "error_message": "",
        "threads": torch.get_num_threads(),
        "memory_method": "",
        "reference_kind": "",
        "strategy_kind": "",
        "strategy_mode": "",
        "chosen_strategy": "",
        "strategy_options": "{}",
        "model_options": "{}",
        "config_hash": job_hash,
        "mlflow_run_id": "",
        "torch_version": torch.__version__,
        "device_name": "",
        "git_commit": git_commit(),
        "started_at": datetime.now(timezone.utc),
        "job_id": uuid.uuid4().hex,
    }


def execute(cfg: DictConfig, registry: Registry, thread_cap: int | None = None) -> Result:
    """Validate the config and run the job; bad input becomes a ``failed`` Result.

    ``thread_cap`` bounds the torch threads when several jobs share the machine's cores."""
    labels = job_labels(cfg)
    try:
        job = make_job(cfg, registry)
    except ConfigError as exc:
        fields = blank_fields(labels, config_hash(cfg), int(cfg.get("seed", 0)))
        fields.update(status="failed", error_message=str(exc).splitlines()[0])
        return Result(**fields)
    if thread_cap is not None and job.timing.threads > thread_cap:
        job = dataclasses.replace(job, timing=dataclasses.replace(job.timing, threads=thread_cap))
    return run_job(job, labels)


def run_job(job: JobSpec, labels: dict[str, str]) -> Result:
    torch.set_num_threads(job.timing.threads)
    draft = blank_fields(labels, job.config_hash, job.seed)
    draft.update(
        wrt=str(job.model.get("wrt", "input")),
        threads=job.timing.threads,
        strategy_kind=job.strategy.kind.value,
        strategy_mode=job.strategy.mode.value,
        strategy_options=json.dumps(dataclasses.asdict(job.options), sort_keys=True),
        model_options=json.dumps(job.model, sort_keys=True, default=str),
        device_name=device_name(job.device),
    )
    try:
        _measure(job, draft)
    except Exception as exc:
        status, message = classify(exc)
        draft.update(status=status, error_message=message)
    return Result(**draft)


def _measure(job: JobSpec, draft: dict[str, Any]) -> None:
    problem = build_problem(job.model, job.dtype, job.device, job.seed)
    draft.update(n_in=problem.n_in, n_out=problem.n_out, wrt=problem.wrt, batch=problem.batch)
    if problem.batch > 1 and not job.strategy.batch:
        raise StrategySkip(
            f"strategy {job.strategy.name!r} computes one Jacobian at a time; batch="
            f"{problem.batch} needs a batch-aware strategy (e.g. jacrev, jacfwd, fd_central)"
        )
    reference, reference_kind = reference_jacobian(problem)
    with torch.no_grad():
        outputs = problem.f_many(problem.points)
    draft.update(
        reference_kind=reference_kind,
        ref_norm=float(torch.linalg.norm(reference)),
        out_norm=float(torch.linalg.norm(outputs.detach().double())),
    )

    started = time.perf_counter()
    first = first_call(lambda: job.strategy.prepare(problem, job.options), job.device)
    draft.update(
        first_call_s=first.seconds, chosen_strategy=getattr(first.jac, "chosen_strategy", "")
    )
    if first.value.requires_grad:
        raise RuntimeError("the strategy returned a Jacobian that requires grad (a live graph)")
    errors = compare(first.value, reference, job.dtype, job.strategy.kind)
    draft.update(
        max_abs_err=errors.max_abs_err,
        rel_err=errors.rel_err,
        err_eps=errors.err_eps,
        tolerance=tolerance(job.dtype, job.strategy.kind),
        within_tol=errors.within_tol,
    )
    if errors.n_nonfinite:
        n = first.value.numel()
        draft.update(
            status="failed",
            error_message=f"non-finite Jacobian: {errors.n_nonfinite} of {n} entries are nan/inf",
        )
        return
    if first.value.numel() <= job.jacobian_max_entries:
        draft.update(jacobian=first.value.detach().double().cpu().reshape(-1).tolist())
    jac = first.jac
    del first  # free the first Jacobian before timing and memory

    timing = time_steady_state(jac, job.timing)
    draft.update(time_median_s=timing.median_s, time_iqr_s=timing.iqr_s, n_timed=timing.n_timed)
    if job.timing.memory:
        draft.update(
            peak_mem_bytes=peak_memory(jac, job.device),
            memory_method=MEMORY_METHODS[job.device.type],
        )
    draft.update(measure_s=time.perf_counter() - started)
