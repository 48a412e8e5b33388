"""Exact Jacobians at finite-difference cost? Interleaved timing, one process, float32,
1 thread.

For seed004_lm, seed004_small and three larger shapes (M >> N, N >> M, square) it prepares
the batched forward difference (fd_forward), PyTorch's default (functional), the exact
strategies (eager and compiled) and `auto`, then times them in interleaved rounds (each
round times every strategy once, so drift of a noisy machine hits all alike) and prints the
median over rounds and ratios. The last line is the summary for seed004_lm:

    best_exact/fd_batched=X auto/best_exact=Y functional/auto=Z

Usage: python scripts/bench_exact_vs_fd.py [--rounds 7] [--min-run-time 0.02]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import yaml
from torch.utils import benchmark

from jacbench.core.problem import Problem, build_problem
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind
from jacbench.run.config import conf_dir

FD = "fd_forward"  # batched: one forward pass over all perturbed points
DEFAULT = "functional"
STRATEGIES = [
    FD,
    DEFAULT,
    "functional_vectorized",
    "functional_forward",
    "grads_batched",
    "jacrev",
    "jacfwd",
    "jacrev_compiled",
    "jacfwd_compiled",
    "auto",
]


def model(file: str, **changes: object) -> dict:
    cfg = yaml.safe_load((conf_dir() / "model" / f"{file}.yaml").read_text())
    return {**cfg, **changes}


SHAPES = {
    "seed004_lm": model("seed004_lm"),
    "seed004_small": model("seed004_small"),
    "tall M>>N": model("mlp", n_in=8, hidden=64, n_out=1024, name="mlp_tall"),
    "wide N>>M": model("mlp", n_in=1024, hidden=64, n_out=8, name="mlp_wide"),
    "square": model("mlp", n_in=256, hidden=256, n_out=256, name="mlp_square"),
}


def prepare(problem: Problem) -> tuple[dict, dict, dict]:
    registry = load_registry()
    jacs, setup, chosen = {}, {}, {}
    for name in STRATEGIES:
        start = time.perf_counter()
        prep = registry.prepare(name, problem)
        prep(problem.x)
        setup[name] = time.perf_counter() - start
        jacs[name] = lambda prep=prep: prep(problem.x)
        chosen[name] = prep.info.chosen_strategy
    return jacs, setup, chosen


def interleaved(jacs: dict, rounds: int, min_run_time: float) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in jacs}
    names = list(jacs)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
            timer = benchmark.Timer(stmt="jac()", globals={"jac": jacs[name]}, num_threads=1)
            samples[name].append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-run-time", type=float, default=0.02)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", FutureWarning)
    registry = load_registry()
    summary = {}
    print(f"torch {torch.__version__}, float32, 1 thread, {args.rounds} interleaved rounds")
    for label, cfg in SHAPES.items():
        problem = build_problem(cfg, torch.float32, torch.device("cpu"), seed=0)
        jacs, setup, chosen = prepare(problem)
        medians = interleaved(jacs, args.rounds, args.min_run_time)
        exact = {
            n: t for n, t in medians.items() if registry.get(n).kind is Kind.EXACT and n != "auto"
        }
        best = min(exact, key=exact.get)
        print(f"\n{label}: N={problem.n_in}, M={problem.n_out}  (auto chose {chosen['auto']})")
        print(
            f"{'strategy':24s} {'median [ms]':>12s} {'/ fd_batched':>13s} "
            f"{'/ best exact':>13s} {'setup+1st [s]':>14s}"
        )
        for name in sorted(medians, key=medians.get):
            t = medians[name]
            print(
                f"{name:24s} {t * 1e3:12.4f} {t / medians[FD]:13.2f} "
                f"{t / exact[best]:13.2f} {setup[name]:14.3f}"
            )
        ratios = {
            "best_exact/fd_batched": exact[best] / medians[FD],
            "auto/best_exact": medians["auto"] / exact[best],
            "functional/auto": medians[DEFAULT] / medians["auto"],
        }
        print(f"best exact: {best};  " + "  ".join(f"{k}={v:.2f}" for k, v in ratios.items()))
        summary[label] = ratios
    worst_auto = max(r["auto/best_exact"] for r in summary.values())
    print(f"\nacross shapes: worst auto/best_exact={worst_auto:.2f} (target <= 1.15)")
    lm = summary["seed004_lm"]
    print("targets on seed004_lm: best_exact/fd_batched <= 1.2, functional/auto >= 50")
    print(" ".join(f"{k}={v:.2f}" for k, v in lm.items()))


if __name__ == "__main__":
    main()
