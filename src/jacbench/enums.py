"""Deprecated path (``jacbench.moved``): import from ``jacbench`` (the plugin API) instead."""

from jacbench.core.enums import *  # noqa: F403
from jacbench.moved import warn_moved

warn_moved(__name__)
