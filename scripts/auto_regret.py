"""auto across the map, side by side: in each cell of the map (``+experiment=map``), auto
(``compile=False``, as the map runs it) against every eager exact strategy the map times, in
one process, interleaved rounds, by thread CPU time (a busy machine moves it far less than wall
time), so that a cell's regret is not one job measured at a quiet moment against another
measured at a busy one.

    regret = auto's time per call / the fastest other exact strategy's, per round

A cell's regret is the median over rounds, with its range; it counts as a loss where even the
lowest round's ratio is above 1.10 (issue 47: at most 1.10 in every settled cell, median at
most 1.03 on both dtypes). A strategy more than 4x the best after the first round is dropped
from the cell's later rounds (it cannot be the best; the loops at N or M = 1024 cost 0.1-1 s).

    python scripts/auto_regret.py                         # the whole map: ~10 minutes
    python scripts/auto_regret.py --models map_dense --dtypes float32 --sizes 4,64,1024
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

import jacbench
from jacbench.timing.allocator import hold_steady

ROOT = Path(__file__).resolve().parents[1]
# the map's exact strategies in their eager forms (conf/experiment/map.yaml), with options
OTHERS: dict[str, dict] = {
    "autograd_loop": {},
    "functional": {},
    "functional_vectorized": {},
    "functional_forward": {},
    "jacrev": {},
    "jacfwd": {},
    "grads_batched": {},
    "forward_ad_loop": {},
    "jacfwd_folded": {"compile": False},
    "sparse_jacfwd": {},
    "sparse_jacrev": {},
}
BOUND = 1.10
DROP = 4.0


def model(name: str, n: int, m: int, dtype: torch.dtype) -> torch.nn.Module:
    """The map's model ``name`` (conf/model/NAME.yaml) at N inputs and M outputs."""
    cfg = OmegaConf.load(ROOT / "conf" / "model" / f"{name}.yaml")
    options = {k: v for k, v in cfg.items() if k not in ("name", "wrt", "batch")}
    torch.manual_seed(0)
    return instantiate({**options, "n_in": n, "n_out": m}).to(dtype)


def per_call(prep, x: torch.Tensor, calls: int) -> float:
    start = time.thread_time()
    for _ in range(calls):
        prep(x)
    return (time.thread_time() - start) / calls


@dataclass
class Cell:
    family: str
    n: int
    m: int
    chosen: str
    best: str
    ratios: list[float]

    @property
    def regret(self) -> float:
        return statistics.median(self.ratios)

    @property
    def loses(self) -> bool:
        return min(self.ratios) > BOUND


def measure(name: str, dtype: torch.dtype, n: int, m: int, rounds: int, budget: float) -> Cell:
    f = model(name, n, m, dtype)
    x = torch.randn(n, dtype=dtype)
    with torch.no_grad():
        f(x)
    auto = jacbench.prepare(f, x, "auto", compile=False)
    preps = {"auto": auto}
    for strategy, options in OTHERS.items():
        try:
            preps[strategy] = jacbench.prepare(f, x, strategy, **options)
        except jacbench.StrategySkip:
            continue
    first = {}
    for strategy, prep in preps.items():
        start = time.thread_time()
        prep(x)
        first[strategy] = max(time.thread_time() - start, 1e-6)
    calls = {s: max(1, int(budget / t)) for s, t in first.items()}
    times: dict[str, list[float]] = {s: [] for s in preps}
    for round_ in range(rounds):
        for strategy in list(preps):
            times[strategy].append(per_call(preps[strategy], x, calls[strategy]))
        if round_ == 0:
            fastest = min(t[0] for s, t in times.items() if s != "auto")
            for strategy in [s for s in preps if s != "auto" and times[s][0] > DROP * fastest]:
                del preps[strategy], times[strategy]
    others = {s: statistics.median(t) for s, t in times.items() if s != "auto"}
    best = min(others, key=others.__getitem__)
    ratios = [a / b for a, b in zip(times["auto"], times[best], strict=True)]
    chosen = str(auto.info.chosen_strategy or "")
    return Cell(f"{name} {str(dtype).removeprefix('torch.')}", n, m, chosen, best, ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="map_dense,map_banded,map_conv")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--sizes", default="4,16,64,256,1024")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=0.01, help="CPU-s per strategy a round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    allocator = hold_steady()  # as the runner times the map's jobs
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"auto_regret: torch {torch.__version__}, jacbench {jacbench.__version__}, "
        f"1 thread, thread CPU time, {args.rounds} interleaved rounds, {allocator}; "
        f"load {os.getloadavg()[0]:.2f} at the start"
    )
    cells = []
    for name in args.models.split(","):
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for n in sizes:
                for m in sizes:
                    c = measure(name, dtype, n, m, args.rounds, args.budget)
                    cells.append(c)
                    print(
                        f"{c.family:18s} N={n:5d} M={m:5d}  best {c.best:22s} "
                        f"auto ran {c.chosen:22s} "
                        f"auto/best {c.regret:.2f} [{min(c.ratios):.2f}-{max(c.ratios):.2f}]"
                        + ("  LOSES" if c.loses else ""),
                        flush=True,
                    )
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    for dtype_name in args.dtypes.split(","):
        found = [c for c in cells if c.family.endswith(dtype_name)]
        regrets = [c.regret for c in found]
        worst = max(found, key=lambda c: c.regret)
        losses = [c for c in found if c.loses]
        print(
            f"{dtype_name}: auto/best over {len(found)} cells: median "
            f"{statistics.median(regrets):.3f} (target <= 1.03), worst {worst.regret:.2f} "
            f"({worst.family} N={worst.n} M={worst.m}, against {worst.best}); "
            f"{len(losses)} cell(s) where every round is above {BOUND}"
            + (": " + "; ".join(f"{c.family} N={c.n} M={c.m}" for c in losses) if losses else "")
        )


if __name__ == "__main__":
    main()
