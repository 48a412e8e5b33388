"""The strategies' option schemas come from the registry each time (issue 45: the cache of
them goes), so a planted or edited file where jacbench once kept them changes nothing
(issue 46: its ``${oc.env:...}`` defaults were resolved, a secret landing in the row, the
MLflow run and stderr; an edited one broke every command without naming the file)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from helpers.cli import LAUNCH_FAST, clean_env
from jacbench.core.cache import ENV

SECRET = "hunter2-not-for-parquet"


def earlier_cache_file(cache: Path) -> Path:
    """Where jacbench 0.1 (up to issue 45) read the schemas: keyed by every strategy entry
    point and the size and time of its file (its ``run/schema.py``, replayed here)."""
    parts = []
    for ep in sorted(entry_points(group="jacbench.strategies"), key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        package = f"{dist.name} {dist.version}" if dist is not None else "?"
        stat = Path(importlib.util.find_spec(ep.module).origin).stat()
        parts.append([ep.name, ep.value, package, f"{stat.st_size}:{stat.st_mtime_ns}"])
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    return cache / "schemas" / f"{key}.json"


@pytest.fixture
def planted(tmp_path, monkeypatch) -> Path:
    """A schemas file planted where jacbench kept them: an environment variable for a
    default, an option that does not exist, and a strategy that is not a list."""
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("SECRET_TOKEN", SECRET)
    path = earlier_cache_file(tmp_path / "cache")
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "jacfwd": [["randomness", "str", "${oc.env:SECRET_TOKEN,error}"]],
                "jacrev": [["planted_option", "int", 1]],
                "fd_central": 5,
            }
        )
    )
    return path


def test_a_planted_schemas_file_changes_nothing(cli, planted):
    proc = cli("strategy=jacfwd", *LAUNCH_FAST, "mlflow.enabled=false")
    assert proc.returncode == 0, proc.stderr
    (row,) = cli.results().to_dict("records")
    assert json.loads(row["strategy_options"])["randomness"] == "error"  # jacfwd's own default
    assert SECRET not in proc.stdout + proc.stderr + json.dumps(row, default=str)
    shown = cli("--cfg", "job", "strategy=jacrev")
    assert shown.returncode == 0 and "planted_option" not in shown.stdout, shown.stderr
    assert "chunk_size" in shown.stdout
    assert cli("strategy=fd_central", *LAUNCH_FAST, "mlflow.enabled=false").returncode == 0


@pytest.mark.parametrize(
    "args", [["--help"], pytest.param(["strategy=nosuch"], marks=pytest.mark.slow)]
)
def test_help_and_refusals_answer_without_mlflow_and_remember_nothing(tmp_path, args):
    env = clean_env(**{ENV: str(tmp_path / "cache")})
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jacbench", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert not imported & {"mlflow", "pandas", "pyarrow"}, args
    said = proc.stdout + proc.stderr
    assert ("jacbench:" in said) == (args[0] != "--help"), said[-500:]
    assert "fd_central" in said  # the strategies are listed
    assert not (tmp_path / "cache").exists()
