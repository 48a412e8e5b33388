"""User text (names, overrides, error messages) as messages print it: control characters and
terminal escape sequences shown escaped, never sent raw to a terminal; one line, of bounded
length."""

from __future__ import annotations

import logging


def shown(text: object) -> str:
    """``text`` with every character a terminal would act on (C0/C1 controls, ESC, DEL,
    invisible format characters such as bidirectional overrides) written as its escape
    (``\\x1b``, ``\\u202e``); printable text, spaces included, as it is."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in value)


def shown_lines(text: str) -> str:
    """``shown`` line by line: the line breaks of a multi-line text kept."""
    return "\n".join(shown(line) for line in text.split("\n"))


def terminal_text(text: object) -> str:
    """``shown``, with rich's markup escaped too: for text a rich console prints, where a name
    like ``[bold]`` would otherwise be read as a style."""
    from rich.markup import escape

    return escape(shown(text))


def one_line(what: object, limit: int | None = 300) -> str:
    """``what`` (an exception or any text) on one line, cut at ``limit`` characters, with
    control characters shown escaped."""
    text = shown(" ".join(str(what).split()))
    return text if limit is None else text[:limit]


class ShownLogFilter(logging.Filter):
    """Log records with their control characters shown escaped, line by line: Hydra's
    launchers log each job's overrides, names included (installed on the console and file
    handlers by ``hydra.hydra_logging`` and ``hydra.job_logging`` in conf/config.yaml)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.isprintable():
            record.msg = shown_lines(message)
            record.args = None
        return True
