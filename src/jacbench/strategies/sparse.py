"""Sparse Jacobians: a pattern, a colouring, and one pass per colour instead of per input.

``sparse_jacfwd`` colours the columns (inputs that share no output) and runs one vmapped JVP
per colour; ``sparse_jacrev`` colours the rows and runs one VJP per colour; ``sparse_fd`` uses
the column colouring for forward differences (Curtis-Powell-Reid). Each nonzero is then read
back from the compressed product. The pattern is the model's ``jacobian_sparsity()`` where it
declares one, else detected (see ``jacbench.core.sparsity``); detection and colouring happen in
``prepare``, so first_call_s pays them once and every later call reuses them. The number of
colours and the pattern's density are declared as ``n_colors`` and ``pattern_density``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.core import sparsity
from jacbench.core.problem import Problem
from jacbench.core.sparsity import Pattern
from jacbench.core.strategy import Declared, Kind, Mode, PrepInfo, StrategySkip, strategy
from jacbench.strategies.compiled import compile_checked
from jacbench.strategies.finite_diff import FdOptions, step_size, steps
from jacbench.strategies.func import per_point

PATTERN_SOURCES = ("auto", "detect")
OUTPUTS = ("dense", "csr")
CHUNK_ELEMENTS = 1 << 20  # perturbed numbers evaluated at once by sparse_fd


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"{name} must be one of {', '.join(valid)}, got {value!r}")


@dataclass
class PatternOptions:
    # auto: the model's jacobian_sparsity() where it declares one, else detect; detect: always
    pattern: str = "auto"
    detect_points: int = 3  # points whose NaN-tangent patterns are united (detection only)
    output: str = "dense"  # dense (M, N) tensor, or csr: a torch.sparse_csr_tensor (batch 1)

    def __post_init__(self) -> None:
        _choice("pattern", self.pattern, PATTERN_SOURCES)
        _choice("output", self.output, OUTPUTS)
        if not (isinstance(self.detect_points, int) and self.detect_points >= 1):
            raise ValueError(f"detect_points must be a positive integer, got {self.detect_points}")


@dataclass
class SparseOptions(PatternOptions):
    # torch.compile the compressed passes and the read-back (in prepare): on burgers n=4096
    # it takes them from ~2.7 ms to ~0.26 ms, eager forward AD being dispatch-bound there
    compile: bool = False


@dataclass
class SparseFdOptions(PatternOptions):
    eps: float | None = None  # relative step as in fd_forward; null: sqrt(machine eps)

    def __post_init__(self) -> None:
        super().__post_init__()
        FdOptions(eps=self.eps)  # the same validation as fd_forward


def find_pattern(problem: Problem, opts: PatternOptions) -> Pattern:
    """The declared pattern, or a detected one (``jacbench.core.sparsity`` says how)."""
    shape = (problem.n_out, problem.n_in)
    if opts.pattern == "auto" and problem.sparsity is not None:
        return sparsity.from_tensor(problem.sparsity(), shape)
    points = sparsity.detection_points(problem.points, opts.detect_points)
    return sparsity.detect(problem.f, points, problem.n_out)


@dataclass(frozen=True)
class Assembler:
    """Places the nonzeros (``values``: (..., nnz) in the pattern's row-major order) into
    the output: a dense Jacobian of the problem's shape, or a CSR matrix."""

    problem: Problem
    pattern: Pattern
    output: str
    crow: torch.Tensor  # CSR row pointers of the pattern

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        p, rows, cols = self.problem, self.pattern.rows, self.pattern.cols
        if self.output == "csr":
            return torch.sparse_csr_tensor(
                self.crow, cols, values, size=self.pattern.shape, check_invariants=False
            )
        dense = values.new_zeros(p.batch, p.n_out, p.n_in)
        dense[:, rows, cols] = values.reshape(p.batch, -1)
        return dense.reshape(p.jacobian_shape)


def _setup(
    problem: Problem, opts: PatternOptions, by_rows: bool
) -> tuple[Pattern, torch.Tensor, torch.Tensor, Assembler, PrepInfo]:
    """(pattern, colours, seed matrix, assembler, info): what all three strategies share."""
    if opts.output == "csr" and problem.batch > 1:
        raise StrategySkip(
            f"output=csr gives one (M, N) sparse matrix; batch={problem.batch} needs output=dense"
        )
    pattern = find_pattern(problem, opts)
    colors = sparsity.color_rows(pattern) if by_rows else sparsity.color_columns(pattern)
    seed = sparsity.seeds(colors).to(dtype=problem.dtype, device=problem.device)
    device_pattern = Pattern(
        pattern.rows.to(problem.device), pattern.cols.to(problem.device), pattern.shape
    )
    info = PrepInfo(n_colors=int(seed.shape[0]), pattern_density=pattern.density)
    crow = pattern.crow_indices().to(problem.device)
    assemble = Assembler(problem, device_pattern, opts.output, crow)
    return device_pattern, colors.to(problem.device), seed, assemble, info


def _maybe_compiled(values: Callable, problem: Problem, opts: SparseOptions) -> Callable:
    return compile_checked(values, problem.x) if opts.compile else values


@strategy(Kind.EXACT, Mode.FORWARD, options=SparseOptions, batch=True)
def sparse_jacfwd(problem: Problem, opts: SparseOptions):
    """Column colouring: one vmapped JVP per colour, nonzeros read back (exact)."""
    pattern, colors, seed, assemble, info = _setup(problem, opts, by_rows=False)
    entry_colors = colors[pattern.cols]
    f = problem.f

    def compressed(x: torch.Tensor) -> torch.Tensor:  # (n_colors, M) = (J @ seed.T).T
        return torch.func.vmap(lambda s: torch.func.jvp(f, (x,), (s,))[1])(seed)

    many = per_point(problem, compressed)
    values = _maybe_compiled(lambda x: many(x)[..., entry_colors, pattern.rows], problem, opts)
    return Declared(lambda x: assemble(values(x)), info)


@strategy(Kind.EXACT, Mode.REVERSE, options=SparseOptions, batch=True)
def sparse_jacrev(problem: Problem, opts: SparseOptions):
    """Row colouring: one vmapped VJP per colour, nonzeros read back (exact)."""
    pattern, colors, seed, assemble, info = _setup(problem, opts, by_rows=True)
    entry_colors = colors[pattern.rows]
    f = problem.f

    def compressed(x: torch.Tensor) -> torch.Tensor:  # (n_colors, N) = seed @ J
        _, pullback = torch.func.vjp(f, x)
        return torch.func.vmap(pullback)(seed)[0]

    many = per_point(problem, compressed)
    values = _maybe_compiled(lambda x: many(x)[..., entry_colors, pattern.cols], problem, opts)
    return Declared(lambda x: assemble(values(x)), info)


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=SparseFdOptions, batch=True)
def sparse_fd(problem: Problem, opts: SparseFdOptions):
    """Forward differences along the column colours (Curtis-Powell-Reid): n_colors + 1
    evaluations in batched passes."""
    eps = step_size(problem, opts, central=False)
    pattern, colors, seed, assemble, info = _setup(problem, opts, by_rows=False)
    entry_colors = colors[pattern.cols]
    B, N, M, C = problem.batch, problem.n_in, problem.n_out, int(seed.shape[0])
    chunk = max(1, CHUNK_ELEMENTS // (B * N))

    def jac(x: torch.Tensor) -> torch.Tensor:
        X = x.reshape(B, N)
        h = steps(X, eps)  # (B, N): column j moves by h_j in the point of its colour
        base = problem.f_many(X)
        diffs = []
        for start in range(0, C, chunk):
            shift = seed[start : start + chunk].unsqueeze(0) * h.unsqueeze(1)  # (B, k, N)
            points = (X.unsqueeze(1) + shift).reshape(-1, N)
            diffs.append(problem.f_many(points).reshape(B, -1, M) - base.unsqueeze(1))
        compressed = torch.cat(diffs, dim=1)  # (B, n_colors, M): sum_j J[:, j] h_j per colour
        values = compressed[:, entry_colors, pattern.rows] / h[:, pattern.cols]
        return assemble(values if B > 1 else values[0])

    return Declared(jac, info)
