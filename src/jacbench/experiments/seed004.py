"""Seed 004: for Levenberg-Marquardt (N=84 parameters, M=576 residuals)
autograd.functional.jacobian is 7-10x slower than finite differences. Which way to use?"""

from __future__ import annotations

import pandas as pd

from jacbench.core.enums import Kind
from jacbench.experiments import ok_rows, table
from jacbench.timing.noise import unsettled

BASELINE = "fd_forward_loop"  # the thread's baseline: one forward pass per parameter


def answer(rows: pd.DataFrame) -> str:
    rows = ok_rows(rows)
    text, winners = [], []
    for model, group in rows.groupby("model"):
        group = group.sort_values("time_median_s")
        base = group[group["strategy"] == BASELINE]
        if base.empty:
            continue
        t0 = float(base["time_median_s"].iloc[0])
        n, m = int(group["n_in"].iloc[0]), int(group["n_out"].iloc[0])
        lines = [
            [
                r["strategy"],
                r["strategy_kind"],
                r["strategy_mode"],
                f"{r['time_median_s'] * 1e3:.3f}",
                f"{r['time_median_s'] / t0:.2f}",
                f"{r['rel_err']:.1e}",
                "yes" if r["within_tol"] else "NO",
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
                    "median [ms]",
                    f"time / {BASELINE}",
                    "rel_err",
                    "within tol",
                ],
                lines,
            ),
        ]
        functional = group[group["strategy"] == "functional"]
        if not functional.empty:
            ratio = float(functional["time_median_s"].iloc[0]) / t0
            text.append(f"functional / {BASELINE} = {ratio:.1f}x (the thread: 7-8x)")
        if not exact.empty:
            best = exact.iloc[0]
            mode = f"{best['strategy_mode']} mode"
            if best["chosen_strategy"]:
                mode = f"auto chose {best['chosen_strategy']}"
            modes = exact.groupby("strategy_mode")["time_median_s"].min()
            fwd, rev = modes.get("forward"), modes.get("reverse")
            line = (
                f"fastest exact: {best['strategy']} ({mode}), "
                f"{best['time_median_s'] / t0:.2f}x the forward-difference loop"
            )
            if fwd is not None and rev is not None:
                line += f"; best forward / best reverse = {fwd / rev:.2f}"
            batched = group[group["strategy"] == "fd_forward"]
            if not batched.empty:
                share = float(batched["time_median_s"].iloc[0]) / t0
                line += f"; the batched forward difference takes {share:.2f}x the loop"
            if len(exact) > 1 and (why := unsettled(best, exact.iloc[1])):
                line += f"; not settled against {exact.iloc[1]['strategy']}: {why}"
                mode += f", tied with {exact.iloc[1]['strategy']} within the noise"
            text.append(line)
            winners.append(f"{model} (M/N = {m / n:.1f}): {best['strategy']} ({mode})")
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
