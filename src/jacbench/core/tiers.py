"""A prepared Jacobian that starts eager and compiles once the calls have paid for it.

Compiling costs seconds (1-3.5 CPU-s on seed004) and saves a fraction of a millisecond a
call: a 300-step fit never earns it back, a 10^5-call sweep does. Which one a user is in is
not known at ``prepare``, so the choice is made as the calls come, by the ski-rental rule:
keep calling the eager Jacobian until the time spent in it reaches the compile's estimated
cost, then compile once. Whatever the number of calls, the total is at most twice that of
the better choice made in hindsight (compile at once, or never).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import Enum

import torch

from jacbench.core.errors import StrategySkip
from jacbench.core.prepared import Prepared


class Tier(str, Enum):
    EAGER = "eager"
    COMPILED = "compiled"


class Tiered:
    """``jac(x)`` and ``both(x)`` by ``eager`` until ``budget_s`` seconds were spent in it,
    then by what ``compile()`` returns (eager for good where that fails)."""

    def __init__(self, eager: Prepared, compile: Callable[[], Prepared], budget_s: float) -> None:
        self.current, self._compile, self.budget_s = eager, compile, budget_s
        self.spent_s, self.stage, self.why = 0.0, Tier.EAGER, ""
        self._lock = threading.Lock()

    @property
    def tier(self) -> str:
        return self.stage.value

    @property
    def chosen_strategy(self) -> str:
        return self.current.strategy

    def jac(self, x: torch.Tensor) -> torch.Tensor:
        return self._timed(self.current.fn, x)

    def both(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        current = self.current
        if current.both_fn is None:
            return current.value_fn(x), self._timed(current.fn, x)
        return self._timed(current.both_fn, x)

    def _timed(self, fn: Callable, x: torch.Tensor):
        if self.stage is not Tier.EAGER or self.why:
            return fn(x)
        start = time.perf_counter()
        out = fn(x)
        self.spent_s += time.perf_counter() - start
        if self.spent_s >= self.budget_s:
            self.settle()
        return out

    def settle(self) -> None:
        """Compile now, unless done or known to fail."""
        with self._lock:
            if self.stage is Tier.COMPILED or self.why:
                return
            try:
                self.current, self.stage = self._compile(), Tier.COMPILED
            except StrategySkip as exc:  # no compiler here: stay eager, and say why
                self.why = str(exc)
