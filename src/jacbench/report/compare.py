"""What changed between two result sets: ratio of medians, flagged only beyond the spread."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from jacbench.core.enums import Status
from jacbench.record.parquet import read_results
from jacbench.report.problems import PROBLEM_KEYS, normalise
from jacbench.report.render import markdown_table

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


def compare(before: pd.DataFrame, after: pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """Each matched pair with ratio = after / before median and a flag that is set only when
    the medians differ by more than the two IQRs together; and the geometric-mean ratio."""
    pairs = match(before, after)
    if pairs.empty:
        return pairs, None
    t0, t1 = pairs["time_median_s_before"], pairs["time_median_s_after"]
    spread = pairs["time_iqr_s_before"].fillna(0) + pairs["time_iqr_s_after"].fillna(0)
    pairs["ratio"] = t1 / t0
    pairs["flag"] = [
        ("slower" if d > 0 else "faster") if abs(d) > s else "within noise"
        for d, s in zip(t1 - t0, spread, strict=True)
    ]
    geomean = math.exp(sum(math.log(r) for r in pairs["ratio"]) / len(pairs))
    return pairs, geomean


def compare_report(before_dir: Path, after_dir: Path, out: Path) -> tuple[Path, str]:
    pairs, geomean = compare(read_results(before_dir), read_results(after_dir))
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# jacbench compare: {before_dir} -> {after_dir}", ""]
    if pairs.empty:
        lines.append(
            "No job of one set matches a job of the other (by config_hash, or by "
            "problem and strategy)."
        )
    else:
        table = [
            [
                r["label"],
                f"{r['model']} N={r['n_in']} M={r['n_out']} {r['dtype']} {r['device']}",
                f"{r['time_median_s_before']:.3e}",
                f"{r['time_median_s_after']:.3e}",
                f"{r['ratio']:.2f}",
                r["flag"],
                r["matched_by"],
            ]
            for _, r in pairs.sort_values("ratio", ascending=False).iterrows()
        ]
        lines += [
            markdown_table(
                [
                    "strategy",
                    "problem",
                    "before [s]",
                    "after [s]",
                    "after / before",
                    "flag",
                    "matched by",
                ],
                table,
            ),
            "",
        ]
        counts = pairs["flag"].value_counts().to_dict()
        lines.append(
            f"Geometric-mean time ratio (after / before) over {len(pairs)} matched jobs: "
            f"{geomean:.3f} ({1 / geomean:.2f}x speedup). Flags: "
            + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
            + ". A change is flagged only where the medians differ by more than the two "
            "IQRs together."
        )
    text = "\n".join(lines) + "\n"
    path = out / "compare.md"
    path.write_text(text)
    return path, text
