"""Where jacbench keeps what it remembers across processes (auto's decisions), and how it
reads and writes there: ``$JACBENCH_CACHE_DIR`` (empty: remember nothing), else the XDG cache.

A cache folder may be shared, planted or broken, so what is in it is data to check, never
trusted: an entry is read only where it is a regular file (not a symlink, FIFO or device:
``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``), at most ``MAX_ENTRY_BYTES``, and every failure
to parse it is caught; it is written under an unpredictable temporary name
(``tempfile.mkstemp``: created exclusively, never through a planted link) and renamed into
place atomically. A cache that cannot be read or written costs only what it would have
saved: the caller goes on without it, after one ``CacheWarning`` per folder that names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

ENV = "JACBENCH_CACHE_DIR"
MAX_ENTRY_BYTES = 1 << 16  # a decision is ~100 bytes; anything far larger is not one


class CacheWarning(UserWarning):
    """A cache folder or entry that jacbench could not use; it went on without it."""


class BadEntry(Exception):
    """An entry that is not a small regular file of JSON; the message says why."""


def cache_folder(part: str) -> Path | None:
    """``part``'s folder in the cache, or None when remembering is turned off."""
    configured = os.environ.get(ENV)
    if configured is not None:
        return Path(configured) / part if configured.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jacbench" / part


_warned: set[str] = set()


def warn_once(folder: Path, what: str) -> None:
    """One ``CacheWarning`` per cache folder and process: ``what`` happened there (it names
    the path), and jacbench went on without that entry."""
    name = str(folder)
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(
        f"jacbench: {what} (cache {name}; set {ENV}= to an empty value to remember nothing)",
        CacheWarning,
        stacklevel=3,
    )


def read_json(path: Path) -> Any | None:
    """The JSON value in ``path``, None where there is no entry. ``BadEntry`` where it is not
    a regular file, is larger than ``MAX_ENTRY_BYTES``, or does not parse."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink; EACCES: unreadable
        raise BadEntry(f"cannot be opened as a plain file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadEntry("is not a regular file")
        if info.st_size > MAX_ENTRY_BYTES:
            raise BadEntry(f"has {info.st_size} bytes, more than {MAX_ENTRY_BYTES}")
        raw = os.read(fd, MAX_ENTRY_BYTES + 1)
    except OSError as exc:
        raise BadEntry(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_ENTRY_BYTES:
        raise BadEntry(f"has more than {MAX_ENTRY_BYTES} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadEntry(f"is not valid JSON ({type(exc).__name__})") from None


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` to ``path`` whole: to a fresh temporary file beside it, then renamed
    over it (a reader sees the old entry or the new one). Raises ``OSError`` where the folder
    cannot be written, or is a symlink (a planted one would send the entry elsewhere)."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise NotADirectoryError(f"{folder} is not a directory of its own (a symlink?)")
    data = json.dumps(value, allow_nan=False).encode()
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove(path: Path) -> None:
    """Remove the entry at ``path`` (a planted symlink itself, never its target); raises
    ``OSError`` where it cannot be removed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
