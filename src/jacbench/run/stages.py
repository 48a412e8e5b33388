"""A job's stages in order: build, reference, first call, judging, timing. Each reads the
Job and what the stage before returned, and appends its record (fields are ``Result``
columns) as soon as it exists: a failure later keeps what was learned before it."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

import torch

from jacbench.benchmark.judging import compare
from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import (
    SAMPLED_METHOD,
    LastProblem,
    Reference,
    References,
    Sample,
    sampled_entries,
    sampled_reference,
)
from jacbench.core.memory_budget import check_fits, sampled
from jacbench.core.prepared import Prepared
from jacbench.core.problem import Problem
from jacbench.core.strategy import Mode
from jacbench.run.job import Job
from jacbench.timing.measure import FirstCall, Timing, first_call, measure_memory, time_steady_state


@dataclass(frozen=True)
class ProblemShape:
    wrt: str
    n_in: int
    n_out: int
    batch: int


@dataclass(frozen=True)
class OutputRecord:
    out_norm: float


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


@dataclass(frozen=True)
class TimedForm:
    """What the timed calls ran (a tiered ``auto``: the tier it settled on)."""

    tier: str
    built: str
    chosen_strategy: str


@dataclass(frozen=True)
class Judged:
    """A strategy prepared, called once and its answer judged: ready to be timed."""

    prep: Prepared
    started: float  # perf_counter at the first call's start (the job's measure_s counts from it)


def build(job: Job, records: list[Any], problem: Problem | None = None) -> Problem:
    """The job's problem (``problem``: shared by a pair), recorded and checked to fit in memory."""
    if problem is None:
        problem = build_problem(job.model, job.dtype, job.device, job.seed)
    records.append(ProblemShape(problem.wrt, problem.n_in, problem.n_out, problem.batch))
    shape = (problem.n_out, problem.n_in, problem.batch)
    sparse = getattr(job.options, "output", "dense") != "dense" or (
        job.strategy.mode is Mode.AUTO and sampled(*shape)
    )  # ``auto`` on a Jacobian too large to hold dense chooses among sparse strategies only
    check_fits(*shape, job.dtype, job.device, dense_answer=not sparse)
    with torch.no_grad():
        outputs = problem.f_many(problem.points)
    records.append(OutputRecord(float(torch.linalg.norm(outputs.double()))))
    return problem


LAST_PROBLEM = LastProblem()  # shared by the jobs of one problem run in a row here


def problem_key(job: Job) -> str:
    """What builds a job's problem: its model's config, dtype, device and seed."""
    what = {"model": job.model, "dtype": str(job.dtype), "device": str(job.device)}
    return json.dumps({**what, "seed": job.seed}, sort_keys=True, default=str)


@dataclass(frozen=True)
class Against:
    """The problem's references (None where sampled) and the answer's reference."""

    references: References | None
    reference: Reference | Sample


def reference(
    job: Job, problem: Problem, records: list[Any], references: References | None = None
) -> Against:
    """The reference (``references``: shared by a pair), sampled where too large to hold dense."""
    if sampled(problem.n_out, problem.n_in, problem.batch):
        sample = sampled_reference(problem)
        entries = sample.entries
        records.append(ReferenceRecord(SAMPLED_METHOD, sample.uncertainty, None, entries))
        return Against(None, sample)
    key = problem_key(job)
    references = references or LAST_PROBLEM.references(key, problem)
    resolved = references.for_mode(job.strategy.mode)
    norm = float(torch.linalg.norm(resolved.jacobian))
    records.append(ReferenceRecord(resolved.method, resolved.uncertainty, norm))
    return Against(references, resolved)


@dataclass(frozen=True)
class Called:
    first: FirstCall
    started: float  # perf_counter at the first call's start (the job's measure_s counts from it)


def call_once(job: Job, problem: Problem, records: list[Any]) -> Called:
    """Prepare and call the strategy once, recording what it cost and decided."""
    started = time.perf_counter()
    first = first_call(
        lambda: job.strategy.prepare(problem, job.options).settled(), problem.x, job.device
    )
    records.append(FirstCallRecord(first.seconds, **dataclasses.asdict(first.prep.info)))
    if getattr(first.value, "requires_grad", False):
        raise RuntimeError("the strategy returned a Jacobian that requires grad (a live graph)")
    return Called(first, started)


def judge(
    job: Job, problem: Problem, called: Called, against: Against, records: list[Any]
) -> Judged:
    """The answer's errors, and the verdict at the job's tolerance unless the reference says
    why it cannot decide one; a sparse answer is judged as dense, or on the sampled entries."""
    first, known, reference = called.first, against.references, against.reference
    value = first.value
    if isinstance(reference, Sample):
        value = sampled_entries(value, reference, (problem.n_out, problem.n_in))
    elif not isinstance(value, torch.Tensor):  # output=scipy
        value = torch.from_numpy(value.toarray())
    elif value.layout != torch.strided:  # output=csr
        value = value.to_dense()
    if known is not None and first.prep.info.chosen_strategy:  # auto: not of its choice's mode
        reference = known.for_mode(first.prep.mode or job.strategy.mode)
        norm = float(torch.linalg.norm(reference.jacobian))
        records.append(ReferenceRecord(reference.method, reference.uncertainty, norm))
    expected = reference.expected() if isinstance(reference, Sample) else reference.jacobian
    undecided = reference.undecided(job.tolerance)
    errors = compare(value, expected, job.dtype, job.strategy.kind, undecided)
    accuracy = (errors.max_abs_err, errors.rel_err, errors.err_eps, job.tolerance)
    records.append(Accuracy(*accuracy, errors.within_tol, undecided))
    if errors.n_nonfinite:
        of = "sampled entries" if known is None else f"of {value.numel()} entries"
        raise RuntimeError(f"non-finite Jacobian: {errors.n_nonfinite} {of} are nan/inf")
    if known is not None and value.numel() <= job.jacobian_max_entries:
        records.append(StoredJacobian(value.detach().double().cpu().reshape(-1).tolist()))
    return Judged(first.prep, called.started)  # the first Jacobian is freed before timing


def time_and_memory(
    job: Job, problem: Problem, judged: Judged, records: list[Any], timed: Timing | None = None
) -> None:
    """The steady-state timing (``timed``: taken side by side with a rival), the peak memory
    and the job's measure_s; ``timing=none`` records no times."""
    prep = judged.prep
    if not job.timing.time:
        records.append(Untimed())
    else:
        records.append(timed or time_steady_state(prep, problem.x, job.timing))
    info = prep.info  # what was timed, read once the timing is done (a tiered auto's tier)
    records.append(TimedForm(info.tier, info.built, info.chosen_strategy))
    if job.timing.time and job.timing.memory:
        records.append(measure_memory(prep, problem.x, job.device))
    records.append(Elapsed(time.perf_counter() - judged.started))
