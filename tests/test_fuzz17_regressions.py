"""Defects found by round 17 of the differential fuzzer (``tests/fuzz17_cases.py``), each
pinned against torch's values."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _both(fn):
    """fn(lib) on torch and on retrograd, as float64 arrays."""
    want = fn(torch)
    got = fn(rg)
    return np.asarray(got.numpy()), want.detach().numpy()


@pytest.mark.parametrize(
    "transform",
    [
        lambda f, s: f.jacfwd(f.jacrev(s, argnums=1), argnums=0),
        lambda f, s: f.jacrev(f.grad(s, argnums=1)),
        lambda f, s: f.jacrev(f.jacfwd(s, argnums=1)),
        lambda f, s: f.hessian(lambda p, q: f.grad(s, argnums=1)(p, q).sum()),
    ],
    ids=[
        "jacfwd(jacrev argnums=1)",
        "jacrev(grad argnums=1)",
        "jacrev(jacfwd argnums=1)",
        "hessian(grad argnums=1)",
    ],
)
def test_a_transform_over_another_argument_is_differentiated(transform):
    # the inner transform differentiates in q only; the outer one in p: the inner results
    # were cut from the graph (p was "not an argument requiring grad"), so the mixed
    # derivative came out zeros
    def fn(lib):
        a = lib.tensor([1.0, 2.0, -0.5], dtype=lib.float64)
        b = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64)
        return transform(lib.func, lambda p, q: (p.sin() * q * q).sum())(a, b)

    got, want = _both(fn)
    assert np.abs(want).max() > 0.1
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_grad_over_a_keyword_argument_of_an_outer_grad():
    def fn(lib):
        a = lib.tensor([1.0, 2.0], dtype=lib.float64)
        b = lib.tensor([0.5, -1.0], dtype=lib.float64)
        inner = lib.func.grad(lambda q, *, p: (p * p * q.exp()).sum())
        return lib.func.grad(lambda p: inner(b, p=p).sum())(a)

    got, want = _both(fn)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("allow_unused", [True, False])
def test_autograd_grad_through_a_consumed_graph_says_so(allow_unused):
    # API.md section 3: a second backward through a consumed part raises an AutodiffError
    # that says so. autograd.grad (a backward toward its inputs) found no way to the input
    # through the consumed node, whose parents were dropped: None with allow_unused (a silent
    # wrong result: the gradient is 6), else "appears to not have been used in the graph"
    x = rg.tensor([1.0, 2.0], dtype=rg.float64, requires_grad=True)
    y = x * 3.0
    (first,) = rg.autograd.grad(y.sum(), [x])
    np.testing.assert_array_equal(first.numpy(), [3.0, 3.0])
    with pytest.raises(rg.AutodiffError, match="consumed by an earlier backward"):
        rg.autograd.grad((y * 2.0).sum(), [x], allow_unused=allow_unused)


def test_autograd_grad_through_a_retained_graph_and_an_unused_input():
    x = rg.tensor([1.0, 2.0], dtype=rg.float64, requires_grad=True)
    z = rg.tensor([1.0], dtype=rg.float64, requires_grad=True)
    y = x * 3.0
    rg.autograd.grad(y.sum(), [x], retain_graph=True)
    gx, gz = rg.autograd.grad((y * 2.0).sum(), [x, z], allow_unused=True)
    np.testing.assert_array_equal(gx.numpy(), [6.0, 6.0])
    assert gz is None


@pytest.mark.parametrize(
    "write",
    [
        lambda x, s: x.copy_(s),
        lambda x, s: x.view(-1).copy_(s.reshape(-1)),
        lambda x, s: x.t().copy_(s.t()),
        lambda x, s: x.__setitem__(Ellipsis, s),
        lambda x, s: x.unsqueeze(0).copy_(s[None]),
    ],
    ids=["copy_", "view.copy_", "t.copy_", "setitem ...", "unsqueeze.copy_"],
)
def test_copy_over_a_whole_tensor_of_the_graph_keeps_it_there(write):
    # torch keeps the overwritten tensor in the graph (its old value gets a zero gradient);
    # retrograd replaced it by the source, so autograd.grad found the leaf behind the old
    # value unused and raised, where torch returns zeros
    def fn(lib):
        a = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64, requires_grad=True)
        b = lib.tensor([[5.0, 6.0], [7.0, 8.0]], dtype=lib.float64, requires_grad=True)
        x = a * 2.0
        write(x, b * 3.0)
        ga, gb = lib.autograd.grad((x * x).sum(), [a, b])
        return lib.cat([ga.reshape(-1), gb.reshape(-1)])

    got, want = _both(fn)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.quantile(x, 0.5, dim=1),
        lambda lib, x: x.quantile(lib.tensor([0.2, 0.9], dtype=x.dtype), dim=-2),
        lambda lib, x: lib.nanquantile(x, 0.3, dim=0, keepdim=True),
        lambda lib, x: x.quantile(0.5),
    ],
    ids=["dim=1", "tensor q dim=-2", "nanquantile dim=0", "no dim"],
)
def test_quantile_of_an_empty_tensor_refuses(call):
    # torch: "quantile() input tensor must be non-empty", whatever the dim; over a reduced
    # dimension of size 1 retrograd returned an empty result (and without a dim raised a
    # gather's IndexOutOfRangeError)
    with pytest.raises(RuntimeError, match="must be non-empty"):
        call(torch, torch.zeros(1, 1, 0, dtype=torch.float64))
    with pytest.raises(
        rg.ShapeError, match=r"quantile: input tensor must be non-empty.*\[1, 1, 0\]"
    ):
        call(rg, rg.zeros(1, 1, 0, dtype=rg.float64))


@pytest.mark.parametrize(
    "name", ["add", "sub", "mul", "div", "true_divide", "remainder", "subtract", "multiply"]
)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_number_first_keeps_its_value_beside_a_float_tensor(name, dtype):
    # rg.add(0.3, t) lifted 0.3 to a float32 0-d tensor: beside a float64 tensor the result was
    # float64 but computed from 0.3's float32 rounding (0.30000001192092896)
    def fn(lib):
        t = lib.tensor([1.0, -2.0, 7.0], dtype=getattr(lib, dtype))
        return getattr(lib, name)(0.3, t)

    got, want = _both(fn)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
