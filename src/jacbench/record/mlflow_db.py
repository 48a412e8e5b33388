"""The local sqlite MLflow database: created so that a crash leaves either no file or a
complete one, and a broken one named in one line with the fix.

MLflow builds a new database in place (tables, then a long chain of migrations); a process
killed on the way leaves a half-made file that fails for good ("table ... already exists",
"duplicate column name"). Here it is built under a temporary name in the same folder and
linked into place only once complete.

Building runs MLflow's ~70 migrations, seconds on a 2-core machine (issue 11's start-up). So
MLflow builds an empty database once per MLflow version into the user's cache folder, and a
new launch folder's database starts as a copy of it (opening a current copy takes ~50 ms).
Where the cache cannot be used, MLflow builds the database in place of the copy, as before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
import uuid
from pathlib import Path

from jacbench.core.errors import ConfigError
from jacbench.record.text import one_line

STALE_TMP_S = 600.0  # a temporary database this old lost its creator
_READY: set[str] = set()  # sqlite URIs this process has opened (checked once)


class BrokenTrackingDb(ConfigError):
    """A local MLflow database MLflow cannot open."""


def sqlite_file(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` URI (None for servers, memory and other stores)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?")[0]
    return None if path in ("", ":memory:") else Path("/" + path.lstrip("/"))


def _build(uri: str, artifact_root: str | None) -> None:
    """Open (and so create or migrate) the store at ``uri``, then let go of the file."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(uri, artifact_root or Path.cwd().joinpath("mlartifacts").as_uri())
    store.engine.dispose()


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/jacbench``, else ``~/.cache/jacbench``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jacbench"


def _tmp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")


def _remove(tmp: Path) -> None:
    for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
        with contextlib.suppress(OSError):
            leftover.unlink()


def empty_template() -> Path:
    """An empty database at this MLflow's schema in the user's cache, built by MLflow once
    per MLflow version. Its default experiment is removed: MLflow makes it again when it first
    opens a copy, with that folder's artifact root."""
    from mlflow.version import VERSION

    template = cache_dir() / f"mlflow-{VERSION}-empty.db"
    if template.exists():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_beside(template)
    try:
        _build(f"sqlite:///{tmp}", tmp.parent.as_uri())
        with contextlib.closing(sqlite3.connect(tmp)) as db, db:
            db.execute("DELETE FROM experiments WHERE experiment_id = 0")
        os.replace(tmp, template)  # builders at once: each template is whole, the last stays
    finally:
        _remove(tmp)
    return template


def create_atomically(path: Path, artifact_root: str | None = None) -> None:
    """Build a complete database next to ``path`` and link it into place, unless another
    process did first (its database is kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a killed creation
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > STALE_TMP_S:
                stale.unlink()
    tmp = _tmp_beside(path)
    try:
        try:
            shutil.copyfile(empty_template(), tmp)
        except Exception:  # no usable cache (read-only, a file in the way...): built here
            _remove(tmp)
        _build(f"sqlite:///{tmp}", artifact_root)  # a current copy opens in ~50 ms
        try:
            os.link(tmp, path)  # never replaces a database another process made meanwhile
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        _remove(tmp)


def broken_line(path: Path, error: BaseException) -> str:
    first = one_line(error, 200)
    if "out-of-date database schema" in first and "found version None" not in first:
        return (
            f"the MLflow database {path} was made by an older MLflow ({first[:120]}); "
            f"back it up, then run: mlflow db upgrade sqlite:///{path}"
        )
    return (
        f"the MLflow database {path} is broken (half made by a killed process?): move it "
        f"aside (mv {path} {path}.broken) and run again, a new one is made; parquet results "
        f"are not affected. MLflow said: {first[:120]}"
    )


def ready_store(uri: str, artifact_root: str | None = None) -> None:
    """For a local sqlite URI: create the database atomically if missing, and check once per
    process that MLflow can open it (raises BrokenTrackingDb with the fix if not)."""
    path = sqlite_file(uri)
    if path is None or uri in _READY:
        return
    if not path.exists():
        create_atomically(path, artifact_root)
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)  # opens the store
    except Exception as exc:
        if "locked" in str(exc):
            raise  # busy, not broken: the caller retries
        raise BrokenTrackingDb(broken_line(path, exc)) from exc
    _READY.add(uri)
