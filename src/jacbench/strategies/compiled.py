"""torch.compile around torch.func.jacfwd / jacrev: exact Jacobians with the overheads of
the Python-level transforms compiled away. Compilation happens in ``prepare``, so its cost
lands in first_call_s and never in the steady-state time."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from jacbench.core.fold import Captured, fold, traced, transpose_narrow
from jacbench.core.hoist import hoist
from jacbench.core.problem import Problem
from jacbench.core.strategy import Kind, Mode, StrategySkip, strategy
from jacbench.strategies.func import per_point

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# jacfwd/jacrev wrappers share their code objects across problems: with the default cache
# limit (8) a sweep would silently fall back to eager after a few problems.
CACHE_LIMIT = 256
# A traced graph rebuilt this often is rebuilt at (nearly) every call: said once, as dynamo
# says so at its own default cache limit (8) before it falls back to eager code.
RETRACE_WARNING = 8


@dataclass
class CompileOptions:
    mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"mode must be one of {', '.join(COMPILE_MODES)}, got {self.mode!r}")


def _raise_cache_limits() -> None:
    config = torch._dynamo.config
    config.cache_size_limit = max(config.cache_size_limit, CACHE_LIMIT)
    if hasattr(config, "accumulated_cache_size_limit"):
        config.accumulated_cache_size_limit = max(config.accumulated_cache_size_limit, CACHE_LIMIT)


# Autograd modes torch.compile failed to restore, held open for the rest of the process.
_RESTORED: list[object] = []


@contextlib.contextmanager
def autograd_state_kept() -> Iterator[None]:
    """Leave the thread's autograd state as it was found.

    In CI (cold compile caches, a loaded machine) every test after compiling the
    transformer's parameter Jacobian, or Burgers' batched one, failed with inference-mode
    and functorch-level errors or all-zero Jacobians: torch 2.13's compiler had left that
    thread state behind. A sweep runs many jobs in one process, so it is put back here,
    after every compiled call."""
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    depth = torch._C._functorch.get_dynamic_layer_stack_depth()
    try:
        yield
    finally:
        if torch._C._functorch.get_dynamic_layer_stack_depth() != depth:
            torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(depth)
        if torch.is_inference_mode_enabled() != inference:
            _RESTORED.append(torch.autograd.grad_mode._enter_inference_mode(inference))
        torch._C._set_grad_enabled(grad)


def compile_checked(fn: Callable, x: torch.Tensor, mode: str = "default") -> Callable:
    """``torch.compile(fn)``, compiled now by a first call at ``x``; a failure is a skip."""
    if not hasattr(torch, "compile"):
        raise StrategySkip(f"torch {torch.__version__} has no torch.compile")
    _raise_cache_limits()
    # dynamic=False: a prepared Jacobian is made for one shape, and dynamo's automatic dynamic
    # shapes (switched on when the same code is met with another shape in the process) traced
    # vmap(jacrev) symbolically and failed ("Please convert all Tensors to FakeTensors") in CI
    compiled = torch.compile(fn, mode=mode, dynamic=False)

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
    would have kept: the shape, dtype and device (``Prepared.check``) and the graph's
    constants (``Captured``). A failure is a skip."""
    import torch._inductor

    options = {} if mode == "default" else {"max_autotune": mode == "max-autotune"}
    try:
        with warnings.catch_warnings(), autograd_state_kept():
            warnings.simplefilter("ignore", FutureWarning)  # inductor's own deprecations
            compiled = torch._inductor.compile(graph, [x], options=options)
            compiled(x)
    except Exception as exc:
        reason = " ".join(str(exc).split())[:300]
        raise StrategySkip(f"inductor failed here: {type(exc).__name__}: {reason}") from exc

    def call(v: torch.Tensor):
        with autograd_state_kept():
            return compiled(v)

    return call


def retraced(problem: Problem, fn: Callable, compile: bool, mode: str = "default") -> Callable:
    """``fn`` (a transform of the problem's f) traced once into an aten graph
    (``jacbench.core.fold``: f checked with fake tensors first, so a graph that depends on
    values is refused), its broadcast products folded, and compiled by inductor where
    ``compile`` (else what it builds from shapes alone is computed once:
    ``jacbench.core.hoist``; compiled, narrow products transposed:
    ``jacbench.core.fold.transpose_narrow``); traced again when a constant it holds was replaced
    (``Captured``)."""

    def build() -> Callable:
        try:
            with torch.enable_grad():
                f = problem.f if problem.batch == 1 else problem.f_many
                graph = traced(fn, f, problem.x)
        except Exception as exc:  # e.g. Python branching on values: no graph holds for all x
            reason = " ".join(str(exc).split())[:300]
            raise StrategySkip(
                f"cannot trace f into one graph: {type(exc).__name__}: {reason}"
            ) from exc
        fold(graph)
        if not compile:  # inductor fuses the basis into its kernels: hoisted, 0.99-1.08x there
            hoist(graph)  # eager: the tangent basis and its slices built once (0.84x a call)
            return graph
        transpose_narrow(graph, problem.x)  # for the compiler: 0.98-1.02x eagerly
        return compile_graph(graph, problem.x, mode)

    current = [build(), Captured(problem.module)]
    rebuilt = [0]

    def call(x: torch.Tensor):
        if current[1].changed():  # a constant of the graph was replaced: trace again
            current[:] = [build(), Captured(problem.module)]
            rebuilt[0] += 1
            if rebuilt[0] == RETRACE_WARNING:
                warnings.warn(
                    f"the Jacobian's graph was traced again {RETRACE_WARNING} times (compiled "
                    "again each time where compiled): a parameter, buffer, closure variable or "
                    "global that f uses keeps being replaced; update it in place, or make it "
                    "an input of f",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return current[0](x)

    return call


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
