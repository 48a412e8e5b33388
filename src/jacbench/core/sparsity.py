"""Sparsity patterns of Jacobians: where they come from, how they are coloured.

A sparse strategy needs as many passes as its pattern has colours. Everything here runs once,
at prepare time. A pattern (``find``) is the caller's (``jacobian_sparsity()`` or
``pattern=``), else the one proved by tracing (``jacbench.core.pattern_trace``), else dense;
``pattern=probe`` is the NaN-tangent probe (branches taken at its points only). A traced or
dense pattern, or one covering the traced one, is ``proved``; any other is checked against
f's directional derivatives (``verify``) and refused where it misses an entry. Colouring:
``color_columns`` (``jacbench.core.colouring``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from jacbench.core import colouring

# Tangents and outputs of at most this many numbers per vmapped detection chunk.
CHUNK_ELEMENTS = 1 << 20
PERTURBATION = 0.1  # relative size of the extra detection points' offsets
BLOCKS = "declared blocks"  # the source of a pattern made of local blocks


@dataclass(frozen=True)
class Pattern:
    """The structural nonzeros of an (M, N) Jacobian, as row-major sorted coordinates."""

    rows: torch.Tensor  # (nnz,) int64
    cols: torch.Tensor  # (nnz,) int64
    shape: tuple[int, int]
    # holds at every point (traced, or dense), so it needs no check beyond the prepared
    # point; declared and probed patterns are checked at random points too (``verify``)
    proved: bool = False

    @property
    def nnz(self) -> int:
        return int(self.rows.numel())

    @property
    def density(self) -> float:
        m, n = self.shape
        return self.nnz / (m * n)

    @property
    def transposed(self) -> Pattern:
        flipped = from_coordinates(self.cols, self.rows, (self.shape[1], self.shape[0]))
        return replace(flipped, proved=self.proved)

    def to(self, device: torch.device) -> Pattern:
        return replace(self, rows=self.rows.to(device), cols=self.cols.to(device))

    def to_dense(self) -> torch.Tensor:
        mask = torch.zeros(self.shape, dtype=torch.bool)
        mask[self.rows, self.cols] = True
        return mask

    def crow_indices(self) -> torch.Tensor:
        """CSR row pointers (the coordinates are row-major sorted)."""
        counts = torch.bincount(self.rows, minlength=self.shape[0])
        return torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])


def from_coordinates(rows: torch.Tensor, cols: torch.Tensor, shape: tuple[int, int]) -> Pattern:
    """A pattern from (possibly repeated, unsorted) coordinates."""
    m, n = shape
    linear = rows.long().cpu() * n + cols.long().cpu()
    if linear.numel() < 2 or not bool((linear[1:] > linear[:-1]).all()):
        linear = torch.unique(linear)  # sorted, row-major (already so: a pass, not a sort)
    return Pattern(linear // n, linear % n, (m, n))


def from_tensor(mask: torch.Tensor, shape: tuple[int, int]) -> Pattern:
    """A pattern from what a model's ``jacobian_sparsity()`` returns: a sparse (COO or CSR)
    tensor or a dense one, of shape (M, N); its nonzero entries are the pattern."""
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(
            f"jacobian_sparsity() has shape {tuple(mask.shape)}, but the Jacobian has shape "
            f"{tuple(shape)} (outputs x inputs, flattened)"
        )
    if mask.layout != torch.strided:
        coo = mask.to_sparse_coo()
        coo = coo if coo.is_coalesced() else coo.coalesce()  # dear on many entries
        keep = coo.values() != 0
        rows, cols = coo.indices()[:, keep]
    else:
        rows, cols = mask.nonzero(as_tuple=True)
    return from_coordinates(rows, cols, shape)


def from_pairs(pattern: Any, shape: tuple[int, int]) -> Pattern:
    """A pattern given by hand: an (M, N) boolean (or 0/1) matrix, dense or sparse, or index
    pairs ``(rows, cols)``."""
    if isinstance(pattern, Pattern):
        if tuple(pattern.shape) != tuple(shape):
            raise ValueError(f"the pattern has shape {pattern.shape}, the Jacobian {shape}")
        return pattern
    if isinstance(pattern, torch.Tensor) and pattern.dim() == 2 and tuple(pattern.shape) == shape:
        return from_tensor(pattern, shape)
    if isinstance(pattern, np.ndarray) and pattern.shape == shape:
        return from_tensor(torch.from_numpy(pattern), shape)
    import scipy.sparse as sp  # only where a pattern is given or coloured

    if sp.issparse(pattern):
        coo = sp.coo_array(pattern)
        stored = coo.data != 0
        nonzero = (torch.from_numpy(coo.row[stored]), torch.from_numpy(coo.col[stored]))
        return from_coordinates(*nonzero, shape)
    expected = (
        f"a ({shape[0]}, {shape[1]}) boolean matrix (dense, sparse or numpy) or index pairs "
        "(rows, cols) of two 1-D integer sequences"
    )
    pairs_array = isinstance(pattern, (torch.Tensor, np.ndarray))  # (2, nnz): index pairs
    if pairs_array and (pattern.ndim != 2 or pattern.shape[0] != 2):
        got = f"an array of shape {tuple(pattern.shape)}"
        raise ValueError(f"pattern= must be {expected}; got {got}")
    try:
        given_rows, given_cols = (np.asarray(v) for v in pattern)
    except (TypeError, ValueError):
        raise ValueError(f"pattern= must be {expected}; got {type(pattern).__name__}") from None
    if given_rows.shape != given_cols.shape or given_rows.ndim != 1:
        raise ValueError(f"pattern= must be {expected}: two 1-D sequences of the same length")
    if given_rows.size and not (
        np.issubdtype(given_rows.dtype, np.integer) and np.issubdtype(given_cols.dtype, np.integer)
    ):
        raise ValueError(f"pattern= must be {expected}: the indices are not integers")
    rows = torch.as_tensor(given_rows, dtype=torch.int64)
    cols = torch.as_tensor(given_cols, dtype=torch.int64)
    inside = (rows >= 0) & (rows < shape[0]) & (cols >= 0) & (cols < shape[1])
    if not bool(inside.all()):
        raise ValueError(f"pattern index pairs fall outside the Jacobian's shape {shape}")
    return from_coordinates(rows, cols, shape)


def dense(shape: tuple[int, int]) -> Pattern:
    m, n = shape
    rows, cols = torch.arange(m).repeat_interleave(n), torch.arange(n).repeat(m)
    return Pattern(rows, cols, shape, proved=True)


def find(
    f: Callable[[torch.Tensor], torch.Tensor],
    points: torch.Tensor,
    n_out: int,
    declared: Any = None,
    how: str = "auto",
    probe_points: int = 3,
) -> tuple[Pattern, str]:
    """(pattern, where it came from): ``declared`` where given (and ``how`` is auto), the
    NaN probe where ``how`` is probe, else the traced pattern, else dense (module docstring).
    A declared ``Pattern`` that is already ``proved`` (auto's traced one) stays "traced"."""
    from jacbench.core.pattern_trace import Unprovable, traced_pattern  # scipy: on first use

    shape = (n_out, points[0].numel())
    if declared is not None and how == "auto":
        pattern = from_pairs(declared, shape)
        if pattern.proved:
            return pattern, "traced"
        return _tightened(*covering(f, points[0], pattern), "declared")
    if how == "probe":
        found = detect(f, detection_points(points, probe_points), n_out)
        return _tightened(*covering(f, points[0], found), f"probed at {probe_points} point(s)")
    try:
        rows, cols = traced_pattern(f, points[0], n_out)
    except Unprovable as exc:
        if shape[0] * shape[1] > DENSE_FALLBACK_MAX:
            raise ValueError(
                f"no sparsity pattern could be proved ({exc}), and the dense one has "
                f"{shape[0]} x {shape[1]} entries: declare the pattern (pattern= or "
                "jacobian_sparsity())"
            ) from None
        return dense(shape), f"dense: no pattern could be proved ({exc})"
    traced = from_coordinates(torch.from_numpy(rows), torch.from_numpy(cols), shape)
    return replace(traced, proved=True), "traced"


def _tightened(pattern: Pattern, dropped: int, source: str) -> tuple[Pattern, str]:
    """(pattern, its source, saying how many entries tracing proved zero)."""
    return (
        pattern,
        f"{source}, tightened by tracing ({dropped} entries proved zero)" if dropped else source,
    )


def covering(
    f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, pattern: Pattern
) -> tuple[Pattern, int]:
    """``pattern`` (declared or probed) tightened by the pattern tracing proves, and how many
    of its entries that dropped. Tracing proves a superset of every entry that can be
    nonzero, so an entry outside it is zero at every point: dropping it never loses one, and
    each colour saved is a pass saved at every call. Where the pattern covers the traced one
    the result is the traced pattern, ``proved`` (it holds at every point); otherwise it is
    not, and ``verify`` checks it at random points. Tracing is the cheaper check where a call
    is dear."""
    from jacbench.core.pattern_trace import Unprovable, traced_pattern

    try:
        rows, cols = traced_pattern(f, x, pattern.shape[0])
    except Unprovable:
        return pattern, 0
    n = pattern.shape[1]
    traced = np.sort(rows * n + cols)
    given = (pattern.rows * n + pattern.cols).numpy()  # sorted: row-major, unique
    keep = _members(given, traced)
    kept = replace(pattern, rows=pattern.rows[keep], cols=pattern.cols[keep])
    return replace(kept, proved=bool(_members(traced, given).all())), int((~keep).sum())


def _members(keys: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """``np.isin(keys, sorted_set)`` by binary search, where ``isin`` hashes (slow on many
    entries)."""
    if not sorted_set.size:
        return np.zeros(keys.shape, dtype=bool)
    at = np.searchsorted(sorted_set, keys).clip(max=sorted_set.size - 1)
    return sorted_set[at] == keys


DENSE_FALLBACK_MAX = 50_000_000  # entries of a dense fallback pattern; beyond, refuse
RANDOM_POINTS = 4  # random points at which a pattern that is not proved is checked


def verify(
    f: Callable[[torch.Tensor], torch.Tensor],
    jacobian_at: Callable[[torch.Tensor], Any],
    x: torch.Tensor,
    first: Any,
    pattern: Pattern,
    source: str,
    allowed: float | None = None,
) -> None:
    """Check a sparse Jacobian (``first`` at ``x``, ``jacobian_at`` elsewhere) against f's
    directional derivatives along random directions (``jacbench.core.directional``): at
    ``x``, and where the pattern is not ``proved`` (declared, probed) at ``RANDOM_POINTS``
    random points too. A pattern that misses an entry there puts that entry's value in the
    wrong place or drops it, which a random direction shows. ``allowed``: the relative
    mismatch tolerated (default: rounding; a finite difference passes its own tolerance).
    An exact Jacobian is compared with reverse-mode products first (plain autograd: nothing
    of torch's compiler imported, where torch.func's JVPs import torch._dynamo). Raises
    ``ValueError`` saying so."""
    from jacbench.core.directional import mismatch

    n_random = 0 if pattern.proved else RANDOM_POINTS
    exact = allowed is None
    where = mismatch(f, jacobian_at, x, first, allowed, n_random, reverse_first=exact)
    if where:
        raise ValueError(
            f"the sparsity pattern ({source}) misses entries of the Jacobian: the sparse "
            f"Jacobian's products with random directions are {where} (against f's own "
            f"derivatives along them; checked at "
            f"the prepared point{f' and {n_random} random points' if n_random else ''}); "
            + (
                "declare blocks whose function gives each block's outputs of f"
                if source == BLOCKS
                else "declare a pattern that covers every entry at every point, or leave "
                "pattern=auto (traced)"
            )
        )


def detection_points(points: torch.Tensor, n_points: int, seed: int = 0) -> list[torch.Tensor]:
    """The problem's first point, then perturbed copies of its points (cycled)."""
    gen = torch.Generator().manual_seed(seed)
    out = [points[0]]
    for k in range(1, n_points):
        base = points[k % len(points)]
        noise = torch.randn(base.shape, generator=gen, dtype=torch.float64).to(base)
        out.append(base + PERTURBATION * base.abs().clamp(min=1.0) * noise)
    return out


def detect(
    f: Callable[[torch.Tensor], torch.Tensor], points: list[torch.Tensor], n_out: int
) -> Pattern:
    """The union over ``points`` of the entries reached by NaN tangents (module docstring)."""
    n_in = points[0].numel()
    chunk = max(1, min(n_in, CHUNK_ELEMENTS // max(n_in, n_out)))  # tangents and outputs
    found: list[torch.Tensor] = []

    for x in points:
        with torch.no_grad():
            if not torch.isfinite(f(x)).all():
                continue  # outside the function's domain: every derivative would be NaN

        def jvp(t: torch.Tensor, x: torch.Tensor = x) -> torch.Tensor:
            return torch.func.jvp(f, (x,), (t,))[1]

        many = torch.func.vmap(jvp)
        for start in range(0, n_in, chunk):
            cols = torch.arange(start, min(n_in, start + chunk), device=x.device)
            tangents = torch.zeros(len(cols), n_in, dtype=x.dtype, device=x.device)
            tangents[torch.arange(len(cols)), cols] = float("nan")
            out = many(tangents).reshape(len(cols), n_out)
            local, rows = (torch.isnan(out) | (out != 0)).nonzero(as_tuple=True)
            found.append((rows.cpu() * n_in + cols[local].cpu()).unique())
    if not found:
        raise ValueError("the function is not finite at any detection point")
    linear = torch.unique(torch.cat(found))
    return Pattern(linear // n_in, linear % n_in, (n_out, n_in))


def lower_bound(pattern: Pattern) -> int:
    """No column colouring has fewer colours than the most nonzeros in one row."""
    return colouring.lower_bound(pattern.rows.numpy(), pattern.shape[0])


def row_lower_bound(pattern: Pattern) -> int:
    """No row colouring has fewer colours than the most nonzeros in one column (the
    transposed pattern's ``lower_bound``, without transposing it)."""
    return colouring.lower_bound(pattern.cols.numpy(), pattern.shape[1])


def color_columns(pattern: Pattern, thorough: bool = False) -> torch.Tensor:
    """A colour per column such that no two columns of one colour share a row
    (``jacbench.core.colouring``: fast first-fit greedy, and DSATUR too where
    ``thorough``)."""
    colors = colouring.color_columns(
        pattern.rows.numpy(), pattern.cols.numpy(), pattern.shape, thorough
    )
    return torch.from_numpy(colors)


def color_rows(pattern: Pattern, thorough: bool = False) -> torch.Tensor:
    """A colour per row such that no two rows of one colour share a column."""
    return color_columns(pattern.transposed, thorough)


def seeds(colors: torch.Tensor) -> torch.Tensor:
    """(n_colors, n) 0/1 matrix: row c is the sum of the unit vectors of colour c."""
    n_colors = int(colors.max()) + 1 if colors.numel() else 0
    out = torch.zeros(n_colors, colors.numel())
    out[colors, torch.arange(colors.numel())] = 1.0
    return out
