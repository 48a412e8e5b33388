"""Issue 45: the library changes no process-wide setting behind its caller's back.

jacbench raised dynamo's ``cache_size_limit`` for the whole process (changing the user's own
``torch.compile``) so that its compiled Jacobians, which all share ``torch.func.jacfwd``'s
wrapper code, did not fall back to eager after 8 problems; each compiled Jacobian now has a
code object of its own (``scripts/compile_cache.py`` shows the 9th running eagerly without).
Nor does it touch the garbage collector (the command's own is ``jacbench.run.collector``).
"""

from __future__ import annotations

import gc

import pytest
import torch

import jacbench
from jacbench.strategies.compiled import own_entry


def test_each_compiled_entry_has_a_code_object_of_its_own():
    jac = torch.func.jacfwd(torch.sin)
    first, second = own_entry(jac), own_entry(jac)
    assert first.__code__ is not second.__code__
    x = torch.randn(3)
    torch.testing.assert_close(first(x), jac(x))


def test_calls_leave_grad_mode_and_threads_as_they_were():
    threads = torch.get_num_threads()
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            prep = jacbench.prepare(torch.sin, torch.randn(3), "jacfwd_folded", compile=False)
            prep(torch.randn(3))
            assert torch.is_grad_enabled() is grad
    assert torch.get_num_threads() == threads


def test_the_library_leaves_the_collector_alone():
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return x.sin()

    x = torch.ones(3)
    for strategy in ("jacrev", "double_backward"):  # f runs eagerly: it may read the state
        prep = jacbench.prepare(f, x, strategy)
        prep(x)
        prep(x)
    prep = jacbench.prepare(torch.sin, x, "jacfwd_folded", compile=False)  # a trace
    prep(x)
    assert len(seen) > 4 and all(seen)
    assert gc.isenabled()


@pytest.mark.compiles
@pytest.mark.slow
def test_compiling_leaves_dynamos_cache_limit_as_the_user_set_it():
    config = torch._dynamo.config
    before = (config.cache_size_limit, config.accumulated_cache_size_limit)
    x = torch.randn(3, dtype=torch.float64)
    for strategy in ("jacfwd_compiled", "jacrev_compiled"):
        prep = jacbench.prepare(lambda v: torch.tanh(v) * 2, x, strategy)
        torch.testing.assert_close(prep(x), torch.diag(2 / torch.cosh(x) ** 2))
    assert (config.cache_size_limit, config.accumulated_cache_size_limit) == before
