"""torch.compile around torch.func.jacfwd / jacrev: exact Jacobians with the overheads of
the Python-level transforms compiled away. Compilation happens in ``prepare``, so its cost
lands in first_call_s and never in the steady-state time."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from jacbench.core import fold, guarded, torch_internals
from jacbench.core.cache import cache_folder
from jacbench.core.errors import one_line
from jacbench.core.fold import ValueDependent, optimised, traced, transpose_narrow
from jacbench.core.guarded import own_entry
from jacbench.core.hoist import hoist
from jacbench.core.prepared import TORCH_STATE
from jacbench.core.problem import Problem
from jacbench.core.strategy import Kind, Mode, StrategySkip, strategy
from jacbench.strategies.func import per_point

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
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
        reason = one_line(exc)
        raise StrategySkip(f"torch.compile failed here: {type(exc).__name__}: {reason}") from exc
    return call


def compile_graph(
    graph: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...], mode: str = "default"
) -> Callable:
    """An aten graph (``jacbench.core.fold.traced``) compiled by inductor directly: dynamo
    made f's graph already (``jacbench.core.guarded``), and its guards stay in front of
    this one. Read from inductor's cache where jacbench remembers; where that way fails
    (torch 2.13's standalone compile of jacfwd's transformer graph: "copy_() on an invalid
    python storage"), compiled the plain way. A failure is a skip."""
    options = {} if mode == "default" else {"max_autotune": mode == "max-autotune"}
    ways = [True, False] if cache_folder("inductor") is not None else [False]
    for cache in ways:
        try:
            with warnings.catch_warnings(), autograd_state_kept():
                warnings.simplefilter("ignore")  # inductor's own deprecations and notes
                compiled = torch_internals.inductor_compile(graph, list(inputs), options, cache)
                compiled(*inputs)
            break
        except Exception as exc:
            if cache:
                continue
            reason = one_line(exc)
            raise StrategySkip(f"inductor failed here: {type(exc).__name__}: {reason}") from exc

    def call(*args: torch.Tensor):
        with autograd_state_kept():
            return compiled(*args)

    return call


# (f, its inputs, x's index among them) -> the ways to trace (x, *others) -> (f(x), J(x))
Ways = Callable[[Callable, tuple[torch.Tensor, ...], int], list[Callable]]


def retraced(
    problem: Problem,
    ways: Ways,
    untraced: Callable[[torch.Tensor], Any],
    compile: bool,
    mode: str = "default",
    storm: str = "warn",
) -> Callable[[torch.Tensor], Any]:
    """``x -> (f(x), J(x))`` by a transform of the problem's f (the first of ``ways(f)``
    that traces) traced into an aten graph of f as dynamo captures it
    (``jacbench.core.guarded``: every tensor f reads is a graph input, every other value
    it froze is guarded), its broadcast products folded, compiled by inductor where
    ``compile`` (else what it builds from shapes alone is computed once:
    ``jacbench.core.hoist``; compiled, narrow products transposed), every output a new
    tensor (``jacbench.core.fold.optimised``). Where f cannot be captured whole, a skip;
    where it stops being capturable later (a storm, a graph break), that call raises
    (``RetraceStorm`` with ``storm="raise"``) or answers by ``untraced`` (f run as it is)."""
    f = problem.f
    batch = problem.batch

    def point(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(batch, -1)[0] if batch > 1 else x

    def make(f_of: Callable, inputs: tuple[torch.Tensor, ...], k: int, x: torch.Tensor) -> Callable:
        others = inputs[:k] + inputs[k + 1 :]
        graph = _first_traced(lambda: ways(f_of, inputs, k), (x, *others))
        if not compile:  # inductor fuses the basis into its kernels: hoisted only eagerly
            return optimised(graph, (x, *others), [_folded, _hoisted]).forward  # no hooks
        graph = optimised(graph, (x, *others), [_folded, transpose_narrow])
        return compile_graph(graph, (x, *others), mode)

    traced = guarded.Guarded(f, point, make, storm)
    state = {"untraced": False}

    def both(x: torch.Tensor) -> Any:
        if not state["untraced"]:
            try:
                return traced(x)
            except guarded.NotCaptured as exc:
                if traced.captures == 0:  # never captured: this form cannot be built
                    raise StrategySkip(
                        f"cannot trace f into one graph ({exc}): f reads a number from a "
                        "tensor, branches on a value or calls what torch.compile cannot "
                        "trace; an eager strategy (jacfwd, jacrev) computes its Jacobian"
                    ) from None
                state["untraced"] = True
                warnings.warn(
                    f"the Jacobian's graph could not be traced again ({exc}): this call and "
                    "the next are answered untraced",
                    RuntimeWarning,
                    stacklevel=3,
                )
        with torch.enable_grad():
            return untraced(x)

    with TORCH_STATE:
        both(problem.x)  # captured now: a function that cannot be is a skip here
    return both


def _first_traced(
    transforms: Callable[[], list[Callable]], inputs: tuple[torch.Tensor, ...]
) -> torch.fx.GraphModule:
    """The graph of the first of ``transforms()`` (of f's graph, over ``inputs``) that
    traces; ``NotCaptured`` naming why none does."""
    failure: Exception | None = None
    try:
        with torch.enable_grad():
            for fn in transforms():
                try:
                    return traced(fn, None, *inputs)
                except ValueDependent:
                    raise
                except Exception as exc:  # e.g. a backward pass that cannot be differentiated
                    failure = exc
    except Exception as exc:
        failure = exc
    reason = one_line(failure)
    raise guarded.NotCaptured(f"{type(failure).__name__}: {reason}")


def _folded(graph: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...]) -> None:
    fold.fold(graph)


def _hoisted(graph: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...]) -> None:
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
