"""torch.compile around torch.func.jacfwd / jacrev: exact Jacobians with the overheads of
the Python-level transforms compiled away. Compilation happens in ``prepare``, so its cost
lands in first_call_s and never in the steady-state time."""

from __future__ import annotations

import collections
import contextlib
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from jacbench.core import torch_internals
from jacbench.core.cache import cache_folder
from jacbench.core.errors import RetraceStorm
from jacbench.core.fold import ValueDependent, fold, optimised, traced, transpose_narrow
from jacbench.core.hoist import hoist
from jacbench.core.prepared import TORCH_STATE
from jacbench.core.problem import FunctionModule, Problem
from jacbench.core.strategy import Kind, Mode, StrategySkip, strategy
from jacbench.core.watch import TooMuchToWatch, Watch
from jacbench.strategies.func import per_point

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# A traced graph rebuilt at this many of its last 2x as many calls is rebuilt at (nearly)
# every call: said once, as dynamo says so at its own default cache limit (8).
RETRACE_WARNING = 8
STORMS = ("warn", "raise")  # what a retrace storm does: warn once, or raise RetraceStorm


@dataclass
class CompileOptions:
    mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"mode must be one of {', '.join(COMPILE_MODES)}, got {self.mode!r}")


@contextlib.contextmanager
def autograd_state_kept() -> Iterator[None]:
    """Leave the thread's autograd state as it was found.

    In CI (cold compile caches, a loaded machine) every test after compiling the
    transformer's parameter Jacobian, or Burgers' batched one, failed with inference-mode
    and functorch-level errors or all-zero Jacobians: torch 2.13's compiler had left that
    thread state behind. A sweep runs many jobs in one process, so it is put back here,
    after every compiled call."""
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    depth = torch_internals.functorch_depth()
    try:
        yield
    finally:
        if torch_internals.functorch_depth() != depth:
            torch_internals.leave_functorch_levels(depth)
        if torch.is_inference_mode_enabled() != inference:
            torch_internals.restore_inference_mode(inference)
        torch.set_grad_enabled(grad)


def own_entry(fn: Callable) -> Callable:
    """``fn`` called from a function with a code object of its own.

    dynamo keeps its compiled code per code object, at most 8 versions of each (its cache
    limit): every ``torch.func.jacfwd(f)`` shares one wrapper's code, so a process that
    prepared 8 compiled Jacobians of other shapes or functions ran the 9th eagerly, 8x slower
    (257 against 29 us a call, scripts/compile_cache.py). With a code object per prepared
    Jacobian its versions never reach the limit, and the process-wide limit is left as the
    user set it."""

    def entry(v: torch.Tensor) -> object:
        return fn(v)

    code = entry.__code__.replace()  # a copy: a new code object
    return types.FunctionType(code, entry.__globals__, entry.__name__, None, entry.__closure__)


def compile_checked(fn: Callable, x: torch.Tensor, mode: str = "default") -> Callable:
    """``torch.compile(fn)``, compiled now by a first call at ``x``; a failure is a skip."""
    if not hasattr(torch, "compile"):
        raise StrategySkip(f"torch {torch.__version__} has no torch.compile")
    # dynamic=False: a prepared Jacobian is made for one shape, and dynamo's automatic dynamic
    # shapes (switched on when the same code is met with another shape in the process) traced
    # vmap(jacrev) symbolically and failed ("Please convert all Tensors to FakeTensors") in CI
    compiled = torch.compile(own_entry(fn), mode=mode, dynamic=False)

    def call(v: torch.Tensor) -> torch.Tensor:  # a new point may compile again
        with autograd_state_kept():
            return compiled(v)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # inductor's own deprecations
            call(x)
    except Exception as exc:
        reason = " ".join(str(exc).split())[:300]
        raise StrategySkip(f"torch.compile failed here: {type(exc).__name__}: {reason}") from exc
    return call


def compile_graph(graph: torch.fx.GraphModule, x: torch.Tensor, mode: str = "default") -> Callable:
    """An aten graph (``jacbench.core.fold.traced``) compiled by inductor directly, without
    dynamo: nothing left to trace, and no guards to check at every call (on seed004 dynamo's
    cache lookup and compiled region took 0.12 of 0.59 ms). The caller keeps what the guards
    would have kept: the shape, dtype and device (``Prepared.check``) and what the graph
    froze (``jacbench.core.watch``). Read from inductor's cache where jacbench remembers;
    where that way fails (torch 2.13's standalone compile of jacfwd's transformer graph:
    "copy_() on an invalid python storage"), compiled the plain way. A failure is a skip."""
    options = {} if mode == "default" else {"max_autotune": mode == "max-autotune"}
    ways = [True, False] if cache_folder("inductor") is not None else [False]
    for cache in ways:
        try:
            with warnings.catch_warnings(), autograd_state_kept():
                warnings.simplefilter("ignore", FutureWarning)  # inductor's own deprecations
                compiled = torch_internals.inductor_compile(graph, x, options, cache)
                compiled(x)
            break
        except Exception as exc:
            if cache:
                continue
            reason = " ".join(str(exc).split())[:300]
            raise StrategySkip(f"inductor failed here: {type(exc).__name__}: {reason}") from exc

    def call(v: torch.Tensor):
        with autograd_state_kept():
            return compiled(v)

    return call


def watched(problem: Problem) -> Watch:
    """What f can reach, as it is now (``jacbench.core.watch``); refused where too much.
    f is called once (what it writes itself is not watched): in the thread that calls the
    Jacobian, never beside it (a change made meanwhile would pass for f's own write)."""
    f = problem.f if problem.batch == 1 else problem.f_many
    module = problem.module
    roots = [module.fn] if isinstance(module, FunctionModule) else [module]
    try:
        watch = Watch(roots)
        with torch.no_grad():
            watch.settle(lambda: f(problem.x))  # what f writes itself is not watched
    except TooMuchToWatch as exc:
        raise StrategySkip(
            f"cannot trace f into one graph: {exc}, too many to check at each call for "
            "changes that a traced graph would not see; use an eager strategy (jacfwd, jacrev)"
        ) from exc
    return watch


@dataclass(frozen=True)
class TracedF:
    """f's own aten graph at one point, traced with fake tensors (so a Python branch on
    values fails there), and a watch of what f read, made just before. Both run f: in the
    thread that calls the Jacobian, never beside it (``f`` may not be safe to run from two
    threads at once: ``torch.func.functional_call`` swaps a module's parameters while it
    runs). What is traced from the graph afterwards (the Jacobian's graph, its passes, the
    compiler) runs the graph, never f, and can run in another thread."""

    graph: torch.fx.GraphModule
    watch: Watch


def traced_f(problem: Problem) -> TracedF:
    """f's graph at the problem's first point, and the watch (the caller's thread)."""
    with TORCH_STATE:  # make_fx is process-wide: one trace at a time
        watch = watched(problem)  # before the trace: a change meanwhile is seen
        try:
            with torch.enable_grad():
                graph = torch_internals.trace_shapes_only(problem.f, problem.points[0])
        except Exception as exc:  # e.g. Python branching on values: no graph for all x
            reason = " ".join(str(exc).split())[:300]
            raise StrategySkip(
                f"cannot trace f into one graph: {type(exc).__name__}: {reason}"
            ) from exc
    return TracedF(graph, watch)


Ways = Callable[[Callable], list[Callable]]  # f -> the transforms of f to try, in order


def retraced(
    problem: Problem,
    ways: Ways,
    compile: bool,
    mode: str = "default",
    storm: str = "warn",
    given: TracedF | None = None,
) -> Callable:
    """A transform of the problem's f (the first of ``ways(f)`` that traces) traced once
    into an aten graph (``jacbench.core.fold``: f checked with fake tensors first, so a
    graph that depends on values is refused), its broadcast products folded, and compiled
    by inductor where ``compile`` (else what it builds from shapes alone is computed once:
    ``jacbench.core.hoist``; compiled, narrow products transposed:
    ``jacbench.core.fold.transpose_narrow``), every pass kept valid for any strides and
    every output a new tensor (``jacbench.core.fold.optimised``). Traced again when
    anything the graph froze changed (``jacbench.core.watch``: a parameter replaced, a plain
    attribute, a dict value or a helper's global changed; ``Retraced`` says what a storm of
    them does). ``given``: f's graph and watch, made in the caller's thread, where the first
    trace runs in another (it then differentiates f's graph, never f)."""
    first = [given] if given is not None else []

    def build() -> tuple[Callable, Watch]:
        with TORCH_STATE:  # make_fx and forward AD are process-wide: one trace at a time
            # a change since the watch was made is a change at the first call
            f_traced = first.pop() if first else traced_f(problem)
            graph = _first_traced(lambda: ways(f_traced.graph), problem.x)
            watch = f_traced.watch
            if not compile:  # inductor fuses the basis into its kernels: hoisted, 0.99-1.08x
                # eager: the tangent basis and its slices built once (0.84x a call)
                return optimised(graph, problem.x, [_folded, _hoisted]), watch
            graph = optimised(graph, problem.x, [_folded, transpose_narrow])
            return compile_graph(graph, problem.x, mode), watch

    return Retraced(build, storm)


def _first_traced(
    transforms: Callable[[], list[Callable]], x: torch.Tensor
) -> torch.fx.GraphModule:
    """The graph of the first of ``transforms()`` (of f's graph, shown to hold for every
    point: ``traced_f``) that traces; a skip naming why none does."""
    failure: Exception | None = None
    try:
        with torch.enable_grad():
            for fn in transforms():
                try:
                    return traced(fn, None, x)
                except ValueDependent:
                    raise
                except Exception as exc:  # e.g. a backward pass that cannot be differentiated
                    failure = exc
    except Exception as exc:
        failure = exc
    reason = " ".join(str(failure).split())[:300]
    raise StrategySkip(f"cannot trace f into one graph: {type(failure).__name__}: {reason}")


class Retraced:
    """A traced graph, traced again when what it froze changed. ``storm="warn"``: a graph
    traced again at ``RETRACE_WARNING`` of its last 2x as many calls is said once;
    ``"raise"`` (auto's tiers): a change before the calls since the last trace spent what the
    trace cost raises ``RetraceStorm`` (tracing again would cost more than it saves: on an
    annealed attribute, a trace (a compile where compiled) at every call)."""

    def __init__(self, build: Callable[[], tuple[Callable, Watch]], storm: str) -> None:
        self.build, self.storm = build, storm
        self.calls, self.warned = 0, False
        self.retraces: collections.deque[int] = collections.deque(maxlen=RETRACE_WARNING)
        self._trace()

    def _trace(self) -> None:
        start = time.perf_counter()
        self.graph, self.watch = self.build()
        self.trace_s, self.since_s = time.perf_counter() - start, 0.0

    def __call__(self, x: torch.Tensor) -> object:
        self.calls += 1
        if self.watch.changed():  # something the graph froze changed: trace again
            self._again()
        start = time.perf_counter()
        out = self.graph(x)
        self.since_s += time.perf_counter() - start
        return out

    def _again(self) -> None:
        if self.storm == "raise" and self.since_s < self.trace_s:
            raise RetraceStorm(
                f"the Jacobian's graph would be traced again after {self.since_s * 1e3:.2g} ms "
                f"of calls, where tracing it took {self.trace_s:.2g} s: {CHANGING}"
            )
        self.retraces.append(self.calls)
        recent = self.calls - self.retraces[0] < 2 * RETRACE_WARNING
        if len(self.retraces) == RETRACE_WARNING and recent and not self.warned:
            warnings.warn(
                f"the Jacobian's graph was traced again at {RETRACE_WARNING} of about as many "
                f"calls (compiled again each time where compiled): {CHANGING}",
                RuntimeWarning,
                stacklevel=3,
            )
            self.warned = True
        self._trace()


CHANGING = (
    "a parameter, buffer, attribute, closure variable or global that f uses keeps being "
    "replaced or changed; update tensors in place, or make the value an input of f (an eager "
    "strategy, jacfwd or jacrev, reads it at each call)"
)


def _folded(graph: torch.fx.GraphModule, x: torch.Tensor) -> None:
    fold(graph)


def _hoisted(graph: torch.fx.GraphModule, x: torch.Tensor) -> None:
    hoist(graph)


def compiled_jacobian(problem: Problem, transform: Callable, mode: str):
    """Compile ``transform(f)`` (vmapped over the samples of a batch) and run it once."""
    return compile_checked(per_point(problem, transform(problem.f)), problem.x, mode)


@strategy(Kind.EXACT, Mode.FORWARD, options=CompileOptions, batch=True)
def jacfwd_compiled(problem: Problem, opts: CompileOptions):
    """torch.compile(torch.func.jacfwd(f)): forward mode, compiled."""
    return compiled_jacobian(problem, torch.func.jacfwd, opts.mode)


@strategy(Kind.EXACT, Mode.REVERSE, options=CompileOptions, batch=True)
def jacrev_compiled(problem: Problem, opts: CompileOptions):
    """torch.compile(torch.func.jacrev(f)): reverse mode, compiled."""
    return compiled_jacobian(problem, torch.func.jacrev, opts.mode)
