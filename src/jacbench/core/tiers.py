"""A prepared Jacobian that answers by its cheapest form until the caller settles it.

Faster forms (batched passes, a folded graph, compiled code) cost seconds once to build.
Nothing is built behind the caller: ``settle()`` builds the last form that can be built,
now, in the caller's thread; with a ``patience`` the call at which the calls since the last
move spent that many times the next form's cost builds it (ski rental), both counted in the
process's CPU time (what neighbours on a busy machine leave alone). A new form's first
answer is checked at the prepared point (``jacbench.core.agreement``): where wrong or
failing it is refused, said once and recorded (``Tiered.refused``); a traced form captured
again at nearly every call (``RetraceStorm``) gives way to the last form that traces nothing.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from jacbench.core.errors import RetraceStorm, StrategySkip, one_line
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.prepared import Prepared

# "" when a Jacobian at a point is right there, else why not (jacbench.core.agreement)
Check = Callable[[torch.Tensor, Any], str]


@dataclass(frozen=True)
class Stage:
    """A later form: its tier's name, how to build it, and whether it is a traced graph
    (a retrace storm sends the Jacobian back from it)."""

    tier: str
    build: Callable[[], Prepared]
    traced: bool = False
    cost_s: float = 1.0  # what building it costs, as last measured here (patience's yardstick)


@dataclass(frozen=True)
class TierRefused:
    """A later tier that failed to build or whose first answer was wrong: the Jacobian stays
    in the tier before (``back_to``) for good. Recordable: what, and why."""

    tier: str
    strategy: str
    back_to: str
    reason: str


class Tiered:
    """``jac(x)`` and ``both(x)`` by ``first`` (tier ``tier``) until ``settle()`` moves to
    the last of ``stages`` that builds, checked at ``x0`` by ``check``."""

    def __init__(
        self,
        first: Prepared,
        tier: str,
        stages: list[Stage],
        check: Check,
        x0: torch.Tensor,
        patience: float | None = None,
        measured: Callable[[str, float], None] | None = None,
    ) -> None:
        self.current, self.tier, self.stages, self.x0 = first, tier, list(stages), x0
        self.untraced = (first, tier)  # the last tier reached that traces nothing
        self.history: list[str] = [f"{tier} ({first.strategy})"]
        self.why = ""  # why the last tier could not be built here (e.g. no compiler)
        self.refused: TierRefused | None = None
        self.patience, self.spent_s = patience, 0.0  # None: moves at settle() only
        self._check, self._measured = check, measured  # measured(tier, seconds to build)
        self._lock = threading.Lock()  # one move at a time

    @property
    def chosen_strategy(self) -> str:
        return self.current.strategy

    def jac(self, x: torch.Tensor) -> Any:
        return self._answer(x, both=False)

    def both(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return self._answer(x, both=True)

    def _answer(self, x: torch.Tensor, both: bool) -> Any:
        form = self.current
        patience = self.patience if self.stages else None  # no move ahead: no clock read
        start = time.process_time() if patience is not None else 0.0
        try:
            out = form.raw_both(x) if both else form.raw(x)
        except RetraceStorm as exc:
            form = self._stormed(form, exc)
            return form.raw_both(x) if both else form.raw(x)
        if patience is not None and self.stages:
            self.spent_s += time.process_time() - start
            if self.spent_s >= patience * self.stages[0].cost_s:
                self._move()
        return out

    def _move(self) -> None:
        """Build the next stage now (patience reached), in the caller's thread; where
        another thread moves already, this call does not wait for it (that thread may wait
        for a lock this one holds)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self.stages:
                return
            stage, self.spent_s = self.stages.pop(0), 0.0
            if not self._built(stage):
                self.stages = []
        finally:
            self._lock.release()

    def _stormed(self, form: Prepared, exc: RetraceStorm) -> Prepared:
        """Back to the last tier that traces nothing, for good: what f reads keeps changing,
        and an untraced tier reads it at each call."""
        untraced, untraced_tier = self.untraced
        if self.current is form and form is not untraced:
            tier = self.tier
            self.current, self.tier = untraced, untraced_tier
            self._refuse(tier, form.strategy, str(exc))
        return untraced

    def settle(self) -> None:
        """Build the last tier that can be built here, now (the tiers in between are not
        built; one that cannot be built, ``StrategySkip``, gives way to the one before it),
        and check its first answer at the prepared point."""
        with self._lock:
            while self.stages:
                if self._built(self.stages.pop()):
                    self.stages = []

    def _built(self, stage: Stage) -> bool:
        """Build ``stage`` and check its first answer (where its code is compiled); False
        where it cannot be built here. What that took is reported to ``measured``."""
        start = time.process_time()
        built = self._build(stage)
        if built is None:
            return False
        if self._checked(stage, built) and self._measured is not None:
            self._measured(stage.tier, time.process_time() - start)
        return True

    def _build(self, stage: Stage) -> Prepared | None:
        """``stage`` built; None where it cannot be built here (``why`` says why) or failed
        to build (refused, no later tier tried)."""
        try:
            return stage.build()
        except StrategySkip as exc:
            self.why = f"{stage.tier}: {exc}"
        except Exception as exc:
            raise_if_interrupt(exc)
            self._refuse(stage.tier, "", f"it failed to build: {_one_line(exc)}")
        return None

    def _checked(self, stage: Stage, built: Prepared) -> bool:
        """Move to ``built`` where its first answer at ``x0`` is right (True), else refuse it."""
        try:
            with torch.no_grad():
                wrong = self._check(self.x0, built.raw(self.x0))
        except Exception as exc:
            raise_if_interrupt(exc)
            wrong = f"its first call raised {_one_line(exc)}"
        if wrong:
            self._refuse(stage.tier, built.strategy, wrong)
            return False
        self.current, self.tier = built, stage.tier
        self.history.append(f"{stage.tier} ({built.strategy})")
        if not stage.traced:
            self.untraced = (built, stage.tier)
        return True

    def _refuse(self, tier: str, strategy: str, reason: str) -> None:
        self.stages = []
        self.refused = TierRefused(tier, strategy, self.tier, reason)
        warnings.warn(
            f"auto: its {tier} tier ({strategy or 'not built'}) was not used: {reason}; this "
            f"prepared Jacobian stays in its {self.tier} tier ({self.current.strategy})",
            RuntimeWarning,
            stacklevel=4,
        )


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {one_line(exc)}"
