"""The strategies' option schemas for Hydra, remembered so that composing a config needs no
torch (issue 29): loading the strategies imports torch (~1.3 s), and ``--help``, ``--cfg`` and
a refused override only need each strategy's option names, types and defaults.

The schemas are kept under the cache folder, keyed by every ``jacbench.strategies`` entry
point (name, target, package and version) and the size and time of the file that defines
it, so an upgrade, a new plugin or an edited strategy makes them be read afresh. Only the
config's shape comes from here: a job that runs validates its options with the strategies
themselves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
from dataclasses import field
from importlib.metadata import entry_points
from typing import Any, Optional

from jacbench.core.cache import cache_folder

GROUP = "jacbench.strategies"
# The option types strategies use, by the name their annotations give; another one (or a
# default that is not plain JSON) leaves the schemas unremembered.
TYPES: dict[str, Any] = {
    "bool": bool,
    "int": int,
    "float": float,
    "str": str,
    "int | None": Optional[int],  # noqa: UP045 (a runtime object, not an annotation)
    "float | None": Optional[float],  # noqa: UP045
    "str | None": Optional[str],  # noqa: UP045
    "Any": Any,
}


def _source_stamp(module: str) -> str:
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        if origin:
            from pathlib import Path

            stat = Path(origin).stat()
            return f"{stat.st_size}:{stat.st_mtime_ns}"
    except (ImportError, ValueError, OSError):
        pass
    return "?"


def _key() -> str:
    """What the remembered schemas are valid for (see the module's docstring)."""
    parts = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        package = f"{dist.name} {dist.version}" if dist is not None else "?"
        parts.append([ep.name, ep.value, package, _source_stamp(ep.module)])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _describe(options: type | None) -> list[list[Any]] | None:
    """[[name, type name, default], ...] of an options dataclass (None: not describable)."""
    if options is None:
        return []
    fields = []
    for f in dataclasses.fields(options):
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        if type_name not in TYPES or f.default is dataclasses.MISSING:
            return None
        try:
            json.dumps(f.default)
        except TypeError:
            return None
        fields.append([f.name, type_name, f.default])
    return fields


def _rebuild(name: str, fields: list[list[Any]]) -> type | None:
    if not fields:
        return None  # a strategy that could not load, or one without options
    return dataclasses.make_dataclass(
        f"{name}_remembered_options",
        [(n, TYPES[t], field(default=d)) for n, t, d in fields],
    )


def _remembered() -> dict[str, type | None] | None:
    folder = cache_folder("schemas")
    if folder is None:
        return None
    try:
        stored = json.loads((folder / f"{_key()}.json").read_text())
    except (OSError, ValueError):
        return None
    return {name: _rebuild(name, fields) for name, fields in stored.items()}


def _remember(options: dict[str, type | None]) -> None:
    folder = cache_folder("schemas")
    described = {name: _describe(o) for name, o in options.items()}
    if folder is None or any(d is None for d in described.values()):
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        from jacbench.record.atomic import write_atomic  # a reader never sees half a file

        write_atomic(folder / f"{_key()}.json", json.dumps(described))
    except OSError:
        pass  # remembering is an optimisation


def strategy_options() -> dict[str, type | None]:
    """Every strategy name -> its options dataclass (None for one that cannot load),
    remembered from an earlier process where still valid, else read from the strategies."""
    remembered = _remembered()
    if remembered is not None:
        return remembered
    from jacbench.core.registry import load_registry  # imports the strategies, and torch

    registry = load_registry()
    options = {
        name: (spec.options if (spec := registry.strategies.get(name)) is not None else None)
        for name in registry.names()
    }
    _remember(options)
    return options
