"""Levenberg-Marquardt on bundle adjustment with jacbench's sparse Jacobian: beyond one
Jacobian, what a user of ADBench's BA does with it, and the Jacobian's share of each step.

The Jacobian (95529 x 55710 on ba1, 15 nonzeros a row declared, 14 proved by tracing) is
prepared once with ``jacbench.prepare(model, x, "sparse_jacfwd", output="scipy")``: the model
declares its pattern, tracing tightens it, so preparation colours it (14 colours) and every
call costs 14 forward passes. Each step solves the damped least-squares problem
min |J d + r|^2 + lam |D d|^2 (D: J's column norms, Marquardt's scaling) with scipy's
LSMR (no normal equations formed, so no fill-in), accepts the step where the cost falls and
adapts lam, and prints the time of the residual, the Jacobian and the solve, and their
shares. The start is ADBench's point with its cameras,
points and weights perturbed by 1e-3 relative noise (seeded), float64, 1 thread.

Usage: python scripts/ba_lm_steps.py [--file ba1_n49_m7776_p31843.txt] [--steps 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse.linalg
import torch

import jacbench
from jacbench.models.adbench import BundleAdjustment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", default="ba1_n49_m7776_p31843.txt")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lam", type=float, default=0.3, help="initial damping")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = BundleAdjustment(args.file).double()
    gen = torch.Generator().manual_seed(0)
    x0 = model.sample_input(gen)
    x = x0 * (1 + 1e-3 * torch.randn(x0.shape, generator=gen, dtype=torch.float64))

    start = time.perf_counter()
    jac = jacbench.prepare(model, x, "sparse_jacfwd", output="scipy")
    setup = time.perf_counter() - start
    print(
        f"{args.file}: {model.input_shape[0]} unknowns, {3 * model.p} residuals; Jacobian "
        f"prepared in {setup:.2f} s ({jac.info.n_colors} colours)"
    )

    def cost(point: torch.Tensor) -> tuple[float, np.ndarray, float]:
        t = time.perf_counter()
        with torch.no_grad():
            r = model(point).numpy()
        return 0.5 * float(r @ r), r, time.perf_counter() - t

    value, r, t_res = cost(x)
    lam = args.lam
    print(
        f"{'step':>4} {'cost':>12} {'lam':>8} {'residual s':>10} {'Jacobian s':>10} "
        f"{'solve s':>8} {'Jacobian share':>14}  accepted"
    )
    print(f"{0:>4} {value:>12.6e}")
    for step in range(1, args.steps + 1):
        t = time.perf_counter()
        J = jac(x)  # scipy.sparse.csr_array, (3P, N)
        t_jac = time.perf_counter() - t
        t = time.perf_counter()
        scale = np.sqrt(np.asarray(J.multiply(J).sum(axis=0))).ravel() + 1e-12
        scaled = J @ scipy.sparse.diags_array(1 / scale)  # Marquardt's scaling: lam |D d|^2
        y = scipy.sparse.linalg.lsmr(scaled, -r, damp=np.sqrt(lam), atol=1e-8, btol=1e-8)[0]
        d = y / scale
        t_solve = time.perf_counter() - t
        trial = x + torch.from_numpy(d)
        new_value, new_r, t_trial = cost(trial)
        accepted = new_value < value
        if accepted:
            x, value, r, lam = trial, new_value, new_r, lam / 3
        else:
            lam *= 4
        total = t_res + t_jac + t_solve
        print(
            f"{step:>4} {value:>12.6e} {lam:>8.1e} {t_res:>10.3f} {t_jac:>10.3f} "
            f"{t_solve:>8.3f} {t_jac / total:>13.0%}  {'yes' if accepted else 'no'}"
        )
        t_res = t_trial


if __name__ == "__main__":
    main()
