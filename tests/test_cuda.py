"""On a CUDA device: every strategy and the benchmark's references, against the CPU's answer.

The first run on a GPU (an H200, 2026-11-26) failed every job: the reference's
finite-difference probe multiplied the CPU copy of the reference by a direction on the GPU.
These tests skip without CUDA; ``scripts/gpu_check.py`` runs the CLI side on a GPU.
"""

from __future__ import annotations

import pytest
import torch

import jacbench
from jacbench.benchmark.reference import References, sampled_reference
from jacbench.core.enums import Kind, Mode
from jacbench.core.registry import load_registry
from jacbench.testing import TOLERANCE, jacobian_at, prepare_for_contract, problem

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA, CPU = torch.device("cuda"), torch.device("cpu")
NAMES = sorted(load_registry().strategies)


def on(device: torch.device, key: str = "mlp", dtype: torch.dtype = torch.float64):
    return problem(key, dtype, device)


@pytest.mark.parametrize("key", ["mlp", "mlp-params", "mlp-batch3"])
@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_on_cuda_gives_the_cpu_answer_on_cuda(name: str, key: str):
    registry = load_registry()
    spec, gpu = registry.get(name), on(CUDA, key)
    if spec.kind is Kind.NEGATIVE_CONTROL:
        pytest.skip("wrong by design")
    if spec.mode is Mode.ANALYTIC or (gpu.batch > 1 and not spec.batch):
        pytest.skip("the contract lets it skip this problem")
    jac = prepare_for_contract(name, gpu, registry)(gpu.x)
    dense = jac.to_dense() if jac.layout != torch.strided else jac
    assert dense.device.type == "cuda"
    cpu = on(CPU, key)
    expected = jacobian_at(cpu, cpu.x)
    err = float(torch.linalg.norm(dense.cpu() - expected) / torch.linalg.norm(expected))
    assert err < TOLERANCE[spec.kind], err


def test_the_reference_and_its_probe_run_on_cuda_and_equal_the_cpus():
    gpu, cpu = References(on(CUDA)).for_mode(None), References(on(CPU)).for_mode(None)
    assert gpu.doubt == "" and gpu.method == cpu.method
    assert torch.allclose(gpu.jacobian, cpu.jacobian, rtol=1e-12, atol=1e-14)


def test_the_sampled_reference_runs_on_cuda_and_equals_the_cpus():
    gpu, cpu = sampled_reference(on(CUDA)), sampled_reference(on(CPU))
    assert gpu.doubt == "" and gpu.by_cols.device.type == "cpu"
    assert torch.allclose(gpu.expected(), cpu.expected(), rtol=1e-12, atol=1e-14)


def test_a_function_of_nothing_has_zeros_on_its_device():
    x = torch.ones(3, device=CUDA)
    jac = jacbench.prepare(lambda x: torch.zeros(2, device=x.device), x, "double_backward")(x)
    assert jac.device.type == "cuda" and not bool(jac.any())


@pytest.mark.parametrize(
    "cfg",
    [
        {"_target_": "jacbench.models.adbench.BundleAdjustment", "n": 3, "m": 5, "p": 8},
        {"_target_": "jacbench.models.hand_tracking.HandTracking", "file": "hand1_t26_c100.txt"},
    ],
    ids=["ba", "ht"],
)
def test_the_field_problems_build_on_cuda_and_give_the_cpus_jacobian(cfg: dict):
    """BA's starting point joined a weight made on the CPU to buffers on the GPU, and its
    traced pattern indexed host ids with the GPU's index buffers."""
    from jacbench.benchmark.problems import build_problem

    gpu = build_problem(cfg, torch.float64, CUDA, seed=0)
    cpu = build_problem(cfg, torch.float64, CPU, seed=0)
    assert torch.equal(gpu.x.cpu(), cpu.x)
    expected = torch.func.jacrev(cpu.f)(cpu.x)
    assert torch.allclose(torch.func.jacrev(gpu.f)(gpu.x).cpu(), expected, rtol=1e-10)
    # its pattern traced on the host: the propagation read the GPU's index buffers
    sparse = jacbench.prepare(gpu.f, gpu.x, "sparse_jacfwd")
    assert sparse.info.pattern_source == "traced"
    assert torch.allclose(sparse(gpu.x).to_dense().cpu(), expected, rtol=1e-10)
    if gpu.blocks is not None:  # BA's observations
        by_blocks = jacbench.prepare(gpu.f, gpu.x, "blocks_jacrev", blocks=gpu.blocks())
        assert torch.allclose(by_blocks(gpu.x).cpu(), expected, rtol=1e-10)


def test_calibration_on_cuda_times_the_kernels_not_their_launch():
    """A call on the GPU returns once its kernels are queued: timed by CPU time, a call that
    queues a long product looked as cheap as one that queues a short one, and auto chose by
    launch cost. Here 8 products of 4096x4096 against one of 64x64."""
    from jacbench.core.interleaved import seconds_per_call

    big, small = torch.randn(4096, 4096, device=CUDA), torch.randn(64, 64, device=CUDA)

    def long_call():
        for _ in range(8):
            big @ big

    slow, fast = seconds_per_call([long_call, lambda: small @ small], 0.2, device=CUDA)
    assert slow > 20 * fast, (slow, fast)


def test_a_warm_call_on_cuda_does_not_wait_for_the_device_yet_reports_nan_later():
    """Reading the answer's sum at every call waited for the GPU at every call: seed004's
    compiled Jacobian on an H200 took 2x a hand-built torch.compile(jacfwd)."""
    import warnings

    x = torch.ones(64, device=CUDA)
    big = torch.randn(8192, 8192, device=CUDA)

    def f(x):  # products of some 50 ms queued before the answer
        return torch.log(x) * (big @ big @ big @ big).mean()

    prep = jacbench.prepare(f, x, "jacfwd")
    prep(x)  # the first call is checked at once
    torch.cuda.synchronize()
    queued = torch.cuda.Event()
    prep(x)
    queued.record()
    assert not queued.query()  # the call returned with its product still queued
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prep(0 * x)  # d log(x) / dx = 1/x: infinite entries, reported at a later call
        torch.cuda.synchronize()
        prep(x)
    assert [w for w in caught if w.category is jacbench.NonFiniteJacobian], caught
