"""A prepared Jacobian that starts with the cheapest form and moves on as calls pay for it.

Building a faster form costs time once (tracing the folded graph ~0.3-0.8 CPU-s in a fresh
process, compiling it 1-3.5 CPU-s on seed004) and saves a fraction of a millisecond a call:
a 300-step fit never earns a compile back, a 10^5-call sweep does. Which one a user is in is
not known at ``prepare``, so the choice is made as the calls come, by the ski-rental rule:
keep calling the current form until the time spent in it, times the share of a call the
next form is taken to save (``Stage.saves``), reaches that form's estimated cost to build,
then build it once. Whatever the number of calls, each step costs at most about twice the
better of the two choices made in hindsight (build at once, or never). A form that needs no
trace and turns out slower than the one before over its first calls (``PACE_CALLS``) gives
way to it again (``Tiered.slower``), and the moves go on.

The build runs off the caller's path (``background``, the default): in a thread of its own,
while the caller's calls go on in the tier they are in; the new form is swapped in at the
first call after it is ready. Before, the call that reached the cost waited for the build
(8-15 s on seed004 for the compiled tier). What a stage's ``ready`` (run in the caller's
thread) would import is imported in the thread first (``preload``: the tracer's
torch._dynamo, 2.4 s of one call on a loaded machine before), so the call that traces f
pays only the trace. The forms a caller runs meanwhile take no
process-wide lock (``jacbench.core.prepared.TORCH_STATE``), which the build holds.

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
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from jacbench.core.errors import RetraceStorm, StrategySkip
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.prepared import Prepared

# "" when a Jacobian at a point is right there, else why not (jacbench.core.agreement)
Check = Callable[[torch.Tensor, Any], str]


def _nothing_more() -> float:
    return 0.0


@dataclass(frozen=True)
class Stage:
    """A later form: its tier's name, how to build it, what building it is taken to cost
    (``cost_s``, plus ``imports_s()``: what importing its machinery would cost in this
    process now, 0 once imported). ``ready``, where given, runs first in the caller's
    thread and returns the build (what must not run beside the caller's own code: a look
    at what f reads, which calls f)."""

    tier: str
    build: Callable[[], Prepared]
    cost_s: float
    imports_s: Callable[[], float] = field(default=_nothing_more, compare=False)
    ready: Callable[[], Callable[[], Prepared]] | None = field(default=None, compare=False)
    # what ``ready`` would otherwise import in the caller's thread (the tracer's first use
    # imports torch._dynamo: a 0.8 CPU-s call, 2.4 s on a loaded machine), done in the
    # background first; ``ready`` then runs at the first call after it
    preload: Callable[[], None] | None = field(default=None, compare=False)
    traced: bool = False  # a traced graph: a retrace storm sends the Jacobian back before it
    # the share of a call's time the new form is taken to save: 1 buys at the build's cost,
    # 0.5 (a form twice as fast) once the calls spent twice it
    saves: float = 1.0

    def estimate_s(self) -> float:
        return self.cost_s + self.imports_s()

    def readied(self) -> Stage:
        """This stage, its build readied in this (the caller's) thread."""
        if self.ready is None:
            return self
        return replace(self, build=self.ready(), ready=None)


@dataclass(frozen=True)
class TierRefused:
    """A later tier that failed to build or whose first answer was wrong: the Jacobian stays
    in the tier before (``back_to``) for good. Recordable: what, and why."""

    tier: str
    strategy: str
    back_to: str
    reason: str


# Timed calls of a form after its first (its checks and warm-up) that give its pace: a new
# form that needs no trace is compared with the form before after as many calls, and where
# it is slower by more than SLOWER, the form before comes back.
PACE_CALLS, SLOWER = 6, 1.25


@dataclass(frozen=True)
class _Pace:
    """The form a new one replaced, its pace (seconds a call after its first), and the
    last untraced form as it was before the move."""

    before: Prepared
    tier: str
    per_call_s: float
    untraced: tuple[Prepared, str]


@dataclass(frozen=True)
class _Outcome:
    """What building a stage gave: the new form, or why there is none (``skipped``: it
    cannot be built here, e.g. no compiler; else it failed)."""

    stage: Stage
    built: Prepared | None = None
    skipped: str = ""
    failed: str = ""


class Tiered:
    """``jac(x)`` and ``both(x)`` by ``first`` (tier ``tier``), then by each of ``stages``
    once the calls since the last move spent that stage's estimated cost; a stage that
    cannot be built (``StrategySkip``) ends the moves, and ``why`` says why; one that fails
    otherwise, or whose first answer ``check`` rejects, ends them too (``refused``), as does
    a traced tier whose graph must be traced again at every call (``RetraceStorm``: back to
    the last tier that traces nothing). ``x0``: the prepared (flat) point, where ``settle``
    checks each new tier. ``background``: build in a thread of its own while the calls go
    on (else on the call that reached the cost)."""

    def __init__(
        self,
        first: Prepared,
        tier: str,
        stages: list[Stage],
        check: Check,
        x0: torch.Tensor,
        background: bool = True,
    ) -> None:
        self.current, self.tier, self.stages, self.x0 = first, tier, list(stages), x0
        self.untraced = (first, tier)  # the last tier reached that traces nothing
        self.spent_s, self.why = 0.0, ""
        self.calls, self.paced_s = 0, 0.0  # timed calls since the last move; after the first
        self.slower = ""  # a tier that gave way to the one before: it was slower here
        self.refused: TierRefused | None = None
        self.background = background
        self.builds = 0  # builds started (in the background or not)
        self._check = check
        self._before: tuple[Prepared, str] | None = None  # while the new tier is unchecked
        self._building: threading.Thread | None = None
        self._outcome: _Outcome | None = None  # a finished build, not yet taken in
        self._preloaded: Stage | None = None  # its imports done in the background, not built
        self._pace: _Pace | None = None  # a new form's pace, still to be compared
        self._readying = False  # a stage's ready runs (in a caller's thread)
        self._checking = False  # a new form's first call runs (in a caller's thread)
        self._lock = threading.Lock()

    @property
    def chosen_strategy(self) -> str:
        return self.current.strategy

    @property
    def building(self) -> bool:
        """Whether a later tier is being built now (in the background)."""
        return self._building is not None

    def jac(self, x: torch.Tensor) -> Any:
        if self._outcome is not None:
            self._take()
        if self._preloaded is not None:
            self._resume(build=True)
        try:
            if self._before is not None:
                return self._first(x, both=False)
            if not self.stages or self._building is not None:
                return self.current.raw(x)
            start = time.perf_counter()
            out = self.current.raw(x)
        except RetraceStorm as exc:
            return self._stormed(exc).raw(x)
        self._spent(time.perf_counter() - start)
        return out

    def both(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if self._outcome is not None:
            self._take()
        if self._preloaded is not None:
            self._resume(build=True)
        try:
            if self._before is not None:
                return self._first(x, both=True)
            if not self.stages or self._building is not None:
                return self.current.raw_both(x)
            start = time.perf_counter()
            out = self.current.raw_both(x)
        except RetraceStorm as exc:
            return self._stormed(exc).raw_both(x)
        self._spent(time.perf_counter() - start)
        return out

    def _stormed(self, exc: RetraceStorm) -> Prepared:
        """Back to the last tier that traces nothing, for good: a traced tier whose graph is
        traced again at every call costs a trace a call (what f reads keeps changing: an
        untraced tier reads it at each call)."""
        with self._lock:
            untraced, untraced_tier = self.untraced
            if self.current is not untraced:
                tier, strategy = self.tier, self.current.strategy
                self.current, self.tier = untraced, untraced_tier
                self._refuse(tier, strategy, str(exc))
        return untraced

    def _spent(self, seconds: float) -> None:
        self.spent_s += seconds
        if self.calls:  # a form's first call (its checks, its warm-up) is not its pace
            self.paced_s += seconds
        self.calls += 1
        if self._pace is not None and self.calls > PACE_CALLS:
            self._paced()
        if self.stages and self.spent_s * self.stages[0].saves >= self.stages[0].estimate_s():
            self._next()

    def _paced(self) -> None:
        """After a new form's first calls: back to the form before where it is slower."""
        with self._lock:
            pace, self._pace = self._pace, None
            per_call = self._per_call()
            if pace is None or per_call <= SLOWER * pace.per_call_s:
                return
            self.slower = (
                f"{self.tier} ({self.current.strategy}): {per_call * 1e3:.3g} ms a call "
                f"against {pace.per_call_s * 1e3:.3g} in {pace.tier} ({pace.before.strategy})"
            )
            self.current, self.tier, self.untraced = pace.before, pace.tier, pace.untraced
            self.spent_s, self.calls, self.paced_s = 0.0, 0, 0.0

    def _per_call(self) -> float:
        """The current form's pace: seconds a call since the last move, after its first."""
        return self.paced_s / (self.calls - 1)

    def _next(self) -> None:
        """Start building the next stage. Its ``ready`` (which runs f, and may take
        TORCH_STATE) runs outside ``_lock``: a caller's first call holds TORCH_STATE and then
        asks for ``_lock``, so holding ``_lock`` while asking for TORCH_STATE would deadlock."""
        with self._lock:
            if (
                not self.stages
                or self._before is not None
                or self._building is not None
                or self._readying
            ):
                return
            stage = self.stages.pop(0)
            if self.background and stage.preload is not None:
                self._building = threading.Thread(
                    target=self._preload_aside, args=(stage,), name=f"jacbench {stage.tier}"
                )
                self._building.daemon = True
                self._building.start()
                return
            self.builds += 1
            self._readying = True
        outcome: _Outcome | None = None
        try:
            stage = stage.readied()
        except Exception as exc:
            outcome = _failed(stage, exc)
        finally:
            with self._lock:
                self._readying = False
        if outcome is None and self.background:
            thread = threading.Thread(
                target=self._build_aside, args=(stage,), name=f"jacbench {stage.tier}"
            )
            thread.daemon = True  # a process that ends does not wait for it
            with self._lock:
                self._building = thread
            thread.start()
            return
        self._apply(outcome or _built(stage))

    def _build_aside(self, stage: Stage) -> None:
        """The background thread: build, and leave the outcome for the caller's next call
        (which swaps it in, warning in the caller's thread where it failed)."""
        outcome = _Outcome(stage, failed="its build was interrupted")
        try:
            outcome = _built(stage)
        finally:
            with self._lock:
                self._outcome = outcome

    def _preload_aside(self, stage: Stage) -> None:
        """The background thread: import what ``stage``'s ``ready`` needs, then leave the
        stage for the caller's next call (which readies and builds it). A failed import is
        met again, and reported, where ``ready`` or the build needs it."""
        assert stage.preload is not None  # _advance starts this thread only for a preload
        try:
            stage.preload()
        except Exception as exc:
            raise_if_interrupt(exc)
        finally:
            with self._lock:
                self._preloaded = replace(stage, preload=None)

    def _resume(self, build: bool) -> None:
        """Put a preloaded stage back first in line (the caller's thread); ``build``: start
        readying and building it now."""
        with self._lock:
            stage, self._preloaded = self._preloaded, None
            if stage is None:
                return
            self._building = None
            if self.refused is None:  # a storm meanwhile ended the moves
                self.stages.insert(0, stage)
        if build:
            self._next()

    def _take(self) -> None:
        """Take a finished background build in (the caller's thread)."""
        with self._lock:
            outcome, self._outcome = self._outcome, None
            if outcome is None:
                return
            self._building = None
        if self.refused is None:  # a storm meanwhile ended the moves
            self._apply(outcome)

    def _apply(self, outcome: _Outcome) -> None:
        with self._lock:
            stage = outcome.stage
            if outcome.skipped:  # e.g. no compiler here: stay, and say why
                self.stages, self.why = [], f"{stage.tier}: {outcome.skipped}"
            elif outcome.built is None:
                self._refuse(stage.tier, "", f"it failed to build: {outcome.failed}")
            else:
                if not stage.traced and self.calls > PACE_CALLS:  # compared with its pace
                    self._pace = _Pace(self.current, self.tier, self._per_call(), self.untraced)
                self._before = (self.current, self.tier)
                self.current, self.tier = outcome.built, stage.tier
                self.spent_s, self.calls, self.paced_s = 0.0, 0, 0.0
                if not stage.traced:
                    self.untraced = (outcome.built, stage.tier)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for a background build (at most ``timeout`` seconds) and take it in; whether
        none is running now. Its first answer is still checked at the next call."""
        thread = self._building
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return False
        if self._preloaded is not None:  # only its imports were done: it is not built
            self._resume(build=False)
        if self._outcome is not None:
            self._take()
        return self._building is None

    def _first(self, x: torch.Tensor, both: bool) -> Any:
        """The first call in a new tier, checked; the tier before answers where it fails,
        and for other threads while the check runs. No call runs under ``_lock`` (see
        ``_next``)."""
        with self._lock:
            if self._before is None:  # another thread checked it meanwhile
                form: Prepared | None = self.current
            elif self._checking:  # another thread checks it now: the checked form answers
                form = self._before[0]
            else:
                form, new, self._checking = None, self.current, True
        if form is not None:
            return form.raw_both(x) if both else form.raw(x)
        try:
            start = time.perf_counter()
            out = new.raw_both(x) if both else new.raw(x)
            seconds = time.perf_counter() - start
            wrong = self._check(x, out[1] if both else out)
        except RetraceStorm:  # back to the first tier (jac, both)
            with self._lock:
                self._before, self._checking = None, False
            raise
        except Exception as exc:
            with self._lock:
                self._checking = False  # an interrupt leaves the check to the next call
            raise_if_interrupt(exc)
            wrong = f"its first call raised {_one_line(exc)}"
        with self._lock:
            self._checking = False
            before = self._before
            self._before = None
            if wrong and before is not None:
                new_tier, self.current, self.tier = self.tier, before[0], before[1]
                self._refuse(new_tier, new.strategy, wrong)
        if wrong and before is not None:
            return before[0].raw_both(x) if both else before[0].raw(x)
        self._spent(seconds)  # a right first call counts towards the next move
        return out

    def _refuse(self, tier: str, strategy: str, reason: str) -> None:
        self.stages, self._pace = [], None
        self.refused = TierRefused(tier, strategy, self.tier, reason)
        warnings.warn(
            f"auto: its {tier} tier ({strategy or 'not built'}) was not used: {reason}; this "
            f"prepared Jacobian stays in its {self.tier} tier ({self.current.strategy})",
            RuntimeWarning,
            stacklevel=4,
        )

    def settle(self) -> None:
        """Move to the last tier that can be built now, checked at the prepared point (the
        runner times the last form, not the way to it): the tiers in between are not built,
        and one that cannot be built (``StrategySkip``) gives way to the tier before it."""
        self.join()
        while True:
            if self._before is not None:
                with torch.no_grad():
                    self._first(self.x0, both=False)
            if not self.stages:
                return
            stage = self.stages.pop()
            self.builds += 1
            try:
                outcome = _built(stage.readied())
            except Exception as exc:
                outcome = _failed(stage, exc)
            if outcome.skipped and self.stages:
                self.why = f"{stage.tier}: {outcome.skipped}"
                continue
            self.stages = []
            self._apply(outcome)
            self._pace = None  # the runner times the last form: it stays


def _built(stage: Stage) -> _Outcome:
    """Build ``stage``: the new form, or why not (never raises but for an interrupt)."""
    try:
        return _Outcome(stage, built=stage.build())
    except Exception as exc:
        return _failed(stage, exc)


def _failed(stage: Stage, exc: Exception) -> _Outcome:
    """Why ``stage`` has no new form: it cannot be built here (``StrategySkip``), or it
    failed (an interrupt is raised)."""
    if isinstance(exc, StrategySkip):
        return _Outcome(stage, skipped=str(exc))
    raise_if_interrupt(exc)
    return _Outcome(stage, failed=_one_line(exc))


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
