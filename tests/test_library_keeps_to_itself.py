"""The library keeps to itself (issue 56): nothing of jacbench (a thread, a lock, a mode) reaches
the caller's program, its exit or its forks; its answers are right under every grad mode
the caller may be in, or one clear error.

Before: auto built its tiers in threads of its own, whose forward-mode AD broke the caller's
``torch.func.jvp`` ("no level exists"), whose life at exit aborted the interpreter (rc 134),
and whose lock, copied held into a forked child, hung the child's first ``prepare``; under
``torch.inference_mode()`` every eager Jacobian was zeros.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from torch import nn

import jacbench
from helpers import spawned
from jacbench.core import memory_budget
from jacbench.core.errors import MemoryBudget, NotPicklable, UnsupportedFunction, WrongJacobian
from jacbench.core.prepared import TORCH_STATE

RUNS = 20  # timing-dependent scenarios run this many times each


def net_and_point() -> tuple[nn.Module, torch.Tensor]:
    net = spawned.network()
    return net, torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_the_callers_forward_ad_works_beside_every_call_and_move():
    net, x = net_and_point()
    prep = jacbench.prepare(net, x, patience=0.0, cache=False)  # moves at its calls
    before = set(threading.enumerate())
    v = torch.ones_like(x)
    for k in range(RUNS):
        if [stage.tier for stage in prep.tiers.stages] == ["compiled"]:
            prep.tiers.stages.clear()  # up to the folded tier (traced, nothing compiled)
        prep(x + 0.01 * k)
        _, tangent = torch.func.jvp(net, (x,), (v,))  # the caller's own forward AD
        torch.testing.assert_close(tangent, torch.func.jacfwd(net)(x) @ v)
        assert set(threading.enumerate()) <= before  # no thread of jacbench's
    assert prep.info.tier == "folded"  # it moved, in this thread


EXIT = textwrap.dedent(
    """
    import sys, torch, jacbench
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 10), torch.nn.Tanh(), torch.nn.Linear(10, 4))
    samples, targets = torch.randn(144, 3), torch.randn(144, 4)
    params = jacbench.FlatParams(net)
    residuals = lambda theta: (params.call(theta, samples) - targets).reshape(-1)
    theta = params.vector().detach()
    jac = jacbench.prepare(residuals, theta, **eval(sys.argv[1]))
    for _ in range(5):
        r, J = jac.value_and_jacobian(theta)
        theta = theta - 1e-3 * (J.T @ r)
    print("done", jac.info.tier)
    """
)


@pytest.mark.slow
def test_a_script_exits_cleanly_whatever_auto_was_doing():
    """What a user pastes (the LM loop of docs/library.md): every run exits 0, two with the
    default prepare and two whose calls move auto through every tier to its compiled one.
    (Its exit raced auto's build threads; auto now starts none, which the test above checks
    at every call, so a few runs say what twenty did.)"""
    options = ["{}"] * 2 + ["{'patience': 0.0}"] * 2
    codes = []
    for k in range(0, len(options), 2):  # two at a time: one per core
        runs = [
            subprocess.Popen([sys.executable, "-c", EXIT, o], stdout=subprocess.PIPE, text=True)
            for o in options[k : k + 2]
        ]
        codes += [(run.wait(timeout=300), run.stdout.read()) for run in runs]  # type: ignore[union-attr]
    assert [code for code, _ in codes] == [0] * len(options), codes
    assert all(out.startswith("done") for _, out in codes)
    assert codes[-1][1].split() == ["done", "compiled"]


def test_a_fork_while_another_thread_holds_the_lock_prepares_in_the_child():
    """The fork waits for jacbench's lock (os.register_at_fork): the child never starts with
    it held by a thread it does not have."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    net, x = net_and_point()
    expected = torch.autograd.functional.jacobian(net, x)
    for _ in range(RUNS):
        held = threading.Event()
        holder = threading.Thread(target=_hold, args=(held,))
        holder.start()
        held.wait()
        pid = os.fork()
        if pid == 0:  # the child: prepare and answer, then leave at once
            try:
                ok = torch.allclose(jacbench.prepare(net, x, "jacrev")(x), expected)
            finally:
                os._exit(0 if ok else 1)
        holder.join()
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                pytest.fail("the forked child hung in its first prepare")
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(status) == 0


def _hold(held: threading.Event) -> None:
    with TORCH_STATE:
        held.set()
        time.sleep(0.05)


STRATEGIES = ["auto", "jacrev", "jacfwd", "double_backward", "fd_central"]


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("mode", ["inference_mode", "no_grad", "enable_grad"])
def test_right_under_every_grad_mode_of_the_caller(name, mode):
    net, x = net_and_point()
    expected = torch.autograd.functional.jacobian(net, x)
    prep = jacbench.prepare(net, x, name)
    context = {
        "inference_mode": torch.inference_mode,
        "no_grad": torch.no_grad,
        "enable_grad": torch.enable_grad,
    }[mode]
    with context():
        J = prep(x)
        value, J2 = prep.value_and_jacobian(x)
        once = jacbench.jacobian(net, x, name)
    atol = 1e-6 if name == "fd_central" else 1e-10
    for got in (J, J2, once):
        torch.testing.assert_close(got, expected, atol=atol, rtol=1e-6)
    torch.testing.assert_close(value, net(x).detach())
    assert torch.is_grad_enabled()  # the caller's mode, as it was outside the block


def test_a_point_made_under_inference_mode_is_prepared_and_answered():
    net, x = net_and_point()
    with torch.inference_mode():
        x_inf = x.clone()
    prep = jacbench.prepare(net, x_inf)
    torch.testing.assert_close(prep(x_inf), torch.autograd.functional.jacobian(net, x))


def test_a_module_made_under_inference_mode_is_one_clear_error():
    with torch.inference_mode():
        net, x = net_and_point()
    with pytest.raises(UnsupportedFunction, match="inference_mode"):
        jacbench.prepare(net, x.clone(), "jacrev")(x.clone())


def test_autocast_leaves_the_dtype_the_caller_asked_for():
    net, x = net_and_point()
    net, x = net.float(), x.float()
    expected = torch.autograd.functional.jacobian(net, x)
    prep = jacbench.prepare(net, x, "jacrev")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        J = prep(x)
    assert J.dtype == torch.float32
    torch.testing.assert_close(J, expected)


def scatter_prod(x: torch.Tensor) -> torch.Tensor:
    index = torch.tensor([0, 0, 1, 1, 2])
    return torch.zeros(3, dtype=x.dtype).scatter_reduce(0, index, x, "prod", include_self=False)


def test_a_wrong_first_answer_is_an_error_naming_the_strategy():
    """torch 2.13's forward AD of scatter_reduce 'prod' is wrong: jacfwd's first answer is
    checked against reverse mode and refused, where reverse mode's is kept."""
    x = torch.tensor([1.5, 2.0, -0.5, 3.0, 0.7], dtype=torch.float64)
    with pytest.raises(WrongJacobian, match="jacfwd: its Jacobian at this point is wrong"):
        jacbench.prepare(scatter_prod, x, "jacfwd")(x)
    J = jacbench.prepare(scatter_prod, x, "jacrev")(x)
    torch.testing.assert_close(J, torch.autograd.functional.jacobian(scatter_prod, x))


def test_a_dense_jacobian_over_the_memory_available_is_refused_before_allocating():
    room = memory_budget.available_cpu_memory()
    if room is None:
        pytest.skip("this machine does not say how much memory is available")
    n = int((room / 4 / memory_budget.DENSE_COPIES) ** 0.5) + 1024  # float32, just over
    x = torch.zeros(n)
    with pytest.raises(MemoryBudget, match=rf"a dense {n} x {n} Jacobian .* 'auto'"):
        jacbench.prepare(torch.sin, x, "jacrev")


@pytest.mark.parametrize("name", ["auto", "jacrev", "jacfwd", "fd_forward", "autograd_loop"])
def test_the_callers_point_is_never_written(name):
    """f clamps its input in place: a no-op at x0 (inside the bounds), a write elsewhere."""

    def f(v: torch.Tensor) -> torch.Tensor:
        v.clamp_(-1.0, 1.0)
        return torch.sin(v) * 2.0

    x0 = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    prep = jacbench.prepare(f, x0, name)
    x = torch.tensor([3.0, -4.0, 0.5], dtype=torch.float64)
    kept = x.clone()
    prep(x)
    prep.value_and_jacobian(x)
    assert torch.equal(x, kept)
    assert torch.equal(x0, torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64))


def test_a_prepared_jacobian_pickles_and_deep_copies():
    net, x = net_and_point()
    prep = jacbench.prepare(net, x, "jacrev")
    expected = prep(x)
    for again in (pickle.loads(pickle.dumps(prep)), copy.deepcopy(prep)):
        torch.testing.assert_close(again(x), expected)
        assert again is not prep and again.strategy == "jacrev"


def test_what_cannot_be_pickled_says_so_in_one_line():
    from jacbench.core.problem import make_problem
    from jacbench.core.registry import load_registry

    net, x = net_and_point()
    by_the_benchmark = load_registry().prepare("jacrev", make_problem("n", net, x, "input", False))
    with pytest.raises(NotPicklable, match="prepare it again where it is needed"):
        pickle.dumps(by_the_benchmark)


@pytest.mark.slow
def test_a_prepared_jacobian_crosses_spawn():
    net, x = net_and_point()
    prep = jacbench.prepare(net, x, "jacrev")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(spawned.jacobian_there, (prep, x))
    torch.testing.assert_close(got, prep(x))


def test_batchnorm_in_train_mode_under_jacfwd_is_one_clear_error():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).double().train()
    x = torch.randn(5, 3, dtype=torch.float64)
    with pytest.raises(UnsupportedFunction, match="model.eval()"):
        jacbench.prepare(net, x, "jacfwd")(x)


def test_a_generator_seeded_inside_f_under_vmap_is_one_clear_error():
    def f(x: torch.Tensor) -> torch.Tensor:
        gen = torch.Generator().manual_seed(0)
        return torch.tanh(x) * (1 + torch.randn(3, generator=gen, dtype=torch.float64))

    _, x = net_and_point()
    with pytest.raises(UnsupportedFunction, match="draws random numbers"):
        jacbench.prepare(f, x, "jacfwd")(x)
    J = jacbench.prepare(f, x, "autograd_loop")(x)  # right, and the same at every call
    torch.testing.assert_close(J, torch.autograd.functional.jacobian(f, x))


@pytest.mark.parametrize("name", ["jacfwd", "sparse_jacfwd", "forward_ad_loop"])
def test_forward_mode_without_torchs_derivative_names_the_operator(name):
    points = torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cdist(x.reshape(-1, 2), points).reshape(-1)

    x = torch.randn(8, dtype=torch.float64)
    with pytest.raises(UnsupportedFunction, match="no forward-mode derivative of _cdist_forward"):
        jacbench.prepare(f, x, name)(x)
