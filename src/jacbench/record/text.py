"""Text of an error as a message prints it: one line, of bounded length."""

from __future__ import annotations


def one_line(what: object, limit: int | None = 300) -> str:
    """``what`` (an exception or any text) on one line, cut at ``limit`` characters."""
    text = " ".join(str(what).split())
    return text if limit is None else text[:limit]
