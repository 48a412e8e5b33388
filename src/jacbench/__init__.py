"""jacbench: measure how to compute a Jacobian in PyTorch (speed, memory, accuracy).

``jacbench.prepare(f, x0, strategy="auto")`` prepares a reusable Jacobian; ``jacbench.jacobian``
computes one once; ``jacbench.FlatParams`` views a module's parameters as one flat vector;
``jacbench.Blocks`` declares a Jacobian made of local blocks (``jacbench.core.local_blocks``).
The plugin API (docs/extending.md): ``strategy``, ``Kind``, ``Mode``, ``StrategySkip``,
``Declared``, ``PrepInfo``, ``Problem``, and ``jacbench.testing`` (the contract's checks); the
modules behind them may move. Imported on first use (PEP 562): reading results pays no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jacbench.api import jacobian, prepare
    from jacbench.core.enums import Kind, Mode
    from jacbench.core.errors import StrategySkip
    from jacbench.core.local_blocks import Blocks
    from jacbench.core.params import FlatParams
    from jacbench.core.prepared import (
        Declared,
        NonFiniteJacobian,
        PointMismatch,
        Prepared,
        PrepInfo,
    )
    from jacbench.core.problem import Problem
    from jacbench.core.strategy import strategy

from jacbench.core.version import VERSION as __version__  # noqa: E402

_HOMES = {
    "Blocks": "jacbench.core.local_blocks",
    "Declared": "jacbench.core.prepared",
    "FlatParams": "jacbench.core.params",
    "Kind": "jacbench.core.enums",
    "Mode": "jacbench.core.enums",
    "Problem": "jacbench.core.problem",
    "StrategySkip": "jacbench.core.errors",
    "strategy": "jacbench.core.strategy",
    "NonFiniteJacobian": "jacbench.core.prepared",
    "PointMismatch": "jacbench.core.prepared",
    "PrepInfo": "jacbench.core.prepared",
    "Prepared": "jacbench.core.prepared",
    "jacobian": "jacbench.api",
    "prepare": "jacbench.api",
}
__all__ = [
    "Blocks",
    "Declared",
    "FlatParams",
    "Kind",
    "Mode",
    "NonFiniteJacobian",
    "PointMismatch",
    "PrepInfo",
    "Prepared",
    "Problem",
    "StrategySkip",
    "__version__",
    "jacobian",
    "prepare",
    "strategy",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'jacbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
