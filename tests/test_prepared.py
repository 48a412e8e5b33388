"""The prepared-Jacobian contract: set up once, right at every point, refused elsewhere."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import jacbench
from helpers.cli import compose_job
from helpers.contract import rel_err
from jacbench import testing
from jacbench.benchmark.problems import ModelKeys, build_problem
from jacbench.core.errors import ConfigError, PointMismatch
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind, Mode, StrategySkip
from jacbench.run.config import conf_dir
from jacbench.timing.measure import torch_threads

CPU = torch.device("cpu")
REGISTRY = load_registry()
ALL = sorted(REGISTRY.strategies)
MLP = {"_target_": "jacbench.models.mlp.MLP", "n_in": 5, "hidden": 7, "n_out": 4, "depth": 2}


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("model", sorted(testing.PROBLEMS))
def test_every_strategy_is_right_at_two_points(name, model):
    """The contract's check (jacbench.testing, also ``python -m jacbench.check``): a skip
    only where the contract allows one, else right at two points."""
    try:
        testing.right_at_two_points(name, model, REGISTRY)
    except StrategySkip:
        spec = REGISTRY.get(name)
        assert spec.mode is Mode.ANALYTIC or ("batch" in model and not spec.batch)


@pytest.mark.parametrize("name", ALL)
def test_every_strategy_refuses_a_point_of_another_shape(name):
    try:
        testing.refuses_another_point(name, REGISTRY)
    except StrategySkip:
        assert REGISTRY.get(name).mode is Mode.ANALYTIC


def test_a_point_unlike_the_prepared_one_is_refused_naming_both():
    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    prep = REGISTRY.prepare("jacrev", problem)
    with pytest.raises(PointMismatch, match=r"shape \(5,\), float32 on cpu; got shape \(6,\)"):
        prep(torch.zeros(6))
    with pytest.raises(PointMismatch, match="got shape .5,., float64"):
        prep(torch.zeros(5, dtype=torch.float64))
    with pytest.raises(PointMismatch, match="on meta"):
        prep(torch.zeros(5, device="meta"))


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
    return layers.double()


@pytest.mark.parametrize(
    "name", [n for n in ALL if REGISTRY.get(n).kind is not Kind.NEGATIVE_CONTROL]
)
def test_every_strategy_through_the_library_on_a_module_at_two_points(name):
    model = net().train()  # parameters require grad, as in a user's training code
    x0 = torch.randn(3, dtype=torch.float64)
    try:
        prep = jacbench.prepare(model, x0, name, **REGISTRY.get(name).test_options)
    except StrategySkip:
        assert name == "analytic"
        return
    for x in (x0, x0 + 1.0):
        jac = prep(x)
        assert jac.shape == (2, 3) and not jac.requires_grad
        tol = testing.TOLERANCE[REGISTRY.get(name).kind]
        assert rel_err(jac, torch.func.jacrev(model)(x).detach()) < tol
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_library_keeps_the_users_shapes_and_prepares_once(monkeypatch):
    spec, setups = REGISTRY.get("jacfwd"), []

    def counting_setup(problem, opts):
        setups.append(problem)
        return spec.setup(problem, opts)

    monkeypatch.setitem(REGISTRY.strategies, "jacfwd", replace(spec, setup=counting_setup))
    f = lambda v: (v.sin() * 2).sum(0)  # noqa: E731
    x = torch.randn(4, 3)
    prep = jacbench.prepare(f, x, "jacfwd")
    for k in range(3):
        point = x + k
        assert torch.allclose(prep(point), torch.func.jacrev(f)(point), atol=1e-6)
    assert prep(x).shape == (3, 4, 3) and len(setups) == 1


def test_flat_params_round_trip_and_parameter_jacobian():
    model = net()
    params = jacbench.FlatParams(model)
    theta = params.vector()
    assert theta.shape == (sum(p.numel() for p in model.parameters()),)
    inputs = torch.randn(10, 3, dtype=torch.float64)
    assert torch.equal(params.call(theta, inputs), model(inputs))
    prep = jacbench.prepare(lambda t: params.call(t, inputs).reshape(-1), theta, "jacfwd")
    jac = prep(theta * 0.5)
    expected = torch.func.jacrev(lambda t: params.call(t, inputs).reshape(-1))(theta * 0.5)
    assert rel_err(jac, expected) < 1e-12
    params.load_(theta * 0.5)
    assert torch.allclose(params.vector(), theta * 0.5)
    with pytest.raises(ValueError, match=r"theta must have shape \(\d+,\)"):
        params.unflatten(theta[:-1])


def test_auto_declares_its_choice_as_a_typed_field():
    problem = build_problem(MLP, torch.float32, CPU, seed=0)
    prep = REGISTRY.prepare("auto", problem, calibrate=False, compile=False)
    assert prep.strategy == "auto"
    assert prep.info.chosen_strategy == "jacrev"  # M=4 < N=5: reverse mode by the rule
    assert jacbench.PrepInfo().chosen_strategy == ""


def model_names() -> list[str]:
    return sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml") if p.stem != "custom")


@pytest.mark.parametrize("model", model_names())
def test_batch_is_a_key_of_every_model(model):
    cfg = compose_job(f"model={model}", "model.batch=3")
    keys, _ = ModelKeys.split(dict(cfg.model))
    assert keys.batch == 3
    if keys.wrt == "params":
        with pytest.raises(ConfigError, match="batch > 1 needs wrt=input"):
            build_problem(dict(cfg.model), torch.float32, CPU, seed=0)
    elif model not in ("seed001_mse_sum",):  # 16800 inputs: built, but not needed here
        problem = build_problem(dict(cfg.model), torch.float32, CPU, seed=0)
        assert problem.batch == 3 and problem.x.shape == (3, problem.n_in)


def test_custom_models_are_named_after_their_target():
    names = set()
    for target in ("jacbench.models.toy.Reciprocal", "jacbench.models.toy.CatPoly"):
        cfg = compose_job("model=custom", f"model._target_={target}")
        keys, _ = ModelKeys.split(dict(cfg.model))
        names.add(keys.name)
    assert names == {"Reciprocal", "CatPoly"}


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"input_shape": "abc"}, "model.input_shape must be a list of positive integers"),
        ({"input_shape": [2.5]}, "model.input_shape must be a list of positive integers"),
        ({"input_shape": [-3, -2]}, "model.input_shape must be a list of positive integers"),
        ({"batch": 0}, "model.batch must be a positive integer"),
        ({"batch": 2.5}, "model.batch must be a positive integer"),
        ({"wrt": "weights"}, "valid choices: input, params"),
    ],
)
def test_bad_model_keys_get_one_clear_line(values, match):
    with pytest.raises(ConfigError, match=match):
        ModelKeys.split({"_target_": "x.Y", **values})


def test_threads_are_restored_after_a_job():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """jacbench modules imported at the top level of ``path`` (not under TYPE_CHECKING, not
    inside functions: those cannot form a cycle at import time). ``from pkg import sub``
    counts as importing ``pkg.sub`` where that is one of ``modules``."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jacbench"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("jacbench")}
    return names


def test_no_import_cycles_between_modules():
    src = Path(jacbench.__file__).parent
    paths = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(src.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: module_imports(path, set(paths)) - {name} for name, path in paths.items()}
    assert graph["jacbench.core.errors"] == set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, f"import cycle: {' -> '.join((*stack, name))}"
        for dep in graph.get(name, ()):
            if dep != "jacbench":  # the package's __init__ re-exports the library only
                visit(dep, (*stack, name))

    for name in graph:
        visit(name, ())


@pytest.mark.parametrize("name", ALL)
def test_every_strategy_says_what_it_built_and_with_which_options(name):
    """Issue 44: ``prep.info`` was empty for every strategy but auto."""
    problem = build_problem(MLP, torch.float64, CPU, seed=0)
    spec = REGISTRY.get(name)
    try:
        prep = REGISTRY.prepare(name, problem, **spec.test_options)
    except StrategySkip:
        assert spec.mode is Mode.ANALYTIC
        return
    built = prep.info.built
    if prep.info.chosen_strategy:  # auto: what it built is its choice's, with its options
        assert built.startswith(REGISTRY.get(prep.info.chosen_strategy).doc.rstrip(".")), built
        return
    assert built and built.startswith(spec.doc.rstrip(".")), built
    options = dataclasses.asdict(spec.make_options(spec.test_options))
    assert all(f"{key}={value}" in built for key, value in options.items()), built
