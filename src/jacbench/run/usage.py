"""Bad input that reaches the top of ``python -m jacbench``, as one readable line that names
the input and the valid choices, instead of Hydra's traceback; ``HYDRA_FULL_ERROR=1`` still
shows the full traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Iterator

import yaml
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from jacbench.core.errors import ConfigError
from jacbench.record.text import one_line

FULL_ERROR = "HYDRA_FULL_ERROR"


class LaunchRefused(BaseException):
    """A bad launch input found inside a Hydra callback. Hydra turns a callback's Exception
    into a warning and carries on, so the refusal is a BaseException; its ``__cause__`` is
    the ConfigError to show."""


def _omegaconf(exc: OmegaConfBaseException) -> str:
    """``strategy.epss=1``: the key, and the valid keys of the typed node it is not in;
    ``timing.threads=abc``: the key and why its value does not fit."""
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None) or "?"
    if not isinstance(exc, (ConfigAttributeError, ConfigKeyError)):
        return f"{key}: {str(getattr(exc, 'msg', '') or exc).splitlines()[0]}"
    node = getattr(exc, "object_type", None)
    if node is not None and dataclasses.is_dataclass(node):
        valid = ", ".join(f.name for f in dataclasses.fields(node) if f.name != "name")
        where = key.rpartition(".")[0] or "the config's top level"
        return f"unknown key {key!r}; valid keys of {where}: {valid or 'none'}"
    return f"unknown key {key!r}; add a new key with +{key}=..."


def _yaml(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
    problem = getattr(exc, "problem", None) or one_line(exc, None)
    return f"a config file is not valid YAML ({where}): {problem}"


def input_error(exc: BaseException) -> str:
    """What went wrong, in one line that names the input."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 10:
        chain.append(chain[-1].__cause__)
    for cause in chain:
        if isinstance(cause, ConfigError):
            return one_line(cause, None)
        if isinstance(cause, OmegaConfBaseException):
            return _omegaconf(cause)
        if isinstance(cause, yaml.YAMLError):
            return _yaml(cause)
    text = one_line(str(exc).split("Config search path")[0], None)
    if text.startswith("LexerNoViableAltException:"):  # Hydra's override parser, via ANTLR
        override = text.removeprefix("LexerNoViableAltException:").split(" ^ ")[0].strip()
        return (
            f"cannot read the override {override!r}: quote a value holding spaces, line breaks "
            "or characters other than letters, digits and _-./, e.g. 'model.name=\"my model\"' "
            "(https://hydra.cc/docs/advanced/override_grammar/basic)"
        )
    if type(exc).__module__.startswith(("hydra", "omegaconf")):
        return text  # Hydra's own messages already name the input (and list the choices)
    return f"{type(exc).__name__}: {text} (set {FULL_ERROR}=1 for the traceback)"


@contextlib.contextmanager
def reported(kept: Callable[[], str]) -> Iterator[None]:
    """Run the body with Hydra's errors raised to here, then print each as one line on
    stderr and exit 1 (130 after Ctrl-C, 143 after SIGTERM, 129 after SIGHUP, with
    ``kept()`` saying what was kept)."""
    full = os.environ.get(FULL_ERROR)
    os.environ[FULL_ERROR] = "1"  # Hydra then raises instead of printing a traceback
    try:
        yield
    except LaunchRefused as exc:
        print(f"jacbench: {input_error(exc.__cause__ or exc)}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(f"jacbench: interrupted ({what}); {kept()}", file=sys.stderr)
        raise SystemExit(128 + signum) from None
    except Exception as exc:
        if full == "1":
            raise
        print(f"jacbench: {input_error(exc)}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        if full is None:
            os.environ.pop(FULL_ERROR, None)
        else:
            os.environ[FULL_ERROR] = full
