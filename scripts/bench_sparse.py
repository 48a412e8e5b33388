"""Sparse versus dense Jacobians on banded PDE residuals: interleaved timing, one process,
float32, 1 thread.

For burgers (tridiagonal) at n = 1024, 4096, 16384 and the 2-D Laplacian residual (5-point
stencil) on a 64 x 64 grid it prepares the dense exact strategies (jacfwd, jacrev,
jacfwd_compiled), the batched forward difference (fd_forward) and the sparse ones (compiled,
returning CSR; eager, returning the dense matrix; sparse_fd), then times them in interleaved
rounds (each round times every strategy once, rotating the order, so drift of a noisy
machine hits all alike) and prints per problem: the median per call, ratios to the best dense
exact strategy, to fd_forward and to one batched forward pass over n_colors points (the
floor for n_colors passes), peak memory of one call, setup + first call, and the relative
error against the float64 analytic Jacobian. The last lines are the targets for burgers
n=4096:

    dense/sparse >= 300, sparse/f(colours) <= 3, error level of the dense exact strategies

and what `auto` (defaults: calibration, compile) chooses on burgers n=4096 and on the
default MLP (a sparse strategy, a dense one).

Usage: python scripts/bench_sparse.py [--rounds 3] [--min-run-time 0.05] [--sizes 1024,4096]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import torch
from torch.utils import benchmark

from jacbench.core.problem import Problem, build_problem
from jacbench.core.registry import load_registry
from jacbench.timing.measure import peak_memory

CPU = torch.device("cpu")
DENSE_EXACT = {"jacfwd": {}, "jacrev": {}, "jacfwd_compiled": {}}
FD = "fd_forward"
SPARSE = {
    "sparse_jacfwd[compile,csr]": ("sparse_jacfwd", {"compile": True, "output": "csr"}),
    "sparse_jacrev[compile,csr]": ("sparse_jacrev", {"compile": True, "output": "csr"}),
    "sparse_jacfwd[dense]": ("sparse_jacfwd", {}),
    "sparse_fd[csr]": ("sparse_fd", {"output": "csr"}),
}
BEST_SPARSE = ("sparse_jacfwd[compile,csr]", "sparse_jacrev[compile,csr]")
SLOW_CALL_S = 0.5  # calls slower than this are timed once per round


def problems(sizes: list[int]) -> dict[str, dict]:
    out = {f"burgers n={n}": {"_target_": "jacbench.models.pde.Burgers1D", "n": n} for n in sizes}
    out["laplacian2d 64x64"] = {"_target_": "jacbench.models.pde.Laplacian2D", "n": 64}
    return out


def time_call(call: Callable[[], torch.Tensor], min_run_time: float) -> float:
    start = time.perf_counter()
    call()
    once = time.perf_counter() - start
    if once > SLOW_CALL_S:
        return once
    timer = benchmark.Timer(stmt="call()", globals={"call": call}, num_threads=1)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def prepare_all(problem: Problem) -> tuple[dict, dict, dict]:
    """(calls, setup + first call seconds, n_colors) per label."""
    registry = load_registry()
    entries = {n: (n, o) for n, o in DENSE_EXACT.items()} | {FD: (FD, {})} | SPARSE
    calls, setup, colors = {}, {}, {}
    for label, (name, options) in entries.items():
        start = time.perf_counter()
        prep = registry.prepare(name, problem, **options)
        prep(problem.x)
        setup[label] = time.perf_counter() - start
        calls[label] = lambda prep=prep: prep(problem.x)
        colors[label] = prep.info.n_colors
    return calls, setup, colors


def rel_error(jac: torch.Tensor, reference: torch.Tensor) -> float:
    dense = jac.to_dense() if jac.layout != torch.strided else jac
    return float(torch.linalg.norm(dense.double() - reference) / torch.linalg.norm(reference))


def run_problem(label: str, cfg: dict, rounds: int, min_run_time: float) -> dict[str, float]:
    problem = build_problem(cfg, torch.float32, CPU, seed=0)
    reference = problem.analytic(problem.x.double())
    calls, setup, colors = prepare_all(problem)
    n_colors = colors[BEST_SPARSE[0]]
    points = problem.x.expand(n_colors, -1).clone()
    calls[f"f({n_colors} points)"] = lambda: problem.f_many(points)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samples[name].append(time_call(calls[name], min_run_time))
    median = {name: statistics.median(v) for name, v in samples.items()}
    best_dense = min(DENSE_EXACT, key=median.get)
    best_sparse = min(BEST_SPARSE, key=median.get)
    floor = f"f({n_colors} points)"
    print(f"\n{label}: N=M={problem.n_in}, {n_colors} colours, best dense exact: {best_dense}")
    header = ("strategy", "median [ms]", "/best dense", "/fd_forward", "/f(colours)")
    print(f"{header[0]:28s}" + "".join(f"{h:>13s}" for h in header[1:]), end="")
    print(f"{'peak [MB]':>11s}{'setup+1st [s]':>15s}{'rel err':>10s}")
    for name in sorted(median, key=median.get):
        t = median[name]
        is_jac = name != floor
        peak = peak_memory(calls[name], CPU) / 2**20
        err = f"{rel_error(calls[name](), reference):10.1e}" if is_jac else f"{'-':>10s}"
        first = f"{setup[name]:15.3f}" if is_jac else f"{'-':>15s}"
        print(
            f"{name:28s}{t * 1e3:13.4f}{t / median[best_dense]:13.2e}{t / median[FD]:13.2e}"
            f"{t / median[floor]:13.2f}{peak:11.2f}{first}{err}"
        )
    return {
        "dense/sparse": median[best_dense] / median[best_sparse],
        "fd_forward/sparse": median[FD] / median[best_sparse],
        "sparse/f(colours)": median[best_sparse] / median[floor],
        "dense_err": rel_error(calls[best_dense](), reference),
        "sparse_err": rel_error(calls[best_sparse](), reference),
        "dense_peak/sparse_peak": peak_memory(calls[best_dense], CPU)
        / max(1, peak_memory(calls[best_sparse], CPU)),
    }


def auto_choices() -> None:
    """What auto chooses where a pattern is declared (burgers) and where none is (mlp)."""
    registry = load_registry()
    for label, cfg in {
        "burgers n=4096": {"_target_": "jacbench.models.pde.Burgers1D", "n": 4096},
        "mlp 32 -> 48": {"_target_": "jacbench.models.mlp.MLP"},
    }.items():
        problem = build_problem(cfg, torch.float32, CPU, seed=0)
        start = time.perf_counter()
        info = registry.prepare("auto", problem).info
        print(
            f"auto on {label}: chose {info.chosen_strategy} (n_colors={info.n_colors}), "
            f"prepare {time.perf_counter() - start:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-run-time", type=float, default=0.05)
    parser.add_argument("--sizes", default="1024,4096,16384", help="burgers sizes, comma-separated")
    parser.add_argument("--no-auto", action="store_true", help="skip what auto chooses")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # inductor's FutureWarnings, CSR's beta notice
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"torch {torch.__version__}, float32, 1 thread, {args.rounds} interleaved rounds")
    summary = {
        label: run_problem(label, cfg, args.rounds, args.min_run_time)
        for label, cfg in problems(sizes).items()
    }
    print()
    for label, ratios in summary.items():
        print(f"{label:20s} " + "  ".join(f"{k}={v:.3g}" for k, v in ratios.items()))
    if "burgers n=4096" in summary:
        print("targets on burgers n=4096: dense/sparse >= 300, sparse/f(colours) <= 3, ")
        print("sparse_err at the level of dense_err, dense_peak/sparse_peak >> 1")
    if not args.no_auto:
        auto_choices()


if __name__ == "__main__":
    main()
