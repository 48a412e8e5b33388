"""The exceptions jacbench raises on purpose. A leaf module: it imports nothing from jacbench,
so any module may raise them without import cycles. What a job does with each (skip or fail)
is the runner's policy, in ``jacbench.run.runner``."""

from __future__ import annotations


def one_line(what: object, limit: int | None = 300) -> str:
    """``what`` (an exception or any text) on one line, cut at ``limit`` characters: how a
    message quotes an error it caught."""
    text = " ".join(str(what).split())
    return text if limit is None else text[:limit]


def innermost(exc: BaseException) -> BaseException:
    """The first error of ``exc``'s chain of causes (Hydra wraps a model's own error)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


class ConfigError(ValueError):
    """A bad choice or value in the job's configuration; the message says what is valid."""


class StrategySkip(Exception):
    """Raised by ``prepare`` when a strategy cannot apply to this problem, dtype or device."""


class PointMismatch(ValueError):
    """A prepared Jacobian was called at a point unlike the one it was prepared for."""


class OutputMismatch(ValueError):
    """f's output at a point has another size than at the point it was prepared at."""


class UnsupportedFunction(ConfigError):
    """f, or the point it was given, is one jacbench cannot differentiate as given; the
    message names what it is and what to do."""


class GraphCut(UnsupportedFunction):
    """Part of f's computation from x to its output is hidden from automatic differentiation
    (numpy, torch.no_grad, detach, .item()): every AD Jacobian of it would be wrong."""


class RandomFunction(UnsupportedFunction):
    """f gives different values at the same point (random operations, state it changes)."""


class RetraceStorm(RuntimeError):
    """A traced Jacobian's graph had to be traced again at (nearly) every call: something it
    froze keeps changing, so tracing costs more than it saves."""


class WrongJacobian(RuntimeError):
    """A strategy's first answer disagrees with reverse mode's derivative of f: the strategy
    (or the part of torch it uses, e.g. forward-mode AD of some operators) is wrong here."""


class MemoryBudget(ConfigError):
    """A dense Jacobian larger than the memory budget was asked for; nothing was allocated."""


class NotPicklable(TypeError):
    """A prepared Jacobian that cannot be pickled or copied, with what to do instead."""
