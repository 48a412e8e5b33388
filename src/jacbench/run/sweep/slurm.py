"""What SLURM says of a sweep's tasks, through ``squeue``: which it still holds and why a
task pends. The tasks are found by the ids hydra-submitit-launcher names their folders by."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

_TASK = re.compile(r"^(\d+)(?:_\d+)?$")  # <job id> or <array job id>_<index>


def submitit_folder(launcher: DictConfig) -> Path | None:
    """The folder holding one submitit folder per task (None: not a submitit launcher)."""
    template = launcher.get("submitit_folder") if launcher is not None else None
    return Path(str(template)).parent if template and "%j" in str(template) else None


def submitted(folder: Path | None) -> list[str]:
    """The SLURM job ids (arrays) that the sweep's tasks belong to, as submitted so far."""
    if folder is None or not folder.is_dir():
        return []
    return sorted({m.group(1) for p in folder.iterdir() if (m := _TASK.match(p.name))})


def _squeue(job_ids: Sequence[str], *options: str) -> list[str]:
    if not job_ids or shutil.which("squeue") is None:
        return []
    out = subprocess.run(
        ["squeue", "-h", *options, "-j", ",".join(job_ids)],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


def held(job_ids: Sequence[str]) -> bool:
    """Whether SLURM still queues or runs any task of ``job_ids``."""
    return bool(_squeue(job_ids, "-o", "%i"))


def pending_reasons(job_ids: Sequence[str]) -> list[str]:
    """``<task id> pending (<reason>)`` for each task of ``job_ids`` that SLURM holds back."""
    lines = _squeue(job_ids, "-t", "PD", "-o", "%i %r")
    return [f"{task} pending ({reason})" for task, _, reason in (ln.partition(" ") for ln in lines)]
