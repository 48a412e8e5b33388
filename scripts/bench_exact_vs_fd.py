"""Exact Jacobians at finite-difference cost? CPU time per call, interleaved, 1 thread.

For seed004_lm, seed004_small, three larger shapes (M >> N, N >> M, square), the CNN and
the transformer block of the zoo it prepares
the batched forward difference (fd_forward), PyTorch's default (functional), the exact
strategies (eager and compiled), a hand-built ``torch.compile(torch.func.jacfwd(f))``, the
default ``auto`` after warm-up (``settled()``: its compiled tier) and ``auto`` with
``upfront=True``, then times them by CPU time in interleaved rounds
(``jacbench.timing.interleaved``: each round times every one once, so drift of a noisy
machine hits all alike) and prints medians and ratios. On seed004_lm it adds JAX's
``jit(jacfwd)`` of the same function (same weights, same samples) where JAX is installed.

Usage: python scripts/bench_exact_vs_fd.py [--dtype float32|float64] [--budget 0.3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
import warnings
from collections.abc import Callable

import torch
import yaml

from jacbench.core.problem import Problem, build_problem
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind, StrategySkip
from jacbench.run.config import conf_dir
from jacbench.timing.interleaved import seconds_per_call

FD = "fd_forward"  # batched: one forward pass over all perturbed points
DEFAULT = "functional"
HAND = "hand_compiled_jacfwd"
# label: (registered strategy, options)
STRATEGIES: dict[str, tuple[str, dict]] = {
    FD: (FD, {}),
    DEFAULT: (DEFAULT, {}),
    "functional_vectorized": ("functional_vectorized", {}),
    "grads_batched": ("grads_batched", {}),
    "jacrev": ("jacrev", {}),
    "jacfwd": ("jacfwd", {}),
    "jacrev_compiled": ("jacrev_compiled", {}),
    "jacfwd_compiled": ("jacfwd_compiled", {}),
    "jacfwd_folded": ("jacfwd_folded", {}),
    "jacfwd_folded_eager": ("jacfwd_folded", {"compile": False}),
    "auto": ("auto", {}),
    "auto_upfront": ("auto", {"upfront": True}),
}


def model(file: str, **changes: object) -> dict:
    cfg = yaml.safe_load((conf_dir() / "model" / f"{file}.yaml").read_text())
    return {**cfg, **changes}


SHAPES = {
    "seed004_lm": model("seed004_lm"),
    "seed004_small": model("seed004_small"),
    "tall M>>N": model("mlp", n_in=8, hidden=64, n_out=1024, name="mlp_tall"),
    "wide N>>M": model("mlp", n_in=1024, hidden=64, n_out=8, name="mlp_wide"),
    "square": model("mlp", n_in=256, hidden=256, n_out=256, name="mlp_square"),
    "cnn": model("cnn"),
    "transformer": model("transformer"),
}


def prepare(problem: Problem) -> tuple[dict[str, Callable], dict[str, float], dict[str, str]]:
    """Each way, prepared and warmed up (auto settled in its last tier): its call, its setup
    time and what auto chose."""
    registry = load_registry()
    calls, setup, chosen = {}, {}, {}
    for label, (name, options) in STRATEGIES.items():
        start = time.perf_counter()
        try:
            prep = registry.prepare(name, problem, **options).settled()
        except StrategySkip as exc:  # e.g. torch.compile failing on this model
            print(f"{label}: skipped: {' '.join(str(exc).split())[:160]}")
            continue
        prep(problem.x)
        setup[label] = time.perf_counter() - start
        calls[label] = lambda prep=prep: prep(problem.x)
        chosen[label] = prep.info.chosen_strategy
    start = time.perf_counter()
    hand = torch.compile(torch.func.jacfwd(problem.f))
    try:
        hand(problem.x)
    except Exception as exc:  # torch 2.13's compiler fails on some models (the transformer)
        print(f"{HAND}: skipped: {type(exc).__name__}")
        return calls, setup, chosen
    setup[HAND] = time.perf_counter() - start
    calls[HAND] = lambda: hand(problem.x)
    return calls, setup, chosen


def jax_jacfwd(problem: Problem) -> Callable | None:
    """JAX's jit(jacfwd) of seed004_lm's residuals at the same point, or None without JAX.
    Checked against torch's Jacobian before it is timed."""
    if importlib.util.find_spec("jax") is None:
        return None
    os.environ.setdefault(  # one thread, as torch
        "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )
    import jax
    import jax.numpy as jnp

    if problem.dtype == torch.float64:
        jax.config.update("jax_enable_x64", True)
    net, targets = problem.module.net, problem.module.targets
    shapes = [tuple(p.shape) for p in net.parameters()]
    splits = torch.tensor([p.numel() for p in net.parameters()]).cumsum(0)[:-1].tolist()
    samples, targets = jnp.asarray(problem.input.numpy()), jnp.asarray(targets.numpy())

    def residuals(theta):
        w1, b1, w2, b2 = (
            c.reshape(s) for c, s in zip(jnp.split(theta, splits), shapes, strict=True)
        )
        return (jnp.tanh(samples @ w1.T + b1) @ w2.T + b2 - targets).reshape(-1)

    jac = jax.jit(jax.jacfwd(residuals))
    theta = jnp.asarray(problem.x.numpy())
    expected = torch.func.jacfwd(problem.f)(problem.x).numpy()
    scale = float(abs(expected).max())
    assert float(abs(jac(theta) - expected).max()) <= 1e3 * torch.finfo(problem.dtype).eps * scale
    return lambda: jac(theta).block_until_ready()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--budget", type=float, default=0.3, help="CPU-s timed per way")
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), help="default: all")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", FutureWarning)
    dtype = getattr(torch, args.dtype)
    registry = load_registry()
    summary = {}
    print(f"torch {torch.__version__}, {args.dtype}, 1 thread, CPU time, interleaved rounds")
    for label, cfg in SHAPES.items():
        if args.shapes and label not in args.shapes:
            continue
        problem = build_problem(cfg, dtype, torch.device("cpu"), seed=0)
        calls, setup, chosen = prepare(problem)
        jax_call = jax_jacfwd(problem) if label == "seed004_lm" else None
        if jax_call is not None:
            calls["jax_jit_jacfwd"], setup["jax_jit_jacfwd"] = jax_call, float("nan")
        names = list(calls)
        medians = dict(
            zip(names, seconds_per_call([calls[n] for n in names], args.budget), strict=True)
        )
        exact = {
            n: t
            for n, t in medians.items()
            if n in STRATEGIES
            and not n.startswith("auto")
            and registry.get(STRATEGIES[n][0]).kind is Kind.EXACT
        }
        best = min(exact, key=exact.get)
        print(f"\n{label}: N={problem.n_in}, M={problem.n_out}  (auto chose {chosen['auto']})")
        print(
            f"{'way':24s} {'CPU ms':>10s} {'/ fd_batched':>13s} {'/ best exact':>13s} "
            f"{'setup+1st s':>12s}"
        )
        for name in sorted(medians, key=medians.get):
            t = medians[name]
            print(
                f"{name:24s} {t * 1e3:10.4f} {t / medians[FD]:13.2f} "
                f"{t / exact[best]:13.2f} {setup[name]:12.3f}"
            )
        ratios = {
            "auto/best_exact": medians["auto"] / exact[best],
            "best_exact/fd_batched": exact[best] / medians[FD],
        }
        if HAND in medians:
            ratios["auto/hand_compiled_jacfwd"] = medians["auto"] / medians[HAND]
        if jax_call is not None:
            ratios["auto/jax_jit_jacfwd"] = medians["auto"] / medians["jax_jit_jacfwd"]
        print(f"best exact: {best};  " + "  ".join(f"{k}={v:.2f}" for k, v in ratios.items()))
        summary[label] = ratios
    worst = max(r["auto/best_exact"] for r in summary.values())
    print(f"\nacross shapes: worst auto/best_exact={worst:.2f} (target <= 1.1)")
    if "seed004_lm" in summary:
        print("targets on seed004_lm: auto/jax_jit_jacfwd <= 1.0, auto/hand_compiled_jacfwd <= 0.5")
        print(" ".join(f"{k}={v:.2f}" for k, v in summary["seed004_lm"].items()))


if __name__ == "__main__":
    main()
