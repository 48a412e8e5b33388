"""User text (names, overrides, error messages) as messages print it: control characters and
escape sequences shown escaped, never sent raw to a terminal; one line, of bounded length."""

from __future__ import annotations

import logging

from jacbench.core import errors


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
    """``shown``, rich's markup escaped too (a name like ``[bold]`` is no style)."""
    from rich.markup import escape

    return escape(shown(text))


def one_line(what: object, limit: int | None = 300) -> str:
    """``what`` (an exception or any text) on one line, cut at ``limit``, controls escaped."""
    text = shown(errors.one_line(what, None))
    return text if limit is None else text[:limit]


class ShownLogFilter(logging.Filter):
    """Log records with their control characters shown escaped, line by line: Hydra's
    launchers log each job's overrides, names included (``shown_logs`` installs it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.isprintable():
            record.msg = shown_lines(message)
            record.args = None
        return True


# The launchers' loggers, which log each job's overrides (names included) as it starts. A
# logger's own filters outlive Hydra's logging set-up, which replaces the handlers.
LAUNCHER_LOGGERS = (
    "hydra._internal.core_plugins.basic_launcher",
    "hydra_plugins.hydra_joblib_launcher._core",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher",
)


def shown_logs() -> None:
    """``ShownLogFilter`` on the launchers' loggers and the root logger's handlers as they are
    now, once each: called as a sweep and each job starts (whatever ``hydra/job_logging``)."""
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in LAUNCHER_LOGGERS]
    targets += logging.getLogger().handlers
    for target in targets:
        if not any(isinstance(f, ShownLogFilter) for f in target.filters):
            target.addFilter(ShownLogFilter())
