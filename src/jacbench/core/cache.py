"""Where jacbench keeps what it remembers across processes (auto's decisions, strategies'
option schemas): ``$JACBENCH_CACHE_DIR`` (empty: remember nothing), else the XDG cache."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "JACBENCH_CACHE_DIR"


def cache_folder(part: str) -> Path | None:
    """``part``'s folder in the cache, or None when remembering is turned off."""
    configured = os.environ.get(ENV)
    if configured is not None:
        return Path(configured) / part if configured.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jacbench" / part
