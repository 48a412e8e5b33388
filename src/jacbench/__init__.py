"""jacbench: measure how to compute a Jacobian in PyTorch (speed, memory, accuracy).

``jacbench.prepare(f, x0, strategy="auto")`` prepares a reusable Jacobian with any registered
strategy; ``jacbench.jacobian(f, x)`` computes one once; ``jacbench.FlatParams`` views a
module's parameters as the flat vector a fitting loop updates.

The plugin API, what an outside strategy imports (docs/extending.md): ``strategy`` (the
decorator), ``Kind``, ``Mode``, ``StrategySkip``, ``Declared``, ``PrepInfo``, ``Problem``;
``jacbench.testing`` holds the contract's checks. These names are the stable contract; the
modules behind them (``jacbench.core...``) may move.

These names are imported on first use (PEP 562), so what needs no torch (``python -m
jacbench.report``, reading results) does not pay for importing it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jacbench.api import jacobian, prepare
    from jacbench.core.enums import Kind, Mode
    from jacbench.core.errors import StrategySkip
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
