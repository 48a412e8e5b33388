"""Jacobians made of local blocks: each block of outputs depends on a few unknowns only,
through one function shared by all blocks (a bundle adjustment's observation: 3 residuals
of its camera, point and weight). Declared by a model (``jacobian_blocks()``) or given to
``prepare`` (``blocks=``); ``blocks_jacrev`` and ``blocks_jacfwd`` compute every block's
small dense Jacobian in one vmapped pass and place it by the declared indices, which costs
as many passes as one block has outputs (or unknowns), however many blocks share an unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Blocks:
    """``f(x)[rows[b]] == local(x[cols[b]], *(d[b] for d in data))`` for every block b, and
    every output in one block: ``cols`` (B, k) and ``rows`` (B, r) index x and f(x);
    ``local`` maps one block's k unknowns (and its rows of ``data``) to its r outputs."""

    cols: torch.Tensor
    rows: torch.Tensor
    local: Callable[..., torch.Tensor]
    data: tuple[torch.Tensor, ...] = ()

    def checked(self, n_in: int, n_out: int) -> Blocks:
        """These blocks, or a ValueError saying what does not fit an (n_out, n_in) Jacobian."""
        cols, rows = torch.as_tensor(self.cols), torch.as_tensor(self.rows)
        if cols.dim() != 2 or rows.dim() != 2 or cols.shape[0] != rows.shape[0]:
            raise ValueError(
                f"blocks: cols (B, k) and rows (B, r) need the same B, got "
                f"{tuple(cols.shape)} and {tuple(rows.shape)}"
            )
        for name, index, size in (("cols", cols, n_in), ("rows", rows, n_out)):
            if index.numel() and not (int(index.min()) >= 0 and int(index.max()) < size):
                raise ValueError(f"blocks: {name} must index 0..{size - 1}")
        if torch.unique(rows).numel() != rows.numel():
            raise ValueError("blocks: each output belongs to one block (rows repeat)")
        for d in self.data:
            if d.shape[0] != cols.shape[0]:
                raise ValueError(f"blocks: data needs one row per block, got {tuple(d.shape)}")
        return Blocks(cols.long(), rows.long(), self.local, self.data)
