"""A whole Levenberg-Marquardt fit of the seed004 problem, each method in a fresh process.

The forum thread behind seed004 fits an MLP 3-10-4 (84 parameters) to 144 samples (576
residuals) with Levenberg-Marquardt and found autograd's Jacobian 7-10x slower than a
finite-difference loop. Each method below runs the same fit (at most ``--iterations`` LM
iterations) in a process of its own, so no method pays another's one-time costs:

- ``fd_loop``: the thread's forward-difference loop (one forward pass per parameter);
- ``functional``: ``torch.autograd.functional.jacobian`` (PyTorch's default);
- ``compiled_jacfwd``: ``torch.compile(torch.func.jacfwd(residuals))``, built by hand;
- ``jacbench_auto``: ``jacbench.prepare(residuals, theta0)``, the default (tiered) auto;
- ``jacbench_auto_upfront``: ``upfront=True`` (compile and calibrate everything first);
- ``jacbench_auto_eager``: ``compile=False`` (eager candidates calibrated);
- peers a user would pick, where installed: ``torch_lm`` (torch-levenberg-marquardt, its
  defaults) and ``scipy_lm`` (SciPy's MINPACK ``least_squares(method="lm")`` on numpy
  residuals, finite differences inside).

Each runs with cold caches (new empty JACBENCH_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR) and
warm ones (folders an earlier, uncounted run of the same method filled), in alternating
rounds, one thread. ``floor`` is torch's own first ``torch.func`` call on the same function in
a fresh process; ``auto_after_floor`` pays that floor and then prepares auto in the same process
(what auto adds above it). The table gives medians over rounds of CPU time (and wall time) of the
preparation and the whole fit (preparation included, imports not), then the target ratios.

Run: ``python scripts/lm_fit.py [--rounds 3] [--iterations 300] [--dtype float64]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import jacbench

Jacobian = Callable[[torch.Tensor], torch.Tensor]
N_SAMPLES, SIZES = 144, (3, 10, 4)


def data(dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The seed004 network at its start and the samples and targets it is fitted to."""
    torch.manual_seed(0)
    samples = torch.rand(N_SAMPLES, SIZES[0], dtype=dtype) * 4 - 2
    teacher = nn.Sequential(nn.Linear(3, 10), nn.Tanh(), nn.Linear(10, 4)).to(dtype)
    with torch.no_grad():
        targets = teacher(samples) + 0.01 * torch.randn(N_SAMPLES, SIZES[2], dtype=dtype)
    net = nn.Sequential(nn.Linear(3, 10), nn.Tanh(), nn.Linear(10, 4)).to(dtype)
    return net, samples, targets


def fd_loop(residuals: Callable[[torch.Tensor], torch.Tensor]) -> Jacobian:
    """The thread's loop: perturb one parameter at a time, one forward pass each."""

    def jac(theta: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            base = residuals(theta)
            columns = []
            for j in range(theta.numel()):
                h = math.sqrt(torch.finfo(theta.dtype).eps) * max(1.0, abs(float(theta[j])))
                shifted = theta.clone()
                shifted[j] += h
                columns.append((residuals(shifted) - base) / h)
            return torch.stack(columns, dim=1)

    return jac


JACOBIANS: dict[str, Callable[[Callable, torch.Tensor], Jacobian]] = {
    "fd_loop": lambda r, theta0: fd_loop(r),
    "functional": lambda r, theta0: lambda t: torch.autograd.functional.jacobian(r, t),
    "compiled_jacfwd": lambda r, theta0: torch.compile(torch.func.jacfwd(r)),
    "jacbench_auto": lambda r, theta0: jacbench.prepare(r, theta0),
    "jacbench_auto_upfront": lambda r, theta0: jacbench.prepare(r, theta0, upfront=True),
    "jacbench_auto_eager": lambda r, theta0: jacbench.prepare(r, theta0, compile=False),
}
PEERS = {"torch_lm": "torch_levenberg_marquardt", "scipy_lm": "scipy"}
FLOOR = "floor"
FLOOR_THEN_AUTO = "auto_after_floor"  # the floor, then auto: what auto adds in that process


def levenberg_marquardt(residuals: Callable, jac: Jacobian, theta: torch.Tensor, iterations: int):
    """Plain LM with Marquardt's diagonal scaling, steps accepted only where they help;
    returns (theta, loss, iterations, Jacobian calls, CPU seconds in them)."""
    damping, n_jac, jac_s = 1e-3, 0, 0.0
    r = residuals(theta).detach()
    loss = float(r @ r)
    JTJ = g = None
    done = 0
    while done < iterations:
        done += 1
        if JTJ is None:
            start = time.process_time()
            J = jac(theta)
            jac_s += time.process_time() - start
            n_jac += 1
            JTJ, g = J.T @ J, J.T @ r  # kept while steps are rejected (only damping changes)
        A = JTJ + damping * torch.diag(JTJ.diagonal().clamp_min(1e-12))
        trial = theta + torch.linalg.solve(A, -g)
        r_trial = residuals(trial).detach()
        trial_loss = float(r_trial @ r_trial)
        if trial_loss < loss:
            converged = (loss - trial_loss) <= 1e-10 * loss
            theta, r, loss, JTJ = trial, r_trial, trial_loss, None
            damping = max(damping / 3, 1e-12)
            if converged:
                break
        else:
            damping = min(damping * 2, 1e12)
    return theta, loss, done, n_jac, jac_s


def clocks() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def since(start: tuple[float, float]) -> tuple[float, float]:
    cpu, wall = clocks()
    return cpu - start[0], wall - start[1]


def fit_torch_lm(net: nn.Module, samples, targets, iterations: int) -> dict:
    start = clocks()  # its import counts: it imports torch._dynamo (the floor) with lightning
    from torch_levenberg_marquardt.training import LevenbergMarquardtModule

    module = LevenbergMarquardtModule(net)
    prepare = since(start)
    done = 0
    for done in range(1, iterations + 1):  # noqa: B007  (done: the iterations made)
        _, _, stop, _ = module.training_step(samples, targets)
        if stop:
            break
    with torch.no_grad():  # its loss is the mean before the step: the sum of squares after
        loss = float((net(samples) - targets).square().sum())
    return {
        "prepare": prepare,
        "fit": since(start),
        "loss": loss,
        "iterations": done,
        "n_jac": done,
    }


def fit_scipy_lm(net: nn.Module, samples, targets, iterations: int) -> dict:
    start = clocks()  # its import counts, as jacbench's and the others' do
    import numpy as np
    from scipy.optimize import least_squares

    X, T = samples.numpy(), targets.numpy()
    shapes = [tuple(p.shape) for p in net.parameters()]
    sizes = [math.prod(s) for s in shapes]

    def residuals(theta: np.ndarray) -> np.ndarray:
        w1, b1, w2, b2 = (
            c.reshape(s)
            for c, s in zip(np.split(theta, np.cumsum(sizes)[:-1]), shapes, strict=True)
        )
        return (np.tanh(X @ w1.T + b1) @ w2.T + b2 - T).reshape(-1)

    theta0 = jacbench.FlatParams(net).vector().numpy()
    prepare = since(start)
    out = least_squares(residuals, theta0, method="lm", max_nfev=iterations * (theta0.size + 1))
    r = out.fun
    return {
        "prepare": prepare,
        "fit": since(start),
        "loss": float(r @ r),
        "iterations": int(out.nfev),
        "n_jac": int(out.njev or 0),
    }


def one(method: str, dtype: torch.dtype, iterations: int) -> dict:
    """Fit by ``method`` in this process; what it cost, from after importing torch (the
    method's own imports count: jacbench's registry, torch-levenberg-marquardt's lightning)."""
    torch.set_num_threads(1)
    net, samples, targets = data(dtype)
    if method == "torch_lm":
        return fit_torch_lm(net, samples, targets, iterations)
    if method == "scipy_lm":
        return fit_scipy_lm(net, samples, targets, iterations)
    params = jacbench.FlatParams(net)

    def residuals(theta: torch.Tensor) -> torch.Tensor:
        return (params.call(theta, samples) - targets).reshape(-1)

    theta0 = params.vector()
    start = clocks()
    if method in (FLOOR, FLOOR_THEN_AUTO):
        torch.func.jacfwd(residuals)(theta0)
        spent = since(start)
        if method == FLOOR_THEN_AUTO:  # the same function's floor paid: auto's own share
            again = clocks()
            jacbench.prepare(residuals, theta0)(theta0)
            spent = since(again)
        return {
            "prepare": spent,
            "fit": spent,
            "loss": math.nan,
            "iterations": 0,
            "n_jac": 1,
        }
    jac = JACOBIANS[method](residuals, theta0)
    jac(theta0)  # preparation ends with the first Jacobian
    prepare = since(start)
    _, loss, its, n_jac, jac_s = levenberg_marquardt(residuals, jac, theta0, iterations)
    tier = getattr(getattr(jac, "info", None), "tier", "")
    return {
        "prepare": prepare,
        "fit": since(start),
        "loss": loss,
        "iterations": its,
        "n_jac": n_jac,
        "per_call": jac_s / n_jac,
        "tier": tier,
    }


def in_fresh_process(method: str, args: argparse.Namespace, caches: Path) -> dict:
    env = {
        **os.environ,
        "JACBENCH_CACHE_DIR": str(caches / "jacbench"),
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "OMP_NUM_THREADS": "1",
    }
    command = [
        sys.executable,
        __file__,
        "--one",
        method,
        "--dtype",
        args.dtype,
        "--iterations",
        str(args.iterations),
    ]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{method} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def available() -> list[str]:
    import importlib.util

    peers = [name for name, module in PEERS.items() if importlib.util.find_spec(module)]
    missing = sorted(set(PEERS) - set(peers))
    if missing:
        print(f"not installed, left out: {', '.join(missing)}")
    return [FLOOR, FLOOR_THEN_AUTO, *JACOBIANS, *peers]


def median(runs: list[dict], key: str, index: int | None = None) -> float:
    values = [r[key][index] if index is not None else r[key] for r in runs]
    return statistics.median(values)


def report(results: dict[tuple[str, str], list[dict]], methods: list[str], args) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"Levenberg-Marquardt on seed004 (N=84, M=576, {args.dtype}, "
        f"1 thread, fresh process each, median of {args.rounds} rounds)"
    )
    for column in (
        "method",
        "caches",
        "prepare CPU s",
        "fit CPU s",
        "fit wall s",
        "Jacobian CPU ms/call",
        "Jacobian calls",
        "iterations",
        "final loss",
        "tier",
    ):
        table.add_column(column, justify="left" if column in ("method", "caches") else "right")
    for method in methods:
        for caches in ("cold", "warm"):
            runs = results[(method, caches)]
            per_call = [r["per_call"] for r in runs if "per_call" in r]
            table.add_row(
                method,
                caches,
                f"{median(runs, 'prepare', 0):.3f}",
                f"{median(runs, 'fit', 0):.3f}",
                f"{median(runs, 'fit', 1):.3f}",
                f"{statistics.median(per_call) * 1e3:.3f}" if per_call else "-",
                str(runs[-1]["n_jac"]),
                str(runs[-1]["iterations"]),
                f"{runs[-1]['loss']:.6e}",
                runs[-1].get("tier", ""),
            )
    console = Console(width=220)  # the whole table also when the output is not a terminal
    console.print(table)
    fit = {k: median(v, "fit", 0) for k, v in results.items()}
    prep = {k: median(v, "prepare", 0) for k, v in results.items()}
    spread = {
        k: (max(r["fit"][0] for r in v) - min(r["fit"][0] for r in v)) / fit[k]
        for k, v in results.items()
    }
    lines = []
    for caches, target_fit, target_prep in (("cold", 4, 0.5), ("warm", 6, 0.2)):
        auto, loop = ("jacbench_auto", caches), ("fd_loop", caches)
        above = prep[auto] - prep[(FLOOR, caches)]
        lines.append(
            f"[{caches}] fd_loop fit / auto fit = {fit[loop] / fit[auto]:.1f}x "
            f"(target >= {target_fit}; spread of auto's fits {spread[auto]:.0%})"
        )
        lines.append(
            f"[{caches}] auto preparation above the floor = {above:.2f} CPU-s "
            f"(target <= {target_prep}; floor {prep[(FLOOR, caches)]:.2f})"
        )
        lines.append(
            f"[{caches}] auto preparation after the floor in the same process = "
            f"{prep[(FLOOR_THEN_AUTO, caches)]:.2f} CPU-s (target <= {target_prep})"
        )
        lines.append(
            f"[{caches}] fd_loop fit / (auto fit - floor) = "
            f"{fit[loop] / (fit[auto] - prep[(FLOOR, caches)]):.1f}x (what jacbench adds)"
        )
        for peer in PEERS:
            if (peer, caches) in fit:
                lines.append(
                    f"[{caches}] {peer} fit / auto fit = "
                    f"{fit[(peer, caches)] / fit[auto]:.1f}x (target > 1)"
                )
    console.print("\n".join(lines), markup=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300, help="LM iterations at most")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--methods", nargs="*", help="a subset (default: all installed)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: fit by one method
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, getattr(torch, args.dtype), args.iterations)))
        return
    methods = [m for m in available() if not args.methods or m in args.methods]
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        warm = {m: Path(scratch, "warm", m) for m in methods}
        for method in methods:  # fills the warm caches; not counted
            in_fresh_process(method, args, warm[method])
        for r in range(args.rounds):
            order = methods[r % len(methods) :] + methods[: r % len(methods)]
            for method in order:
                for caches in ("cold", "warm") if r % 2 == 0 else ("warm", "cold"):
                    folder = (
                        warm[method] if caches == "warm" else Path(tempfile.mkdtemp(dir=scratch))
                    )
                    out = in_fresh_process(method, args, folder)
                    results.setdefault((method, caches), []).append(out)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    report(results, methods, args)


if __name__ == "__main__":
    main()
