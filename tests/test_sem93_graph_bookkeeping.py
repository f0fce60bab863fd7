"""Random programs against PyTorch, round 93: the autograd graph's bookkeeping.

Each program is a random sequence of torch-API calls run in torch 2.13 and in retrograd's
torch-compatible surface, over a pool of tensors both libraries grow alike: leaves made with
or without ``requires_grad`` (float64, float32, int64, bool), ops on them (some torch saves
tensors for, some not; views; casts; comparisons, ``argmax`` and ``.long()`` that cut the
graph), ``detach``/``detach_``/``requires_grad_``/``retain_grad``, in-place writes (on
leaves, views and results; under ``no_grad``; through ``.data``), grad-mode contexts entered
and left in any nesting (``no_grad``, ``enable_grad``, ``set_grad_enabled``,
``inference_mode``, whose tensors are used later), ``backward`` (twice, with and without
``retain_graph``, with ``gradient=``), ``autograd.grad`` (``allow_unused``,
``materialize_grads``, ``grad_outputs``, inputs that do not require grad) and the leaves'
``.grad`` zeroed (``grad.zero_()``) or dropped (``grad = None``). After every call both
libraries must agree on what it returned or whether it raised (ours a ``RetrogradError``),
and, for every tensor of the pool, on ``requires_grad``, ``is_leaf``, ``grad_fn`` (``None``
or not, and its name), ``retains_grad``, dtype and values, and on the ``.grad`` of every
tensor (torch's attribute; retrograd's gradients of every backward so far added up, as a
torch port reads them).

retrograd's documented departures are not drawn: ``detach()`` of a leaf that requires grad
requires grad (Burn's rule, API.md section 3: the port adds ``requires_grad_(False)``), a
part of the graph a backward consumed refuses a second walk even where it saved nothing
(section 3: a walk that reaches a consumed part is drawn only where torch's refuses too), a
value saved for backward is never changed by a later in-place op (section 10: no in-place
write reaches a storage torch saved), ``backward()`` of a non-scalar seeds with ones
(section 3: a non-scalar's backward is given ``gradient=``).

``HYPOTHESIS_PROFILE=explore SEM93_SCALE=50`` hunts with fresh draws.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import retrograd as rg

torch = pytest.importorskip("torch")


def _examples(count: int) -> int:
    return count * int(os.environ.get("SEM93_SCALE", "1"))


SETTINGS = settings(
    max_examples=_examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Failed:
    """A call that raised: only whether it did is compared (and that ours is ours)."""

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        return f"raised {type(self.error).__name__}: {self.error}"


class Skipped:
    """A drawn call that this state does not admit (a departure, or no operand of its kind):
    nothing ran, in both libraries alike."""

    def __eq__(self, other):
        return isinstance(other, Skipped)

    def __repr__(self) -> str:
        return "skipped"


SKIP = Skipped()

#: ops torch's engine saves an input or output of (an in-place write into what they read or
#: made would be torch's "modified by an inplace operation", a departure not drawn)
SAVING_UNARY = {"exp", "tanh", "square", "abs", "sigmoid"}
UNARY = {
    "exp": lambda lib, t: t.exp(),
    "tanh": lambda lib, t: t.tanh(),
    "square": lambda lib, t: t * t,
    "abs": lambda lib, t: t.abs(),
    "sigmoid": lambda lib, t: t.sigmoid(),
    "neg": lambda lib, t: -t,
    "add_scalar": lambda lib, t: t + 1.5,
    "mul_scalar": lambda lib, t: t * 0.5,
    "sum": lambda lib, t: t.sum(),
    "sum0": lambda lib, t: t.sum(0),
    "mean": lambda lib, t: t.mean(),
    "clone": lambda lib, t: t.clone(),
    "double": lambda lib, t: t.double(),
    "float": lambda lib, t: t.float(),
    "long": lambda lib, t: t.long(),
    "bool": lambda lib, t: t.bool(),
    "gt": lambda lib, t: t > 0.5,
    "eq": lambda lib, t: t == t,
    "argmax": lambda lib, t: t.argmax(),
    "index0": lambda lib, t: t[0],
    "view": lambda lib, t: t.view(tuple(t.shape)),
    "slice": lambda lib, t: t[..., 1:] if t.dim() else t,
    "unsqueeze": lambda lib, t: t.unsqueeze(0).squeeze(0),
    "detach": lambda lib, t: t.detach(),
    "where": lambda lib, t: lib.where(t > 0.5, t, lib.zeros_like(t)),
}
#: ops whose result shares its input's storage (an in-place write into either reaches both)
ALIASING = {"index0", "view", "slice", "unsqueeze", "detach"}
BINARY = {
    "add": lambda lib, a, b: a + b,
    "sub": lambda lib, a, b: a - b,
    "mul": lambda lib, a, b: a * b,
    "maximum": lambda lib, a, b: lib.maximum(a, b),
}
SAVING_BINARY = {"mul", "maximum"}
INPLACE = {
    "add_": lambda lib, t, o: t.add_(1.0),
    "mul_": lambda lib, t, o: t.mul_(2.0),
    "zero_": lambda lib, t, o: t.zero_(),
    "fill_": lambda lib, t, o: t.fill_(0.25),
    "copy_": lambda lib, t, o: t.copy_(o),
    "setitem": lambda lib, t, o: t.__setitem__(0, 3.0),
    "add_other": lambda lib, t, o: t.add_(o),
    "data_mul": lambda lib, t, o: t.data.mul_(3.0),
    "data_set": lambda lib, t, o: setattr(t, "data", o.detach().clone()),
}
MODES = {
    "no_grad": lambda lib: lib.no_grad(),
    "enable_grad": lambda lib: lib.enable_grad(),
    "set_off": lambda lib: lib.set_grad_enabled(False),
    "set_on": lambda lib: lib.set_grad_enabled(True),
    "inference": lambda lib: lib.inference_mode(),
    "inference_off": lambda lib: lib.inference_mode(False),
}
VALUES = {
    (2, 3): [[0.5, -1.25, 2.0], [1.5, 0.75, -0.5]],
    (3,): [0.25, -1.5, 1.0],
    (): 0.75,
}


class Entry:
    """A pool tensor and what the program knows of it: the storage it shares (an id), the
    non-leaf entries it was computed from (itself included), and the ops that made them."""

    def __init__(self, tensor, storage, ancestors, saving):
        self.tensor = tensor
        self.storage = storage
        self.ancestors = ancestors
        self.saving = saving  # whether the op that made it saved something for backward
        self.retained = False  # whether retain_grad() was called on it
        self.frozen = False  # a leaf that required grad and was frozen (round 93b)


class World:
    """One library's run of a program."""

    def __init__(self, lib):
        self.lib = lib
        self.pool: list[Entry] = []
        self.saved_storages: set[int] = set()
        self.no_grad_views: set[int] = set()  # storages with a view made under no_grad
        self.consumed: set[int] = set()  # ids of entries a backward freed
        self.modes: list = []  # the grad-mode contexts entered, innermost last
        self.total = None  # retrograd: the gradients of every backward, added up
        self.next_storage = 0

    # -- helpers ---------------------------------------------------------------------------
    def storage(self):
        self.next_storage += 1
        return self.next_storage

    def pick(self, index, where=lambda e: True):
        chosen = [e for e in self.pool if where(e)]
        return chosen[index % len(chosen)] if chosen else None

    def add(self, tensor, storage=None, ancestors=frozenset(), saving=False):
        entry = Entry(tensor, storage or self.storage(), ancestors, saving)
        if not tensor.is_leaf:
            entry.ancestors = ancestors | {id(entry)}
        self.pool.append(entry)
        return entry

    def grad_of(self, t):
        if self.lib is torch:
            return t.grad
        return None if self.total is None else t.grad(self.total)

    def accumulate(self, result):
        if self.lib is not torch and result is not None:
            self.total = result if self.total is None else self.total + result

    # -- the calls -------------------------------------------------------------------------
    def leaf(self, kind, requires):
        lib = self.lib
        if kind == "int":
            t = lib.tensor([1, -2, 3])
        elif kind == "bool":
            t = lib.tensor([True, False, True])
        elif kind == "ones":
            t = lib.ones(2, 3, dtype=lib.float64, requires_grad=requires)
        else:
            shape = {"matrix": (2, 3), "vector": (3,), "scalar": ()}[kind]
            dtype = lib.float32 if kind == "vector" else lib.float64
            t = lib.tensor(VALUES[shape], dtype=dtype, requires_grad=requires)
        self.add(t)
        return "made"

    def odd_inference(self, t):
        """Whether ``t`` is an inference tensor that requires grad (made with
        ``requires_grad=True`` in inference_mode) used outside it: torch's views and
        reductions of it do not require grad, its other ops do, and its clone is a
        ``CopyBackwards``; retrograd records them all (not drawn, round 93's report)."""
        return t.is_inference() and t.requires_grad and not self.lib.is_inference_mode_enabled()

    def unary(self, name, i):
        entry = self.pick(i)
        t = entry.tensor
        if self.odd_inference(t):
            return SKIP
        if name in ("exp", "tanh", "sigmoid", "mean") and not t.is_floating_point():
            return SKIP
        if name in ("index0", "slice", "sum0", "argmax") and t.dim() == 0:
            return SKIP
        if name in ALIASING and self.lib.is_inference_mode_enabled() and not t.is_inference():
            # torch's view of an ordinary tensor taken in inference_mode: a later in-place
            # write to it or its base raises, as reading its grad_fn does (a torch error
            # retrograd does not raise: left, in the report of round 93)
            return SKIP
        out = UNARY[name](self.lib, t)
        if name == "detach" and self.lib is not torch and t.is_leaf and out.requires_grad:
            out.requires_grad_(False)  # the port of torch's detach() of such a leaf
        saving = name in SAVING_UNARY
        if saving:
            self.saved_storages.add(entry.storage)
        aliasing = name in ALIASING
        if aliasing and name != "detach" and not self.lib.is_grad_enabled():
            # torch's view made under no_grad: after an in-place write to it or its base,
            # reading its grad_fn or is_leaf raises ("A view was created in no_grad mode
            # ..."), where retrograd's reads: such writes are not drawn (round 93's report)
            self.no_grad_views.add(entry.storage)
        result = self.add(out, entry.storage if aliasing else None, entry.ancestors, saving)
        if saving:
            self.saved_storages.add(result.storage)
        return "made"

    def binary(self, name, i, j):
        a, b = self.pick(i), self.pick(j)
        if self.odd_inference(a.tensor) or self.odd_inference(b.tensor):
            return SKIP
        if self.lib.bool in (a.tensor.dtype, b.tensor.dtype):
            return SKIP
        out = BINARY[name](self.lib, a.tensor, b.tensor)
        saving = name in SAVING_BINARY
        if saving:
            self.saved_storages.update((a.storage, b.storage))
        self.add(out, None, a.ancestors | b.ancestors, saving)
        return "made"

    def inplace(self, name, i, j):
        entry = self.pick(i)
        other = self.pick(j)
        shared = {e.storage for e in self.pool if e.storage == entry.storage}
        if shared & self.saved_storages:
            return SKIP  # torch's "modified by an inplace operation" at a later backward
        if entry.storage in self.no_grad_views:
            return SKIP
        t = entry.tensor
        if not t.is_floating_point():
            return SKIP
        if t.is_inference() and not self.lib.is_inference_mode_enabled():
            # both refuse; torch's refusal comes after its write (the values changed), ours
            # before (API.md section 7: a failed call leaves the tensor as it was)
            return SKIP
        if name in ("copy_", "add_other", "data_set"):
            if other is entry or other.tensor.shape != t.shape or other.tensor.dtype != t.dtype:
                return SKIP
            if name == "data_set" and (other.storage in self.saved_storages or self.modes):
                return SKIP
        if name == "setitem" and t.dim() == 0:
            return SKIP
        if name.startswith("data") and entry.ancestors and not t.is_leaf:
            return SKIP  # a write through .data of a result: torch's engine reads it later
        INPLACE[name](self.lib, t, other.tensor)
        if not t.is_leaf:
            entry.ancestors = entry.ancestors | other.ancestors | {id(entry)}
        return "written"

    def toggle(self, name, i):
        entry = self.pick(i)
        t = entry.tensor
        viewed = sum(e.storage == entry.storage for e in self.pool) > 1
        # (the storage's first tensor: the base its later sharers are views of)
        base = next(e for e in self.pool if e.storage == entry.storage) is entry
        detached = name == "detach_" and base and t.requires_grad
        if (name.startswith("requires_grad") or detached) and viewed and t.is_leaf:
            # torch's views of a leaf follow its requires_grad as it changes, after the view
            # was taken (a view made under no_grad, or before the base required grad, is a
            # leaf whose gradient is its own); retrograd's keep the flag they were made with:
            # not drawn (round 93's report; a base leaf's ``detach_()`` turns it off too)
            return SKIP
        if name in ("requires_grad_off", "detach_") and t.is_leaf and t.requires_grad:
            entry.frozen = True  # its .grad stays, in torch (round 93b)
        if name == "requires_grad_on":
            t.requires_grad_(True)
        elif name == "requires_grad_off":
            t.requires_grad_(False)
        elif name == "detach_":
            t.detach_()
            entry.ancestors = frozenset()
        elif name == "retain_grad":
            t.retain_grad()
            entry.retained = True
        return "toggled"

    def mode(self, name):
        if name == "exit":
            if not self.modes:
                return SKIP
            self.modes.pop().__exit__(None, None, None)
            return "left"
        context = MODES[name](self.lib)
        context.__enter__()
        self.modes.append(context)
        return "entered"

    def departing_walk(self, entry):
        """Whether a walk from ``entry`` reaches a part an earlier backward consumed, other
        than where torch refuses too: exactly when the first node it walks is a consumed one
        that saved (API.md section 3's departure)."""
        if not entry.ancestors & self.consumed:
            return False
        return not (id(entry) in self.consumed and entry.saving and entry.tensor.dim() == 0)

    def no_grad_view(self, entry):
        """Whether ``entry`` is a view made under no_grad: torch's backward from such a leaf
        raises "does not require grad" though its requires_grad is True, retrograd's
        walks (not drawn, round 93's report)."""
        return entry.tensor.is_leaf and entry.storage in self.no_grad_views

    def backward(self, i, retain, seeded):
        entry = self.pick(i)
        t = entry.tensor
        if self.no_grad_view(entry) or self.departing_walk(entry):
            return SKIP
        if self.lib.is_inference_mode_enabled():
            # torch's backward inside inference_mode makes a new .grad an inference tensor,
            # into which the next backward outside it may not accumulate ("Inplace update to
            # inference tensor outside InferenceMode"); retrograd's gradients are values that
            # add up: not drawn (round 93's report)
            return SKIP
        lib = self.lib
        kwargs = {"retain_graph": retain}
        if t.dim() or seeded:
            kwargs["gradient"] = lib.full(t.shape, 0.5 if seeded else 1.0, dtype=t.dtype)
        self.accumulate(t.backward(**kwargs))
        if not retain:
            self.consumed |= entry.ancestors
        return "walked"

    def grad(self, i, picks, flags):
        allow_unused, materialize, retain, seeded = flags
        entry = self.pick(i)
        t = entry.tensor
        if self.no_grad_view(entry) or self.departing_walk(entry):
            return SKIP
        if any(e.retained for e in self.pool):
            # torch's autograd.grad fills the .grad of the tensors that retain it on its way
            # (a torch port reads gradients from what backward() returns: not drawn)
            return SKIP
        lib = self.lib
        inputs = [self.pick(k).tensor for k in picks]
        kwargs = {"retain_graph": retain, "allow_unused": allow_unused}
        if materialize:
            kwargs["materialize_grads"] = True
        if t.dim() or seeded:
            kwargs["grad_outputs"] = lib.full(t.shape, 0.5 if seeded else 1.0, dtype=t.dtype)
        found = lib.autograd.grad(t, inputs, **kwargs)
        if not retain:
            self.consumed |= entry.ancestors
        return list(found)

    def clear(self, name, i):
        entry = self.pick(i)
        t = entry.tensor
        if not t.requires_grad and not entry.frozen:
            return SKIP
        g = self.grad_of(t)
        if g is None:
            return SKIP
        if name == "zero":
            g.zero_()
        elif self.lib is torch:
            t.grad = None
        else:
            t.grad_remove(self.total)
        return "cleared"

    def close(self):
        while self.modes:
            self.modes.pop().__exit__(None, None, None)

    # -- the state compared after every call -----------------------------------------------
    def state(self):
        rows = []
        for entry in self.pool:
            t = entry.tensor
            row = [
                str(t.dtype).replace("torch.", ""),
                tuple(t.shape),
                t.requires_grad,
                t.is_leaf,
                read(lambda t=t: None if t.grad_fn is None else t.grad_fn.name()),
                values(t),
            ]
            row.append(t.retains_grad)
            # (a frozen leaf keeps the .grad it had, as torch's)
            if (t.requires_grad and (t.is_leaf or entry.retained)) or entry.frozen:
                row.append(values(self.grad_of(t)))
            rows.append(row)
        return rows


class Unreadable:
    """A field torch refuses to read: its ``grad_fn`` of a view taken in ``inference_mode``
    of an ordinary tensor whose base was written in place since ("A view was created in
    inference mode and its base ... has been modified inplace"), an error of torch's view
    tracking that retrograd's tensors do not raise (left out of the comparison)."""

    def __eq__(self, other):
        return True

    def __repr__(self) -> str:
        return "unreadable in torch"


def read(field):
    """A field of the state, or Unreadable where reading it raised."""
    try:
        return field()
    except Exception:
        return Unreadable()


def values(t):
    if t is None:
        return None
    with contextlib.suppress(Exception):
        t = t.detach()
    return np.array(t.numpy() if hasattr(t, "numpy") else t, dtype=np.float64)


def run(world, action):
    kind, *args = action
    method = getattr(world, kind)
    try:
        result = method(*args)
    except Exception as error:  # both libraries' errors are compared below
        return Failed(error)
    if isinstance(result, list):
        return [values(g) for g in result]
    return result


def compare(ours, theirs, where):
    if isinstance(theirs, Unreadable):
        return
    if isinstance(theirs, Failed) or isinstance(ours, Failed):
        assert isinstance(ours, Failed) == isinstance(theirs, Failed), (
            f"{where}: retrograd {ours!r}, torch {theirs!r}"
        )
        assert isinstance(ours.error, rg.RetrogradError), f"{where}: {ours!r} is not ours"
        return
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), f"{where}: {ours} {theirs}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            compare(a, b, f"{where}[{k}]")
        return
    if isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), f"{where}: {ours!r} vs {theirs!r}"
        assert ours.shape == theirs.shape, f"{where}: shape {ours.shape} vs {theirs.shape}"
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7, err_msg=where)
        return
    assert ours == theirs, f"{where}: retrograd {ours!r}, torch {theirs!r}"


def check(actions):
    theirs, ours = World(torch), World(rg)
    try:
        for n, action in enumerate(actions):
            where = f"call {n} {action}"
            t_result, o_result = run(theirs, action), run(ours, action)
            compare(o_result, t_result, where)
            t_state, o_state = theirs.state(), ours.state()
            assert len(o_state) == len(t_state), f"{where}: pool sizes differ"
            for k, (a, b) in enumerate(zip(o_state, t_state)):
                compare(a, b, f"{where}: pool[{k}]")
    finally:
        theirs.close()
        ours.close()


small = st.integers(0, 7)
ACTIONS = st.one_of(
    st.tuples(
        st.just("leaf"),
        st.sampled_from(["matrix", "vector", "scalar", "ones", "int", "bool"]),
        st.booleans(),
    ),
    st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY)), small),
    st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY)), small),
    st.tuples(st.just("binary"), st.sampled_from(sorted(BINARY)), small, small),
    st.tuples(st.just("inplace"), st.sampled_from(sorted(INPLACE)), small, small),
    st.tuples(
        st.just("toggle"),
        st.sampled_from(["requires_grad_on", "requires_grad_off", "detach_", "retain_grad"]),
        small,
    ),
    st.tuples(st.just("mode"), st.sampled_from([*sorted(MODES), "exit", "exit"])),
    st.tuples(st.just("backward"), small, st.booleans(), st.booleans()),
    st.tuples(
        st.just("grad"),
        small,
        st.lists(small, min_size=1, max_size=3),
        st.tuples(*[st.booleans()] * 4),
    ),
    st.tuples(st.just("clear"), st.sampled_from(["zero", "none"]), small),
)
#: every program starts from two float leaves that require grad and one that does not
START = [("leaf", "matrix", True), ("leaf", "vector", True), ("leaf", "scalar", False)]


@SETTINGS
@given(actions=st.lists(ACTIONS, min_size=1, max_size=14))
# (programs the hunt found, shrunk: each failed before round 93's fixes)
@example(actions=[("unary", "detach", 0), ("inplace", "add_", 3, 0)])
@example(actions=[("unary", "abs", 0), ("unary", "clone", 3), ("toggle", "retain_grad", 4)])
@example(actions=[("leaf", "matrix", False), ("inplace", "copy_", 3, 0)])
@example(actions=[("binary", "add", 0, 0), ("mode", "inference"), ("inplace", "add_", 3, 0)])
@example(actions=[("mode", "inference"), ("grad", 0, [0], (False, False, False, False))])
@example(actions=[("unary", "argmax", 0), ("toggle", "detach_", 3)])
# (round 93b's: retains_grad after a write under no_grad; a frozen leaf's kept .grad)
@example(
    actions=[
        ("binary", "add", 0, 0),
        ("toggle", "retain_grad", 3),
        ("mode", "no_grad"),
        ("inplace", "add_", 3, 0),
    ]
)
@example(
    actions=[
        ("backward", 0, False, False),
        ("toggle", "requires_grad_off", 0),
        ("clear", "none", 0),
    ]
)
def test_random_bookkeeping_matches_torch(actions):
    check(START + actions)


# -- the defects the programs found, one test each ------------------------------------------------
def both(program):
    """``program(lib)`` in torch and in retrograd: the two results, compared by the caller."""
    return program(torch), program(rg)


def grad_of(lib, t, grads):
    return t.grad if lib is torch else t.grad(grads)


def test_detached_leaf_stays_out_of_the_graph_after_writes():
    """``d = x.detach()`` (ported with ``requires_grad_(False)``, Burn's detach of a leaf
    requiring grad) took its base's value again at every write into ``d`` or ``x``, and with
    it the flag: ``d.requires_grad`` turned True."""

    def program(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        d = x.detach()
        if lib is rg:
            d.requires_grad_(False)
        d.add_(1.0)
        after_own_write = d.requires_grad
        with lib.no_grad():
            x.mul_(2.0)
        return [after_own_write, d.requires_grad, d.is_leaf, d.tolist(), x.tolist()]

    theirs, ours = both(program)
    assert ours == theirs == [False, False, True, [4.0, 6.0], [4.0, 6.0]]


def test_view_of_an_inference_tensor_never_requires_grad():
    """A view taken in inference_mode of an inference tensor made with requires_grad=True
    was made to require grad, as a view under no_grad of an ordinary tensor is."""

    def program(lib):
        x = lib.ones(2, 3, requires_grad=True)
        with lib.inference_mode():
            z = lib.ones(2, 3, requires_grad=True)
            inside = [z[0].requires_grad, z.view(6).requires_grad, x[0].requires_grad]
        return inside

    theirs, ours = both(program)
    assert ours == theirs == [False, False, True]


def test_copy_into_an_untracked_tensor_is_a_node_of_its_own():
    """``t.copy_(o)`` into a tensor outside the graph shared ``o``'s node: ``t``'s retained
    gradient and hooks saw ``o``'s whole gradient (5 here, torch's 2), and ``t.grad_fn`` was
    ``o``'s."""

    def program(lib):
        x = lib.tensor([1.0, -2.0], requires_grad=True)
        o = x * 1.0
        t = lib.zeros(2)
        t.copy_(o)
        t.retain_grad()
        seen = []
        t.register_hook(lambda g: seen.append(g.tolist()))
        grads = ((t * 2.0).sum() + (o * 3.0).sum()).backward()
        return [grad_of(lib, t, grads).tolist(), grad_of(lib, x, grads).tolist(), seen,
                t.grad_fn.name(), o.grad_fn.name()]  # fmt: skip

    theirs, ours = both(program)
    assert ours == theirs
    assert ours[0] == [2.0, 2.0]


def test_clone_of_a_computed_tensor_is_a_node_of_its_own():
    """``c = a.clone()`` of a tensor computed in the graph shared ``a``'s node (its grad_fn
    ``AbsBackward0``, its retained gradient ``a``'s: 5 here, torch's 2)."""

    def program(lib):
        x = lib.tensor([1.0, -2.0], requires_grad=True)
        a = x.abs()
        c = a.clone()
        c.retain_grad()
        grads = ((c * 2.0).sum() + (a * 3.0).sum()).backward()
        return [c.grad_fn.name(), grad_of(lib, c, grads).tolist(), grad_of(lib, x, grads).tolist()]

    theirs, ours = both(program)
    assert ours == theirs == ["CloneBackward0", [2.0, 2.0], [5.0, -5.0]]


WRITES = {
    "zero_": lambda lib, t, o: t.zero_(),
    "fill_": lambda lib, t, o: t.fill_(0.25),
    "fill_tensor": lambda lib, t, o: t.fill_(o.sum()),
    "copy_": lambda lib, t, o: t.copy_(o),
    "setitem": lambda lib, t, o: t.__setitem__(0, 3.0),
    "setitem_whole": lambda lib, t, o: t.__setitem__(slice(None), o),
    "add_": lambda lib, t, o: t.add_(o),
}


#: the writes that record something into a tensor outside the graph (the others record nothing)
RECORDED_INTO_PLAIN = ("add_", "copy_", "fill_tensor", "setitem_whole")
WRITTEN = [
    (write, target)
    for write in sorted(WRITES)
    for target in ("result", "plain", "view_of_result", "view_of_plain")
    if "plain" not in target or write in RECORDED_INTO_PLAIN
]


@pytest.mark.parametrize(("write", "target"), WRITTEN)
def test_written_nodes_have_torchs_names(write, target):
    """The nodes an in-place write records show torch's names: ``CopySlices`` at the root of
    a write through a view and ``AsStridedBackward0`` on its views (were
    ``SliceAssignBackward0`` and the view's own op), ``ZeroBackward0``, ``FillBackward2``/``3``
    and ``CopyBackwards`` on a tensor written whole (were ``WhereBackward0``, or the copied
    tensor's own node); ``t[:] = v`` is torch's ``copy_`` into ``t``."""

    def program(lib):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=lib.float64, requires_grad=True)
        o = x * 1.0
        base = x * 2.0 if target.endswith("result") else lib.ones(2, 3, dtype=lib.float64)
        other = base.t()
        t = base[0] if target.startswith("view") else base
        if target.startswith("view"):
            o = o[0]
        WRITES[write](lib, t, o)
        names = [None if u.grad_fn is None else u.grad_fn.name() for u in (t, base, other)]
        if not base.requires_grad:
            return names
        (g,) = lib.autograd.grad((base * base).sum(), [x], allow_unused=True)
        return names + [None if g is None else g.tolist()]

    theirs, ours = both(program)
    assert ours == theirs


@pytest.mark.parametrize("reduction", ["argmax", "argmin", "max", "min"])
def test_arg_and_extremum_results_detach_in_place(reduction):
    """``x.argmax()``, ``x.max(0).values``... were views of a temporary the op made, so
    ``detach_()`` of them raised "can't detach views in-place"; torch's are no views."""

    def program(lib):
        x = lib.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], requires_grad=True)
        results = []
        for dim in ((), (0,)):
            out = getattr(x, reduction)(*dim)
            for part in tuple(out) if isinstance(out, tuple) else (out,):
                results.append(part.detach_().requires_grad)
        return results

    theirs, ours = both(program)
    assert ours == theirs


def test_write_in_inference_mode_keeps_a_result_in_its_graph():
    """An in-place write inside inference_mode into a tensor computed in the graph left it
    (and its views) out of the graph: ``requires_grad`` False, backward refused; torch's
    stays in its graph, the write unseen by backward, as under no_grad."""

    def program(lib):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        y = x * 2.0
        v = y[0]
        with lib.inference_mode():
            y.add_(1.0)
            inside = [y.requires_grad, y.is_leaf, v.requires_grad]
        grads = (y.sum() + v.sum()).backward()
        return inside + [y.grad_fn.name(), v.grad_fn.name(), grad_of(lib, x, grads).tolist()]

    theirs, ours = both(program)
    assert ours == theirs


def test_detach_in_place_inside_inference_mode_changes_nothing():
    """torch's ``detach_()`` of an ordinary tensor inside inference_mode leaves it in its
    graph (a leaf keeps requiring grad); this cut it."""

    def program(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2.0
        with lib.inference_mode():
            x.detach_()
            y.detach_()
        grads = y.sum().backward()
        return [x.requires_grad, y.requires_grad, y.is_leaf, grad_of(lib, x, grads).tolist()]

    theirs, ours = both(program)
    assert ours == theirs == [True, True, False, [2.0, 2.0]]


def test_autograd_grad_inside_inference_mode():
    """``autograd.grad`` inside inference_mode of a graph recorded before (or of an input
    itself) raised "does not require grad", and a ``grad_outputs`` made there was refused as
    an inference tensor saved for backward: torch's engine differentiates both."""

    def program(lib):
        x = lib.tensor([1.0, -2.0], requires_grad=True)
        y = x * 3.0
        with lib.inference_mode():
            seed = lib.full((2,), 0.5)
            first = lib.autograd.grad(y, [x], seed, retain_graph=True)[0]
            itself = lib.autograd.grad(x, [x], seed)[0]
        again = lib.autograd.grad(y.sum(), [x])[0]  # the graph still usable after
        return [first.tolist(), itself.tolist(), again.tolist()]

    theirs, ours = both(program)
    assert ours == theirs == [[1.5, 1.5], [0.5, 0.5], [3.0, 3.0]]


def test_detach_in_place_of_an_inference_tensor_outside_inference_mode():
    """``detach_()`` of an inference tensor outside inference_mode was refused as an in-place
    update of its values (it changes only its autograd flags: torch allows it)."""

    def program(lib):
        with lib.inference_mode():
            t = lib.ones(2)
        t.detach_()
        with lib.inference_mode(), lib.inference_mode(False):
            t.detach_()
        with lib.inference_mode():
            t[0].detach_()  # (no view for torch's autograd: it tracks none of inference tensors)
        t[0].detach_()
        return [t.requires_grad, t.is_leaf, t.is_inference()]

    theirs, ours = both(program)
    assert ours == theirs == [False, True, True]


def test_write_into_a_leaf_inside_inference_mode_with_enable_grad():
    """Inside inference_mode nothing is recorded, ``enable_grad()`` or not: torch writes into
    a leaf that requires grad there (as under no_grad); this refused it."""

    def program(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with lib.inference_mode(), lib.enable_grad():
            x.add_(1.0)
        grads = (x * x).sum().backward()
        return [x.tolist(), x.requires_grad, x.is_leaf, grad_of(lib, x, grads).tolist()]

    theirs, ours = both(program)
    assert ours == theirs == [[2.0, 3.0], True, True, [4.0, 6.0]]
