"""Exceptions raised inside a job become `skipped` (cannot apply) or `failed` (broken)."""

from __future__ import annotations

import pytest
import torch

from jacbench.core.errors import ConfigError, StrategySkip
from jacbench.run.runner import classify

HALF = torch.float16


def raised(fn) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


@pytest.mark.parametrize(
    "fn",
    [
        lambda: torch.cdist(torch.ones(2, 2, dtype=HALF), torch.ones(2, 2, dtype=HALF)),
        lambda: torch.linalg.inv(torch.eye(2, dtype=HALF)),
        lambda: torch.relu(torch.ones(2, dtype=torch.complex64)),
    ],
    ids=["cdist-half", "inv-half", "relu-complex"],
)
def test_unsupported_dtype_errors_from_torch_are_skips(fn):
    status, message = classify(raised(fn))
    assert status == "skipped" and message


def test_strategy_skip_keeps_its_own_words():
    assert classify(StrategySkip("no formula here")) == ("skipped", "no formula here")


def test_real_errors_fail_with_a_one_line_message():
    status, message = classify(raised(lambda: torch.ones(2) @ torch.ones(3)))
    assert status == "failed" and message.startswith("RuntimeError: ") and "\n" not in message
    assert classify(ConfigError("bad eps\nmore")) == ("failed", "bad eps")
