"""Absurd model sizes are refused before the model is built (issue 60: ``model.hidden=1e12``
gave torch's raw ``must be tuple of ints``, and ``1000000000000`` the allocator's
``can't allocate memory``)."""

from __future__ import annotations

import pytest
import torch

from helpers.cli import compose_job
from jacbench.benchmark.model_size import check_model_fits
from jacbench.benchmark.problems import ModelKeys, build_problem
from jacbench.core.errors import ConfigError
from jacbench.run.identity import plain


def _model(*overrides: str) -> dict:
    return plain(compose_job("model=mlp", *overrides).model)


def _build(cfg: dict):
    import hydra.utils

    return hydra.utils.instantiate(cfg, _convert_="all")


@pytest.mark.parametrize(
    ("hidden", "said"),
    [
        ("1e12", "model.hidden=1e+12) is larger than any memory can hold"),
        ("1000000000000", "is larger than any memory can hold"),
        ("1e2", "model.hidden=100: a size must be a whole number"),
    ],
)
def test_an_absurd_or_float_size_is_one_line_before_building(hidden, said):
    cfg = _model(f"model.hidden={hidden}")
    with pytest.raises(ConfigError, match=r"^(not run: )?model 'mlp'") as caught:
        build_problem(cfg, torch.float32, torch.device("cpu"), 0)
    assert said in str(caught.value)


def test_a_model_over_the_memory_budget_is_refused_with_its_size():
    _, cfg = ModelKeys.split(_model("model.hidden=512"))
    check_model_fits(_build, cfg, "mlp", torch.float64)  # fits in this machine's memory
    with pytest.raises(ConfigError, match="parameters and buffers, about .* GiB to build in"):
        check_model_fits(_build, cfg, "mlp", torch.float64, room=1024)


def test_the_probe_leaves_the_problem_as_it_was():
    cfg = _model()
    first = build_problem(cfg, torch.float32, torch.device("cpu"), 3)
    again = build_problem(cfg, torch.float32, torch.device("cpu"), 3)
    assert torch.equal(first.x, again.x)
    for a, b in zip(first.module.parameters(), again.module.parameters(), strict=True):
        assert torch.equal(a, b) and a.device.type == "cpu"
