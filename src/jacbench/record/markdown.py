"""User text (model names, overrides, error messages) inside markdown that a viewer renders
(report.md, MLflow's run descriptions): markdown passes raw HTML through, so a model named
``<img src=x onerror=...>`` would become a live element. With its ``<`` as an entity no tag
can open, and the text reads as typed (``>`` and ``&`` alone open nothing: left readable).
"""

from __future__ import annotations


def markdown_safe(text: str) -> str:
    """``text`` with every ``<`` as ``&lt;``: shown as typed, never as HTML."""
    return str(text).replace("<", "&lt;")


def wrapped_prose(text: str, width: int = 100) -> str:
    """``text`` for a fenced block: lines of prose longer than ``width`` wrapped (a fenced
    block never wraps, so MLflow's viewer showed an answer as one line scrolling sideways);
    table rows (cells two or more spaces apart) kept whole, so their columns still align."""
    import re
    import textwrap

    out = []
    for line in text.splitlines():
        if len(line) <= width or re.search(r"\S {2,}\S", line):
            out.append(line)
            continue
        lead = re.match(r"\s*(- )?", line).group(0)  # a bullet's text indents under it
        out.append(textwrap.fill(line, width, subsequent_indent=" " * len(lead)))
    return "\n".join(out)
