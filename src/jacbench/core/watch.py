"""What a traced graph froze, watched at every call: the guards a traced graph lacks.

Tracing f (``make_fx``) runs its Python once and keeps only the tensor operations: a Python
number it read (``self.temperature``, ``CONFIG["k"]``, a global of a helper f calls) is baked
into the graph as a literal, a tensor it read is held as a constant (the same object: updated
in place, as optimisers do, the graph sees it; replaced, it goes on with the old one).
``torch.compile`` guards on such values and recompiles; a traced graph would silently go on
with the old ones. ``Watch`` records what f can reach from its roots (a module tree's
``__dict__`` entries, plain attributes included; a function's closure cells, defaults and the
globals its code names; the same for the functions, objects and user modules those reach;
the contents of dicts, lists and numpy arrays), bounded in size, and ``changed()`` says when
any of it was rebound or, for containers, changed: the graph is then traced again.

The check is by identity (a rebound name holds another object), falling back to equality
for immutable scalars (``m.scale = 2.0`` again is no change). What f itself writes at every
call (a call counter) is left out (``settle``): a value f both writes and reads would make
two calls at one point differ, which ``jacbench.core.probe`` refuses at ``prepare``.
Where more is reachable than ``MAX_ENTRIES``, ``TooMuchToWatch`` is raised: tracing is then
refused (the eager strategies stay right), never done unwatched.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import operator
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

MAX_ENTRIES = 50_000  # entries (dict values, list items, cells, names) watched at most
MAX_DEPTH = 64  # nesting of objects followed at most
MAX_ARRAY = 100_000  # elements of a numpy array whose contents are compared at each call
# Packages whose functions, classes and modules are taken as fixed: their code's globals are
# not followed (a user's own objects of their types still are, e.g. an nn.Linear's __dict__)
FIXED_PACKAGES = frozenset(
    {"torch", "numpy", "scipy", "jacbench", "functorch", "sympy", "builtins", "typing_extensions"}
)
STDLIB = sysconfig.get_paths()["stdlib"]
SCALARS = (int, float, complex, str, bytes, bool, type(None), torch.dtype, torch.device)

_same = operator.is_
_contents = operator.attrgetter("cell_contents")


class TooMuchToWatch(Exception):
    """f reaches more objects than can be checked at each call."""


def _equal(a: object, b: object) -> bool:
    """The same object, or equal immutable scalars of one type (NaN equal to NaN)."""
    if a is b:
        return True
    if type(a) is not type(b) or not isinstance(a, SCALARS):
        return False
    return a == b or (a != a and b != b)


_MISSING = object()


class _Mapping:
    """A dict's (or a class's) entries: all of them, or after ``settled`` those f does not
    write, compared with what they were when traced."""

    __slots__ = ("d", "keys", "names", "values")

    def __init__(self, d: Any, keys: list[object] | None = None) -> None:
        self.d, self.keys = d, keys
        self.names = list(d) if keys is None else keys
        self.values = self._now()

    def _now(self) -> list[object]:
        d = self.d
        return list(d.values()) if self.keys is None else [d.get(k, _MISSING) for k in self.keys]

    def moved(self) -> bool:
        d, values = self.d, self.values
        if self.keys is None and len(d) == len(values) and all(map(_same, d.values(), values)):
            return False
        return _rebound(self, self._now())

    def settled(self) -> _Mapping | None:
        """What is left once the keys whose values changed (f's own writes) are dropped."""
        if not self.moved():
            return self
        before = dict(zip(self.names, self.values, strict=True))
        kept = [k for k in self.names if _equal(self.d.get(k, _MISSING), before[k])]
        return _Mapping(self.d, kept) if kept else None


class _Items:
    """Values read off items (closure cells, names in a namespace) or a list's or set's
    elements, compared with what they were when traced."""

    __slots__ = ("items", "get", "values")

    def __init__(self, items: Any, get: Callable[[Any], object] | None = None) -> None:
        self.items, self.get = items, get
        self.values = self._now()

    def _now(self) -> list[object]:
        return list(self.items if self.get is None else map(self.get, self.items))

    def moved(self) -> bool:
        try:
            if self.get is None:
                items = self.items
                if len(items) == len(self.values) and all(map(_same, items, self.values)):
                    return False
            elif all(map(_same, map(self.get, self.items), self.values)):
                return False
            return _rebound(self, self._now())
        except (ValueError, KeyError):  # a cell emptied, a global deleted
            return True

    def settled(self) -> _Items | None:
        """What is left once the items f itself changed are dropped (a list f writes: all)."""
        if not self.moved():
            return self
        if self.get is None:
            return None
        kept = []
        for item, before in zip(self.items, self.values, strict=True):
            try:
                if _equal(self.get(item), before):
                    kept.append(item)
            except (ValueError, KeyError):
                pass
        return _Items(kept, self.get) if kept else None


def _rebound(slot: _Mapping | _Items, now: list[object]) -> bool:
    """Whether ``now`` differs from the slot's values beyond equal scalars rebound (then the
    slot takes them, so that its next check is fast again)."""
    if len(now) != len(slot.values) or not all(map(_equal, now, slot.values)):
        return True
    slot.values = now
    return False


class _Array:
    """A numpy array's contents (a graph holds what it read of them as a constant)."""

    __slots__ = ("array", "copy")

    def __init__(self, array: Any) -> None:
        self.array, self.copy = array, array.copy()

    def moved(self) -> bool:
        import numpy as np

        a = self.array
        return a.shape != self.copy.shape or not np.array_equal(a, self.copy, equal_nan=True)

    def settled(self) -> _Array | None:
        return None if self.moved() else self


class _Empty:
    """Containers empty when traced (a module's hook dicts, mostly): one check for all."""

    __slots__ = ("containers",)

    def __init__(self, containers: list[Any]) -> None:
        self.containers = containers

    def moved(self) -> bool:
        return any(map(len, self.containers))

    def settled(self) -> _Empty | None:
        kept = [c for c in self.containers if not len(c)]
        return _Empty(kept) if kept else None


@functools.lru_cache(maxsize=1024)
def _fixed_package(name: str) -> bool:
    """Whether the module ``name`` belongs to a package taken as fixed or to the standard
    library (found by where it lies: a user's own ``test.py`` is not the stdlib's)."""
    top = name.split(".")[0]
    if top in FIXED_PACKAGES or top in sys.builtin_module_names:
        return True
    file = getattr(sys.modules.get(top), "__file__", None) or ""
    return bool(file) and file.startswith(STDLIB) and "site-packages" not in file


def _fixed(obj: object) -> bool:
    """Whether ``obj`` comes from a package taken as fixed (torch, numpy, the stdlib...)."""
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return _fixed_package(str(module or "builtins"))


def _code_names(code: types.CodeType) -> set[str]:
    """Every name a code object (and the code nested in it: lambdas, comprehensions) reads
    as a global or an attribute."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class _Walker:
    """Collects what is reachable from the roots into slots, each checked at every call."""

    def __init__(self) -> None:
        self.slots: list[Any] = []
        self.empty: list[Any] = []  # containers empty now: one check for all
        self.seen: set[object] = set()
        self.keep: list[object] = []  # what ``seen`` holds ids of stays alive meanwhile
        self.entries = 0

    def add(self, slot: Any, size: int) -> None:
        self.entries += size
        if self.entries > MAX_ENTRIES:
            raise TooMuchToWatch(f"f reaches more than {MAX_ENTRIES} values")
        self.slots.append(slot)

    def first_time(self, obj: object, key: object = None) -> bool:
        """Whether ``obj`` (under ``key``, default its identity) is met for the first time."""
        key = id(obj) if key is None else key
        if key in self.seen:
            return False
        self.seen.add(key)
        self.keep.append(obj)
        return True

    def visit(self, obj: object, depth: int = 0, names: set[str] | None = None) -> None:
        if isinstance(obj, (*SCALARS, torch.Tensor)):
            return  # compared where it is held; a tensor's in-place changes reach the graph
        if depth > MAX_DEPTH:
            raise TooMuchToWatch(f"f reaches objects nested more than {MAX_DEPTH} deep")
        if isinstance(obj, types.ModuleType):
            self.module(obj, depth, names or set())
            return
        if not self.first_time(obj):
            return
        if isinstance(obj, dict | types.MappingProxyType):
            self.mapping(obj, depth)
        elif isinstance(obj, list | set):
            self.container(obj, _Items)
            self.each(obj, depth)
        elif isinstance(obj, tuple | frozenset):
            self.each(obj, depth)
        elif isinstance(obj, types.FunctionType):
            self.function(obj, depth)
        elif isinstance(obj, types.MethodType):
            self.each((obj.__self__, obj.__func__), depth)
        elif isinstance(obj, functools.partial):
            self.each((obj.func, obj.args, obj.keywords), depth)
        elif type(obj).__module__ == "numpy" and hasattr(obj, "shape"):
            array: Any = obj  # an array or a scalar (numpy is imported only where compared)
            if array.size > MAX_ARRAY:
                raise TooMuchToWatch(f"f reads a numpy array of {array.size} elements")
            self.add(_Array(array), array.size)
        elif isinstance(obj, type):
            self.cls(obj, depth)
        elif isinstance(obj, nn.Module) or not _fixed(type(obj)):
            attributes = getattr(obj, "__dict__", None)
            if attributes is not None:
                self.visit(attributes, depth + 1)
            self.cls(type(obj), depth)

    def each(self, items: Iterable[object], depth: int) -> None:
        for item in items:
            self.visit(item, depth + 1)

    def container(self, c: Any, slot: type) -> None:
        if len(c):
            self.add(slot(c), len(c))
        else:
            self.empty.append(c)

    def mapping(self, d: Any, depth: int) -> None:
        self.container(d, _Mapping)
        self.each(d.values(), depth)

    def function(self, fn: types.FunctionType, depth: int) -> None:
        if _fixed(fn):
            return
        names = _code_names(fn.__code__)
        namespace = fn.__globals__
        present = sorted(n for n in names if n in namespace)
        self.add(_Items(present, namespace.__getitem__), len(present))
        for name in present:
            self.visit(namespace[name], depth + 1, names)
        cells = fn.__closure__ or ()
        if cells:
            self.add(_Items(cells, _contents), len(cells))
            for cell in cells:
                with contextlib.suppress(ValueError):  # a cell not yet filled
                    self.visit(cell.cell_contents, depth + 1, names)
        self.add(_Items(("__defaults__", "__kwdefaults__"), functools.partial(getattr, fn)), 2)
        self.each((fn.__defaults__ or (), fn.__kwdefaults__ or {}), depth)

    def module(self, module: types.ModuleType, depth: int, names: set[str]) -> None:
        """A Python module reached by name: the attributes the code reaching it names (a
        user's config module's constants), never the whole module; fixed ones not at all."""
        if _fixed(module):
            return
        namespace = vars(module)
        present = sorted(n for n in names if n in namespace)
        if not present or not self.first_time(module, (id(module), tuple(present))):
            return
        self.add(_Items(present, namespace.__getitem__), len(present))
        for name in present:
            self.visit(namespace[name], depth + 1, names)

    def cls(self, cls: type, depth: int) -> None:
        """A user's class: its own attributes and methods (what ``self.x`` or a method call
        reaches), for every class of its MRO not from a fixed package."""
        for klass in inspect.getmro(cls):
            if not _fixed(klass) and self.first_time(klass):
                self.mapping(vars(klass), depth + 1)


class Watch:
    """What f can reach from ``roots`` (a module, a function), as it is now; ``changed()``
    says whether any of it was rebound or changed since."""

    def __init__(self, roots: Iterable[object]) -> None:
        walker = _Walker()
        for root in roots:
            walker.visit(root)
        self.entries = walker.entries
        self._group(walker.slots + ([_Empty(walker.empty)] if walker.empty else []))

    def _group(self, slots: list[Any]) -> None:
        """Whole dicts checked together in one pass (a module tree's dicts: on seed004's
        module 11 -> ~4 us a call), every other slot on its own."""
        self.slots = slots
        whole = [s for s in slots if isinstance(s, _Mapping) and s.keys is None]
        self._dicts = [s.d for s in whole]
        self._lengths = [len(s.values) for s in whole]
        self._values = list(itertools.chain.from_iterable(s.values for s in whole))
        self._others = [s for s in slots if not (isinstance(s, _Mapping) and s.keys is None)]

    def changed(self) -> bool:
        if list(map(len, self._dicts)) == self._lengths and all(
            map(_same, itertools.chain.from_iterable(map(_dict_values, self._dicts)), self._values)
        ):
            return any(slot.moved() for slot in self._others)
        moved = any(slot.moved() for slot in self.slots)  # equal scalars rebound: taken
        if not moved:
            self._group(self.slots)
        return moved

    def settle(self, call: Callable[[], object]) -> None:
        """Run ``call`` (f once) and stop watching what it changed: f's own writes."""
        call()
        self._group([kept for kept in (slot.settled() for slot in self.slots) if kept])


_dict_values = operator.methodcaller("values")
