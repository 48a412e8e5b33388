"""What ``auto`` decided, remembered across processes: the next ``prepare`` of the same
problem skips the calibration (seconds of preparing and timing every candidate).

A decision (strategy and options) is stored as one small JSON file per key under
``$JACBENCH_CACHE_DIR/auto`` (default ``~/.cache/jacbench/auto``; ``JACBENCH_CACHE_DIR=""``
turns remembering off). The key covers what makes a decision valid: the function's identity
and code (the module's class and source, or the plain function's bytecode, constants and
names), its parameters' shapes and dtypes, the problem's shapes, dtype and device, the torch
and jacbench versions, the machine and the thread count, and auto's own options. Any change
gives another key, so a stale entry is never read. Files are written whole and renamed into
place (atomic on POSIX), so concurrent processes need no lock (hence no filelock). A
remembered choice is still checked on its first call (``agrees``) before it is trusted.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import jacbench
from jacbench.core.cache import ENV, cache_folder  # noqa: F401  (ENV: the documented name)


def folder() -> Path | None:
    """Where decisions live, or None when remembering is turned off."""
    return cache_folder("auto")


def _code_of(module: nn.Module) -> str:
    """The code a module runs: a wrapped plain function's bytecode, constants and names (its
    source may not exist), else the source of the module's class."""
    fn = getattr(module, "fn", None)
    code = getattr(fn, "__code__", None)
    if code is not None:
        parts = (code.co_code.hex(), code.co_consts, code.co_names, code.co_varnames)
        return f"{fn.__qualname__}:{parts!r}"  # names too: sin and cos share their bytecode
    try:
        return inspect.getsource(type(module))
    except (OSError, TypeError):
        return repr(module)


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
        "jacbench": jacbench.__version__,
        "machine": [platform.machine(), platform.processor(), platform.node()],
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


def recall(key_: str) -> Decision | None:
    """The decision remembered under ``key_``, or None."""
    where = folder()
    if where is None:
        return None
    try:
        data = json.loads((where / f"{key_}.json").read_text())
        build_s = {str(k): float(v) for k, v in dict(data.get("build_s", {})).items()}
        return Decision(str(data["strategy"]), dict(data["options"]), build_s)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # none yet, or unreadable: decide again


def remember(key_: str, decision: Decision) -> None:
    """Store a decision; a cache that cannot be written only costs the next calibration."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".{key_}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(decision)))
        os.replace(tmp, where / f"{key_}.json")
    except OSError:
        pass


def forget(key_: str) -> None:
    where = folder()
    if where is not None:
        (where / f"{key_}.json").unlink(missing_ok=True)


def agrees(problem: Any, jacobian: Any) -> bool:
    """A cheap check of a remembered choice's first answer: its product with a random
    direction against a forward-mode derivative of the first point, to 1e3 rounding units."""
    x = problem.x.reshape(-1, problem.n_in)[0]
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(0)).to(x)
    with torch.enable_grad():
        expected = torch.func.jvp(problem.f, (x,), (v,))[1].reshape(-1)
    if not isinstance(jacobian, torch.Tensor):  # scipy CSR
        got = torch.from_numpy(jacobian @ v.cpu().numpy()).to(expected)
    elif jacobian.layout != torch.strided:  # torch CSR
        got = (jacobian @ v.unsqueeze(1)).reshape(-1)
    else:
        got = jacobian.reshape(-1, problem.n_out, problem.n_in)[0] @ v
    scale = float(expected.abs().max()) or 1.0
    eps = torch.finfo(x.dtype).eps
    error = float((got - expected).abs().max())
    return bool(torch.isfinite(got).all()) and error <= 1e3 * eps * scale
