"""The checks a GPU user relies on, run on a CUDA machine: ``python scripts/gpu_check.py``.

1. Timing: jacbench's CUDA-synchronised timing (torch.utils.benchmark) of a prepared Jacobian
   against ``torch.cuda.Event`` timing of the same call, the two alternately in rounds (the
   median ratio should be near 1).
2. Memory: the allocator's peak for one call against an independent estimate (the Jacobian's
   own bytes plus the batched cotangents: a reverse-mode call cannot need less).
3. Reduced precision: a real sweep ``strategy=jacrev,jacfwd,fd_central`` over
   ``dtype=float32,float16,bfloat16`` on the GPU, with err_eps and the verdict of each job;
   float32 again with TF32 forced on (``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``) and off.
4. Device names in the parquet rows and in the MLflow runs (the GPU's name, not ``cpu``).
5. Two jobs at a time on one GPU: that sweep runs through the joblib launcher with
   ``n_jobs=2``; each of its 9 jobs must have its row, none failed.
6. With ``--map``: the map (``+experiment=map``) on the device, its three heat maps written
   in the sweep's report and its answer printed (``--map-sizes`` narrows the grid to fit a
   short lease, e.g. ``--map-sizes 16,256,1024``; ``--map-only`` runs it alone, ``--map-args``
   narrows it further, e.g. ``--map-args model=map_dense dtype=float32``).

Every check prints what it measured; the exit status is 1 when one fails, 2 when there is no
CUDA device. ``--device cpu`` runs the same checks on the CPU (perf_counter timing, profiler
memory, no TF32 pair) so the script itself can be tested where there is no GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import jacbench
from jacbench.core.interleaved import finished
from jacbench.record.parquet import read_results
from jacbench.timing.config import TimingConfig
from jacbench.timing.measure import peak_memory, time_steady_state, torch_threads

# checked from their rows, not their plots: no report; two jobs at a time (check 5)
SWEEP = ["strategy=jacrev,jacfwd,fd_central", "model=mlp", "timing=quick", "report=false"]
SWEEP += ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
TF32_OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"
TIMING = TimingConfig(min_run_time=0.1, warmup=1, threads=1)  # one round of jacbench timing


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def mlp_problem(device: torch.device) -> tuple[nn.Module, torch.Tensor]:
    """A 256-512-512-256 MLP at one point (M=N=256): big enough to keep a GPU busy."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh())
    net = nn.Sequential(*net, nn.Linear(512, 256)).to(device)
    return net, torch.randn(256, device=device)


def event_median(call, device: torch.device, repeats: int = 50) -> float:
    """Median seconds of ``call()``: CUDA events around each call (the thread's CPU time on
    the CPU, which other processes hardly move)."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:  # the calling thread's CPU time: what jacbench's rule reads where it is busy
            begin = time.thread_time()
            call()
            times.append(time.thread_time() - begin)
    return statistics.median(times)


def alternating_ratio(
    ours: Callable[[], float], theirs: Callable[[], float], rounds: int = 5
) -> tuple[float, list[float]]:
    """The median of per-round ratios ``ours() / theirs()``, the two timed alternately: a busy
    spell of the machine then slows both sides of one round's ratio, or one round, instead of
    one side of the only ratio (a single pair read 0.37 on a loaded 2-core CI machine)."""
    ratios = [ours() / theirs() for _ in range(rounds)]
    return statistics.median(ratios), ratios


def check_timing(device: torch.device) -> Check:
    net, x = mlp_problem(device)
    prep = jacbench.prepare(net, x, "jacrev")
    prep(x)
    finished(device)

    def events() -> float:
        with torch_threads(1):  # as jacbench times it (threads=1)
            return event_median(lambda: prep(x), device, repeats=10)

    def ours() -> float:  # on the CPU the timed thread's CPU time, as the events there
        timed = time_steady_state(prep, x, TIMING)
        return timed.time_median_s if device.type == "cuda" else timed.thread_cpu_median_s

    ratio, ratios = alternating_ratio(ours, events)
    detail = (
        f"jacbench / event median: {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    return Check("timing", 0.7 <= ratio <= 1.4, detail)


def check_memory(device: torch.device) -> Check:
    net, x = mlp_problem(device)
    prep = jacbench.prepare(net, x, "jacrev")
    prep(x)
    item = x.element_size()
    # the result (M x N) and the M one-hot cotangents vmap pushes back (M x M): a floor
    floor = (256 * 256 + 256 * 256) * item
    peak = peak_memory(lambda: prep(x), device)
    ratio = peak / floor
    detail = f"peak {peak / 2**20:.2f} MiB, floor {floor / 2**20:.2f} MiB: ratio {ratio:.2f}"
    return Check("memory", 0.5 <= ratio <= 50, detail)


def jacbench_cli(folder: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """``python -m jacbench ARGS`` in ``folder``, its output kept in ``folder/jacbench.log``."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "jacbench", *args]
    with open(folder / "jacbench.log", "a") as log:
        env = {**os.environ, **(env or {})}
        done = subprocess.run(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(
            f"gpu_check: {' '.join(cmd[1:])} failed with exit {done.returncode}; "
            f"see {folder / 'jacbench.log'}"
        )


def check_precision(device: str, scratch: Path) -> list[Check]:
    folder = scratch / "precision"
    jacbench_cli(folder, "-m", *SWEEP, "dtype=float32,float16,bfloat16", f"device={device}")
    rows = read_results(folder / "results")
    table = rows.sort_values(["dtype", "strategy"])[
        ["strategy", "dtype", "status", "err_eps", "within_tol"]
    ]
    print(table.to_string(index=False))
    checks = [Check("precision sweep", len(rows) == 9, f"{len(rows)} of 9 rows")]
    exact = rows[rows["strategy"].isin(["jacrev", "jacfwd"])]
    bad = exact[(exact["status"] != "ok") | (exact["within_tol"] != True)]  # noqa: E712
    checks.append(Check("exact strategies within tolerance", bad.empty, f"{len(bad)} not"))
    if device == "cpu":
        return checks
    errs = {}
    for flag in ("0", "1"):
        sub = scratch / f"tf32_{flag}"
        jacbench_cli(
            sub,
            "strategy=jacrev",
            "dtype=float32",
            f"device={device}",
            "timing=quick",
            env={TF32_OVERRIDE: flag},
        )
        errs[flag] = float(read_results(sub / "results")["rel_err"].iloc[0])
    detail = f"float32 jacrev rel_err: TF32 off {errs['0']:.2e}, TF32 on {errs['1']:.2e}"
    checks.append(Check("TF32 off is no less accurate than on", errs["0"] <= errs["1"], detail))
    return checks


def check_device_names(device: str, scratch: Path) -> Check:
    from mlflow.tracking import MlflowClient

    folder = scratch / "precision"
    rows = read_results(folder / "results")
    want = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    names = set(rows["device_name"])
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("jacbench")
    runs = client.search_runs([experiment.experiment_id], "tags.`mlflow.parentRunId` != ''")
    runs = [r for r in runs if r.data.tags.get("jacbench.role") != "answer"]  # jobs only
    logged = {r.data.params.get("device_name") or r.data.tags.get("device_name") for r in runs}
    detail = f"parquet {sorted(names)}, MLflow {sorted(map(str, logged))}, expected {want!r}"
    return Check("device names", names == {want} and logged == {want}, detail)


def check_parallel_sweep(scratch: Path) -> Check:
    """The precision sweep ran two jobs at a time (SWEEP): each of its 9 jobs has its row, and
    none failed (a strategy may decline a dtype: skipped, with its reason)."""
    rows = read_results(scratch / "precision" / "results")
    done = int((rows["status"] != "failed").sum())
    detail = f"{done}/9 recorded, none failed (the precision sweep, joblib n_jobs=2)"
    return Check("two jobs at a time on one device", done == len(rows) == 9, detail)


MAP_FIGURES = ("map_winner.png", "map_forward_over_reverse.png", "map_auto_regret.png")


def check_map(device: str, scratch: Path, sizes: str, narrowed: list[str]) -> Check:
    """The map on ``device``: every job recorded, its heat maps in the report."""
    folder = scratch / "map"
    grid = [f"model.n_in={sizes}", f"model.n_out={sizes}"] if sizes else []
    overrides = [f"device={device}", "mlflow.enabled=false", *grid, *narrowed]
    jacbench_cli(folder, "-m", "+experiment=map", *overrides)
    # the newest sweep's: a map resumed after a timeout leaves one folder per command
    report = max(folder.glob("multirun/*/*/report"), key=lambda p: p.stat().st_mtime)
    print((report.parent / "answer.md").read_text())
    drawn = [name for name in MAP_FIGURES if (report / name).is_file()]
    rows = read_results(folder / "results")
    failed = int((rows["status"] == "failed").sum())
    detail = f"{len(rows)} jobs, {failed} failed; heat maps {len(drawn)}/3 in {report}"
    return Check("the map", len(drawn) == 3 and failed == 0, detail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", type=Path, help="keep the sweeps' folders here")
    parser.add_argument("--map", action="store_true", help="also run the map on the device")
    parser.add_argument("--map-sizes", default="", help="N and M values of the map, e.g. 16,256")
    parser.add_argument("--map-only", action="store_true", help="run the map check alone")
    parser.add_argument(
        "--map-args", nargs="*", default=[], help="more overrides, e.g. model=map_dense"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); run it on a GPU")
        raise SystemExit(2)
    device = torch.device(args.device)
    if device.type == "cuda":
        print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    scratch = args.out or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    checks = []
    if not args.map_only:
        checks += [check_timing(device), check_memory(device)]
        checks += check_precision(args.device, scratch)
        checks += [check_device_names(args.device, scratch), check_parallel_sweep(scratch)]
    if args.map or args.map_only:
        checks.append(check_map(args.device, scratch, args.map_sizes, args.map_args))
    for check in checks:
        print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    print(f"gpu_check: sweeps kept in {scratch}")
    raise SystemExit(0 if all(c.ok for c in checks) else 1)


if __name__ == "__main__":
    main()
