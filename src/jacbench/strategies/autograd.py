"""Strategies built on reverse-mode ``torch.autograd`` (and its functional wrapper)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, NoOptions, strategy


def rows_fn(problem: Problem) -> Callable[[torch.Tensor], torch.Tensor]:
    """F: (B, N) -> (B, M) for the problem's point(s) viewed as a (B, N) matrix.

    For one point F is ``f`` itself (same arithmetic as the forum's code); for a batch it is
    the model's batched forward, whose samples are independent, so the Jacobian of
    ``F(X)[:, i].sum()`` w.r.t. X holds row i of every sample's Jacobian.
    """
    if problem.batch == 1:
        return lambda X: problem.f(X[0]).unsqueeze(0)
    return problem.f_many


def per_sample(problem: Problem, jac: torch.Tensor) -> torch.Tensor:
    """(B, M, N) -> the problem's Jacobian shape ((M, N) for one point)."""
    return jac.reshape(problem.jacobian_shape)


def forward_with_grad(problem: Problem, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, F(X)) with X a leaf that requires grad: the graph the backward passes walk.
    Called with grad enabled (a prepared Jacobian runs under no_grad)."""
    X = x.detach().reshape(problem.batch, problem.n_in).requires_grad_(True)
    Y = rows_fn(problem)(X)
    if Y[0].numel() != problem.n_out:  # rows are read one by one: a longer f is truncated
        raise RuntimeError(
            f"f returned {Y[0].numel()} outputs where it was prepared for {problem.n_out}"
        )
    return X, Y


def _rows(problem: Problem, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """The Jacobian of Y = F(X), one backward pass per output row (each of a scalar: no
    ``grad_outputs``, which imports sympy on first use through autograd's shape check)."""
    last = problem.n_out - 1
    rows = [
        _or_zeros(
            torch.autograd.grad(Y[:, i].sum(), X, retain_graph=i < last, allow_unused=True)[0],
            X,
        )
        for i in range(problem.n_out)
    ]
    return per_sample(problem, torch.stack(rows, dim=1))


def _or_zeros(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """A gradient autograd left out (the output does not depend on it) is zero."""
    return torch.zeros_like(like) if grad is None else grad


@dataclass
class AutogradLoopOptions:
    # every row in one forward and one backward pass over M copies of x (f under
    # torch.func.vmap, in chunks), importing neither sympy nor torch's compiler; a row at a
    # time where f cannot be vmapped, or its copies disagree or are slower (CopiesOrPlain)
    copies: bool = False


@strategy(Kind.EXACT, Mode.REVERSE, options=AutogradLoopOptions, batch=True)
def autograd_loop(problem: Problem, opts: AutogradLoopOptions):
    """A Python loop of torch.autograd.grad, one backward pass per output row."""

    @torch.enable_grad()
    def both(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        X, Y = forward_with_grad(problem, x)
        return _value(problem, Y), _rows(problem, X, Y)

    return with_value(CopiesOrPlain(problem, both, columns=False) if opts.copies else both)


def _value(problem: Problem, Y: torch.Tensor) -> torch.Tensor:
    """f's value(s) from the Jacobian's own forward pass, as ``problem.f`` (or f_many for a
    batch) gives it."""
    Y = Y.detach()
    return Y[0] if problem.batch == 1 else Y


def with_value(both: Callable) -> Declared:
    """A Jacobian whose forward pass also gives f(x) (``value_and_jacobian`` in one pass)."""
    return Declared(lambda x: both(x)[1], value_and_jac=both)


@dataclass
class DoubleBackwardOptions:
    # the second pass for all columns at once (autograd's is_grads_batched, which imports
    # sympy), else one a column
    batched: bool = False
    # every column in one forward and two backward passes over N copies of x (f under
    # torch.func.vmap, in chunks), importing neither sympy nor torch's compiler; a column at
    # a time where f cannot be vmapped, or its copies disagree or are slower (CopiesOrPlain)
    copies: bool = False

    def __post_init__(self) -> None:
        if self.batched and self.copies:
            raise ValueError("batched and copies are two ways to one pass: set one of them")


@strategy(Kind.EXACT, Mode.REVERSE, options=DoubleBackwardOptions, batch=True)
def double_backward(problem: Problem, opts: DoubleBackwardOptions):
    """Columns by reverse mode twice, N passes as forward mode, without forward-mode AD."""
    # g(u) = J^T u is linear in u, so the derivative of its j-th entry w.r.t. u is column j
    # of J (torch.autograd.functional.jvp's trick): one backward pass with create_graph, then
    # one small backward pass per column. Neither imports torch's compiler, as forward AD
    # does on its first plain tensor and torch.func's jacrev through compiled autograd (~1
    # CPU-s in a fresh process), and no grad_outputs tensor is passed (autograd's shape
    # check of one imports sympy). A backward pass that is not itself differentiable (a
    # custom Function marked once_differentiable, or one computing its gradient outside
    # autograd) is found at the first call, where the columns are compared with one plain
    # backward pass: the rows are then computed instead, one backward pass each.
    by_rows: list[bool] = []  # decided at the first call: [True] where the columns fail

    def jac(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        if not Y.requires_grad:  # f does not depend on x
            return per_sample(
                problem, torch.zeros(*Y.shape, X.shape[1], dtype=Y.dtype, device=Y.device)
            )
        if by_rows:
            return _rows(problem, X, Y) if by_rows[0] else _columns(problem, X, Y, opts.batched)
        plain = _plain_product(X, Y)
        try:
            J = _columns(problem, X, Y, opts.batched)
        except RuntimeError:  # e.g. "marked with @once_differentiable"
            J = None
        by_rows.append(J is None or not _agrees(J, *plain))
        return _rows(problem, X, Y) if J is None or by_rows[0] else J

    @torch.enable_grad()
    def both(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        X, Y = forward_with_grad(problem, x)
        return _value(problem, Y), jac(X, Y)

    return with_value(CopiesOrPlain(problem, both, columns=True) if opts.copies else both)


# Numbers of f's output the copies hold at once (each chunk of copies is one forward pass and
# its backward passes): 32 MiB of float64 outputs, their activations a few times that.
COPIES_MAX_OUTPUTS = 1 << 22

# (problem, copies of x (k, *x's shape), their outputs (k, *f's shape), index of the first
# copy) -> the k rows (B, k, N) or columns (B, M, k) of J that those copies give
Part = Callable[[Problem, torch.Tensor, torch.Tensor, int], torch.Tensor]


def _by_copies(
    problem: Problem, F: Callable, x: torch.Tensor, count: int, part: Part, dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(f(x), J) from ``count`` copies of x run as one batch (f under torch.func.vmap, in
    chunks): each copy's passes give one row or column (``part``, joined along ``dim``).
    Batching by copying x imports neither sympy (``is_grads_batched``'s shape check does)
    nor torch's compiler (torch.func's transforms do). ``F``: f (f_many for a batch of
    points) under torch.func.vmap."""
    X = x.detach().reshape(problem.batch, problem.n_in)
    if problem.batch == 1:  # f itself is vmapped: no (1, N) view around it for each copy
        X = X[0]
    chunk = max(1, COPIES_MAX_OUTPUTS // max(1, problem.batch * problem.n_out))
    value, parts = None, []
    for start in range(0, count, chunk):
        copies = X.expand(min(chunk, count - start), *X.shape).clone().requires_grad_(True)
        Y = F(copies)  # (k, *f's shape)
        if value is None:
            value = Y[0].detach()
        parts.append(part(problem, copies, Y, start))
    assert value is not None  # count >= 1
    return value, per_sample(problem, parts[0] if len(parts) == 1 else torch.cat(parts, dim))


def _copied_rows(problem: Problem, copies: torch.Tensor, Y: torch.Tensor, start: int):
    """Rows start..start+k of J: one backward pass of copy j's output start + j."""
    k = copies.shape[0]
    along = Y.reshape(k, problem.batch, problem.n_out).diagonal(offset=start, dim1=0, dim2=2)
    if not along.requires_grad:
        return torch.zeros_like(copies).reshape(k, problem.batch, -1).transpose(0, 1)
    (G,) = torch.autograd.grad(along.sum(), copies, allow_unused=True)
    return _or_zeros(G, copies).reshape(k, problem.batch, -1).transpose(0, 1)


def _copied_columns(problem: Problem, copies: torch.Tensor, Y: torch.Tensor, start: int):
    """Columns start..start+k of J: ``G = (J^T u_j)_j`` for each copy's own u_j, whose
    derivative along e_{start+j} in copy j is that column (``double_backward``'s trick)."""
    k = copies.shape[0]
    U = torch.zeros_like(Y, requires_grad=True)
    G = None
    if Y.requires_grad:
        (G,) = torch.autograd.grad((Y * U).sum(), copies, create_graph=True, allow_unused=True)
    along = None if G is None else G.reshape(k, problem.batch, -1).diagonal(start, 0, 2)
    if along is None or not along.requires_grad:  # Y does not depend on x, or G on u
        return torch.zeros(problem.batch, problem.n_out, k, dtype=Y.dtype, device=Y.device)
    (H,) = torch.autograd.grad(along.sum(), U, allow_unused=True)  # along: (B, k)
    return _or_zeros(H, U).reshape(k, problem.batch, -1).permute(1, 2, 0)


Both = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


# The copies' choice: timed calls of each way at most, and the ratio of their best times
# beyond which one is clearly faster after a single timed call each
COPIES_SAMPLES, COPIES_CLEAR = 3, 2.0


def copies_chosen(copies_s: list[float], plain_s: list[float]) -> bool | None:
    """Whether the copies are the way, from each way's timed calls (taken in turns), or None
    while more are needed: one each where one way is over COPIES_CLEAR times faster, else
    COPIES_SAMPLES each, compared by their best (an interrupted call does not decide)."""
    if not copies_s or len(plain_s) < len(copies_s):
        return None
    ratio = min(copies_s) / max(min(plain_s), 1e-12)
    if len(copies_s) < COPIES_SAMPLES and 1 / COPIES_CLEAR < ratio < COPIES_CLEAR:
        return None
    return ratio <= 1.0


class CopiesOrPlain:
    """``both(x)`` by copies of x (its columns, else its rows) where they hold and pay: f can
    be vmapped, w^T J agrees with one plain backward pass (a copy is not f where f keeps
    state of its own), and the copies take no longer than the plain passes (where f's own
    work dominates they repeat it N times); else by ``plain``, from then on. Decided over
    the first calls, each computing its Jacobian once: the first checks the copies, then
    both ways answer in turns, timed, until ``copies_chosen`` decides. ``use``: None while
    undecided, then whether the copies are used."""

    def __init__(self, problem: Problem, plain: Both, columns: bool) -> None:
        self.problem, self.plain = problem, plain
        self.count, self.part, self.dim = (
            (problem.n_in, _copied_columns, -1) if columns else (problem.n_out, _copied_rows, 1)
        )
        self.F = torch.func.vmap(problem.f if problem.batch == 1 else problem.f_many)
        self.use: bool | None = None
        self.held = False  # the first call found that the copies hold here
        self.copies_s: list[float] = []  # timed calls of each way, taken in turns
        self.plain_s: list[float] = []

    def copied(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _by_copies(self.problem, self.F, x, self.count, self.part, self.dim)

    @torch.enable_grad()
    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.use is not None:
            return self.copied(x) if self.use else self.plain(x)
        if not self.held:
            out = self._checked_copies(x)
            if out is None:  # for good
                self.use = False
                return self.plain(x)
            self.held = True
            return out
        way, times = (
            (self.plain, self.plain_s)
            if len(self.plain_s) <= len(self.copies_s)
            else (self.copied, self.copies_s)
        )
        start = time.perf_counter()
        out = way(x)
        times.append(time.perf_counter() - start)
        self.use = copies_chosen(self.copies_s, self.plain_s)
        return out

    def _checked_copies(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The copies' answer where they hold here, else None."""
        X, Y = forward_with_grad(self.problem, x)
        if not Y.requires_grad:  # f does not depend on x: the plain way gives its zeros
            return None
        plain_product = _plain_product(X, Y)
        try:
            out = self.copied(x)
        except Exception as exc:  # e.g. vmap: .item(), data-dependent control flow
            raise_if_interrupt(exc)
            return None
        return out if _agrees(out[1], *plain_product) else None


def _columns(
    problem: Problem, X: torch.Tensor, Y: torch.Tensor, batched: bool = False
) -> torch.Tensor:
    """The Jacobian of Y = F(X) by columns, reverse mode twice (``double_backward``): the
    second pass one column at a time, or all at once (``batched``)."""
    U = torch.zeros_like(Y, requires_grad=True)
    (G,) = torch.autograd.grad((Y * U).sum(), X, create_graph=True, allow_unused=True)
    if G is None:  # Y does not depend on X
        return per_sample(
            problem, torch.zeros(*Y.shape, X.shape[1], dtype=Y.dtype, device=Y.device)
        )
    if batched:  # e_j for every sample at once, j = 1..N: (N, B, N) -> (N, B, M)
        basis = torch.eye(problem.n_in, dtype=G.dtype, device=G.device)
        basis = basis.unsqueeze(1).expand(problem.n_in, *G.shape)
        (stacked,) = torch.autograd.grad(G, U, basis, is_grads_batched=True, allow_unused=True)
        if stacked is None:  # G does not depend on U: its backward was not differentiable
            stacked = torch.zeros(problem.n_in, *U.shape, dtype=U.dtype, device=U.device)
        return per_sample(problem, stacked.permute(1, 2, 0))
    last = problem.n_in - 1
    columns = [
        _or_zeros(
            torch.autograd.grad(G[:, j].sum(), U, retain_graph=j < last, allow_unused=True)[0],
            U,
        )
        for j in range(problem.n_in)
    ]
    return per_sample(problem, torch.stack(columns, dim=-1))


def _plain_product(X: torch.Tensor, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, w^T J) for a random w, by one plain backward pass."""
    w = torch.randn(Y.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = w.to(device=Y.device, dtype=Y.dtype)
    (product,) = torch.autograd.grad((Y * w).sum(), X, retain_graph=True, allow_unused=True)
    return w, _or_zeros(product, X)


def _agrees(J: torch.Tensor, w: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether w^T J matches the plain backward pass's w^T J within rounding (a backward pass
    that cannot be differentiated gives zeros where it should not)."""
    J = J.reshape(w.shape[0], w.shape[1], -1).to(torch.float64)
    w64 = w.to(torch.float64)
    got = torch.einsum("bm,bmn->bn", w64, J)
    scale = torch.einsum("bm,bmn->bn", w64.abs(), J.abs()) + expected.abs().to(torch.float64)
    tolerance = 1e3 * torch.finfo(w.dtype).eps * scale
    return bool(((got - expected.to(torch.float64)).abs() <= tolerance).all())


def _functional_jacobian(problem: Problem, **kwargs):
    return lambda x: torch.autograd.functional.jacobian(problem.f, x, **kwargs)


@strategy(Kind.EXACT, Mode.REVERSE)
def functional(problem: Problem, opts: NoOptions):
    """torch.autograd.functional.jacobian with its defaults (a row loop): PyTorch's default."""
    return _functional_jacobian(problem)


@strategy(Kind.EXACT, Mode.REVERSE)
def functional_vectorized(problem: Problem, opts: NoOptions):
    """torch.autograd.functional.jacobian(vectorize=True): vmap over backward passes."""
    return _functional_jacobian(problem, vectorize=True)


@strategy(Kind.EXACT, Mode.FORWARD)
def functional_forward(problem: Problem, opts: NoOptions):
    """torch.autograd.functional.jacobian(vectorize=True, strategy="forward-mode")."""
    return _functional_jacobian(problem, vectorize=True, strategy="forward-mode")


@strategy(Kind.EXACT, Mode.REVERSE, batch=True)
def grads_batched(problem: Problem, opts: NoOptions):
    """One torch.autograd.grad call with is_grads_batched=True over the identity."""
    eye = torch.eye(problem.n_out, dtype=problem.dtype, device=problem.device)
    grad_outputs = eye.unsqueeze(1).expand(problem.n_out, problem.batch, problem.n_out)

    @torch.enable_grad()
    def jac(x: torch.Tensor) -> torch.Tensor:
        X, Y = forward_with_grad(problem, x)
        rows = torch.autograd.grad(Y, X, grad_outputs, is_grads_batched=True)[0]
        return per_sample(problem, rows.transpose(0, 1))

    return jac


@strategy(Kind.NEGATIVE_CONTROL, Mode.REVERSE)
def naive_single_grad(problem: Problem, opts: NoOptions):
    """WRONG BY DESIGN: all outputs fed to one grad call; every row comes back as the sum
    of the rows (seed 003). Kept as a negative control."""

    @torch.enable_grad()
    def jac(x: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_(True)
        y = problem.f(x)
        outputs = [y[i : i + 1] for i in range(y.numel())]
        grads = torch.autograd.grad(outputs, [x] * len(outputs))
        return torch.stack(grads)

    return jac
