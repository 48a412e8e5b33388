"""Seed 002: autograd's gradient of 1/x differs from the hand formula -1/x**2 by 6e-8.
Who is wrong?"""

from __future__ import annotations

import pandas as pd

from jacbench.experiments import jacobian, ok_rows, table


def answer(rows: pd.DataFrame) -> str:
    rows = ok_rows(rows)
    lines, worst = [], 0.0
    for dtype, group in rows.groupby("dtype"):
        by_strategy = {s: g for s, g in group.groupby("strategy")}
        diff = "-"
        if {"analytic", "autograd_loop"} <= set(by_strategy):
            formula = by_strategy["analytic"].sort_values("seed")
            autograd = by_strategy["autograd_loop"].sort_values("seed")
            diffs = [
                float((jacobian(a) - jacobian(b)).abs().max())
                for (_, a), (_, b) in zip(formula.iterrows(), autograd.iterrows(), strict=False)
                if a["seed"] == b["seed"]
            ]
            diff = f"{max(diffs):.1e}" if diffs else "-"
        for strategy, g in sorted(by_strategy.items()):
            worst = max(worst, float(g["err_eps"].max()))
            lines.append(
                [
                    dtype,
                    strategy,
                    str(len(g)),
                    f"{g['err_eps'].max():.2f}",
                    f"{g['max_abs_err'].max():.1e}",
                    diff,
                ]
            )
    if not lines:
        return "seed002: no rows recorded."
    return "\n".join(
        [
            "seed002: d(1/x)/dx by autograd and by the hand formula -1/x**2, against the float64 "
            "analytic value",
            table(
                [
                    "dtype",
                    "strategy",
                    "points",
                    "max err [eps]",
                    "max abs err",
                    "max |formula - autograd|",
                ],
                lines,
            ),
            (
                f"Answer: neither is wrong: both are within {worst:.2g} rounding units of the "
                "exact value. Autograd evaluates -(1/x)*(1/x) from the forward result while the "
                "formula computes -1/(x*x): two roundings in another order, so the last bit can "
                "differ "
                "(6e-8 is one float32 ulp near 1)."
                if worst <= 4
                else f"Answer: an error of {worst:.3g} rounding units is more than rounding: look."
            ),
        ]
    )
