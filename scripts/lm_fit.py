"""A whole Levenberg-Marquardt fit of the seed004 problem, each method in a fresh process.

The forum thread behind seed004 fits an MLP 3-10-4 (84 parameters) to 144 samples (576
residuals) with Levenberg-Marquardt and found autograd's Jacobian 7-10x slower than a
finite-difference loop. Each method below runs the same fit (at most ``--iterations`` LM
iterations) in a process of its own, so no method pays another's one-time costs:

- ``fd_loop``: the thread's forward-difference loop (one forward pass per parameter);
- ``fd_batched``: the same differences in one batched forward pass (``torch.func.vmap``
  over the 84 shifted copies: six lines, the difference loop's best form);
- ``jacbench_fd_forward``: ``jacbench.prepare(residuals, theta0, "fd_forward")``;
- ``functional``: ``torch.autograd.functional.jacobian`` (PyTorch's default);
- ``compiled_jacfwd``: ``torch.compile(torch.func.jacfwd(residuals))``, built by hand;
- ``copies_by_hand``: auto's first tier written by hand without jacbench (84 copies of
  theta under ``torch.func.vmap``, reverse mode twice): the floor of auto's fit;
- ``jacbench_auto``: ``jacbench.prepare(residuals, theta0)``, the default (tiered) auto;
- ``jacbench_auto_settled``: the default auto, ``.settled()`` at once (its last tier built
  before the first call: the calls and CPU seconds a user spends to reach it);
- ``jacbench_auto_patient``: ``patience=1.0`` (calls move auto up its tiers once they have
  spent what the next tier costs to build); after the fit its calls go on at theta0, up to
  ``--calls``, to print the calls and CPU seconds at which each tier was reached;
- ``jacbench_auto_upfront``: ``upfront=True`` (compile and calibrate everything first);
- ``jacbench_auto_eager``: ``compile=False`` (eager candidates calibrated);
- peers a user would pick, where installed: ``jax_lm`` (the same LM loop in JAX:
  ``jit(jacfwd(residuals))``, jitted residuals and damped solve), ``torch_lm``
  (torch-levenberg-marquardt, its defaults) and ``scipy_lm`` (SciPy's MINPACK
  ``least_squares(method="lm")`` on numpy residuals, finite differences inside).

Each runs with cold caches (new empty JACBENCH_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR) and
warm ones (folders an earlier, uncounted run of the same method filled), in alternating
rounds, one thread, pinned to one core (``--core``). ``floor`` is torch's own first
``torch.func`` call on the same function in a fresh process (its compiler's import). The
table gives
medians over rounds of CPU time (and wall time) of the preparation (with the first
Jacobian) and the whole fit, both ways: with no framework's import counted (torch's,
jacbench's, jax's all left out) and with each method's framework imports counted (torch
for the torch methods, torch and jacbench for jacbench's, jax for JAX's), then the target
ratios, per dtype, with the load.

Run: ``python scripts/lm_fit.py [--rounds 3] [--iterations 300] [--dtypes float64 float32]``.
"""

from __future__ import annotations

import argparse
import importlib
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

_BEFORE_TORCH = time.process_time()
import torch  # noqa: E402  (its import timed: every torch method's framework import)
from torch import nn  # noqa: E402

TORCH_IMPORT_S = time.process_time() - _BEFORE_TORCH

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


def fd_batched(residuals: Callable[[torch.Tensor], torch.Tensor]) -> Jacobian:
    """The same forward differences in one batched pass: the difference loop's best form."""
    many = torch.func.vmap(residuals)

    def jac(theta: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = math.sqrt(torch.finfo(theta.dtype).eps) * theta.abs().clamp_min(1.0)
            return ((many(theta + torch.diag(h)) - residuals(theta)) / h[:, None]).T

    return jac


def copies_by_hand(residuals: Callable[[torch.Tensor], torch.Tensor], n: int) -> Jacobian:
    """auto's first tier written by hand, jacbench left out (the floor of auto's fit): n
    copies of theta through torch.func.vmap, reverse mode twice over all of them."""
    F = torch.func.vmap(residuals)

    def jac(theta: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            copies = theta.detach().expand(n, n).clone().requires_grad_(True)
            Y = F(copies)
            U = torch.zeros_like(Y, requires_grad=True)
            (G,) = torch.autograd.grad((Y * U).sum(), copies, create_graph=True)
            (H,) = torch.autograd.grad(G.diagonal().sum(), U)
        return H.T

    return jac


JACOBIANS: dict[str, Callable[[Callable, torch.Tensor], Jacobian]] = {
    "fd_loop": lambda r, theta0: fd_loop(r),
    "fd_batched": lambda r, theta0: fd_batched(r),
    "jacbench_fd_forward": lambda r, theta0: _jacbench().prepare(r, theta0, "fd_forward"),
    "copies_by_hand": lambda r, theta0: copies_by_hand(r, theta0.numel()),
    "functional": lambda r, theta0: lambda t: torch.autograd.functional.jacobian(r, t),
    "compiled_jacfwd": lambda r, theta0: torch.compile(torch.func.jacfwd(r)),
    "jacbench_auto": lambda r, theta0: _jacbench().prepare(r, theta0),
    "jacbench_auto_settled": lambda r, theta0: _jacbench().prepare(r, theta0).settled(),
    "jacbench_auto_patient": lambda r, theta0: _jacbench().prepare(r, theta0, patience=1.0),
    "jacbench_auto_upfront": lambda r, theta0: _jacbench().prepare(r, theta0, upfront=True),
    "jacbench_auto_eager": lambda r, theta0: _jacbench().prepare(r, theta0, compile=False),
}


def _jacbench():
    return importlib.import_module("jacbench")


PEERS = {"jax_lm": "jax", "torch_lm": "torch_levenberg_marquardt", "scipy_lm": "scipy"}
FLOOR = "floor"


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

    own_import = since(start)[0]
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
        "own_import": own_import,
    }


def fit_jax_lm(net: nn.Module, samples, targets, iterations: int) -> dict:
    """The same LM loop in JAX, as a JAX user writes it: ``jit(jacfwd(residuals))``, the
    residuals and the damped normal equations jitted; one thread."""
    start = clocks()  # its import counts, as jacbench's and the others' do
    os.environ.setdefault(
        "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )
    import jax
    import jax.numpy as jnp

    own_import = since(start)[0]
    if samples.dtype == torch.float64:
        jax.config.update("jax_enable_x64", True)
    X, T = jnp.asarray(samples.numpy()), jnp.asarray(targets.numpy())
    shapes = [tuple(p.shape) for p in net.parameters()]
    cuts = torch.tensor([p.numel() for p in net.parameters()]).cumsum(0)[:-1].tolist()

    def residuals(theta):
        w1, b1, w2, b2 = (c.reshape(s) for c, s in zip(jnp.split(theta, cuts), shapes, strict=True))
        return (jnp.tanh(X @ w1.T + b1) @ w2.T + b2 - T).reshape(-1)

    res, jac = jax.jit(residuals), jax.jit(jax.jacfwd(residuals))

    @jax.jit
    def normal(J, r):
        return J.T @ J, J.T @ r

    @jax.jit
    def step(JTJ, g, damping):
        A = JTJ + damping * jnp.diag(jnp.clip(jnp.diag(JTJ), 1e-12, None))
        return jnp.linalg.solve(A, -g)

    theta = jnp.asarray(_jacbench().FlatParams(net).vector().numpy())
    J = jac(theta).block_until_ready()  # preparation ends with the first Jacobian
    prepare = since(start)
    damping, n_jac, jac_s, done = 1e-3, 1, 0.0, 0
    r = res(theta)
    loss = float(r @ r)
    JTJ, g = normal(J, r)
    while done < iterations:
        done += 1
        if JTJ is None:
            tick = time.process_time()
            J = jac(theta).block_until_ready()
            jac_s += time.process_time() - tick
            n_jac += 1
            JTJ, g = normal(J, r)
        trial = theta + step(JTJ, g, damping)
        r_trial = res(trial)
        trial_loss = float(r_trial @ r_trial)
        if trial_loss < loss:
            converged = (loss - trial_loss) <= 1e-10 * loss
            theta, r, loss, JTJ = trial, r_trial, trial_loss, None
            damping = max(damping / 3, 1e-12)
            if converged:
                break
        else:
            damping = min(damping * 2, 1e12)
    return {
        "prepare": prepare,
        "fit": since(start),
        "loss": loss,
        "iterations": done,
        "n_jac": n_jac,
        "per_call": jac_s / max(n_jac - 1, 1),
        "own_import": own_import,
    }


def fit_scipy_lm(net: nn.Module, samples, targets, iterations: int) -> dict:
    start = clocks()  # its import counts, as jacbench's and the others' do
    import numpy as np
    from scipy.optimize import least_squares

    own_import = since(start)[0]
    X, T = samples.numpy(), targets.numpy()
    shapes = [tuple(p.shape) for p in net.parameters()]
    sizes = [math.prod(s) for s in shapes]

    def residuals(theta: np.ndarray) -> np.ndarray:
        w1, b1, w2, b2 = (
            c.reshape(s)
            for c, s in zip(np.split(theta, np.cumsum(sizes)[:-1]), shapes, strict=True)
        )
        return (np.tanh(X @ w1.T + b1) @ w2.T + b2 - T).reshape(-1)

    theta0 = _jacbench().FlatParams(net).vector().numpy()
    prepare = since(start)
    out = least_squares(residuals, theta0, method="lm", max_nfev=iterations * (theta0.size + 1))
    r = out.fun
    return {
        "prepare": prepare,
        "fit": since(start),
        "loss": float(r @ r),
        "iterations": int(out.nfev),
        "n_jac": int(out.njev or 0),
        "own_import": own_import,
    }


def one(method: str, dtype: torch.dtype, iterations: int, calls: int) -> dict:
    """Fit by ``method`` in this process; what it cost, with the fit's CPU time both ways:
    ``fit_bare`` counts no framework's import, ``fit_imports`` the method's framework
    imports (torch's for torch methods, torch's and jacbench's for jacbench's, jax's for
    JAX's, scipy's for SciPy's, lightning's and torch's for torch-levenberg-marquardt)."""
    torch.set_num_threads(1)
    tick = time.process_time()
    jacbench = _jacbench()  # FlatParams for every method: its import timed apart
    jacbench_import = time.process_time() - tick
    out = _fit(method, dtype, iterations, jacbench, calls)
    own = out.pop("own_import", 0.0)
    framework = {
        "jax_lm": own,
        "scipy_lm": own,
        "torch_lm": TORCH_IMPORT_S + own,
    }.get(method, TORCH_IMPORT_S + (jacbench_import if method.startswith("jacbench") else 0.0))
    out["fit_bare"] = out["fit"][0] - own
    out["fit_imports"] = out["fit_bare"] + framework
    return out


def _fit(method: str, dtype: torch.dtype, iterations: int, jacbench, calls: int) -> dict:
    net, samples, targets = data(dtype)
    if method == "torch_lm":
        return fit_torch_lm(net, samples, targets, iterations)
    if method == "scipy_lm":
        return fit_scipy_lm(net, samples, targets, iterations)
    if method == "jax_lm":
        return fit_jax_lm(net, samples, targets, iterations)
    params = jacbench.FlatParams(net)

    def residuals(theta: torch.Tensor) -> torch.Tensor:
        return (params.call(theta, samples) - targets).reshape(-1)

    theta0 = params.vector()
    start = clocks()
    if method == FLOOR:
        torch.func.jacfwd(residuals)(theta0)
        spent = since(start)
        return {
            "prepare": spent,
            "fit": spent,
            "loss": math.nan,
            "iterations": 0,
            "n_jac": 1,
        }
    jac = JACOBIANS[method](residuals, theta0)
    clock = TierClock(jac, start) if method == "jacbench_auto_patient" else None
    fitted = clock or jac  # only the patient method pays for reading its tier at each call
    fitted(theta0)  # preparation ends with the first Jacobian
    prepare = since(start)
    _, loss, its, n_jac, jac_s = levenberg_marquardt(residuals, fitted, theta0, iterations)
    out = {
        "prepare": prepare,
        "fit": since(start),
        "loss": loss,
        "iterations": its,
        "n_jac": n_jac,
        "per_call": jac_s / n_jac,
        "tier": tier_of(jac),
    }
    if clock is not None:  # on, past the fit: when each tier is reached
        while clock.calls < calls and tier_of(jac) != LAST_TIER:
            clock(theta0)
        out["reached"] = clock.reached
    return out


def tier_of(jac: Jacobian) -> str:
    """The tier auto answers from ("" for the other methods)."""
    return getattr(getattr(jac, "info", None), "tier", "")


LAST_TIER = "compiled"


class TierClock:
    """A Jacobian that counts its calls and notes (tier, calls, CPU-s since ``start``) at
    each tier it answers from first: how far a user goes before a tier applies."""

    def __init__(self, jac: Jacobian, start: tuple[float, float]) -> None:
        self.jac, self.start, self.calls = jac, start, 0
        self.reached: list[tuple[str, int, float]] = []

    def __call__(self, theta: torch.Tensor) -> torch.Tensor:
        out = self.jac(theta)
        self.calls += 1
        tier = tier_of(self.jac)
        if tier and (not self.reached or self.reached[-1][0] != tier):
            self.reached.append((tier, self.calls, since(self.start)[0]))
        return out


def in_fresh_process(method: str, dtype: str, args: argparse.Namespace, caches: Path) -> dict:
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
        dtype,
        "--iterations",
        str(args.iterations),
        "--calls",
        str(args.calls),
        "--core",
        str(args.core),
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
    return [FLOOR, *JACOBIANS, *peers]


def median(runs: list[dict], key: str, index: int | None = None) -> float:
    values = [r[key][index] if index is not None else r[key] for r in runs]
    return statistics.median(values)


def report(results: dict[tuple[str, str, str], list[dict]], methods: list[str], args) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)  # the whole table also when the output is not a terminal
    for dtype in args.dtypes:
        table = Table(
            title=f"Levenberg-Marquardt on seed004 (N=84, M=576, {dtype}, 1 thread on one "
            f"core, fresh process each, median of {args.rounds} rounds)"
        )
        for column in COLUMNS:
            table.add_column(column, justify="left" if column in ("method", "caches") else "right")
        for method in methods:
            for caches in CACHES:
                runs = results[(dtype, method, caches)]
                per_call = [r["per_call"] for r in runs if "per_call" in r]
                table.add_row(
                    method,
                    caches,
                    f"{median(runs, 'prepare', 0):.3f}",
                    f"{median(runs, 'fit_bare'):.3f}",
                    f"{median(runs, 'fit_imports'):.3f}",
                    f"{median(runs, 'fit', 1):.3f}",
                    f"{statistics.median(per_call) * 1e3:.3f}" if per_call else "-",
                    str(runs[-1]["n_jac"]),
                    str(runs[-1]["iterations"]),
                    f"{runs[-1]['loss']:.6e}",
                    runs[-1].get("tier", ""),
                )
        console.print(table)
        console.print("\n".join(targets(results, dtype)), markup=False)
    console.print(f"load average {args.load[0]} before, {os.getloadavg()} after", markup=False)


COLUMNS = (
    "method",
    "caches",
    "prepare+1st J CPU s",
    "fit CPU s, no imports",
    "fit CPU s, imports counted",
    "fit wall s",
    "Jacobian CPU ms/call",
    "Jacobian calls",
    "iterations",
    "final loss",
    "tier",
)
CACHES = ("cold", "warm")
# (method, target of its fit time over auto's)
PEER_TARGETS = (
    ("fd_loop", ">= 1.5"),
    ("fd_batched", ">= 1"),
    ("jacbench_fd_forward", ">= 1"),
    ("jax_lm", "> 1"),
    ("scipy_lm", "> 1"),
    ("torch_lm", "> 1"),
)


def targets(results: dict[tuple[str, str, str], list[dict]], dtype: str) -> list[str]:
    """The target ratios, from the medians of CPU time, both ways (no imports counted, and
    each method's framework imports counted), and what reaching auto's last tier costs."""
    lines = []
    for key in ("fit_bare", "fit_imports"):
        fit = {k[1:]: median(v, key) for k, v in results.items() if k[0] == dtype}
        way = "no imports" if key == "fit_bare" else "imports counted"
        for caches in CACHES:
            auto = ("jacbench_auto", caches)
            if auto not in fit:
                continue
            for other, target in PEER_TARGETS:
                if (other, caches) in fit:
                    lines.append(
                        f"[{dtype} {caches}, {way}] {other} fit / auto fit = "
                        f"{fit[(other, caches)] / fit[auto]:.2f}x (target {target})"
                    )
    prep = {k[1:]: median(v, "prepare", 0) for k, v in results.items() if k[0] == dtype}
    for caches in CACHES:
        if ("jacbench_auto", caches) in prep:
            lines.append(
                f"[{dtype} {caches}] auto prepare + first Jacobian = "
                f"{prep[('jacbench_auto', caches)]:.3f} CPU-s above import torch"
            )
        if ("jacbench_auto_settled", caches) in prep:
            lines.append(
                f"[{dtype} {caches}] auto's last tier is reached at prep.settled(), before "
                f"call 1: {prep[('jacbench_auto_settled', caches)]:.3f} CPU-s with the first "
                "call (without it auto stays in its eager tier: it never moves by itself)"
            )
    lines += time_to_tier(results, dtype)
    return lines


def time_to_tier(results: dict[tuple[str, str, str], list[dict]], dtype: str) -> list[str]:
    """Where ``patience=1.0`` reached each tier: medians of calls and CPU-s (prepare and the
    fit's calls included), cold and warm caches."""
    lines = []
    for caches in CACHES:
        runs = results.get((dtype, "jacbench_auto_patient", caches), [])
        tiers: dict[str, list[tuple[int, float]]] = {}
        for run in runs:
            for tier, calls, cpu_s in run.get("reached", []):
                tiers.setdefault(tier, []).append((calls, cpu_s))
        told = [
            f"{tier} at call {statistics.median(c for c, _ in seen):.0f} "
            f"({statistics.median(s for _, s in seen):.2f} CPU-s, {len(seen)}/{len(runs)} runs)"
            for tier, seen in tiers.items()
        ]
        if told:
            lines.append(f"[{dtype} {caches}] patience=1.0 reached: " + "; ".join(told))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300, help="LM iterations at most")
    parser.add_argument(
        "--dtypes", nargs="+", choices=["float32", "float64"], default=["float64", "float32"]
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument(
        "--calls", type=int, default=20000, help="calls at most to reach auto's last tier"
    )
    parser.add_argument("--methods", nargs="*", help="a subset (default: all installed)")
    parser.add_argument("--core", type=int, default=0, help="the core every fit is pinned to")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: fit by one method
    parser.add_argument("--dtype", help=argparse.SUPPRESS)  # the child's dtype
    args = parser.parse_args()
    if args.one:
        pin(args.core)
        print(json.dumps(one(args.one, getattr(torch, args.dtype), args.iterations, args.calls)))
        return
    args.load = os.getloadavg()
    methods = [m for m in available() if not args.methods or m in args.methods]
    results: dict[tuple[str, str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for dtype in args.dtypes:
            warm = {m: Path(scratch, "warm", dtype, m) for m in methods}
            for method in methods:  # fills the warm caches; not counted
                in_fresh_process(method, dtype, args, warm[method])
            for r in range(args.rounds):
                order = methods[r % len(methods) :] + methods[: r % len(methods)]
                for method in order:
                    for caches in CACHES if r % 2 == 0 else CACHES[::-1]:
                        folder = (
                            warm[method]
                            if caches == "warm"
                            else Path(tempfile.mkdtemp(dir=scratch))
                        )
                        out = in_fresh_process(method, dtype, args, folder)
                        results.setdefault((dtype, method, caches), []).append(out)
                print(f"{dtype}: round {r + 1}/{args.rounds} done", file=sys.stderr)
    report(results, methods, args)


def pin(core: int) -> None:
    """Run on one core (where the OS lets a process choose): no migration between cores."""
    if hasattr(os, "sched_setaffinity") and core in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {core})


if __name__ == "__main__":
    main()
