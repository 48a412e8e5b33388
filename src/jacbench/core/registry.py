"""Strategies discovered through the ``jacbench.strategies`` entry-point group.

Built-ins and outside plugins register the same way. A plugin that fails to import is
reported with its package name and the others keep working; a name claimed by two packages
is reported and refused rather than silently resolved.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from jacbench.core.errors import ConfigError
from jacbench.core.strategy import StrategySpec

if TYPE_CHECKING:
    from jacbench.core.prepared import Prepared
    from jacbench.core.problem import Problem

GROUP = "jacbench.strategies"


def _package(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "<unknown package>"


@dataclass
class Registry:
    strategies: dict[str, StrategySpec] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)  # strategy name -> package
    broken: dict[str, str] = field(default_factory=dict)  # strategy name -> why
    conflicts: dict[str, list[str]] = field(default_factory=dict)  # name -> packages

    def names(self) -> list[str]:
        """Every name a user may pick, usable or not (so errors can explain themselves)."""
        return sorted({*self.strategies, *self.broken, *self.conflicts})

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
        if name in self.broken:
            raise ConfigError(self.broken[name])
        if name not in self.strategies:
            raise ConfigError(
                f"unknown strategy {name!r}; valid strategies: {', '.join(sorted(self.strategies))}"
            )
        return self.strategies[name]

    def prepare(self, name: str, problem: Problem, **options: Any) -> Prepared:
        """Look up a strategy, validate its options and prepare it for ``problem``."""
        spec = self.get(name)
        return spec.prepare(problem, spec.make_options(options))


def build_registry(eps: list[EntryPoint]) -> Registry:
    registry = Registry()
    by_name: dict[str, dict[str, EntryPoint]] = {}
    for ep in eps:  # the same distribution can be seen twice on sys.path: keep one
        by_name.setdefault(ep.name, {}).setdefault(_package(ep), ep)
    for name, claims in sorted(by_name.items()):
        if len(claims) > 1:
            registry.conflicts[name] = sorted(claims)
            continue
        package, ep = next(iter(claims.items()))
        try:
            spec = ep.load()
        except Exception as exc:
            registry.broken[name] = (
                f"strategy {name!r} from package {package!r} failed to load "
                f"({ep.value}): {type(exc).__name__}: {exc}"
            ).splitlines()[0]
            continue
        if not isinstance(spec, StrategySpec):
            registry.broken[name] = (
                f"strategy {name!r} from package {package!r} points to {ep.value}, which is "
                "not a strategy (decorate it with @jacbench.strategy)"
            )
            continue
        registry.strategies[name] = dataclasses.replace(spec, name=name)
        registry.packages[name] = package
    return registry


@functools.cache
def load_registry() -> Registry:
    return build_registry(list(entry_points(group=GROUP)))
