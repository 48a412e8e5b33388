"""Per-problem tables, the recommendation and rules of thumb, computed from rows."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from jacbench.core.enums import Kind, Status
from jacbench.report.display import cell, time_text, verdict_text
from jacbench.report.problems import DEFAULT_STRATEGY, good, latest_ok
from jacbench.timing.noise import is_noisy, unsettled


def default_time(rows: pd.DataFrame) -> float | None:
    base = latest_ok(rows)
    base = base[base["strategy"] == DEFAULT_STRATEGY]
    return float(base["time_median_s"].min()) if len(base) else None


HEADER = [
    "strategy",
    "kind",
    "mode",
    "status",
    "median [s]",
    "IQR [s]",
    f"speedup vs {DEFAULT_STRATEGY}",
    "err_eps",
    "within tol",
]


def problem_lines(rows: pd.DataFrame) -> list[list[str]]:
    """One line per measured strategy variant, fastest first."""
    base = default_time(rows)
    ok = latest_ok(rows).sort_values("time_median_s")
    lines = []
    for _, r in ok.iterrows():
        speedup = base / r["time_median_s"] if base and r["time_median_s"] > 0 else None
        colours = f" ({int(r['n_colors'])} colours)" if pd.notna(r["n_colors"]) else ""
        lines.append(
            [
                r["label"] + colours,
                str(r["strategy_kind"]),
                str(r["strategy_mode"] or "-"),
                "ok",
                time_text(r["time_median_s"], r["timing_warning"]),
                cell(r["time_iqr_s"], ".1e"),
                cell(speedup, ".2f") + ("x" if speedup else ""),
                cell(r["err_eps"], ".3g"),
                verdict_text(r["within_tol"]),
            ]
        )
    return lines


def not_ok_lines(rows: pd.DataFrame) -> list[list[str]]:
    bad = rows[rows["status"] != Status.OK].drop_duplicates(["label", "status", "error_message"])
    return [[r["label"], str(r["status"]), str(r["error_message"])] for _, r in bad.iterrows()]


# Exact first: an approximate strategy is recommended over the fastest exact one only when it
# is more than this many times faster and its own timing is not noisy. Below that, the speed
# gained does not pay for the digits lost (finite differences keep about half of them).
CLEARLY_FASTER = 1.5
RULE = (
    "The fastest strategy within its dtype's tolerance (negative controls excluded), exact "
    f"first: an approximate one is picked only when more than {CLEARLY_FASTER}x faster than "
    "the fastest exact one and its timing is not noisy; the other kind's fastest is shown as "
    f"the alternative. Speedups are against `{DEFAULT_STRATEGY}` "
    "(torch.autograd.functional.jacobian)."
)


@dataclass(frozen=True)
class Alternative:
    """The fastest strategy of the other kind (exact vs approximate), shown beside the pick."""

    name: str
    kind: str
    time: float
    err_eps: float | None
    faster: float  # how many times faster the approximate one is than the exact one


@dataclass(frozen=True)
class Recommendation:
    problem: str
    best: str | None
    best_time: float | None
    runner_up: str | None  # the next fastest of the pick's kind
    runner_up_slower: float | None  # runner-up time / best time
    speedup_vs_default: float | None  # default (functional) time / best time
    unsettled: str = ""  # why the order of best and runner-up is not settled, if it is not
    none_finished: str = ""  # when no job of the problem ended ok: what happened instead
    best_kind: str = ""
    best_err_eps: float | None = None
    alternative: Alternative | None = None
    why: str = ""  # why the pick is exact although an approximate one is faster, or not

    def sentence(self) -> str:
        if self.best is None and self.none_finished:
            return f"{self.problem}: no strategy finished ({self.none_finished})."
        if self.best is None:
            return f"{self.problem}: no strategy was within tolerance."
        if self.unsettled:
            return (
                f"{self.problem}: no settled winner: {self.unsettled}; {self.best} "
                f"({self.best_time * 1e3:.3g} ms) and {self.runner_up} are within the noise "
                "(re-run with a longer timing.min_run_time on a quiet machine)."
                + self.alternative_sentence()
            )
        text = f"{self.problem}: use **{self.best}** ({self.best_time * 1e3:.3g} ms)"
        if self.best_kind == Kind.APPROXIMATE:
            text += f", approximate (err_eps {_eps_text(self.best_err_eps)})"
        if self.runner_up:
            text += f"; runner-up {self.runner_up} ({self.runner_up_slower:.2f}x slower)"
        if self.speedup_vs_default:
            text += f"; {self.speedup_vs_default:.1f}x faster than {DEFAULT_STRATEGY}"
        else:
            text += f"; {DEFAULT_STRATEGY} was not measured"
        return text + "." + self.alternative_sentence()

    def alternative_sentence(self) -> str:
        """The other kind's fastest, with the speed ratio and why it was not the pick."""
        alt = self.alternative
        if alt is None:
            return ""
        if alt.kind == Kind.EXACT:
            return (
                f" Exact alternative: {alt.name} ({alt.time * 1e3:.3g} ms, err_eps "
                f"{_eps_text(alt.err_eps)}), {alt.faster:.2f}x slower; {self.why}."
            )
        return (
            f" Approximate alternative: {alt.name} ({alt.time * 1e3:.3g} ms, err_eps "
            f"{_eps_text(alt.err_eps)}), {alt.faster:.2f}x faster; {self.why}."
        )

    def choice(self, with_alternative: bool = True) -> str:
        """The recommendation in a few words, honest about unsettled or missing answers."""
        if self.best is None:
            return "none finished" if self.none_finished else "none within tolerance"
        if self.unsettled:
            return f"{self.best} or {self.runner_up} (not settled)"
        alt = self.alternative
        if alt is None or not with_alternative:
            return self.best
        if alt.kind == Kind.EXACT:
            return f"{self.best} (approximate, {alt.faster:.1f}x faster than exact {alt.name})"
        return f"{self.best} ({alt.name} is {alt.faster:.1f}x faster but approximate)"


def _eps_text(value: float | None) -> str:
    return cell(value, ".3g")


def _exact_or_approximate(candidates: pd.DataFrame) -> tuple[pd.DataFrame, Alternative | None, str]:
    """Exact first: the candidates of the kind to pick from, the fastest of the other kind
    (only where the approximate one is the faster), and why."""
    exact = candidates[candidates["strategy_kind"] != Kind.APPROXIMATE]
    approx = candidates[candidates["strategy_kind"] == Kind.APPROXIMATE]
    if exact.empty or approx.empty:
        return candidates, None, ""
    e, a = exact.iloc[0], approx.iloc[0]
    faster = float(e["time_median_s"] / a["time_median_s"])
    if faster <= 1:
        return exact, None, ""
    if faster > CLEARLY_FASTER and not is_noisy(a["timing_warning"]):
        why = f"the approximate one is more than {CLEARLY_FASTER}x faster with a settled timing"
        return approx, Alternative(str(e["label"]), Kind.EXACT, *_time_err(e), faster), why
    why = (
        "its timing is noisy, so exact is kept"
        if is_noisy(a["timing_warning"])
        else f"exact is kept unless an approximate one is more than {CLEARLY_FASTER}x faster"
    )
    return exact, Alternative(str(a["label"]), Kind.APPROXIMATE, *_time_err(a), faster), why


def _time_err(row: pd.Series) -> tuple[float, float | None]:
    err = row["err_eps"]
    return float(row["time_median_s"]), None if pd.isna(err) else float(err)


def recommend(problem: str, rows: pd.DataFrame) -> Recommendation:
    """The fastest strategy within tolerance, exact first (see ``CLEARLY_FASTER``), the
    runner-up of its kind, and the other kind's fastest as the alternative."""
    candidates = good(rows).dropna(subset=["time_median_s"]).sort_values("time_median_s")
    if candidates.empty:
        finished = latest_ok(rows)
        counts = rows["status"].astype(str).value_counts()
        what = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        return Recommendation(
            problem, None, None, None, None, None, none_finished="" if len(finished) else what
        )
    pool, alternative, why = _exact_or_approximate(candidates)
    best = pool.iloc[0]
    runner = pool.iloc[1] if len(pool) > 1 else None
    base = default_time(rows)
    return Recommendation(
        problem,
        str(best["label"]),
        float(best["time_median_s"]),
        None if runner is None else str(runner["label"]),
        None if runner is None else float(runner["time_median_s"] / best["time_median_s"]),
        base / float(best["time_median_s"]) if base else None,
        "" if runner is None else unsettled(best, runner),
        best_kind=str(best["strategy_kind"]),
        best_err_eps=_time_err(best)[1],
        alternative=alternative,
        why=why,
    )


def rules_of_thumb(problems: list[tuple[str, pd.DataFrame]]) -> list[str]:
    """Forward vs reverse mode by shape, where the data covers both modes."""
    tallies = {"M > N": {"forward": 0, "reverse": 0}, "N > M": {"forward": 0, "reverse": 0}}
    for _, rows in problems:
        exact = good(rows)
        exact = exact[exact["strategy_kind"] == Kind.EXACT]
        modes = exact.groupby("strategy_mode")["time_median_s"].min()
        if "forward" not in modes or "reverse" not in modes:
            continue
        n, m = int(rows["n_in"].iloc[0]), int(rows["n_out"].iloc[0])
        if n == m:
            continue
        shape = "M > N" if m > n else "N > M"
        tallies[shape]["forward" if modes["forward"] < modes["reverse"] else "reverse"] += 1
    rules = []
    for shape, count in tallies.items():
        total = count["forward"] + count["reverse"]
        if total == 0:
            continue
        winner = max(count, key=count.get)
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
