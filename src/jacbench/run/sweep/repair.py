"""MLflow parent runs that their sweep left RUNNING (tracking down at its end, or its
process killed), closed afterwards by ``python -m jacbench.sync`` and by the next sweep in
the same experiment: its jobs without a run are logged under it, its files attached, and it
ends as the sweep did. A sweep that may still run, or whose folder cannot be read from
here, is left alone.
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

from jacbench.record.mlflow_run import ParentOutcome, Tracking, connect, finish_parent_run
from jacbench.record.run_ids import run_ids
from jacbench.record.sync import sync_file
from jacbench.run.claims import boot_id
from jacbench.run.orphans import pid_alive
from jacbench.run.sweep.state import STATE_DIR, SweepState, record_files

RUNNING_SWEEPS = "tags.`jacbench.role` = 'sweep' and attributes.status = 'RUNNING'"


def left_open(tracking: Tracking) -> list[tuple[str, str]]:
    """(run id, sweep folder) of the experiment's sweep runs still RUNNING."""
    client = connect(tracking).client
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], RUNNING_SWEEPS, max_results=1000)
    return [(run.info.run_id, run.data.params.get("sweep_dir", "")) for run in runs]


def state_of(sweep_dir: str, run_id: str) -> SweepState | None:
    """The state of the sweep in ``sweep_dir`` whose parent run is ``run_id``."""
    if not sweep_dir:
        return None
    for path in Path(sweep_dir, STATE_DIR).glob("*/sweep.json"):
        with contextlib.suppress(OSError, ValueError, TypeError):
            state = SweepState.load(Path(sweep_dir), path.parent.name)
            if state is not None and state.parent_run_id == run_id:
                return state
    return None


def why_over(state: SweepState) -> str | None:
    """Why the sweep is over although its run is open ("" when it ended as usual); None
    while it may still run."""
    if state.finished:
        return ""
    if not state.boot or state.host != socket.gethostname():
        return None  # another machine's process, or an older jacbench's: cannot tell
    if state.boot != boot_id():
        return "the machine restarted since it ran"
    if pid_alive(state.sweep_pid) is False:
        return f"its process {state.sweep_pid} ended without closing it (killed?)"
    return None


def unfinished_outcome(state: SweepState, why: str) -> ParentOutcome:
    """What a sweep that never reached its end shows: its counts and the files it left."""
    records = state.job_records()
    metrics = {
        "n_jobs": float(state.total),
        "n_resumed": float(sum(bool(r.get("resumed")) for r in records)),
        "n_missing": float(state.total - len(records)),
    }
    files = [Path(state.sweep_dir) / name for name in ("multirun.yaml", "summary.parquet")]
    return ParentOutcome(
        metrics,
        artifacts=[f for f in files if f.exists()],
        killed=True,
        reason=f"the sweep did not reach its end ({why}): run the same sweep again to resume",
    )


def close_left_open(tracking: Tracking, skip: str = "") -> list[str]:
    """Close every parent run of ``tracking``'s experiment that its sweep left open (but
    ``skip``, a sweep opening now); returns one line per run closed."""
    closed = []
    for run_id, sweep_dir in left_open(tracking):
        state = state_of(sweep_dir, run_id) if run_id != skip else None
        why = why_over(state) if state is not None else None
        if state is None or why is None:
            continue
        for record in state.job_records():
            for row in record_files(record) if record.get("untracked") else []:
                with contextlib.suppress(Exception):  # its own row: sync names it
                    sync_file(row, tracking, run_ids(row.parent), run_id)
        try:
            outcome = ParentOutcome.from_json(state.unclosed_parent.read_text())
        except (OSError, ValueError, TypeError, KeyError):
            outcome = unfinished_outcome(state, why or "its outcome was not kept")
        finish_parent_run(tracking, run_id, outcome)
        state.parent_closed = True
        with contextlib.suppress(OSError):
            state.save()
        closed.append(
            f"closed the MLflow parent run {run_id} of the sweep in {sweep_dir}, left open as "
            + (why or "tracking was down at its end")
        )
    return closed
