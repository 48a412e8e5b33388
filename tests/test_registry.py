"""The entry-point registry: built-ins, a broken plugin and a name claimed twice.

Outside packages are real installed-distribution metadata (a ``.dist-info`` folder with an
``entry_points.txt``) on a temporary path, discovered by importlib.metadata as pip's are.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import distribution, distributions, entry_points
from pathlib import Path

import pytest

import jacbench.strategies
from helpers.cli import QUICK, clean_env
from jacbench.core.errors import ConfigError
from jacbench.core.registry import GROUP, build_registry, load_registry
from jacbench.core.strategy import StrategySpec

# The built-ins are what jacbench's own distribution declares, not a hand-kept list.
BUILT_INS = sorted(ep.name for ep in distribution("jacbench").entry_points if ep.group == GROUP)


def strategies_defined_in_jacbench() -> set[str]:
    """Every ``@strategy`` object in the modules of ``jacbench.strategies``."""
    found = set()
    for info in pkgutil.iter_modules(jacbench.strategies.__path__):
        module = importlib.import_module(f"jacbench.strategies.{info.name}")
        found |= {v.name for v in vars(module).values() if isinstance(v, StrategySpec)}
    return found


def fake_distribution(root: Path, name: str, entry_lines: list[str]) -> None:
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n" + "\n".join(entry_lines) + "\n")


@pytest.fixture
def outside_packages(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    fake_distribution(site, "broken_plugin", ["broken = no_such_module_xyz:strategy"])
    fake_distribution(site, "not_a_strategy", ["notspec = os.path:join"])
    fake_distribution(site, "rival_plugin", ["jacrev = rival_module:jacrev"])
    return site


def registry_with(site: Path):
    own = list(entry_points(group=GROUP))
    extra = [
        ep for d in distributions(path=[str(site)]) for ep in d.entry_points if ep.group == GROUP
    ]
    return build_registry(own + extra)


def test_built_ins_register_through_jacbench_entry_points():
    # every strategy jacbench defines has its entry-point line (and nothing else does)
    assert set(BUILT_INS) == strategies_defined_in_jacbench()
    registry = load_registry()
    for name in BUILT_INS:
        assert registry.get(name).name == name
        assert registry.packages[name] == "jacbench"
    assert not registry.problems()


def test_broken_plugin_is_reported_with_its_package_and_others_work(outside_packages):
    registry = registry_with(outside_packages)
    with pytest.raises(ConfigError, match="broken_plugin.*ModuleNotFoundError"):
        registry.get("broken")
    with pytest.raises(ConfigError, match="not_a_strategy.*not a strategy"):
        registry.get("notspec")
    assert registry.get("jacfwd").name == "jacfwd"
    assert any("broken_plugin" in p for p in registry.problems())


def test_a_name_claimed_by_two_packages_is_refused(outside_packages):
    registry = registry_with(outside_packages)
    assert registry.conflicts["jacrev"] == ["jacbench", "rival_plugin"]
    with pytest.raises(ConfigError, match="several packages.*jacbench and rival_plugin"):
        registry.get("jacrev")


def test_unknown_name_lists_valid_strategies():
    with pytest.raises(ConfigError, match="valid strategies: .*jacfwd"):
        load_registry().get("nosuch")


@pytest.mark.slow  # over 10 s: a real sweep or a subprocess per run
def test_cli_with_a_broken_plugin_installed(cli, outside_packages):
    env = clean_env(PYTHONPATH=str(outside_packages))
    ok = cli("strategy=jacfwd", "mlflow.enabled=false", *QUICK, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "broken_plugin" in ok.stdout + ok.stderr  # reported, yet the job ran

    broken = cli("strategy=broken", "mlflow.enabled=false", *QUICK, env=env)
    assert broken.returncode != 0
    assert "failed to load" in broken.stderr and "broken_plugin" in broken.stderr

    rival = cli("strategy=jacrev", "mlflow.enabled=false", *QUICK, env=env)
    assert rival.returncode != 0
    assert "rival_plugin" in rival.stderr
    statuses = sorted(cli.results()["status"])
    assert statuses == ["failed", "failed", "ok"]


def test_a_strategy_asked_for_by_two_threads_while_it_loads_is_found_by_both(tmp_path, monkeypatch):
    """Entry points load at their first use: a second thread asking while the first imports
    the module waits for it (it was told the strategy is unknown)."""
    import threading
    from importlib.metadata import EntryPoint

    (tmp_path / "slow_strategy_module.py").write_text(
        "import time\n"
        "from jacbench import Kind, Mode, strategy\n"
        "time.sleep(0.5)\n"
        "@strategy(Kind.EXACT, Mode.REVERSE)\n"
        "def slow(problem, opts):\n"
        "    raise NotImplementedError\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = build_registry([EntryPoint("slow", "slow_strategy_module:slow", GROUP)])
    found: list[object] = []

    def ask() -> None:
        try:
            found.append(registry.get("slow").name)
        except ConfigError as exc:
            found.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert found == ["slow", "slow"]
