"""Strategies built on reverse-mode ``torch.autograd`` (and its functional wrapper)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from jacbench.core.problem import Problem
from jacbench.core.strategy import Kind, Mode, NoOptions, strategy


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


@strategy(Kind.EXACT, Mode.REVERSE, batch=True)
def autograd_loop(problem: Problem, opts: NoOptions):
    """A Python loop of torch.autograd.grad, one backward pass per output row."""
    last = problem.n_out - 1

    @torch.enable_grad()
    def jac(x: torch.Tensor) -> torch.Tensor:
        X, Y = forward_with_grad(problem, x)
        rows = [
            torch.autograd.grad(Y[:, i].sum(), X, retain_graph=i < last)[0]
            for i in range(problem.n_out)
        ]
        return per_sample(problem, torch.stack(rows, dim=1))

    return jac


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
