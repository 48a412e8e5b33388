"""A prepared Jacobian that starts with the cheapest form and moves on as calls pay for it.

Building a faster form costs time once (tracing the folded graph ~0.3-0.8 CPU-s in a fresh
process, compiling it 1-3.5 CPU-s on seed004) and saves a fraction of a millisecond a call:
a 300-step fit never earns a compile back, a 10^5-call sweep does. Which one a user is in is
not known at ``prepare``, so the choice is made as the calls come, by the ski-rental rule:
keep calling the current form until the time spent in it reaches the next form's estimated
cost to build, then build it once. Whatever the number of calls, each step costs at most
twice the better of the two choices made in hindsight (build at once, or never).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.core.errors import StrategySkip
from jacbench.core.gc_pause import paused
from jacbench.core.prepared import Prepared


@dataclass(frozen=True)
class Stage:
    """A later form: its tier's name, how to build it, what building it is taken to cost."""

    tier: str
    build: Callable[[], Prepared]
    cost_s: float


class Tiered:
    """``jac(x)`` and ``both(x)`` by ``first`` (tier ``tier``), then by each of ``stages``
    once the calls since the last move spent that stage's ``cost_s``; a stage that cannot be
    built (``StrategySkip``) ends the moves, and ``why`` says why."""

    def __init__(self, first: Prepared, tier: str, stages: list[Stage]) -> None:
        self.current, self.tier, self.stages = first, tier, list(stages)
        self.spent_s, self.why = 0.0, ""
        self._lock = threading.Lock()

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
        if not self.stages:
            return fn(x)
        start = time.perf_counter()
        out = fn(x)
        self.spent_s += time.perf_counter() - start
        if self.stages and self.spent_s >= self.stages[0].cost_s:
            self._next()
        return out

    def _next(self) -> None:
        with self._lock:
            if not self.stages:
                return
            stage = self.stages[0]
            try:
                with paused():  # tracing and compiling make many thousands of objects
                    self.current, self.tier = stage.build(), stage.tier
            except StrategySkip as exc:  # e.g. no compiler here: stay, and say why
                self.stages, self.why = [], f"{stage.tier}: {exc}"
                return
            self.stages.pop(0)
            self.spent_s = 0.0

    def settle(self) -> None:
        """Build every later stage now (the runner times the last form, not the way to it)."""
        while self.stages:
            self._next()
