"""The small closed vocabularies of jacbench: how a job ended, what kind of answer a strategy
gives, and how it computes it. A leaf module without torch, so readers of results (reports,
recorders) use the same names as the code that measured them."""

from __future__ import annotations

from enum import Enum


class _Named(str, Enum):
    """A str Enum that is interchangeable with its value: printed as "ok" (not "Status.OK")
    and hashed as the string, so dicts keyed by members answer lookups by values read back
    from parquet."""

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__


class Status(_Named):
    """How a job ended. ``skipped``: the strategy cannot apply here (a settled outcome);
    ``failed``: something went wrong (worth another try)."""

    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


class Kind(_Named):
    """How the answer relates to the true Jacobian; sets the tolerance of the verdict."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    NEGATIVE_CONTROL = "negative_control"  # wrong by design, kept to show a pitfall


class Mode(_Named):
    REVERSE = "reverse"
    FORWARD = "forward"
    NUMERIC = "numeric"
    ANALYTIC = "analytic"
    AUTO = "auto"  # picks another strategy; the result records which (chosen_strategy)


class LauncherKind(_Named):
    """Where a sweep's Hydra launcher runs the jobs, as far as jacbench must know: whether
    they share this machine's cores, and whether they outlive the sweep's process."""

    IN_PROCESS = "in_process"  # Hydra's basic launcher: one job after another, in the sweep
    JOBLIB = "joblib"  # loky worker processes on this machine, n_jobs at a time
    LOCAL = "local"  # submitit's local executor: one process per job on this machine
    OTHER = "other"  # SLURM and any launcher jacbench does not know: elsewhere

    @property
    def beside_sweep(self) -> bool:
        """Jobs run in processes the sweep started on its own machine."""
        return self in (LauncherKind.JOBLIB, LauncherKind.LOCAL)
