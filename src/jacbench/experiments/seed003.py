"""Seed 003: one torch.autograd.grad call over all outputs returns every Jacobian row as the
sum of the rows. Why, and what is the fast correct way?"""

from __future__ import annotations

import pandas as pd

from jacbench.core.enums import Kind
from jacbench.experiments import jacobian, ranked, table
from jacbench.report.display import (
    ROUND_COLUMN,
    legend_if_unsettled,
    ratio_text,
    round_text,
    rounds_differ,
    time_text,
)
from jacbench.timing.rule import unsettled


def answer(rows: pd.DataFrame) -> str:
    rows = ranked(rows)
    if rows.empty:
        return "seed003: no rows recorded."
    loop = rows[rows["strategy"] == "autograd_loop"]
    base = loop.iloc[0] if not loop.empty else None
    with_round = rounds_differ(rows)
    lines = [
        [
            r["label"],
            r["dtype"],
            "yes" if r["within_tol"] else "NO (wrong)",
            f"{r['rel_err']:.1e}",
            time_text(r),
            "-" if base is None else ratio_text(r, base),
            *([round_text(r)] if with_round else []),
        ]
        for _, r in rows.iterrows()
    ]
    header = ["strategy", "dtype", "correct", "rel_err", "median [95% interval]", "time / loop"]
    text = [
        "seed003: q in R^2 -> cat([2q, 4q*q]), Jacobian 4x2",
        table(header + ([ROUND_COLUMN] if with_round else []), lines),
        *legend_if_unsettled(lines, 5),
    ]
    naive = rows[rows["strategy"] == "naive_single_grad"]
    correct = rows[rows["within_tol"].astype(bool) & (rows["strategy_kind"] == Kind.EXACT)]
    if not naive.empty and naive["jacobian"].notna().iloc[0]:
        wrong = jacobian(naive.iloc[0])
        text.append(
            f"naive_single_grad returned rows {wrong[0].tolist()} (each = the sum of "
            "the true rows)."
        )
    fastest = correct.iloc[0]["label"] if not correct.empty else "?"
    if len(correct) > 1 and (why := unsettled(correct.iloc[0], correct.iloc[1])):
        fastest += f" (not settled against {correct.iloc[1]['label']}: {why})"
    text.append(
        "Answer: grad(outputs, inputs) adds up the contributions of all outputs to each input "
        "(it computes the vector-Jacobian product with a vector of ones), so asking once for "
        "all rows gives their sum, however the outputs are split. The correct one-call ways "
        "batch the vectors instead: torch.autograd.grad(y, x, eye, is_grads_batched=True) "
        f"(grads_batched) or torch.func.jacrev; the fastest correct one here was {fastest}."
    )
    return "\n".join(text)
