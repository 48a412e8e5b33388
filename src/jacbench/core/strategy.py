"""What a Jacobian strategy is, and the decorator that turns one function into one.

A strategy is one function ``prepare(problem, opts)``: it does the setup once (build the
vmapped or compiled callable, check that it applies) and returns ``jac(x)``, the Jacobian at a
point ``x`` of the problem's flat shape, or ``Declared(jac, PrepInfo(...))`` when it decided
something worth recording. ``StrategySpec.prepare`` wraps either into a ``Prepared``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from jacbench.core.enums import Kind, Mode
from jacbench.core.errors import ConfigError, StrategySkip
from jacbench.core.prepared import TORCH_STATE, Declared, JacobianFn, Prepared, PrepInfo

if TYPE_CHECKING:
    from jacbench.core.problem import Problem

__all__ = [
    "Declared",
    "JacobianFn",
    "Kind",
    "Mode",
    "NoOptions",
    "PrepInfo",
    "StrategySkip",
    "StrategySpec",
    "strategy",
]

PrepareFn = Callable[["Problem", Any], "JacobianFn | Declared"]


@dataclass
class NoOptions:
    """Options of a strategy that has none."""


@dataclass(frozen=True)
class StrategySpec:
    """One registered way to compute a Jacobian."""

    name: str
    kind: Kind
    mode: Mode
    setup: PrepareFn  # the decorated function
    options: type = NoOptions
    doc: str = ""
    batch: bool = False  # computes per-sample Jacobians (B, M, N) when problem.batch > 1
    # options the contract checks (jacbench.testing) prepare it with: cheaper settings for
    # expensive defaults (auto: no compiling); its defaults keep their own tests
    test_options: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def describe(self, opts: Any = None) -> str:
        """``<doc line>; k=v, ...``: what the strategy makes, with the options it was made
        with (defaults included: chunk_size, compile, eps...)."""
        text = self.doc.rstrip(".") or self.name
        if dataclasses.is_dataclass(opts) and not isinstance(opts, type):
            values = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(opts).items())
            text += f"; {values}" if values else ""
        return text

    def make_options(self, values: dict[str, Any]) -> Any:
        """Build the typed options; their ``__post_init__`` validates the values."""
        known = {f.name for f in dataclasses.fields(self.options)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"strategy {self.name!r} has no option(s) {', '.join(unknown)}; "
                f"valid options: {', '.join(sorted(known)) or 'none'}"
            )
        return self.options(**values)

    def prepare(self, problem: Problem, opts: Any = None) -> Prepared:
        """Run the setup once; the returned ``Prepared`` is reused at every point."""
        if problem.batch > 1 and not self.batch:
            raise StrategySkip(
                f"strategy {self.name!r} computes one Jacobian at a time; batch="
                f"{problem.batch} needs a batch-aware strategy (e.g. jacrev, jacfwd, fd_central)"
            )
        opts = self.make_options({}) if opts is None else opts
        # the setup runs in the grad mode its calls will run in, and takes turns with every
        # other use of torch's process-wide state (tracing, forward mode: TORCH_STATE)
        with TORCH_STATE, torch.no_grad():
            built = self.setup(problem, opts)
        return self.wrap(problem, built, opts)

    def wrap(self, problem: Problem, built: JacobianFn | Declared, opts: Any = None) -> Prepared:
        """What the setup built, as the ``Prepared`` called at every point; its info says
        what that is for every strategy (``PrepInfo.built``: its one-line description and
        options) beside what the strategy declared itself."""
        declared = built if isinstance(built, Declared) else Declared(built)
        info = declared.info
        if not info.built:
            info = dataclasses.replace(info, built=self.describe(opts))
        return Prepared(
            fn=declared.jac,
            strategy=self.name,
            shape=tuple(problem.x.shape),
            dtype=problem.dtype,
            device=problem.device,
            declared_info=info,
            mode=declared.mode or self.mode,
            tiers=declared.tiers,
            value_fn=problem.f if problem.batch == 1 else problem.f_many,
            both_fn=declared.value_and_jac,
            # auto's tiers take turns by their own
            serial=self.mode is Mode.FORWARD if declared.serial is None else declared.serial,
            finite_entries=declared.finite_entries,
        )


def strategy(
    kind: Kind | str,
    mode: Mode | str,
    options: type = NoOptions,
    batch: bool = False,
    test_options: dict[str, Any] | None = None,
) -> Callable[[PrepareFn], StrategySpec]:
    """Decorate ``prepare(problem, opts) -> jac`` to make it a strategy.

    The strategy's name is the function's name; register it with one entry-point line in the
    ``jacbench.strategies`` group. ``batch=True`` declares that it handles problems with
    several independent points (``problem.batch`` > 1); others are skipped there.
    ``test_options`` are the options the contract checks use (``python -m jacbench.check``).
    """
    if not dataclasses.is_dataclass(options):
        raise TypeError("options must be a dataclass whose fields all have defaults")

    def wrap(prepare: PrepareFn) -> StrategySpec:
        return StrategySpec(
            name=prepare.__name__,
            kind=Kind(kind),
            mode=Mode(mode),
            setup=prepare,
            options=options,
            batch=batch,
            test_options=dict(test_options or {}),
            doc=(prepare.__doc__ or "").strip().splitlines()[0] if prepare.__doc__ else "",
        )

    return wrap
