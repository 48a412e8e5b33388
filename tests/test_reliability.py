"""Faults that must not lose or block measurements: unreadable result files, file modes on
shared folders, timing settings that would hang a job."""

from __future__ import annotations

import contextlib
import math
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hydra.experimental.callback import Callback

from helpers.results import make_result
from helpers.tracking import half_made_db, mlflow_runs
from jacbench.core.errors import ConfigError
from jacbench.record.mlflow_db import SCRATCH, create_atomically
from jacbench.record.parquet import (
    QUARANTINE,
    done_rows,
    read_results,
    result_filename,
    write_result,
)
from jacbench.timing.config import TimingConfig


def test_result_files_honour_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_result(make_result(), tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # mkstemp alone gives 0600


def test_a_truncated_file_blocks_neither_the_job_nor_the_report(tmp_path: Path, capsys) -> None:
    good = write_result(make_result(), tmp_path)
    other = make_result(config_hash="deadbeef0000")
    bad = tmp_path / result_filename(other)
    bad.write_bytes(good.read_bytes()[:50])  # truncated, named with a job's hash
    assert list(done_rows(tmp_path, "deadbeef0000")) == []  # the job runs again
    assert (tmp_path / QUARANTINE / bad.name).exists() and not bad.exists()  # moved, not deleted
    assert str(bad) in capsys.readouterr().err
    assert len(read_results(tmp_path)) == 1


def test_a_type_conflicting_file_is_skipped_and_named(tmp_path: Path, capsys) -> None:
    write_result(make_result(), tmp_path)
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"n_in": ["many"], "status": [3]}), foreign)
    rows = read_results(tmp_path)
    assert len(rows) == 1
    assert "foreign.parquet" in capsys.readouterr().err
    assert (tmp_path / QUARANTINE / "foreign.parquet").exists()


@pytest.mark.parametrize(
    "setting",
    [{"min_run_time": math.inf}, {"min_run_time": 1e9}, {"warmup": 10**9}, {"threads": 10**6}],
)
def test_every_timing_setting_is_bounded(setting: dict) -> None:
    with pytest.raises(ConfigError, match=f"timing.{next(iter(setting))} must be"):
        TimingConfig(**setting)


@pytest.mark.parametrize("sweep", [[], ["-m", "strategy=jacrev,jacfwd"]])
def test_an_unwritable_results_dir_is_refused_before_measuring(launch, tmp_path, sweep):
    (tmp_path / "afile").write_text("x")
    code, lines, printed = launch(*sweep, "results_dir=afile", "report=false")
    assert code == 1 and "results_dir=afile: cannot write result files there" in lines[0]
    assert "Traceback" not in printed
    assert "jacrev" not in printed  # nothing was measured
    assert not list(tmp_path.rglob("*.parquet"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_results_dir_is_refused_before_measuring(launch, tmp_path):
    (tmp_path / "ro").mkdir(mode=0o555)
    code, lines, _ = launch("results_dir=ro")
    assert code == 1 and "results_dir=ro: cannot write result files there" in lines[0]


@pytest.fixture
def disk_full():
    """A full disk, made real by a file-size limit: writing a result file fails (EFBIG)."""

    @contextlib.contextmanager
    def limited():
        old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, hard))  # Hydra fits, a row not
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, old_handler)

    return limited


def test_a_result_that_cannot_be_written_is_printed_and_says_so(launch, tmp_path, disk_full):
    with disk_full():
        code, lines, printed = launch("strategy=jacrev")
    assert code == 1, printed
    assert "jacrev" in printed  # the measurement is on screen
    assert len(lines) == 1 and "was NOT written to" in lines[0], printed
    assert "nothing was written there" in lines[0] and "Traceback" not in printed
    assert not list((tmp_path / "results").glob("*.parquet"))


def test_tracking_down_and_disk_full_never_claims_a_written_row(launch, tmp_path, disk_full):
    half_made_db(tmp_path / "mlflow.db")  # tracking down: MLflow cannot open it
    with disk_full():
        code, lines, printed = launch("strategy=jacrev", mlflow=True)
    assert code == 1 and "MLflow tracking failed" in printed, printed
    assert "row is written" not in printed and "row is still written" not in printed
    assert len(lines) == 2 and "was NOT written to" in lines[0], printed


class FillDisk(Callback):
    """Fills the sweep folder's file system once the last job ran, before the summary."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if config.hydra.job.num != 1:  # the sweep's second and last job
            return
        with open(self.folder / "filler", "wb") as handle:
            try:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
            except OSError:
                pass


@pytest.fixture
def full_disk(tmp_path: Path):
    """A real 2 MiB tmpfs for the sweep folder (root only), unmounted afterwards."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.parametrize("fault", ["disk_full", "summary_path_taken"])
def test_a_sweep_whose_summary_cannot_be_written_closes_its_parent_run(
    fault, launch, tmp_path, request
):
    """The summary write fails for real: the parent run ends FAILED with the reason, the
    user gets one line, the jobs' rows are kept."""
    if fault == "disk_full":
        sweep_dir = request.getfixturevalue("full_disk")
        extra = [
            f"+hydra.callbacks.fill._target_={__name__}.FillDisk",
            f"+hydra.callbacks.fill.folder={sweep_dir}",
        ]
    else:
        sweep_dir = tmp_path / "sw"
        (sweep_dir / "summary.parquet").mkdir(parents=True)  # a folder where the file goes
        extra = []
    code, lines, printed = launch(
        "-m",
        "strategy=jacrev,jacfwd",
        "report=false",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
        mlflow=True,
    )
    assert code == 1, printed
    assert len(lines) == 1 and "sweep summary could not be written" in lines[0], printed
    assert "Traceback" not in printed
    assert len(read_results(tmp_path / "results")) == 2  # every job's row kept
    parents, children = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [p.info.status for p in parents] == ["FAILED"]
    assert "summary not written" in parents[0].data.tags["error_message"]
    assert sorted(c.info.status for c in children) == ["FINISHED", "FINISHED"]


def test_rows_a_full_disk_refuses_are_kept_beside_the_sweep_state(launch, tmp_path, full_disk):
    """Issue 32: with results_dir on a full disk, a sweep measured its jobs, closed their
    MLflow runs FINISHED, then said `0/3 jobs recorded` and kept nothing on disk."""
    results = full_disk / "results"
    results.mkdir()
    with open(full_disk / "filler", "wb") as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
    code, lines, printed = launch(
        "-m",
        "strategy=jacrev,jacfwd",
        "report=false",
        f"results_dir={results}",
        "hydra.sweep.dir=sw",
        mlflow=True,
    )
    assert code == 1 and "Traceback" not in printed, printed
    not_written = [line for line in lines if "was NOT written to" in line]
    assert len(not_written) == 2 and all(str(results) in line for line in not_written), lines
    assert "2/2 jobs recorded" in printed, printed
    (kept,) = {
        p.parent for p in (tmp_path / "sw").rglob("*.parquet") if p.parent.name == "unwritten"
    }
    rows = read_results(kept)
    assert sorted(rows["strategy"]) == ["jacfwd", "jacrev"] and set(rows["status"]) == {"ok"}
    assert any(str(kept) in line and "NOT in" in line for line in lines), lines
    parents, children = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [p.info.status for p in parents] == ["FAILED"]
    assert str(kept) in parents[0].data.tags["error_message"]
    assert sorted(c.info.run_id for c in children) == sorted(rows["mlflow_run_id"])


def test_a_half_made_mlflow_db_is_one_line_with_the_fix(launch, tmp_path):
    half_made_db(tmp_path / "mlflow.db")
    code, _, printed = launch("strategy=jacrev", mlflow=True)
    assert code == 1, printed  # the job and its row are not held up by tracking; exit 1 says
    assert len(read_results(tmp_path / "results")) == 1
    said = "".join(printed.split())  # rich wraps long lines where it likes
    db = tmp_path / "mlflow.db"
    assert "".join(f"the MLflow database {db} is broken".split()) in said, printed
    assert "".join(f"mv {db} {db}.broken".split()) in said and "Traceback" not in printed


def schema_version(path: Path) -> str:
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute("SELECT version_num FROM alembic_version").fetchone()[0]


@pytest.mark.slow
def test_killing_the_first_mlflow_db_creation_leaves_no_db_or_a_complete_one(tmp_path):
    made = tmp_path / "made" / "mlflow.db"
    create_atomically(made)
    head = schema_version(made)
    path = tmp_path / "mlflow.db"
    code = f"from jacbench.record.mlflow_db import open_store; open_store('sqlite:///{path}')"

    def watch(proc: subprocess.Popen, seconds: float) -> None:
        """While ``proc`` runs: whenever mlflow.db exists, it is complete."""
        end = time.monotonic() + seconds
        while proc.poll() is None and time.monotonic() < end:
            if path.exists():
                assert schema_version(path) == head
            time.sleep(0.02)

    for delay in (1.0, 2.0, 3.0):  # kill -9 while MLflow imports, migrates, or copies
        proc = subprocess.Popen([sys.executable, "-c", code])
        watch(proc, delay)
        proc.kill()
        proc.wait()
        assert not path.exists() or schema_version(path) == head
        # what the killed creation left (removed after 10 min): its own folder only, not a
        # live build of a test running beside this one
        for left in Path("/dev/shm").glob(f"{SCRATCH}{proc.pid}-*"):
            shutil.rmtree(left, ignore_errors=True)
    proc = subprocess.Popen([sys.executable, "-c", code])  # a first run to its end
    watch(proc, 300)
    assert proc.wait() == 0 and schema_version(path) == head


HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.mark.slow  # ~7 s: a sweep with its report and a failing run, both tracked
def test_user_text_is_escaped_where_markdown_is_rendered(launch, tmp_path):
    """Issue 32: report.md kept `<script>` and `<img onerror>` from model names and error
    messages raw, and a live `<img src="x">` survived in MLflow's parent description and a
    job's note."""
    code, _, printed = launch(
        "-m", f"model.name='{HOSTILE}'", "strategy=jacrev,fd_central", mlflow=True
    )
    assert code == 0, printed
    code, _, printed = launch("model=custom", "model._target_=bad_models.RaisesMarkup", mlflow=True)
    assert code == 1, printed
    (report,) = tmp_path.glob("multirun/*/*/report/report.md")
    from mlflow.tracking import MlflowClient

    parents, _ = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (failed,) = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(
        ["1"], "attributes.status = 'FAILED'"
    )
    rendered = {
        "report.md": report.read_text(),
        "the parent's description": parents[0].data.tags["mlflow.note.content"],
        "the failed job's note": failed.data.tags["mlflow.note.content"],
    }
    assert "img src=x" in rendered["report.md"] and "script" in rendered["the failed job's note"]
    for where, text in rendered.items():
        assert "<img src=x" not in text and "<script" not in text, where
