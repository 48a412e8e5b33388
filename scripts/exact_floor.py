"""The floor of an exact Jacobian against batched forward differences on seed004, no compiler.

Issue 58 asks for a first tier (no compiler) whose calls cost no more than a batched forward
difference. This times, side by side in one process (one thread, CPU time of the timed
thread, median and min of 7 rounds of 50 calls), three ways over the same 84 copies of theta
pushed through f in one natively batched pass (the best case for each):
- ``fd_batched``: forward differences, one batched forward pass;
- ``forward_ad_copies``: forward-mode duals (``torch.autograd.forward_ad``), tangents = I;
- ``double_backward_copies``: reverse mode twice (auto's eager tier on this shape).
The exact ways carry the tangent arithmetic the differences do not: their ratio to
``fd_batched`` is the floor of that target.

Run: ``python scripts/exact_floor.py``.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.autograd.forward_ad as fwAD

ROUNDS, CALLS = 7, 50


def problem(dtype: torch.dtype):
    """seed004's residuals (MLP 3-10-4, 144 samples) for a batch of parameter vectors."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 10), torch.nn.Tanh(), torch.nn.Linear(10, 4))
    net = net.to(dtype)
    X, T = torch.randn(144, 3, dtype=dtype), torch.randn(144, 4, dtype=dtype)
    shapes = [p.shape for p in net.parameters()]
    sizes = [p.numel() for p in net.parameters()]

    def residuals(th: torch.Tensor) -> torch.Tensor:
        parts = zip(th.split(sizes, 1), shapes, strict=True)
        w1, b1, w2, b2 = (c.reshape(-1, *s) for c, s in parts)
        h = torch.tanh(torch.einsum("nk,bjk->bnj", X, w1) + b1[:, None, :])
        return (torch.einsum("bnj,boj->bno", h, w2) + b2[:, None, :] - T).reshape(len(th), -1)

    theta = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    return residuals, theta


def ways(residuals, theta: torch.Tensor):
    n = theta.numel()
    eye = torch.eye(n, dtype=theta.dtype)
    eps = torch.finfo(theta.dtype).eps ** 0.5

    def fd_batched(th):
        h = eps * th.abs().clamp_min(1.0)
        Y = residuals(torch.cat([th[None], th + torch.diag(h)]))
        return ((Y[1:] - Y[:1]) / h[:, None]).T

    def forward_ad_copies(th):
        with fwAD.dual_level():
            dual = fwAD.make_dual(th.expand(n, n).clone(), eye)
            return fwAD.unpack_dual(residuals(dual)).tangent.T

    def double_backward_copies(th):
        with torch.enable_grad():
            copies = th.detach().expand(n, n).clone().requires_grad_(True)
            Y = residuals(copies)
            U = torch.zeros_like(Y, requires_grad=True)
            (G,) = torch.autograd.grad((Y * U).sum(), copies, create_graph=True)
            (H,) = torch.autograd.grad((G * eye).sum(), U)
        return H.T

    return {f.__name__: f for f in (fd_batched, forward_ad_copies, double_backward_copies)}


def interleaved(found: dict, theta: torch.Tensor) -> dict[str, list[float]]:
    """CPU seconds a call of each way, per round; the ways take turns within each round
    (the order rotating), so a busy moment falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in found}
    names = list(found)
    for r in range(ROUNDS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.thread_time()
            for _ in range(CALLS):
                found[name](theta)
            times[name].append((time.thread_time() - start) / CALLS)
    return times


def main() -> None:
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.1f}; torch {torch.__version__}; one thread")
    for dtype in (torch.float64, torch.float32):
        residuals, theta = problem(dtype)
        found = ways(residuals, theta)
        exact = found["forward_ad_copies"](theta)
        times = interleaved(found, theta)
        for name, fn in found.items():
            ratios = [t / fd for t, fd in zip(times[name], times["fd_batched"], strict=True)]
            err = (fn(theta) - exact).abs().max().item()
            print(
                f"{str(dtype)[6:]:8} {name:24} {statistics.median(times[name]) * 1e3:6.3f} "
                f"ms/call, {statistics.median(ratios):4.2f}x fd_batched (rounds "
                f"{min(ratios):.2f}-{max(ratios):.2f}), max |J - forward AD| {err:.1e}"
            )


if __name__ == "__main__":
    main()
