"""The jacbench contract as the tests use it: its problems, a strategy prepared with its
declared test options, and whether a strategy compiles."""

from __future__ import annotations

import sys

import torch

from jacbench import testing

# The benchmark's models of the contract's shapes (jacbench.testing's problems are plain torch):
# a compiled strategy's graph of one problem is then compiled once a session (inductor's FX
# graph cache, on disk), not once per file.
CONTRACT_MLP = {
    "_target_": "jacbench.models.mlp.MLP",
    "n_in": 6,
    "hidden": 9,
    "n_out": 4,
    "depth": 2,
}
CONTRACT_RECIPROCAL = {"_target_": "jacbench.models.toy.Reciprocal", "n": 5}


def compiles(name: str, options: dict[str, object] | None = None) -> bool:
    """Whether a registered strategy's setup runs torch.compile (by default: its defaults)."""
    from jacbench.core.registry import load_registry
    from jacbench.strategies.compiled import CompileOptions

    opts = load_registry().get(name).make_options(dict(options or {}))
    return isinstance(opts, CompileOptions) or bool(getattr(opts, "compile", False))


def frames_compiled() -> int:
    """Frames dynamo has processed and graphs compiled without it (torch._inductor.compile
    of a traced graph) in this process (0 before torch._dynamo is imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    return sum(utils.counters["frames"].values()) + utils.counters["aot_autograd"]["total"]


rel_err, jacobian_at = testing.rel_err, testing.jacobian_at


def contract_prepare(name: str, problem, **options):
    """A registered strategy prepared as the contract checks prepare it (its test_options)."""
    from jacbench.core.registry import load_registry

    registry = load_registry()
    return registry.prepare(name, problem, **{**registry.get(name).test_options, **options})


def jacobian(name: str, problem, **options) -> torch.Tensor:
    """A registered strategy's Jacobian at the problem's own point, as the runner times it."""
    return contract_prepare(name, problem, **options)(problem.x)


def compiles_or_calibrates(name: str) -> bool:
    """Whether a strategy's default setup runs torch.compile or a calibration (seconds each):
    the registry-wide tests run those on the small models, with one full ``auto`` test."""
    from jacbench.core.registry import load_registry

    return compiles(name) or bool(
        getattr(load_registry().get(name).make_options({}), "calibrate", False)
    )
