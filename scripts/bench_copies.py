"""Where the copies pay: auto's first tier against the plain passes, per call.

``double_backward`` and ``autograd_loop`` with ``copies=True`` run N (or M) copies of x as
one vmapped batch, where dispatch dominates (seed004: 3x faster), but repeat f's own work N
times, where it dominates (a convolution of N = 1024: 4.3x slower). Their first call times
both once and keeps the faster. This prints, for four shapes, the plain passes' time a call,
the copies' choice's, and their ratio (below 1: the choice is faster), as medians of
interleaved rounds with their spread (min-max), CPU time on one thread.

Run: ``python scripts/bench_copies.py [--rounds 5]`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

import jacbench


def shapes(dtype: torch.dtype) -> dict[str, tuple[Callable, torch.Tensor]]:
    """Four functions from dispatch-bound to compute-bound (seed004's residual first)."""
    torch.manual_seed(0)
    samples = torch.rand(144, 3, dtype=dtype) * 4 - 2
    targets = torch.randn(144, 4, dtype=dtype)

    def seed004(t: torch.Tensor) -> torch.Tensor:
        w1, b1, w2, b2 = t[:30].reshape(10, 3), t[30:40], t[40:80].reshape(4, 10), t[80:84]
        return (torch.tanh(samples @ w1.T + b1) @ w2.T + b2 - targets).reshape(-1)

    tall_w = torch.randn(4096, 64, dtype=dtype) / 8
    dense_w = torch.randn(1024, 1024, dtype=dtype) / 32
    conv = torch.nn.Conv2d(1, 8, 3, padding=1).to(dtype)

    def convolution(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(conv(x.reshape(1, 1, 32, 32))).sum(1).reshape(-1)

    return {
        "seed004 N=84 M=576": (seed004, torch.randn(84, dtype=dtype)),
        "tall N=64 M=4096": (lambda x: torch.tanh(tall_w @ x), torch.randn(64, dtype=dtype)),
        "dense N=M=1024": (lambda x: torch.tanh(dense_w @ x), torch.randn(1024, dtype=dtype)),
        "conv N=M=1024": (convolution, torch.randn(1024, dtype=dtype)),
    }


def seconds_per_call(prep: Callable, x: torch.Tensor, budget: float = 0.3) -> float:
    calls, start = 0, time.process_time()
    while calls < 3 or time.process_time() - start < budget:
        prep(x)
        calls += 1
    return (time.process_time() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    print(f"{'shape':20s} {'plain ms':>18s} {'copies chosen ms':>20s} {'ratio':>6s}")
    for name, (f, x) in shapes(getattr(torch, args.dtype)).items():
        plain = jacbench.prepare(f, x, "double_backward")
        chosen = jacbench.prepare(f, x, "double_backward", copies=True)
        plain(x), chosen(x)  # the first calls: checks, and the copies' choice
        a, b = [], []
        for _ in range(args.rounds):
            a.append(seconds_per_call(plain, x))
            b.append(seconds_per_call(chosen, x))
        ratio = statistics.median(b) / statistics.median(a)
        print(
            f"{name:20s} {statistics.median(a) * 1e3:8.2f} [{min(a) * 1e3:.2f}-{max(a) * 1e3:.2f}]"
            f" {statistics.median(b) * 1e3:9.2f} [{min(b) * 1e3:.2f}-{max(b) * 1e3:.2f}]"
            f" {ratio:6.2f}"
        )
    print(f"{args.dtype}, 1 thread, {args.rounds} interleaved rounds; load {load:.2f} before")


if __name__ == "__main__":
    main()
