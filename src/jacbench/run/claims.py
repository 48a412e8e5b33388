"""A job is claimed before it runs, so that sweeps sharing a results folder never measure
the same job twice.

A claim is a file made with O_EXCL in ``<results>/.claims/``, named by the job's key, saying
who holds it (pid, host, boot id) and touched every ``HEARTBEAT_S``. It is stale, and taken
over, when its process is gone (same host and boot) or it stopped beating for ``STALE_S``.
Claims are read without blocking or following links, at most ``MAX_CLAIM_BYTES``; anything
but a regular file at a claim's name is set aside.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jacbench.run.orphans import pid_alive
from jacbench.run.periodic import every

CLAIMS = ".claims"
POLL_S = 0.5
HEARTBEAT_S = 5.0  # a held claim is touched this often
STALE_S = 60.0  # a claim not touched for this long lost its holder (12 missed beats)
MAX_CLAIM_BYTES = 64 * 1024  # a claim holds a few short fields
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotAClaim(Exception):
    """Something at a claim's name that is not a claim file (a FIFO, a link, a folder)."""


def boot_id() -> str:
    """This boot of this machine: a pid is only comparable within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _read(path: Path) -> dict[str, Any] | None:
    """The claim's owner; {} while its writer has not written yet; None if it is gone.
    ``NotAClaim`` where ``path`` is not a regular file (never blocks, never follows a link)."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise NotAClaim("a symbolic link") from None
        return {}
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAClaim(_kind(mode))
        raw = os.read(fd, MAX_CLAIM_BYTES + 1)
    except OSError:
        return {}
    finally:
        os.close(fd)
    try:
        owner = json.loads(raw[:MAX_CLAIM_BYTES].decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return {}
    return owner if isinstance(owner, dict) else {}


def _kind(mode: int) -> str:
    """What a file that is no regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def _owner(path: Path) -> dict[str, Any] | None:
    """``_read``, with something that is no claim counted as nobody's (None)."""
    try:
        return _read(path)
    except NotAClaim:
        return None


def _alive(path: Path, owner: dict[str, Any]) -> bool:
    try:
        beating = time.time() - os.lstat(path).st_mtime < STALE_S
    except OSError:
        return False
    if not owner or owner.get("host") != socket.gethostname():
        return beating  # another machine's process: only its heartbeat tells
    if owner.get("boot") != boot_id():
        return False  # made before this machine rebooted
    try:
        pid = int(owner.get("pid", 0))
    except (TypeError, ValueError):
        return beating
    # a live pid that stopped beating was reused by an unrelated process
    return beating and pid_alive(pid) is not False


def holder(folder: Path, key: str) -> dict[str, Any] | None:
    """Who holds the claim on ``key`` now (None: nobody alive holds it)."""
    path = Path(folder) / CLAIMS / f"{key}.claim"
    owner = _owner(path)
    return owner if owner is not None and _alive(path, owner) else None


def waiting_line(num: int, owner: dict[str, Any]) -> str:
    """What job ``num`` says while another sweep's process (``owner``) holds its claim."""
    where = f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}"
    return f"job {num}: being run by another sweep ({where}); waiting for it"


def sweep_holds_any(folder: Path, sweep: str) -> bool:
    """Whether a live process of ``sweep`` holds a claim (one of its jobs still runs)."""
    for path in (Path(folder) / CLAIMS).glob("*.claim"):
        owner = _owner(path)
        if owner and owner.get("sweep") == sweep and _alive(path, owner):
            return True
    return False


def _take_over(path: Path, owner: dict[str, Any], token: str) -> None:
    """Move a stale claim aside (one taker can), back if it was another taker's fresh claim."""
    aside = path.with_name(f"{path.name}.{token}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if (_owner(aside) or {}).get("token") != owner.get("token"):
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    with contextlib.suppress(OSError):  # a folder stays aside, out of the claims' way
        aside.unlink()


def _set_aside(path: Path, why: NotAClaim, token: str) -> None:
    """Something at a claim's name that is no claim: said in one line, moved out of the way."""
    print(
        f"jacbench: {path} is {why}, not a claim file; set aside, the job is claimed anew",
        file=sys.stderr,
        flush=True,
    )
    _take_over(path, {}, token)


def try_claim(folder: Path, key: str, sweep: str = "") -> tuple[str, dict[str, Any]]:
    """(the claim's token, {}) once it is made, or ("", the live owner) while another
    process holds it."""
    path = Path(folder) / CLAIMS / f"{key}.claim"
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "boot": boot_id(),
        "sweep": sweep,
        "token": token,
    }
    for _ in range(10):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            try:
                owner = _read(path)
            except NotAClaim as why:
                _set_aside(path, why, token)
                continue
            if owner is None:
                continue  # released meanwhile
            if _alive(path, owner):
                return "", owner
            _take_over(path, owner, token)
            continue
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(record, handle)
        except OSError:  # e.g. a full disk: no empty claim left for the next sweep to wait on
            path.unlink(missing_ok=True)
            raise
        return token, {}
    return "", {}  # claimed and released over and over meanwhile: try again later


def release(folder: Path, key: str, token: str) -> None:
    """Remove the claim if it is still the one ``token`` made."""
    path = Path(folder) / CLAIMS / f"{key}.claim"
    if token and (_owner(path) or {}).get("token") == token:
        path.unlink(missing_ok=True)


def release_sweep(folder: Path, sweep: str) -> int:
    """Remove every claim ``sweep`` made (its workers were stopped with it); returns how many."""
    removed = 0
    for path in (Path(folder) / CLAIMS).glob("*.claim"):
        if sweep and (_owner(path) or {}).get("sweep") == sweep:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


@contextlib.contextmanager
def _beating(path: Path) -> Iterator[None]:
    """Touch ``path`` every HEARTBEAT_S while the body runs."""

    def beat() -> None:
        with contextlib.suppress(OSError):
            os.utime(path)

    with every(HEARTBEAT_S, beat, "jacbench-claim-heartbeat"):
        yield


@contextlib.contextmanager
def claimed(
    folder: Path, key: str, waiting: Callable[[dict[str, Any]], None], sweep: str = ""
) -> Iterator[bool]:
    """Hold the claim on ``key`` for the body, waiting while another live process holds it
    (``waiting`` is told once, with the owner). Yields whether it waited."""
    waited = False
    while True:
        try:
            token, owner = try_claim(folder, key, sweep)
        except OSError:  # e.g. a full disk: a claim only saves a duplicate, so run unclaimed
            token = ""
            break
        if token:
            break
        if not waited:
            waiting(owner)
            waited = True
        time.sleep(POLL_S)
    try:
        path = Path(folder) / CLAIMS / f"{key}.claim"
        with _beating(path) if token else contextlib.nullcontext():
            yield waited
    finally:
        release(folder, key, token)
