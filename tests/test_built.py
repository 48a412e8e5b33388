"""Issue 59: a row's ``built`` describes what was timed (for a tiered ``auto``, the tier it
settled on), with the tiers before it as history, not the first tier's form."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from helpers.cli import LAUNCH_FAST, compose_job
from jacbench.core.prepared import Prepared, PrepInfo


def _form(strategy: str, built: str) -> Prepared:
    return Prepared(
        fn=lambda x: torch.eye(2),
        strategy=strategy,
        shape=(2,),
        dtype=torch.float32,
        device=torch.device("cpu"),
        declared_info=PrepInfo(built=built),
    )


@dataclass
class TwoTiers:
    """Tiers that start eager and move to compiled code at ``settle()``, as auto's do."""

    current: Prepared
    later: Prepared
    tier: str = "eager"
    chosen_strategy: str = "double_backward"
    refused: object | None = None
    history: list[str] = field(default_factory=lambda: ["eager (double_backward)"])

    def settle(self) -> None:
        self.current, self.tier, self.chosen_strategy = self.later, "compiled", "jacfwd_compiled"
        self.history.append("compiled (jacfwd_compiled)")


def test_built_names_the_settled_tier_with_the_earlier_ones_as_history():
    tiers = TwoTiers(
        _form("double_backward", "double_backward copies=True"),
        _form("jacfwd_compiled", "torch.compile(jacfwd) mode=default"),
    )
    first = _form("auto", "double_backward copies=True")
    prep = Prepared(
        fn=first.fn,
        strategy="auto",
        shape=(2,),
        dtype=torch.float32,
        device=torch.device("cpu"),
        declared_info=PrepInfo(built="double_backward copies=True"),
        tiers=tiers,
    )
    prep.settled()
    form = prep.info  # what a job's row records as the timed form
    assert (form.tier, form.chosen_strategy) == ("compiled", "jacfwd_compiled")
    assert form.built.startswith("torch.compile(jacfwd) mode=default")
    assert "eager (double_backward)" in form.built and "copies=True" not in form.built


def test_an_untiered_strategy_keeps_what_it_declared():
    form = _form("jacrev", "jacrev chunk_size=None").info
    assert form.built == "jacrev chunk_size=None" and form.tier == ""


@pytest.mark.slow
@pytest.mark.compiles
def test_a_tiered_auto_jobs_row_describes_the_tier_it_timed():
    from jacbench.core.registry import load_registry
    from jacbench.run.runner import execute

    cfg = compose_job("strategy=auto", "model=seed004_small", *LAUNCH_FAST)
    result = execute(cfg, load_registry())
    assert result.ok, result.error_message
    tier_words = {"compiled": "compile", "folded": "fold"}
    assert result.tier, result
    if result.tier in tier_words:  # moved past its first tier: built says so, and how
        assert tier_words[result.tier] in result.built.lower(), result.built
        assert "after tiers" in result.built, result.built
