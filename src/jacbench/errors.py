"""User-facing errors, and how an exception inside a job becomes a status."""

from __future__ import annotations

import re

from jacbench.strategy import StrategySkip


class ConfigError(ValueError):
    """A bad choice or value in the job's configuration; the message says what is valid."""


# Messages from torch that mean "this strategy cannot apply here", not "something broke".
_NOT_APPLICABLE = [
    r"not implemented for '(Half|BFloat16|ComplexFloat|ComplexDouble|Float|Double)'",
    r"does not support forward AD|forward AD is not implemented|not implemented for forward",
    r"Trying to use forward AD with .* that does not support it",
    r"is not supported for complex",
    r"Low precision dtypes not supported",
    r"Batching rule not implemented",
    r"vmap: .* is not supported",
]


def classify(exc: BaseException) -> tuple[str, str]:
    """Return (status, one-line message) for an exception raised inside a job.

    Expected outcomes (the strategy cannot apply to this model, dtype or device) are
    ``skipped``; everything else is ``failed``.
    """
    message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    if isinstance(exc, StrategySkip):
        return "skipped", str(exc).splitlines()[0]
    if isinstance(exc, ConfigError):
        return "failed", str(exc).splitlines()[0]
    text = str(exc)
    if isinstance(exc, NotImplementedError) or any(re.search(p, text) for p in _NOT_APPLICABLE):
        return "skipped", message
    return "failed", message
