"""One job: config -> Job -> build -> reference -> first call -> judge -> time -> Result.

The row combines the job's columns with each stage's record. A job never raises for its own
failure: the exception becomes a ``failed`` or ``skipped`` Result (``classify``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from omegaconf import DictConfig

from jacbench.core.errors import ConfigError, StrategySkip
from jacbench.core.interrupt import check as check_interrupt
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.prepared import known_cause
from jacbench.core.registry import Registry
from jacbench.record.result import Result, Status
from jacbench.run.identity import Identity, identify
from jacbench.run.job import make_job
from jacbench.run.provenance import machine_columns
from jacbench.run.stages import build, call_once, judge, reference, time_and_memory
from jacbench.timing.allocator import hold_steady
from jacbench.timing.measure import torch_threads

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


def classify(exc: Exception) -> tuple[Status, str]:
    """(status, one-line message) for an exception raised inside a job: ``skipped`` where
    the strategy cannot apply to this model, dtype or device, else ``failed``; torch's errors
    of a known cause are said as the library says them (``core.prepared.known_cause``)."""
    text = str(exc).strip()
    first_line = text.splitlines()[0] if text else ""
    if isinstance(exc, StrategySkip):
        return Status.SKIPPED, first_line
    if isinstance(exc, ConfigError):
        return Status.FAILED, first_line
    known = known_cause(exc)
    message = str(known) if known else f"{type(exc).__name__}: {first_line}".rstrip(": ")
    if isinstance(exc, NotImplementedError) or any(re.search(p, text) for p in _NOT_APPLICABLE):
        return Status.SKIPPED, message
    return Status.FAILED, message


@dataclass(frozen=True)
class Ending:
    """How the job ended (its status columns)."""

    status: Status
    error_message: str = ""


def combine(known: Mapping[str, object], records: list[Any]) -> Result:
    """One Result from what was known before the job ran and the records its stages returned."""
    fields: dict[str, Any] = dict(known)
    for record in records:
        fields.update({f.name: getattr(record, f.name) for f in dataclasses.fields(record)})
    return Result(**fields)


def refused(identity: Identity, message: str) -> Result:
    """The row of a job whose config does not validate: what is known of it, and why."""
    known = {**identity.labels, "config_hash": identity.config_hash, "seed": identity.seed}
    return combine({**known, **machine_columns()}, [Ending(Status.FAILED, message.splitlines()[0])])


def started() -> dict[str, Any]:
    """The columns of a job's start: its time, and the allocator held steady."""
    return {"started_at": datetime.now(timezone.utc), "allocator": hold_steady()}


def execute(cfg: DictConfig, registry: Registry, thread_cap: int | None = None) -> Result:
    """Make the job and run its stages; bad input becomes a ``failed`` Result."""

    identity = identify(cfg)
    try:
        job = make_job(cfg, registry, identity, thread_cap)
    except ConfigError as exc:
        return refused(identity, str(exc))
    known = {**identity.labels, **job.columns, **started()}
    records: list[Any] = []
    with torch_threads(job.timing.threads):
        try:
            problem = build(job, records)
            against = reference(job, problem, records)
            called = call_once(job, problem, records)
            judged = judge(job, problem, called, against, records)
            time_and_memory(job, problem, judged, records)
            check_interrupt()  # a Ctrl-C that a library swallowed stops the job all the same
            records.append(Ending(Status.OK))
        except Exception as exc:
            raise_if_interrupt(exc)  # a Ctrl-C that a library turned into an error is not one
            records.append(Ending(*classify(exc)))
    return combine(known, records)
