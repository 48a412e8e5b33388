"""Why ``jacbench.core.fold.transpose_narrow`` computes narrow products transposed on CPU:
CPU time of ``(n, k) x (k, M)`` over ``(M, k) x (k, n)``, both operands contiguous, for a
range of column counts n (1 thread, best of 3 rounds of 200 calls). A ratio below 1 means
the transposed product is faster; the graph pass uses it for n <= NARROW.

    python scripts/narrow_products.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from jacbench.core.fold import NARROW

COLUMNS = (1, 2, 4, 8, 16, 32)
ROWS = (12096, 2000)  # seed004's output-layer tangents, and a smaller problem
INNER = (3, 10, 64)


def cpu_us(fn: Callable[[], object], calls: int = 200) -> float:
    fn()
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def ratio(rows: int, inner: int, columns: int, dtype: torch.dtype) -> float:
    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, columns, dtype=dtype)
    a_t, b_t = a.t().contiguous(), b.t().contiguous()
    return min(
        cpu_us(lambda: torch.mm(b_t, a_t)) / cpu_us(lambda: torch.mm(a, b)) for _ in range(3)
    )


def main() -> None:
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; transposed / plain CPU time (NARROW = {NARROW})")
    print(f"{'dtype':8} {'M':>6} {'k':>3}  " + " ".join(f"{f'n={n}':>6}" for n in COLUMNS))
    for dtype in (torch.float64, torch.float32):
        for rows in ROWS:
            for inner in INNER:
                cells = " ".join(f"{ratio(rows, inner, n, dtype):6.2f}" for n in COLUMNS)
                print(f"{str(dtype)[6:]:8} {rows:6} {inner:3}  {cells}")


if __name__ == "__main__":
    main()
