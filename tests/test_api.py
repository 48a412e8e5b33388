"""jacbench.jacobian: the library call on a user's own function or module."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jacbench
from helpers.contract import compiles
from jacbench.core.errors import ConfigError
from jacbench.core.registry import load_registry


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 5))


@pytest.mark.parametrize("strategy", ["auto", "jacrev", "jacfwd", "autograd_loop", "functional"])
def test_jacobian_of_a_module_matches_torch_func(strategy):
    model, x = net(), torch.randn(3)
    expected = torch.func.jacrev(model)(x)
    options = load_registry().get(strategy).test_options
    jac = jacbench.jacobian(model, x, strategy, **options)
    assert jac.shape == (5, 3) and not jac.requires_grad
    assert torch.allclose(jac, expected, atol=1e-6)


def test_the_users_module_is_left_as_it_was():
    model = net().train()
    jacbench.jacobian(model, torch.randn(3), "jacrev")
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_shapes_follow_output_then_input_and_options_reach_the_strategy():
    x = torch.randn(2, 3, dtype=torch.float64)
    jac = jacbench.jacobian(lambda v: v.sin().sum(0), x, "fd_central", eps=1e-4)
    expected = torch.func.jacrev(lambda v: v.sin().sum(0))(x)
    assert jac.shape == (3, 2, 3)
    assert torch.allclose(jac, expected, atol=1e-8)
    coarse = jacbench.jacobian(lambda v: v.sin().sum(0), x, "fd_central", eps=1e-1)
    assert (coarse - expected).abs().max() > 100 * (jac - expected).abs().max()


def test_bad_strategy_or_option_is_refused_with_valid_names():
    with pytest.raises(ConfigError, match="valid strategies: .*jacrev"):
        jacbench.jacobian(torch.sin, torch.randn(3), "nosuch")
    with pytest.raises(ValueError, match="valid options"):
        jacbench.jacobian(torch.sin, torch.randn(3), "jacrev", chunksize=2)


def test_prepare_never_changes_the_callers_point():
    # issue 32: prepare called f on a view of x0, so a mutating f changed x0 by 3.0
    def mutating(v: torch.Tensor) -> torch.Tensor:
        v.add_(1.0)
        return v.sin()

    x0 = torch.zeros(3)
    for strategy in ("jacrev", "jacfwd", "fd_forward"):
        jacbench.prepare(mutating, x0, strategy)
    assert torch.equal(x0, torch.zeros(3))


def test_a_step_far_outside_a_sane_range_is_refused():
    # eps=1e300 returned an all-zero Jacobian
    for eps in (1e300, 0.5):
        with pytest.raises(ValueError, match="eps must be at most 0.1"):
            jacbench.prepare(net(), torch.randn(3), "fd_forward", eps=eps)


def test_a_nan_jacobian_comes_with_a_warning():
    prep = jacbench.prepare(lambda v: v.sqrt(), torch.ones(3), "jacrev")
    with pytest.warns(jacbench.NonFiniteJacobian, match="NaN or infinite entries of 9"):
        prep(-torch.ones(3))


def test_large_finite_entries_whose_sum_overflows_bring_no_warning():
    import warnings

    x = torch.ones(3, dtype=torch.float64)
    prep = jacbench.prepare(lambda v: 1e308 * v, x, "jacrev")  # diagonal: sum is inf
    with warnings.catch_warnings():
        warnings.simplefilter("error", jacbench.NonFiniteJacobian)
        assert torch.isfinite(prep(x)).all()


@pytest.mark.parametrize("strategy", ["jacfwd", "forward_ad_loop", "functional_forward"])
def test_forward_mode_prepared_jacobians_are_safe_from_two_threads(strategy):
    # issue 32: 50-55% of calls from 2 threads failed with "Nested forward mode AD is not
    # supported"
    import concurrent.futures

    model = net()
    prep = jacbench.prepare(model, torch.randn(3), strategy)
    points = [torch.randn(3) for _ in range(40)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(prep, points))
    for x, jac in zip(points, results, strict=True):
        assert torch.allclose(jac, torch.func.jacrev(model)(x), atol=1e-6)


@pytest.mark.compiles  # the default auto compiles once the calls have paid for it
@pytest.mark.slow
def test_the_documented_levenberg_marquardt_loop_runs_as_pasted_on_20_seeds():
    """Issue 33: the README's LM snippet failed in 18 of 20 seeds (a singular solve)."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "library.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "FlatParams" in b)
    setup = block[: block.index("for _ in range")]
    for seed in range(20):
        torch.manual_seed(seed)
        start: dict = {}
        exec(setup, start)  # the same problem, before the loop
        torch.manual_seed(seed)
        scope: dict = {}
        exec(block, scope)  # the snippet, verbatim
        final = float(scope["residuals"](scope["theta"]).square().sum())
        assert torch.isfinite(scope["theta"]).all() and final == pytest.approx(scope["loss"])
        assert final < 0.9 * start["loss"], seed  # the fit made progress


def test_finite_differences_of_a_plain_function_batch_their_points():
    """Issue 33: through prepare on a plain function, fd_forward called f once per point."""
    calls = []

    def f(x):
        calls.append(1)
        return torch.sin(x) * x.sum()

    x = torch.linspace(0.1, 1.0, 16, dtype=torch.float64)
    prep = jacbench.prepare(f, x, "fd_forward")
    prep(x)  # the first call also decides between vmap and a loop (a few calls of f)
    calls.clear()
    batched = prep(x)
    assert len(calls) <= 2  # one vmapped call for all 17 points (not 17 calls)
    looped = jacbench.prepare(f, x, "fd_forward_loop")(x)
    assert torch.allclose(batched, looped, rtol=0, atol=1e-12)
    assert torch.allclose(batched, torch.func.jacrev(f)(x), atol=1e-6)


def test_a_function_vmap_cannot_batch_still_loops():
    def f(x):  # .item() has no batching rule
        return x * float(x.sum().item())

    x = torch.linspace(0.1, 1.0, 5, dtype=torch.float64)
    jac = jacbench.prepare(f, x, "fd_forward")(x)
    assert torch.allclose(jac, jacbench.prepare(f, x, "fd_forward_loop")(x), atol=1e-12)


# The library (issue 45): core, strategies and api, apart from the benchmark. What it may import:
# itself, the standard library and these packages.
SRC = Path(jacbench.__file__).resolve().parent
LIBRARY = ("jacbench.core", "jacbench.strategies", "jacbench.api", "jacbench.testing")
LIBRARY += ("jacbench.check",)  # the plugin contract (issue 61): no Hydra either
LIBRARY_NEEDS = {"torch", "numpy", "scipy"}
# What a user of the library never pays for: the benchmark's packages and its dependencies.
BENCHMARK = ("jacbench.benchmark", "jacbench.run", "jacbench.record", "jacbench.report")
BENCHMARK += ("jacbench.timing", "jacbench.experiments", "jacbench.models")
BENCHMARK_NEEDS = ("hydra", "omegaconf", "mlflow", "pandas", "pyarrow")


def _within(module: str, packages: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _is_module(name: str) -> bool:
    path = SRC.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names (inside functions and under
    TYPE_CHECKING too); ``from pkg import mod`` names pkg.mod where that is a module."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, f"{path}: a relative import"
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            names |= {node.module, *(s for s in subs if s.startswith("jacbench") and _is_module(s))}
    return names


def _library_files() -> list[Path]:
    tops = [SRC / "api.py", SRC / "testing.py", SRC / "check.py"]
    return [*(SRC / "core").rglob("*.py"), *(SRC / "strategies").rglob("*.py"), *tops]


def test_the_library_imports_only_itself_the_standard_library_torch_numpy_and_scipy():
    """Issue 45: the benchmark's pieces (the reference, the config-to-Problem builder and its
    Hydra, the judging) lived in core; the library may not import them, not even lazily."""
    wrong = []
    for path in _library_files():
        for name in sorted(_imported(path)):
            top = name.split(".")[0]
            if top == "jacbench":
                ok = _within(name, LIBRARY)
            else:
                ok = top in sys.stdlib_module_names or top in LIBRARY_NEEDS
            if not ok:
                wrong.append(f"{path.relative_to(SRC.parent)} imports {name}")
    assert not wrong, "\n".join(wrong)


def _prepare_cases(compiling: bool) -> list[tuple[str, dict]]:
    registry = load_registry()
    cases = [(name, registry.get(name).test_options) for name in registry.names()]
    return [(name, opts) for name, opts in cases if compiles(name, opts) == compiling]


@pytest.mark.parametrize(
    "compiling", [False, pytest.param(True, marks=pytest.mark.compiles)], ids=["eager", "compiled"]
)
def test_preparing_with_every_strategy_loads_nothing_of_the_benchmark(compiling):
    """Issue 33: a fresh process's preparation is what a short fit pays for; jacbench.prepare
    imported Hydra (0.24 s) through the problem module, which the library does not use.
    Issue 45: nor the benchmark's packages, through any strategy (in a fresh process, as a user
    types it)."""
    cases = _prepare_cases(compiling)
    code = (
        "import json, sys, torch, jacbench\n"
        "f = lambda x: x.sin() * x[0]\n"
        "jacbench.prepare(f, torch.randn(3))(torch.randn(3))\n"
        "ran = []\n"
        f"for name, options in {cases!r}:\n"
        "    x = torch.randn(3, dtype=torch.float64)\n"
        "    try:\n"
        "        jacbench.prepare(f, x, name, **options)(x)\n"
        "    except jacbench.StrategySkip:\n"
        "        continue\n"
        "    ran.append(name)\n"
        "print(json.dumps({'ran': ran, 'modules': sorted(sys.modules)}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.splitlines()[-1])
    assert set(out["ran"]) == {name for name, _ in cases} - {"analytic"}  # f has no formula
    loaded = [m for m in out["modules"] if _within(m, BENCHMARK)]
    loaded += [m for m in out["modules"] if _within(m, BENCHMARK_NEEDS)]
    assert loaded == []
