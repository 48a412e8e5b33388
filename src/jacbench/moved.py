"""Module paths of jacbench's plugin API before its modules moved under ``jacbench.core``.

An outside strategy written against the earlier docs (``from jacbench.strategy import Kind,
Mode, StrategySkip, strategy``; ``from jacbench.problem import Problem``) keeps loading for one
release, with a ``DeprecationWarning`` that names the import to use instead: ``from jacbench
import ...`` (the stable plugin API, docs/extending.md).
"""

from __future__ import annotations

import warnings

REMOVED_IN = "0.3"


def warn_moved(old: str) -> None:
    """Say once per import of ``old`` that it is deprecated, pointing at the caller's import."""
    warnings.warn(
        f"{old} is deprecated and goes in jacbench {REMOVED_IN}: import the plugin API from "
        "jacbench itself (from jacbench import strategy, Kind, Mode, StrategySkip, Problem)",
        DeprecationWarning,
        stacklevel=3,  # the importing module's line, past the import machinery's frames
    )
