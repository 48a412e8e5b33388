"""A sweep's second round, from recorded rows: which pair of each problem it re-times side by
side (``pairs_of``), and what its answer says of the re-timings (``side_by_side_lines``)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from omegaconf import DictConfig

from jacbench.record.result import Round, Status
from jacbench.report.analysis import recommend
from jacbench.report.grid import auto_against_best
from jacbench.report.problems import latest_ok, normalise, problems
from jacbench.run.pair import Pair, SecondRound, contestant


def _pair(
    title: str, group: pd.DataFrame, labels: tuple[str, str], configs: Sequence[DictConfig]
) -> Pair:
    """The pair of two labelled strategies of one problem, from their newest ok rows."""
    latest = latest_ok(group).set_index("label")
    first, second = latest.loc[labels[0]], latest.loc[labels[1]]
    jobs = (int(first["job_num"]), int(second["job_num"]))
    after = max(pd.Timestamp(first["started_at"]), pd.Timestamp(second["started_at"]))
    return Pair(
        title,
        labels,
        jobs,
        (contestant(configs[jobs[0]]), contestant(configs[jobs[1]])),
        after.isoformat(),
    )


def contested_pairs(rows: pd.DataFrame, configs: Sequence[DictConfig]) -> list[Pair]:
    """One pair per problem whose recommendation has a runner-up: the best and the runner-up
    (``report.analysis.recommend`` over ``rows``, the first round's rows with their
    ``job_num``; ``configs``: the sweep's composed job configs, by job_num)."""
    labelled, _ = normalise(rows)
    pairs = []
    for title, group in problems(labelled):
        rec = recommend(title, group)
        if rec.best is not None and rec.runner_up is not None:
            pairs.append(_pair(title, group, (rec.best, rec.runner_up), configs))
    return pairs


def auto_loss_pairs(rows: pd.DataFrame, configs: Sequence[DictConfig]) -> list[Pair]:
    """One pair per problem where ``auto``'s time is over the map's bound on the best exact
    strategy's (``report.grid.AutoAgainstBest.over_bound``): auto and that strategy
    (arguments as ``contested_pairs``)."""
    labelled, _ = normalise(rows)
    pairs = []
    for title, group in problems(labelled):
        against = auto_against_best(group)
        if against is not None and against.over_bound:
            labels = (str(against.auto["label"]), str(against.best["label"]))
            pairs.append(_pair(title, group, labels, configs))
    return pairs


def pairs_of(kind: SecondRound, rows: pd.DataFrame, configs: Sequence[DictConfig]) -> list[Pair]:
    """The pairs ``kind`` of second round times again."""
    if kind == SecondRound.AUTO_LOSSES:
        return auto_loss_pairs(rows, configs)
    return contested_pairs(rows, configs) if kind == SecondRound.BEST_TWO else []


def side_by_side_lines(rows: pd.DataFrame) -> list[str]:
    """One line per re-timing among ``rows``: which two, how, and in which job; or why it
    could not be done (then the first round's figures are the newest)."""
    labelled, _ = normalise(rows)
    lines = []
    for title, group in problems(labelled):
        retimed = group[group["round"].astype(str) == Round.SIDE_BY_SIDE]
        for _, two in retimed.groupby("pair_id", sort=False):
            names = " and ".join(two["label"].astype(str))
            job = f", job {int(two['job_num'].iloc[0])}" if "job_num" in two else ""
            if (two["status"] == Status.OK).all():
                blocks = int(two["n_blocks"].iloc[0])
                lines.append(
                    f"{title}: {names} timed side by side ({blocks} interleaved blocks each{job})"
                )
            else:
                failed = two[two["status"] != Status.OK]
                why = str(failed["error_message"].iloc[0])
                lines.append(
                    f"{title}: {names} not timed side by side{job} ({why}); the first round's "
                    "figures stand"
                )
    return lines
