"""The small closed vocabularies of the library: what kind of answer a strategy gives, and how
it computes it. A leaf module without torch, so readers of results (reports, recorders) use
the same names as the code that measured them."""

from __future__ import annotations

from enum import Enum


class Named(str, Enum):
    """A str Enum that is interchangeable with its value: printed as "ok" (not "Status.OK")
    and hashed as the string, so dicts keyed by members answer lookups by values read back
    from parquet."""

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__


class Kind(Named):
    """How the answer relates to the true Jacobian; sets the tolerance of the verdict."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    NEGATIVE_CONTROL = "negative_control"  # wrong by design, kept to show a pitfall


class Mode(Named):
    REVERSE = "reverse"
    FORWARD = "forward"
    NUMERIC = "numeric"
    ANALYTIC = "analytic"
    AUTO = "auto"  # picks another strategy; the result records which (chosen_strategy)
