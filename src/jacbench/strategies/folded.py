"""jacfwd with its tangent batch folded into matrix products (``jacbench.core.fold``):
the forward-mode graph is traced once, its broadcast batched products become plain ones,
and the graph runs as it is (eager: no vmap left to interpret at each call) or compiled.

The forward-mode graph is traced as reverse mode twice (``by_reverse_twice``: the same
products as jacfwd's, without forward-mode AD), by blocks of x where f reads x in slices
(``jacbench.core.blocks``: a parameter vector split into its tensors); through jacfwd
where f's backward pass cannot itself be differentiated (``forward_ad``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from jacbench.core.blocks import by_blocks
from jacbench.core.problem import Problem
from jacbench.core.strategy import Declared, Kind, Mode, strategy
from jacbench.strategies import func
from jacbench.strategies.compiled import COMPILE_MODES, STORMS, Ways, retraced
from jacbench.strategies.func import per_point

FORWARD_AD = ("fallback", "never", "always")


@dataclass
class FoldedOptions:
    compile: bool = True  # torch.compile the folded graph (else it runs eagerly)
    mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune
    # a graph traced again at nearly every call (what f reads keeps changing): warn once and
    # go on, or raise RetraceStorm (auto then goes back to its eager tier)
    on_retrace_storm: str = "warn"
    # when to trace forward mode through forward-mode AD (torch.func.jacfwd) rather than
    # as reverse mode twice: "fallback" where f's backward pass cannot be differentiated,
    # "never", "always" (torch's forward AD is wrong for a few operators: reverse mode twice
    # is the default)
    forward_ad: str = "fallback"

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"mode must be one of {', '.join(COMPILE_MODES)}, got {self.mode!r}")
        if self.on_retrace_storm not in STORMS:
            raise ValueError(
                f"on_retrace_storm must be one of {', '.join(STORMS)}, "
                f"got {self.on_retrace_storm!r}"
            )
        if self.forward_ad not in FORWARD_AD:
            raise ValueError(
                f"forward_ad must be one of {', '.join(FORWARD_AD)}, got {self.forward_ad!r}"
            )


# Forward mode by blocks only for a compiled graph of a Jacobian with at least this many
# entries: below, a block's own operations cost more than the zero tangents they save, and
# run eagerly, blocks cost more operations than they save arithmetic.
BLOCKS_MIN_ENTRIES = 16384


def value_and_jacobian(
    problem: Problem, forward_ad: str = "always", compile: bool = False
) -> Callable:
    """(f(x), J(x)) of the problem's point(s) in one pass: by jacfwd (``forward_ad``
    "always"), else by reverse mode twice, by blocks of x where f reads it in slices (and
    the graph is compiled, and large enough)."""
    return transforms(problem, forward_ad, compile)(problem.f, (problem.points[0],), 0)[0]


def transforms(problem: Problem, forward_ad: str, compile: bool) -> Ways:
    """``(f, inputs, k) ->`` the ways to trace ``(x, *others) -> (f(x), J(x))``, the
    preferred first, of ``f(*inputs)`` with x its input ``k`` (f's graph as dynamo captured
    it: the other inputs are the tensors f reads). Blocks are found from the real inputs
    here, before any trace; the ways themselves are traced."""
    blocks = compile and problem.n_out * problem.n_in >= BLOCKS_MIN_ENTRIES and problem.batch == 1

    def ways(f: Callable, inputs: tuple[torch.Tensor, ...], k: int) -> list[Callable]:
        def of(way: Callable[[Callable], Callable]) -> Callable:
            def fn(v: torch.Tensor, *others: torch.Tensor) -> object:
                def f_v(u: torch.Tensor) -> object:
                    return f(*others[:k], u, *others[k:])

                return per_point(problem, way(f_v))(v)

            return fn

        out = []
        if forward_ad != "always":
            by_slices = by_blocks(f, inputs, k, by_reverse_twice) if blocks else None
            out.append(by_slices or of(by_reverse_twice))
        if forward_ad != "never":
            out.append(of(jacfwd_both))
        return out

    return ways


jacfwd_both = functools.partial(func.value_and_jacobian, torch.func.jacfwd)


def by_reverse_twice(f: Callable) -> Callable:
    """``x -> (f(x), J(x))``, J by columns as forward mode computes them, without forward
    AD: u -> J^T u is linear, so its own vector-Jacobian product along v is J v. Traced,
    the graph holds the same products as jacfwd's (the transpose of a transpose). The
    tangent basis is built as jacfwd builds it (zeros, then a diagonal written), so that a
    compiler computes it once per call rather than inside every kernel that reads it."""

    def both(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value, pull = torch.func.vjp(f, x)  # type: ignore[misc]  # stub: a 3-tuple with has_aux
        _, push = torch.func.vjp(lambda u: pull(u)[0], torch.zeros_like(value))  # type: ignore[misc]  # same
        basis = x.new_zeros(x.numel(), x.numel())
        basis.diagonal().fill_(1)
        columns = torch.func.vmap(lambda v: push(v.reshape(x.shape))[0])(basis)
        return value, columns.reshape(x.numel(), -1).t().reshape(*value.shape, *x.shape)

    return both


@strategy(Kind.EXACT, Mode.FORWARD, options=FoldedOptions, batch=True)
def jacfwd_folded(problem: Problem, opts: FoldedOptions):
    """Forward mode traced once, tangents folded into matmuls; compiled by default."""
    return build(problem, opts)


def build(problem: Problem, opts: FoldedOptions) -> Declared:
    """``jacfwd_folded``'s Jacobian."""
    way = by_reverse_twice if opts.forward_ad != "always" else jacfwd_both
    both = retraced(
        problem,
        transforms(problem, opts.forward_ad, opts.compile),
        per_point(problem, way(problem.f)),  # f as it is, where its graph gives way
        opts.compile,
        opts.mode,
        opts.on_retrace_storm,
    )

    def value_and_jac(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value, jac = both(x)
        return value, jac

    # no forward AD at its calls: the graph is aten operations
    return Declared(lambda x: both(x)[1], value_and_jac=value_and_jac, serial=False)
