"""Claims in a shared results folder are read as data: something planted at a claim's name
(a FIFO, a link, a folder) never blocks a sweep, and SIGTERM ends a sweep in any wait."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cli import LAUNCH_FAST, compose_job
from jacbench.core.interrupt import Terminated, watched
from jacbench.run.claims import CLAIMS, claimed, holder, release_sweep, try_claim
from jacbench.run.identity import config_hash

SWEPT = ["strategy=jacrev,jacfwd", "model=seed003_cat_poly"]


def _first_jobs_key() -> str:
    """The claim's name of the sweep's first job, as ``launch`` runs it."""
    return config_hash(compose_job("strategy=jacrev", "model=seed003_cat_poly", *LAUNCH_FAST))


@contextlib.contextmanager
def fifo_opened_for_writing(fifo: Path, after_s: float = 0.0) -> Iterator[None]:
    """While the body runs (from ``after_s`` on), open ``fifo`` for writing whenever a reader
    waits on it: a reader blocked in ``open`` (the fault under test) is let go instead of
    hanging the test run."""
    stop = threading.Event()

    def unblock() -> None:
        if stop.wait(after_s):
            return
        while not stop.wait(0.2):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:  # ENXIO: nobody reads; ENOENT: set aside
                if exc.errno not in (errno.ENXIO, errno.ENOENT):
                    raise

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _plant(folder: Path, key: str, kind: str) -> Path:
    path = folder / CLAIMS / f"{key}.claim"
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        target = folder / "elsewhere.json"
        target.write_text('{"pid": 1, "host": "node17", "token": "x"}')
        path.symlink_to(target)
    else:
        path.mkdir()
    return path


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_something_planted_at_a_claims_name_is_set_aside_at_once(tmp_path, capfd, kind):
    """Issue 60: a FIFO at a claim's name blocked the sweep in open() for good."""
    path = _plant(tmp_path, "abc", kind)
    started = time.monotonic()
    with fifo_opened_for_writing(path):
        assert holder(tmp_path, "abc") is None  # nobody holds it
        token, owner = try_claim(tmp_path, "abc", "sweep-1")
    assert time.monotonic() - started < 2.0
    assert token and not owner
    assert path.is_file() and not path.is_symlink()  # our own claim now
    err = capfd.readouterr().err
    assert err.count("jacbench:") == 1 and "not a claim file; set aside" in err, err
    assert (tmp_path / "elsewhere.json").exists() or kind != "link"  # a link's target kept
    assert release_sweep(tmp_path, "sweep-1") == 1


def test_sigterm_ends_a_wait_for_another_sweeps_claim(tmp_path):
    here = tmp_path / CLAIMS / "job.claim"
    token, _ = try_claim(tmp_path, "job", "other-sweep")
    assert token and here.exists()  # held by a live process (this one): waited for
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    with pytest.raises(Terminated), watched():
        timer.start()
        with claimed(tmp_path, "job", lambda owner: None, "this-sweep"):
            pytest.fail("claimed a job another live sweep holds")
    assert time.monotonic() - started < 5.0


@pytest.mark.slow
def test_a_sweep_with_a_fifo_planted_at_a_claim_runs_its_jobs(launch, tmp_path):
    """The repro of issue 60 (cli_planted_claim_fifo.sh), in process."""
    fifo = _plant(tmp_path / "results", _first_jobs_key(), "fifo")
    started = time.monotonic()
    with fifo_opened_for_writing(fifo):
        code, lines, printed = launch("-m", *SWEPT)
    assert code == 0, printed
    assert time.monotonic() - started < 60
    assert any("is a FIFO, not a claim file; set aside" in line for line in lines), printed
    assert len(list((tmp_path / "results").glob("*.parquet"))) == 2


def _blocked_in_open() -> bool:
    """Whether this process's main thread waits in ``open`` of a FIFO for a writer."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/self/task/{os.getpid()}/wchan").read_text() == "wait_for_partner"
    return False


@pytest.mark.slow
def test_sigterm_while_a_planted_claim_is_met_ends_the_sweep(launch, tmp_path):
    """SIGTERM (``timeout``, SLURM, systemd) sent as the sweep meets a FIFO planted at its job's
    claim (blocked in ``open`` there, or once it set the FIFO aside): the sweep ends at once
    with 143 and says what it kept; nothing on its way out blocks again."""
    fifo = _plant(tmp_path / "results", _first_jobs_key(), "fifo")
    sent: list[float] = []
    done = threading.Event()

    def terminate_when_met() -> None:
        while not done.wait(0.05):
            if _blocked_in_open() or not fifo.exists():
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGTERM)
                return

    watcher = threading.Thread(target=terminate_when_met, daemon=True)
    watcher.start()
    try:
        with fifo_opened_for_writing(fifo, after_s=30.0):
            code, lines, printed = launch("-m", *SWEPT)
    finally:
        done.set()
        watcher.join()
    assert sent, printed
    assert time.monotonic() - sent[0] < 20, printed
    assert code == 143, printed
    assert any("interrupted (SIGTERM)" in line for line in lines), printed
