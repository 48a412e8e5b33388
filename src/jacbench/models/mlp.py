"""A configurable multilayer perceptron: the default problem."""

from __future__ import annotations

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
