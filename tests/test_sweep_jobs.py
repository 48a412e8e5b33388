"""What the sweeper composes of a sweep's jobs: the jobs that check it (every combination of
the swept groups' choices, every other swept value), and otherwise only what it reads, since
Hydra's launcher composes each job it runs (a fresh sweep's jobs were composed twice)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from jacbench.run.claims import CLAIMS
from jacbench.run.sweep.control import (
    JobConfigs,
    anything_recorded,
    covering_jobs,
    list_jobs,
    swept_values,
)

PARAMS = {
    "model": "map_dense,map_banded,map_conv",
    "model.n_in": "4,16,64,256,1024",
    "dtype": "float32,float64",
    "strategy": "jacrev,jacfwd,auto_eager",
}


@pytest.fixture(scope="module")
def loader() -> Iterator[Any]:
    """Hydra's config loader over jacbench's conf/ and its registered strategies."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from jacbench.core.registry import load_registry
    from jacbench.run.config import conf_dir, register_configs

    register_configs(load_registry())
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def test_the_jobs_that_check_a_sweep_hold_every_group_combination_and_every_value(loader):
    values = swept_values(PARAMS, ["+experiment=map", "model.n_out=4,16"], loader)
    jobs = list_jobs(values)
    covering = covering_jobs(values, loader)
    assert len(jobs) == 3 * 5 * 2 * 3 * 2
    assert len(covering) == 3 * 2 * 3  # the groups' combinations; n_in's 5 values fit in them
    assert all(job in jobs for job in covering)
    groups = [values["model"], values["dtype"], values["strategy"]]
    for combination in itertools.product(*groups):
        assert any(set(combination) <= set(job) for job in covering), combination
    for key in ("model.n_in", "model.n_out", "+experiment"):
        for value in values[key]:
            assert any(value in job for job in covering), value


def test_a_key_with_more_values_than_group_combinations_still_has_each_value_checked(loader):
    swept = {"model.n_in": "4,16,64,256,1024", "dtype": "float32,float64"}
    values = swept_values(swept, [], loader)
    covering = covering_jobs(values, loader)
    assert len(covering) == 5
    assert {job[0] for job in covering} == set(values["model.n_in"])
    assert {job[1] for job in covering} == set(values["dtype"])


def test_a_sweep_without_jobs_has_none_to_check(loader):
    values = {"strategy": [], "dtype": ["dtype=float32"]}
    assert covering_jobs(values, loader) == []
    assert list_jobs(values) == []


def test_job_configs_are_composed_only_when_read_and_once(loader):
    from hydra import compose

    config = compose("config", ["+experiment=map"], return_hydra_config=True)
    values = swept_values(PARAMS, [], loader)
    configs = JobConfigs(loader, config, list_jobs(values))
    assert configs.composed == 0 and len(configs) == 90
    ninth = configs[8]  # the last key fastest: map_dense, n_in=16, float32, auto_eager
    assert configs[8] is ninth and configs.composed == 1
    assert (ninth.model.name, ninth.model.n_in) == ("map_dense", 16)
    assert str(ninth.dtype.name) == "float32"
    assert "strategy=auto_eager" in configs.jobs[8]


def test_a_results_folder_with_a_row_or_a_claim_is_asked_and_an_empty_one_is_not(tmp_path):
    results = tmp_path / "results"
    assert not anything_recorded({results})  # not made yet
    results.mkdir()
    assert not anything_recorded({results})
    (results / CLAIMS).mkdir()
    assert not anything_recorded({results})
    (results / CLAIMS / "0123abcd").write_text("{}")
    assert anything_recorded({results})
    other = tmp_path / "other"
    other.mkdir()
    (other / "jacrev_0123abcd_20261126.parquet").write_bytes(b"")
    assert anything_recorded({tmp_path / "nowhere", other})
