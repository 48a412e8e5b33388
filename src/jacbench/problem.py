"""Deprecated path (``jacbench.moved``): import from ``jacbench`` (the plugin API) instead."""

from jacbench.benchmark.problems import *  # noqa: F403  (build_problem, ModelKeys: earlier here)
from jacbench.core.problem import *  # noqa: F403
from jacbench.moved import warn_moved

warn_moved(__name__)
