"""What names a job: its choices' labels and what it measures, as a stable hash (equal for the
same model, strategy, dtype, device, timing and seed wherever it records). A module of its
own, without torch: resuming and claiming need only this."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Parts of the config that define what is measured (and so the config_hash).
IDENTITY_KEYS = ("model", "strategy", "dtype", "device", "timing", "seed")


def plain(value: Any) -> Any:
    """A config value as plain resolved Python (containers to dicts and lists)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def config_hash(cfg: DictConfig) -> str:
    """Stable hash of what a job measures (not where it records)."""
    identity = {k: plain(cfg[k]) for k in IDENTITY_KEYS}  # only these keys are resolved
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def job_labels(cfg: DictConfig) -> dict[str, str]:
    """Names of the job's choices, readable even when the config does not validate."""
    model = cfg.get("model") or {}
    return {
        "model": str(model.get("name") or str(model.get("_target_", "?")).rsplit(".", 1)[-1]),
        "strategy": str((cfg.get("strategy") or {}).get("name", "?")),
        "dtype": str((cfg.get("dtype") or {}).get("name", "?")),
        "device": str((cfg.get("device") or {}).get("name", "?")),
    }


@dataclass(frozen=True)
class Identity:
    """What names a job even where its config does not validate (its row's columns)."""

    labels: dict[str, str]
    config_hash: str
    seed: int  # 0 where out of the int64 column: the row's error names it


def identify(cfg: DictConfig) -> Identity:
    """The job's identity, computed once: every reader of its config_hash asks here."""
    seed = int(cfg.get("seed", 0))
    return Identity(job_labels(cfg), config_hash(cfg), seed if 0 <= seed < 2**63 else 0)
