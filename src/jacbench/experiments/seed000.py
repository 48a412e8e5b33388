"""Seed 000: y.backward(ones) and functional.jacobian(f, x).sum(0) differ by ~1e-9 in
float32. Which is right?"""

from __future__ import annotations

import pandas as pd
import torch

from jacbench.experiments import MACHINE_EPS, jacobian, ok_rows, option, table


def answer(rows: pd.DataFrame) -> str:
    rows = ok_rows(rows)
    rows["reduce"] = [option(r, "model", "reduce", "none") for _, r in rows.iterrows()]
    backward = rows[(rows["reduce"] == "sum") & (rows["strategy"] == "autograd_loop")]
    full = rows[(rows["reduce"] == "none") & (rows["strategy"] == "functional")]
    lines, verdicts = [], []
    for dtype in ("float32", "float64"):
        diffs, err_backward, err_sum = [], [], []
        for _, b in backward[backward["dtype"] == dtype].iterrows():
            match = full[(full["dtype"] == dtype) & (full["seed"] == b["seed"])]
            reference = backward[(backward["dtype"] == "float64") & (backward["seed"] == b["seed"])]
            if match.empty or reference.empty:
                continue
            grad = jacobian(b).reshape(-1)
            summed = jacobian(match.iloc[0]).sum(0)
            ref = jacobian(reference.iloc[0]).reshape(-1)
            diffs.append(float((grad - summed).abs().max()))
            err_backward.append(float(b["err_eps"]))
            rel = float(torch.linalg.norm(summed - ref) / torch.linalg.norm(ref))
            err_sum.append(rel / MACHINE_EPS[dtype])
        if not diffs:
            continue
        lines.append(
            [
                dtype,
                str(len(diffs)),
                f"{max(diffs):.1e}",
                f"{max(err_backward):.2f}",
                f"{max(err_sum):.2f}",
            ]
        )
        verdicts.append(max(err_backward + err_sum))
    if not lines:
        return "seed000: no matching rows (need autograd_loop with reduce=sum and functional)."
    within = all(v <= 10 for v in verdicts)
    text = table(
        [
            "dtype",
            "points",
            "max |backward - jacobian.sum(0)|",
            "backward err [eps]",
            "jacobian.sum(0) err [eps]",
        ],
        lines,
    )
    return (
        "seed000: y.backward(ones) versus torch.autograd.functional.jacobian(f, x).sum(0)\n"
        f"{text}\n"
        "err [eps]: relative error against the float64 reference, in units of the dtype's "
        "machine epsilon.\n"
        + (
            "Answer: both are right to within rounding. backward(ones) sums the two output "
            "rows inside the backward pass, jacobian().sum(0) sums them afterwards: the same "
            "numbers added in another order, so they differ in the last bit or two (~1e-9 "
            "in float32), and the difference shrinks to ~1e-18 in float64."
            if within
            else "Answer: at least one of them is off by more than rounding (see the table)."
        )
    )
