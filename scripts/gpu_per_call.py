"""Per call on a GPU, against a hand-built ``torch.compile(torch.func.jacfwd(f))``.

Problems: seed004_lm (float32 and float64), ba1 (float64, GradBench's precision) and a 2x2
map (the map's dense family at N, M in {16, 1024}, float32). Ways, each checked against
the eager ``jacfwd`` before it is timed:

- ``hand``: ``torch.compile(torch.func.jacfwd(f))``, the form a PyTorch user would write;
- ``auto``: ``jacbench.prepare(f, x)`` settled in its last tier (``.settled()``);
- ``jacfwd_folded``: the compiled form auto's rule picks on the CPU (tangents folded into
  matrix products), and ``jacfwd_folded_fn`` the same without the library's wrapper
  (``Prepared.fn``: no point check, no finiteness check, no reshape);
- ``jacfwd_compiled``: jacbench's compiled ``jacfwd`` (no folding of tangents);
- ``jacfwd``: ``torch.func.jacfwd(f)`` eager.

Beside each time: the device kernels one call launches and the host's CPU time per call
(the work that queues them), from ``torch.profiler``.

Each time is the median of interleaved rounds by wall clock read after the device finished
each block (``jacbench.core.interleaved``). Before that, a fresh ``auto`` with
``patience=1`` is called until it answers from its last tier or ``--reach-s`` pass (0: not),
and the calls and wall seconds it took to reach each tier are printed: how far a user goes
before the settled figure applies. Results go to ``--out`` as JSON, one problem at a time.

Usage: python scripts/gpu_per_call.py [--out gpu_per_call.json] [--budget 0.5]
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

import jacbench
from jacbench.benchmark.problems import build_problem
from jacbench.core.interleaved import finished, seconds_per_call
from jacbench.run.config import conf_dir

BA1 = {"_target_": "jacbench.models.adbench.BundleAdjustment", "file": "ba1_n49_m7776_p31843.txt"}


def model(file: str, **changes: object) -> dict:
    return {**yaml.safe_load((conf_dir() / "model" / f"{file}.yaml").read_text()), **changes}


PROBLEMS: dict[str, tuple[dict, torch.dtype]] = {}
for n in (16, 1024):
    for m in (16, 1024):
        PROBLEMS[f"map_dense N={n} M={m} float32"] = (
            model("map_dense", n_in=n, n_out=m),
            torch.float32,
        )
PROBLEMS["ba1 float64"] = (BA1, torch.float64)
PROBLEMS["seed004_lm float32"] = (model("seed004_lm"), torch.float32)
PROBLEMS["seed004_lm float64"] = (model("seed004_lm"), torch.float64)


def dense(jac: torch.Tensor) -> torch.Tensor:
    return jac.to_dense() if jac.layout != torch.strided else jac


def reach(f: Callable, x: torch.Tensor, seconds: float) -> list[tuple[str, int, float]]:
    """(tier, calls, wall seconds) at each tier a fresh ``auto`` with ``patience=1`` answers
    from first (without patience auto stays in its first tier until ``.settled()``)."""
    start = time.perf_counter()
    prep, calls, reached = jacbench.prepare(f, x, patience=1.0), 0, []
    while time.perf_counter() - start < seconds:
        prep(x)
        calls += 1
        tier = prep.info.tier
        if not reached or reached[-1][0] != tier:
            finished(x.device)
            reached.append((tier, calls, time.perf_counter() - start))
            if tier == "compiled":
                break
    return reached


def ways(f: Callable, x: torch.Tensor, max_gb: float) -> tuple[dict[str, Callable], dict]:
    """Each way's call (checked against eager jacfwd where that fits) and notes."""
    notes: dict[str, object] = {}
    expected = None
    n_out = f(x).numel()
    fits = n_out * x.numel() * x.element_size() * 4 / 2**30 <= max_gb
    calls: dict[str, Callable] = {}
    start = time.perf_counter()
    auto = jacbench.prepare(f, x).settled()
    got = auto(x)
    finished(x.device)
    notes["auto_setup_s"] = time.perf_counter() - start
    notes["auto_chose"] = auto.info.chosen_strategy
    calls["auto"] = lambda: auto(x)
    if not fits:
        notes["dense"] = f"a dense {n_out}x{x.numel()} Jacobian does not fit {max_gb} GB x4"
        return calls, notes
    for name in ("jacfwd_folded", "jacfwd_compiled"):  # the rule's pick on the CPU; unfolded
        prep = jacbench.prepare(f, x, name)
        prep(x)
        calls[name] = functools.partial(prep, x)
    folded = calls["jacfwd_folded"].func
    flat = x.reshape(-1)
    calls["jacfwd_folded_fn"] = lambda: folded.fn(flat)  # without the library's wrapper
    eager = torch.func.jacfwd(f)
    expected = eager(x)
    scale = float(expected.abs().max())
    notes["auto_err"] = float((dense(got) - expected).abs().max()) / scale
    calls["jacfwd"] = lambda: eager(x)
    start = time.perf_counter()
    try:
        hand = torch.compile(torch.func.jacfwd(f))
        notes["hand_err"] = float((hand(x) - expected).abs().max()) / scale
        finished(x.device)
        notes["hand_setup_s"] = time.perf_counter() - start
        calls["hand"] = lambda: hand(x)
    except Exception as exc:  # the compiler fails on some models
        notes["hand"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return calls, notes


def launches(calls: dict[str, Callable], device: torch.device) -> tuple[dict, dict]:
    """Per way: the device kernels of one call, and the host's CPU ms per call (100 calls)."""
    from torch.profiler import ProfilerActivity, profile

    kernels, host = {}, {}
    for name, call in calls.items():
        activities = [ProfilerActivity.CUDA] if device.type == "cuda" else []
        with profile(activities=[ProfilerActivity.CPU, *activities]) as prof:
            call()
            finished(device)
        kinds = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kernels[name] = len(kinds)
        start = time.process_time()
        for _ in range(100):
            call()
        host[name] = (time.process_time() - start) / 100 * 1e3
        finished(device)
    return kernels, host


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_per_call.json"))
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per way and round set")
    parser.add_argument("--reach-s", type=float, default=20.0)
    parser.add_argument("--max-gb", type=float, default=40.0)
    parser.add_argument("--only", nargs="*", help="problem labels (default: all)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}; wall clock after the device finished")
    results: dict[str, dict] = {}
    for label, (cfg, dtype) in PROBLEMS.items():
        if args.only and label not in args.only:
            continue
        problem = build_problem(cfg, dtype, device, seed=0)
        f, x = problem.f, problem.x
        row: dict[str, object] = {"n": problem.n_in, "m": problem.n_out}
        row["reached"] = reach(f, x, args.reach_s) if args.reach_s > 0 else []
        calls, notes = ways(f, x, args.max_gb)
        row |= notes
        times = seconds_per_call(list(calls.values()), args.budget, 5, device)
        medians = dict(zip(calls, times, strict=True))
        row["ms"] = {k: v * 1e3 for k, v in medians.items()}
        if "hand" in medians:
            row["auto/hand"] = medians["auto"] / medians["hand"]
            row["jacfwd/hand"] = medians["jacfwd"] / medians["hand"]
        row["kernels"], row["host_ms"] = launches(calls, device)
        results[label] = row
        ms = "  ".join(f"{k} {v:.4f}" for k, v in row["ms"].items())
        ratio = f"auto/hand {row['auto/hand']:.2f}" if "auto/hand" in row else "no hand"
        reached = ", ".join(f"{t} at call {c} ({s:.1f} s)" for t, c, s in row["reached"])
        print(f"\n{label} (N={problem.n_in}, M={problem.n_out}): ms/call {ms}; {ratio}")
        print(
            f"  kernels per call {row['kernels']}; host CPU ms per call "
            + "  ".join(f"{k} {v:.3f}" for k, v in row["host_ms"].items())
        )
        print(f"  auto chose {notes['auto_chose']}; a fresh auto reached: {reached}")
        print(f"  notes: { {k: v for k, v in notes.items() if k != 'auto_chose'} }")
        args.out.write_text(json.dumps({"device": name, "torch": torch.__version__} | results))
        del calls, problem
        torch.cuda.empty_cache() if device.type == "cuda" else None


if __name__ == "__main__":
    main()
