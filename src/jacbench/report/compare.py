"""What changed between two result sets: ratio of medians, flagged only where the rule tells
the two times apart and the ratio is beyond ``THRESHOLD``."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from jacbench.record.parquet import read_results
from jacbench.record.result import Status
from jacbench.report.display import missing
from jacbench.report.problems import PROBLEM_KEYS, normalise
from jacbench.report.render import Document
from jacbench.report.screen import screen
from jacbench.timing.rule import CONTENDED, Basis, compare_intervals, contention, interval_of

MATCH_KEYS = [*PROBLEM_KEYS, "label"]


def _latest_ok(rows: pd.DataFrame) -> pd.DataFrame:
    rows, _ = normalise(rows)
    ok = rows[(rows["status"] == Status.OK) & rows["time_median_s"].notna()]
    return ok.sort_values("started_at").groupby("config_hash", dropna=False).tail(1)


def match(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Pairs of rows: same config_hash first, then same problem and strategy variant."""
    b, a = _latest_ok(before), _latest_ok(after)
    by_hash = b.merge(a, on="config_hash", suffixes=("_before", "_after"))
    rest_b = b[~b["config_hash"].isin(by_hash["config_hash"])]
    rest_a = a[~a["config_hash"].isin(by_hash["config_hash"])]
    keyed = [df.assign(**{k: df[k].astype(str) for k in MATCH_KEYS}) for df in (rest_b, rest_a)]
    by_problem = keyed[0].merge(keyed[1], on=MATCH_KEYS, suffixes=("_before", "_after"))
    for frame, how in ((by_hash, "config_hash"), (by_problem, "problem and strategy")):
        frame["matched_by"] = how
        for key in MATCH_KEYS:
            if key not in frame:
                frame[key] = frame[f"{key}_after"]
    return pd.concat([by_hash, by_problem], ignore_index=True)


# A change is flagged only beyond this ratio, and where the rule tells the times apart: on a
# shared machine the same code moves between runs even in CPU time (caches, frequency).
THRESHOLD = 1.25
NO_INTERVAL = "no interval"


def _basis(pair: pd.Series) -> Basis:
    """CPU time where both rows have it on a CPU device (load hardly moves it), else wall."""
    on_cpu = str(pair.get("device")) == "cpu"
    have = not any(missing(pair.get(f"cpu_median_s_{side}")) for side in ("before", "after"))
    return Basis.CPU if on_cpu and have else Basis.WALL


def _side(pair: pd.Series, side: str) -> dict[str, object]:
    """One side of a matched pair as a row of its own (its ``_before``/``_after`` columns)."""
    suffix = f"_{side}"
    return {k[: -len(suffix)]: v for k, v in pair.items() if str(k).endswith(suffix)}


def judge(pair: pd.Series) -> tuple[str, float | None, str, str, str]:
    """Flag, ratio (after / before), basis and both times' texts of one matched pair."""
    basis = _basis(pair)
    sides = {side: _side(pair, side) for side in ("before", "after")}
    before, after = (interval_of(row, side, basis) for side, row in sides.items())
    texts = (before.text() if before else NO_INTERVAL, after.text() if after else NO_INTERVAL)
    if before is None or after is None:
        return "unknown (no interval)", None, basis.name.lower(), *texts
    ratio = after.median / before.median
    verdict = compare_intervals(after, before)
    if verdict.decided and max(ratio, 1 / ratio) > THRESHOLD:
        waited = [side for side, row in sides.items() if contention(row) is not None]
        if waited:
            return f"unsure (contended {' and '.join(waited)})", ratio, basis.name.lower(), *texts
        return ("slower" if ratio > 1 else "faster"), ratio, basis.name.lower(), *texts
    return "same", ratio, basis.name.lower(), *texts


def compare(before: pd.DataFrame, after: pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """Each matched pair judged by the rule (``judge``), and the pairs' geometric-mean ratio."""
    pairs = match(before, after)
    if pairs.empty:
        return pairs, None
    judged = [judge(pair) for _, pair in pairs.iterrows()]
    for i, column in enumerate(("flag", "ratio", "basis", "before_text", "after_text")):
        pairs[column] = [j[i] for j in judged]
    ratios = [r for r in pairs["ratio"] if r is not None and r > 0]
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    return pairs, geomean


FLAG_ORDER = ("faster", "slower", "same", "unsure", "unknown")
UNSURE = {"unsure": "told apart while a side waited for its core", "unknown": "without an interval"}


def headline(pairs: pd.DataFrame) -> str:
    """The verdict in one line: matched jobs faster, slower, same or unsure (why), and the time."""
    kinds = pairs["flag"].str.split(" ", n=1).str[0]
    counts = kinds.value_counts().to_dict()
    parts = [f"{counts[k]} {k}" for k in FLAG_ORDER if counts.get(k)]
    unsure = [f"{counts[k]} {why}" for k, why in UNSURE.items() if counts.get(k)]
    bases = sorted(set(pairs["basis"]))
    basis = " and ".join(
        {"cpu": "CPU time per call", "wall": "wall time per call"}[b] for b in bases
    )
    why = f" ({'; '.join(unsure)})" if unsure else ""
    return f"{len(pairs)} matched jobs, compared by {basis}: {', '.join(parts)}{why}."


def compare_report(before_dir: Path, after_dir: Path, out: Path) -> tuple[Path, str]:
    """compare.md and compare.html: the headline verdict first, then each matched job."""
    pairs, geomean = compare(screen(read_results(before_dir)), screen(read_results(after_dir)))
    out.mkdir(parents=True, exist_ok=True)
    doc = Document(f"jacbench compare: {before_dir} -> {after_dir}")
    if pairs.empty:
        verdict = (
            "No job of one set matches a job of the other (by config_hash, or by problem and "
            "strategy)."
        )
        doc.paragraph(verdict)
    else:
        verdict = headline(pairs)
        doc.paragraph(f"**{verdict}**")
        table = [
            [
                r["label"],
                f"{r['model']} N={r['n_in']} M={r['n_out']} {r['dtype']} {r['device']}",
                f"{r['before_text']} ({_conditions(r, 'before')})",
                f"{r['after_text']} ({_conditions(r, 'after')})",
                "-" if r["ratio"] is None else f"{r['ratio']:.3g}",
                r["flag"],
                r["basis"],
                r["matched_by"],
            ]
            for _, r in pairs.sort_values("ratio", ascending=False, key=_sort_key).iterrows()
        ]
        header = ["strategy", "problem", "before", "after", "after / before", "flag", "time"]
        doc.table([*header, "matched by"], table)
        mean = "-" if geomean is None else f"{geomean:.3g}"
        doc.paragraph(
            f"Geometric-mean time ratio (after / before): {mean}. A row is flagged faster or "
            f"slower only where the 95% intervals of the two medians do not overlap and the "
            f"ratio is beyond {THRESHOLD}x; times are CPU time per call on CPU devices (a busy "
            "machine moves it less than wall time), wall time elsewhere; 'unsure (contended)': "
            "told apart, but one side's process waited for its core while timed (CPU/wall per "
            f"thread below {CONTENDED}), which raises CPU time too; 'unknown': a side has no "
            "interval."
        )
    md, _ = doc.write(out, "compare")
    return md, verdict


def _conditions(pair: pd.Series, side: str) -> str:
    """How a side was timed: its number of blocks and its CPU/wall (contention)."""
    blocks, cpu = pair.get(f"n_blocks_{side}"), pair.get(f"cpu_wall_ratio_{side}")
    text = "n=" + ("-" if missing(blocks) else str(int(blocks)))
    return text + ("" if missing(cpu) else f", CPU/wall {float(cpu):.2f}")


def _sort_key(ratios: pd.Series) -> pd.Series:
    return ratios.map(lambda r: -1.0 if r is None else float(r))
