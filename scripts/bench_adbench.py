"""The field's Jacobian problems (ADBench, via GradBench): bundle adjustment ba1-ba3 and hand
tracking c = 100 to 3200 (simple and complicated), float64, 1 thread, one process.

Per problem it prepares the best dense strategies (jacfwd, and jacfwd_compiled with
--compile; where the dense Jacobian takes at most --dense-max-gb: not on BA), the sparse ones
(sparse_jacfwd, eager and with --compile compiled; blocks_jacrev likewise where the model
declares local blocks: BA), ``auto`` (its defaults: its first tier)
and ``auto settled`` (every tier move made: what a long fit runs), all returning what auto
returns (the dense matrix, or CSR where it would not fit: BA, HT complicated c=3200), and
the peers where installed (``pip install "jax[cpu]" asdex``, optional; scripts/adbench_jax.py):
JAX the idiomatic way (BA: a per-observation function of its 15 unknowns, ``vmap(jacfwd)``
under ``jit``; HT: ``jit(jacfwd)``, the complicated u's per point) and asdex's
``jit(jacobian_from_coloring)`` (HT). It prints for each: setup + first call, the median CPU
time per call with its 95% interval, timed side by side (interleaved rounds; a call slower
than --alone-s is timed alone, twice, and marked so), the ratio to the fastest and to JAX,
colours against their lower bound, peak memory of one call (torch), and the error on a
sampled float64 reference (32 random columns by forward mode, 32 random rows by reverse
mode) in units of float64's eps, with the verdict (tolerance of exact strategies). The last
column is the ratio to the fastest figure GradBench publishes for the same file
(evals/{ba,ht}/summary.json at commit 0003df3e: another machine, so a scale, not a race).
With --first-call it runs ba1's first call (prepare + first Jacobian, CPU seconds above the
imports) in fresh processes, auto and JAX alternating. It ends with the targets of issues 31
and 43 and the machine's load.

Usage: python scripts/bench_adbench.py [--problems ba1,ht-simple-3200] [--rounds 6] [--compile]
       [--first-call 2]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from jacbench.benchmark.problems import build_problem
from jacbench.benchmark.reference import sampled_entries, sampled_reference
from jacbench.core import sparsity
from jacbench.core.numerics import tolerance
from jacbench.core.problem import Problem
from jacbench.core.registry import load_registry
from jacbench.core.strategy import Kind
from jacbench.models.adbench import BundleAdjustment
from jacbench.models.hand_tracking import HandTracking
from jacbench.strategies.auto import too_large
from jacbench.timing.measure import peak_memory, side_by_side

sys.path.insert(0, str(Path(__file__).parent))
import adbench_jax  # noqa: E402  (beside this script: the optional JAX peers)

CPU = torch.device("cpu")
BA = "jacbench.models.adbench.BundleAdjustment"
HT = "jacbench.models.hand_tracking.HandTracking"
HANDS = {100: "hand1_t26_c100.txt", 200: "hand3_t26_c200.txt", 400: "hand4_t26_c400.txt"}
HANDS |= {800: "hand5_t26_c800.txt", 3200: "hand7_t26_c3200.txt"}
BA_FILES = {
    "ba1": "ba1_n49_m7776_p31843.txt",
    "ba2": "ba2_n21_m11315_p36455.txt",
    "ba3": "ba3_n161_m48126_p182072.txt",
}
# GradBench's fastest published Jacobian per file, seconds (summary.json, commit 0003df3e):
# BA: enzyme; HT: the fastest AD tool (adol-c) and the hand-written one ("manual"). The HT
# summary names files, not variants.
GRADBENCH = {
    "ba1": ("enzyme", 7.749e-3),
    "ba2": ("enzyme", 8.920e-3),
    "ba3": ("enzyme", 47.67e-3),
}
GRADBENCH_HT = {
    100: ("adol-c", 82.86e-3),
    200: ("adol-c", 83.83e-3),
    400: ("adol-c", 82.92e-3),
    800: ("adol-c", 83.69e-3),
    3200: ("adol-c", 84.68e-3),
}
MANUAL_HT = {100: 13.73e-3, 200: 14.10e-3, 400: 13.79e-3, 800: 14.92e-3, 3200: 15.10e-3}


def problems(selected: set[str] | None) -> dict[str, dict]:
    out = {name: {"_target_": BA, "file": f} for name, f in BA_FILES.items()}
    for variant in ("simple", "complicated"):
        for c, f in HANDS.items():
            out[f"ht-{variant}-{c}"] = {"_target_": HT, "variant": variant, "file": f}
    return {k: v for k, v in out.items() if not selected or k in selected}


def contenders(problem: Problem, compile: bool, dense_max_gb: float) -> dict[str, tuple[str, dict]]:
    """label -> (strategy, options). Sparse ones return what ``auto`` returns (the dense
    matrix, or CSR where a dense reference would not fit); dense ones run where the dense
    float64 Jacobian takes at most ``dense_max_gb`` (not on BA: tens of GB)."""
    out: dict[str, tuple[str, dict]] = {}
    if problem.n_out * problem.n_in * 8 <= dense_max_gb * 2**30:
        out["jacfwd"] = ("jacfwd", {})
        if compile:
            out["jacfwd_compiled"] = ("jacfwd_compiled", {})
    csr = too_large(problem)
    sparse = {"output": "csr"} if csr else {}
    out["sparse_jacfwd" + ("[csr]" if csr else "")] = ("sparse_jacfwd", sparse)
    if compile:
        label = "sparse_jacfwd[compile" + (",csr]" if csr else "]")
        out[label] = ("sparse_jacfwd", {**sparse, "compile": True})
    if problem.blocks is not None:  # declared local blocks (BA's observations)
        out["blocks_jacrev" + ("[csr]" if csr else "")] = ("blocks_jacrev", sparse)
        if compile:
            label = "blocks_jacrev[compile" + (",csr]" if csr else "]")
            out[label] = ("blocks_jacrev", {**sparse, "compile": True})
    out["auto"] = ("auto", {})
    out[SETTLED] = ("auto", {})
    return out


SETTLED = "auto settled"  # auto after every tier move (prep.settled())


def _blocked_call(jac: Callable, x: object) -> object:
    return adbench_jax.blocked(jac(x))


def peers(name: str, cfg: dict, problem: Problem) -> dict[str, dict]:
    """label -> {"call", "first_s", "colours", "answer"} of JAX (and asdex on HT) on the
    same function, where installed; first_s: jit compile + first call, CPU seconds."""
    if not adbench_jax.available():
        return {}
    out: dict[str, dict] = {}
    if name.startswith("ba"):
        model = BundleAdjustment(cfg["file"])
        for form in adbench_jax.BA_FORMS:
            label = f"jax {form}"
            start = time.process_time()
            jac, x = adbench_jax.ba(model, form)
            adbench_jax.blocked(jac(x))
            first = time.process_time() - start
            call = functools.partial(_blocked_call, jac, x)
            out[label] = {"call": call, "first_s": first}
        return out
    model = HandTracking(cfg["variant"], cfg["file"])
    start = time.process_time()
    jac, x, objective = adbench_jax.ht(model, dense=not too_large(problem))
    answer = adbench_jax.blocked(jac(x))
    first = time.process_time() - start
    label = "jax jit(jacfwd)"
    out[label] = {"call": lambda: adbench_jax.blocked(jac(x)), "first_s": first}
    if not too_large(problem) and not isinstance(answer, tuple):
        out[label]["answer"] = torch.from_numpy(np.asarray(answer))
    try:
        import asdex  # noqa: F401
    except ImportError:
        return out
    start = time.process_time()
    fast, colours, _ = adbench_jax.asdex_jacobian(objective, x)
    adbench_jax.blocked(fast(x))
    out["asdex jit"] = {
        "call": lambda: adbench_jax.blocked(fast(x)),
        "first_s": time.process_time() - start,
        "colours": colours,
    }
    return out


def error_eps(answer: object, problem: Problem, sample) -> float:
    got = sampled_entries(answer, sample, (problem.n_out, problem.n_in))
    expected = sample.expected()
    scale = float(expected.abs().max()) or 1.0
    return float((got - expected).abs().max()) / scale / torch.finfo(torch.float64).eps


def published(name: str) -> tuple[str, float] | None:
    if name.startswith("ba"):
        return GRADBENCH.get(name)
    return GRADBENCH_HT.get(int(name.rsplit("-", 1)[1]))


def run_problem(name: str, cfg: dict, args: argparse.Namespace) -> tuple[dict[str, dict], int]:
    """Each contender's figures (by label), and the colour bound."""
    problem = build_problem(cfg, torch.float64, CPU, 0)
    pattern = sparsity.from_tensor(problem.sparsity(), (problem.n_out, problem.n_in))
    bound = sparsity.lower_bound(pattern)
    dense_gb = problem.n_out * problem.n_in * 8 / 2**30
    print(
        f"\n== {name}: {problem.n_out} x {problem.n_in} (dense float64 {dense_gb:.2f} GB), "
        f"{pattern.nnz} nonzeros declared, colour bound {bound} (declared)"
    )
    sample = sampled_reference(problem)
    registry, x, rows = load_registry(), problem.x, {}
    tol = tolerance(torch.float64, Kind.EXACT) / torch.finfo(torch.float64).eps
    for label, (strategy, options) in contenders(problem, args.compile, args.dense_max_gb).items():
        start = time.process_time()
        prep = registry.prepare(strategy, problem, **options)
        if label == SETTLED:
            prep = prep.settled()
        answer = prep(x)
        first = time.process_time() - start
        start = time.perf_counter()
        prep(x)
        second = time.perf_counter() - start
        err = error_eps(answer, problem, sample)
        del answer
        info = prep.info
        rows[label] = {
            "prep": prep,
            "call": lambda p=prep: p(x),
            "first_s": first,
            "second_s": second,
            "colours": info.n_colors,
            "chose": f"{info.chosen_strategy or ''} {info.tier or ''}".strip(),
            "mem": peak_memory(lambda p=prep: p(x), CPU),
            "err_eps": err,
            "verdict": "exact" if err <= tol else "WRONG",
        }
    for label, peer in peers(name, cfg, problem).items():
        answer = peer.get("answer")
        err = error_eps(answer, problem, sample) if answer is not None else float("nan")
        verdict = ("exact" if err <= tol else "WRONG") if answer is not None else "-"
        rows[label] = {
            "call": peer["call"],
            "first_s": peer["first_s"],
            "second_s": 0.0,
            "colours": peer.get("colours", 0),
            "chose": "",
            "mem": float("nan"),
            "err_eps": err,
            "verdict": verdict,
        }
    alone = {k for k, r in rows.items() if r["second_s"] > args.alone_s}
    for label in alone:  # too slow to interleave: two calls on their own
        calls = []
        for _ in range(2):
            start = time.process_time()
            rows[label]["call"]()
            calls.append(time.process_time() - start)
        rows[label] |= {"median": statistics.median(calls), "low": min(calls), "high": max(calls)}
        rows[label]["alone"] = True
    timed = side_by_side(
        {k: r["call"] for k, r in rows.items() if k not in alone}, rounds=args.rounds
    )
    for label, t in timed.items():  # CPU time: the load of other processes stays out
        rows[label] |= {"median": t.cpu_median_s, "low": t.cpu_ci_low_s, "high": t.cpu_ci_high_s}
    best = min(r["median"] for r in rows.values())
    jax = min((r["median"] for k, r in rows.items() if k.startswith("jax")), default=None)
    ref = published(name)
    print(
        f"{'strategy':30} {'first call':>10} {'median [95% CI] ms (CPU)':>28} {'x best':>7} "
        f"{'x JAX':>6} {'colours':>9} {'peak MiB':>9} {'err eps':>8}  verdict  {'x GradBench':>11}"
    )
    for label, r in rows.items():
        colours = f"{r['colours']}/{bound}" if r["colours"] else "-"
        ms = f"{r['median'] * 1e3:.3g} [{r['low'] * 1e3:.3g}-{r['high'] * 1e3:.3g}]"
        if r.get("alone"):
            ms += " alone"
        chose = f" ({r['chose']})" if r["chose"] else ""
        vs = f"{r['median'] / ref[1]:.2f}x" if ref else "-"
        vs_jax = f"{r['median'] / jax:.2f}" if jax else "-"
        print(
            f"{(label + chose)[:30]:30} {r['first_s']:>9.2f}s {ms:>28} "
            f"{r['median'] / best:>6.2f}x {vs_jax:>6} {colours:>9} {r['mem'] / 2**20:>9.1f} "
            f"{r['err_eps']:>8.2f}  {r['verdict']:7}  {vs:>11}"
        )
    if ref:
        extra = ""
        if not name.startswith("ba"):
            manual = MANUAL_HT[int(name.rsplit("-", 1)[1])]
            extra = f"; the hand-written Jacobian: {manual * 1e3:.1f} ms"
        print(f"GradBench's fastest: {ref[0]} {ref[1] * 1e3:.1f} ms{extra}")
    for r in rows.values():
        r.pop("prep", None)
        r.pop("call", None)
    return rows, bound


def checks(results: dict[str, tuple[dict[str, dict], int]]) -> None:
    """Issue 31's targets, where the problem was run."""
    print("\n== targets (issue 31)")
    ba1, ba1_bound = results.get("ba1", ({}, 0))
    if ba1:
        s = min((r for k, r in ba1.items() if k.startswith("sparse")), key=lambda r: r["median"])
        print(
            f"ba1 best sparse: {s['median']:.3f} s a call (target < 0.25), first call "
            f"{s['first_s']:.1f} s (target < 10), peak {s['mem'] / 2**20:.0f} MiB (< 1024), "
            f"colours {s['colours']} vs bound {ba1_bound}; auto chose "
            f"{ba1['auto']['chose']}"
        )
    simple, _ = results.get("ht-simple-3200", ({}, 0))
    if simple:
        best = min(r["median"] for k, r in simple.items() if k != "auto")
        print(
            f"ht simple c=3200: auto {simple['auto']['median'] / best:.2f}x the best other "
            f"(target <= 1.2), chose {simple['auto']['chose']}, first call "
            f"{simple['auto']['first_s']:.1f} s"
        )
    hard, hard_bound = results.get("ht-complicated-3200", ({}, 0))
    if hard:
        dense = [r["median"] for k, r in hard.items() if k.startswith("jacfwd")]
        sparse = min(r["median"] for k, r in hard.items() if k.startswith("sparse"))
        versus = f"{min(dense) / sparse:.0f}x" if dense else "(no dense run: --dense-max-gb)"
        print(
            f"ht complicated c=3200: best sparse {versus} faster than the best dense "
            f"(target >= 30); auto chose {hard['auto']['chose']} with "
            f"{hard['auto']['colours']} colours (bound {hard_bound})"
        )
    print("\n== targets (issue 43): per call against JAX (CPU time, side by side)")
    for name, (rows, _) in results.items():
        jaxes = [r for k, r in rows.items() if k.startswith("jax")]  # its best form
        jax = min(jaxes, key=lambda r: r["median"]) if jaxes else None
        if jax is None or SETTLED not in rows:
            continue
        auto, first = rows[SETTLED], rows["auto"]
        asdex = rows.get("asdex jit", {}).get("colours")
        colours = f"; colours {first['colours']} (asdex {asdex})" if asdex else ""
        print(
            f"{name}: auto settled {auto['median'] / jax['median']:.2f}x JAX (target <= 1.0; "
            f"{auto['chose']}), auto's first tier {first['median'] / jax['median']:.2f}x"
            f"{colours}"
        )
    load = os.getloadavg()
    print(f"machine load (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


FIRST_CALL = """
import os, sys, time
sys.path.insert(0, {scripts!r})
import torch
torch.set_num_threads(1)
from jacbench.models.adbench import BundleAdjustment
model = BundleAdjustment({file!r}).double()
if {kind!r} == "jax":
    import adbench_jax, jax
    start = time.process_time()
    jac, x = adbench_jax.ba(model)
    adbench_jax.blocked(jac(x))
else:
    import jacbench
    x = model.sample_input(None)
    start = time.process_time()
    jacbench.prepare(model, x)(x)
print(time.process_time() - start)
"""


def first_calls(file: str, times: int) -> None:
    """Prepare + first Jacobian of ba1 in fresh processes (CPU seconds above the imports of
    torch and of JAX), auto and JAX alternating."""
    kinds = ["auto"] + (["jax"] if adbench_jax.available() else [])
    seconds: dict[str, list[float]] = {k: [] for k in kinds}
    env = {**os.environ, "JACBENCH_CACHE_DIR": ""}  # nothing remembered from earlier runs
    for _ in range(times):
        for kind in kinds:
            code = FIRST_CALL.format(scripts=str(Path(__file__).parent), file=file, kind=kind)
            out = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
            )
            seconds[kind].append(float(out.stdout.split()[-1]))
    line = ", ".join(f"{k} {' '.join(f'{s:.2f}' for s in v)}" for k, v in seconds.items())
    print(f"\n== ba1 first call in fresh processes (CPU-s above the imports): {line}")
    if "jax" in seconds:
        ratio = statistics.median(seconds["auto"]) / statistics.median(seconds["jax"])
        print(f"ba1 first call: auto {ratio:.2f}x JAX (target <= 1.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="", help="comma-separated, e.g. ba1,ht-simple-3200")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--alone-s", type=float, default=1.0)
    parser.add_argument("--dense-max-gb", type=float, default=1.0, help="dense strategies up to")
    parser.add_argument("--compile", action="store_true", help="add the compiled strategies")
    parser.add_argument("--first-call", type=int, default=0, help="fresh processes for ba1")
    args = parser.parse_args()
    torch.set_num_threads(1)
    peer = "JAX " + __import__("jax").__version__ if adbench_jax.available() else "no JAX"
    print(f"torch {torch.__version__}, {peer}, float64, 1 thread, CPU time")
    selected = {p for p in args.problems.split(",") if p} or None
    results = {name: run_problem(name, cfg, args) for name, cfg in problems(selected).items()}
    checks(results)
    if args.first_call:
        first_calls(BA_FILES["ba1"], args.first_call)


if __name__ == "__main__":
    main()
