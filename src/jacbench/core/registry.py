"""Strategies discovered through the ``jacbench.strategies`` entry-point group.

Built-ins and outside plugins register the same way. A plugin that fails to import is
reported with its package name and the others keep working; a name claimed by two packages
is reported and refused rather than silently resolved.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from jacbench.core.errors import ConfigError
from jacbench.core.strategy import StrategySpec

if TYPE_CHECKING:
    from jacbench.core.prepared import Prepared
    from jacbench.core.problem import Problem

GROUP = "jacbench.strategies"


def _packages(eps: list[EntryPoint]) -> list[str]:
    """Each entry point's package name, read once a distribution (a distribution's name
    parses its metadata file at each read)."""
    names: dict[int, str] = {}
    packages = []
    for ep in eps:
        dist = getattr(ep, "dist", None)
        if dist is None:
            packages.append("<unknown package>")
            continue
        if id(dist) not in names:
            names[id(dist)] = dist.name
        packages.append(names[id(dist)])
    return packages


class Registry:
    """The strategies by name. An entry point is loaded (its module imported) at its name's
    first use: ``prepare(f, x)`` imports auto's module and what it needs, not every
    strategy's. ``strategies`` and ``broken`` load them all."""

    def __init__(
        self,
        strategies: dict[str, StrategySpec] | None = None,
        broken: dict[str, str] | None = None,
        unloaded: dict[str, tuple[str, EntryPoint]] | None = None,
        conflicts: dict[str, list[str]] | None = None,
    ) -> None:
        self.loaded = dict(strategies or {})
        self.failed = dict(broken or {})  # strategy name -> why
        self.unloaded = dict(unloaded or {})  # strategy name -> (package, entry point)
        self.conflicts = dict(conflicts or {})  # name -> packages
        self.packages: dict[str, str] = {}  # strategy name -> package, once loaded
        # one load at a time: a name taken out of ``unloaded`` is in neither dict until its
        # module is imported, and another thread asking for it then was told it is unknown
        self._loading = threading.RLock()

    @property
    def strategies(self) -> dict[str, StrategySpec]:
        """Every usable strategy (each loaded now)."""
        self._load_all()
        return self.loaded

    @property
    def broken(self) -> dict[str, str]:
        """Each strategy that failed to load, and why (each loaded now)."""
        self._load_all()
        return self.failed

    def _load_all(self) -> None:
        for name in list(self.unloaded):
            self._load(name)

    def names(self) -> list[str]:
        """Every name a user may pick, usable or not (so errors can explain themselves)."""
        return sorted({*self.unloaded, *self.loaded, *self.failed, *self.conflicts})

    def problems(self) -> list[str]:
        return [*self.broken.values(), *(self._conflict_message(n) for n in self.conflicts)]

    def _conflict_message(self, name: str) -> str:
        packages = " and ".join(sorted(self.conflicts[name]))
        return (
            f"strategy {name!r} is registered by several packages ({packages}); "
            "uninstall one of them to use it"
        )

    def get(self, name: str) -> StrategySpec:
        if name in self.conflicts:
            raise ConfigError(self._conflict_message(name))
        self._load(name)
        if name in self.failed:
            raise ConfigError(self.failed[name])
        if name not in self.loaded:
            raise ConfigError(
                f"unknown strategy {name!r}; valid strategies: {', '.join(sorted(self.strategies))}"
            )
        return self.loaded[name]

    def prepare(self, name: str, problem: Problem, **options: Any) -> Prepared:
        """Look up a strategy, validate its options and prepare it for ``problem``."""
        spec = self.get(name)
        return spec.prepare(problem, spec.make_options(options))

    def _load(self, name: str) -> None:
        """Import ``name``'s entry point, if not yet: a strategy, or why it failed."""
        with self._loading:
            if name in self.unloaded:
                self._load_now(name, *self.unloaded[name])
                del self.unloaded[name]

    def _load_now(self, name: str, package: str, ep: EntryPoint) -> None:
        try:
            spec = ep.load()
        except Exception as exc:
            self.failed[name] = (
                f"strategy {name!r} from package {package!r} failed to load "
                f"({ep.value}): {type(exc).__name__}: {exc}"
            ).splitlines()[0]
            return
        if not isinstance(spec, StrategySpec):
            self.failed[name] = (
                f"strategy {name!r} from package {package!r} points to {ep.value}, which is "
                "not a strategy (decorate it with @jacbench.strategy)"
            )
            return
        self.loaded[name] = dataclasses.replace(spec, name=name)
        self.packages[name] = package


def build_registry(eps: list[EntryPoint]) -> Registry:
    by_name: dict[str, dict[str, EntryPoint]] = {}
    # a distribution seen twice on sys.path: keep one
    for ep, package in zip(eps, _packages(eps), strict=True):
        by_name.setdefault(ep.name, {}).setdefault(package, ep)
    claimed = sorted(by_name.items())
    return Registry(
        unloaded={name: next(iter(c.items())) for name, c in claimed if len(c) == 1},
        conflicts={name: sorted(c) for name, c in claimed if len(c) > 1},
    )


@functools.cache
def load_registry() -> Registry:
    return build_registry(list(entry_points(group=GROUP)))
