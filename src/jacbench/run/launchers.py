"""Which kind of launcher a sweep runs under, told once from ``hydra.launcher._target_``:
the thread cap, the ``n_jobs`` check, the watch for orphaned workers and the report of
pending SLURM tasks all ask here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jacbench.core.enums import LauncherKind

# Launcher classes by name (Hydra's basic one, hydra-joblib-launcher's, hydra-submitit-
# launcher's local one); a subclass elsewhere is told by its own name.
KINDS = {
    "BasicLauncher": LauncherKind.IN_PROCESS,
    "JoblibLauncher": LauncherKind.JOBLIB,
    "LocalLauncher": LauncherKind.LOCAL,
}


def launcher_kind(launcher: Mapping[str, Any] | None) -> LauncherKind:
    """The kind of Hydra's ``hydra.launcher`` node."""
    target = str((launcher or {}).get("_target_", ""))
    return KINDS.get(target.rpartition(".")[2], LauncherKind.OTHER)
