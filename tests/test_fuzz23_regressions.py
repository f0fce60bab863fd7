"""Regressions found by round 23 of the differential fuzzer (``tests/fuzz23_cases.py``): each
expected value comes from torch or from the mathematics, and each test failed on the old code."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

NAN = math.nan


@pytest.mark.parametrize(
    ("x", "g"),
    [
        ([-1.0, 0.375, 0.0], [NAN, NAN, -1.0]),
        ([-0.375, 0.0, -1.75], [NAN, NAN, NAN]),
        ([2.0, 0.0, 3.0, 0.0, 5.0], [1.0, NAN, 2.0, 3.0, 4.0]),
        ([2.0, 0.0, 3.0, 0.0, 5.0], [NAN, 1.0, 2.0, math.inf, 4.0]),
        # (before the first zero torch's quotient: inf / inf is NaN there)
        ([math.inf, 0.0, 2.0], [1.0, 1.0, 1.0]),
        ([[math.inf, 0.0], [math.inf, 2.0]], [[1.0, 1.0], [1.0, 1.0]]),
    ],
)
def test_cumprod_backward_through_zeros_keeps_a_nan_gradient_where_torch_does(x, g):
    # with a zero in the input, a NaN or infinite incoming gradient at one position made the
    # gradient of every other position NaN (NaN * 0 in the exact form); torch's form leaves
    # out the terms a zero makes zero
    got, want = [], []
    for lib, out in ((rg, got), (torch, want)):
        t = lib.tensor(x, dtype=lib.float64, requires_grad=True)
        (grad,) = lib.autograd.grad(t.cumprod(0), [t], lib.tensor(g, dtype=lib.float64))
        out.append(grad.numpy())
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_logcumsumexp_of_half_precision(dtype):
    # logcumsumexp of a bfloat16 tensor raised "data type retrograd.bfloat16 not
    # understood" (NumPy's finfo of a dtype NumPy lacks)
    backend = rg.Autodiff(rg.TorchBackend("cpu"))  # (NumPy has no half-precision tensors)
    values = [[0.5, -1.0, 2.0], [-3.0, 0.25, 1.0]]
    x = rg.tensor(values, dtype=dtype, backend=backend).require_grad()
    t = torch.tensor(values, dtype=getattr(torch, dtype), requires_grad=True)
    y, ty = x.logcumsumexp(1), t.logcumsumexp(1)
    w = [[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]]
    (g,) = rg.autograd.grad((y * rg.tensor(w, dtype=dtype, backend=backend)).sum(), [x])
    (tg,) = torch.autograd.grad((ty * torch.tensor(w, dtype=ty.dtype)).sum(), [t])
    assert str(y.dtype).rsplit(".", 1)[-1] == dtype and str(g.dtype).rsplit(".", 1)[-1] == dtype
    np.testing.assert_allclose(y.double().numpy(), ty.detach().double().numpy(), rtol=1e-2)
    np.testing.assert_allclose(g.double().numpy(), tg.double().numpy(), rtol=2e-2, atol=1e-2)


def _ties(lib, fn):
    a = [[0.5, -0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 0.5, -1.0]]
    b = [[0.0, 0.0, 0.0], [-0.5, 0.5, 1.0]]
    x = lib.tensor(a, dtype=lib.float64, requires_grad=True)
    y = lib.tensor(b, dtype=lib.float64, requires_grad=True)
    out = fn(lib, x, y)
    w = lib.tensor(np.linspace(-1.0, 1.5, out.numel()).reshape(tuple(out.shape)))
    grads = lib.autograd.grad((out * w).sum(), [x, y], allow_unused=True)
    return [out.detach().numpy()] + [np.zeros((3, 3)) if g is None else g.numpy() for g in grads]


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x, y: lib.cdist(x, y, p=math.inf),
        lambda lib, x, y: lib.cdist(x.unsqueeze(0), x.unsqueeze(0), p=math.inf),
        lambda lib, x, y: lib.pdist(x, p=math.inf),
        lambda lib, x, y: lib.nn.functional.pdist(x[1:], p=math.inf),
    ],
)
def test_cdist_and_pdist_at_infinity_give_every_tied_entry_the_whole_gradient(fn):
    # the gradient of an infinity-norm distance was shared among the tied largest entries
    # (as linalg.vector_norm's is); torch's cdist and pdist kernels give each the whole of it
    for got, want in zip(_ties(rg, fn), _ties(torch, fn)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_autograd_grad_refuses_materialize_grads_with_allow_unused_false():
    # materialize_grads=True with allow_unused=False gave zeros for the unused input; torch
    # refuses the pair (they contradict each other)
    for lib in (torch, rg):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        unused = lib.tensor([3.0], dtype=lib.float64, requires_grad=True)
        with pytest.raises(ValueError, match="allow_unused"):
            lib.autograd.grad(
                (x * x).sum(), [x, unused], allow_unused=False, materialize_grads=True
            )
    with pytest.raises(rg.InvalidArgumentError, match=r"autograd\.grad"):
        rg.autograd.grad((x * x).sum(), [x], allow_unused=False, materialize_grads=True)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_refuses_a_source_of_another_dtype(reduce):
    # scatter_reduce in amax and amin took an int64 source into a float64 tensor; torch
    # refuses it, as retrograd's scatter_add and index_add do
    with pytest.raises(RuntimeError, match="dtype"):
        torch.zeros(2, dtype=torch.float64).scatter_reduce(
            0, torch.tensor([0, 0]), torch.tensor([1, 2]), reduce
        )
    with pytest.raises(rg.DTypeError, match="scatter_reduce"):
        rg.zeros(2, dtype=rg.float64).scatter_reduce(
            0, rg.tensor([0, 0]), rg.tensor([1, 2]), reduce
        )


def test_scatter_reduce_mean_of_bools_is_refused():
    # it returned an int64 tensor; torch has no bool mean kernel and refuses
    index = [0, 0]
    with pytest.raises(NotImplementedError):
        torch.tensor([True, False]).scatter_reduce(
            0, torch.tensor(index), torch.tensor([True, True]), "mean"
        )
    with pytest.raises(rg.DTypeError, match="scatter_reduce"):
        rg.tensor([True, False]).scatter_reduce(
            0, rg.tensor(index), rg.tensor([True, True]), "mean"
        )


@pytest.mark.parametrize(
    ("dtype", "alpha"), [("bool", 2), ("bool", 0.5), ("int64", 0.5), ("int64", -1.5)]
)
def test_index_add_keeps_the_dtype_of_self_whatever_alpha(dtype, alpha):
    # index_add multiplied the source by alpha first: a bool tensor's result was int64 or
    # float32 and an int64 one's float32 (and index_add_ refused); torch casts alpha to the
    # tensor's dtype
    values, source, index = [True, False, False], [True, False, True], [0, 0, 1]
    if dtype == "int64":
        values, source = [1, 2, 3], [4, -5, 6]
    want = torch.tensor(values).index_add(0, torch.tensor(index), torch.tensor(source), alpha=alpha)
    got = rg.tensor(values).index_add(0, rg.tensor(index), rg.tensor(source), alpha=alpha)
    assert str(got.dtype).rsplit(".", 1)[-1] == dtype
    assert got.tolist() == want.tolist()
    x = rg.tensor(values)
    x.index_add_(0, rg.tensor(index), rg.tensor(source), alpha=alpha)
    assert x.tolist() == want.tolist()


@pytest.mark.parametrize("reduce", ["amax"])
def test_scatter_reduce_extremes_of_bools_without_self(reduce):
    # include_self=False started the positions written to from int64's extremes, which a
    # bool tensor holds as True: amax over False sources gave True
    values, source, index = (
        [True, False, False, True],
        [False, False, True, True, False],
        [1, 1, 2, 0, 2],
    )
    want = torch.tensor(values).scatter_reduce(
        0, torch.tensor(index), torch.tensor(source), reduce, include_self=False
    )
    got = rg.tensor(values).scatter_reduce(
        0, rg.tensor(index), rg.tensor(source), reduce, include_self=False
    )
    assert str(got.dtype).rsplit(".", 1)[-1] == "bool"
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("op", ["amax", "amin"])
@pytest.mark.parametrize("g", [[math.inf, -math.inf], [NAN, 1.0]])
def test_amax_and_amin_pass_a_non_finite_gradient_on_as_torch(op, g):
    # the elements that are not the extremum got 0 whatever the incoming gradient; torch's
    # grad * tied / count makes them NaN where that gradient is infinite or NaN
    values = [[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]]
    got, want = [], []
    for lib, out in ((rg, got), (torch, want)):
        x = lib.tensor(values, dtype=lib.float64, requires_grad=True)
        (grad,) = lib.autograd.grad(getattr(x, op)(1), [x], lib.tensor(g, dtype=lib.float64))
        out.append(grad.numpy())
    np.testing.assert_array_equal(got[0], want[0])
