"""What made a row besides its config: jacbench's version, the measuring code, torch, the
device and the machine (``Provenance``). A rerun reuses a row only while all of it is
unchanged (``stale_reason`` says what changed; ``jacbench.run.resume``).

The measuring code is known by a digest of its source files: jacbench's ``MEASURING`` code,
plus the strategy's and the model's modules where they live outside jacbench (a plugin, a
user's model).
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jacbench.core.machine import cpu_model
from jacbench.core.sources import digest_of, files_under
from jacbench.core.version import VERSION

JACBENCH = Path(__file__).resolve().parents[1]  # the jacbench package
# The code a measurement runs: a change in any of it may change a time or an answer.
MEASURING = (
    "core",
    "strategies",
    "benchmark",
    "timing",
    "models",
    "run/runner.py",
    "run/stages.py",
)


def machine_columns() -> dict[str, str]:
    """What a row records of where it ran even when its job never got to run."""
    import torch

    return {
        "torch_version": torch.__version__,
        "jacbench_version": VERSION,
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
    }


def device_name(device: Any) -> str:
    """The device's model (a GPU's name), "cpu" on the CPU (``device``: a torch.device)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return "cpu"


def module_file(name: str) -> Path | None:
    """The source file of module ``name`` (imported or not), None where it has none."""
    module = sys.modules.get(name)
    where = getattr(module, "__file__", None)
    if where is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        where = spec.origin if spec is not None and spec.has_location else None
    return Path(where).resolve() if where else None


def _target_module(target: str) -> str | None:
    """The module part of a Hydra ``_target_`` (``pkg.mod.Class`` -> ``pkg.mod``)."""
    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        if module_file(name) is not None:
            return name
    return None


def measuring_files(strategy_module: str, model_target: str = "") -> list[Path]:
    """jacbench's measuring code, plus the strategy's and the model's modules outside it."""
    files = files_under(JACBENCH, MEASURING)
    for name in filter(None, [strategy_module, _target_module(model_target)]):
        path = module_file(name)
        if path is not None and JACBENCH not in path.parents and path not in files:
            files.append(path)
    return files


@dataclass(frozen=True)
class Provenance:
    """What made a row besides its config (``Result`` columns of the same names)."""

    jacbench_version: str
    code_digest: str
    torch_version: str
    device_name: str
    hostname: str
    cpu_model: str

    def columns(self) -> dict[str, str]:
        return asdict(self)


# How each part is named when it changed
PARTS = {
    "jacbench_version": "jacbench",
    "code_digest": "the measuring code",
    "torch_version": "torch",
    "device_name": "the device",
    "hostname": "the host",
    "cpu_model": "the CPU",
}


def provenance(strategy_module: str, model: Mapping[str, Any], device_name: str) -> Provenance:
    """This process's provenance for a job of ``strategy_module`` on ``model`` (its config)."""
    target = str(model.get("_target_") or "")
    digest = digest_of(measuring_files(strategy_module, target))
    return Provenance(code_digest=digest, device_name=device_name, **machine_columns())


def stale_reason(row: Mapping[str, Any], here: Provenance) -> str:
    """What changed since ``row`` was measured ("" when nothing did): e.g. ``torch 2.12.0 ->
    2.13.0, the measuring code``. A row of an earlier jacbench lacks these columns: stale."""
    recorded = {name: str(row.get(name) or "") for name in PARTS}
    if not any(recorded[name] for name in ("jacbench_version", "code_digest", "hostname")):
        return "measured by a jacbench that did not record its code, version and machine"
    changed = []
    for name, now in here.columns().items():
        then = recorded[name]
        if then == now:
            continue
        if not then:
            changed.append(f"{PARTS[name]} (not recorded)")
        elif name == "code_digest":
            changed.append(PARTS[name])
        else:
            changed.append(f"{PARTS[name]} {then} -> {now}")
    return ", ".join(changed)
