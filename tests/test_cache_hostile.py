"""A cache folder is data, never trusted (issue 46): special, linked, oversized and deeply
nested entries are refused at once, a read-only or broken folder costs only what it would
have saved (one warning that names it), the writer never follows a planted link, and with
remembering turned off nothing is read. (What a valid-looking entry may hold:
tests/test_decisions.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import jacbench
from jacbench.core import contention, decisions
from jacbench.core.cache import MAX_ENTRY_BYTES, CacheWarning
from jacbench.core.problem import FunctionModule, make_problem
from jacbench.strategies.auto import AutoOptions

OPTIONS = {"compile": False}  # calibrated, and remembered (not the tiered path)
X = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * x.sum()


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """The cache's decisions folder (empty), on a machine taken as idle (a contended
    calibration is not remembered: tests/test_decisions.py)."""
    monkeypatch.setenv(decisions.ENV, str(tmp_path))
    monkeypatch.setattr(contention, "CONTENDED", 0.0)
    return tmp_path / "auto"


def remembered_entry(folder: Path) -> Path:
    """The entry a first preparation of f writes."""
    assert jacbench.prepare(f, X, **OPTIONS).info.decided_by == "calibrated"
    (entry,) = folder.glob("*.json")
    return entry


def prepared() -> tuple[jacbench.Prepared, list[str]]:
    """f prepared again, and the messages of the cache warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prep = jacbench.prepare(f, X, **OPTIONS)
    torch.testing.assert_close(prep(X + 0.1), torch.func.jacfwd(f)(X + 0.1))
    return prep, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def test_an_entry_that_is_a_fifo_is_refused_at_once_not_waited_on(folder):
    """Reading a FIFO blocks until a writer comes: prepare hung. The watchdog plays the
    writer after 10 s, so that a reader that blocks fails this test instead of hanging it."""
    entry = remembered_entry(folder)
    entry.unlink()
    os.mkfifo(entry)
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(10):
            with contextlib.suppress(OSError):
                fd = os.open(entry, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"{}")
                os.close(fd)

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        prep, said = prepared()
    finally:
        done.set()
    assert prep.info.decided_by == "calibrated"
    assert len(said) == 1 and "not a regular file" in said[0] and str(folder) in said[0]


def test_a_linked_entry_is_not_followed(folder, tmp_path):
    """A symlink at the entry is not read through (one to /dev/zero raised MemoryError):
    here it points at a file holding a decision auto could make, which was used."""
    entry = remembered_entry(folder)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"strategy": "jacrev", "options": {}}))
    entry.unlink()
    entry.symlink_to(elsewhere)
    prep, said = prepared()
    assert prep.info.decided_by == "calibrated"
    assert len(said) == 1 and "cannot be opened as a plain file" in said[0]
    assert json.loads(elsewhere.read_text())["strategy"] == "jacrev"  # left alone
    assert not entry.is_symlink() and decisions.parse(json.loads(entry.read_text()))


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(" " * (1 << 20) + '{"strategy": "jacrev", "options": {}}', id="padded"),
        pytest.param("[" * 200_000 + "]" * 200_000, id="deeply-nested"),
        pytest.param("[" * 30_000 + "]" * 30_000, id="nested-within-the-size-limit"),
    ],
)
def test_an_oversized_or_deeply_nested_entry_is_refused(folder, content):
    """A 200000-deep entry raised RecursionError out of prepare; one of a megabyte was read
    whole (and used where it parsed)."""
    assert len(content) > MAX_ENTRY_BYTES or content.startswith("[" * 30_000)
    remembered_entry(folder).write_text(content)
    prep, said = prepared()
    assert prep.info.decided_by == "calibrated"
    assert len(said) == 1 and str(folder) in said[0]


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Run as an ordinary user would: root ignores file modes, so as root the effective
    user becomes nobody for the block (the real one stays root, to come back)."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.fixture
def world_folder(monkeypatch) -> Iterator[Path]:
    """A cache's decisions folder that an ordinary user can reach (pytest's tmp_path is
    root's alone)."""
    monkeypatch.setattr(contention, "CONTENDED", 0.0)
    base = Path(tempfile.mkdtemp(prefix="jacbench-ro-"))
    base.chmod(0o755)
    monkeypatch.setenv(decisions.ENV, str(base))
    yield base / "auto"
    for path in sorted(base.rglob("*"), reverse=True):  # writable again, then removed
        path.parent.chmod(0o755)
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    base.rmdir()


@pytest.mark.parametrize("holding", ["nothing", "an entry to forget"])
def test_a_read_only_cache_is_not_remembered_with_one_warning(world_folder, holding):
    """An entry that had to be forgotten raised PermissionError out of prepare."""
    world_folder.mkdir(mode=0o755)
    if holding != "nothing":
        entry = world_folder / f"{key_of(AutoOptions(**OPTIONS))}.json"
        entry.write_text(json.dumps({"strategy": "nosuch", "options": {}}))
        entry.chmod(0o644)
    world_folder.chmod(0o555)
    with unprivileged():
        prep, said = prepared()
    assert prep.info.decided_by == "calibrated"
    assert len(said) == 1 and str(world_folder) in said[0], said
    assert [p.name for p in world_folder.iterdir()] == (
        [] if holding == "nothing" else [entry.name]
    )


def test_a_cache_folder_that_is_a_file_costs_one_warning(tmp_path, monkeypatch):
    afile = tmp_path / "cache"
    afile.write_text("not a folder")
    monkeypatch.setenv(decisions.ENV, str(afile))
    prep, said = prepared()
    assert prep.info.decided_by == "calibrated"
    assert len(said) == 1 and str(afile) in said[0]
    assert afile.read_text() == "not a folder"


def test_the_writer_never_follows_a_link_planted_at_its_temporary_or_final_name(folder, tmp_path):
    """Entries were written to ``.<key>.<pid>.tmp`` through whatever was there: a link
    planted at that name overwrote a file outside the cache. Links are planted at the old
    temporary name and at the entry itself; both victims stay as they were."""
    entry = remembered_entry(folder)
    entry.unlink()
    victims = [tmp_path / "notes.txt", tmp_path / "other.txt"]
    for victim in victims:
        victim.write_text("important user data\n")
    (folder / f".{entry.stem}.{os.getpid()}.tmp").symlink_to(victims[0])
    entry.symlink_to(victims[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)  # the linked entry: not read
        jacbench.prepare(f, X, **OPTIONS)
    assert all(v.read_text() == "important user data\n" for v in victims)
    assert not entry.is_symlink() and decisions.parse(json.loads(entry.read_text()))
    assert oct(entry.stat().st_mode & 0o777) == "0o600"  # the user's own
    leftovers = {p.name for p in folder.iterdir()} - {entry.name}
    assert leftovers == {f".{entry.stem}.{os.getpid()}.tmp"}  # the planted link, untouched


def key_of(opts: AutoOptions) -> str:
    """The key auto files f's decision under (as ``jacbench.prepare`` builds its problem)."""
    problem = make_problem("f", FunctionModule(f), X.clone(), "input", False, vectorize=True)
    return decisions.key(problem, asdict(opts))


@pytest.mark.parametrize("off", ["JACBENCH_CACHE_DIR=''", "cache=False"])
def test_remembering_turned_off_reads_nothing(tmp_path, monkeypatch, off):
    """Planted entries where the cache would be: not read (no warning), not changed."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    options = {**OPTIONS, "cache": off != "cache=False"}
    if off == "cache=False":
        monkeypatch.setenv(decisions.ENV, str(tmp_path / "jacbench"))
    else:
        monkeypatch.setenv(decisions.ENV, "")
    folder = tmp_path / "jacbench" / "auto"
    folder.mkdir(parents=True)
    planted = {"strategy": "naive_single_grad", "options": {}}
    for opts in (AutoOptions(**options), AutoOptions(**{**options, "cache": True})):
        (folder / f"{key_of(opts)}.json").write_text(json.dumps(planted))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prep = jacbench.prepare(f, X, **options)
        tiered = jacbench.prepare(f, X, cache=options["cache"])  # its build costs: not read
    assert not [w for w in caught if issubclass(w.category, CacheWarning)]
    assert prep.info.decided_by == "calibrated" and tiered.info.decided_by == "rule"
    assert all(json.loads(p.read_text()) == planted for p in folder.iterdir())
