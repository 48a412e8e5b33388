"""What a traced graph froze is followed (dynamo's guards, every tensor a graph input), or
the graph is refused: never a silently stale Jacobian (``jacbench.core.guarded``).

Tracing keeps a Python number f read (a module's plain attribute, a dict value, a global of
a helper f calls, a namespace's field) as a literal. A home-made walk over what f reads
(``core/watch.py``, removed) missed namespaces, ``__slots__``, deques, distributions,
``os.environ``, numbers read from tensors, global hooks and a closure tensor's new storage.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import types
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import jacbench
from jacbench.core.errors import StrategySkip

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


def test_what_f_writes_itself_keeps_the_answers_right():
    """A call counter f keeps is a value dynamo specialised to: each call captures f again
    until dynamo's limit, then the Jacobian is answered untraced, said once; every answer
    is right."""
    model = Scaled()
    prep = jacbench.prepare(model, X, "jacfwd_folded", compile=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for k in range(12):
            x = X + 0.01 * k
            torch.testing.assert_close(prep(x), torch.func.jacfwd(model)(x))
    said = [w for w in seen if "untraced" in str(w.message)]
    assert len(said) <= 1 and model.calls > 12


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
    # its moves made on the calls that reach their cost, in this thread
    prep = jacbench.prepare(model, x, patience=0.0, cache=False)
    prep(x)  # eager; then it moves to batched backward passes, then builds the folded tier
    with pytest.warns(RuntimeWarning, match="traced again") as seen:
        for step in range(40):
            model.temperature = 1.01 + 0.01 * step  # changed before every call
            torch.testing.assert_close(prep(x), torch.func.jacfwd(model)(x))
    assert prep.info.tier == "batched"
    assert prep.tiers.refused.tier == "folded" and "traced again" in prep.tiers.refused.reason
    assert len([w for w in seen if "traced again" in str(w.message)]) == 1


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


class Slotted:
    __slots__ = ("scale",)

    def __init__(self) -> None:
        self.scale = 2.0


def _namespace():
    args = argparse.Namespace(temperature=2.0)
    return (lambda x: torch.sin(x) / args.temperature), lambda: setattr(args, "temperature", 5.0)


def _simple_namespace():
    ns = types.SimpleNamespace(scale=2.0)
    return (lambda x: torch.sin(x) * ns.scale), lambda: setattr(ns, "scale", -3.0)


def _slots():
    obj = Slotted()
    return (lambda x: torch.sin(x) * obj.scale), lambda: setattr(obj, "scale", -3.0)


def _deque():
    dq = collections.deque([2.0])
    return (lambda x: torch.sin(x) * dq[-1]), lambda: dq.append(-3.0)


def _distribution():
    one = torch.tensor(1.0, dtype=torch.float64)
    dist = torch.distributions.Normal(0.5 * one, 2.0 * one)

    def change():
        dist.scale = 3.0 * one

    return (lambda x: dist.log_prob(x)), change


def _environ():
    os.environ["JACBENCH_TEST_SCALE"] = "2.0"

    def f(x):
        return torch.sin(x) * float(os.environ.get("JACBENCH_TEST_SCALE", "1.0"))

    return f, lambda: os.environ.__setitem__("JACBENCH_TEST_SCALE", "-3.0")


def _item():
    t = torch.tensor(2.0, dtype=torch.float64)
    return (lambda x: torch.sin(x) * t.item()), lambda: t.fill_(-3.0)


def _int_size():
    t = torch.tensor(2)
    return (lambda x: torch.sin(x) * x[: int(t)].sum()), lambda: t.fill_(4)


def _branch():
    t = torch.tensor(2.0, dtype=torch.float64)
    return (lambda x: torch.sin(x) if t > 0 else torch.cos(x)), lambda: t.fill_(-1.0)


def _global_hook():
    lin = nn.Linear(4, 3).double()
    handles = []

    def change():
        hook = lambda m, i, o: o * 3.0  # noqa: E731
        handles.append(nn.modules.module.register_module_forward_hook(hook))

    return lin, change, handles


def _new_storage():
    w = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return (lambda x: torch.tanh(w @ x)), lambda: setattr(
        w, "data", 5.0 * torch.ones(3, 4).double()
    )


def _set_():
    w = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return (lambda x: torch.tanh(w @ x)), lambda: w.set_(-2.0 * torch.ones(3, 4).double())


def _index_in_place():
    index = torch.tensor([0, 1, 2])
    return (lambda x: torch.sin(x[index]) * x[0]), lambda: index.fill_(3)


def _seeded_generator():
    def f(x):
        g = torch.Generator().manual_seed(0)
        return x * torch.randn(4, dtype=torch.float64, generator=g)

    return f, lambda: None


HOLES = {
    "argparse namespace": _namespace,
    "simple namespace": _simple_namespace,
    "__slots__ object": _slots,
    "deque": _deque,
    "distribution's parameter": _distribution,
    "os.environ": _environ,
    "number read from a closure tensor (.item())": _item,
    "int() of a closure tensor as a size": _int_size,
    "branch on a closure tensor": _branch,
    "a closure tensor's new storage (.data =)": _new_storage,
    "a closure tensor's new storage (set_)": _set_,
    "an index tensor changed in place": _index_in_place,
    "a generator seeded inside f": _seeded_generator,
}


def _followed_or_refused(f, change, compile: bool) -> None:
    """Right at every point before and after ``change``, or refused at prepare (a skip
    that says why); never a stale answer."""
    try:
        prep = jacbench.prepare(f, X, "jacfwd_folded", compile=compile)
    except StrategySkip as exc:
        assert "cannot trace f" in str(exc)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a graph given way to, said once
        assert_follows(prep, f)
        change()
        assert_follows(prep, f)


@pytest.mark.parametrize("case", HOLES)
def test_what_the_old_watch_missed_is_followed_or_refused(case):
    f, change = HOLES[case]()
    try:
        _followed_or_refused(f, change, compile=False)
    finally:
        os.environ.pop("JACBENCH_TEST_SCALE", None)


def test_a_global_forward_hook_added_later_is_followed():
    lin, change, handles = _global_hook()
    try:
        _followed_or_refused(lin, change, compile=False)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.compiles
@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "argparse namespace",
        "a closure tensor's new storage (.data =)",
        "a closure tensor's new storage (set_)",
        "an index tensor changed in place",
    ],
)
def test_the_compiled_form_follows_what_the_old_watch_missed(case):
    f, change = HOLES[case]()
    _followed_or_refused(f, change, compile=True)
