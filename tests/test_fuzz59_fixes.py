"""Regressions of round 59's random ``torch.func`` programs (tests/test_random_func_59.py),
each against torch 2.13's behaviour.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.func as tfunc

import retrograd as rg
from retrograd import func as rfunc

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

X = np.random.default_rng(0).uniform(-1.0, 1.0, (3, 4))
Y = np.random.default_rng(1).uniform(-1.0, 1.0, (4,))
W = np.random.default_rng(2).uniform(-1.0, 1.0, (4, 4))


def ours():
    return rg.tensor(X, dtype=rg.float64), rg.tensor(Y, dtype=rg.float64)


# -- values of the batch read on the host, whichever operand the mapped input was ---------------
DERIVED = {
    "captured_times": lambda lib, a, y: y * a,
    "matrix_at": lambda lib, a, y: lib.tensor(W) @ a,
    "cat": lambda lib, a, y: lib.cat([y, a]),
    "stack": lambda lib, a, y: lib.stack([y, a]),
    "where": lambda lib, a, y: lib.where(y > 0, y, a),
}


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_reading_a_value_derived_from_the_batch_raises_as_torch(name):
    derive = DERIVED[name]
    tx, ty = torch.tensor(X), torch.tensor(Y)
    with pytest.raises(RuntimeError, match="item"):
        tfunc.vmap(lambda a: derive(torch, a, ty).sum().item())(tx)
    with pytest.raises(RuntimeError, match="data-dependent control flow"):
        tfunc.vmap(lambda a: a if derive(torch, a, ty).sum() > 0 else -a)(tx)
    x, y = ours()
    with pytest.raises(rg.AutodiffError, match="item"):
        rfunc.vmap(lambda a: derive(rg, a, y).sum().item())(x)
    with pytest.raises(rg.AutodiffError, match="data-dependent control flow"):
        rfunc.vmap(lambda a: a if derive(rg, a, y).sum() > 0 else -a)(x)
    # outside a vmap, and for the results a vmap returns, nothing changes
    out = rfunc.vmap(lambda a: derive(rg, a, y))(x)
    assert type(out) is rg.Tensor
    assert isinstance(out.sum().item(), float)
    assert isinstance(derive(rg, x[0], y).sum().item(), float)


def test_tolist_and_numpy_of_the_batch_raise_as_torch():
    with pytest.raises(RuntimeError):
        tfunc.vmap(lambda a: torch.tensor(a.tolist()))(torch.tensor(X))
    x, y = ours()
    with pytest.raises(rg.AutodiffError, match="vmap"):
        rfunc.vmap(lambda a: rg.tensor(a.tolist()))(x)
    with pytest.raises(rg.AutodiffError, match="vmap"):
        rfunc.vmap(lambda a: rg.tensor((y * a).numpy()))(x)
    assert rfunc.vmap(lambda a: a * float(len(y.tolist())))(x).shape == (3, 4)  # a constant


# -- in-place writes ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["add_", "mul_", "copy_", "sub_"])
def test_an_in_place_write_of_the_batch_into_a_captured_tensor_raises_as_torch(method):
    with pytest.raises(RuntimeError):
        ty = torch.tensor(Y)
        tfunc.vmap(lambda a: getattr(ty, method)(a))(torch.tensor(X))
    x, y = ours()
    with pytest.raises(rg.AutodiffError, match=f"vmap: {method}"):
        rfunc.vmap(lambda a: getattr(y, method)(a))(x)
    np.testing.assert_array_equal(np.asarray(y.tolist()), Y)  # refused before any write
    # the other way round, the mapped element written with the captured tensor, is allowed
    # and writes through to the input, as torch's
    tx, ty = torch.tensor(X), torch.tensor(Y)
    expected = tfunc.vmap(lambda a: getattr(a, method)(ty))(tx)
    got = rfunc.vmap(lambda a: getattr(a, method)(y))(x)
    np.testing.assert_allclose(np.asarray(got.tolist()), expected.numpy())
    np.testing.assert_allclose(np.asarray(x.tolist()), tx.numpy())


def test_a_captured_tensor_written_in_place_with_constants_stays_allowed():
    x, y = ours()
    out = rfunc.vmap(lambda a: a + y.clone().mul_(2.0))(x)
    np.testing.assert_allclose(np.asarray(out.tolist()), X + 2 * Y)


# -- ops whose result's shape depends on the batch's values -----------------------------------
REFUSED = {
    "nonzero": lambda lib, a, y: a.nonzero(),
    "nonzero_function": lambda lib, a, y: lib.nonzero(a),
    "unique": lambda lib, a, y: a.unique(),
    "where_one_argument": lambda lib, a, y: lib.where(a > 0),
    "mask_of_the_batch": lambda lib, a, y: y[a > 0],
    "masked_select": lambda lib, a, y: a.masked_select(a > 0),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_ops_of_data_dependent_shape_raise_as_torch(name):
    op = REFUSED[name]
    with pytest.raises(RuntimeError, match="vmap"):
        tfunc.vmap(lambda a: op(torch, a, torch.tensor(Y)))(torch.tensor(X))
    x, y = ours()
    with pytest.raises(rg.AutodiffError, match="vmap"):
        rfunc.vmap(lambda a: op(rg, a, y))(x)


def test_a_constant_mask_and_argwhere_stay_allowed_as_torch():
    mask = np.array([True, False, True, True])
    tx = torch.tensor(X)
    x, _ = ours()
    for func, lib, data in ((rfunc, rg, x), (tfunc, torch, tx)):
        masked = func.vmap(lambda a, lib=lib: a[lib.tensor(mask)])(data)
        found = func.vmap(lambda a: (a * 0 + 1).argwhere())(data)
        assert tuple(masked.shape) == (3, 3) and tuple(found.shape) == (3, 4, 1)
    np.testing.assert_allclose(
        np.asarray(rfunc.vmap(lambda a: a[rg.tensor(mask)])(x).tolist()), X[:, mask]
    )


# -- func transforms ---------------------------------------------------------------------------
@pytest.mark.parametrize("aux", [3.0, None, "label", (1, 2)])
def test_an_aux_that_holds_no_tensors_raises_as_torch(aux):
    with pytest.raises(RuntimeError, match="Expected tensors"):
        tfunc.grad(lambda a: (a.sum(), aux), has_aux=True)(torch.tensor(Y))
    y = ours()[1]
    with pytest.raises(rg.DTypeError, match="aux"):
        rfunc.grad(lambda a: (a.sum(), aux), has_aux=True)(y)
    with pytest.raises(rg.DTypeError, match="aux"):
        rfunc.vjp(lambda a: (a * 2, aux), y, has_aux=True)
    with pytest.raises(rg.DTypeError, match="aux"):
        rfunc.jacfwd(lambda a: (a * 2, aux), has_aux=True)(y)


def test_jvp_takes_tuples_of_primals_only_as_torch():
    ty, y = torch.tensor(Y), ours()[1]
    for primals, tangents in (([ty], (ty,)), ((ty,), [ty]), ((), ())):
        with pytest.raises(RuntimeError, match="jvp"):
            tfunc.jvp(lambda *a: ty * 2, primals, tangents)
    for primals, tangents in (([y], (y,)), ((y,), [y])):
        with pytest.raises(rg.DTypeError, match="tuple"):
            rfunc.jvp(lambda a: a * 2, primals, tangents)
    with pytest.raises(rg.InvalidArgumentError, match="at least one"):
        rfunc.jvp(lambda: y * 2, (), ())


def test_reverse_mode_refuses_int_outputs_and_forward_mode_keeps_the_output_dtype():
    ty, y = torch.tensor(Y), ours()[1]
    with pytest.raises(RuntimeError, match="floating-point"):
        tfunc.jacrev(lambda a: (a > 0).long())(ty)
    with pytest.raises(rg.DTypeError, match="floating-point"):
        rfunc.jacrev(lambda a: (a > 0).long())(y)
    with pytest.raises(rg.DTypeError, match="floating-point"):
        rfunc.vjp(lambda a: (a > 0).long(), y)
    for to in ("int64", "float32"):
        expected = tfunc.jacfwd(lambda a, to=to: (a * 3).to(getattr(torch, to)))(ty)
        got = rfunc.jacfwd(lambda a, to=to: (a * 3).to(getattr(rg, to)))(y)
        assert got.dtype == getattr(rg, to) and str(expected.dtype) == f"torch.{to}"
        np.testing.assert_allclose(np.asarray(got.tolist()), expected.double().numpy())
    # reverse mode's Jacobian keeps the input's dtype, as torch's
    assert rfunc.jacrev(lambda a: a.float() * 3)(y).dtype == rg.float64
    assert tfunc.jacrev(lambda a: a.float() * 3)(ty).dtype == torch.float64


def test_an_out_dim_given_as_a_bool_is_the_int_it_is_as_torch():
    x, _ = ours()
    expected = tfunc.vmap(lambda a: a * 2, out_dims=True)(torch.tensor(X))
    got = rfunc.vmap(lambda a: a * 2, out_dims=True)(x)
    assert tuple(got.shape) == tuple(expected.shape) == (4, 3)
    np.testing.assert_allclose(np.asarray(got.tolist()), expected.numpy())


MADE_FROM_THE_ELEMENT = {
    "clone": lambda lib, a: a.clone(),
    "detach": lambda lib, a: a.detach(),
    "zeros_like": lambda lib, a: lib.zeros_like(a),
    "full_like": lambda lib, a: lib.full_like(a, 2.0),
    "new_zeros": lambda lib, a: a.new_zeros(4),
    "new_full": lambda lib, a: a.new_full((4,), 0.5),
}


@pytest.mark.parametrize("name", sorted(MADE_FROM_THE_ELEMENT))
def test_tensors_made_from_the_element_are_of_the_batch_and_take_its_writes(name):
    make = MADE_FROM_THE_ELEMENT[name]
    expected = tfunc.vmap(lambda a: make(torch, a).add_(a * 3))(torch.tensor(X))
    got = rfunc.vmap(lambda a: make(rg, a).add_(a * 3))(ours()[0])
    np.testing.assert_allclose(np.asarray(got.tolist()), expected.numpy())


def test_an_item_assignment_of_the_batch_into_a_new_tensor_raises_as_torch():
    def write(lib, a):
        out = lib.zeros(2, 4, dtype=lib.float64)
        out[0] = a
        return out

    with pytest.raises(RuntimeError, match="vmap"):
        tfunc.vmap(lambda a: write(torch, a))(torch.tensor(X))
    with pytest.raises(rg.AutodiffError, match="vmap"):
        rfunc.vmap(lambda a: write(rg, a))(ours()[0])


def test_batch_norm_in_training_refuses_shared_running_statistics_as_torch():
    data = np.random.default_rng(5).uniform(-1.0, 1.0, (3, 2, 4))
    with pytest.raises(RuntimeError, match="Batch norm got a batched tensor"):
        tfunc.vmap(torch.nn.BatchNorm1d(4).double())(torch.tensor(data))
    norm = rg.nn.BatchNorm1d(4).double()
    with pytest.raises(rg.AutodiffError, match="Batch norm got a batched tensor"):
        rfunc.vmap(norm)(rg.tensor(data))
    np.testing.assert_array_equal(np.asarray(norm.running_mean.tolist()), np.zeros(4))
    # without running statistics (torch's remedy) each element normalizes by its own batch
    torch_norm = tfunc.replace_all_batch_norm_modules_(torch.nn.BatchNorm1d(4).double())
    expected = tfunc.vmap(torch_norm)(torch.tensor(data))
    got = rfunc.vmap(rfunc.replace_all_batch_norm_modules_(norm))(rg.tensor(data))
    np.testing.assert_allclose(np.asarray(got.tolist()), expected.detach().numpy(), atol=1e-12)
