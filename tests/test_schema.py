"""Composing a config without torch (issue 29): the strategies' option schemas remembered
from an earlier process, valid only while no strategy's package or file changed."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from helpers.cli import clean_env
from jacbench.core.cache import ENV
from jacbench.core.registry import load_registry
from jacbench.run import schema


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "schemas"


def fields_of(options: type | None) -> list[tuple[str, object]]:
    return [(f.name, f.default) for f in dataclasses.fields(options)] if options else []


def test_remembered_schemas_are_the_strategies_own(cache):
    read = schema.strategy_options()
    assert len(list(cache.glob("*.json"))) == 1
    remembered = schema.strategy_options()
    assert sorted(remembered) == sorted(read) == load_registry().names()
    for name, options in read.items():
        assert fields_of(remembered[name]) == fields_of(options), name
    assert remembered["fd_central"] is not read["fd_central"]  # rebuilt, not imported


def test_a_changed_strategy_file_makes_them_read_afresh(cache, monkeypatch):
    schema.strategy_options()
    (stored,) = cache.glob("*.json")
    stored.write_text('{"jacrev": [["stale_option", "int", 1]]}')  # as if jacrev had changed
    assert fields_of(schema.strategy_options()["jacrev"])[0][0] == "stale_option"
    monkeypatch.setattr(schema, "_source_stamp", lambda module: f"edited {time.time()}")
    assert "stale_option" not in dict(fields_of(schema.strategy_options()["jacrev"]))


def test_nothing_is_remembered_when_the_cache_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, "")
    assert schema.strategy_options()["fd_central"] is load_registry().get("fd_central").options


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--cfg", "job", "strategy=fd_central"], ["strategy=nosuch"], ["dtype=null"]],
)
def test_help_config_and_refusals_answer_without_torch_or_mlflow(tmp_path, args):
    env = clean_env(**{ENV: str(tmp_path / "cache")})
    warm = [sys.executable, "-c", "from jacbench.run.schema import strategy_options as s; s()"]
    subprocess.run(warm, env=env, check=True)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jacbench", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert not imported & {"torch", "mlflow", "pandas"}, args
    said = proc.stdout + proc.stderr
    assert ("jacbench:" in said) == (args[0] not in ("--help", "--cfg")), said[-500:]
    assert os.path.exists(tmp_path / "cache" / "schemas")
