"""A preset's second round, from recorded rows: which pair of each problem its sweep re-times
side by side (``contested_pairs``: the recommendation's best and runner-up from the first
round's rows), and what its answer says of the re-timings it finds among the rows
(``side_by_side_lines``). The re-timing itself is a job of the sweep
(``jacbench.run.side_by_side``)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from omegaconf import DictConfig

from jacbench.core.enums import Status
from jacbench.record.result import Round
from jacbench.report.analysis import recommend
from jacbench.report.problems import latest_ok, normalise, problems
from jacbench.run.pair import Pair, contestant


def contested_pairs(rows: pd.DataFrame, configs: Sequence[DictConfig]) -> list[Pair]:
    """One pair per problem whose recommendation has a runner-up: the best and the runner-up
    (``report.analysis.recommend`` over ``rows``, the first round's rows with their
    ``job_num``; ``configs``: the sweep's composed job configs, by job_num)."""
    labelled, _ = normalise(rows)
    pairs = []
    for title, group in problems(labelled):
        rec = recommend(title, group)
        if rec.best is None or rec.runner_up is None:
            continue
        latest = latest_ok(group).set_index("label")
        best, runner = latest.loc[rec.best], latest.loc[rec.runner_up]
        jobs = (int(best["job_num"]), int(runner["job_num"]))
        after = max(pd.Timestamp(best["started_at"]), pd.Timestamp(runner["started_at"]))
        pairs.append(
            Pair(
                title,
                (rec.best, rec.runner_up),
                jobs,
                (contestant(configs[jobs[0]]), contestant(configs[jobs[1]])),
                after.isoformat(),
            )
        )
    return pairs


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
