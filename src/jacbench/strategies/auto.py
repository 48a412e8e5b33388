"""``auto``: pick an exact strategy for this problem, by a rule and a short calibration.

The rule: forward mode (jacfwd_folded) when the Jacobian has at least as many rows as
columns (M >= N: N forward passes beat M backward passes), reverse mode (jacrev) otherwise.
Where the model declares its sparsity pattern (``jacobian_sparsity()``, so knowing it costs
nothing) the same rule picks sparse_jacfwd / sparse_jacrev instead; patterns are never
detected for auto (detection costs about as much as a dense Jacobian).

By default (``compile`` on, ``upfront`` off) auto is tiered: ``prepare`` returns at once with
the rule's eager candidate, and moves to its compiled form only once the calls made have
spent as much time as compiling is estimated to cost (ski rental: the total is never over
twice the better of the two choices made in hindsight), or at once where an earlier process
compiled it (its decision remembered; torch's compile caches on disk make it cheap).
``prep.info.tier`` says which tier it is in; ``prep.settled()`` moves to the last tier now.

With ``upfront`` (or ``compile`` off) the candidates below are each prepared and timed
briefly, leaving out those that need over PASS_RATIO times the passes of the other mode, and
the fastest is kept; the calibration's cost, compilation included, is part of first_call_s.
The choice is recorded as ``chosen_strategy`` and, with ``cache`` on, remembered across
processes (``jacbench.core.decisions``): the next preparation of the same problem prepares
that choice alone and checks its first answer (``decided_by``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from enum import Enum

import torch

from jacbench.core import decisions, sparsity
from jacbench.core.interrupt import check as check_interrupt
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.memory_budget import sampled
from jacbench.core.prepared import Prepared
from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, StrategySkip, strategy
from jacbench.core.tiers import Tiered

EAGER: tuple[tuple[str, dict], ...] = (
    ("jacfwd_folded", {"compile": False}),
    ("jacfwd", {}),
    ("jacrev", {}),
    ("grads_batched", {}),
)
# PyTorch's default and the hand-written row loop are candidates too, so that auto never loses
# to them: on a multi-head-attention gradient where both compiled strategies fail, auto
# without them chose grads_batched, 9-14% slower than functional. Timed last, and only where
# their first call is within LOOP_CUTOFF of the best time so far (else they cannot win).
LOOPS = ("functional", "autograd_loop")
LOOP_CUTOFF = 3.0


@dataclass
class AutoOptions:
    compile: bool = True  # consider torch.compile'd candidates
    calibrate: bool = True  # time the candidates and keep the fastest; else the rule alone
    calibration_time: float = 0.05  # seconds of timed calls per candidate
    cache: bool = True  # remember the decision across processes (jacbench.core.decisions)
    upfront: bool = False  # compile and calibrate every candidate now (long fits, benchmarks)
    patience: float = 1.0  # tiered: compile once eager calls cost this x compiling's estimate

    def __post_init__(self) -> None:
        if not (math.isfinite(self.calibration_time) and self.calibration_time > 0):
            raise ValueError(f"calibration_time must be > 0, got {self.calibration_time}")
        if not (math.isfinite(self.patience) and self.patience >= 0):
            raise ValueError(f"patience must be >= 0, got {self.patience}")


SPARSE = ("sparse_jacfwd", "sparse_jacrev")
FORWARD = ("jacfwd", "jacfwd_compiled", "jacfwd_folded", "sparse_jacfwd")
# A candidate needing this many times the passes of the other mode is not calibrated: a pass
# of either mode costs within a few times the other's, so it cannot win, and on hand tracking
# (9600 x 26) the reverse candidates' first calls took 30 s of auto's 66 s set-up.
PASS_RATIO = 8


def fewest_passes(problem: Problem) -> tuple[int, int]:
    """(forward, reverse) passes a Jacobian needs at least: N and M, or with a declared
    pattern the colourings' lower bounds (the most nonzeros in a row, in a column)."""
    if problem.sparsity is None:
        return problem.n_in, problem.n_out
    pattern = sparsity.from_tensor(problem.sparsity(), (problem.n_out, problem.n_in))
    return sparsity.lower_bound(pattern), sparsity.lower_bound(pattern.transposed)


def outpaced(name: str, passes: tuple[int, int]) -> bool:
    """Whether ``name`` needs over PASS_RATIO times the passes of the other mode."""
    forward, reverse = passes
    mine, other = (forward, reverse) if name in FORWARD else (reverse, forward)
    return mine > PASS_RATIO * other


def sparse_side(problem: Problem) -> str:
    """sparse_jacfwd or sparse_jacrev for a declared pattern: the side whose colouring can
    be smaller. On bundle adjustment the rows need over 1300 colours and the columns 15."""
    by_columns, by_rows = fewest_passes(problem)
    return SPARSE[0] if by_columns <= by_rows else SPARSE[1]


def rule(problem: Problem, compile: bool) -> tuple[str, dict]:
    """The strategy (and options) the shape, and a declared sparsity pattern, suggest."""
    if problem.sparsity is not None:
        return sparse_side(problem), {"compile": compile}
    if problem.n_out >= problem.n_in:
        return "jacfwd_folded", {"compile": compile}
    return ("jacrev_compiled" if compile else "jacrev"), {}


def _prepare_named(name: str, problem: Problem, **options: object) -> Prepared:
    from jacbench.core.registry import load_registry  # the registry is built by now

    return load_registry().prepare(name, problem, **options)


ROUNDS = 5  # interleaved calibration rounds: each candidate timed once per round


def calibration_clock() -> Callable[[], float]:
    """CPU time where torch computes on one thread: it does not grow when another process
    takes the core. With several threads a call's CPU time is their sum, not how long the
    user waits, so there the wall clock (interleaving still spreads the load's changes)."""
    return time.process_time if torch.get_num_threads() == 1 else time.perf_counter


def _seconds_per_call(preps: list[Prepared], x: torch.Tensor, budget: float) -> list[float]:
    """Each candidate's median time per call (``calibration_clock``), in interleaved rounds:
    timed by wall clock one after the other, a loaded machine once made auto choose
    grads_batched at 28x JAX's time (issue 33). torch.utils.benchmark times by wall clock
    only and one statement at a time, hence this."""
    clock, per_block = calibration_clock(), budget / ROUNDS
    sizes = []
    for prep in preps:  # calls per block, from one warm call
        start = clock()
        prep(x)
        sizes.append(max(1, min(1000, int(per_block / max(clock() - start, 1e-6)))))
    rounds: list[list[float]] = [[] for _ in preps]
    for _ in range(ROUNDS):
        for k, prep in enumerate(preps):
            start = clock()
            for _ in range(sizes[k]):
                prep(x)
            rounds[k].append((clock() - start) / sizes[k])
            check_interrupt()
    return [statistics.median(times) for times in rounds]


def too_large(problem: Problem) -> bool:
    """A Jacobian too large to hold dense (the size above which references are sampled):
    only sparse strategies with sparse output are candidates."""
    return sampled(problem.n_out, problem.n_in, problem.batch)


def candidates(problem: Problem, compile: bool) -> list[tuple[str, dict]]:
    """(strategy, options) to calibrate: the eager ones (sparse too where a pattern is
    declared), at most one compilation, of the strategy the rule picks, and the loops; for a
    Jacobian too large to hold dense, the sparse side by its colours alone, eager and (with
    ``compile``) compiled, returning CSR: on bundle adjustment compiled is 2x faster a call
    (97 against 200 ms on ba1) for 4 s of compilation."""
    if too_large(problem):
        if problem.sparsity is None:
            raise StrategySkip(
                f"auto: the {problem.n_out} x {problem.n_in} Jacobian is too large to hold "
                "dense and the model declares no sparsity pattern; use sparse_jacfwd or "
                "sparse_jacrev with output=csr (they trace one)"
            )
        side, csr = sparse_side(problem), {"output": "csr"}
        return [(side, csr), *([(side, {**csr, "compile": True})] if compile else [])]
    sparse = SPARSE if problem.sparsity is not None else ()
    out: list[tuple[str, dict]] = [*EAGER, *((name, {}) for name in sparse)]
    if compile:
        out.append(rule(problem, compile=True))
    out += [(name, {}) for name in LOOPS]
    passes = fewest_passes(problem)
    return [(name, options) for name, options in out if not outpaced(name, passes)]


class Decided(str, Enum):
    """How auto came to its choice (``PrepInfo.decided_by``)."""

    CALIBRATED = "calibrated"  # candidates prepared and timed
    REMEMBERED = "remembered"  # an earlier process's decision, checked on its first call
    RULE = "rule"  # the shape rule alone (calibrate=False, or tiered)


def choose(problem: Problem, opts: AutoOptions) -> tuple[Prepared, Decided]:
    """The prepared candidate to use and how it was decided: remembered from an earlier
    process, by the rule alone, or the fastest in calibration (then remembered)."""
    if not opts.calibrate:
        return by_rule(problem, opts.compile), Decided.RULE
    key = _key(problem, opts)
    remembered = decisions.recall(key) if key else None
    if remembered is not None:
        try:
            prep = _prepare_named(remembered.strategy, problem, **remembered.options)
            if decisions.agrees(problem, prep(problem.x)):
                return prep, Decided.REMEMBERED
        except Exception as exc:  # gone or broken since: decide again
            raise_if_interrupt(exc)
        decisions.forget(key)
    prep, options = calibrate(problem, opts)
    if key:
        decisions.remember(key, decisions.Decision(prep.strategy, options))
    return prep, Decided.CALIBRATED


def _key(problem: Problem, opts: AutoOptions) -> str:
    """The key of this problem's decision, or "" where remembering is off."""
    return decisions.key(problem, asdict(opts)) if opts.cache else ""


# What compiling the rule's candidate is taken to cost until this machine has measured it
# (then remembered with the decision): seed004's folded forward mode took 0.9-3.5 CPU-s.
COMPILE_ESTIMATE_S = 2.0


def tiered(problem: Problem, opts: AutoOptions) -> Declared:
    """The rule's eager candidate now, its compiled form once the calls paid for it."""
    key = _key(problem, opts)
    remembered = decisions.recall(key) if key else None
    estimate = COMPILE_ESTIMATE_S if remembered is None else remembered.compile_s
    eager = by_rule(problem, compile=False)

    def compiled() -> Prepared:  # a StrategySkip keeps the eager tier
        start = time.perf_counter()
        name, options = ruled(problem, compile=True)
        prep = _prepare_named(name, problem, **options)
        if key:
            seconds = time.perf_counter() - start
            decisions.remember(key, decisions.Decision(name, options, seconds))
        return prep

    tiers = Tiered(eager, compiled, opts.patience * (estimate or COMPILE_ESTIMATE_S))
    info = replace(eager.info, decided_by=Decided.RULE.value)
    return Declared(tiers.jac, info, value_and_jac=tiers.both, mode=eager.mode, tiers=tiers)


def ruled(problem: Problem, compile: bool) -> tuple[str, dict]:
    """The rule's candidate; for a Jacobian too large to hold dense, the sparse side."""
    return candidates(problem, compile)[-1] if too_large(problem) else rule(problem, compile)


def by_rule(problem: Problem, compile: bool) -> Prepared:
    """The candidate the rule picks, compiled where ``compile`` (eager where that fails)."""
    try:
        name, options = ruled(problem, compile)
        return _prepare_named(name, problem, **options)
    except StrategySkip:  # compilation unavailable: the same mode, eager
        name, options = ruled(problem, compile=False)
        return _prepare_named(name, problem, **options)


def calibrate(problem: Problem, opts: AutoOptions) -> tuple[Prepared, dict]:
    """The fastest candidate, timed briefly, and the options it was prepared with."""
    ready: list[tuple[Prepared, dict]] = []
    best_first = math.inf
    # One compilation at most: the compiled form of the mode the shape rule picks (fewer
    # passes). Compiling both modes doubled auto's setup on seed004; whether auto still
    # keeps up with the best exact strategy is what scripts/bench_exact_vs_fd.py checks.
    for name, options in candidates(problem, opts.compile):
        try:
            prep = _prepare_named(name, problem, **options)
            clock = calibration_clock()
            start = clock()
            prep(problem.x)
            first = clock() - start
        except Exception as exc:  # a candidate that cannot run here is simply not chosen
            raise_if_interrupt(exc)  # but a Ctrl-C stops the job
            continue
        if name in LOOPS and first > LOOP_CUTOFF * best_first:
            continue
        best_first = min(best_first, first) if name not in LOOPS else best_first
        ready.append((prep, options))
    if not ready:
        raise StrategySkip("auto: none of its candidates can compute this Jacobian")
    seconds = _seconds_per_call([p for p, _ in ready], problem.x, opts.calibration_time)
    return ready[seconds.index(min(seconds))]


@strategy(Kind.EXACT, Mode.AUTO, options=AutoOptions, batch=True)
def auto(problem: Problem, opts: AutoOptions):
    """The fastest exact strategy for this problem, chosen by rule and calibration."""
    if opts.compile and not opts.upfront:
        return tiered(problem, opts)
    chosen, how = choose(problem, opts)
    info = replace(chosen.info, chosen_strategy=chosen.strategy, decided_by=how.value)
    return Declared(chosen.fn, info, value_and_jac=chosen.both_fn, mode=chosen.mode)
