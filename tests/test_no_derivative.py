"""An operator torch has no derivative of (``unique``) under a sparse or AD strategy is one
line naming it and what still works, not torch's raw "derivative ... not implemented"
(issue 60)."""

from __future__ import annotations

import pytest
import torch

import jacbench
from jacbench.record.result import Status
from jacbench.run.runner import classify


def f(x: torch.Tensor) -> torch.Tensor:
    return x * torch.unique(x).sum()


@pytest.mark.parametrize("strategy", ["sparse_jacrev", "jacrev"])
def test_unique_under_an_ad_strategy_is_one_line_naming_it(strategy):
    """Whichever layer says it (the library's UnsupportedFunction, or the runner's reading of
    torch's own error): the job's line names unique and finite differences."""
    x = torch.randn(5, dtype=torch.float64)
    with pytest.raises(Exception) as caught:
        jacbench.prepare(f, x, strategy=strategy)(x)
    _, message = classify(caught.value)
    assert message.startswith("torch has no derivative of "), message
    assert "_unique2" in message and "sparse_fd" in message and "\n" not in message


def test_torchs_own_no_derivative_error_is_translated():
    """A strategy (a plugin's) that lets torch's error through: one line, not torch's, as the
    library says it (``known_cause``)."""
    raw = NotImplementedError("the derivative for '_unique2' is not implemented.")
    status, message = classify(raw)
    assert status == Status.SKIPPED
    assert message.startswith("torch has no derivative of _unique2, which f uses")
    assert "use finite differences (fd_central, sparse_fd)" in message


def test_sparse_fd_gives_the_dense_fallback_the_docs_promise():
    x = torch.randn(5, dtype=torch.float64)
    prep = jacbench.prepare(f, x, strategy="sparse_fd")
    assert prep.info.pattern_source.startswith("dense")
    assert torch.as_tensor(
        prep(x).to_dense() if hasattr(prep(x), "to_dense") else prep(x)
    ).shape == (5, 5)
