"""What ``auto`` decided, remembered across processes, so that the next ``prepare`` of the
same problem skips the calibration.

One small JSON file per key under ``$JACBENCH_CACHE_DIR/auto`` (``""`` turns it off). The key
covers what makes a decision valid: f's identity and code, its parameters' and the problem's
shapes, dtype and device, the torch and jacbench versions, the machine, the threads and auto's
options. An entry is data, never trusted: read through ``jacbench.core.cache``, parsed
against a schema (``parse``), used only where auto could have made it, and its first answer
checked against f's directional derivatives (``agrees``); one that fails is forgotten after
one ``CacheWarning``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jacbench.core import cache
from jacbench.core.cache import ENV, cache_folder  # noqa: F401  (ENV: the documented name)
from jacbench.core.machine import cpu_model
from jacbench.core.sources import digest_of, files_under
from jacbench.core.version import VERSION


def folder() -> Path | None:
    """Where decisions live, or None when remembering is turned off."""
    return cache_folder("auto")


def _code_of(module: nn.Module) -> str:
    """The code a module runs: a wrapped plain function's bytecode, constants and names (its
    source may not exist), else the source of the module's class."""
    fn = getattr(module, "fn", None)
    code = getattr(fn, "__code__", None)
    if fn is not None and code is not None:
        parts = (code.co_code.hex(), code.co_consts, code.co_names, code.co_varnames)
        return f"{fn.__qualname__}:{parts!r}"  # names too: sin and cos share their bytecode
    try:
        return inspect.getsource(type(module))
    except (OSError, TypeError):
        return repr(module)


LIBRARY = Path(__file__).resolve().parents[1]  # the jacbench package
DECIDING = ("api.py", "core", "strategies")  # the code that prepares, calibrates and decides


@functools.cache
def library_digest() -> str:
    """The library's code, in a decision's key: a decision made by other calibration code is
    not one this code would make (the version alone does not change between commits)."""
    return digest_of(files_under(LIBRARY, DECIDING))


def key(problem: Any, options: dict[str, Any]) -> str:
    """The key of ``problem``'s decision under auto's ``options``."""
    module = problem.module
    fields = {
        "module": f"{type(module).__module__}.{type(module).__qualname__}",
        "code": hashlib.sha256(_code_of(module).encode()).hexdigest(),
        "params": [(n, list(p.shape), str(p.dtype)) for n, p in module.named_parameters()],
        "problem": [problem.name, problem.wrt, problem.n_in, problem.n_out, problem.batch],
        "x": [list(problem.x.shape), str(problem.dtype), str(problem.device)],
        "torch": torch.__version__,
        "jacbench": VERSION,
        "library": library_digest(),
        "machine": [platform.machine(), cpu_model(), platform.node()],
        "threads": torch.get_num_threads(),
        "options": options,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Decision:
    """A strategy and its options; for tiered auto also what building each tier cost."""

    strategy: str
    options: dict[str, Any]
    build_s: dict[str, float] = field(default_factory=dict)


MAX_NAME = 64  # characters of a strategy name, option name or option string
MAX_ITEMS = 16  # options, or build costs, in one decision
MAX_BUILD_S = 3600.0  # a tier that took longer to build is not worth remembering
SCALARS = (bool, int, float, str, type(None))


def _name(value: Any, what: str) -> str:
    if not (isinstance(value, str) and 0 < len(value) <= MAX_NAME):
        raise ValueError(f"{what} is not a name of at most {MAX_NAME} characters")
    return value


def _table(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) > MAX_ITEMS:
        raise ValueError(f"{what} is not a table of at most {MAX_ITEMS} entries")
    return {_name(k, f"a key of {what}"): v for k, v in value.items()}


def _plain(value: Any, what: str) -> Any:
    """An option's value: a bool, a finite number, a short string or None."""
    if not isinstance(value, SCALARS):
        raise ValueError(f"{what} is not a plain value")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{what} is not finite")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**31:
        raise ValueError(f"{what} is out of bounds")
    if isinstance(value, str):
        _name(value, what)
    return value


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is not a number")
    if not 0.0 <= float(value) <= MAX_BUILD_S:  # also NaN
        raise ValueError(f"{what} is not between 0 and {MAX_BUILD_S:g} s")
    return float(value)


def parse(data: Any) -> Decision:
    """A decision from what an entry holds, by schema and bounds; ``ValueError`` naming the
    first thing that is not what ``remember`` writes."""
    table = _table(data, "the entry")
    unknown = set(table) - {"strategy", "options", "build_s"}
    if unknown or "strategy" not in table or "options" not in table:
        raise ValueError("the entry does not hold exactly a strategy, options and build costs")
    options = _table(table["options"], "options")
    build_s = _table(table.get("build_s", {}), "build_s")
    return Decision(
        _name(table["strategy"], "strategy"),
        {k: _plain(v, f"option {k!r}") for k, v in options.items()},
        {k: _seconds(v, f"build cost {k!r}") for k, v in build_s.items()},
    )


def _entry(key_: str) -> tuple[Path, Path] | None:
    where = folder()
    return None if where is None else (where, where / f"{key_}.json")


def recall(key_: str) -> Decision | None:
    """The decision remembered under ``key_``; None where there is none, or the entry is not
    one (then it is forgotten, and one warning names the cache)."""
    entry = _entry(key_)
    if entry is None:
        return None
    _, path = entry
    try:
        data = cache.read_json(path)
    except cache.BadEntry as exc:
        distrust(key_, f"the entry {path.name} {exc}")
        return None
    try:
        return None if data is None else parse(data)
    except ValueError as exc:
        distrust(key_, f"the entry {path.name} is not a decision ({exc})")
        return None


def distrust(key_: str, why: str) -> None:
    """Forget the entry under ``key_``, saying once why it was not used."""
    entry = _entry(key_)
    if entry is None:
        return
    where, _ = entry
    cache.warn_once(where, f"auto did not use a remembered decision: {why}; decided again")
    forget(key_)


def remember(key_: str, decision: Decision) -> None:
    """Store a decision; a cache that cannot be written only costs the next calibration
    (one warning names it)."""
    entry = _entry(key_)
    if entry is None:
        return
    where, path = entry
    try:
        cache.write_json(path, asdict(decision))
    except (OSError, ValueError) as exc:
        cache.warn_once(where, f"auto's decisions cannot be remembered there ({exc})")


def forget(key_: str) -> None:
    entry = _entry(key_)
    if entry is None:
        return
    where, path = entry
    try:
        cache.remove(path)
    except OSError as exc:
        cache.warn_once(where, f"a remembered decision cannot be forgotten there ({exc})")


RANDOM_POINTS = 2  # random points, besides the prepared one, a remembered choice is checked at


def agrees(problem: Any, jacobian_at: Callable[[torch.Tensor], Any]) -> bool:
    """A check of a remembered choice's answers: at the problem's first point and at
    ``RANDOM_POINTS`` random points, its products with random directions against f's own
    directional derivatives, to within rounding (``jacbench.core.directional``).
    ``jacobian_at(point)``: the Jacobian of one point."""
    from jacbench.core.directional import mismatch

    x = problem.points[0]
    return not mismatch(problem.f, jacobian_at, x, n_random=RANDOM_POINTS)
