"""Per-problem tables, the recommendation and rules of thumb, computed from rows."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from jacbench.core.enums import Kind
from jacbench.record.result import Status
from jacbench.report.display import (
    ROUND_COLUMN,
    UNSETTLED_RATIO,
    cell,
    round_text,
    rounds_differ,
    seconds_text,
    time_text,
    verdict_text,
)
from jacbench.report.problems import DEFAULT_STRATEGY, Moments, latest_ok, moments, standing
from jacbench.timing.rule import (
    BUSY,
    Basis,
    Order,
    busy,
    digits,
    interval_of,
    ranking_seconds,
    settled_ratio,
    time_ratio,
    unsettled,
    verdict,
)


def default_row(rows: pd.DataFrame) -> pd.Series | None:
    """The latest ok row of the default strategy (``functional``), the speedups' baseline."""
    base = latest_ok(rows)
    base = base[base["strategy"] == DEFAULT_STRATEGY].dropna(subset=["time_median_s"])
    return base.sort_values("time_median_s").iloc[0] if len(base) else None


HEADER = [
    "strategy",
    "kind",
    "mode",
    "status",
    "median [95% interval]",
    f"speedup vs {DEFAULT_STRATEGY}",
    "err_eps",
    "within tol",
]


def header(rows: pd.DataFrame) -> list[str]:
    """``problem_lines``' columns: ``HEADER``, plus the round where a row is re-timed or stale."""
    return HEADER + ([ROUND_COLUMN] if rounds_differ(rows) else [])


def problem_lines(rows: pd.DataFrame) -> list[list[str]]:
    """One line per measured strategy variant, fastest first (``header(rows)``)."""
    base = default_row(rows)
    ok = standing(rows, latest_ok)
    with_round = rounds_differ(rows)
    lines = []
    for _, r in ok.iterrows():
        colours = f" ({int(r['n_colors'])} colours)" if pd.notna(r["n_colors"]) else ""
        lines.append(
            [
                r["label"] + colours,
                str(r["strategy_kind"]),
                str(r["strategy_mode"] or "-"),
                "ok",
                time_text(r),
                _speedup_text(r, base),
                cell(r["err_eps"], ".3g"),
                verdict_text(r["within_tol"], r["undecided_reason"]),
                *([round_text(r)] if with_round else []),
            ]
        )
    return lines


def _speedup_text(row: pd.Series, base: pd.Series | None) -> str:
    """The default's time over this row's (``3.7x``; ``1x`` for the default itself), "n/a"
    without the default, ``UNSETTLED_RATIO`` where the rule does not settle the order."""
    if base is None:
        return "n/a"
    if row["label"] == base["label"]:
        return "1x"
    speedup = settled_ratio(base, row)
    return f"{digits(speedup)}x" if speedup is not None else UNSETTLED_RATIO


def not_ok_lines(rows: pd.DataFrame) -> list[list[str]]:
    bad = rows[rows["status"] != Status.OK].drop_duplicates(["label", "status", "error_message"])
    return [[r["label"], str(r["status"]), str(r["error_message"])] for _, r in bad.iterrows()]


# Exact first: an approximate strategy is picked only when settled more than this many times
# faster than the fastest exact one; below, speed does not pay for the digits lost.
CLEARLY_FASTER = 1.5
RULE = (
    "The fastest strategy within its dtype's tolerance (negative controls excluded), exact "
    f"first: an approximate one is picked only when more than {CLEARLY_FASTER}x faster than "
    "the fastest exact one and the rule says it is faster; the other kind's fastest is shown "
    "as the alternative. A beats B only when the 95% confidence intervals of their median "
    "times do not overlap; otherwise they are tied and no ratio is quoted. Speedups are "
    f"against `{DEFAULT_STRATEGY}` (torch.autograd.functional.jacobian)."
)


UNTIMED_CHOICE = "none by speed (accuracy only: nothing was timed)"


@dataclass(frozen=True)
class Alternative:
    """The fastest strategy of the other kind (exact vs approximate), shown beside the pick."""

    name: str
    kind: str
    time: float
    err_eps: float | None
    faster: float | None  # how many times faster the approximate one is; None when tied

    def ratio(self, word: str) -> str:
        """``3.1x faster`` (or slower), or "not settled" where the rule does not settle it."""
        return "not settled" if self.faster is None else f"{digits(self.faster)}x {word}"


@dataclass(frozen=True)
class Recommendation:
    problem: str
    best: str | None
    best_time: float | None
    runner_up: str | None  # the next fastest of the pick's kind
    runner_up_slower: float | None  # runner-up time / best time
    speedup_vs_default: float | None  # default (functional) time / best time, where settled
    unsettled: str = ""  # why the order of best and runner-up is not settled, if it is not
    versus_default: str = ""  # why no speedup over the default is quoted, where it is not
    none_finished: str = ""  # when no job of the problem ended ok: what happened instead
    best_kind: str = ""
    best_err_eps: float | None = None
    alternative: Alternative | None = None
    why: str = ""  # why the pick is exact although an approximate one is faster, or not
    untimed: str = ""  # an accuracy question (timing=none): what was found instead of a pick
    # best's CPU time per call where best and runner-up were ordered by it (a busy machine)
    best_cpu_time: float | None = None
    by: str = "wall"  # the time the order was read from: "cpu" where a row waited for a core

    def sentence(self) -> str:
        if self.untimed:
            return f"{self.problem}: {self.untimed}"
        if self.best is None and self.none_finished:
            return f"{self.problem}: no strategy finished ({self.none_finished})."
        if self.best is None or self.best_time is None:  # no pick, hence no time
            return f"{self.problem}: no strategy was within tolerance."
        if self.unsettled:
            return (
                f"{self.problem}: no settled winner between {self.best} and {self.runner_up}: "
                f"{self.unsettled} (re-run with a longer timing.min_run_time on a quiet "
                "machine)." + self.alternative_sentence()
            )
        times = seconds_text(self.best_time)
        if self.best_cpu_time is not None:
            times = f"{seconds_text(self.best_cpu_time)} CPU, {times} wall"
        text = f"{self.problem}: use **{self.best}** ({times})"
        if self.best_kind == Kind.APPROXIMATE:
            text += f", approximate (err_eps {cell(self.best_err_eps, '.3g')})"
        if self.runner_up and self.runner_up_slower is not None:  # both or neither
            by = f" {BUSY}" if self.best_cpu_time is not None else ""
            slower = digits(self.runner_up_slower)
            text += f"; runner-up {self.runner_up} ({slower}x slower{by})"
        if self.speedup_vs_default:
            text += f"; {digits(self.speedup_vs_default)}x faster than {DEFAULT_STRATEGY}"
        elif self.versus_default:
            text += f"; {self.versus_default}"
        return text + "." + self.alternative_sentence()

    def alternative_sentence(self) -> str:
        """The other kind's fastest, with the speed ratio and why it was not the pick."""
        alt = self.alternative
        if alt is None:
            return ""
        word = "slower" if alt.kind == Kind.EXACT else "faster"
        return (
            f" {str(alt.kind).capitalize()} alternative: {alt.name} ({seconds_text(alt.time)}, "
            f"err_eps {cell(alt.err_eps, '.3g')}), {alt.ratio(word)}; {self.why}."
        )

    def choice(self, with_alternative: bool = True) -> str:
        """The recommendation in a few words, honest about unsettled or missing answers."""
        if self.untimed:  # an accuracy question: no pick by speed, whatever was within tol
            return UNTIMED_CHOICE
        if self.best is None:
            return "none finished" if self.none_finished else "none within tolerance"
        if self.unsettled:
            return f"{self.best} or {self.runner_up} (not settled)"
        alt = self.alternative
        if alt is None or not with_alternative:
            return self.best
        if alt.kind == Kind.EXACT:
            return f"{self.best} (approximate, {alt.ratio('faster')} than exact {alt.name})"
        return f"{self.best} ({alt.name} is {alt.ratio('faster')} but approximate)"


def _exact_or_approximate(
    candidates: pd.DataFrame, timed: Moments
) -> tuple[pd.DataFrame, Alternative | None, str]:
    """Exact first: the candidates (``timed.ranked()``) of the kind to pick from, the fastest
    of the other kind (only where the approximate one is the faster), and why."""
    exact = candidates[candidates["strategy_kind"] != Kind.APPROXIMATE]
    approx = candidates[candidates["strategy_kind"] == Kind.APPROXIMATE]
    if exact.empty or approx.empty:
        return candidates, None, ""
    e, a = timed.pair(exact.iloc[0]["label"], approx.iloc[0]["label"])
    found, faster = verdict(a, e), 1 / time_ratio(a, e)
    if faster <= 1:
        return exact, None, ""
    if faster > CLEARLY_FASTER and found.decided:
        why = f"the approximate one is more than {CLEARLY_FASTER}x faster, settled by the rule"
        return approx, Alternative(str(e["label"]), Kind.EXACT, *_time_err(e), faster), why
    why = (
        f"exact is kept unless an approximate one is more than {CLEARLY_FASTER}x faster"
        if found.decided
        else f"exact is kept: {found.text}"
    )
    settled = faster if found.decided else None
    return exact, Alternative(str(a["label"]), Kind.APPROXIMATE, *_time_err(a), settled), why


def _accuracy(rows: pd.DataFrame) -> str:
    """What an accuracy question found (timing=none: nothing timed, no speed verdict)."""
    within = rows[rows["within_tol"].fillna(False).astype(bool)]
    best = rows.dropna(subset=["rel_err"]).sort_values("rel_err")
    closest = (
        f"; the most accurate: {best.iloc[0]['label']} (rel_err {best.iloc[0]['rel_err']:.1e})"
        if len(best)
        else ""
    )
    return (
        f"an accuracy question (timing=none): nothing was timed, so no strategy is recommended "
        f"for speed; {len(within)} of {len(rows)} within tolerance{closest}."
    )


def _time_err(row: pd.Series) -> tuple[float, float | None]:
    err = row["err_eps"]
    return float(row["time_median_s"]), None if pd.isna(err) else float(err)


def recommend(problem: str, rows: pd.DataFrame) -> Recommendation:
    """The fastest strategy within tolerance, exact first (see ``CLEARLY_FASTER``), the
    runner-up of its kind, and the other kind's fastest as the alternative."""
    timed = moments(rows)
    candidates = timed.ranked().dropna(subset=["time_median_s"])
    if candidates.empty:  # no job ended ok, or an accuracy question (nothing timed)
        finished = latest_ok(rows)
        if finished.empty:
            counts = rows["status"].astype(str).value_counts()
            what = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            return Recommendation(problem, None, None, None, None, None, none_finished=what)
        untimed = _accuracy(finished) if finished["n_timed"].eq(0).all() else ""
        return Recommendation(problem, None, None, None, None, None, untimed=untimed)
    pool, alternative, why = _exact_or_approximate(candidates, timed)
    best = pool.iloc[0]
    runner = None
    if len(pool) > 1:  # the two as timed at one moment (``problems.Moments.pair``)
        best, runner = timed.pair(best["label"], pool.iloc[1]["label"])
    base = default_row(rows)
    speedup = None
    if base is not None and base["label"] != best["label"]:
        speedup = settled_ratio(*moments(rows, latest_ok).pair(base["label"], best["label"]))
    slower, best_cpu, by = None, None, "cpu" if busy(best) else "wall"
    if runner is not None:
        found = verdict(runner, best)
        by = "wall" if found.basis == Basis.WALL else "cpu"
        slower = found.ratio if found.decided else _ratio_as_ranked(runner, best, by == "cpu")
        cpu = interval_of(best, basis=found.basis)
        if found.decided and found.basis != Basis.WALL and cpu is not None:
            best_cpu = cpu.median
    return Recommendation(
        problem,
        str(best["label"]),
        float(best["time_median_s"]),
        None if runner is None else str(runner["label"]),
        slower,
        speedup if speedup is not None and speedup > 1 else None,
        "" if runner is None else disagreement(best, runner) or unsettled(best, runner),
        versus_default=_versus_default(best, base, speedup),
        best_kind=str(best["strategy_kind"]),
        best_err_eps=_time_err(best)[1],
        alternative=alternative,
        why=why,
        best_cpu_time=best_cpu,
        by=by,
    )


def _ratio_as_ranked(a: pd.Series, b: pd.Series, loaded: bool) -> float:
    """A's time over B's as the ranking read them (``rule.ranking_seconds``: CPU time where
    the machine was busy), for an order the rule does not settle."""
    ta, tb = ranking_seconds(a, loaded), ranking_seconds(b, loaded)
    if ta is None or tb is None or tb <= 0:
        return float(a["time_median_s"] / b["time_median_s"])
    return ta / tb


def _versus_default(best: pd.Series, base: pd.Series | None, speedup: float | None) -> str:
    """What is said of the default where no speedup over it is quoted."""
    if base is None or speedup is not None and speedup > 1:
        return ""
    if base["label"] == best["label"]:
        return f"{DEFAULT_STRATEGY} is PyTorch's default itself"
    return f"against {DEFAULT_STRATEGY}: {verdict(best, base).text}"


def _load(row: pd.Series) -> str:
    cpu, load = row.get("cpu_wall_ratio"), row.get("load_avg_1m")
    return f"CPU/wall {cell(cpu, '.2f')}, load average {cell(load, '.2f')}"


def disagreement(a: pd.Series, b: pd.Series) -> str:
    """Where one row is ``auto`` and the other the strategy it chose (the same code timed twice)
    and the rule tells their times apart: why they disagree, instead of a ranking; else ""."""
    auto, other = (a, b) if a["strategy"] == "auto" else (b, a)
    if auto["strategy"] != "auto" or auto.get("chosen_strategy") != other["strategy"]:
        return ""
    found = verdict(auto, other)
    if not found.decided:
        return ""
    return (
        f"the measurements disagree: auto ran {other['strategy']}, the same code, yet "
        f"{found.text}; the difference is not the code's (auto: {_load(auto)}; "
        f"{other['strategy']}: {_load(other)}), so neither ranks above the other"
    )


def best_of_each_mode(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """The fastest usable exact forward-mode and reverse-mode rows of one problem, as timed
    at one moment (``problems.Moments.pair``); None unless both modes were measured."""
    timed = moments(rows)
    exact = timed.ranked().dropna(subset=["time_median_s"])
    exact = exact[exact["strategy_kind"] == Kind.EXACT]
    fastest = exact.groupby("strategy_mode", sort=False).head(1).set_index("strategy_mode")
    if "forward" not in fastest.index or "reverse" not in fastest.index:
        return None
    forward, reverse = fastest.loc["forward", "label"], fastest.loc["reverse", "label"]
    return timed.pair(str(forward), str(reverse))


def rules_of_thumb(problems: list[tuple[str, pd.DataFrame]]) -> list[str]:
    """Forward vs reverse mode by shape, where the data covers both modes."""
    tallies = {"M > N": {"forward": 0, "reverse": 0}, "N > M": {"forward": 0, "reverse": 0}}
    for _, rows in problems:
        modes = best_of_each_mode(rows)
        found = None if modes is None else verdict(*modes)
        if found is None or not found.decided:
            continue  # both modes not measured, or not settled: neither counts as the faster
        n, m = int(rows["n_in"].iloc[0]), int(rows["n_out"].iloc[0])
        if n == m:
            continue
        shape = "M > N" if m > n else "N > M"
        tallies[shape]["forward" if found.order == Order.FASTER else "reverse"] += 1
    rules = []
    for shape, count in tallies.items():
        total = count["forward"] + count["reverse"]
        if total == 0:
            continue
        winner = max(count, key=lambda mode: count[mode])
        expected = "forward" if shape == "M > N" else "reverse"
        rules.append(
            f"{shape} (more {'outputs' if shape == 'M > N' else 'inputs'}): the fastest "
            f"exact strategy was {winner} mode in {count[winner]} of {total} problem(s)"
            + (
                " - as theory predicts (cost grows with the smaller dimension)."
                if winner == expected and count[winner] > total / 2
                else " - overheads outweighed the pass count at these sizes."
            )
        )
    return rules
