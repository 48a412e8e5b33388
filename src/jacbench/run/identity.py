"""What a job measures, as a stable hash: equal for the same model, strategy, dtype, device,
timing and seed wherever it records (a module of its own, without torch: resuming and
claiming need only this)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Parts of the config that define what is measured (and so the config_hash).
IDENTITY_KEYS = ("model", "strategy", "dtype", "device", "timing", "seed")


def _plain(value: Any) -> Any:
    """A config value as plain resolved Python (containers to dicts and lists)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def config_hash(cfg: DictConfig) -> str:
    """Stable hash of what a job measures (not where it records)."""
    identity = {k: _plain(cfg[k]) for k in IDENTITY_KEYS}  # only these keys are resolved
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
