"""User text (names, overrides, error messages) inside rendered markdown (report.md, MLflow's
descriptions): markdown passes raw HTML through, so ``<`` is written as an entity and no tag
can open; ``>`` and ``&`` alone open nothing and stay readable."""

from __future__ import annotations


def markdown_safe(text: str) -> str:
    """``text`` with every ``<`` as ``&lt;``: shown as typed, never as HTML."""
    return str(text).replace("<", "&lt;")


def wrapped_prose(text: str, width: int = 100) -> str:
    """``text`` for a fenced block (which never wraps): prose lines over ``width`` wrapped, table
    rows (cells two or more spaces apart) kept whole, so their columns still align."""
    import re
    import textwrap

    out = []
    for line in text.splitlines():
        if len(line) <= width or re.search(r"\S {2,}\S", line):
            out.append(line)
            continue
        bullet = re.match(r"\s*(- )?", line)
        assert bullet is not None, "the pattern matches every line, if only with ''"
        lead = bullet.group(0)  # a bullet's text indents under it
        out.append(textwrap.fill(line, width, subsequent_indent=" " * len(lead)))
    return "\n".join(out)
