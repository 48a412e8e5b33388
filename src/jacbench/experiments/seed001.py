"""Seed 001: a finite-difference check of a summed MSE over 140x120 inputs gives garbage in
float32 (ratios 0, 0.66, 4.0) but agrees in float64. Can it be trusted?"""

from __future__ import annotations

import math

import pandas as pd

from jacbench.experiments import MACHINE_EPS, ok_rows, option, table

METHODS = {"fd_forward": ("forward", 1 / 2), "fd_central": ("central", 1 / 3)}


def _spacing(value: float, dtype: str) -> float:
    """Distance between adjacent floats of this dtype near ``value`` (one ulp)."""
    return 2.0 ** math.floor(math.log2(abs(value))) * MACHINE_EPS[dtype]


def answer(rows: pd.DataFrame) -> str:
    rows = ok_rows(rows[rows["strategy"].isin(list(METHODS))])
    if rows.empty:
        return "seed001: no finite-difference rows recorded."
    rows["eps"] = [option(r, "strategy", "eps") for _, r in rows.iterrows()]
    rows = rows.dropna(subset=["eps"])
    eps_grid = sorted(rows["eps"].unique(), reverse=True)
    curve, best = [], []
    for (dtype, strategy), group in rows.groupby(["dtype", "strategy"]):
        errors = dict(zip(group["eps"], group["rel_err"], strict=True))
        curve.append(
            [dtype, METHODS[strategy][0]]
            + [f"{errors[e]:.0e}" if e in errors else "-" for e in eps_grid]
        )
        winner = group.loc[group["rel_err"].idxmin()]
        power = METHODS[strategy][1]
        scale = float(group["out_norm"].iloc[0])
        best.append(
            [
                dtype,
                METHODS[strategy][0],
                f"{winner['eps']:.0e}",
                f"{winner['rel_err']:.1e}",
                f"{MACHINE_EPS[dtype] ** power:.0e}",
                f"{(MACHINE_EPS[dtype] * scale) ** power:.0e}",
            ]
        )
    lines = [
        "seed001: finite-difference error (rel_err) versus the step eps, "
        f"x -> MSELoss(sum) over N={int(rows['n_in'].iloc[0])} inputs",
        table(["dtype", "method", *[f"{e:.0e}" for e in eps_grid]], curve),
        "",
        table(
            ["dtype", "method", "best eps", "its rel_err", "textbook eps", "textbook x |f| scaled"],
            best,
        ),
        "textbook: sqrt(machine eps) for forward, cbrt(machine eps) for central differences, "
        "which assume |f| ~ 1; scaled: (machine eps * |f|)^(1/2 or 1/3) for this loss |f|.",
    ]
    forward = rows[rows["strategy"] == "fd_forward"]
    seed = forward[(forward["dtype"] == "float32") & (forward["eps"] == 1e-3)]
    double = forward[(forward["dtype"] == "float64") & (forward["eps"] == 1e-3)]
    if not seed.empty:
        row = seed.iloc[0]
        loss, n = float(row["out_norm"]), int(row["n_in"])
        spacing = _spacing(loss, "float32")
        grad = float(row["ref_norm"]) / math.sqrt(n)
        lines += [
            "",
            f"Why eps=1e-3 fails in float32: the loss sums {n} terms to |f| = {loss:.4g}, where "
            f"adjacent float32 numbers are {spacing:.3g} apart. A step of 1e-3 changes the loss "
            f"by about |g| * 1e-3 = {grad * 1e-3:.2g} (|g| ~ {grad:.2g}), "
            f"{grad * 1e-3 / spacing:.2g} of that spacing: relative to the loss that is "
            f"{grad * 1e-3 / loss:.1e}, the size of float32's epsilon "
            f"({MACHINE_EPS['float32']:.1e}). So each difference quotient is a multiple of "
            f"{spacing / 1e-3:.4g} (the thread's 1.9531 and 0) and rel_err = "
            f"{row['rel_err']:.2f}."
            + (
                f" In float64 the spacing is {_spacing(loss, 'float64'):.1e} and the same step "
                f"gives rel_err = {double.iloc[0]['rel_err']:.1e}."
                if not double.empty
                else ""
            ),
        ]
    forward32 = forward[forward["dtype"] == "float32"]
    best32 = ""
    if not forward32.empty:
        best = forward32.loc[forward32["rel_err"].idxmin()]
        best32 = (
            f" In float32 even the best forward step (eps={best['eps']:.0e}) is off by "
            f"{best['rel_err']:.1e}."
        )
    lines.append(
        "Answer: the gradient is right; the check is not. A difference check of a large sum "
        "loses its digits to rounding: it needs float64, a step sized to the loss (the "
        "scaled column), or central differences (exact for this quadratic, so the largest "
        "step wins)." + best32
    )
    return "\n".join(lines)
