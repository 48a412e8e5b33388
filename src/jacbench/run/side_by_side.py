"""A preset's side-by-side job: its problem's contested pair timed again, interleaved.

A machine's load changes between a sweep's jobs, so before a preset names a winner its sweep
adds one job per problem (``jacbench.run.sweep.retiming``) that prepares, calls and judges
the two as any job does, times them in interleaved blocks
(``jacbench.timing.measure.side_by_side``) and records one row for each: ``round``
side_by_side, one ``pair_id``. The analysis reads these rows as the newest of their
strategies.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from typing import Any

from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import References
from jacbench.core.errors import ConfigError
from jacbench.core.interrupt import check as check_interrupt
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.memory_budget import sampled
from jacbench.core.registry import Registry
from jacbench.record.result import Result, Round, Status
from jacbench.run.identity import identify
from jacbench.run.job import Job, make_job
from jacbench.run.pair import Pair
from jacbench.run.runner import Ending, classify, combine, refused, started
from jacbench.run.stages import build, call_once, judge, reference, time_and_memory
from jacbench.timing.measure import side_by_side, torch_threads

# What both of a pair must share: they are timed on one problem.
SHARED = ("model", "dtype", "device", "seed")


def run_pair(pair: Pair, registry: Registry, thread_cap: int | None = None) -> list[Result]:
    """The pair's two rows; a failure of either is recorded in both, never raised."""
    configs = pair.contestant_configs()
    identities = [identify(cfg) for cfg in configs]
    marks: dict[str, Any] = {"round": Round.SIDE_BY_SIDE, "pair_id": uuid.uuid4().hex}
    try:
        jobs = [make_job(cfg, registry, i) for cfg, i in zip(configs, identities, strict=True)]
        apart = [key for key in SHARED if getattr(jobs[0], key) != getattr(jobs[1], key)]
        if apart:
            raise ConfigError(f"a side-by-side pair must share its problem; {apart} differ")
    except ConfigError as exc:
        return [dataclasses.replace(refused(i, str(exc)), **marks) for i in identities]
    threads = min(jobs[0].timing.threads, thread_cap or jobs[0].timing.threads)
    jobs = [job.with_threads(threads) for job in jobs]
    known = [{**job.identity.labels, **job.columns, **started(), **marks} for job in jobs]
    known[1]["started_at"] = known[0]["started_at"]  # both rows: the pair's start
    records: list[list[Any]] = [[], []]
    stage = [0]  # whose stage runs: a failure is its own; the rival's row says so
    with torch_threads(threads):
        try:
            _measure_pair(jobs, records, stage)
            endings = [Ending(Status.OK), Ending(Status.OK)]
        except Exception as exc:
            raise_if_interrupt(exc)
            endings = _endings(jobs, stage[0], *classify(exc))
    return [combine(k, [*r, ending]) for k, r, ending in zip(known, records, endings, strict=True)]


def _endings(jobs: list[Job], at: int, status: Status, message: str) -> list[Ending]:
    """The failed contestant's own ending; its rival's says it was not timed side by side
    (``at`` -1: the interleaved timing itself failed, both say why)."""
    if at < 0:
        return [Ending(status, message)] * 2
    rival = f"not timed side by side: {jobs[at].strategy.name} failed ({message})"
    return [Ending(status, message) if i == at else Ending(Status.FAILED, rival) for i in (0, 1)]


def _measure_pair(jobs: list[Job], records: list[list[Any]], stage: list[int]) -> None:
    """Each contestant prepared, called and judged on the one problem (its reference shared),
    then both timed interleaved, then each one's memory."""
    first = jobs[0]
    problem = build_problem(first.model, first.dtype, first.device, first.seed)
    shape = (problem.n_out, problem.n_in, problem.batch)
    shared = None if sampled(*shape) else References(problem)
    judged = []
    for index, job in enumerate(jobs):
        stage[0] = index
        build(job, records[index], problem)
        against = reference(job, problem, records[index], shared)
        called = call_once(job, problem, records[index])
        judged.append(judge(job, problem, called, against, records[index]))
        check_interrupt()
    stage[0] = -1
    timed = side_by_side({i: functools.partial(j.prep, problem.x) for i, j in enumerate(judged)})
    for index, job in enumerate(jobs):
        stage[0] = index
        time_and_memory(job, problem, judged[index], records[index], timed[index])
