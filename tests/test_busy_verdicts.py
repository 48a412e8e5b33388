"""Issue 57: verdicts from the measure a busy machine leaves honest. Wall time waits for a
core; the timed thread's CPU time is its code's own, so where a row was timed while its
process waited, the rule orders by CPU time and says so; a pair timed side by side settles
on its ratio across the interleaved blocks."""

from __future__ import annotations

import dataclasses
import os
import queue
import random
import statistics
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from helpers.cli import LAUNCH_FAST, Cli, load_script
from helpers.results import frame, make_result, timed_row
from jacbench.record.parquet import SCHEMA, read_results
from jacbench.report.analysis import recommend
from jacbench.report.problems import problems
from jacbench.timing.config import TimingConfig
from jacbench.timing.measure import side_by_side, time_steady_state
from jacbench.timing.rule import BUSY, MIN_BLOCKS, Basis, Order, busy, median_interval, verdict

THREAD_COLUMNS = [
    "thread_cpu_blocks_s",
    "thread_cpu_median_s",
    "thread_cpu_ci_low_s",
    "thread_cpu_ci_high_s",
]


class _Helper:
    """A thread that does the timed call's work for it: the work is in the process's CPU
    time, not in the timed thread's, whatever the scheduler does (the timed thread waits)."""

    def __init__(self) -> None:
        self.todo: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        self.a = torch.randn(200, 200)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.todo.get() is not None:
            self.a @ self.a @ self.a
            self.done.put(True)

    def __call__(self, x: torch.Tensor) -> bool:
        self.todo.put(x)
        return self.done.get()

    def stop(self) -> None:
        self.todo.put(None)
        self.thread.join()


def test_the_timed_threads_cpu_time_is_kept_per_block_without_the_processs_other_threads():
    big = torch.randn(64, 64)
    helper = _Helper()
    try:
        timing = time_steady_state(helper, torch.randn(4), TimingConfig(0.05))
        pair = side_by_side({"a": lambda: big @ big, "b": lambda: helper(big)}, rounds=MIN_BLOCKS)
    finally:
        helper.stop()
    for t in (timing, *pair.values()):
        own, process = t.thread_cpu_blocks_s, t.cpu_blocks_s
        assert len(own) == len(process) == t.n_blocks >= MIN_BLOCKS
        assert all(0 <= o <= p * 1.001 + 1e-7 for o, p in zip(own, process, strict=True))
        assert t.thread_cpu_ci_low_s <= t.thread_cpu_median_s <= t.thread_cpu_ci_high_s
        assert (t.thread_cpu_ci_low_s, t.thread_cpu_ci_high_s) == median_interval(own)
    # the helper's matmuls are in the process's CPU time, not in the timed thread's
    for t in (timing, pair["b"]):
        assert sum(t.cpu_blocks_s) > 2 * sum(t.thread_cpu_blocks_s), t


def _round_loads(n: int, seed: int) -> list[float]:
    """How much slower each round ran than an idle one: what a busy machine does."""
    rng = random.Random(seed)
    return [rng.choice([1.0, 2.5, 6.0]) for _ in range(n)]


def _pair(a_ms: float, b_ms: float, pair_id: str = "p1", n: int = 12) -> tuple[dict, dict]:
    """Two rows timed side by side: each round's load hit both alike, so each one's own
    interval is wide while their ratio is steady; contended, CPU time as slow as wall."""
    loads = _round_loads(n, 7)
    rows = []
    for name, ms in (("analytic", a_ms), ("jacrev", b_ms)):
        rng = random.Random(name)
        blocks = [ms * load * rng.uniform(0.97, 1.03) / 1e3 for load in loads]
        low, high = median_interval(blocks)
        figures = {"median_s": statistics.median(blocks), "ci_low_s": low, "ci_high_s": high}
        row = timed_row(name, ms, 0.0, n=n, round="side_by_side", pair_id=pair_id)
        for basis in ("time", "cpu", "thread_cpu"):
            row |= {f"{basis}_{k}": v for k, v in figures.items()}
            row[f"{basis}_blocks_s"] = blocks
        row["cpu_wall_ratio"] = 0.4
        rows.append(row)
    return rows[0], rows[1]


def test_a_pair_timed_side_by_side_settles_on_its_ratio_across_the_interleaved_blocks():
    a, b = _pair(1.0, 1.4)
    assert a["time_ci_high_s"] > b["time_ci_low_s"]  # each one's own interval: overlapping
    found = verdict(a, b)
    assert found.order == Order.FASTER and found.basis == Basis.THREAD_CPU
    assert found.ratio is not None and 0.68 < found.ratio < 0.74
    assert "across 12 interleaved blocks" in found.text and BUSY in found.text
    assert verdict(b, a).order == Order.SLOWER
    apart = {**b, "pair_id": "another job"}  # the same figures, not timed side by side
    assert verdict(a, apart).order == Order.TIED
    same = _pair(1.0, 1.0)
    assert verdict(*same).order == Order.TIED  # a real tie stays one


def test_a_busy_problem_is_ranked_and_settled_by_cpu_time_with_wall_time_beside():
    """seed002 on a loaded machine (issue 57): analytic 67.5 us wall against jacrev 1.01 ms,
    CPU 31 us against 483 us, both at CPU/wall 0.46-0.48; and a third strategy whose wall
    time was the lowest only because it ran at a quieter moment."""
    busy = {"cpu_wall_ratio": 0.47}
    rows = frame(
        timed_row("analytic", 0.0675, 0.014, cpu_ms=0.031, **busy),
        timed_row("jacrev", 1.01, 0.17, cpu_ms=0.483, **busy),
        timed_row("autograd_loop", 0.060, 0.001, cpu_ms=0.058, cpu_wall_ratio=0.97),
    )
    ((title, group),) = problems(rows)
    rec = recommend(title, group)
    assert rec.best == "analytic" and rec.runner_up == "autograd_loop" and not rec.unsettled
    assert rec.best_cpu_time is not None and abs(rec.best_cpu_time - 31e-6) < 3e-6
    sentence = rec.sentence()
    assert f"x slower {BUSY}" in sentence and "CPU, " in sentence and "wall)" in sentence


def test_rows_without_the_thread_columns_still_read_and_are_judged_by_process_cpu(tmp_path):
    """A parquet file of an earlier jacbench lacks the thread CPU columns: it reads with them
    empty, and the rule falls back to the process's CPU time."""
    old_schema = pa.schema([f for f in SCHEMA if f.name not in THREAD_COLUMNS])
    for name, wall, cpu in (("jacrev", 2e-3, 1e-3), ("jacfwd", 3e-3, 2e-3)):
        result = make_result(strategy=name, time_median_s=wall, job_id=name * 3)
        values = dataclasses.asdict(result)
        blocks = [cpu * (1 + 0.01 * k) for k in range(10)]
        low, high = median_interval(blocks)
        values |= {"cpu_median_s": statistics.median(blocks), "cpu_ci_low_s": low}
        values |= {"cpu_ci_high_s": high, "cpu_blocks_s": blocks, "cpu_wall_ratio": 0.3}
        row = {k: v for k, v in values.items() if k not in THREAD_COLUMNS}
        pq.write_table(pa.Table.from_pylist([row], schema=old_schema), tmp_path / f"{name}.parquet")
    rows = read_results(tmp_path)
    assert set(THREAD_COLUMNS) <= set(rows.columns) and rows["thread_cpu_median_s"].isna().all()
    assert set(THREAD_COLUMNS) <= set(rows.attrs["missing_columns"])
    judged = frame(*rows.to_dict("records")).set_index("strategy", drop=False)
    jacrev, jacfwd = judged.loc["jacrev"], judged.loc["jacfwd"]
    found = verdict(jacrev, jacfwd)
    assert found.order == Order.FASTER and found.basis == Basis.CPU and BUSY in found.text


def test_an_answer_run_carries_the_leaders_figures_settled_or_not():
    """Issue 57: an unsettled answer logged only settled=0, so MLflow showed '-' in every
    number column of a measured problem."""
    from jacbench.report.overview import answer_metrics, answers_of

    def answer(*rows: dict) -> tuple[dict, dict]:
        ((title, group),) = problems(frame(*rows))
        rec = recommend(title, group)
        (run,) = answers_of([rec], [(title, group)])
        return answer_metrics(rec, group), run["tags"]

    tied, tags = answer(timed_row("jacrev", 1.0, 0.05), timed_row("jacfwd", 1.02, 0.05))
    assert tied["settled"] == 0.0 and tags["by"] == "wall"
    assert tied["time_ci_low_ms"] <= tied["time_median_ms"] <= tied["time_ci_high_ms"]
    assert {"err_eps", "within_tol", "exact"} <= set(tied) and "speedup_vs_functional" not in tied
    busy, tags = answer(
        timed_row("jacrev", 1.0, 0.05, cpu_ms=0.5, cpu_wall_ratio=0.5),
        timed_row("jacfwd", 1.02, 0.05, cpu_ms=1.0, cpu_wall_ratio=0.5),
    )
    assert busy["settled"] == 1.0 and tags["by"] == "cpu"
    assert busy["cpu_ci_low_ms"] <= busy["cpu_median_ms"] <= busy["cpu_ci_high_ms"] < 0.6
    assert busy["time_median_ms"] > 0.9  # wall time beside it


@pytest.mark.slow  # two small sweeps, the second beside 2 busy processes per core
def test_a_sweep_beside_busy_processes_names_the_idle_winner_and_settles_it(tmp_path, monkeypatch):
    """Issue 57: at load 6-13 no sweep named a winner, also for gaps of 15-63x. The same
    small sweep (seed002's analytic against jacrev, re-timed side by side) idle and beside
    busy loops (started here, always stopped): the same winner, settled; by CPU time where
    a job waited for its core."""
    bench = load_script("busy_verdicts")
    sweep = ["-m", "model=seed002_reciprocal", "strategy=analytic,jacrev", "side_by_side=best_two"]
    sweep += [*LAUNCH_FAST, "mlflow.enabled=false", "report=false"]
    found = {}
    for name in ("idle", "busy"):
        folder = tmp_path / name
        folder.mkdir()
        cli = Cli(folder, monkeypatch)
        with bench.busy(2 * (os.cpu_count() or 1) if name == "busy" else 0) as loops:
            done = cli(*sweep, timeout=300)
        assert all(loop.poll() is not None for loop in loops)  # every busy loop stopped
        assert done.returncode == 0, done.stderr[-2000:]
        (found[name],) = bench.verdicts(folder / "results").values()
        rows = read_results(folder / "results")
        waited = busy(*rows.to_dict("records"))
        assert found[name].by == ("cpu" if waited else "wall"), found[name]
    idle, loaded = found["idle"], found["busy"]
    assert idle.gap is not None and idle.gap >= 2.0, idle  # the formula: several times faster
    assert loaded.leader == idle.leader and loaded.settled, (idle, loaded)


def test_an_unsettled_gap_on_a_busy_machine_is_read_as_the_ranking_read_it():
    """The benchmark printed 'jacrev over functional 0.59x unsettled by cpu': ranked by CPU
    time, the gap was taken from wall times, which the load had reversed."""
    busy_row = {"cpu_wall_ratio": 0.5}
    rows = frame(
        timed_row("jacrev", 1.0, 0.3, cpu_ms=0.50, **busy_row),
        timed_row("functional", 0.6, 0.2, cpu_ms=0.55, **busy_row),
    )
    ((title, group),) = problems(rows)
    rec = recommend(title, group)
    assert rec.best == "jacrev" and rec.unsettled and rec.by == "cpu"
    assert rec.runner_up_slower is not None and rec.runner_up_slower >= 1.0
