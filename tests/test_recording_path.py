"""The autodiff backend records every op through one path, ``Autodiff._record``, with one hook,
``_on_record(node, out)``: the hook sees every node the engine records (unary, binary, general,
cat, cast, ``apply``) and nothing else, and the broadcast bookkeeping of each kind of op method
is what it was when they had paths of their own."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from retrograd.app.graphview import RecordingAutodiff
from retrograd.autodiff.checkpoint import RECOMPUTE
from retrograd.autodiff.ops import Op


class HookLog(rg.Autodiff):
    """Logs what the recording hook is called with."""

    def __init__(self, *args):
        super().__init__(*args)
        self.seen = []

    def _on_record(self, node, out):
        self.seen.append((node, out))


def _graph(*tensors):
    """Every node reachable from ``tensors``, by id."""
    nodes, stack = {}, [t.primitive.node for t in tensors]
    while stack:
        node = stack.pop()
        if node is not None and node.id not in nodes:
            nodes[node.id] = node
            stack.extend(node.parents)
    return nodes


def _square_vjp(backend, g, x):
    return backend.mul(backend.mul_scalar(x, 2.0), g)


#: an op from outside the op table, recorded through ``Autodiff.apply``
_SQUARE = Op(
    "test_recording_square",
    ("x",),
    (),
    (_square_vjp,),
    memory_bound=True,
    forward=lambda backend, x: backend.mul(x, x),
)


def _program(x, y, c):
    """One op of every kind the backend records, with tracked and untracked inputs."""
    a = x.sin()  # unary
    b = a.mul_scalar(2.0)  # unary with a parameter
    m, _ = b.max_dim_with_indices(1)  # unary with an aux output
    d = b * y  # binary, both tracked
    e = d + c  # binary, one tracked
    f = e.mask_where(c > 0, y)  # general (three inputs)
    g = rg.cat([f, x, c], 0)  # cat
    h = g.cast("float32").double()  # cast
    backend = x.backend
    i = rg.Tensor(backend.apply(_SQUARE, h.primitive), backend, h.device)  # apply
    return i.sum() + m.sum()


@pytest.mark.parametrize("strategy", [rg.NoCheckpointing(), rg.BalancedCheckpointing()])
def test_hook_sees_every_recorded_node_once_with_its_output(strategy):
    backend = HookLog(inner_backend(), strategy)
    rng = np.random.default_rng(0)
    with rg.use_backend(backend):
        x = rg.tensor(rng.standard_normal((2, 3))).require_grad()
        y = rg.tensor(rng.standard_normal((2, 3))).require_grad()
        c = rg.tensor(rng.standard_normal((2, 3)))
        seen_before = len(backend.seen)
        loss = _program(x, y, c)
        recorded = {node_id: node for node_id, node in _graph(loss).items() if node.op is not None}
        seen = backend.seen[seen_before:]
        assert len(seen) == len({node.id for node, _ in seen})  # each node once
        assert {node.id for node, _ in seen} == set(recorded)
        names = {node.op.name for node, _ in seen}
        for name in (
            "sin",
            "mul_scalar",
            "max_dim",
            "mul",
            "add",
            "mask_where",
            "cat",
            "cast",
            "test_recording_square",
            "sum",
        ):
            assert name in names
        # ``out`` is the inner value of the node's output, and the node is complete by then
        for node, out in seen:
            assert node.plan is not None and node.order > 0
            if node is loss.primitive.node:
                assert out is loss.primitive.value
        loss.backward()


def test_hook_is_not_called_for_untracked_ops():
    backend = HookLog(inner_backend())
    with rg.use_backend(backend):
        x = rg.tensor([1.0, 2.0])
        ((x.sin() * x + x).cast("float64").sum() + rg.cat([x, x], 0).sum()).numpy()
        assert backend.seen == []


def test_plain_backend_has_no_hook():
    assert rg.Autodiff()._hook is None
    assert HookLog()._hook is HookLog._on_record


def test_graphview_notes_the_shape_of_every_node():
    backend = RecordingAutodiff()
    rng = np.random.default_rng(1)
    with rg.use_backend(backend):
        x = rg.tensor(rng.standard_normal((2, 3))).require_grad()
        y = rg.tensor(rng.standard_normal((2, 3))).require_grad()
        loss = _program(x, y, rg.tensor(rng.standard_normal((2, 3))))
    nodes = _graph(loss)
    assert set(nodes) <= set(backend.shapes)  # leaves too, through require_grad
    assert backend.shapes[x.primitive.node.id] == ((2, 3), "float64")
    assert backend.shapes[loss.primitive.node.id] == ((), "float64")
    cat = next(node for node in nodes.values() if node.op is not None and node.op.name == "cat")
    assert backend.shapes[cat.id] == ((6, 3), "float64")


def _node(tensor):
    return tensor.primitive.node


def test_broadcast_bookkeeping_of_binary_methods():
    with rg.use_backend(rg.Autodiff()):
        x = rg.tensor(np.ones((2, 3))).require_grad()
        row = rg.tensor(np.ones(3)).require_grad()
        same = rg.tensor(np.ones((2, 3))).require_grad()
        # the shapes of both tracked inputs once the two differ, even one equal to the output's
        assert _node(x + row).bshapes == ((2, 3), (3,))
        assert _node(x + rg.tensor(np.ones(3))).bshapes == ((2, 3), None)
        assert _node(x.mask_fill(rg.tensor([True, False, True]), 0.0)).bshapes == ((2, 3), None)
        # equal shapes leave it unset (a class default: the node gets no __dict__)
        node = _node(x * same)
        assert node.bshapes is None and "bshapes" not in node.__dict__
        # matmul compares batch dimensions only
        a = rg.tensor(np.ones((2, 3, 4))).require_grad()
        assert _node(a @ rg.tensor(np.ones((2, 4, 5))).require_grad()).bshapes is None
        b = rg.tensor(np.ones((4, 5))).require_grad()
        assert _node(a @ b).bshapes == ((2, 3, 4), (4, 5))


def test_broadcast_bookkeeping_of_general_ops():
    with rg.use_backend(rg.Autodiff()):
        x = rg.tensor(np.ones((2, 3))).require_grad()
        row = rg.tensor(np.ones(3)).require_grad()
        mask = rg.tensor([[True, False, True], [False, True, False]])
        # the tracked inputs whose shape differs from the output's
        assert _node(x.mask_where(mask, row)).bshapes == (None, None, (3,))
        assert _node(x.mask_where(mask, x)).bshapes is None


def test_saved_keys_and_actions():
    backend = rg.Autodiff(inner_backend(), rg.BalancedCheckpointing())
    with rg.use_backend(backend):
        x = rg.tensor(np.ones((2, 3))).require_grad()
        c = rg.tensor(np.full((2, 3), 2.0))
        a = x.exp()  # memory-bound, all inputs tracked: recomputed, its parent backed up
        node = _node(a)
        assert node.saved.recompute and node.saved.keys == (node.id,)
        assert node.saved.actions == [
            (x.primitive.node.id, x.primitive.value, True),
            (node.id, RECOMPUTE, False),
        ]
        b = a.sin()  # reads ``a``, recomputed, so its read is a recompute too
        assert _node(b).saved.actions == [(node.id, RECOMPUTE, True), (node.id, RECOMPUTE, False)]
        d = a * c  # an untracked input: nothing recomputed, and it is kept under a fresh key
        product = _node(d)
        assert not product.saved.recompute
        (fresh,) = product.saved.keys  # x's rule reads c; c's rule (which would read a) is not run
        assert fresh > product.id
        assert product.saved.actions == [(fresh, c.primitive.value, False)]
        s = x.sum()  # reads only x's shape: a parameter, no action
        assert _node(s).saved.keys == () and _node(s).saved.actions is None
        assert _node(s).params == ((2, 3),)
        gradient = x.grad((b.sum() + d.sum() + s).backward()).numpy()
    e = np.exp(np.ones((2, 3)))
    np.testing.assert_allclose(gradient, np.cos(e) * e + 2.0 * e + 1.0)


def test_recorded_nodes_assign_every_slot_a_leaf_does():
    """``_record`` makes nodes without calling ``Node.__init__`` (a frame per op saved): it
    must assign every slot ``__init__`` does."""
    from retrograd.autodiff.graph import Node

    with rg.use_backend(rg.Autodiff(inner_backend())):
        x = rg.tensor([1.0, 2.0]).require_grad()
        recorded = _node(x.sin())
    slots = [name for name in Node.__slots__ if not name.startswith("__")]
    for node in (recorded, _node(x)):
        assert [name for name in slots if not hasattr(node, name)] == []
