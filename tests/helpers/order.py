"""The order the suite's files run in: the longest expected first (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

SLOW_S, OTHER_S = 10.0, 0.3  # what a slow test (marked: over ~4 s, most 5-40) and any other take


def expected_seconds(items: list[pytest.Item]) -> dict[Path, float]:
    """Each file's expected time, from its tests' marks."""
    expected: dict[Path, float] = {}
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        expected[item.path] = expected.get(item.path, 0.0) + (SLOW_S if slow else OTHER_S)
    return expected


def heaviest_files_first(items: list[pytest.Item]) -> None:
    """Order the files by their expected time, the longest first, each file's tests in their
    order. pytest-xdist's ``--dist loadfile`` hands out files in this order (with
    ``--no-loadscope-reorder``, in pyproject's addopts; its default hands out the files with
    the most tests first, which left the few long ones, the SLURM, browser and server files,
    to the end, where one worker ran on alone for ~30 s)."""
    expected = expected_seconds(items)
    items.sort(key=lambda item: -expected[item.path])
