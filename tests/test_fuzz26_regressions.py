"""The defects round 26 of the differential fuzzer found (reductions with ``dtype=``, integer
and bool promotion, in-place writes on views), each against torch's result."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

ARRAYS = [
    np.array([[1.0, 2.0], [0.0, 3.0]]),
    np.array([[True, False], [False, False]]),
    np.array([[1, -2, 0], [4, 5, 6]], dtype=np.int64),
    np.zeros((3, 0, 2)),
    np.array([[math.nan, 0.0], [math.nan, 1.5]]),
]


def _as_lists(out):
    return (str(out.dtype).split(".")[-1], tuple(out.shape), out.tolist())


@pytest.mark.parametrize("name", ["sum", "prod", "nansum"])
@pytest.mark.parametrize("array", ARRAYS, ids=["float", "bool", "int", "empty", "nan"])
def test_reductions_with_dtype_bool_give_torch_s_bool_result(name, array):
    # they summed or multiplied the cast bools as int64 (sum(dtype=bool) of [[1, 2], [0, 3]]
    # was 3 of dtype int64, torch's True), and nansum cast the NaNs (to True, or to an
    # arbitrary integer) before zeroing them, where torch zeroes them first
    results = []
    for lib in (torch, rg):
        t = lib.tensor(array)
        f = getattr(t, name)
        calls = [
            f(dtype=lib.bool),
            f(-1, dtype=lib.bool),
            f(0, keepdim=True, dtype=lib.bool),
            getattr(lib, name)(t, dtype=lib.bool),
        ]
        if name == "nansum" and array.dtype == np.float64:
            calls.append(f(1, dtype=lib.int64))
        results.append([_as_lists(out) for out in calls])
    assert results[1] == results[0]


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scans_with_dtype_bool_are_refused_as_torch_refuses_them(name):
    x = np.array([[1.0, 2.0], [0.0, 3.0]])
    with pytest.raises(NotImplementedError):
        getattr(torch.tensor(x), name)(1, dtype=torch.bool)
    # (they returned int64 scans)
    with pytest.raises(rg.DTypeError, match=f"{name}: dtype=bool"):
        getattr(rg.tensor(x), name)(1, dtype=rg.bool)
    # an empty tensor needs no kernel: torch gives it, cast
    empty = np.zeros((2, 0))
    want = getattr(torch.tensor(empty), name)(0, dtype=torch.bool)
    got = getattr(rg.tensor(empty), name)(0, dtype=rg.bool)
    assert _as_lists(got) == _as_lists(want)


def test_index_copy_of_a_0d_source_into_a_vector_at_one_index():
    # torch writes a 0-d source at a one-element index of a vector; it was a ShapeError
    x = np.array([1.0, -2.0, 0.5])
    weights = np.array([1.0, 2.0, 3.0])
    got, want = [], []
    for lib, out in ((torch, want), (rg, got)):
        base = lib.tensor(x)
        source = lib.tensor(4.0, dtype=lib.float64)
        if lib is torch:
            base.requires_grad_(True)
            source.requires_grad_(True)
        else:
            base, source = base.require_grad(), source.require_grad()
        written = base.index_copy(0, lib.tensor([1]), source)
        in_place = base.detach().clone().index_copy_(0, lib.tensor(2), source.detach())
        loss = (written * lib.tensor(weights)).sum()
        if lib is torch:
            grads = torch.autograd.grad(loss, [base, source])
        else:
            gradients = loss.backward()
            grads = [base.grad(gradients), source.grad(gradients)]
        out.extend([written.tolist(), in_place.tolist(), *[g.tolist() for g in grads]])
    assert got == want
    with pytest.raises(rg.ShapeError):  # (torch: "index should have one element")
        rg.zeros(2).index_copy(0, rg.tensor([0, 1]), rg.tensor(1.0))


def test_xlogy_second_derivative_at_a_zero_x_and_a_negative_y():
    # the gradient in y, g x / y, was masked to 0 wherever x was 0 and y not positive, so its
    # derivative in x (g / y) was cut at a negative y, where torch's plain g x / y keeps it
    x = np.array([0.0, -0.0, 0.0, 0.0, 0.5, 2.0])
    y = np.array([-0.7, -2.0, 0.7, -math.inf, -0.7, 3.0])
    weights = np.array([0.5, 1.5])
    results = []
    for lib in (torch, rg):
        a, b = lib.tensor(x), lib.tensor(y)
        if lib is torch:
            a.requires_grad_(True)
            b.requires_grad_(True)
            first = torch.autograd.grad(torch.xlogy(a, b).sum(), [a, b], create_graph=True)
        else:
            a, b = a.require_grad(), b.require_grad()
            gradients = rg.xlogy(a, b).sum().backward(create_graph=True)
            first = [a.grad(gradients), b.grad(gradients)]
        second_loss = first[0].sum() * weights[0] + first[1].sum() * weights[1]
        if lib is torch:
            second = torch.autograd.grad(second_loss, [a, b])
        else:
            gradients = second_loss.backward()
            second = [a.grad(gradients), b.grad(gradients)]
        results.append([g.detach().numpy() for g in (*first, *second)])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.var(x, False),
        lambda lib, x: x.var(True),
        lambda lib, x: x.std(False),
        lambda lib, x: lib.var_mean(x, False),
        lambda lib, x: lib.std_mean(x, True),
        lambda lib, x: lib.std_mean(x[0, 0], False),
    ],
    ids=["var", "var-method", "std-method", "var_mean", "std_mean", "std_mean-0d"],
)
def test_var_and_std_take_torch_s_unbiased_overload(call):
    # torch's var(input, unbiased) form (a bool where the dim goes) was read as a dimension:
    # "var: dimension must be an int, got False"
    x = np.random.default_rng(0).standard_normal((3, 4))
    want = call(torch, torch.tensor(x))
    got = call(rg, rg.tensor(x))
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert [_as_lists(g)[:2] for g in got] == [_as_lists(w)[:2] for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "index, dim", [([1, 1], 1), ([0, 2, 0, 2], 0), ([0, 0, 0], 0), ([3], -1)], ids=str
)
def test_index_fill_with_repeated_indices_counts_a_tensor_value_s_gradient_once(index, dim):
    # the filled region was built once per index entry, so the 0-d value's gradient summed
    # each repeated column or row again (twice torch's for [1, 1])
    x = np.arange(12.0).reshape(3, 4)
    results = []
    for lib in (torch, rg):
        base, value = lib.tensor(x), lib.tensor(2.5, dtype=lib.float64)
        if lib is torch:
            base.requires_grad_(True)
            value.requires_grad_(True)
        else:
            base, value = base.require_grad(), value.require_grad()
        out = base.index_fill(dim, lib.tensor(index), value)
        loss = (out * lib.tensor(x + 1)).sum()
        if lib is torch:
            grads = torch.autograd.grad(loss, [base, value])
        else:
            gradients = loss.backward()
            grads = [base.grad(gradients), value.grad(gradients)]
        results.append([out.tolist(), *[g.tolist() for g in grads]])
    assert results[1] == results[0]
