"""Issue 46 (S3, T3): preparing and calling from several threads gives right answers.

torch's forward-mode AD keeps its dual levels per process, make_fx keeps its patcher in a
global, and the first torch.func call imports modules lazily. Before the fix, preparing
jacfwd_folded in one thread while another called a prepared jacfwd left 10 of 13 prepared
objects wrong for good (relative error 1.0), the calling thread got ~70% RuntimeErrors
("Trying to access a forward AD level with an invalid index"), and two first preparations
in a fresh process failed ("CURRENT_PATCHER is None in finally block").
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import jacbench

ROUNDS = 30


def network():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    return net.double()


@pytest.mark.slow  # ~6 s: 30 rounds of preparations beside a calling thread
def test_preparing_while_another_thread_calls_forward_mode_gives_right_answers():
    net = network()
    points = [torch.randn(4, dtype=torch.float64) for _ in range(20)]
    expected = [torch.autograd.functional.jacobian(net, p) for p in points]
    calling = jacbench.prepare(net, points[0], "jacfwd")
    stop, failures, calls = threading.Event(), [], [0]

    def caller() -> None:
        while not stop.is_set():
            i = calls[0] % len(points)
            try:
                if not torch.allclose(calling(points[i]), expected[i]):
                    failures.append(f"wrong at call {calls[0]}")
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            calls[0] += 1
            time.sleep(0.0005)  # the caller's own work between its calls

    thread = threading.Thread(target=caller)
    thread.start()
    prepared = []
    try:
        for k in range(ROUNDS):  # jacfwd_folded each round, the others now and then
            for name, options in [
                ("jacfwd_folded", {"compile": False}),
                ("sparse_jacfwd", {}),
                ("forward_ad_loop", {}),
                ("auto", {"compile": False}),
            ][: 4 if k % 10 == 0 else 1]:
                prep = jacbench.prepare(net, points[0], name, **options)
                prepared.append(prep)
                torch.testing.assert_close(prep(points[k % 20]), expected[k % 20])
    finally:
        stop.set()
        thread.join()
    assert failures == [] and calls[0] > 0
    for prep in prepared:  # right for good, with no other thread running
        for p, e in zip(points[:5], expected[:5], strict=True):
            torch.testing.assert_close(prep(p), e)


def test_auto_called_from_three_threads_while_another_traces():
    net = network()
    points = [torch.randn(4, dtype=torch.float64) for _ in range(20)]
    expected = [torch.autograd.functional.jacobian(net, p) for p in points]
    prep = jacbench.prepare(net, points[0], patience=1e9, cache=False)
    failures = []

    def worker(k: int) -> None:
        for i in range(60):
            j = (i + k) % 20
            try:
                torch.testing.assert_close(prep(points[j]), expected[j])
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    folded = jacbench.prepare(net, points[0], "jacfwd_folded", compile=False)
    for t in threads:
        t.join()
    assert failures == []
    torch.testing.assert_close(folded(points[3]), expected[3])


def test_a_call_holding_torchs_turn_and_another_threads_move_do_not_wait_for_each_other():
    """C holds TORCH_STATE (as a first call does) while B's call reaches the next tier's
    cost (patience) and builds it, which asks for TORCH_STATE: C's own call must be answered
    (by the current tier) instead of waiting for B's move, which waits for C."""
    from jacbench.core.agreement import disagreement
    from jacbench.core.prepared import TORCH_STATE
    from jacbench.core.problem import make_problem
    from jacbench.core.registry import load_registry
    from jacbench.core.tiers import Stage, Tiered

    net = network()
    x = torch.randn(4, dtype=torch.float64)
    p = make_problem("net", net, x, "input", False)
    registry = load_registry()
    first = registry.prepare("double_backward", p)
    later = Stage("batched", lambda: registry.prepare("jacrev", p), cost_s=0.0)
    check = lambda y, jac: disagreement(p.f, y, jac, p.n_out)  # noqa: E731
    tiers = Tiered(first, "eager", [later], check, p.x, patience=0.0)
    holds, started, answers = threading.Event(), threading.Event(), {}

    def c() -> None:
        with TORCH_STATE:
            holds.set()
            started.wait(10)
            time.sleep(0.3)  # B is in its move by now, asking for TORCH_STATE
            answers["c"] = tiers.jac(x)

    def b() -> None:
        holds.wait(10)
        started.set()
        answers["b"] = tiers.jac(x)

    threads = [threading.Thread(target=t, daemon=True) for t in (c, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads), "the two calls wait for each other"
    expected = torch.func.jacrev(net)(x)
    for answer in answers.values():
        torch.testing.assert_close(answer, expected)
    assert (tiers.tier, tiers.refused) == ("batched", None)


FRESH = textwrap.dedent(
    """
    import threading, torch, jacbench
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    net = net.double()
    x = torch.randn(4, dtype=torch.float64)
    expected = torch.autograd.functional.jacobian(net, x)
    called = jacbench.prepare(net, x, "jacfwd")
    barrier, out = threading.Barrier(3), []

    def first_call():
        barrier.wait()
        out.append(torch.allclose(called(x), expected))

    def first_trace():
        barrier.wait()
        prep = jacbench.prepare(net, x, "jacfwd_folded", compile=False)
        out.append(torch.allclose(prep(x), expected))

    threads = [threading.Thread(target=t) for t in (first_call, first_trace, first_trace)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    later = jacbench.prepare(net, x, "jacfwd_folded", compile=False)(x)
    print(out, torch.allclose(later, expected))
    """
)


@pytest.mark.slow
def test_first_uses_from_three_threads_in_a_fresh_process():
    """A fresh interpreter: torch imports modules on first use, so this needs one."""
    done = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "[True, True, True] True", done.stderr[-2000:]
