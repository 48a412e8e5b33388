"""One short name per strategy variant (a strategy run with options other than its defaults),
shown on every surface: the strategy and only what differs (``auto (eager)``,
``fd_central eps=1e-4``); the full options stay in the row's ``strategy_options``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

# Options whose value reads better as a word in parentheses than as ``key=value``.
WORDS: dict[str, dict[Any, str]] = {"compile": {False: "eager", True: "compiled"}}
MAX_LEN = 60  # a label is a name, never an option dump: longer ones are cut


def number_text(value: float) -> str:
    """A number as written by hand: ``1e-4``, ``0.05``, ``2.5e-7``, ``300``."""
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:g}"
    mantissa, exponent = f"{value:.3e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def value_text(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def differences(options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The options whose value is not the default (keys without a known default count)."""
    missing = object()
    return {
        key: value
        for key, value in sorted(options.items())
        if key != "name" and defaults.get(key, missing) != value
    }


def label(strategy: str, differing: Mapping[str, Any]) -> str:
    """``strategy`` with what differs: words in parentheses, then ``key=value`` pairs."""
    words, pairs = [], []
    for key, value in differing.items():
        word = WORDS.get(key, {}).get(value) if isinstance(value, (bool, int, str)) else None
        if word is not None:
            words.append(word)
        else:
            pairs.append(f"{key}={value_text(value)}")
    text = strategy + (f" ({', '.join(words)})" if words else "")
    text += "".join(f" {pair}" for pair in pairs)
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 3] + "..."


def defaults_of(options: Any) -> dict[str, Any]:
    """The default of each field of an options dataclass instance (none where it has none)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    return values


def of_options(strategy: str, options: Any) -> str:
    """The label of a job's strategy and its options dataclass (None: no options)."""
    if options is None or not dataclasses.is_dataclass(options) or isinstance(options, type):
        return strategy
    current = json.loads(json.dumps(dataclasses.asdict(options), default=str))
    defaults = json.loads(json.dumps(defaults_of(options), default=str))
    return label(strategy, differences(current, defaults))


def of_row(row: Mapping[str, Any]) -> str:
    """The label of a recorded row: its report label, its recorded variant, or its strategy."""
    for key in ("label", "variant"):
        value = row.get(key)
        if isinstance(value, str) and value:
            return value
    return str(row.get("strategy") or "?")
