"""A sweep from its start to its end, as jacbench's Hydra sweeper runs it
(``hydra/sweeper=jacbench``).

Jobs are listed as Hydra's basic sweeper lists them; the jobs that cover every swept choice
are composed first, which checks the sweep. In each batch a job whose row may be reused is
counted as done, one another sweep is running waits for it, and the rest go to the stock
launcher. The sweep is closed (summary, MLflow parent run) whatever happened.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from omegaconf import DictConfig

from jacbench.core.errors import ConfigError
from jacbench.record.result import Round
from jacbench.record.text import one_line, shown_logs
from jacbench.report.display import make_console
from jacbench.run.claims import CLAIMS, holder, sweep_holds_any, waiting_line
from jacbench.run.inputs import check_round, check_strategy_options, refusing
from jacbench.run.launchers import LauncherKind, launcher_kind
from jacbench.run.pair import SecondRound, claim_key, second_round
from jacbench.run.periodic import every
from jacbench.run.resume import count_as_done, reusable
from jacbench.run.sweep import slurm
from jacbench.run.sweep.lifecycle import close_sweep
from jacbench.run.sweep.opening import open_sweep
from jacbench.run.sweep.state import SweepState, record_files, results_dir

POLL_S = 1.0
PENDING_REPORT_S = 60.0  # say which SLURM tasks pend (and why) after this long, then as often


def swept_values(
    params: Mapping[str, Any], arguments: Sequence[str], loader: Any
) -> dict[str, list[str]]:
    """Each swept key's overrides, in Hydra's basic sweeper's order: ``params`` (a preset's),
    then ``arguments`` (a key given in both takes the command line's values)."""
    given = [f"{key}={value}" for key, value in params.items()] + list(arguments)
    values: dict[str, list[str]] = {}
    for override in OverridesParser.create(config_loader=loader).parse_overrides(given):
        key = override.get_key_element()
        if not override.is_sweep_override():
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise ConfigError(
                f"{override.input_line}: jacbench's sweeper takes lists of values, range() "
                "and glob(), not an interval"
            )
    return values


def list_jobs(values: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Every job's overrides: every combination of the swept values, the last key fastest."""
    return [list(job) for job in itertools.product(*values.values())]


def _is_group(key: str, loader: Any) -> bool:
    """Whether ``key`` (``model``, ``+experiment``, ``hydra/launcher``) names a config group."""
    name = key.lstrip("~+").split("@", 1)[0]
    return bool(loader.get_group_options(name))


def covering_jobs(values: Mapping[str, Sequence[str]], loader: Any) -> list[list[str]]:
    """Jobs that hold every combination of the swept config groups' choices and every value
    of each other swept key: composing them checks what composing every job would, at a
    fraction of the cost."""
    if not all(values.values()):
        return []  # no jobs: the sweep is refused as it opens
    groups = [key for key in values if _is_group(key, loader)]
    combos = list(itertools.product(*(values[key] for key in groups)))
    others = [key for key in values if key not in groups]
    count = max([len(combos)] + [len(values[key]) for key in others])
    jobs = []
    for i in range(count):
        chosen = dict(zip(groups, combos[i % len(combos)], strict=True))
        jobs.append([chosen.get(key) or values[key][i % len(values[key])] for key in values])
    return jobs


class JobConfigs(SequenceABC[DictConfig]):
    """Each job's composed config, composed when first asked for."""

    def __init__(self, loader: Any, config: DictConfig, jobs: list[list[str]]) -> None:
        self.loader, self.config, self.jobs = loader, config, jobs
        self._composed: dict[tuple[str, ...], DictConfig] = {}

    def compose(self, job: Sequence[str]) -> DictConfig:
        key = tuple(job)
        if key not in self._composed:
            self._composed[key] = self.loader.load_sweep_config(self.config, list(job))
        return self._composed[key]

    @property
    def composed(self) -> int:
        """How many jobs were composed here so far."""
        return len(self._composed)

    def __len__(self) -> int:
        return len(self.jobs)

    @overload
    def __getitem__(self, position: int) -> DictConfig: ...
    @overload
    def __getitem__(self, position: slice) -> list[DictConfig]: ...
    def __getitem__(self, position: int | slice) -> DictConfig | list[DictConfig]:
        if isinstance(position, slice):
            return [self.compose(job) for job in self.jobs[position]]
        return self.compose(self.jobs[position])


def anything_recorded(folders: set[Path]) -> bool:
    """Whether a results folder holds a row or a claim (else no job need be composed to ask
    whether it can be reused or runs in another sweep)."""
    return any(
        any(folder.glob("*.parquet")) or any((folder / CLAIMS).glob("*")) for folder in folders
    )


def batches(positions: Sequence[int], size: int | None) -> list[list[int]]:
    """The jobs' positions, ``size`` at a time (None: all at once)."""
    step = size or len(positions) or 1
    return [list(positions[start : start + step]) for start in range(0, len(positions), step)]


@dataclass
class Sweep:
    """One sweep in the launching process: its jobs, their configs and their launcher."""

    config: DictConfig
    launcher: Any  # Hydra's Launcher, as the sweeper instantiated it
    jobs: list[list[str]]
    configs: JobConfigs
    state: SweepState
    anything_recorded: bool = True  # False: nothing to reuse or wait for; jobs go out as they are
    console: Any = field(default_factory=make_console)

    @property
    def launch_dir(self) -> Path:
        return Path(str(self.config.hydra.runtime.cwd))

    def run(self, max_batch_size: int | None) -> None:
        """The jobs, then a preset's side-by-side jobs (``second_round``)."""
        self.run_jobs(range(len(self.jobs)), max_batch_size)
        kind = second_round(self.state.side_by_side)
        if kind == SecondRound.AUTO_LOSSES or (
            kind == SecondRound.BEST_TWO and self.state.analysis
        ):
            self.second_round(kind, max_batch_size)

    def run_jobs(self, positions: Sequence[int], max_batch_size: int | None) -> None:
        elsewhere = launcher_kind(self.config.hydra.launcher) == LauncherKind.OTHER
        for batch in batches(positions, max_batch_size):
            waiting, todo = [], []
            for position in batch:
                if not self.anything_recorded and self.state.pair(position) is None:
                    todo.append(position)
                    continue
                cfg = self.configs[position]
                found = reusable(
                    cfg,
                    self.launch_dir,
                    bool(cfg.get("force")),
                    self.state.pair(position),
                    elsewhere=elsewhere,
                )
                if found is not None:
                    count_as_done(self.state, position, found, "already done", self.console)
                elif self._held_elsewhere(position):
                    waiting.append(position)
                else:
                    todo.append(position)
            self.launch(todo)
            for position in waiting:
                self._after_the_other_sweep(position)

    def second_round(self, kind: SecondRound, max_batch_size: int | None) -> None:
        """One job per pair that ``kind`` picks from the first round, timed again side by side."""
        from jacbench.record.parquet import read_files  # pandas: once the first round is in
        from jacbench.run.sweep.retiming import pairs_of

        records = {r["job_num"]: r for r in self.state.job_records()}
        files = {str(f): num for num, r in records.items() for f in record_files(r)}
        rows = read_files([Path(f) for f in files])
        if not len(rows):
            return
        rows["job_num"] = [files[f] for f in rows["_file"]]
        first = len(self.jobs)
        for pair in pairs_of(kind, rows, self.configs):
            overrides = [*self.jobs[pair.jobs[0]], f"round={Round.SIDE_BY_SIDE}"]
            self.state.save_pair(len(self.jobs), pair)
            self.jobs.append(overrides)
        if len(self.jobs) == first:
            return
        self.state.total = len(self.jobs)
        self.state.save()
        which = "auto and the best exact" if kind == SecondRound.AUTO_LOSSES else "the best two"
        self.console.print(
            f"Timing {which} of {len(self.jobs) - first} problem(s) again, side by side: "
            f"job(s) {first}-{len(self.jobs) - 1}"
        )
        self.run_jobs(range(first, len(self.jobs)), max_batch_size)

    def _key(self, position: int) -> str:
        """What the job at ``position`` claims: its config, or its pair."""
        return claim_key(self.configs[position], self.state.pair(position))

    def _held_elsewhere(self, position: int) -> bool:
        cfg = self.configs[position]
        owner = holder(results_dir(cfg, self.launch_dir), self._key(position))
        if owner is None or owner.get("sweep") == self.state.sweep_id:
            return False
        self.console.print(waiting_line(position, owner))
        return True

    def _after_the_other_sweep(self, position: int) -> None:
        """Once the other sweep lets the job go: its rows counted, or the job run here."""
        cfg = self.configs[position]
        folder, key = results_dir(cfg, self.launch_dir), self._key(position)
        while holder(folder, key) is not None:
            time.sleep(POLL_S)
        found = reusable(cfg, self.launch_dir, False, self.state.pair(position))
        if found is not None:
            count_as_done(self.state, position, found, "done by another sweep", self.console)
        else:
            self.launch([position])

    def launch(self, positions: list[int]) -> None:
        """Hand the jobs at ``positions`` to the launcher; say crashes, wait out an early stop."""
        if not positions:
            return
        first = len(self.state.launched)
        self.state.launched += positions
        self.state.save()  # the jobs read their numbers from it
        try:
            with self._reporting_pending():
                returns = self.launcher.launch([self.jobs[p] for p in positions], first)
        except Exception as exc:
            why = one_line(str(exc).split("Error stream produced")[0])  # submitit's: its log
            print(
                f"jacbench: the launcher stopped ({type(exc).__name__}: {why}); "
                "waiting for the sweep's jobs that still run",
                file=sys.stderr,
                flush=True,
            )
            self._wait_for(positions)
            return
        for position, returned in zip(positions, returns, strict=True):
            if returned.status == JobStatus.FAILED:
                try:
                    returned.return_value  # noqa: B018 (raises the job's exception)
                except Exception as exc:
                    why = f"{type(exc).__name__}: {one_line(exc)}"
                    print(f"jacbench: job {position} crashed ({why})", file=sys.stderr)

    def _tasks(self) -> list[str]:
        return slurm.submitted(slurm.submitit_folder(self.config.hydra.launcher))

    def _wait_for(self, positions: list[int]) -> None:
        """Until none of these jobs still runs: recorded, or neither claimed by a live
        process of this sweep nor queued by SLURM."""
        while True:
            recorded = {record["job_num"] for record in self.state.job_records()}
            if all(p in recorded for p in positions):
                return
            running = sweep_holds_any(Path(self.state.results_dir), self.state.sweep_id)
            if not running and not slurm.held(self._tasks()):
                return
            time.sleep(POLL_S)

    @contextlib.contextmanager
    def _reporting_pending(self) -> Iterator[None]:
        """While a SLURM launch waits: which tasks pend, and why, every PENDING_REPORT_S."""
        if launcher_kind(self.config.hydra.launcher) != LauncherKind.OTHER:
            yield
            return

        def report() -> None:
            for line in slurm.pending_reasons(self._tasks()):
                print(f"jacbench: SLURM task {line}", file=sys.stderr, flush=True)

        with every(PENDING_REPORT_S, report, "jacbench-pending"):
            yield


def run_sweep(
    config: DictConfig,
    loader: Any,
    launcher: Any,
    arguments: Sequence[str],
    params: Mapping[str, Any],
    max_batch_size: int | None,
) -> int:
    """The whole sweep; returns its exit code (1 when a job failed or left no record)."""
    shown_logs()  # the launcher logs each job's overrides: a name's escapes escaped
    with refusing():
        values = swept_values(params, arguments, loader)
    jobs = list_jobs(values)
    configs = JobConfigs(loader, config, jobs)
    checked = [configs.compose(job) for job in covering_jobs(values, loader)]
    with refusing():
        from jacbench.core.registry import load_registry  # torch: the strategies' options

        check_strategy_options(checked, load_registry())
        for cfg in checked:
            check_round(cfg.get("round"), single_run=True)
    launch_dir = Path(str(config.hydra.runtime.cwd))
    recorded = anything_recorded({results_dir(cfg, launch_dir) for cfg in checked})
    state = open_sweep(config, len(jobs))
    stopped_by = ""
    try:
        Sweep(config, launcher, jobs, configs, state, recorded).run(max_batch_size)
    except KeyboardInterrupt as exc:
        stopped_by = str(exc) or "Ctrl-C"  # Terminated carries the signal's name
        raise
    finally:
        code = close_sweep(state, stopped_by)
    return code
