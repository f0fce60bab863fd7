"""Bad input gets an error from API.md section 7 naming the op and the shapes or values at fault,
and leaves every tensor and graph usable: the same tensors still backpropagate correctly."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg


@pytest.fixture
def leaves():
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).require_grad()
    b = rg.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -2.0]]).require_grad()
    return a, b


def _still_usable(a, b):
    """After a failed call, a graph through the same leaves backpropagates correctly."""
    partial = a * b  # built before the failure in some tests; here a fresh graph
    grads = (partial.exp() * a).sum().backward()
    av, bv = a.numpy(), b.numpy()
    np.testing.assert_allclose(a.grad(grads).numpy(), np.exp(av * bv) * (1 + av * bv), rtol=1e-5)
    np.testing.assert_allclose(b.grad(grads).numpy(), np.exp(av * bv) * av * av, rtol=1e-5)


# (op name expected in the message, error class, call, fragments the message must contain)
CASES = [
    ("add", rg.ShapeError, lambda a, b: a + rg.ones((4,)), ["[2, 3]", "[4]"]),
    ("mul", rg.ShapeError, lambda a, b: a * rg.ones((3, 2)), ["[2, 3]", "[3, 2]"]),
    ("matmul", rg.ShapeError, lambda a, b: a @ b, ["[2, 3]", "3 != 2"]),
    ("sum_dim", rg.ShapeError, lambda a, b: a.sum_dim(2), ["dimension 2", "2 dimensions"]),
    ("softmax", rg.ShapeError, lambda a, b: a.softmax(-3), ["dimension -3"]),
    ("reshape", rg.ShapeError, lambda a, b: a.reshape((4, 2)), ["[2, 3]", "[4, 2]"]),
    ("permute", rg.ShapeError, lambda a, b: a.permute((0, 0)), ["[0, 0]", "[2, 3]"]),
    ("squeeze_dim", rg.ShapeError, lambda a, b: a.squeeze_dim(1), ["size 3"]),
    ("expand", rg.ShapeError, lambda a, b: a.expand((2, 4)), ["[2, 3]", "4"]),
    ("slice", rg.IndexOutOfRangeError, lambda a, b: a.slice([(0, 3)]), ["0..3", "size 2"]),
    (
        "slice_assign",
        rg.ShapeError,
        lambda a, b: a.slice_assign([(0, 1)], rg.ones((2, 3))),
        ["[2, 3]", "[1, 3]"],
    ),
    ("indexing", rg.IndexOutOfRangeError, lambda a, b: a[2], ["index 2", "size 2"]),
    ("indexing", rg.IndexOutOfRangeError, lambda a, b: a[0, 0, 0], ["too many"]),
    (
        "gather",
        rg.IndexOutOfRangeError,
        lambda a, b: a.gather(1, rg.tensor([[0, 3, 1], [1, 1, 1]], dtype="int64")),
        ["index 3", "size 3"],
    ),
    (
        "gather",
        rg.IndexOutOfRangeError,
        lambda a, b: a.gather(1, rg.tensor([[0, -1, 1], [1, 1, 1]], dtype="int64")),
        ["index -1"],
    ),
    (
        "gather",
        rg.DTypeError,
        lambda a, b: a.gather(1, rg.tensor([[0.0, 1.0, 1.0]] * 2)),
        ["int64"],
    ),
    (
        "select",
        rg.IndexOutOfRangeError,
        lambda a, b: a.select(0, rg.tensor([0, 2], dtype="int64")),
        ["index 2", "size 2"],
    ),
    (
        "scatter",
        rg.ShapeError,
        lambda a, b: a.scatter(1, rg.tensor([[0, 1], [1, 0]], dtype="int64"), rg.ones((2, 1))),
        ["[2, 2]", "[2, 1]"],
    ),
    (
        "scatter",
        ValueError,
        lambda a, b: a.scatter(1, rg.tensor([[0], [1]], dtype="int64"), rg.ones((2, 1)), "mul"),
        ["'add' or 'assign'"],
    ),
    (
        "mask_where",
        rg.DTypeError,
        lambda a, b: a.mask_where(rg.ones((2, 3)), b),
        ["bool", "float32"],
    ),
    (
        "mask_fill",
        rg.ShapeError,
        lambda a, b: a.mask_fill(rg.tensor([True, False], dtype="bool"), 0.0),
        ["[2]", "[2, 3]"],
    ),
    ("cat", rg.ShapeError, lambda a, b: rg.cat([a, rg.ones((2, 2))], 0), ["[2, 3]", "[2, 2]"]),
    ("stack", rg.ShapeError, lambda a, b: rg.stack([a, rg.ones((3, 2))]), ["[2, 3]", "[3, 2]"]),
    ("cross", rg.ShapeError, lambda a, b: a.cross(b, 0), ["dimension 0", "size 3"]),
    ("unfold", rg.ShapeError, lambda a, b: a.unfold(1, 4, 1), ["size 4", "size 3"]),
    ("topk", rg.ShapeError, lambda a, b: a.topk(4, 1), ["k=4", "size 3"]),
    (
        "require_grad",
        rg.DTypeError,
        lambda a, b: rg.tensor([1, 2], dtype="int64").require_grad(),
        ["int64"],
    ),
    ("require_grad", rg.AutodiffError, lambda a, b: (a * b).require_grad(), ["mul"]),
    ("backward", rg.AutodiffError, lambda a, b: rg.tensor([1.0]).backward(), ["does not require"]),
    ("backward", rg.ShapeError, lambda a, b: (a * b).backward(rg.ones((3,))), ["[3]", "[2, 3]"]),
    ("tensor", rg.DTypeError, lambda a, b: rg.tensor([1.0], dtype="complex32"), ["complex32"]),
    ("cast", rg.DTypeError, lambda a, b: a.cast("quint8"), ["quint8"]),
    ("item", rg.ShapeError, lambda a, b: a.item(), ["[2, 3]"]),
    ("clamp", rg.ShapeError, lambda a, b: a.clamp(), ["min", "max"]),
]


@pytest.mark.parametrize(
    "op, error, call, fragments", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_bad_input_raises_named_error_and_leaves_graph_usable(leaves, op, error, call, fragments):
    a, b = leaves
    pending = a * b + 1.0  # a graph in progress that the failure must not disturb
    with pytest.raises(error) as raised:
        call(a, b)
    assert isinstance(raised.value, rg.RetrogradError)
    message = str(raised.value)
    assert op in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    grads = pending.sum().backward()
    np.testing.assert_allclose(a.grad(grads).numpy(), b.numpy())
    _still_usable(a, b)


def test_error_classes_are_also_builtin_exceptions():
    assert issubclass(rg.ShapeError, ValueError)
    assert issubclass(rg.DTypeError, TypeError)
    assert issubclass(rg.IndexOutOfRangeError, IndexError)
    assert issubclass(rg.AutodiffError, RuntimeError)
    assert issubclass(rg.DistributedError, RuntimeError)
    for cls in (rg.ShapeError, rg.DTypeError, rg.IndexOutOfRangeError, rg.AutodiffError):
        assert issubclass(cls, rg.RetrogradError)


def test_second_backward_through_consumed_graph_says_so(leaves):
    a, b = leaves
    c = a * b
    loss = c.sum()
    loss.backward()
    with pytest.raises(rg.AutodiffError) as raised:
        loss.backward()
    message = str(raised.value)
    assert "consumed" in message and "retain_graph=True" in message
    # The leaves are untouched: a new graph through them works.
    _still_usable(a, b)


def test_failure_in_the_middle_of_a_graph_keeps_the_graph(leaves):
    a, b = leaves
    hidden = (a * b).tanh()
    with pytest.raises(rg.ShapeError):
        hidden @ b  # [2, 3] @ [2, 3]
    grads = hidden.sum().backward()
    av, bv = a.numpy(), b.numpy()
    np.testing.assert_allclose(a.grad(grads).numpy(), (1 - np.tanh(av * bv) ** 2) * bv, rtol=1e-5)
