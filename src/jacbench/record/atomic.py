"""Files written whole or not at all: to a temporary name in the same folder, then renamed, so
a reader never sees half a file and a writer killed mid-write leaves only a hidden temporary
file. pyarrow is imported only where a table is written (a single run never imports it)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

STALE_TMP_S = 600.0  # a temporary file (or build folder) this old lost its writer


def write_atomic(path: Path, data: str | pa.Table) -> None:
    """Write text or a table to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: collaborators could not read it
        if isinstance(data, str):
            with os.fdopen(fd, "w") as handle:
                handle.write(data)
        else:
            import pyarrow.parquet as pq

            os.close(fd)
            pq.write_table(data, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask (reading it means setting it; set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_stale(paths: Iterable[Path], remove: Callable[[Path], object] = Path.unlink) -> None:
    """Remove those of ``paths`` older than ``STALE_TMP_S``: what writers killed mid-write
    left (``remove``: ``shutil.rmtree`` for folders)."""
    now = time.time()
    for path in paths:
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > STALE_TMP_S:
                remove(path)
