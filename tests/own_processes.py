"""Tests that run torch.compile, run apart from the others: each test file's ``compiles`` tests
together in a Python process of their own, forked from a server that imported their modules
and compiled nothing.

Why apart: on cold compile caches torch 2.13's compiler left thread state behind in the shared
test process (inference mode, functorch levels, a dispatch guard entered), got "Guard failed
on the same frame it was created", and later tests failed or segfaulted, in a test order that
changed from run to run. Why one process per file rather than per test: a process's first
compile pays ~3-4 s of inductor start-up (the CPU's vector ISA checked in a subprocess, torch's
sources hashed for the cache key, pattern-matcher passes built) that its later compiles reuse;
the 29 ``compiles`` tests of the three contract files took 212 s one process each and 96 s one
process per file (cold caches, one core each). A test that leaves autograd state behind still
fails there (``torch_state_left_clean``), so the next test in the process starts clean.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

ISOLATED = "JACBENCH_TEST_ISOLATED"  # set in that process: run the tests there as usual

# What a test that compiles imports before it compiles: loaded once into the fork server, so a
# process of compiling tests starts as a fork of one that has imported them, instead of paying
# ~4-8 s of interpreter, torch, dynamo and inductor start-up of its own.
PRELOAD = ["conftest", "torch._dynamo", "torch._inductor.compile_fx", "jacbench.api"]

PASSED, SKIPPED, FAILED = "passed", "skipped", "failed"


class OutcomeWriter:
    """A pytest plugin for the forked process: each test's outcome, written as it is known (a
    JSON line: nodeid, outcome, text), so a crash later in the process loses no earlier one."""

    def __init__(self, path: str) -> None:
        self.path = path

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            text = f"{report.when} failed:\n{report.longreprtext}"
            self.write(report.nodeid, FAILED, text)
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            self.write(report.nodeid, SKIPPED, str(reason).removeprefix("Skipped: "))
        elif report.when == "call":
            self.write(report.nodeid, PASSED, "")

    def write(self, nodeid: str, outcome: str, text: str) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps([nodeid, outcome, text]) + "\n")


def run_together(root: str, nodeids: list[str], output: str, outcomes: str) -> None:
    """``pytest NODEID...`` in this (forked, fresh) process; its exit status is pytest's."""
    os.environ[ISOLATED] = "1"
    os.chdir(root)
    with open(output, "wb") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    args = ["-p", "no:cacheprovider", "-q", "-rs", "-o", "addopts=", *nodeids]
    code = pytest.main(args, plugins=[OutcomeWriter(outcomes)])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(int(code))


@dataclass
class Batch:
    """What one process of a file's compiling tests left: exit status, output, outcomes."""

    exit_code: int
    output: str
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, exit_code: int, output: Path, outcomes: Path) -> Batch:
        text = output.read_text(errors="replace") if output.exists() else ""
        batch = cls(exit_code, text)
        lines = outcomes.read_text().splitlines() if outcomes.exists() else []
        for nodeid, outcome, detail in map(json.loads, lines):
            if batch.outcomes.get(nodeid, (PASSED,))[0] != FAILED:  # a failed phase stays
                batch.outcomes[nodeid] = (outcome, detail)
        return batch


class OwnProcesses:
    """Runs the session's ``compiles`` tests, one process per test file, one process at a time
    from a background thread. In a plain ``pytest`` run every file's process is queued at once,
    so the second core runs them while this process runs the other tests; in a pytest-xdist
    worker (where the other worker already uses the second core) a file's process runs when the
    worker reaches its first such test. Each test here then takes its own outcome there."""

    def __init__(self, root: Path, files: dict[str, list[str]], preload: list[str], ahead: bool):
        self.root = root
        self.files = files
        self.file_of = {nodeid: name for name, nodeids in files.items() for nodeid in nodeids}
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(preload)  # if the server is not running yet
        self.scratch = Path(tempfile.mkdtemp(prefix="jacbench-own-"))
        self.current: BaseProcess | None = None
        self.stopped = False
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="own-process")
        self.batches: dict[str, Future[Batch]] = {}
        if ahead:
            forkserver.ensure_running()  # now: its environment is the session's, not a test's
            for name in files:
                self.queue(name)

    def runs(self, nodeid: str) -> bool:
        return nodeid in self.file_of

    def queue(self, name: str) -> Future[Batch]:
        stem = self.scratch / str(len(self.batches))
        self.batches[name] = self.pool.submit(self._run, self.files[name], stem)
        return self.batches[name]

    def _run(self, nodeids: list[str], stem: Path) -> Batch:
        if self.stopped:
            return Batch(-1, "not run: the session ended first")
        output, outcomes = stem.with_suffix(".txt"), stem.with_suffix(".jsonl")
        self.current = self.context.Process(
            target=run_together, args=(str(self.root), nodeids, str(output), str(outcomes))
        )
        self.current.start()
        self.current.join()
        return Batch.read(int(self.current.exitcode or 0), output, outcomes)

    def outcome(self, nodeid: str) -> None:
        """Pass, skip (with the reason) or fail (with the test's own report) as it did."""
        name = self.file_of[nodeid]
        batch = (self.batches.get(name) or self.queue(name)).result()
        outcome, detail = batch.outcomes.get(nodeid, (None, ""))
        if outcome == PASSED:
            return
        if outcome == SKIPPED:
            pytest.skip(detail)
        if outcome == FAILED:
            pytest.fail(f"in its own process: {detail}", pytrace=False)
        pytest.fail(
            f"no outcome: its process (exit {batch.exit_code}) ended first:\n{batch.output}",
            pytrace=False,
        )

    def stop(self) -> None:
        self.stopped = True
        if self.current is not None and self.current.is_alive():
            self.current.kill()
        self.pool.shutdown(wait=True)
        shutil.rmtree(self.scratch, ignore_errors=True)
