"""A job is claimed before it runs, so that sweeps sharing a results folder (two launched at
once, or a re-run while the first still runs) never measure the same job twice.

A claim is a file created with O_EXCL in ``<results>/.claims/`` (atomic on local and NFS
file systems), named by the job's config_hash and holding who made it. A claim whose process
is gone (same host, no such pid, or an empty file older than a minute) is stale and taken
over; the others are waited for, and their result then counts as this sweep's.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CLAIMS = ".claims"
POLL_S = 0.5
EMPTY_STALE_S = 60.0  # a claim file still empty after this long lost its writer


def _read(path: Path) -> dict[str, Any] | None:
    """The claim's owner; {} while its writer has not written yet; None if it is gone."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _alive(path: Path, owner: dict[str, Any]) -> bool:
    if not owner:
        try:
            return time.time() - path.stat().st_mtime < EMPTY_STALE_S
        except OSError:
            return False
    if owner.get("host") != socket.gethostname():
        return True  # another machine's process: it cannot be checked from here
    try:
        os.kill(int(owner.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True


def _take_over(path: Path, owner: dict[str, Any], token: str) -> None:
    """Move a stale claim aside (only one taker can), putting it back if it was not the
    stale one (another taker's fresh claim)."""
    aside = path.with_name(f"{path.name}.{token}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if (_read(aside) or {}).get("token") != owner.get("token"):
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink(missing_ok=True)


def try_claim(folder: Path, key: str, sweep: str = "") -> tuple[str, dict[str, Any]]:
    """(the claim's token, {}) once it is made, or ("", the live owner) while another
    process holds it."""
    path = Path(folder) / CLAIMS / f"{key}.claim"
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    record = {"pid": os.getpid(), "host": socket.gethostname(), "sweep": sweep, "token": token}
    for _ in range(10):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            owner = _read(path)
            if owner is None:
                continue  # released meanwhile
            if _alive(path, owner):
                return "", owner
            _take_over(path, owner, token)
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle)
        return token, {}
    return "", {}  # claimed and released over and over meanwhile: try again later


def release(folder: Path, key: str, token: str) -> None:
    """Remove the claim if it is still the one ``token`` made."""
    path = Path(folder) / CLAIMS / f"{key}.claim"
    if (_read(path) or {}).get("token") == token:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def claimed(
    folder: Path, key: str, waiting: Callable[[dict[str, Any]], None], sweep: str = ""
) -> Iterator[bool]:
    """Hold the claim on ``key`` for the body, waiting while another live process holds it
    (``waiting`` is told once, with the owner). Yields whether it waited."""
    waited = False
    while True:
        token, owner = try_claim(folder, key, sweep)
        if token:
            break
        if not waited:
            waiting(owner)
            waited = True
        time.sleep(POLL_S)
    try:
        yield waited
    finally:
        release(folder, key, token)
