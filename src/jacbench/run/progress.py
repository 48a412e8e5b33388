"""What has happened to the row of the job in progress: what a command stopped by Ctrl-C or
a signal says it kept, so that it never says "not recorded" of a row that is on disk."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class Stage(enum.Enum):
    IDLE = "idle"  # no job measured in this process yet (or between jobs)
    MEASURING = "measuring"  # nothing of the job is on disk
    WRITTEN = "written"  # its row is on disk; its MLflow run is being logged
    RECORDED = "recorded"  # row and run (where tracking is on) both done


@dataclass
class JobProgress:
    """One per command, passed to the jobs it runs in its own process."""

    stage: Stage = Stage.IDLE
    row: Path | None = None
    in_sweep: bool = False

    def between(self) -> None:
        """No job of this process under way: a signal then never speaks of the job before it."""
        self.stage, self.row = Stage.IDLE, None

    def measuring(self) -> None:
        self.stage, self.row = Stage.MEASURING, None

    def written(self, row: Path | None) -> None:
        """The row is at ``row`` (None: not on disk, printed in full on stderr)."""
        self.stage, self.row = Stage.WRITTEN, row

    def recorded(self) -> None:
        self.stage = Stage.RECORDED

    def line(self) -> str:
        """What was kept, for ``jacbench: interrupted (...); <line>``."""
        job = {
            Stage.IDLE: "",
            Stage.MEASURING: "the job in progress was not recorded",
            Stage.WRITTEN: (
                f"the job's row is written ({self.row}) but has no MLflow run: "
                "python -m jacbench.sync logs it"
                if self.row is not None
                else "the job's row could not be written (printed above in full)"
            ),
            Stage.RECORDED: "the job is recorded",
        }[self.stage]
        if not self.in_sweep:
            return job or "nothing was measured"
        kept = "rows recorded before it are kept" if job else "rows recorded so far are kept"
        return f"{job}{', ' if job else ''}{kept} (run the same sweep again to resume)"
