"""Seed 004: for Levenberg-Marquardt (N=84 parameters, M=576 residuals)
autograd.functional.jacobian is 7-10x slower than finite differences. Which way to use?"""

from __future__ import annotations

import pandas as pd

from jacbench.core.enums import Kind
from jacbench.experiments import ranked, table
from jacbench.report.analysis import disagreement
from jacbench.report.display import (
    ROUND_COLUMN,
    UNSETTLED_RATIO,
    legend_if_unsettled,
    ratio_phrase,
    ratio_text,
    round_text,
    rounds_differ,
    time_text,
)
from jacbench.timing.rule import unsettled

BASELINE = "fd_forward_loop"  # the thread's baseline: one forward pass per parameter


def answer(rows: pd.DataFrame) -> str:
    rows = ranked(rows)
    text, winners = [], []
    for model, group in rows.groupby("model"):
        base = group[group["strategy"] == BASELINE]
        if base.empty:
            continue
        t0 = base.iloc[0]
        n, m = int(group["n_in"].iloc[0]), int(group["n_out"].iloc[0])
        with_round = rounds_differ(group)
        lines = [
            [
                r["label"],
                r["strategy_kind"],
                r["strategy_mode"],
                time_text(r),
                ratio_text(r, t0),
                f"{r['rel_err']:.1e}",
                "yes" if r["within_tol"] else "NO",
                *([round_text(r)] if with_round else []),
            ]
            for _, r in group.iterrows()
        ]
        exact = group[(group["strategy_kind"] == Kind.EXACT) & group["within_tol"].astype(bool)]
        text += [
            f"{model}: N={n} inputs (parameters), M={m} outputs, {group['dtype'].iloc[0]}",
            table(
                [
                    "strategy",
                    "kind",
                    "mode",
                    "median [95% interval]",
                    f"time / {BASELINE}",
                    "rel_err",
                    "within tol",
                    *([ROUND_COLUMN] if with_round else []),
                ],
                lines,
            ),
            *legend_if_unsettled(lines, 4),
        ]
        functional = group[group["strategy"] == "functional"]
        if not functional.empty:
            ratio = ratio_text(functional.iloc[0], t0)
            if ratio == UNSETTLED_RATIO:
                text.append(f"functional against {BASELINE}: not settled (the thread: 7-8x)")
            else:
                text.append(f"functional takes {ratio} x {BASELINE} (the thread: 7-8x)")
        if not exact.empty:
            best = exact.iloc[0]
            mode = f"{best['strategy_mode']} mode"
            if best["chosen_strategy"]:
                mode = f"auto chose {best['chosen_strategy']}"
            fastest = exact.groupby("strategy_mode").head(1).set_index("strategy_mode")
            line = (
                f"fastest exact: {best['label']} ({mode}), "
                f"{ratio_phrase(best, t0, 'the forward-difference loop')}"
            )
            if {"forward", "reverse"} <= set(fastest.index):
                ratio = ratio_phrase(fastest.loc["forward"], fastest.loc["reverse"], "best reverse")
                line += f"; best forward: {ratio}"
            batched = group[group["strategy"] == "fd_forward"]
            if not batched.empty:
                share = ratio_phrase(batched.iloc[0], t0, "the loop")
                line += f"; the batched forward difference takes {share}"
            if len(exact) > 1:
                runner = exact.iloc[1]
                if why := disagreement(best, runner) or unsettled(best, runner):
                    line += f"; not settled against {runner['label']}: {why}"
                    mode += f", not settled against {runner['label']}"
            text.append(line)
            winners.append(f"{model} (M/N = {m / n:.1f}): {best['label']} ({mode})")
        text.append("")
    if not text:
        return f"seed004: no rows with the {BASELINE} baseline recorded."
    text.append(
        "Answer: functional.jacobian's default runs one backward pass per output (M of them) "
        "in a Python loop, while a forward difference needs one forward pass per input (N): "
        "with M > N it loses. Forward mode needs the same N passes as the difference but is "
        "exact, and the vectorised (vmap) strategies (jacfwd, jacrev, grads_batched, "
        "functional with vectorize=True) batch the passes instead of looping, which beats "
        "the loop outright; compiling them (jacfwd_compiled, or auto) removes most of what "
        "is left. Fastest exact strategy measured here: " + "; ".join(winners) + ". "
        "Forward mode pays off when M is much larger than N; at small sizes the overheads "
        "decide, so measure your shape (or let strategy=auto do it)."
    )
    return "\n".join(text)
