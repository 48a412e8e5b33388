"""A prepared Jacobian that starts with the cheapest form and moves on as calls pay for it.

Building a faster form costs time once (tracing the folded graph ~0.3-0.8 CPU-s in a fresh
process, compiling it 1-3.5 CPU-s on seed004) and saves a fraction of a millisecond a call:
a 300-step fit never earns a compile back, a 10^5-call sweep does. Which one a user is in is
not known at ``prepare``, so the choice is made as the calls come, by the ski-rental rule:
keep calling the current form until the time spent in it reaches the next form's estimated
cost to build, then build it once. Whatever the number of calls, each step costs at most
twice the better of the two choices made in hindsight (build at once, or never).

A new form is not trusted blindly: its first call is checked against forward mode's
derivative of f at that point along a random direction (``jacbench.core.agreement``). Where
it raises or disagrees, the Jacobian goes back to the form before, says so once (a
``RuntimeWarning``), stays there, and records why (``Tiered.refused``).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from jacbench.core.errors import RetraceStorm, StrategySkip
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.prepared import Prepared

# "" when a Jacobian at a point is right there, else why not (jacbench.core.agreement)
Check = Callable[[torch.Tensor, Any], str]


@dataclass(frozen=True)
class Stage:
    """A later form: its tier's name, how to build it, what building it is taken to cost."""

    tier: str
    build: Callable[[], Prepared]
    cost_s: float


@dataclass(frozen=True)
class TierRefused:
    """A later tier that failed to build or whose first answer was wrong: the Jacobian stays
    in the tier before (``back_to``) for good. Recordable: what, and why."""

    tier: str
    strategy: str
    back_to: str
    reason: str


class Tiered:
    """``jac(x)`` and ``both(x)`` by ``first`` (tier ``tier``), then by each of ``stages``
    once the calls since the last move spent that stage's ``cost_s``; a stage that cannot be
    built (``StrategySkip``) ends the moves, and ``why`` says why; one that fails otherwise,
    or whose first answer ``check`` rejects, ends them too (``refused``), as does a traced
    tier whose graph must be traced again at every call (``RetraceStorm``: back to the first
    tier). ``x0``: the prepared (flat) point, where ``settle`` checks each new tier."""

    def __init__(
        self, first: Prepared, tier: str, stages: list[Stage], check: Check, x0: torch.Tensor
    ) -> None:
        self.current, self.tier, self.stages, self.x0 = first, tier, list(stages), x0
        self.first, self.first_tier = first, tier
        self.spent_s, self.why = 0.0, ""
        self.refused: TierRefused | None = None
        self._check = check
        self._before: tuple[Prepared, str] | None = None  # while the new tier is unchecked
        self._lock = threading.Lock()

    @property
    def chosen_strategy(self) -> str:
        return self.current.strategy

    def jac(self, x: torch.Tensor) -> Any:
        try:
            if self._before is not None:
                return self._first(x, both=False)
            if not self.stages:
                return self.current.raw(x)
            start = time.perf_counter()
            out = self.current.raw(x)
        except RetraceStorm as exc:
            return self._stormed(exc).raw(x)
        self._spent(time.perf_counter() - start)
        return out

    def both(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        try:
            if self._before is not None:
                return self._first(x, both=True)
            if not self.stages:
                return self.current.raw_both(x)
            start = time.perf_counter()
            out = self.current.raw_both(x)
        except RetraceStorm as exc:
            return self._stormed(exc).raw_both(x)
        self._spent(time.perf_counter() - start)
        return out

    def _stormed(self, exc: RetraceStorm) -> Prepared:
        """Back to the first tier for good: a traced tier whose graph is traced again at
        every call costs a trace a call (what f reads keeps changing: the eager tier reads
        it at each call)."""
        with self._lock:
            if self.current is not self.first:
                tier, strategy = self.tier, self.current.strategy
                self.current, self.tier = self.first, self.first_tier
                self._refuse(tier, strategy, str(exc))
        return self.first

    def _spent(self, seconds: float) -> None:
        self.spent_s += seconds
        if self.stages and self.spent_s >= self.stages[0].cost_s:
            self._next()

    def _next(self) -> None:
        with self._lock:
            if not self.stages or self._before is not None:
                return
            stage = self.stages.pop(0)
            try:
                built = stage.build()
            except StrategySkip as exc:  # e.g. no compiler here: stay, and say why
                self.stages, self.why = [], f"{stage.tier}: {exc}"
                return
            except Exception as exc:
                raise_if_interrupt(exc)
                self._refuse(stage.tier, "", f"it failed to build: {_one_line(exc)}")
                return
            self._before = (self.current, self.tier)
            self.current, self.tier, self.spent_s = built, stage.tier, 0.0

    def _first(self, x: torch.Tensor, both: bool) -> Any:
        """The first call in a new tier, checked; the tier before answers where it fails."""
        with self._lock:
            if self._before is None:  # another thread checked it meanwhile
                return self.current.raw_both(x) if both else self.current.raw(x)
            new = self.current
            try:
                start = time.perf_counter()
                out = new.raw_both(x) if both else new.raw(x)
                seconds = time.perf_counter() - start
                wrong = self._check(x, out[1] if both else out)
            except RetraceStorm:  # back to the first tier (jac, both)
                self._before = None
                raise
            except Exception as exc:
                raise_if_interrupt(exc)
                wrong = f"its first call raised {_one_line(exc)}"
            if wrong:
                (before, tier), self._before = self._before, None
                new_tier, self.current, self.tier = self.tier, before, tier
                self._refuse(new_tier, new.strategy, wrong)
                return before.raw_both(x) if both else before.raw(x)
            self._before = None
        self._spent(seconds)  # a right first call counts towards the next move
        return out

    def _refuse(self, tier: str, strategy: str, reason: str) -> None:
        self.stages = []
        self.refused = TierRefused(tier, strategy, self.tier, reason)
        warnings.warn(
            f"auto: its {tier} tier ({strategy or 'not built'}) was not used: {reason}; this "
            f"prepared Jacobian stays in its {self.tier} tier ({self.current.strategy})",
            RuntimeWarning,
            stacklevel=4,
        )

    def settle(self) -> None:
        """Build every later stage now, each checked at the prepared point (the runner times
        the last form, not the way to it)."""
        while self.stages or self._before is not None:
            if self._before is not None:
                with torch.no_grad():
                    self._first(self.x0, both=False)
            else:
                self._next()


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
