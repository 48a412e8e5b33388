"""A side-by-side job of a sweep's second round: a problem's contested pair, timed again
interleaved in one job. The sweeper chooses the pair (``jacbench.run.sweep.retiming``) and
keeps it in the sweep's state; the job runs it (``jacbench.run.side_by_side``). No torch
here: the sweeper and claims need only this."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from omegaconf import DictConfig, OmegaConf

from jacbench.core.enums import Named
from jacbench.run.identity import IDENTITY_KEYS, identify, plain


class SecondRound(Named):
    """Which pairs a sweep times again side by side once its first round is recorded
    (``side_by_side``). ``best_two``: a preset's best and runner-up of each problem;
    ``auto_losses``: ``auto`` and the best exact strategy wherever auto's time is over the
    map's bound on the best's (a loss across two jobs can be the jobs', not the code's);
    ``none``: no second round."""

    BEST_TWO = "best_two"
    AUTO_LOSSES = "auto_losses"
    NONE = "none"


# what ``side_by_side`` was before it named its round: true and false
_EARLIER = {"true": SecondRound.BEST_TWO, "false": SecondRound.NONE}


def second_round(value: object) -> SecondRound:
    """``side_by_side`` as given (a name, or the earlier true / false), else a ValueError."""
    text = str(value).strip().lower()
    if text in _EARLIER:
        return _EARLIER[text]
    try:
        return SecondRound(text)
    except ValueError:
        choices = ", ".join(r.value for r in SecondRound)
        raise ValueError(
            f"side_by_side={value}: valid: {choices} (true and false: best_two and none)"
        ) from None


# What a contestant's job needs of its config besides its identity.
CONTESTANT_KEYS = (*IDENTITY_KEYS, "jacobian_max_entries")


def contestant(cfg: DictConfig) -> dict[str, Any]:
    """A first-round job's config as the pair keeps it: what its measurement needs, resolved."""
    return {key: plain(cfg[key]) for key in CONTESTANT_KEYS}


# ``${`` and the backslashes right before it: what OmegaConf reads as an interpolation
_INTERPOLATION = re.compile(r"(\\*)\$\{")


def literal(value: Any) -> Any:
    """Resolved config values that ``OmegaConf.create`` takes as they are: each ``${``
    escaped (the backslashes before it doubled), so no text is resolved a second time."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, dict):
        return {key: literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [literal(item) for item in value]
    return value


@dataclass(frozen=True)
class Pair:
    """Two first-round jobs of one problem, re-timed side by side."""

    problem: str  # the problem's title, as the report names it
    labels: tuple[str, str]  # best and runner-up, as the recommendation names them
    jobs: tuple[int, int]  # their positions in the sweep
    configs: tuple[dict[str, Any], dict[str, Any]]  # ``contestant`` of each
    after: str  # ISO time of the newer of their first-round rows: a re-timing is newer

    def contestant_configs(self) -> list[DictConfig]:
        """Each contestant's config, its resolved values kept as they are (``literal``)."""
        return [OmegaConf.create(literal(config)) for config in self.configs]

    def hashes(self) -> list[str]:
        return [identify(cfg).config_hash for cfg in self.contestant_configs()]

    @property
    def key(self) -> str:
        """What the job measures, for its claim: the two configs, after their first round."""
        blob = json.dumps(["side_by_side", sorted(self.hashes()), self.after])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def measured_after(self) -> datetime:
        return datetime.fromisoformat(self.after)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Pair:
        data = json.loads(text)
        return cls(
            data["problem"],
            tuple(data["labels"]),
            tuple(data["jobs"]),
            tuple(data["configs"]),
            data["after"],
        )


def claim_key(cfg: DictConfig, pair: Pair | None) -> str:
    """What a job claims (``jacbench.run.claims``): its config_hash, or its pair's key."""
    return pair.key if pair is not None else identify(cfg).config_hash
