"""A configurable multilayer perceptron: the default problem."""

from __future__ import annotations

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "softplus": nn.Softplus,
}


class MLP(nn.Sequential):
    accepts_batch = True

    def __init__(
        self,
        n_in: int = 32,
        hidden: int = 64,
        n_out: int = 48,
        depth: int = 2,
        activation: str = "tanh",
    ) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        if min(n_in, hidden, n_out, depth) < 1:
            raise ValueError("n_in, hidden, n_out and depth must be at least 1")
        layers: list[nn.Module] = []
        width = n_in
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), ACTIVATIONS[activation]()]
            width = hidden
        layers.append(nn.Linear(width, n_out))
        super().__init__(*layers)
        self.input_shape = (n_in,)


class PerSampleMLP(nn.Module):
    """An MLP applied to each of ``samples`` rows, seen as one function of all of them: the
    Jacobian is block-diagonal (samples blocks of n_out x n_in). No pattern is declared, so
    sparse strategies detect it."""

    accepts_batch = True

    def __init__(self, samples: int = 4, n_in: int = 3, hidden: int = 8, n_out: int = 2) -> None:
        super().__init__()
        if min(samples, n_in, hidden, n_out) < 1:
            raise ValueError("samples, n_in, hidden and n_out must be at least 1")
        self.input_shape = (samples, n_in)
        self.net = MLP(n_in=n_in, hidden=hidden, n_out=n_out, depth=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
