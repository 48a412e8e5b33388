"""A digest of source files: what made a remembered decision (``jacbench.core.decisions``) or
a recorded row (``jacbench.run.provenance``). A file's digest is kept while its size and
modification time stay the same, so asking again costs a few ``stat`` calls."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def files_under(root: Path, parts: Iterable[str]) -> list[Path]:
    """The Python files of ``root``'s ``parts`` (folders, searched recursively, or files)."""
    found: list[Path] = []
    for part in parts:
        path = root / part
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return found


def digest_of(files: Iterable[Path]) -> str:
    """One hash of the files' contents (and their names, so a moved file counts)."""
    total = hashlib.sha256()
    for path in files:
        stat = path.stat()
        digest = _file_digest(str(path), stat.st_size, stat.st_mtime_ns)
        total.update(f"{path.name}\0{digest}\0".encode())
    return total.hexdigest()[:16]
