"""Exact Jacobians at finite-difference cost? CPU time per call, interleaved, 1 thread.

For seed004_lm, seed004_small, three larger shapes (M >> N, N >> M, square), the CNN and
the transformer block of the zoo it prepares
the batched forward difference (fd_forward), PyTorch's default (functional), the exact
strategies (eager and compiled), a hand-built ``torch.compile(torch.func.jacfwd(f))``, the
default ``auto`` after warm-up (``settled()``: its compiled tier) and ``auto`` with
``upfront=True``, then times them by CPU time in interleaved rounds
(``jacbench.core.interleaved``: each round times every one once, so drift of a noisy
machine hits all alike), one thread pinned to one core (``--core``: unpinned, XLA's time
doubled here), and prints medians and ratios, per dtype. On seed004_lm it adds JAX's
``jit(jacfwd)`` of the same function (same weights, same samples) where JAX is installed,
and the first Jacobian of a fresh process (``--first-rounds`` alternating rounds of fresh
processes, CPU-s above ``import torch``): auto's ``prepare`` and first call, torch.func's
first ``jacfwd``, and JAX's import and first ``jit(jacfwd)`` call. The load is printed.

Usage: python scripts/bench_exact_vs_fd.py [--dtypes float64 float32] [--budget 0.3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable

import torch
import yaml

import jacbench
from jacbench.benchmark.problems import build_problem
from jacbench.core.interleaved import seconds_per_call
from jacbench.core.problem import Problem
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind, StrategySkip
from jacbench.run.config import conf_dir
from jacbench.strategies.compiled import autograd_state_kept

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
    "double_backward": ("double_backward", {}),  # auto's first tier (forward side)
    "double_backward_batched": ("double_backward", {"batched": True}),  # its second
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
        with autograd_state_kept():  # a failed compile left inference mode on (torch 2.13)
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


def per_call(dtype: torch.dtype, budget: float, shapes: list[str] | None) -> dict:
    """The per-call table of every shape in ``dtype``; the ratios of each shape."""
    registry = load_registry()
    summary = {}
    print(f"\ntorch {torch.__version__}, {dtype}, 1 thread, CPU time, interleaved rounds")
    for label, cfg in SHAPES.items():
        if shapes and label not in shapes:
            continue
        problem = build_problem(cfg, dtype, torch.device("cpu"), seed=0)
        calls, setup, chosen = prepare(problem)
        jax_call = jax_jacfwd(problem) if label == "seed004_lm" else None
        if jax_call is not None:
            calls["jax_jit_jacfwd"], setup["jax_jit_jacfwd"] = jax_call, float("nan")
        names = list(calls)
        medians = dict(zip(names, seconds_per_call([calls[n] for n in names], budget), strict=True))
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
    return summary


# The first Jacobian of a fresh process, each way: CPU-s from after ``import torch`` (and
# building seed004_lm's problem) to the first Jacobian, its own imports included.
FIRST: dict[str, Callable[[Problem], object]] = {
    "auto": lambda problem: jacbench.prepare(problem.f, problem.x)(problem.x),
    "torch_func_jacfwd": lambda problem: torch.func.jacfwd(problem.f)(problem.x),
    "jax_jit_jacfwd": lambda problem: jax_jacfwd(problem)(),
}
HEAVY = ("torch._dynamo", "sympy", "torch._inductor", "jax")  # said where already imported


def first_call(way: str, dtype: torch.dtype) -> float:
    """The child: one way's first Jacobian in this (fresh) process, CPU-s."""
    problem = build_problem(SHAPES["seed004_lm"], dtype, torch.device("cpu"), seed=0)
    preloaded = [m for m in HEAVY if m in sys.modules]
    if preloaded:
        raise SystemExit(f"imported before the first call is timed: {preloaded}")
    start = time.process_time()
    FIRST[way](problem)
    return time.process_time() - start


def first_calls(dtype: str, rounds: int, core: int) -> dict[str, float]:
    """Median CPU-s of each way's first Jacobian, over ``rounds`` alternating rounds of
    fresh processes (each with empty jacbench and inductor caches)."""
    ways = [w for w in FIRST if w != "jax_jit_jacfwd" or importlib.util.find_spec("jax")]
    times: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(rounds):
        for way in ways[r % len(ways) :] + ways[: r % len(ways)]:
            env = {**os.environ, "JACBENCH_CACHE_DIR": "", "OMP_NUM_THREADS": "1"}
            command = [sys.executable, __file__, "--first", way, "--dtypes", dtype]
            command += ["--core", str(core)]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{way} failed:\n{done.stderr[-2000:]}")
            times[way].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {w: statistics.median(t) for w, t in times.items()}


def pin(core: int) -> None:
    """Run on one core (where the OS lets a process choose): XLA's CPU time doubled here
    when its process moved between cores, torch's hardly."""
    if hasattr(os, "sched_setaffinity") and core in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {core})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dtypes", nargs="+", choices=["float32", "float64"], default=["float64", "float32"]
    )
    parser.add_argument("--budget", type=float, default=0.3, help="CPU-s timed per way")
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), help="default: all")
    parser.add_argument("--core", type=int, default=0, help="the core everything runs on")
    parser.add_argument("--first-rounds", type=int, default=5, help="0: no first calls")
    parser.add_argument("--first", help=argparse.SUPPRESS)  # the child: one first Jacobian
    args = parser.parse_args()
    pin(args.core)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", FutureWarning)
    if args.first:
        print(json.dumps(first_call(args.first, getattr(torch, args.dtypes[0]))))
        return
    load = os.getloadavg()
    summary = {d: per_call(getattr(torch, d), args.budget, args.shapes) for d in args.dtypes}
    first = {}
    if args.first_rounds and (not args.shapes or "seed004_lm" in args.shapes):
        first = {d: first_calls(d, args.first_rounds, args.core) for d in args.dtypes}
    print()
    for dtype, by_shape in summary.items():
        worst = max(r["auto/best_exact"] for r in by_shape.values())
        print(f"[{dtype}] across shapes: worst auto/best_exact={worst:.2f} (target <= 1.1)")
        if "seed004_lm" in by_shape:
            print(
                f"[{dtype}] seed004_lm targets: auto/jax_jit_jacfwd <= 1.0, "
                "auto/hand_compiled_jacfwd <= 0.5: "
                + " ".join(f"{k}={v:.2f}" for k, v in by_shape["seed004_lm"].items())
            )
    for dtype, times in first.items():
        print(
            f"[{dtype}] seed004_lm first Jacobian of a fresh process, CPU-s above import "
            f"torch (median of {args.first_rounds}; target auto <= 0.3): "
            + " ".join(f"{k}={v:.3f}" for k, v in times.items())
        )
    print(f"load average {load} before, {os.getloadavg()} after")


if __name__ == "__main__":
    main()
