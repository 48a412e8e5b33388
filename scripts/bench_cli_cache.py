"""Does a second CLI run of the same job reuse what the first compiled? CPU-s per fresh run.

Runs ``python -m jacbench strategy=auto model=seed004_lm`` (the default tiered ``auto``: the
runner settles it, so the job compiles its last tier) in fresh processes, in alternating
rounds, pinned to one core (``--core``), one thread:
- ``floor``: the same job with ``strategy=jacfwd`` (nothing compiled);
- ``cold``: ``auto`` with empty cache folders (``JACBENCH_CACHE_DIR`` and
  ``TORCHINDUCTOR_CACHE_DIR`` new for the run);
- ``warm``: ``auto`` with the folders of an earlier run of the same job (inductor's FX graph
  cache, read through torch's public ``standalone_compile``);
- ``off``: ``auto`` with ``JACBENCH_CACHE_DIR=""`` (jacbench remembers nothing);
- ``warm_isa_ok``: ``warm`` with ``TORCHINDUCTOR_VEC_ISA_OK=1`` (folders of its own), torch's
  documented switch that skips inductor's CPU-ISA probes (child processes that each process
  runs again, cached graph or not; docs/library.md, "Upstream reports in waiting"): a user's
  choice, which jacbench does not make for them.
Plus ``torch_load``: what torch alone costs to load one compiled graph from a warm inductor
cache in a fresh process (``import torch._inductor``, its CPU-ISA probes, the precompiled
header's check; a one-op graph) above ``dynamo`` (the import of torch and torch._dynamo,
which the floor's first ``torch.func`` call pays too): the part of ``warm`` no caller of
inductor's cache avoids.

CPU time is the run's own and its children's (the compiler and inductor's probes are
subprocesses); wall time beside it. The load is printed. Target (issue 43): warm <= 1.5x
floor.

Usage: python scripts/bench_cli_cache.py [--rounds 3] [--core 0]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = ["model=seed004_lm"]
TORCH_LOAD = """
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from jacbench.core import torch_internals

x = torch.ones(8, dtype=torch.float64)
graph = make_fx(lambda v: (v.tanh() * 2.0,))(x)
torch_internals.inductor_compile(graph, x, {})(x)
"""
IMPORT = "import torch, jacbench.core.torch_internals"
DYNAMO = IMPORT + ", torch._dynamo"  # the floor's first torch.func call imports it too


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(argv: list[str], env: dict[str, str], cwd: Path, core: int) -> tuple[float, float]:
    """(CPU-s, wall-s) of one fresh process and its children, pinned to ``core``."""
    before_cpu, before_wall = children_cpu(), time.perf_counter()
    done = subprocess.run(
        ["taskset", "-c", str(core), sys.executable, *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    cpu, wall = children_cpu() - before_cpu, time.perf_counter() - before_wall
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return cpu, wall


def environment(jacbench_cache: str, inductor_cache: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["JACBENCH_CACHE_DIR"] = jacbench_cache
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--core", type=int, default=0, help="the core every run is pinned to")
    args = parser.parse_args()
    cli = ["-m", "jacbench"]
    with tempfile.TemporaryDirectory(prefix="jacbench-cli-cache-") as tmp:
        root = Path(tmp)
        warm_dir = root / "warm"
        warm_env = environment(str(warm_dir / "jacbench"), warm_dir / "inductor")
        isa_dir = root / "warm_isa_ok"
        isa_env = environment(str(isa_dir / "jacbench"), isa_dir / "inductor")
        isa_env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
        for env in (warm_env, isa_env):  # primes the folders
            run([*cli, "strategy=auto", *JOB], env, root, args.core)
        run(["-c", TORCH_LOAD], warm_env, root, args.core)
        times: dict[str, list[tuple[float, float]]] = {}
        for r in range(args.rounds):
            fresh = root / f"cold{r}"
            ways = {
                "floor": ([*cli, "strategy=jacfwd", *JOB], environment("", root / "none")),
                "cold": (
                    [*cli, "strategy=auto", *JOB],
                    environment(str(fresh / "jacbench"), fresh / "inductor"),
                ),
                "warm": ([*cli, "strategy=auto", *JOB], warm_env),
                "warm_isa_ok": ([*cli, "strategy=auto", *JOB], isa_env),
                "off": ([*cli, "strategy=auto", *JOB], environment("", root / f"off{r}")),
                "torch_load": (["-c", TORCH_LOAD], warm_env),
                "import": (["-c", IMPORT], warm_env),
                "dynamo": (["-c", DYNAMO], warm_env),
            }
            for name, (argv, env) in ways.items():
                times.setdefault(name, []).append(run(argv, env, root, args.core))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    load = os.getloadavg()
    print(f"CLI `python -m jacbench strategy=auto {' '.join(JOB)}`, fresh processes, pinned")
    print(f"to core {args.core}, 1 thread, {args.rounds} alternating rounds; median (min-max)")
    print(f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min)\n")
    print(f"{'run':<12}{'CPU-s':>22}{'wall-s':>22}")
    for name, pairs in times.items():
        cpu, wall = [p[0] for p in pairs], [p[1] for p in pairs]
        print(
            f"{name:<12}{statistics.median(cpu):>8.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
            f"{statistics.median(wall):>10.2f} ({min(wall):.2f}-{max(wall):.2f})"
        )
    floor = statistics.median(p[0] for p in times["floor"])
    ratios = {n: statistics.median(p[0] for p in times[n]) / floor for n in times}
    print(
        f"\nCPU over floor: warm {ratios['warm']:.2f}x (target <= 1.5; with "
        f"TORCHINDUCTOR_VEC_ISA_OK=1 {ratios['warm_isa_ok']:.2f}x), cold "
        f"{ratios['cold']:.2f}x, off {ratios['off']:.2f}x; the floor plus what torch_load costs "
        f"above the floor's imports (torch, torch._dynamo): "
        f"{1 + ratios['torch_load'] - ratios['dynamo']:.2f}x (no run that reads inductor's "
        "cache costs less)"
    )


if __name__ == "__main__":
    main()
