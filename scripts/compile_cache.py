"""Why each compiled Jacobian gets a code object of its own (``core.guarded.own_entry``).

dynamo keeps at most ``cache_size_limit`` (8) compiled versions per code object, and every
``torch.func.jacfwd(f)`` shares one wrapper's code: preparing compiled Jacobians of 11
functions of different shapes in one process, the 9th and later ran eagerly (measured here:
257 against 29 us a call). jacbench used to raise the limit process-wide, which changed the
user's own ``torch.compile``; a code object per prepared Jacobian keeps every one compiled
and leaves the limit alone.

    python scripts/compile_cache.py     # CPU us per call, shared code vs a code of its own
"""

from __future__ import annotations

import time

import torch

from jacbench.core.guarded import own_entry

PROBLEMS, CALLS = 11, 300


def per_call_us(fn, x: torch.Tensor) -> float:
    fn(x)
    start = time.process_time()
    for _ in range(CALLS):
        fn(x)
    return (time.process_time() - start) / CALLS * 1e6


def main() -> None:
    torch.set_num_threads(1)
    limit = torch._dynamo.config.cache_size_limit
    print(f"torch {torch.__version__}, dynamo cache_size_limit {limit} (left as it is)")
    print(f"{'problem':>7} {'shared code':>12} {'own code':>9} {'eager':>6}  (us a call)")
    for k in range(PROBLEMS):
        n = 3 + k  # another shape each time: the earlier versions' guards fail
        weight = torch.randn(4, n)

        def f(x, weight=weight):
            return torch.tanh(weight @ x)

        x = torch.randn(n)
        shared = torch.compile(torch.func.jacfwd(f), dynamic=False)
        own = torch.compile(own_entry(torch.func.jacfwd(f)), dynamic=False)
        eager = torch.func.jacfwd(f)
        cells = [per_call_us(c, x) for c in (shared, own, eager)]
        widths = (12, 9, 6)
        print(f"{k + 1:>7} " + " ".join(f"{c:>{w}.0f}" for c, w in zip(cells, widths, strict=True)))
    assert torch._dynamo.config.cache_size_limit == limit


if __name__ == "__main__":
    main()
