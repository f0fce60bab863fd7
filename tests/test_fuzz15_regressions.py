"""Regressions from the fifteenth fuzzing round (``vmap`` with random ``in_dims`` and
``out_dims``, the ``func`` transforms, ``einsum``, sequences, ``nn`` layers, recurrent layers,
half precision; generators in ``tests/fuzz15_cases.py``). Expected values all come from torch,
run side by side by :func:`fuzz12_cases.check`."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from fuzz12_cases import Trial, check

torch = pytest.importorskip("torch")

A = np.arange(6.0).reshape(2, 3) / 4 - 0.5


# ---- vmap: out_dims against the structure of the outputs -------------------------------------


@pytest.mark.parametrize("chunk_size", [None, 1])
def test_vmap_takes_a_one_tuple_out_dims_for_a_lone_tensor(chunk_size):
    # retrograd handed the tuple to stack: "stack: dimension must be an int, got (1,)"
    # (torch's exception to the pytree rule; under chunk_size torch itself refuses it with an
    # AssertionError, so the comparison is without one, the plain value with one)
    def fn(lib):
        x = lib.tensor(A, requires_grad=True)
        out = lib.func.vmap(lambda a: a.sin() * 2, out_dims=(1,))(x)
        return [out, *lib.autograd.grad((out * out).sum(), [x])]

    check(Trial("out_dims=(1,)", fn))
    x = rg.tensor(A)
    got = rg.func.vmap(lambda a: a.sin() * 2, out_dims=(1,), chunk_size=chunk_size)(x)
    np.testing.assert_allclose(got.numpy(), (np.sin(A) * 2).T)


@pytest.mark.parametrize(
    "out_dims",
    [(0,), (0, 1, 0), [0, 1], ((0,), 1), (0, None)],
    ids=["too-short", "too-long", "list-for-tuple", "nested-in-a-leaf", "none"],
)
def test_vmap_refuses_out_dims_that_do_not_match_a_tuple_of_outputs(out_dims):
    # retrograd read out_dims[k] per output: a short tuple was an IndexError (a bare one), a
    # long one or a list passed silently, a nested one reached stack
    def fn(lib):
        x = lib.tensor(A)
        return list(lib.func.vmap(lambda a: (a.exp(), a * 2), out_dims=out_dims)(x))

    check(Trial(f"out_dims={out_dims}", fn))
    with pytest.raises(rg.RetrogradError, match="out_dims"):
        fn(rg)


def test_vmap_out_dims_longer_than_one_for_a_lone_tensor_is_refused():
    def fn(lib):
        return [lib.func.vmap(lambda a: a * 2, out_dims=(0, 1))(lib.tensor(A))]

    check(Trial("out_dims=(0, 1)", fn))
    with pytest.raises(rg.InvalidArgumentError, match="out_dims"):
        fn(rg)


# ---- vmap: in_dims against the rank of each input ---------------------------------------------


@pytest.mark.parametrize("in_dim", [2, -3, 5])
def test_vmap_refuses_an_in_dim_out_of_range_with_a_shape_error(in_dim):
    # retrograd read leaf.shape[in_dim]: a bare IndexError (or, for -3 on a 3-d input, the
    # wrong dimension silently)
    def fn(lib):
        return [lib.func.vmap(lambda a: a.sum(), in_dims=in_dim)(lib.tensor(A))]

    check(Trial(f"in_dims={in_dim}", fn))
    with pytest.raises(rg.ShapeError, match=f"in_dim={in_dim}"):
        fn(rg)


def test_vmap_refuses_an_in_dim_on_a_0d_input():
    def fn(lib):
        return [lib.func.vmap(lambda a, b: a * b, in_dims=(0, 0))(lib.tensor(A), lib.tensor(2.0))]

    check(Trial("0-d", fn))
    with pytest.raises(rg.ShapeError, match="in_dim=0"):
        fn(rg)


def test_vmap_refuses_an_in_dim_that_is_not_an_int():
    def fn(lib):
        return [lib.func.vmap(lambda a: a * 2, in_dims=(1.0,))(lib.tensor(A))]

    check(Trial("float in_dim", fn))
    with pytest.raises(rg.InvalidArgumentError, match="in_dim"):
        fn(rg)


# ---- xlogy: the gradient in x is xlogy(grad, y) ---------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_xlogy_gradient_in_x_is_zero_for_a_zero_cotangent_where_y_is_zero(dtype):
    # retrograd's xlogy was x * log(y) composed: its gradient in x was grad * log(y), NaN for
    # a zero cotangent where y is 0 (0 * -inf); torch's is xlogy(grad, y), 0 there (and inf,
    # not 0, where x is 0 and y is inf)
    x = np.array([1.5, -2.0, 0.0, 0.0, 2.0, 0.0])
    y = np.array([0.0, 0.0, np.inf, 0.5, 3.0, 0.0])
    w = np.array([0.0, 0.0, 1.0, 0.0, 1.0, 2.0])

    def fn(lib):
        dt = getattr(lib, dtype)
        a, b = lib.tensor(x, dtype=dt, requires_grad=True), lib.tensor(y, dtype=dt)
        out = lib.xlogy(a, b)
        return [out, *lib.autograd.grad((out * lib.tensor(w, dtype=dt)).sum(), [a])]

    check(Trial(f"xlogy {dtype}", fn))
