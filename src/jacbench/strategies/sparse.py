"""Sparse Jacobians: a pattern, a colouring, and one pass per colour instead of per input.

``sparse_jacfwd`` colours the columns and runs one vmapped JVP per colour, ``sparse_jacrev``
the rows (one VJP each), ``sparse_fd`` forward differences along the column colours; each
nonzero is read back from the compressed product. The pattern is declared, else proved by
tracing, else dense (``jacbench.core.sparsity.find``), and checked against a directional
derivative in ``prepare``; ``prep.info`` declares the colours, their bound, the density and
where the pattern came from.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from jacbench.core import sparsity
from jacbench.core.errors import ConfigError
from jacbench.core.numerics import tolerance
from jacbench.core.problem import Problem
from jacbench.core.sparsity import Pattern
from jacbench.core.strategy import Declared, Kind, Mode, PrepInfo, StrategySkip, strategy
from jacbench.strategies import autograd
from jacbench.strategies.compiled import compile_checked
from jacbench.strategies.finite_diff import FdOptions, step_size, steps
from jacbench.strategies.func import per_point

PATTERN_SOURCES = ("auto", "detect", "probe")
OUTPUTS = ("dense", "csr", "scipy")
CSR_BETA = "Sparse CSR tensor support is in beta state"  # torch's warning, said to no user
PASSES = ("functorch", "autograd", "autograd_batched")
CHUNK_ELEMENTS = 1 << 20  # perturbed numbers evaluated at once by sparse_fd
MAX_DETECT_POINTS = 100  # each costs N forward-mode passes; a bound, not a useful value


def choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"{name} must be one of {', '.join(valid)}, got {value!r}")


@dataclass
class PatternOptions:
    # auto: the model's jacobian_sparsity() where it declares one, else traced; detect: traced
    # (dense where tracing cannot prove a pattern); probe: NaN tangents at detect_points
    # points (sees only the branches taken there; checked). In the library also an (M, N)
    # boolean matrix or index pairs (rows, cols).
    pattern: Any = "auto"
    detect_points: int = 3  # points whose NaN-tangent patterns are united (probe only)
    # dense (M, N) tensor; csr: a torch.sparse_csr_tensor; scipy: a scipy.sparse.csr_array
    # (what scipy.sparse.linalg.spsolve takes); csr and scipy for batch 1
    output: str = "dense"

    def __post_init__(self) -> None:
        if isinstance(self.pattern, str):
            choice("pattern", self.pattern, PATTERN_SOURCES)
        choice("output", self.output, OUTPUTS)
        points = self.detect_points
        if not (isinstance(points, int) and not isinstance(points, bool)):
            points = -1
        if not 1 <= points <= MAX_DETECT_POINTS:
            raise ValueError(
                f"detect_points must be a positive integer up to {MAX_DETECT_POINTS}, got "
                f"{self.detect_points!r}"
            )


@dataclass
class SparseOptions(PatternOptions):
    # torch.compile the compressed passes (in prepare): eager forward AD is dispatch-bound
    compile: bool = False
    # functorch: one vmapped torch.func pass for all colours (JVPs, or VJPs by rows);
    # autograd: plain torch.autograd, one backward pass per colour (sparse_jacfwd: reverse
    # mode twice, as double_backward), eager only, importing nothing of torch's compiler
    # (torch.func's first pass imports torch._dynamo: auto's first tier avoids it);
    # autograd_batched: the same, all colours in one batched backward pass (imports sympy),
    # for f whose operations are small and dispatch-bound
    passes: str = "functorch"

    def __post_init__(self) -> None:
        super().__post_init__()
        choice("passes", self.passes, PASSES)
        if self.compile and self.passes != "functorch":
            raise ValueError("compile=true compiles the functorch passes: set passes=functorch")


@dataclass
class SparseFdOptions(PatternOptions):
    eps: float | None = None  # relative step as in fd_forward; null: sqrt(machine eps)

    def __post_init__(self) -> None:
        super().__post_init__()
        FdOptions(eps=self.eps)  # the same validation as fd_forward


def find_pattern(problem: Problem, opts: PatternOptions) -> tuple[Pattern, str]:
    """(pattern, where it came from): ``jacbench.core.sparsity.find`` for this problem."""
    declared = None
    if not isinstance(opts.pattern, str):
        declared = opts.pattern
    elif opts.pattern == "auto" and problem.sparsity is not None:
        declared = problem.sparsity()
    how = "auto" if declared is not None else opts.pattern
    return sparsity.find(
        problem.f, problem.points, problem.n_out, declared, how, opts.detect_points
    )


@dataclass(frozen=True)
class Assembler:
    """Places the nonzeros (``values``: (..., nnz) in the pattern's row-major order) into
    the output: a dense Jacobian of the problem's shape, or a CSR matrix."""

    problem: Problem
    pattern: Pattern
    output: str
    crow: torch.Tensor  # CSR row pointers of the pattern
    linear: torch.Tensor  # each nonzero's index in the flattened (M, N) matrix

    @classmethod
    def of(cls, problem: Problem, pattern: Pattern, output: str) -> Assembler:
        """The assembler of ``pattern`` (on the host) for ``output``, on the problem's device."""
        device = problem.device
        crow = pattern.crow_indices().to(device)
        linear = (pattern.rows * pattern.shape[1] + pattern.cols).to(device)
        return cls(problem, pattern.to(device), output, crow, linear)

    def __post_init__(self) -> None:
        """torch warns once a process, at its first CSR matrix, that CSR support is in beta:
        nothing a user can act on. That first matrix is built here, the warning hidden (a
        filter in ``__call__`` would cost every timed call)."""
        if self.output == "csr":
            cols = self.pattern.cols
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", CSR_BETA, UserWarning)
                torch.sparse_csr_tensor(
                    self.crow, cols, torch.zeros(cols.numel(), device=cols.device),
                    size=self.pattern.shape, check_invariants=False,
                )  # fmt: skip

    def __call__(self, values: torch.Tensor) -> Any:
        """A new matrix at each call: its index arrays are copies (a caller that edits one
        answer's indices in place changes no later answer; O(nnz), a fraction of the call)."""
        p, cols = self.problem, self.pattern.cols
        if self.output == "csr":
            return torch.sparse_csr_tensor(
                self.crow.clone(), cols.clone(), values, size=self.pattern.shape,
                check_invariants=False,
            )  # fmt: skip
        if self.output == "scipy":
            import scipy.sparse  # only for this output

            indices = (cols.cpu().numpy().copy(), self.crow.cpu().numpy().copy())
            parts = (values.detach().cpu().numpy(), *indices)
            return scipy.sparse.csr_array(parts, shape=self.pattern.shape)
        # one flat index: placing by (row, column) pairs takes indexing's slower broadcasting
        dense = values.new_zeros(p.batch, p.n_out * p.n_in)
        dense.index_copy_(1, self.linear, values.reshape(p.batch, -1))
        return dense.reshape(p.jacobian_shape)

    def entries(self, dense: torch.Tensor) -> torch.Tensor:
        """The pattern's entries of a dense answer: the only ones that can be NaN or
        infinite (the rest are the zeros ``__call__`` wrote)."""
        return dense.reshape(self.problem.batch, -1).index_select(1, self.linear)


# Reading one entry by its index costs about as much as summing this many: a dense answer is
# checked on its pattern's entries only where they are fewer than its numbers by this factor.
GATHER_COST = 20


def _setup(
    problem: Problem, opts: PatternOptions, by_rows: bool
) -> tuple[Pattern, torch.Tensor, torch.Tensor, Assembler, PrepInfo]:
    """(pattern, colours, seed matrix, assembler, info): what all three strategies share."""
    if opts.output != "dense" and problem.batch > 1:
        raise StrategySkip(
            f"output={opts.output} gives one (M, N) sparse matrix; batch={problem.batch} "
            "needs output=dense"
        )
    try:
        pattern, source = find_pattern(problem, opts)
    except ValueError as exc:
        raise ConfigError(f"pattern: {exc}") from None
    # a preparation that compiles (seconds) affords DSATUR's fewer colours; one that does
    # not keeps the fast greedy colouring (jacbench.core.colouring)
    thorough = bool(getattr(opts, "compile", False))
    color = sparsity.color_rows if by_rows else sparsity.color_columns
    colors = color(pattern, thorough)
    seed = sparsity.seeds(colors).to(dtype=problem.dtype, device=problem.device)
    bound = sparsity.row_lower_bound(pattern) if by_rows else sparsity.lower_bound(pattern)
    info = PrepInfo(
        n_colors=int(seed.shape[0]),
        pattern_density=pattern.density,
        colors_lower_bound=bound,
        pattern_source=source,
    )
    assemble = Assembler.of(problem, pattern, opts.output)
    return assemble.pattern, colors.to(problem.device), seed, assemble, info


def checked(
    problem: Problem,
    jac: Callable,
    pattern: Pattern,
    info: PrepInfo,
    assemble: Assembler,
    approximate: bool = False,
) -> Declared:
    """The sparse Jacobian, after ``sparsity.verify`` at the problem's first point, and at
    random points where the pattern is not proved (an approximate one to within its dtype's
    tolerance for finite differences); a dense answer's finiteness is checked on its
    pattern's entries alone (``Declared.finite_entries``)."""
    numel = problem.n_out * problem.n_in
    fewer = pattern.nnz * GATHER_COST < numel  # else summing all of it is cheaper
    entries = assemble.entries if assemble.output == "dense" and fewer else None
    points = problem.points

    def first_point(out: Any) -> Any:
        return out[0] if problem.batch > 1 else out

    def at(point: torch.Tensor) -> Any:  # the Jacobian at ``point`` (the first point's row)
        moved = points.clone()
        moved[0] = point
        return first_point(jac(moved.reshape(problem.x.shape)))

    first = first_point(jac(problem.x))
    try:
        allowed = tolerance(problem.dtype, Kind.APPROXIMATE) if approximate else None
        sparsity.verify(problem.f, at, points[0], first, pattern, info.pattern_source, allowed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Declared(jac, info, finite_entries=entries)


@torch.enable_grad()
def _reverse_twice(
    problem: Problem, seed: torch.Tensor, batched: bool, x: torch.Tensor
) -> torch.Tensor:
    """(n_colors, M) per point, J s_c for each colour's seed s_c, by reverse mode twice
    (``double_backward``'s trick: g(u) = J^T u is linear in u, so the gradient of s_c . g(u)
    with respect to u is J s_c): one backward pass with create_graph, then one small one per
    colour, or one batched over the colours. One at a time, no ``grad_outputs`` tensor is
    passed (autograd's shape check of one imports sympy)."""
    X, Y = autograd.forward_with_grad(problem, x)
    U = torch.zeros_like(Y, requires_grad=True)
    (G,) = torch.autograd.grad((Y * U).sum(), X, create_graph=True, allow_unused=True)
    linear = G is not None and G.requires_grad  # else f depends on none of x
    return _per_colour(problem, seed, batched, G if linear else None, U)


@torch.enable_grad()
def _reverse_by_rows(
    problem: Problem, seed: torch.Tensor, batched: bool, x: torch.Tensor
) -> torch.Tensor:
    """(n_colors, N) per point, s_c^T J for each colour's seed s_c: one plain backward pass
    per colour, or one batched over the colours."""
    X, Y = autograd.forward_with_grad(problem, x)
    return _per_colour(problem, seed, batched, Y if Y.requires_grad else None, X)


def _per_colour(
    problem: Problem, seed: torch.Tensor, batched: bool, out: torch.Tensor | None, wrt: torch.Tensor
) -> torch.Tensor:
    """The gradients of s_c . out (out: (B, K) per point) with respect to ``wrt`` (B, L)
    for each colour's seed s_c, as the compressed passes give them: (B, n_colors, L)."""
    colours = seed.shape[0]
    if out is None:  # out does not depend on wrt
        stacked = wrt.new_zeros(wrt.shape[0], colours, wrt.shape[1])
    elif batched:
        seeds = seed.unsqueeze(1).expand(colours, *out.shape)
        (grad,) = torch.autograd.grad(out, wrt, seeds, is_grads_batched=True, allow_unused=True)
        stacked = wrt.new_zeros(colours, *wrt.shape) if grad is None else grad
        stacked = stacked.transpose(0, 1)
    else:
        each = [
            torch.autograd.grad((out * seed[c]).sum(), wrt, retain_graph=c < colours - 1,
                                allow_unused=True)[0]
            for c in range(colours)
        ]  # fmt: skip
        stacked = torch.stack([autograd._or_zeros(g, wrt) for g in each], dim=1)
    return stacked if problem.batch > 1 else stacked[0]  # as the compressed passes give it


def _coloured(problem: Problem, opts: SparseOptions, by_rows: bool) -> Declared:
    """One compressed pass per colour, the nonzeros read back in the pattern's order by a
    precomputed linear index: JVPs along the column colours, or VJPs along the row colours
    (``by_rows``), by ``opts.passes``: torch.func's vmapped passes (compiled where
    ``compile``; the gather stays out of the compiled graph, where inductor's indirect
    indexing costs more than the passes), or plain autograd's (batched over the colours or
    one at a time; they handle a batch of points themselves)."""
    pattern, colors, seed, assemble, info = _setup(problem, opts, by_rows=by_rows)
    f = problem.f
    if by_rows:

        def compressed(x: torch.Tensor) -> torch.Tensor:  # (n_colors, N) = seed @ J
            _, pullback = torch.func.vjp(f, x)  # type: ignore[misc]  # stub: or has_aux's triple
            return torch.func.vmap(pullback)(seed)[0]

        index, eager = colors[pattern.rows] * problem.n_in + pattern.cols, _reverse_by_rows
    else:

        def compressed(x: torch.Tensor) -> torch.Tensor:  # (n_colors, M) = (J @ seed.T).T
            return torch.func.vmap(lambda s: torch.func.jvp(f, (x,), (s,))[1])(seed)

        index, eager = colors[pattern.cols] * problem.n_out + pattern.rows, _reverse_twice
    if opts.passes == "functorch":
        many = per_point(problem, compressed)
        passes = compile_checked(many, problem.x) if opts.compile else many  # dynamo's guards
    else:
        passes = functools.partial(eager, problem, seed, opts.passes == "autograd_batched")

    def jac(x: torch.Tensor) -> torch.Tensor:
        return assemble(passes(x).flatten(-2).index_select(-1, index))

    return checked(problem, jac, pattern, info, assemble)


@strategy(Kind.EXACT, Mode.FORWARD, options=SparseOptions, batch=True)
def sparse_jacfwd(problem: Problem, opts: SparseOptions):
    """Column colouring: one vmapped JVP per colour, nonzeros read back (exact)."""
    return _coloured(problem, opts, by_rows=False)


@strategy(Kind.EXACT, Mode.REVERSE, options=SparseOptions, batch=True)
def sparse_jacrev(problem: Problem, opts: SparseOptions):
    """Row colouring: one vmapped VJP per colour, nonzeros read back (exact)."""
    return _coloured(problem, opts, by_rows=True)


@strategy(Kind.APPROXIMATE, Mode.NUMERIC, options=SparseFdOptions, batch=True)
def sparse_fd(problem: Problem, opts: SparseFdOptions):
    """Forward differences along the column colours (Curtis-Powell-Reid): n_colors + 1
    evaluations in batched passes."""
    eps = step_size(problem, opts.eps, central=False)
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

    return checked(problem, jac, pattern, info, assemble, approximate=True)
