"""What the library adds around a Jacobian: per-call overhead, wrapper layers, evaluations of
f at ``prepare``, and a fresh process's first call.

    python scripts/library_overhead.py             # this checkout
    PYTHONPATH=OTHER/src python scripts/library_overhead.py   # another checkout, to compare

Per-call figures are CPU time on one thread, medians of interleaved rounds (a prepared call
of ``t * 2`` at a 3-vector against ``torch.func`` called directly: the overhead is the
difference). "layers" counts the Python frames between ``prep(x)`` and ``f`` beyond those
of ``torch.func`` itself. The first call is measured in fresh processes (CPU-s of
``prepare`` plus the first call on seed004's residual as a plain function of its 84
parameters).
"""

from __future__ import annotations

import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

ROUNDS, CALLS = 7, 2000


def per_call_us(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Median CPU microseconds per call of each, timed in interleaved rounds."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    for call in calls.values():
        call()
    for _ in range(ROUNDS):
        for name, call in calls.items():
            start = time.process_time()
            for _ in range(CALLS):
                call()
            times[name].append((time.process_time() - start) / CALLS * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def frames_to_f(call: Callable[[torch.Tensor], object], x: torch.Tensor) -> int:
    """Python frames between ``call(x)`` and the function it differentiates."""
    depth = []

    def f(t: torch.Tensor) -> torch.Tensor:
        frame, n = sys._getframe(), 0
        while frame is not None:
            n, frame = n + 1, frame.f_back
        depth.append(n)
        return t * 2

    prepared = call(f)
    depth.clear()  # evaluations while preparing do not count
    prepared(x)
    return min(depth)


def evaluations_at_prepare(strategy: str, **options: object) -> int:
    import jacbench

    count = [0]

    def f(t: torch.Tensor) -> torch.Tensor:
        count[0] += 1
        return torch.sin(t) * 2

    jacbench.prepare(f, torch.randn(5), strategy, **options)
    return count[0]


RESIDUAL = """
import math, torch
torch.manual_seed(0)
X, Y = torch.randn(144, 3), torch.randn(144, 4)
shapes = [(10, 3), (10,), (4, 10), (4,)]
sizes = [math.prod(s) for s in shapes]
def residual(theta):
    W1, b1, W2, b2 = (c.reshape(s) for c, s in zip(torch.split(theta, sizes), shapes))
    return (torch.tanh(X @ W1.T + b1) @ W2.T + b2 - Y).reshape(-1)
"""
SEED004 = (
    "import time\nstart = time.process_time()\nimport jacbench\n"
    + RESIDUAL
    + """
theta = torch.randn(84)
imported = time.process_time()
prep = jacbench.prepare(residual, theta)
prep(theta)
print(imported - start, time.process_time() - imported)
"""
)


def first_call_s(rounds: int = 3) -> float:
    """Median CPU-s of a fresh process's prepare plus first call (after imports)."""
    out = []
    for _ in range(rounds):
        done = subprocess.run([sys.executable, "-c", SEED004], capture_output=True, text=True)
        out.append(float(done.stdout.split()[1]))
    return statistics.median(out)


def frozen_check_us() -> dict[str, float]:
    """CPU us a call of a traced graph spends on what keeps it valid (dynamo's guards on
    seed004's module and on its residual as a plain function, and the global-hooks check
    jacbench adds), measured as a capture of f with a backend that runs f's graph as it is
    against f called directly."""
    from jacbench.core import torch_internals
    from jacbench.core.guarded import own_entry
    from jacbench.models.seeds import Residual

    scope: dict = {}
    exec(RESIDUAL, scope)
    calls: dict[str, Callable[[], object]] = {"global hooks check": torch_internals.module_hooks}
    for name, f in (("module", Residual()), ("function", scope["residual"])):
        theta = torch.zeros(84) if name == "function" else torch.zeros(144, 3)
        guarded = torch.compile(own_entry(f), backend="eager", fullgraph=True, dynamic=False)
        calls[f"{name}: captured"] = functools.partial(guarded, theta)
        calls[f"{name}: plain"] = functools.partial(f, theta)
    return per_call_us(calls)


def main() -> None:
    import jacbench

    torch.set_num_threads(1)
    x = torch.randn(3)

    def double(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    preps = {
        "auto": jacbench.prepare(double, x),  # its eager tier until settled
        "jacfwd": jacbench.prepare(double, x, "jacfwd"),
        "jacrev": jacbench.prepare(double, x, "jacrev"),
    }
    direct = {"jacfwd": torch.func.jacfwd(double), "jacrev": torch.func.jacrev(double)}
    times = per_call_us(
        {
            **{f"prepared {k}": (lambda p=p: p(x)) for k, p in preps.items()},
            **{f"torch.func.{k}": (lambda d=d: d(x)) for k, d in direct.items()},
        }
    )
    layers = {
        k: frames_to_f(lambda f, k=k, o=o: jacbench.prepare(f, x, k, **o), x)
        - frames_to_f(lambda f, k=k: getattr(torch.func, "jacfwd" if k == "auto" else k)(f), x)
        for k, o in (("auto", {}), ("jacfwd", {}), ("jacrev", {}))
    }
    evaluations = {
        "auto": evaluations_at_prepare("auto"),
        "jacfwd": evaluations_at_prepare("jacfwd"),
        "jacrev": evaluations_at_prepare("jacrev"),
    }
    result = {
        "per_call_us": {k: round(v, 1) for k, v in times.items()},
        "overhead_us": {
            k: round(times[f"prepared {k}"] - times[f"torch.func.{floor}"], 1)
            for k, floor in (("auto", "jacfwd"), ("jacfwd", "jacfwd"), ("jacrev", "jacrev"))
        },
        "layers_beyond_torch_func": layers,
        "f_evaluations_at_prepare": evaluations,
        "frozen_check_us": {k: round(v, 2) for k, v in frozen_check_us().items()},
        "fresh_process_prepare_and_first_call_cpu_s": round(first_call_s(), 3),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
