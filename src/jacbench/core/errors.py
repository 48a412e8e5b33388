"""The exceptions jacbench raises on purpose. A leaf module: it imports nothing from jacbench,
so any module may raise them without import cycles. What a job does with each (skip or fail)
is the runner's policy, in ``jacbench.run.runner``."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad choice or value in the job's configuration; the message says what is valid."""


class StrategySkip(Exception):
    """Raised by ``prepare`` when a strategy cannot apply to this problem, dtype or device."""


class PointMismatch(ValueError):
    """A prepared Jacobian was called at a point unlike the one it was prepared for."""


class LaunchRefused(BaseException):
    """A bad launch input found inside a Hydra callback. Hydra turns a callback's Exception
    into a warning and carries on, so the refusal is a BaseException; its ``__cause__`` is
    the ConfigError to show."""
