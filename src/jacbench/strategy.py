"""Deprecated path of the plugin API (``jacbench.moved``): use ``from jacbench import strategy,
Kind, Mode, StrategySkip``.

This module shares its name with the ``jacbench.strategy`` decorator: importing it makes
``jacbench.strategy`` this module, so the module itself decorates as the function does and
``from jacbench import strategy`` keeps working whichever import came first.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from jacbench.core.strategy import *  # noqa: F403
from jacbench.core.strategy import __all__, strategy  # noqa: F401
from jacbench.moved import warn_moved

warn_moved(__name__)


class _DecoratingModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return strategy(*args, **kwargs)


sys.modules[__name__].__class__ = _DecoratingModule
