"""jacbench's version, as installed (the package metadata: pyproject.toml's one number), for
what must change when jacbench does (remembered decisions, reused rows). A leaf module, so
that any part of jacbench reads it without importing the package above it."""

from __future__ import annotations

from importlib import metadata

try:
    VERSION = metadata.version("jacbench")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
