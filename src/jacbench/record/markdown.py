"""User text (model names, overrides, error messages) inside markdown that a viewer renders
(report.md, MLflow's run descriptions): markdown passes raw HTML through, so a model named
``<img src=x onerror=...>`` would become a live element. With its ``<`` as an entity no tag
can open, and the text reads as typed (``>`` and ``&`` alone open nothing: left readable).
"""

from __future__ import annotations


def markdown_safe(text: str) -> str:
    """``text`` with every ``<`` as ``&lt;``: shown as typed, never as HTML."""
    return str(text).replace("<", "&lt;")
