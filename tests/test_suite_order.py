"""The suite's own order: the files expected to take longest run first (tests/conftest.py)."""

from __future__ import annotations

import pytest

from helpers.order import expected_seconds


def test_the_files_expected_to_take_longest_are_handed_out_first(request: pytest.FixtureRequest):
    items = request.session.items
    order = list(dict.fromkeys(item.path for item in items))  # files, first appearance
    blocks = [
        path
        for i, path in enumerate(item.path for item in items)
        if i == 0 or items[i - 1].path != path
    ]
    assert blocks == order, "a file's tests are not kept together"
    expected = expected_seconds(items)
    assert [expected[path] for path in order] == sorted(expected.values(), reverse=True)
    # pytest-xdist hands out files in this order only without its reorder by test count
    assert request.config.getoption("loadscopereorder", default=False) is False
