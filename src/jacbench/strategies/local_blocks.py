"""Local blocks (``jacbench.core.local_blocks``): every block's dense Jacobian in one vmapped
pass of the blocks' own function, placed by the declared indices (exact)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from jacbench.core import sparsity
from jacbench.core.errors import ConfigError
from jacbench.core.local_blocks import Blocks
from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, PrepInfo, StrategySkip, strategy
from jacbench.strategies.compiled import compile_checked
from jacbench.strategies.sparse import OUTPUTS, Assembler, checked, choice


@dataclass
class BlocksOptions:
    # auto: the model's jacobian_blocks() (else one block: dense); in the library a Blocks
    blocks: Any = "auto"
    output: str = "dense"  # as the sparse strategies': dense, csr or scipy
    compile: bool = False  # torch.compile the vmapped pass (in prepare)

    def __post_init__(self) -> None:
        choice("output", self.output, OUTPUTS)
        if not (self.blocks == "auto" or isinstance(self.blocks, Blocks)):
            raise ValueError(f"blocks must be 'auto' or a jacbench.Blocks, got {self.blocks!r}")


def declared(problem: Problem, opts: BlocksOptions) -> tuple[Blocks, str]:
    """(the blocks given or declared, checked against the problem's shape; where from).
    Where none is, one block of every output and every unknown: f's dense Jacobian."""
    if problem.batch > 1:
        raise StrategySkip(f"local blocks are of one point; batch={problem.batch}")
    if isinstance(opts.blocks, Blocks):
        blocks, source = opts.blocks, sparsity.BLOCKS
    elif problem.blocks is not None:
        blocks, source = problem.blocks(), sparsity.BLOCKS
    else:
        every = Blocks(
            torch.arange(problem.n_in)[None], torch.arange(problem.n_out)[None], problem.f
        )
        blocks, source = every, "one block (none declared)"
    try:
        return blocks.checked(problem.n_in, problem.n_out), source
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _by_blocks(problem: Problem, opts: BlocksOptions, transform: Callable) -> Declared:
    """One vmapped ``transform`` (jacrev or jacfwd) of the local function over the blocks;
    its (B, r, k) values summed into the pattern's order where an unknown repeats in a
    block, else read back by one precomputed index."""
    blocks, source = declared(problem, opts)
    device, (b, r), k = problem.device, blocks.rows.shape, blocks.cols.shape[1]
    rows = blocks.rows.unsqueeze(2).expand(b, r, k).reshape(-1)
    cols = blocks.cols.unsqueeze(1).expand(b, r, k).reshape(-1)
    pattern = sparsity.from_coordinates(rows, cols, (problem.n_out, problem.n_in))
    assemble = Assembler.of(problem, pattern, opts.output)
    # each pass value's nonzero (the pattern's keys are sorted), and where it repeats none,
    # the pass value of each nonzero: the inverse permutation
    position = torch.searchsorted(assemble.linear.cpu(), (rows * problem.n_in + cols).cpu())
    repeats = pattern.nnz < position.numel()
    order = torch.argsort(position).to(device)
    position = position.to(device)
    index, data = blocks.cols.to(device), tuple(d.to(device) for d in blocks.data)
    per_block = torch.func.vmap(transform(blocks.local))

    def passes(x: torch.Tensor) -> torch.Tensor:  # (B * r * k,) in the blocks' order
        return per_block(x[index], *data).reshape(-1)

    local = compile_checked(passes, problem.x) if opts.compile else passes

    def jac(x: torch.Tensor) -> Any:
        values = local(x)
        if repeats:
            return assemble(values.new_zeros(pattern.nnz).index_add_(0, position, values))
        return assemble(values.index_select(0, order))

    info = PrepInfo(pattern_density=pattern.density, pattern_source=source)
    return checked(problem, jac, pattern, info, assemble)


@strategy(Kind.EXACT, Mode.REVERSE, options=BlocksOptions)
def blocks_jacrev(problem: Problem, opts: BlocksOptions):
    """Declared local blocks: each block's Jacobian by reverse mode, one vmapped pass (exact)."""
    return _by_blocks(problem, opts, torch.func.jacrev)


@strategy(Kind.EXACT, Mode.FORWARD, options=BlocksOptions)
def blocks_jacfwd(problem: Problem, opts: BlocksOptions):
    """Declared local blocks: each block's Jacobian by forward mode, one vmapped pass (exact)."""
    return _by_blocks(problem, opts, torch.func.jacfwd)
