"""auto remembers what it decided across processes (issue 33): the next prepare of the same
problem skips the calibration; a changed function, dtype or torch version decides again; a
wrong remembered choice is caught on its first call; and the opt-outs write nothing. Issue 46:
a remembered decision is data, used only where auto itself could have made it and where its
answers agree with f's at random points; a calibration made under load is not remembered.
(The cache's files themselves: tests/test_cache_hostile.py.)"""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

import jacbench
import jacbench.strategies.auto as auto_module
from jacbench.core import contention, decisions
from jacbench.core.cache import CacheWarning
from jacbench.core.problem import FunctionModule, make_problem

OPTIONS = {"compile": False}


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.sin(x) * x[0], x**2])


def g(x: torch.Tensor) -> torch.Tensor:  # the same name below, other code
    return torch.cat([torch.cos(x) * x[0], x**2])


@pytest.fixture
def idle(monkeypatch):
    """The machine taken as idle: these tests check remembering, not the load (on a shared
    test machine a calibration is often contended, and then rightly not remembered:
    ``test_a_calibration_made_under_load_is_not_remembered``)."""
    monkeypatch.setattr(contention, "CONTENDED", 0.0)


@pytest.fixture
def cache(tmp_path, monkeypatch, idle):
    monkeypatch.setenv(decisions.ENV, str(tmp_path))
    calibrations = []
    real = auto_module.calibrate

    def counted(problem, opts):
        calibrations.append(problem.name)
        return real(problem, opts)

    monkeypatch.setattr(auto_module, "calibrate", counted)
    return tmp_path / "auto", calibrations


def test_the_second_prepare_reuses_the_first_ones_decision(cache):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    first = jacbench.prepare(f, x, **OPTIONS)
    assert first.info.decided_by == "calibrated" and len(list(folder.glob("*.json"))) == 1
    second = jacbench.prepare(f, x, **OPTIONS)
    assert second.info.decided_by == "remembered" and len(calibrations) == 1
    assert second.info.chosen_strategy == first.info.chosen_strategy
    assert torch.allclose(second(x), torch.func.jacfwd(f)(x))


def test_changed_code_dtype_or_torch_version_decide_again(cache, monkeypatch):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x, **OPTIONS)
    other = g
    other.__name__ = other.__qualname__ = "f"  # same name, other code
    assert jacbench.prepare(other, x, **OPTIONS).info.decided_by == "calibrated"
    assert jacbench.prepare(f, x.float(), **OPTIONS).info.decided_by == "calibrated"
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert jacbench.prepare(f, x, **OPTIONS).info.decided_by == "calibrated"
    assert len(calibrations) == 4 and len(list(folder.glob("*.json"))) == 4


def test_a_decision_made_by_other_library_code_is_made_again(cache, monkeypatch, tmp_path, request):
    """The version alone did not change between commits: a development tree's map reused
    decisions that code since fixed had calibrated (auto 1.42-2.58x the best strategy in
    three of the map's cells)."""
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x, **OPTIONS)
    library = tmp_path / "library"
    library.mkdir()
    for part in decisions.DECIDING:
        copy = shutil.copytree if (decisions.LIBRARY / part).is_dir() else shutil.copy
        copy(decisions.LIBRARY / part, library / part)
    monkeypatch.setattr(decisions, "LIBRARY", library)
    request.addfinalizer(decisions.library_digest.cache_clear)  # the real library's next
    decisions.library_digest.cache_clear()
    assert jacbench.prepare(f, x, **OPTIONS).info.decided_by == "remembered"  # the same code
    with open(library / "core" / "interleaved.py", "a") as changed:
        changed.write("\nROUNDS = 7\n")
    decisions.library_digest.cache_clear()
    assert jacbench.prepare(f, x, **OPTIONS).info.decided_by == "calibrated"
    assert len(calibrations) == 2 and len(list(folder.glob("*.json"))) == 2


def test_a_decision_made_among_other_choices_is_made_again(cache, monkeypatch):
    """A rule change (another jacbench, a candidate added or left out) changes what auto can
    choose: a decision made among the earlier choices is not recalled (the map's banded
    cells kept a reverse choice made before the folded forward mode was a candidate)."""
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x, **OPTIONS)
    assert jacbench.prepare(f, x, **OPTIONS).info.decided_by == "remembered"
    monkeypatch.setattr(auto_module, "LOOPS", ("autograd_loop",))  # functional left out
    assert jacbench.prepare(f, x, **OPTIONS).info.decided_by == "calibrated"
    assert len(calibrations) == 2 and len(list(folder.glob("*.json"))) == 2


def test_a_wrong_remembered_choice_is_caught_on_its_first_call(cache):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x, **OPTIONS)
    (entry,) = folder.glob("*.json")
    # a tampered entry: the negative control that sums the rows (seed003's mistake)
    entry.write_text(json.dumps({"strategy": "naive_single_grad", "options": {}}))
    prep = jacbench.prepare(f, x, **OPTIONS)
    assert prep.info.decided_by == "calibrated" and len(calibrations) == 2
    assert torch.allclose(prep(x), torch.func.jacfwd(f)(x))
    assert json.loads(entry.read_text())["strategy"] == prep.info.chosen_strategy


@pytest.mark.parametrize("off", ["env", "option"])
def test_remembering_turned_off_writes_nothing(cache, monkeypatch, off):
    folder, calibrations = cache
    x = torch.randn(5, dtype=torch.float64)
    if off == "env":
        monkeypatch.setenv(decisions.ENV, "")
    options = {**OPTIONS, "cache": off != "option"}
    for _ in range(2):
        assert jacbench.prepare(f, x, **options).info.decided_by == "calibrated"
    assert len(calibrations) == 2 and not folder.exists()


def test_a_job_records_how_auto_decided(cache):
    from helpers.cli import compose_job
    from jacbench.core.registry import load_registry
    from jacbench.run.runner import execute

    cfg = compose_job("strategy=auto", "strategy.compile=false", "timing=quick")
    results = [execute(cfg, load_registry()) for _ in range(2)]
    assert [r.decided_by for r in results] == ["calibrated", "remembered"]
    assert results[0].chosen_strategy == results[1].chosen_strategy
    assert all(r.ok and r.within_tol for r in results)


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_calibration_counts_the_work_not_the_wait():
    """Issue 33: timed by wall clock on a loaded machine, auto once chose grads_batched at
    28x JAX. A candidate descheduled by another process waits without using CPU: here one
    that sleeps 1 ms a call against one that computes for about 0.3 ms."""
    import time

    from jacbench.strategies.auto import _seconds_per_call
    from jacbench.timing.measure import torch_threads

    def waiting(x):
        time.sleep(0.001)
        return x

    def working(x):
        busy(0.0003)
        return x

    x = torch.zeros(3)
    with torch_threads(1):  # one thread: CPU time is what a call costs
        # a sleeper's blocks hold up to 1000 calls (it costs almost no CPU): a small budget
        waits, works = _seconds_per_call([waiting, working], x, budget=0.01)
    assert waits < 0.00015 < 0.00025 < works < 0.003  # by wall clock the sleeper is slower


def test_calibration_times_a_candidate_after_it_refilled_its_caches():
    """A candidate's first calls after another's are slower (jacrev on the map's banded
    float64 N=1024 M=64 after functional: 0.85-1.18 ms, then 0.29): timed from the switch on,
    blocks made it 0.51-0.54 ms beside grads_batched's 0.45, and auto chose grads_batched
    (1.42x jacrev back to back). Here: 1.5 ms for eight calls after a switch, then 0.4 ms,
    against a steady 0.7 ms."""
    from jacbench.strategies.auto import _seconds_per_call
    from jacbench.timing.measure import torch_threads

    since_switch = {"ramp": 0, "steady": 0}

    def ramp(x):
        since_switch["steady"] = 0
        since_switch["ramp"] += 1
        busy(0.0015 if since_switch["ramp"] <= 8 else 0.0004)
        return x

    def steady(x):
        since_switch["ramp"] = 0
        busy(0.0007)
        return x

    with torch_threads(1):
        ramps, steadies = _seconds_per_call([ramp, steady], torch.zeros(3), budget=0.2)
    assert ramps < 0.0005 < 0.0006 < steadies


def test_with_several_threads_calibration_times_what_the_user_waits():
    """A call on two threads costs their summed CPU time but returns in about half: there
    the wall clock decides, or auto would pass over a candidate that uses the cores well."""
    import time

    from jacbench.core.interleaved import calibration_clock
    from jacbench.timing.measure import torch_threads

    with torch_threads(1):
        assert calibration_clock() is time.process_time
    with torch_threads(2):
        assert calibration_clock() is time.perf_counter


A6 = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
X6 = torch.tensor([1.0, -1.0, 0.5, -0.3, 2.0, -2.0], dtype=torch.float64)


def relu_map(x: torch.Tensor) -> torch.Tensor:  # columns 1, 3, 5 of J are zero at X6 only
    return A6 @ torch.relu(x)


# Decisions planted in (or edited into) the cache, none of which auto makes for relu_map
# (the repro's cache_poison.py: the first three gave rel. error 1.76 and 1.0 at new points).
PLANTED = {
    "probed pattern": {"strategy": "sparse_jacfwd", "options": {"pattern": "probe"}},
    "one-point probe": {
        "strategy": "sparse_jacrev",
        "options": {"pattern": "probe", "detect_points": 1, "compile": False},
    },
    "declared pattern": {
        "strategy": "sparse_jacfwd",
        "options": {"pattern": [[i for i in range(6) for _ in "abc"], [0, 2, 4] * 6]},
    },
    "scipy output": {"strategy": "sparse_jacfwd", "options": {"output": "scipy"}},
    "option auto never sets": {"strategy": "jacfwd", "options": {"randomness": "same"}},
    "negative control": {"strategy": "naive_single_grad", "options": {}},
    "non-finite build cost": {"strategy": "functional", "options": {}, "build_s": {"x": "nan"}},
    "unknown option": {"strategy": "jacrev", "options": {"chunk_size": 1, "evil": 1}},
    "wrong types": {"strategy": ["jacfwd"], "options": [1, 2]},
}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_a_planted_decision_auto_could_not_have_made_is_refused(cache, planted):
    folder, calibrations = cache
    first = jacbench.prepare(relu_map, X6, **OPTIONS)
    (entry,) = folder.glob("*.json")
    entry.write_text(json.dumps(PLANTED[planted]))
    with pytest.warns(CacheWarning, match="decided again") as caught:
        prep = jacbench.prepare(relu_map, X6, **OPTIONS)
    assert len(caught) == 1 and str(folder) in str(caught[0].message)
    assert prep.info.decided_by == "calibrated" and len(calibrations) == 2
    gen = torch.Generator().manual_seed(1)
    for x in [X6, *(torch.randn(6, generator=gen, dtype=torch.float64) for _ in range(20))]:
        jac = prep(x)
        assert type(jac) is torch.Tensor and jac.layout == torch.strided
        torch.testing.assert_close(jac, torch.func.jacfwd(relu_map)(x), rtol=1e-12, atol=1e-12)
    kept = decisions.parse(json.loads(entry.read_text()))  # auto's own decision again
    assert kept.strategy == prep.info.chosen_strategy and first.info.decided_by == "calibrated"


def test_the_check_of_a_remembered_choice_catches_a_jacobian_right_at_x0_only():
    """Compared at x0 alone, a sparse choice whose pattern holds the columns nonzero at x0
    (a probe there) passes: the check also looks at random points, along several
    directions."""
    problem = make_problem("relu", FunctionModule(relu_map), X6, "input", False, vectorize=True)

    def exact(x: torch.Tensor) -> torch.Tensor:
        return torch.func.jacfwd(relu_map)(x)

    def x0_columns_only(x: torch.Tensor) -> torch.Tensor:
        return exact(x) * (X6 > 0)

    assert torch.equal(x0_columns_only(X6), exact(X6))
    assert decisions.agrees(problem, exact)
    assert not decisions.agrees(problem, x0_columns_only)


def sqrt_map(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(x) + x


def test_a_decision_for_a_jacobian_infinite_at_x0_is_kept(cache):
    """J is infinite at x0 (sqrt at 0): the check compares where f's own derivative is
    finite. It asked for a finite answer, so this decision was forgotten and the calibration
    repeated in every process (and on a read-only cache, a PermissionError)."""
    folder, calibrations = cache
    x0 = torch.tensor([0.0, 1.0, 4.0], dtype=torch.float64)
    assert jacbench.prepare(sqrt_map, x0, **OPTIONS).info.decided_by == "calibrated"
    again = jacbench.prepare(sqrt_map, x0, **OPTIONS)
    assert again.info.decided_by == "remembered" and len(calibrations) == 1
    assert len(list(folder.glob("*.json"))) == 1
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(again(x), torch.func.jacfwd(sqrt_map)(x))
    # whichever auto chose: reverse mode's 0 * inf puts NaN where forward mode has 0
    problem = make_problem("sqrt", FunctionModule(sqrt_map), x0, "input", False)
    for name in ("jacfwd", "jacrev", "autograd_loop"):
        assert decisions.agrees(problem, jacbench.prepare(sqrt_map, x0, name)), name


@pytest.fixture
def cpu_load():
    """More busy threads than cores (hashing a block releases the GIL): the calibration's
    thread waits for a core, as it does beside other processes on a loaded machine."""
    import hashlib
    import os
    import threading

    stop = threading.Event()

    def burn() -> None:
        block = b"x" * (1 << 20)
        while not stop.is_set():
            hashlib.sha256(block).digest()

    threads = [threading.Thread(target=burn, daemon=True) for _ in range(2 * os.cpu_count() + 1)]
    for thread in threads:
        thread.start()
    yield
    stop.set()
    for thread in threads:
        thread.join()


def test_a_calibration_made_under_load_is_not_remembered(tmp_path, monkeypatch, cpu_load):
    """Remembered, a loaded machine's choice (autograd_loop, once) was kept for good."""
    monkeypatch.setenv(decisions.ENV, str(tmp_path))
    x = torch.randn(5, dtype=torch.float64)
    for _ in range(2):
        assert jacbench.prepare(f, x, **OPTIONS).info.decided_by == "calibrated"
    assert not list((tmp_path / "auto").glob("*.json"))


def test_contention_is_the_share_of_runnable_time_spent_on_a_core():
    from jacbench.core.contention import Snapshot, contention

    cpu = torch.device("cpu")
    before = Snapshot(0.0, 0.0, threads=2, sched={"1": (0, 0), "2": (50, 0)})
    waited = Snapshot(1.0, 1.0, threads=2, sched={"1": (30, 60), "2": (50, 0), "3": (0, 10)})
    ran = Snapshot(1.0, 1.0, threads=2, sched={"1": (90, 5), "2": (50, 0)})
    assert contention(before, waited, cpu) == pytest.approx(0.3)
    assert contention(before, ran, cpu) is None  # 0.95 of its runnable time on a core
    assert contention(before, waited, torch.device("cuda")) is None  # waits for the device too
    # without scheduler statistics: the rule's CPU/wall per thread (here 0.5 / 2 threads)
    no_stats = Snapshot(0.5, 1.0, threads=2, sched=None)
    assert contention(Snapshot(0.0, 0.0, 2, None), no_stats, cpu) == pytest.approx(0.25)


def test_what_building_a_tier_cost_is_measured_remembered_and_read_by_the_next_prepare(cache):
    """patience's yardstick is what a tier cost to build on this machine (its build and first
    checked answer), remembered with the decision; the fixed estimates only until then."""
    folder, _ = cache
    x = torch.randn(5, dtype=torch.float64)
    first = jacbench.prepare(f, x, patience=0.0)  # the first call pays for the next tier
    assert first.tiers is not None and first.tiers.stages[0].cost_s == 0.3  # the estimate
    first(x)
    assert first.info.tier == "batched"
    (entry,) = folder.glob("*.json")
    measured = json.loads(entry.read_text())["build_s"]
    assert set(measured) == {"batched"} and 0.0 < measured["batched"] < 60.0
    again = jacbench.prepare(f, x, patience=0.0)
    assert again.tiers is not None and again.tiers.stages[0].cost_s == measured["batched"]
    assert again.tiers.stages[1].cost_s == auto_module.COST_ESTIMATES_S[auto_module.Tier.FOLDED]


def test_where_the_last_tier_was_reached_here_before_patience_goes_straight_for_it(cache):
    folder, _ = cache
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x, patience=0.0)(x)  # measures the batched tier
    (entry,) = folder.glob("*.json")
    data = json.loads(entry.read_text())
    assert [s.tier for s in jacbench.prepare(f, x, patience=0.0).tiers.stages] == [
        "batched",
        "folded",
        "compiled",
    ]
    data["build_s"]["compiled"] = 2.5  # as a run that reached the compiled tier leaves it
    entry.write_text(json.dumps(data))
    stages = jacbench.prepare(f, x, patience=0.0).tiers.stages
    assert [(s.tier, s.cost_s) for s in stages] == [("compiled", 2.5)]


def test_without_patience_no_build_cost_is_looked_up(cache, monkeypatch):
    """The default tiered auto moves only at settle(): it reads and hashes nothing for
    patience's yardstick at prepare."""
    looked_up = []
    real = decisions.recall
    monkeypatch.setattr(decisions, "recall", lambda key: looked_up.append(key) or real(key))
    x = torch.randn(5, dtype=torch.float64)
    jacbench.prepare(f, x)(x)
    assert looked_up == []
    jacbench.prepare(f, x, patience=1.0)
    assert len(looked_up) == 1


def test_on_an_accelerator_calibration_reads_the_wall_clock():
    """A call on a GPU only queues its kernels: its CPU time is the launch, not the work
    (tests/test_cuda.py times real kernels where there is a GPU)."""
    import time

    from jacbench.core.interleaved import calibration_clock
    from jacbench.timing.measure import torch_threads

    with torch_threads(1):
        assert calibration_clock(torch.device("cpu")) is time.process_time
        assert calibration_clock(torch.device("cuda")) is time.perf_counter
