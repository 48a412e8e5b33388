"""``auto``: pick an exact strategy for this problem, by a rule and a short calibration.

The rule: forward mode (jacfwd_folded) where M >= N, reverse mode (jacrev) otherwise; with a
declared sparsity pattern, sparse_jacfwd / sparse_jacrev; a pattern is traced only where the
Jacobian is too large to hold dense (``with_traced_pattern``), whose compiled form is by
declared local blocks where f has them (``blocks_side``). By default auto is tiered
(``ladder``): plain reverse-mode autograd at once (nothing built, nothing of the compiler
imported) until the caller's ``prep.settled()`` builds the last tier (``jacbench.core.tiers``).
With ``upfront`` (or ``compile`` off) the candidates are prepared and timed briefly and the
fastest kept; with ``cache`` the choice is remembered across processes unless the machine
was loaded (``jacbench.core.decisions``, ``jacbench.core.contention``).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from enum import Enum

import torch

from jacbench.core import contention, decisions, sparsity
from jacbench.core.agreement import disagreement
from jacbench.core.interrupt import raise_if_interrupt
from jacbench.core.memory_budget import sampled
from jacbench.core.prepared import Prepared
from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, StrategySkip, StrategySpec, strategy
from jacbench.core.tiers import Stage, Tiered

EAGER: tuple[tuple[str, dict], ...] = (
    ("jacfwd_folded", {"compile": False}),
    ("jacfwd", {}),
    ("jacrev", {}),
    ("grads_batched", {}),
)
# PyTorch's default and the hand-written row loop are candidates too, so that auto never loses
# to them. Timed last, and only where their first call is within LOOP_CUTOFF of the best time
# so far (else they cannot win).
LOOPS = ("functional", "autograd_loop")
LOOP_CUTOFF = 3.0
# Candidates timed within this factor of the fastest are timed again, REFINE times the
# rounds: a few rounds do not tell apart candidates this close, and the map holds auto to
# within 10% of the best.
CLOSE = 1.15
REFINE = 3


@dataclass
class AutoOptions:
    compile: bool = True  # consider torch.compile'd candidates
    calibrate: bool = True  # time the candidates and keep the fastest; else the rule alone
    calibration_time: float = 0.05  # seconds of timed calls per candidate
    cache: bool = True  # remember the decision across processes (jacbench.core.decisions)
    upfront: bool = False  # compile and calibrate every candidate now (long fits, benchmarks)
    # tiered: None, move only at prep.settled(); a number, move at the call where the calls
    # since the last move spent this times the next tier's cost to build (that call builds)
    patience: float | None = None
    background: bool = False  # builds in a thread of their own: no longer offered

    def __post_init__(self) -> None:
        if self.background:
            raise ValueError(
                "background=True is no longer offered: a build beside the caller's code "
                "reached its forward-mode AD, its exit and its forks; build at a point you "
                "choose with prep.settled(), or let calls move with patience=<factor>"
            )
        if self.patience is not None and not (math.isfinite(self.patience) and self.patience >= 0):
            raise ValueError(f"patience must be >= 0 (or null), got {self.patience}")
        if not (math.isfinite(self.calibration_time) and self.calibration_time > 0):
            raise ValueError(f"calibration_time must be > 0, got {self.calibration_time}")


SPARSE = ("sparse_jacfwd", "sparse_jacrev")
FORWARD = ("jacfwd", "jacfwd_compiled", "jacfwd_folded", "sparse_jacfwd")
# A candidate needing this many times the passes of the other mode is not calibrated: a pass
# of either mode costs within a few times the other's, so it cannot win, and its first calls
# would dominate auto's set-up.
PASS_RATIO = 8
# ... except the folded forward mode: it pushes every tangent through f at once, and where f
# is elementwise or banded the folded tangents stay as small as the band, so its cost does
# not grow with N passes.
PASS_FREE = ("jacfwd_folded",)
# auto's candidates, built-in strategies (auto needs no registry: the registry holds auto),
# by the module each is defined in, imported at its first use: a fresh process whose
# Jacobians never leave the eager tier imports no compiled, folded or sparse module
CANDIDATES: dict[str, str] = {
    "jacfwd": "func",
    "jacrev": "func",
    "double_backward": "autograd",
    "jacfwd_folded": "folded",
    "jacfwd_compiled": "compiled",
    "jacrev_compiled": "compiled",
    "grads_batched": "autograd",
    "functional": "autograd",
    "autograd_loop": "autograd",
    "sparse_jacfwd": "sparse",
    "sparse_jacrev": "sparse",
    "blocks_jacrev": "local_blocks",
    "blocks_jacfwd": "local_blocks",
}


def candidate(name: str) -> StrategySpec:
    """The spec of auto's candidate ``name`` (a name from elsewhere, e.g. a remembered
    file, is a KeyError)."""
    spec = getattr(importlib.import_module(f"jacbench.strategies.{CANDIDATES[name]}"), name)
    assert isinstance(spec, StrategySpec)
    return spec


def fewest_passes(problem: Problem) -> tuple[int, int]:
    """(forward, reverse) passes a Jacobian needs at least: N and M, or with a declared
    pattern the colourings' lower bounds (the most nonzeros in a row, in a column)."""
    if problem.sparsity is None:
        return problem.n_in, problem.n_out
    pattern = sparsity.from_pairs(problem.sparsity(), (problem.n_out, problem.n_in))
    return sparsity.lower_bound(pattern), sparsity.row_lower_bound(pattern)


def outpaced(name: str, passes: tuple[int, int]) -> bool:
    """Whether ``name`` needs over PASS_RATIO times the passes of the other mode."""
    if name in PASS_FREE:
        return False
    forward, reverse = passes
    mine, other = (forward, reverse) if name in FORWARD else (reverse, forward)
    return mine > PASS_RATIO * other


def sparse_side(problem: Problem) -> str:
    """sparse_jacfwd or sparse_jacrev for a declared pattern: the side whose colouring can
    be smaller. On bundle adjustment the rows need over 1300 colours and the columns 15."""
    by_columns, by_rows = fewest_passes(problem)
    return SPARSE[0] if by_columns <= by_rows else SPARSE[1]


def blocks_side(problem: Problem) -> str | None:
    """blocks_jacrev or blocks_jacfwd where f declares local blocks (one point): the mode
    with fewer passes, a block's outputs or its unknowns (BA: 3 against 15)."""
    if problem.blocks is None or problem.batch > 1:
        return None
    blocks = problem.blocks()
    return "blocks_jacrev" if blocks.rows.shape[1] <= blocks.cols.shape[1] else "blocks_jacfwd"


def rule(problem: Problem, compile: bool) -> tuple[str, dict]:
    """The strategy (and options) the shape, and a declared sparsity pattern, suggest."""
    if problem.sparsity is not None:
        return sparse_side(problem), {"compile": compile}
    if problem.n_out >= problem.n_in:
        return "jacfwd_folded", {"compile": compile}
    return ("jacrev_compiled" if compile else "jacrev"), {}


def _prepare_named(name: str, problem: Problem, **options: object) -> Prepared:
    """A candidate prepared from its own spec: auto's candidates are built-in strategies, so
    auto needs no registry (the registry contains auto)."""
    spec = candidate(name)
    return spec.prepare(problem, spec.make_options(dict(options)))


def _seconds_per_call(
    preps: list[Prepared], x: torch.Tensor, budget: float, refine: int = 1
) -> list[float]:
    """Each candidate's median time per call at ``x`` (``jacbench.core.interleaved``);
    ``refine`` times the rounds and the budget (blocks as long)."""
    from jacbench.core.interleaved import ROUNDS, seconds_per_call  # calibration's alone

    calls: list[Callable[[], object]] = [functools.partial(prep, x) for prep in preps]
    return seconds_per_call(calls, refine * budget, refine * ROUNDS, x.device)


def too_large(problem: Problem) -> bool:
    """A Jacobian too large to hold dense (the size above which references are sampled):
    only sparse strategies with sparse output are candidates."""
    return sampled(problem.n_out, problem.n_in, problem.batch)


def candidates(problem: Problem, compile: bool) -> list[tuple[str, dict]]:
    """(strategy, options) to calibrate: the eager ones (sparse too where a pattern is
    declared), at most one compilation, of the strategy the rule picks, and the loops; for a
    Jacobian too large to hold dense, the sparse side by its colours alone, eager and (with
    ``compile``) compiled, returning CSR."""
    if too_large(problem):
        if problem.sparsity is None:  # auto() traces one first (with_traced_pattern)
            raise StrategySkip(f"auto: {_too_large(problem)} and has no sparsity pattern")
        side, csr = sparse_side(problem), {"output": "csr"}
        fast = blocks_side(problem) or side  # declared local blocks: their passes, compiled
        return [(side, csr), *([(fast, {**csr, "compile": True})] if compile else [])]
    sparse = SPARSE if problem.sparsity is not None else ()
    out: list[tuple[str, dict]] = [*EAGER, *((name, {}) for name in sparse)]
    if compile:
        out.append(rule(problem, compile=True))
    out += [(name, {}) for name in LOOPS]
    passes = fewest_passes(problem)
    return [(name, options) for name, options in out if not outpaced(name, passes)]


def _too_large(problem: Problem) -> str:
    return f"the {problem.n_out} x {problem.n_in} Jacobian is too large to hold dense"


def with_traced_pattern(problem: Problem) -> Problem:
    """``problem``, with the sparsity pattern auto traces itself where the Jacobian is too
    large to hold dense and the model declares none (a proved pattern: the candidates take
    it as the model's, and check it at the prepared point only); a clear refusal where no
    pattern can be proved, or where its nonzeros would not fit either. A declared pattern is
    read once here: auto asks for it at each of its choices."""
    if problem.sparsity is not None:
        declared = sparsity.from_pairs(problem.sparsity(), (problem.n_out, problem.n_in))
        return replace(problem, sparsity=lambda: declared)
    if not too_large(problem):
        return problem
    try:
        pattern, source = sparsity.find(problem.f, problem.points, problem.n_out)
    except ValueError as exc:  # nothing proved, and the dense fallback too large
        raise StrategySkip(f"auto: {_too_large(problem)}, and {exc}") from None
    if source != "traced":
        raise StrategySkip(
            f"auto: {_too_large(problem)}, and its sparsity pattern cannot be traced "
            f"({source}); declare one: prepare(f, x, 'sparse_jacfwd', pattern=..., "
            "output='csr')"
        )
    if sampled(1, pattern.nnz, problem.batch):  # its nonzeros as many as a dense reference
        raise StrategySkip(
            f"auto: {_too_large(problem)}, and its traced sparsity pattern has "
            f"{pattern.nnz} nonzeros, too many to hold sparse either"
        )
    return replace(problem, sparsity=lambda: pattern)


class Tier(str, Enum):
    """The forms tiered auto moves through (``PrepInfo.tier``)."""

    EAGER = "eager"  # plain reverse-mode autograd: nothing to build, nothing to import
    BATCHED = "batched"  # the same, its backward passes batched: nothing to build but sympy
    FOLDED = "folded"  # forward mode traced once, tangents folded (jacbench.core.fold)
    COMPILED = "compiled"


TRACED = (Tier.FOLDED, Tier.COMPILED)  # graphs traced once: a retrace storm leaves them
# what building a tier is taken to cost (seconds) until it was measured here (BuildCosts)
COST_ESTIMATES_S = {Tier.BATCHED: 0.3, Tier.FOLDED: 1.0, Tier.COMPILED: 3.0}


class Decided(str, Enum):
    """How auto came to its choice (``PrepInfo.decided_by``)."""

    CALIBRATED = "calibrated"  # candidates prepared and timed
    REMEMBERED = "remembered"  # an earlier process's decision, checked on its first call
    RULE = "rule"  # the shape rule alone (calibrate=False, or tiered)


def choose(problem: Problem, opts: AutoOptions) -> tuple[Prepared, Decided]:
    """The prepared candidate to use and how it was decided: remembered from an earlier
    process, by the rule alone, or the fastest in calibration (then remembered, unless the
    machine was too loaded for its timings to mean anything)."""
    if not opts.calibrate:
        return by_rule(problem, opts.compile), Decided.RULE
    key = _key(problem, opts)
    remembered = decisions.recall(key) if key else None
    if remembered is not None:
        prep, why = _recalled(problem, opts, remembered)
        if prep is not None:
            return prep, Decided.REMEMBERED
        decisions.distrust(key, why)
    calibrated = calibrate(problem, opts)
    if key and calibrated.contention is None:
        decisions.remember(key, decisions.Decision(calibrated.prep.strategy, calibrated.options))
    return calibrated.prep, Decided.CALIBRATED


def _recalled(
    problem: Problem, opts: AutoOptions, remembered: decisions.Decision
) -> tuple[Prepared | None, str]:
    """The remembered decision prepared, where it is one auto itself could have made here
    and its answers agree with f's directional derivatives; else (None, why not)."""
    choice = (remembered.strategy, remembered.options)
    if remembered.build_s or choice not in candidates(problem, opts.compile):
        return None, f"{remembered.strategy} {remembered.options} is not one of auto's choices"
    try:
        prep = _prepare_named(remembered.strategy, problem, **remembered.options)
        if decisions.agrees(problem, functools.partial(_first_point, problem, prep)):
            return prep, ""
    except Exception as exc:  # gone or broken since: decide again
        raise_if_interrupt(exc)
        return None, f"{remembered.strategy} failed here ({type(exc).__name__}: {exc})"
    return None, f"{remembered.strategy} disagrees with f's directional derivatives"


def _first_point(problem: Problem, prep: Prepared, point: torch.Tensor) -> object:
    """``prep``'s Jacobian of one point (the first row of a batch moved to ``point``)."""
    points = problem.points.clone()
    points[0] = point
    out = prep(points.reshape(problem.x.shape))
    return out[0] if problem.batch > 1 else out


def _key(problem: Problem, opts: AutoOptions) -> str:
    """The key of this problem's decision, or "" where remembering is off. It holds the
    choices auto has here (its candidates, or its ladder): a decision made among other
    choices (an earlier jacbench, before a rule changed) is made again."""
    if not opts.cache:
        return ""
    try:
        is_tiered = opts.compile and not opts.upfront
        choices = ladder(problem) if is_tiered else candidates(problem, opts.compile)
    except StrategySkip:
        choices = []
    return decisions.key(problem, {**asdict(opts), "choices": choices})


def ladder(problem: Problem) -> list[tuple[Tier, str, dict]]:
    """(tier, strategy, options) from the cheapest to build to the fastest per call. The
    first tier imports nothing more (plain reverse-mode autograd over copies of x run as one
    vmapped batch: a first Jacobian in milliseconds of a fresh process, where torch.func's
    first call imports torch's compiler): by columns (reverse mode twice) where forward mode
    would be picked, else by rows; the next batches the backward passes of one x."""
    if too_large(problem) or problem.sparsity is not None:  # eager: plain autograd's passes
        name, options = ruled(problem, False)
        eager = (Tier.EAGER, name, {**options, "passes": eager_sparse_passes(problem)})
        return [eager, (Tier.COMPILED, *ruled(problem, True))]
    if problem.n_out >= problem.n_in:
        storm = {"on_retrace_storm": "raise"}  # back to the eager tier (jacbench.core.tiers)
        return [
            (Tier.EAGER, "double_backward", {"copies": True}),
            (Tier.BATCHED, "double_backward", {"batched": True}),
            (Tier.FOLDED, "jacfwd_folded", {"compile": False, **storm}),
            (Tier.COMPILED, "jacfwd_folded", {"compile": True, **storm}),
        ]
    return [
        (Tier.EAGER, "autograd_loop", {"copies": True}),
        (Tier.BATCHED, "grads_batched", {}),
        (Tier.COMPILED, "jacrev_compiled", {}),
    ]


# Outputs (all points together) from which the eager sparse tier's backward passes go one
# colour at a time: f's operations are then large enough that batching the colours gains
# nothing, where on smaller ones dispatch dominates.
ONE_COLOUR_AT_A_TIME = 1 << 15


def eager_sparse_passes(problem: Problem) -> str:
    """How the first sparse tier computes its passes: by plain autograd, which imports
    nothing of torch's compiler (torch.func's first JVP imports torch._dynamo), one colour
    at a time where f's output is large, else batched (imports sympy)."""
    large = problem.n_out * problem.batch >= ONE_COLOUR_AT_A_TIME
    return "autograd" if large else "autograd_batched"


def tiered(problem: Problem, opts: AutoOptions) -> Declared:
    """The cheapest form now; ``prep.settled()`` builds the last one that can be built."""
    (tier, name, options), *later = ladder(problem)
    first = _prepare_named(name, problem, **options)
    # only patience reads the costs: without it nothing is looked up, hashed or written
    costs = BuildCosts(_key(problem, opts) if opts.patience is not None else "", first.strategy)
    stages = [
        Stage(
            t.value,
            functools.partial(_prepare_named, n, problem, **o),
            traced=t in TRACED,
            cost_s=costs.of(t),
        )
        for t, n, o in later
    ]
    if later and costs.reached(later[-1][0]):  # an earlier run here went that far: so may this
        stages = stages[-1:]
    f = problem.f if problem.batch == 1 else problem.f_many

    def check(x: torch.Tensor, jacobian: object) -> str:
        return disagreement(f, x, jacobian, problem.n_out)

    tiers = Tiered(first, tier.value, stages, check, problem.x, opts.patience, costs.measured)
    info = replace(first.info, decided_by=Decided.RULE.value)
    return Declared(
        tiers.jac,
        info,
        value_and_jac=tiers.both,
        mode=first.mode,
        tiers=tiers,
        finite_entries=functools.partial(_finite_entries, tiers),
    )


class BuildCosts:
    """What building each tier cost on this machine (CPU seconds of the process: its build
    and first checked answer), remembered under the problem's decision key
    (``jacbench.core.decisions``); ``COST_ESTIMATES_S`` until one was measured here, or
    where remembering is off."""

    def __init__(self, key: str, first: str) -> None:
        remembered = decisions.recall(key) if key else None
        self.key, self.first = key, first
        self.seconds = dict(remembered.build_s) if remembered is not None else {}

    def of(self, tier: Tier) -> float:
        return self.seconds.get(tier.value, COST_ESTIMATES_S[tier])

    def reached(self, tier: Tier) -> bool:
        """Whether ``tier`` was built and checked here before: a later run's patience then
        goes straight for it (the tiers between cost builds a run that long does not need)."""
        return tier.value in self.seconds

    def measured(self, tier: str, seconds: float) -> None:
        self.seconds[tier] = min(seconds, decisions.MAX_BUILD_S)
        if self.key:
            decisions.remember(self.key, decisions.Decision(self.first, {}, dict(self.seconds)))


def _finite_entries(tiers: Tiered, out: torch.Tensor) -> torch.Tensor:
    """The entries of ``out`` that the tier in use can have written non-finite (a sparse
    tier's pattern; all for the others): each tier's Jacobian has the same entries."""
    entries = tiers.current.finite_entries
    return out if entries is None else entries(out)


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


@dataclass(frozen=True)
class Calibration:
    """The fastest candidate, the options it was prepared with, and the share of its
    runnable time the process had a core while timing (``core.contention``; None: it was
    not contended), below which the decision is not remembered."""

    prep: Prepared
    options: dict
    contention: float | None


def calibrate(problem: Problem, opts: AutoOptions) -> Calibration:
    """The fastest candidate, timed briefly."""
    from jacbench.core.interleaved import calibration_clock, finished  # calibration's alone

    ready: list[tuple[Prepared, dict]] = []
    best_first = math.inf
    # One compilation at most: the compiled form of the mode the shape rule picks (fewer
    # passes). Compiling both modes doubled auto's setup on seed004; whether auto still
    # keeps up with the best exact strategy is what scripts/bench_exact_vs_fd.py checks.
    for name, options in candidates(problem, opts.compile):
        try:
            prep = _prepare_named(name, problem, **options)
            clock = calibration_clock(problem.device)
            start = clock()
            prep(problem.x)
            finished(problem.device)
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
    preps = [p for p, _ in ready]
    before = contention.snapshot()
    best = fastest(
        _seconds_per_call(preps, problem.x, opts.calibration_time),
        lambda close: _seconds_per_call(
            [preps[k] for k in close], problem.x, opts.calibration_time, REFINE
        ),
    )
    loaded = contention.contention(before, contention.snapshot(), problem.device)
    prep, options = ready[best]
    return Calibration(prep, options, loaded)


def fastest(seconds: list[float], again: Callable[[list[int]], list[float]]) -> int:
    """The index of the fastest of ``seconds``; where others are within ``CLOSE`` of it, the
    fastest of the close ones as ``again`` times them (their indices) once more."""
    close = [k for k, t in enumerate(seconds) if t <= CLOSE * min(seconds)]
    if len(close) == 1:
        return close[0]
    times = again(close)
    return close[times.index(min(times))]


# The contract checks auto without compiling: every eager candidate still calibrated; its
# compiled tiers keep tests of their own (tests/test_folded.py, test_strategies.py).
@strategy(Kind.EXACT, Mode.AUTO, options=AutoOptions, batch=True, test_options={"compile": False})
def auto(problem: Problem, opts: AutoOptions):
    """The fastest exact strategy for this problem, chosen by rule and calibration."""
    problem = with_traced_pattern(problem)
    if opts.compile and not opts.upfront:
        return tiered(problem, opts)
    chosen, how = choose(problem, opts)
    info = replace(chosen.info, chosen_strategy=chosen.strategy, decided_by=how.value)
    both = chosen.raw_both if chosen.both_fn is not None else None
    return Declared(
        chosen.raw, info, value_and_jac=both, mode=chosen.mode, finite_entries=chosen.finite_entries
    )
