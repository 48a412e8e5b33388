"""Which kind of launcher a sweep runs under, told from ``hydra.launcher._target_``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jacbench.core.enums import Named


class LauncherKind(Named):
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


# Launcher classes by name (a subclass elsewhere is told by its own name)
KINDS = {
    "BasicLauncher": LauncherKind.IN_PROCESS,
    "JoblibLauncher": LauncherKind.JOBLIB,
    "LocalLauncher": LauncherKind.LOCAL,
}


def launcher_kind(launcher: Mapping[str, Any] | None) -> LauncherKind:
    """The kind of Hydra's ``hydra.launcher`` node."""
    target = str((launcher or {}).get("_target_", ""))
    return KINDS.get(target.rpartition(".")[2], LauncherKind.OTHER)
