"""The functions of the forum threads (seeds 000, 001 and 004), as the users wrote them."""

from __future__ import annotations

import torch
from torch import nn

from jacbench.models.mlp import MLP

REDUCTIONS = ("none", "sum")


class Seed000MLP(nn.Module):
    """Linear(5,10)-ReLU-Linear(10,2)-Sigmoid at a point of [0,1)^5 (seed 000).

    ``reduce="sum"`` makes the function x -> net(x).sum(): its gradient is exactly what
    ``net(x).backward(torch.ones(2))`` computes."""

    accepts_batch = True
    input_shape = (5,)

    def __init__(self, reduce: str = "none") -> None:
        super().__init__()
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
        self.reduce = reduce
        self.net = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2), nn.Sigmoid())

    def sample_input(self, gen: torch.Generator) -> torch.Tensor:
        return torch.rand(self.input_shape, generator=gen, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        return y.sum(-1, keepdim=True) if self.reduce == "sum" else y


class MseSum(nn.Module):
    """x -> MSELoss(reduction="sum")((x + 1) / 2, target) over a 140x120 input (seed 001):
    one output, so the Jacobian is the gradient, ((x + 1) / 2 - target)."""

    accepts_batch = True
    target: torch.Tensor  # a buffer (register_buffer), declared for the type checker

    def __init__(self, shape: tuple[int, int] = (140, 120)) -> None:
        super().__init__()
        self.input_shape = tuple(shape)
        self.register_buffer("target", torch.randn(self.input_shape))
        self.loss = nn.MSELoss(reduction="sum")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = (x + 1) / 2
        if x.dim() == len(self.input_shape):  # one point: exactly the forum's call
            return self.loss(out, self.target).reshape(1)
        per_sample = nn.functional.mse_loss(out, self.target.expand_as(out), reduction="none")
        return per_sample.flatten(1).sum(1, keepdim=True)

    def analytic_jacobian(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.reshape(self.input_shape) + 1) / 2 - self.target).reshape(1, -1)


class Residual(nn.Module):
    """Levenberg-Marquardt residuals (seed 004): a small MLP on fixed samples minus fixed
    targets. With wrt=params the Jacobian is d(residuals)/d(parameters): for 3-10-4 on 144
    samples, N = 84 parameters and M = 576 residuals."""

    targets: torch.Tensor  # a buffer (register_buffer), declared for the type checker

    def __init__(
        self,
        n_in: int = 3,
        hidden: int = 10,
        n_out: int = 4,
        n_samples: int = 144,
        activation: str = "tanh",
    ) -> None:
        super().__init__()
        self.net = MLP(n_in, hidden, n_out, depth=1, activation=activation)
        self.input_shape = (n_samples, n_in)
        self.register_buffer("targets", torch.randn(n_samples, n_out))

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        return self.net(samples) - self.targets
