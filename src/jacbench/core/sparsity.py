"""Sparsity patterns of Jacobians: where they come from, how they are coloured.

A sparse strategy computes a Jacobian in as many passes as its pattern has colours instead of
one pass per input (or output): columns that share no row can be probed by one JVP with the
sum of their unit vectors, and each nonzero read back from the compressed product (Curtis,
Powell and Reid 1974). Everything here runs once, at prepare time.

Detection (where the model declares no ``jacobian_sparsity()``): forward-mode passes whose
tangent is NaN in one input and zero elsewhere, at ``n_points`` points; an entry belongs to
the pattern where an output's tangent is NaN or nonzero at any of them. IEEE NaN survives a
multiplication by an accidental zero (a derivative that happens to vanish at the point, a
zero weight), so every op with a smooth derivative reports each structural dependency at any
point: the pattern cannot miss one by accident. Ops whose derivative selects a branch (relu,
clamp, max pooling, masks) report only the branch active at the point, hence the union over
several points (the first one the problem's own, the others perturbed by 10% of its scale);
a model built of such ops should declare its pattern. A pattern that still misses an entry
shows up as a wrong answer against the reference, never as a hidden one. Cost: ``n_points``
times N JVPs (about ``n_points`` dense jacfwd calls), vmapped in chunks of at most
``CHUNK_ELEMENTS`` tangent or output numbers: memory O(chunk), never the dense Jacobian.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

# Tangents and outputs of at most this many numbers per vmapped detection chunk.
CHUNK_ELEMENTS = 1 << 20
PERTURBATION = 0.1  # relative size of the extra detection points' offsets


@dataclass(frozen=True)
class Pattern:
    """The structural nonzeros of an (M, N) Jacobian, as row-major sorted coordinates."""

    rows: torch.Tensor  # (nnz,) int64
    cols: torch.Tensor  # (nnz,) int64
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.rows.numel())

    @property
    def density(self) -> float:
        m, n = self.shape
        return self.nnz / (m * n)

    @property
    def transposed(self) -> Pattern:
        return from_coordinates(self.cols, self.rows, (self.shape[1], self.shape[0]))

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
    linear = torch.unique(rows.long().cpu() * n + cols.long().cpu())  # sorted, row-major
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
        coo = mask.to_sparse_coo().coalesce()
        keep = coo.values() != 0
        rows, cols = coo.indices()[:, keep]
    else:
        rows, cols = mask.nonzero(as_tuple=True)
    return from_coordinates(rows, cols, shape)


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


def color_columns(pattern: Pattern) -> torch.Tensor:
    """A colour per column such that no two columns of one colour share a row.

    Greedy in column order (a banded pattern gets its bandwidth: 3 for tridiagonal), on the
    pattern itself rather than on the column intersection graph, whose edges grow with the
    square of the row lengths (2.5 million for a 96 x 2224 dense pattern). Cost
    O(nnz x colours) in numpy; a fully dense pattern gets one colour per column directly.
    """
    m, n = pattern.shape
    if pattern.nnz == m * n:
        return torch.arange(n)
    rows, cols = pattern.rows.numpy(), pattern.cols.numpy()
    order = np.argsort(cols, kind="stable")
    by_col = rows[order]
    starts = np.searchsorted(cols[order], np.arange(n + 1))
    colors = np.zeros(n, dtype=np.int64)
    used = np.zeros((m, 8), dtype=bool)  # used[i, c]: colour c already has a column in row i
    for j in range(n):
        r = by_col[starts[j] : starts[j + 1]]
        free = np.flatnonzero(~used[r].any(axis=0))
        c = int(free[0]) if free.size else used.shape[1]
        if c >= used.shape[1]:
            used = np.concatenate([used, np.zeros_like(used)], axis=1)
        colors[j] = c
        used[r, c] = True
    return torch.from_numpy(colors)


def color_rows(pattern: Pattern) -> torch.Tensor:
    """A colour per row such that no two rows of one colour share a column."""
    return color_columns(pattern.transposed)


def seeds(colors: torch.Tensor) -> torch.Tensor:
    """(n_colors, n) 0/1 matrix: row c is the sum of the unit vectors of colour c."""
    n_colors = int(colors.max()) + 1 if colors.numel() else 0
    out = torch.zeros(n_colors, colors.numel())
    out[colors, torch.arange(colors.numel())] = 1.0
    return out
