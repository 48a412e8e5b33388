"""Resuming a sweep: which recorded rows a job may reuse instead of being measured again
(``reusable``), and counting them in the sweep (``count_as_done``). The sweep asks before
sending a job out; the job asks again under its claim (``jacbench.run.claims``).

A row is reused only while its config (``config_hash``) and provenance
(``jacbench.run.provenance``) are unchanged, unless ``reuse_stale=true`` keeps the newest
row all the same, marked stale with what changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

from jacbench.core.errors import ConfigError
from jacbench.record.result import Round, Status
from jacbench.run.identity import identify, plain
from jacbench.run.pair import Pair
from jacbench.run.provenance import Provenance, device_name, provenance, stale_reason
from jacbench.run.sweep.state import SweepState, job_record, results_dir


@dataclass(frozen=True)
class Reuse:
    """The rows a job reuses, and what changed since they were measured ("" when nothing did)."""

    files: tuple[Path, ...]
    stale: str = ""


def current_provenance(cfg: DictConfig) -> Provenance:
    """What would make the job's row here now (ConfigError where it cannot run here)."""
    from jacbench.core.registry import load_registry  # torch: the strategy's module
    from jacbench.run.job import resolve_device

    spec = load_registry().get(str(cfg.strategy.name))
    device = device_name(resolve_device(str(cfg.device.name)))
    return provenance(spec.setup.__module__, plain(cfg.model), device)


def _first_round(folder: Path, cfg: DictConfig) -> Iterator[Reuse]:
    from jacbench.record.parquet import done_rows  # pyarrow: not in a single run

    here = current_provenance(cfg)
    for path, row in done_rows(folder, identify(cfg).config_hash):
        if row["round"] == Round.FIRST:
            yield Reuse((path,), stale_reason(row, here))


def _side_by_side(folder: Path, pair: Pair) -> Iterator[Reuse]:
    """The newest re-timings of this pair made after the first-round rows it was chosen from
    (both rows of one re-timing present)."""
    from jacbench.record.parquet import done_rows

    here = [current_provenance(cfg) for cfg in pair.contestant_configs()]
    hashes = pair.hashes()
    partners = {
        row["pair_id"]: (path, row)
        for path, row in done_rows(folder, hashes[1])
        if row["round"] == Round.SIDE_BY_SIDE
    }
    for path, row in done_rows(folder, hashes[0]):
        partner = partners.get(row["pair_id"])
        if row["round"] != Round.SIDE_BY_SIDE or partner is None:
            continue
        if row["status"] != Status.OK or row["started_at"] <= pair.measured_after:
            continue
        reasons = [stale_reason(row, here[0]), stale_reason(partner[1], here[1])]
        yield Reuse((path, partner[0]), ", ".join(dict.fromkeys(filter(None, reasons))))


def reusable(
    cfg: DictConfig,
    launch_dir: Path,
    force: bool,
    pair: Pair | None = None,
    elsewhere: bool = False,
) -> Reuse | None:
    """The newest ``ok`` or ``skipped`` row of the job's config and round (``pair``: that
    pair's side-by-side rows) whose provenance is this process's; with ``cfg.reuse_stale``
    the newest whatever its provenance, marked stale. None under ``force``, or
    ``elsewhere``: the job runs on another machine (SLURM), which asks under its claim."""
    if force or elsewhere:
        return None
    folder = results_dir(cfg, launch_dir)
    try:
        found = _first_round(folder, cfg) if pair is None else _side_by_side(folder, pair)
        newest = None
        for reuse in found:
            if not reuse.stale:
                return reuse
            newest = newest or reuse
    except ConfigError:
        return None
    return newest if bool(cfg.get("reuse_stale")) else None


def count_as_done(sweep: SweepState, num: int, reuse: Reuse, how: str, console: Console) -> None:
    """Count job ``num`` as done by the rows ``reuse`` names, and say so."""
    record = job_record(num, list(reuse.files), "done", resumed=True, stale=reuse.stale)
    done = sweep.mark_job(num, record)
    names = ", ".join(path.name for path in reuse.files)
    stale = f"; STALE ({reuse.stale}), kept by reuse_stale=true" if reuse.stale else ""
    console.print(
        f"[{done}/{sweep.total}] job {num}: {how} ({names}){stale}; force=true re-runs it"
    )
