"""A sweep's state files in its folder: how its jobs find it and say they are done, under
every launcher (in process, joblib, submitit)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from jacbench.record.atomic import write_atomic
from jacbench.run.pair import Pair

STATE_DIR = ".jacbench"
UNWRITTEN = "unwritten"  # rows the results folder could not take, beside the sweep's state
TRACKING_DOWN = "tracking_down"  # why MLflow was given up for the rest of the sweep
SWEEP_ENV = "JACBENCH_SWEEP_ID"  # in every job's environment: the sweep it belongs to


def _state_folder(sweep_dir: str | Path, sweep_id: str) -> Path:
    return Path(sweep_dir) / STATE_DIR / sweep_id


def results_dir(cfg: DictConfig, launch_dir: Path) -> Path:
    """The job's results folder (``results_dir``, relative to the launch folder)."""
    path = Path(cfg.results_dir)
    return path if path.is_absolute() else launch_dir / path


def new_sweep_id() -> str:
    """Unique even for sweeps started in the same second: the time, then random digits."""
    return f"{datetime.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


@dataclass
class SweepState:
    sweep_id: str
    sweep_dir: str
    total: int
    overrides: list[str]
    tracking: dict[str, Any] | None  # Tracking as a dict; None when MLflow is off
    analysis: str | None = None  # experiments: "module:function" answering from the rows
    report: bool = True  # write the report into the sweep folder and the parent run
    # the second round (``run.pair.second_round`` reads it; true / false in older states)
    side_by_side: str | bool = "best_two"
    parent_run_id: str = ""
    sweep_pid: int = 0  # the launching process: its worker processes end when it is gone
    host: str = ""  # where that process runs, and since which boot: whether it still runs
    boot: str = ""
    results_dir: str = ""  # where its jobs claim and record (claims released if it is stopped)
    # the sweep's position of each job sent out, in the order Hydra numbers them
    launched: list[int] = dataclasses.field(default_factory=list)
    finished: bool = False
    exit_code: int = 0
    parent_closed: bool = False  # False at the end: closed later (jacbench.run.sweep.repair)

    @property
    def folder(self) -> Path:
        return _state_folder(self.sweep_dir, self.sweep_id)

    def save(self) -> None:
        write_atomic(self.folder / "sweep.json", json.dumps(dataclasses.asdict(self), indent=1))

    @classmethod
    def load(cls, sweep_dir: Path, sweep_id: str) -> SweepState | None:
        path = _state_folder(sweep_dir, sweep_id) / "sweep.json"
        return cls(**json.loads(path.read_text())) if sweep_id and path.is_file() else None

    def position(self, hydra_num: int) -> int:
        """The sweep's number of the job Hydra numbered ``hydra_num``."""
        return self.launched[hydra_num] if hydra_num < len(self.launched) else hydra_num

    def mark_job(self, num: int, record: dict[str, Any]) -> int:
        """Record that job ``num`` is done; returns how many jobs are done."""
        jobs = self.folder / "jobs"
        write_atomic(jobs / f"{num}.json", json.dumps(record))
        return len(list(jobs.glob("*.json")))

    @property
    def unclosed_parent(self) -> Path:
        """What the parent run shows, kept here while it cannot be closed."""
        return self.folder / "parent.json"

    def tracking_down(self) -> str:
        """Why a job of this sweep gave up on MLflow ("" while it works)."""
        try:
            return (self.folder / TRACKING_DOWN).read_text()
        except OSError:
            return ""

    def give_up_tracking(self, why: str) -> None:
        with contextlib.suppress(OSError):  # then the next job tries, and says so, again
            write_atomic(self.folder / TRACKING_DOWN, why)

    def save_pair(self, num: int, pair: Pair) -> None:
        """Job ``num`` of the sweep re-times ``pair`` side by side."""
        write_atomic(self.folder / "pairs" / f"{num}.json", pair.to_json())

    def pair(self, num: int) -> Pair | None:
        """The pair job ``num`` re-times (None: a first-round job)."""
        try:
            return Pair.from_json((self.folder / "pairs" / f"{num}.json").read_text())
        except FileNotFoundError:
            return None

    def job_records(self) -> list[dict[str, Any]]:
        jobs = self.folder / "jobs"
        return [json.loads(p.read_text()) for p in sorted(jobs.glob("*.json"))]


def current_sweep() -> SweepState | None:
    """Inside a job of a multirun: its sweep (None if the sweep was not opened)."""
    hydra_cfg = HydraConfig.get()
    sweep_dir = (Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir).resolve()
    return SweepState.load(sweep_dir, os.environ.get(SWEEP_ENV, ""))


def job_record(
    num: int,
    result_files: list[Path],
    status: str,
    resumed: bool,
    untracked: bool = False,
    stale: str = "",
) -> dict[str, Any]:
    """What the sweep notes of a job once done: its rows, whether reused, what changed since."""
    return {
        "job_num": num,
        "result_files": [str(path) for path in result_files],
        "status": status,
        "resumed": resumed,
        "untracked": untracked,  # tracking was on and failed: the sweep exits 1
        "stale": stale,
        "finished_at": datetime.now(timezone.utc).isoformat(),
        "pid": os.getpid(),
    }


def record_files(record: dict[str, Any]) -> list[Path]:
    """The rows a job's record names (an earlier jacbench's names one: ``result_file``)."""
    files = record.get("result_files")
    return [Path(f) for f in (files if files is not None else [record["result_file"]])]
