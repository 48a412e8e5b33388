"""torch.utils.benchmark's spread warning (kept as the ``timing_warning`` column): shown beside
a time as "(noisy)". It decides nothing; the order of two times is ``jacbench.timing.rule``'s."""

from __future__ import annotations


def is_noisy(timing_warning: object) -> bool:
    return isinstance(timing_warning, str) and bool(timing_warning)
