"""The local sqlite MLflow database, made so that a crash leaves no file or a complete one,
and a broken one named in one line with the fix: built in place, a process killed during
MLflow's many migrations leaves a file that fails for good, and builders at once corrupt it;
so it is built elsewhere (in memory where it can) and linked into place once complete."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from jacbench.core.errors import ConfigError
from jacbench.record.atomic import remove_stale
from jacbench.record.text import one_line

SCRATCH = "jacbench-mlflow-"  # MLflow's build folder in /dev/shm


class BrokenTrackingDb(ConfigError):
    """A local MLflow database MLflow cannot open."""


def sqlite_file(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` URI (None for servers, memory and other stores)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?")[0]
    return None if path in ("", ":memory:") else Path("/" + path.lstrip("/"))


def _remove(tmp: Path) -> None:
    for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
        with contextlib.suppress(OSError):
            leftover.unlink()


def _build(db: Path, artifact_root: str) -> None:
    """MLflow's own creation of a database at ``db`` (its tables, then its migrations)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    SqlAlchemyStore(f"sqlite:///{db}", artifact_root).engine.dispose()


def _build_in_memory(tmp: Path, artifact_root: str) -> None:
    """Build at ``tmp`` through a file in memory (``/dev/shm``) where there is one: MLflow's
    migrations commit a hundred times, each waiting for the disk; the file is copied once."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        _build(tmp, artifact_root)
        return
    remove_stale(shm.glob(f"{SCRATCH}*"), shutil.rmtree)  # creations killed with SIGKILL left
    # named by this process: whoever cleans up after a killed creation can tell its folder
    with tempfile.TemporaryDirectory(dir=shm, prefix=f"{SCRATCH}{os.getpid()}-") as scratch:
        built = Path(scratch) / "mlflow.db"
        _build(built, artifact_root)
        with open(built, "rb") as source, open(tmp, "wb") as target:
            shutil.copyfileobj(source, target)
            target.flush()
            os.fsync(target.fileno())


def create_atomically(path: Path, artifact_root: str | None = None) -> None:
    """Have MLflow build a database next to ``path``, linked into place unless another was first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent.glob(f".{path.name}.*.tmp"))  # left by killed creations
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    root = artifact_root or path.parent.joinpath("mlartifacts").resolve().as_uri()
    try:
        _build_in_memory(tmp, root)
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


def open_store(uri: str, artifact_root: str | None = None) -> None:
    """For a local sqlite URI: create the database atomically if missing, and check that
    MLflow can open it (raises BrokenTrackingDb with the fix if not)."""
    path = sqlite_file(uri)
    if path is None:
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
