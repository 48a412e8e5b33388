"""Column colourings of a sparsity pattern: which inputs one JVP may probe together.

No two columns of a colour share a row, so a colour is probed by one JVP with the sum of its
unit vectors (Curtis, Powell and Reid 1974). The fast colouring (default) is first-fit greedy
in natural and largest-first order, stopping at the lower bound (the most nonzeros in a row),
each order one pass of scipy's compiled grouping (``scipy.optimize._group_columns``, not
exported: its answer is checked as data, with a numpy first-fit where it is missing or
wrong). ``thorough`` adds DSATUR (Brelaz 1979), fewer colours at more cost, for preparations
that compile anyway. Timings: ``scripts/bench_sparse.py``.
"""

from __future__ import annotations

import heapq

import numpy as np

# Entries of the column intersection graph above which DSATUR is not tried.
DSATUR_EDGES = 20_000_000


class ColumnRows:
    """The pattern by columns (CSC): ``rows[ptr[j]:ptr[j + 1]]`` are column j's rows."""

    def __init__(self, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> None:
        self.shape = shape
        self.row_of, self.col_of = rows, cols
        by = np.argsort(cols, kind="stable")
        self.rows = rows[by]
        self.ptr = np.searchsorted(cols[by], np.arange(shape[1] + 1))

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.ptr)

    def ordered(self, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ptr, rows) of the columns taken in ``order`` (a permutation)."""
        lengths = self.counts[order]
        ptr = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        where = np.repeat(self.ptr[:-1][order] - ptr[:-1], lengths) + np.arange(ptr[-1])
        return ptr, self.rows[where]


def lower_bound(rows: np.ndarray, m: int) -> int:
    """No column colouring has fewer colours than the most nonzeros in one row."""
    return int(np.bincount(rows, minlength=m).max()) if rows.size else 0


def is_valid(pattern: ColumnRows, colors: np.ndarray) -> bool:
    """Whether ``colors`` gives every column a colour and no two columns of a colour share
    a row."""
    m, n = pattern.shape
    if colors.shape != (n,) or (n and (colors.min() < 0)):
        return False
    if not pattern.row_of.size:
        return True
    k = int(colors.max()) + 1
    key = pattern.row_of.astype(np.int64) * k + colors[pattern.col_of]
    if m * k <= 8 * key.size + 1_000_000:  # small enough to count in place
        return int(np.bincount(key, minlength=m * k).max()) <= 1
    key.sort()
    return not bool((key[1:] == key[:-1]).any())


def first_fit(pattern: ColumnRows, order: np.ndarray) -> np.ndarray:
    """Greedy colouring: each column in ``order`` takes the smallest colour none of the
    columns already coloured in its rows has."""
    m, n = pattern.shape
    ptr, rows = pattern.ordered(order)
    colors = _compiled_first_fit(m, n, ptr, rows)
    out = np.empty(n, dtype=np.int64)
    if colors is not None:
        out[order] = colors
        if is_valid(pattern, out):  # scipy's routine is not public: its answer is data
            return out
    out[order] = _python_first_fit(m, n, ptr, rows)
    return out


def _compiled_first_fit(m: int, n: int, ptr: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
    """scipy's compiled CPR grouping (first-fit in column order), or None without it: it
    imports scipy.optimize, but is far faster than the Python first-fit on many nonzeros."""
    try:
        from scipy.optimize._group_columns import group_sparse
    except ImportError:
        return None
    try:
        return np.asarray(group_sparse(m, n, rows.astype(np.int64), ptr.astype(np.int64)))
    except (TypeError, ValueError):  # a changed signature: the Python one instead
        return None


def _python_first_fit(m: int, n: int, ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """First-fit in column order with a bit mask of the colours used per row: a few
    Python operations per nonzero."""
    used = [0] * m
    bounds, flat = ptr.tolist(), rows.tolist()
    colors = [0] * n
    for j in range(n):
        mine = flat[bounds[j] : bounds[j + 1]]
        taken = 0
        for i in mine:
            taken |= used[i]
        bit = ~taken & (taken + 1)  # the lowest colour not taken
        colors[j] = bit.bit_length() - 1
        for i in mine:
            used[i] |= bit
    return np.asarray(colors, dtype=np.int64)


def dsatur(pattern: ColumnRows) -> np.ndarray:
    """DSATUR on the column intersection graph, with a heap: the column whose neighbours
    already use the most colours goes next."""
    import scipy.sparse as sp

    m, n = pattern.shape
    ones = np.ones(pattern.row_of.size, dtype=np.int32)
    incidence = sp.csr_array((ones, (pattern.row_of, pattern.col_of)), shape=(m, n))
    graph = (incidence.T @ incidence).tocsr()
    indptr, indices = graph.indptr, graph.indices
    degree = np.diff(indptr)
    colors = np.full(n, -1, dtype=np.int64)
    seen: list[set[int]] = [set() for _ in range(n)]
    heap = [(0, -int(degree[j]), j) for j in range(n)]
    heapq.heapify(heap)
    while heap:
        _, _, j = heapq.heappop(heap)
        if colors[j] >= 0:
            continue
        taken = seen[j]
        c = 0
        while c in taken:
            c += 1
        colors[j] = c
        for k in indices[indptr[j] : indptr[j + 1]]:
            if colors[k] < 0 and c not in seen[k]:
                seen[k].add(c)
                heapq.heappush(heap, (-len(seen[k]), -int(degree[k]), int(k)))
    return colors


def graph_size(pattern: ColumnRows) -> int:
    """Entries of the column intersection graph: the sum of squared row lengths."""
    counts = np.bincount(pattern.row_of, minlength=pattern.shape[0]).astype(np.float64)
    return int((counts**2).sum())


def color_columns(
    rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], thorough: bool = False
) -> np.ndarray:
    """A colour per column of the pattern (row-major coordinates ``rows``, ``cols``): the
    fewest of first-fit in natural and in largest-first order, and with ``thorough`` of
    DSATUR too (where the intersection graph stays small); stops at the lower bound. A
    fully dense pattern gets one colour per column directly."""
    m, n = shape
    if rows.size == m * n:
        return np.arange(n, dtype=np.int64)
    bound = lower_bound(rows, m)
    pattern = ColumnRows(rows, cols, shape)
    best = first_fit(pattern, np.arange(n))
    tries = [lambda: first_fit(pattern, np.argsort(-pattern.counts, kind="stable"))]
    if thorough and graph_size(pattern) <= DSATUR_EDGES:
        tries.append(lambda: dsatur(pattern))
    for attempt in tries:
        if best.max(initial=-1) + 1 <= bound:
            break
        colors = attempt()
        if colors.max() < best.max():
            best = colors
    return best
