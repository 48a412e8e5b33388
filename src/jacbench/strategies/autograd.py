"""Strategies built on reverse-mode ``torch.autograd`` (and its functional wrapper)."""

from __future__ import annotations

import torch

from jacbench.problem import Problem
from jacbench.strategy import Kind, Mode, NoOptions, strategy


def _forward_with_grad(problem: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluate f at a fresh leaf copy of x that records a graph."""
    x = problem.x.detach().requires_grad_(True)
    return x, problem.f(x)


@strategy(Kind.EXACT, Mode.REVERSE)
def autograd_loop(problem: Problem, opts: NoOptions):
    """A Python loop of torch.autograd.grad, one backward pass per output row."""

    def jac() -> torch.Tensor:
        x, y = _forward_with_grad(problem)
        last = y.numel() - 1
        rows = [torch.autograd.grad(y[i], x, retain_graph=i < last)[0] for i in range(y.numel())]
        return torch.stack(rows)

    return jac


def _functional_jacobian(problem: Problem, **kwargs):
    return lambda: torch.autograd.functional.jacobian(problem.f, problem.x, **kwargs)


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


@strategy(Kind.EXACT, Mode.REVERSE)
def grads_batched(problem: Problem, opts: NoOptions):
    """One torch.autograd.grad call with is_grads_batched=True over the identity."""
    eye = torch.eye(problem.n_out, dtype=problem.dtype, device=problem.device)

    def jac() -> torch.Tensor:
        x, y = _forward_with_grad(problem)
        return torch.autograd.grad(y, x, eye, is_grads_batched=True)[0]

    return jac


@strategy(Kind.NEGATIVE_CONTROL, Mode.REVERSE)
def naive_single_grad(problem: Problem, opts: NoOptions):
    """WRONG BY DESIGN: all outputs fed to one grad call; every row comes back as the sum
    of the rows (seed 003). Kept as a negative control."""

    def jac() -> torch.Tensor:
        x, y = _forward_with_grad(problem)
        outputs = [y[i : i + 1] for i in range(y.numel())]
        grads = torch.autograd.grad(outputs, [x] * len(outputs))
        return torch.stack(grads)

    return jac
