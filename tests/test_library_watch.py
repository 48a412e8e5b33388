"""Issue 46 (S2): what a traced graph froze is watched, and the graph traced again when it
changes; never a silently stale Jacobian.

Tracing keeps a Python number f read (a module's plain attribute, a dict value, a global of
a helper f calls) as a literal and a tensor as a constant. Before the fix only replaced
parameters, buffers, submodules, closure cells and f's own globals were seen: after
``model.temperature = 2.0`` auto's folded and compiled tiers went on with the old value
(relative error up to 4.5), while torch.compile'd strategies (dynamo's guards) followed it.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import torch
from torch import nn

import jacbench
from jacbench.core.errors import StrategySkip
from jacbench.core.watch import MAX_ENTRIES, Watch

X = torch.randn(4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 6).double()
        self.scale = 2.0  # a plain float attribute
        self.shift = torch.ones(6, dtype=torch.float64)  # a tensor attribute, not a buffer
        self.calls = 0  # written by forward at every call

    def forward(self, x):
        self.calls += 1
        return torch.tanh(self.lin(x)) * self.scale * self.shift


CONFIG = {"k": 2.0, "weights": [1.0, 2.0, 3.0, 4.0]}
K = 2.0
USER_MODULE = types.ModuleType("jacbench_test_user_config")  # a user's own config module
USER_MODULE.FACTOR = 2.0
TABLE = np.array([1.0, 2.0, 3.0, 4.0])


@dataclasses.dataclass
class Settings:
    power: float = 2.0


SETTINGS = Settings()


class Stretch:
    factor = 2.0  # a class attribute, read through an instance


STRETCH = Stretch()


def helper(x):
    return torch.sin(x) * K


def reads_dict(x):
    return torch.sin(x) * CONFIG["k"]


def reads_list(x):
    return torch.sin(x) * torch.tensor(CONFIG["weights"], dtype=x.dtype)


def calls_helper(x):
    return helper(x) + 1.0


def reads_user_module(x):
    return torch.sin(x) * USER_MODULE.FACTOR


def reads_numpy(x):
    return torch.sin(x) * torch.as_tensor(TABLE, dtype=x.dtype)


def reads_object(x):
    return torch.sin(x) ** SETTINGS.power


def reads_class_attribute(x):
    return torch.sin(x) * STRETCH.factor


def with_default(x, scale=2.0):
    return torch.sin(x) * scale


def set_scale(m):
    m.scale = 5.0


def set_shift(m):
    m.shift = torch.full((6,), 3.0, dtype=torch.float64)


def set_dict(_):
    CONFIG["k"] = 5.0


def set_list(_):
    CONFIG["weights"][2] = -7.0


def set_helper_global(_):
    global K
    K = 5.0


def set_user_module(_):
    USER_MODULE.FACTOR = 5.0


def set_numpy(_):
    TABLE[1] = 9.0  # in place: the array is the same object


def set_object(_):
    SETTINGS.power = 3.0


def set_class_attribute(_):
    Stretch.factor = -1.0


def set_default(f):
    f.__defaults__ = (5.0,)


def restore():
    global K
    CONFIG.update(k=2.0, weights=[1.0, 2.0, 3.0, 4.0])
    K, USER_MODULE.FACTOR, SETTINGS.power, Stretch.factor = 2.0, 2.0, 2.0, 2.0
    TABLE[:] = [1.0, 2.0, 3.0, 4.0]
    with_default.__defaults__ = (2.0,)


CASES = {
    "module float attribute": (Scaled, set_scale),
    "module tensor attribute, not a buffer, replaced": (Scaled, set_shift),
    "dict value": (lambda: reads_dict, set_dict),
    "list item in a dict": (lambda: reads_list, set_list),
    "global of a helper f calls": (lambda: calls_helper, set_helper_global),
    "attribute of a user's module": (lambda: reads_user_module, set_user_module),
    "numpy array changed in place": (lambda: reads_numpy, set_numpy),
    "attribute of an object": (lambda: reads_object, set_object),
    "class attribute": (lambda: reads_class_attribute, set_class_attribute),
    "default argument": (lambda: with_default, set_default),
}


@pytest.fixture(autouse=True)
def restored():
    restore()
    yield
    restore()


def assert_follows(prep: jacbench.Prepared, f) -> None:
    for k in range(3):
        x = X + 0.1 * k
        torch.testing.assert_close(prep(x), torch.func.jacfwd(f)(x))


@pytest.mark.parametrize("case", CASES)
def test_a_traced_graph_follows_whatever_it_froze(case):
    make, change = CASES[case]
    f = make()
    prep = jacbench.prepare(f, X, "jacfwd_folded", compile=False)
    assert_follows(prep, f)
    change(f)
    assert_follows(prep, f)


def test_what_f_writes_itself_is_not_a_change():
    """A call counter f keeps is not traced again at every call (nor is a value rebound to
    an equal one)."""
    model = Scaled()
    prep = jacbench.prepare(model, X, "jacfwd_folded", compile=False)
    traced = []
    helper_calls = model.forward

    def counted(x):
        traced.append(1)
        return helper_calls(x)

    model.forward = counted  # a change too: traced again once, then not
    prep(X)
    traced.clear()
    model.scale = 2.0 * 1.0  # another float object, the same value
    for _ in range(5):
        prep(X)
    assert traced == []
    assert model.calls > 0


def test_the_default_prepare_follows_an_annealed_attribute_and_leaves_tracing():
    """The issue's loop: model.temperature annealed at every call of the default auto; the
    Jacobian follows it in every tier, and a graph traced again at every call sends auto
    back to the last tier that traces nothing, saying so once."""

    class Tempered(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8).double()
            self.temperature = 1.0

        def forward(self, x):
            return torch.softmax(self.lin(x) / self.temperature, dim=-1)

    torch.manual_seed(0)
    model = Tempered()
    x = torch.randn(8, dtype=torch.float64)
    # its moves made on the calls that reach their cost (not in the background): when each
    # is made is then known
    prep = jacbench.prepare(model, x, patience=0.0, cache=False, background=False)
    prep(x)  # eager; then it moves to batched backward passes, then builds the folded tier
    with pytest.warns(RuntimeWarning, match="traced again") as seen:
        for step in range(40):
            model.temperature = 1.01 + 0.01 * step  # changed before every call
            torch.testing.assert_close(prep(x), torch.func.jacfwd(model)(x))
    assert prep.info.tier == "batched"
    assert prep.tiers.refused.tier == "folded" and "traced again" in prep.tiers.refused.reason
    assert len([w for w in seen if "traced again" in str(w.message)]) == 1


def test_f_reaching_too_much_to_watch_is_not_traced():
    """A traced graph is refused, never run unwatched; auto stays eager (right)."""
    table = [float(k) for k in range(MAX_ENTRIES + 1)]

    def f(x):
        return torch.sin(x) * table[3]

    with pytest.raises(StrategySkip, match="too many to check at each call"):
        jacbench.prepare(f, X, "jacfwd_folded", compile=False)
    prep = jacbench.prepare(f, X, patience=0.0, cache=False, background=False)
    for _ in range(3):  # eager, batched, then the folded tier is refused
        torch.testing.assert_close(prep(X), torch.func.jacfwd(f)(X))
    assert prep.info.tier == "batched" and "too many" in prep.tiers.why


def test_the_watch_sees_a_replaced_parameter_an_added_hook_and_a_new_attribute():
    model = Scaled()
    watch = Watch([model])
    assert not watch.changed()
    model.lin.weight = nn.Parameter(torch.zeros(6, 4, dtype=torch.float64))
    assert watch.changed()
    watch = Watch([model])
    handle = model.lin.register_forward_hook(lambda m, i, o: o * 2)
    assert watch.changed()
    handle.remove()
    watch = Watch([model])
    model.offset = 1.0
    assert watch.changed()


@pytest.mark.compiles
@pytest.mark.slow
@pytest.mark.parametrize("case", ["module float attribute", "dict value"])
def test_the_compiled_tier_follows_what_it_froze(case):
    make, change = CASES[case]
    f = make()
    prep = jacbench.prepare(f, X, "jacfwd_folded")
    assert_follows(prep, f)
    change(f)
    assert_follows(prep, f)
