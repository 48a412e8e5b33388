"""One job: problem -> strategy.prepare -> prepared(x) -> measurement -> Result.

Each stage returns a small record whose fields are ``Result`` columns; the job combines them.
A job never raises for its own failure: the exception becomes a ``failed`` or ``skipped``
Result with its message (``classify`` is that policy).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from jacbench.benchmark.judging import ErrorMetrics, compare
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import (
    SAMPLED_METHOD,
    LastProblem,
    Reference,
    References,
    sampled_entries,
    sampled_reference,
)
from jacbench.core.errors import ConfigError, StrategySkip
from jacbench.core.interrupt import check as check_interrupt
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.machine import cpu_model
from jacbench.core.memory_budget import check_fits, sampled
from jacbench.core.numerics import tolerance
from jacbench.core.problem import Problem
from jacbench.core.registry import Registry
from jacbench.core.strategy import Mode
from jacbench.core.version import VERSION
from jacbench.record import variant
from jacbench.record.result import Result, Status
from jacbench.run.config import job_labels
from jacbench.run.identity import config_hash
from jacbench.run.job import JobSpec, make_job
from jacbench.run.provenance import device_name, hostname
from jacbench.run.provenance import provenance as where_made
from jacbench.timing.allocator import hold_steady
from jacbench.timing.measure import (
    FirstCall,
    Timing,
    first_call,
    measure_memory,
    time_steady_state,
    torch_threads,
)


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


# Messages from torch that mean "this strategy cannot apply here", not "something broke".
_NOT_APPLICABLE = [
    r"not implemented for '(Half|BFloat16|ComplexFloat|ComplexDouble|Float|Double)'",
    r"does not support forward AD|forward AD is not implemented|not implemented for forward",
    r"Trying to use forward AD with .* that does not support it",
    r"is not supported for complex",
    r"Low precision dtypes not supported",
    r"Batching rule not implemented",
    r"vmap: .* is not supported",
]


# torch's words for an operator it has no reverse-mode derivative of (unique, ...)
_NO_DERIVATIVE = re.compile(r"the derivative for '(?P<op>[\w.]+)' is not implemented")


def no_derivative(text: str) -> str:
    """torch's "the derivative for '_unique2' is not implemented" as a line naming the
    operator and what can still give its Jacobian ("" for any other text)."""
    found = _NO_DERIVATIVE.search(text)
    if found is None:
        return ""
    op = found["op"]
    name = op.strip("_").rstrip("0123456789") or op
    return (
        f"torch has no derivative of {name} ({op}), which f uses: no strategy by automatic "
        "differentiation (jacrev, sparse_jacrev, auto's tiers...) can give this Jacobian; "
        "finite differences can (sparse_fd, fd_central)"
    )


def classify(exc: BaseException) -> tuple[Status, str]:
    """(status, one-line message) for an exception raised inside a job.

    Expected outcomes (the strategy cannot apply to this model, dtype or device) are
    ``skipped``; everything else is ``failed``.
    """
    text = str(exc).strip()
    first_line = text.splitlines()[0] if text else ""
    if isinstance(exc, StrategySkip):
        return Status.SKIPPED, first_line
    if isinstance(exc, ConfigError):
        return Status.FAILED, first_line
    message = no_derivative(text) or f"{type(exc).__name__}: {first_line}".rstrip(": ")
    if isinstance(exc, NotImplementedError) or any(re.search(p, text) for p in _NOT_APPLICABLE):
        return Status.SKIPPED, message
    return Status.FAILED, message


@dataclass(frozen=True)
class Ending:
    """How the job ended (its status columns)."""

    status: Status
    error_message: str = ""


@dataclass(frozen=True)
class ProblemShape:
    wrt: str
    n_in: int
    n_out: int
    batch: int


@dataclass(frozen=True)
class ReferenceRecord:
    reference_method: str
    reference_uncertainty: float | None
    ref_norm: float | None
    reference_sample: int | None = None  # entries compared, where the reference is sampled


@dataclass(frozen=True)
class FirstCallRecord:
    first_call_s: float
    chosen_strategy: str
    n_colors: int | None
    pattern_density: float | None
    colors_lower_bound: int | None
    pattern_source: str
    decided_by: str
    tier: str
    built: str


@dataclass(frozen=True)
class Accuracy:
    max_abs_err: float
    rel_err: float
    err_eps: float
    tolerance: float
    within_tol: bool | None
    undecided_reason: str


@dataclass(frozen=True)
class StoredJacobian:
    jacobian: list[float]


@dataclass(frozen=True)
class Elapsed:
    measure_s: float


@dataclass(frozen=True)
class Untimed:
    """A job that asks about accuracy only (``timing=none``): no call was timed."""

    n_timed: int = 0


def _fields(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def combine(labels: Mapping[str, object], records: list[Any]) -> Result:
    """One Result from the job's labels and the records its stages returned."""
    fields: dict[str, Any] = dict(labels)
    for record in records:
        fields.update(_fields(record))
    return Result(**fields)


def provenance(job: JobSpec) -> dict[str, Any]:
    """What identifies the job and where it ran; known before anything runs. The allocator
    is held steady here, before the job runs, so that its time does not depend on the jobs
    before it in the process (jacbench.timing.allocator)."""
    made_by = where_made(job.strategy.setup.__module__, job.model, device_name(job.device))
    return {
        "wrt": str(job.model.get("wrt") or "input"),
        "seed": job.seed,
        "threads": job.timing.threads,
        "strategy_kind": job.strategy.kind.value,
        "strategy_mode": job.strategy.mode.value,
        "strategy_options": json.dumps(dataclasses.asdict(job.options), sort_keys=True),
        "variant": variant.of_options(job.strategy.name, job.options),
        "model_options": json.dumps(job.model, sort_keys=True, default=str),
        "config_hash": job.config_hash,
        "git_commit": git_commit(),
        "started_at": datetime.now(timezone.utc),
        "allocator": hold_steady(),
        **made_by.columns(),
    }


def failed_before_start(cfg: DictConfig, labels: dict[str, str], message: str) -> Result:
    """The row of a job whose config does not validate: what is known of it, and why."""
    seed = int(cfg.get("seed", 0))
    seed = seed if 0 <= seed < 2**63 else 0  # out of the int64 column: its error names it
    identity = {"config_hash": config_hash(cfg), "seed": seed, **machine_columns()}
    return combine({**labels, **identity}, [Ending(Status.FAILED, message.splitlines()[0])])


def machine_columns() -> dict[str, str]:
    """What a row records of where it ran even when its job never got to run."""
    return {
        "torch_version": torch.__version__,
        "jacbench_version": VERSION,
        "hostname": hostname(),
        "cpu_model": cpu_model(),
    }


def execute(cfg: DictConfig, registry: Registry, thread_cap: int | None = None) -> Result:
    """Validate the config and run the job; bad input becomes a ``failed`` Result.

    ``thread_cap`` bounds the torch threads when several jobs share the machine's cores."""
    labels = job_labels(cfg)
    try:
        job = make_job(cfg, registry)
    except ConfigError as exc:
        return failed_before_start(cfg, labels, str(exc))
    if thread_cap is not None and job.timing.threads > thread_cap:
        job = dataclasses.replace(job, timing=dataclasses.replace(job.timing, threads=thread_cap))
    return run_job(job, labels)


def run_job(job: JobSpec, labels: dict[str, str]) -> Result:
    known = {**labels, **provenance(job)}  # before running: started_at is the job's start
    records: list[Any] = []
    with torch_threads(job.timing.threads):
        try:
            _measure(job, records)
            check_interrupt()  # a Ctrl-C that a library swallowed stops the job all the same
            records.append(Ending(Status.OK))
        except Exception as exc:
            raise_if_interrupt(exc)  # a Ctrl-C that a library turned into an error is not one
            records.append(Ending(*classify(exc)))
    return combine(known, records)


@dataclass(frozen=True)
class OutputRecord:
    out_norm: float


def _output(problem: Problem) -> OutputRecord:
    with torch.no_grad():
        outputs = problem.f_many(problem.points)
    return OutputRecord(float(torch.linalg.norm(outputs.double())))


def _reference_record(reference: Reference) -> ReferenceRecord:
    norm = float(torch.linalg.norm(reference.jacobian))
    return ReferenceRecord(reference.method, reference.uncertainty, norm)


def sparse_answer(job: JobSpec, shape: tuple[int, int, int]) -> bool:
    """Whether the strategy's answer holds only nonzeros: a sparse output option, or ``auto``
    on a Jacobian too large to hold dense (it then chooses among sparse strategies only)."""
    if getattr(job.options, "output", "dense") != "dense":
        return True
    return job.strategy.mode is Mode.AUTO and sampled(*shape)


def _measure(job: JobSpec, records: list[Any]) -> None:
    """Run the stages in order, appending each one's record as soon as it exists (so a
    failure later keeps what was learned before it)."""
    problem = build_problem(job.model, job.dtype, job.device, job.seed)
    judged = judged_first_call(job, problem, records)
    time_and_memory(job, problem, judged.prep, records, judged.started)


@dataclass(frozen=True)
class Judged:
    """A strategy prepared, called once and its answer judged: ready to be timed."""

    prep: Any  # Prepared
    started: float  # perf_counter at the first call's start (the job's measure_s counts from it)


# The jobs of one problem that run one after another in this process (a sweep over
# strategies, in the basic launcher or a joblib worker) share its references.
LAST_PROBLEM = LastProblem()


def problem_key(job: JobSpec) -> str:
    """What builds a job's problem: its model's config, dtype, device and seed."""
    what = {"model": job.model, "dtype": str(job.dtype), "device": str(job.device)}
    return json.dumps({**what, "seed": job.seed}, sort_keys=True, default=str)


def judged_first_call(
    job: JobSpec, problem: Problem, records: list[Any], references: References | None = None
) -> Judged:
    """Every stage of a job before its timing: the problem's shape and output, the
    reference (``references``: shared by the jobs of one problem), the first call and the
    answer's verdict."""
    records.append(ProblemShape(problem.wrt, problem.n_in, problem.n_out, problem.batch))
    shape = (problem.n_out, problem.n_in, problem.batch)
    check_fits(*shape, job.dtype, job.device, dense_answer=not sparse_answer(job, shape))
    records.append(_output(problem))
    if sampled(*shape):
        return _judged_sampled(job, problem, records)
    references = references or LAST_PROBLEM.references(problem_key(job), problem)
    reference = references.for_mode(job.strategy.mode)
    records.append(_reference_record(reference))

    started = time.perf_counter()
    first = _first_call(job, problem, records)
    if first.prep.info.chosen_strategy:  # judge auto's answer independently of its choice
        reference = references.for_mode(first.prep.mode or job.strategy.mode)
        records.append(_reference_record(reference))
    # A sparse result (output=csr or scipy) is timed as it is, judged as dense.
    value = first.value
    if not isinstance(value, torch.Tensor):  # output=scipy
        value = torch.from_numpy(value.toarray())
    elif value.layout != torch.strided:  # output=csr
        value = value.to_dense()
    errors = _judge(job, value, reference.jacobian, reference, records)
    if errors.n_nonfinite:
        n = value.numel()
        raise RuntimeError(f"non-finite Jacobian: {errors.n_nonfinite} of {n} entries are nan/inf")
    if value.numel() <= job.jacobian_max_entries:
        records.append(StoredJacobian(value.detach().double().cpu().reshape(-1).tolist()))
    return Judged(first.prep, started)  # the first Jacobian is freed before timing


def _first_call(job: JobSpec, problem: Problem, records: list[Any]) -> FirstCall:
    """Prepare and call the strategy once, recording what it cost and decided."""
    first = first_call(
        lambda: job.strategy.prepare(problem, job.options).settled(), problem.x, job.device
    )
    records.append(FirstCallRecord(first.seconds, **dataclasses.asdict(first.prep.info)))
    if getattr(first.value, "requires_grad", False):
        raise RuntimeError("the strategy returned a Jacobian that requires grad (a live graph)")
    return first


def _judge(
    job: JobSpec, got: torch.Tensor, expected: torch.Tensor, reference: Any, records: list[Any]
) -> ErrorMetrics:
    """The answer's errors against ``expected``, and the verdict at the job's tolerance unless
    the reference (dense or sampled) says why it cannot decide one."""
    tol = tolerance(job.dtype, job.strategy.kind)
    undecided = reference.undecided(tol)
    errors = compare(got, expected, job.dtype, job.strategy.kind, undecided)
    records.append(
        Accuracy(
            errors.max_abs_err, errors.rel_err, errors.err_eps, tol, errors.within_tol, undecided
        )
    )
    return errors


def time_and_memory(
    job: JobSpec,
    problem: Problem,
    prep: Any,
    records: list[Any],
    started: float,
    timed: Timing | None = None,
) -> None:
    """The steady-state timing (``timed``: already taken, side by side with a rival), the
    peak memory and the job's measure_s."""
    if not job.timing.time:  # an accuracy question: what the row declares instead of times
        records.append(Untimed())
        records.append(timed_form(prep))
        records.append(Elapsed(time.perf_counter() - started))
        return
    records.append(timed or time_steady_state(prep, problem.x, job.timing))
    records.append(timed_form(prep))  # what was timed, read once the timing is done
    if job.timing.memory:
        records.append(measure_memory(prep, problem.x, job.device))
    records.append(Elapsed(time.perf_counter() - started))


@dataclass(frozen=True)
class TimedForm:
    """What the timed calls ran: for a tiered ``auto``, the tier it settled on, ``built``
    describing that tier's form with the tiers before it as history; else what the strategy
    declared."""

    tier: str
    built: str
    chosen_strategy: str


def timed_form(prep: Any) -> TimedForm:
    """What the timed calls ran: the prepared Jacobian's info once it was settled (a tiered
    auto's tier, and its form's description with the tiers before it)."""
    info = prep.info
    return TimedForm(info.tier, info.built, info.chosen_strategy)


def _judged_sampled(job: JobSpec, problem: Problem, records: list[Any]) -> Judged:
    """The stages of a job whose dense reference would not fit: the answer is judged on the
    sampled reference's columns and rows (``reference_sample`` entries), never densified."""
    sample = sampled_reference(problem)
    records.append(
        ReferenceRecord(SAMPLED_METHOD, sample.uncertainty, None, reference_sample=sample.entries)
    )
    started = time.perf_counter()
    first = _first_call(job, problem, records)
    got = sampled_entries(first.value, sample, (problem.n_out, problem.n_in))
    errors = _judge(job, got, sample.expected(), sample, records)
    if errors.n_nonfinite:
        raise RuntimeError(f"non-finite Jacobian: {errors.n_nonfinite} sampled entries are nan/inf")
    return Judged(first.prep, started)
