"""The tensor API of API.md sections 1-3: creation, dtypes, values, shapes, indexing, autodiff."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

# -- creation and dtypes ---------------------------------------------------------------------


def test_default_dtypes():
    assert rg.tensor(1.5).dtype == "float32"
    assert rg.tensor([[1, 2], [3, 4]]).dtype == "int64"  # ints are int64, as in torch
    assert rg.tensor([True, False]).dtype == "bool"
    assert rg.tensor(np.array([1.0, 2.0])).dtype == "float64"  # NumPy keeps its dtype
    assert rg.tensor(np.array([1, 2], dtype=np.int32)).dtype == "int32"  # kept, as torch's
    assert rg.tensor(np.array([1, 2], dtype=np.int16)).dtype == "int16"  # kept, as torch's
    assert rg.tensor([1, 2], dtype="int64").dtype == "int64"
    assert rg.arange(0, 5).dtype == "int64"
    assert rg.zeros((2,)).dtype == "float32"
    rg.set_default_dtype(rg.float64)  # Python floats and dtype-less creation follow it
    try:
        assert rg.tensor(1.5).dtype == rg.zeros((2,)).dtype == "float64"
        assert rg.tensor([[1, 2]]).dtype == "int64"
        assert rg.tensor(np.array([1.0], np.float32)).dtype == "float32"
    finally:
        rg.set_default_dtype(rg.float32)


def test_tensor_copies_numpy_data():
    data = np.array([1.0, 2.0])
    t = rg.tensor(data)
    data[0] = 100.0
    assert t.tolist() == [1.0, 2.0]


def test_creation_functions():
    np.testing.assert_array_equal(rg.eye(2, 3).numpy(), np.eye(2, 3))
    np.testing.assert_array_equal(rg.arange(2, 7, 2).numpy(), [2, 4, 6])
    np.testing.assert_array_equal(rg.full((2, 2), 7.0).numpy(), np.full((2, 2), 7.0))
    assert rg.full((1,), 3).dtype == "int64"
    assert rg.ones_like(rg.zeros((2, 3), dtype="float64")).dtype == "float64"
    rg.seed(3)
    a = rg.random((3, 3), "normal").numpy()
    rg.seed(3)
    b = rg.random((3, 3), "normal").numpy()
    assert np.array_equal(a, b)
    u = rg.random((1000,)).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0


def test_conversions():
    t = rg.tensor([[1.5, 2.5]])
    assert t.shape == (1, 2) and t.ndim == 2
    assert t.tolist() == [[1.5, 2.5]]
    assert np.asarray(t).dtype == np.float32
    assert rg.tensor(3.0).item() == 3.0
    assert float(rg.tensor([2.0])) == 2.0
    assert t.int().dtype == "int32" and t.int().tolist() == [[1, 2]]
    assert t.bool().dtype == "bool"
    assert rg.tensor([1, 0], dtype="int64").float().dtype == "float32"
    assert t.cast("float64").dtype == "float64"


def test_promotion_follows_pytorch():
    f32 = rg.tensor([1.0, 2.0])
    f64 = rg.tensor(np.array([1.0, 2.0]))
    i64 = rg.tensor([1, 2], dtype="int64")
    b = rg.tensor([True, False])
    assert (f32 + f64).dtype == "float64"
    assert (i64 + f32).dtype == "float32"
    assert (i64 * 2).dtype == "int64"
    assert (i64 * 2.5).dtype == "float32"
    assert (i64 / 2).dtype == "float32"
    assert (b + i64).dtype == "int64"
    assert (f32 * 2).dtype == "float32"
    assert (2.0 - f32).tolist() == [1.0, 0.0]
    assert i64.exp().dtype == "float32"


def test_casts_of_floats_keep_the_gradient():
    x = rg.tensor([1.0, 2.0]).require_grad()
    y = (x.cast("float64") * 3.0).sum()
    g = x.grad(y.backward())
    assert g.dtype == "float32"
    assert g.tolist() == [3.0, 3.0]


# -- values against NumPy --------------------------------------------------------------------


def test_reductions_match_numpy():
    a = np.random.default_rng(0).normal(size=(3, 4))
    t = rg.tensor(a)
    np.testing.assert_allclose(t.sum().numpy(), a.sum())
    np.testing.assert_allclose(t.mean_dim(1).numpy(), a.mean(1, keepdims=True))
    np.testing.assert_allclose(t.var(0, keepdim=True).numpy(), a.var(0, ddof=1, keepdims=True))
    np.testing.assert_allclose(t.var(0).numpy(), a.var(0, ddof=1))
    np.testing.assert_allclose(t.prod_dim(1).numpy(), a.prod(1, keepdims=True))
    values, indices = t.max_dim_with_indices(1)
    np.testing.assert_array_equal(indices.numpy(), a.argmax(1)[:, None])
    np.testing.assert_allclose(values.numpy(), a.max(1, keepdims=True))
    np.testing.assert_array_equal(t.argmin(0, keepdim=True).numpy(), a.argmin(0)[None, :])
    np.testing.assert_array_equal(t.argmin(0).numpy(), a.argmin(0))
    assert t.sum().shape == ()
    np.testing.assert_allclose(t.cumsum(1).numpy(), a.cumsum(1))
    np.testing.assert_allclose(t.cumprod(0).numpy(), a.cumprod(0))


def test_sorting():
    t = rg.tensor([[3.0, 1.0, 2.0, 1.0]])
    values, indices = t.sort_with_indices(1)
    assert values.tolist() == [[1.0, 1.0, 2.0, 3.0]]
    assert indices.tolist() == [[1, 3, 2, 0]]  # stable
    assert t.argsort(1, descending=True).tolist() == [[0, 2, 1, 3]]  # ties keep their order
    assert t.topk(2, 1).values.tolist() == [[3.0, 2.0]]
    values, indices = t.cummax_with_indices(1)
    assert values.tolist() == [[3.0, 3.0, 3.0, 3.0]]


def test_comparisons_and_logic():
    a = rg.tensor([1.0, 2.0, 3.0])
    b = rg.tensor([3.0, 2.0, 1.0])
    assert (a < b).tolist() == [True, False, False]
    assert (a == b).tolist() == [False, True, False]
    assert a.greater_equal_elem(2.0).tolist() == [False, True, True]
    assert a.lower_elem(2).tolist() == [True, False, False]
    assert ((a > 1.5) & (b > 1.5)).tolist() == [False, True, False]
    assert (~(a > 1.5)).tolist() == [True, False, False]
    assert rg.tensor([np.nan, 1.0]).is_nan().tolist() == [True, False]
    assert rg.tensor([np.inf, 1.0]).is_inf().tolist() == [True, False]


def test_shape_ops():
    t = rg.tensor(np.arange(24.0).reshape(2, 3, 4))
    assert t.reshape((-1, 4)).shape == (6, 4)
    assert t.swap_dims(0, 2).shape == (4, 3, 2)
    assert t.permute((1, 2, 0)).shape == (3, 4, 2)
    assert t.flatten(0, 1).shape == (6, 4)
    assert t.unsqueeze_dim(-1).shape == (2, 3, 4, 1)
    assert t.unsqueeze_dim(0).shape == (1, 2, 3, 4)
    assert [c.shape for c in t.chunk(2, 2)] == [(2, 3, 2), (2, 3, 2)]
    assert [c.shape for c in t.split(2, 1)] == [(2, 2, 4), (2, 1, 4)]
    assert t.unfold(2, 2, 2).shape == (2, 3, 2, 2)
    np.testing.assert_array_equal(t.unfold(2, 2, 2).numpy()[0, 0], [[0, 1], [2, 3]])
    assert rg.stack([t, t], 1).shape == (2, 2, 3, 4)
    assert t.repeat_dim(0, 2).shape == (4, 3, 4)
    np.testing.assert_array_equal(
        t.flip((2,)).numpy(), np.flip(np.arange(24.0).reshape(2, 3, 4), 2)
    )
    assert rg.tensor([[1.0], [2.0]]).expand((2, 3)).tolist() == [[1.0] * 3, [2.0] * 3]


def test_basic_indexing_matches_numpy():
    a = np.arange(60.0).reshape(3, 4, 5)
    t = rg.tensor(a)
    for index in [
        1,
        -1,
        (0, 2),
        (slice(None), 1),
        (Ellipsis, 2),
        (None, 1),
        (1, slice(1, 4, 2)),
        (slice(0, 3, 2), None, Ellipsis, slice(1, 5)),
        (0, 0, 0),
        slice(5, 10),
    ]:
        np.testing.assert_array_equal(t[index].numpy(), a[index], err_msg=str(index))
    np.testing.assert_array_equal(t[[2, 0]].numpy(), a[[2, 0]])


def test_functional_indexing_ops_do_not_modify_the_receiver():
    t = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    t.slice_assign([(0, 1)], rg.zeros((1, 2)))
    t.scatter(1, rg.tensor([[0], [1]], dtype="int64"), rg.ones((2, 1)), "assign")
    t.select_assign(0, rg.tensor([1], dtype="int64"), rg.ones((1, 2)), "add")
    t.mask_fill(t > 2.0, 0.0)
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]


# -- autodiff API ----------------------------------------------------------------------------


def test_require_grad_and_detach_semantics():
    x = rg.tensor([1.0, 2.0]).require_grad()
    assert x.is_require_grad()
    y = x * 2.0
    assert not y.is_require_grad() and y.requires_grad
    assert not y.detach().requires_grad  # an intermediate detaches to an untracked tensor
    d = x.detach()
    assert d.is_require_grad()  # a leaf that required grad still does (Burn)
    grads = (d * 3.0).sum().backward()
    assert x.grad(grads) is None and d.grad(grads).tolist() == [3.0, 3.0]
    assert x.require_grad() is x


def test_grad_remove_replace_inner_from_inner():
    x = rg.tensor([1.0, 2.0]).require_grad()
    grads = (x * x).sum().backward()
    assert x.grad(grads).backend == inner_backend()
    x.grad_replace(grads, rg.tensor([5.0, 6.0]))
    assert x.grad(grads).tolist() == [5.0, 6.0]
    assert x.grad_remove(grads).tolist() == [5.0, 6.0]
    assert x.grad(grads) is None
    inner = x.inner()
    assert inner.backend == inner_backend()
    back = rg.Tensor.from_inner(inner, backend=x.backend)
    assert not back.requires_grad and back.tolist() == [1.0, 2.0]


def test_retain_graph_allows_a_second_backward():
    x = rg.tensor([1.0, 2.0]).require_grad()
    y = (x * x).sum()
    first = x.grad(y.backward(retain_graph=True))
    second = x.grad(y.backward())
    assert first.tolist() == second.tolist() == [2.0, 4.0]


def test_retain_grad_keeps_an_intermediate_gradient():
    x = rg.tensor([1.0, 2.0]).require_grad()
    h = (x * 3.0).retain_grad()
    grads = (h * h).sum().backward()
    assert h.grad(grads).tolist() == [6.0, 12.0]
    assert x.grad(grads).tolist() == [18.0, 36.0]


def test_backward_with_explicit_seed():
    x = rg.tensor([1.0, 2.0]).require_grad()
    grads = (x * 3.0).backward(rg.tensor([1.0, -1.0]))
    assert x.grad(grads).tolist() == [3.0, -3.0]


def test_leaf_used_in_two_graphs_is_not_consumed():
    x = rg.tensor([1.0, 2.0]).require_grad()
    first = (x * 2.0).sum()
    second = (x * 3.0).sum()
    assert x.grad(first.backward()).tolist() == [2.0, 2.0]
    assert x.grad(second.backward()).tolist() == [3.0, 3.0]


def test_int_and_bool_tensors_never_carry_gradients():
    x = rg.tensor([1.0, 2.5]).require_grad()
    assert not (x > 1.0).requires_grad
    assert not x.argmax(0).requires_grad
    assert not x.int().requires_grad


def test_inner_backend_tensors_combine_with_autodiff_tensors():
    x = rg.tensor([1.0, 2.0]).require_grad()
    g = x.grad((x * x).sum().backward())
    step = x - 0.5 * g  # an inner-backend tensor lifts into the autodiff backend
    assert step.backend is x.backend and step.tolist() == [0.0, 0.0]


def test_devices_are_labels_that_must_match():
    d1 = rg.Device("cpu", 1)
    assert rg.Device("cpu", 1) is d1 and str(d1) == "cpu:1"
    a = rg.ones((2,), device=d1)
    assert (a * 2.0).device is d1
    with pytest.raises(rg.RetrogradError, match="different devices"):
        a + rg.ones((2,))


def test_custom_checkpoint_strategy_recomputes_only_what_it_chooses():
    class RecomputeSin(rg.CheckpointStrategy):
        def recomputes(self, op):
            return op.name == "sin"

    backend = rg.Autodiff(inner_backend(), checkpointing=RecomputeSin())
    with rg.use_backend(backend):
        x = rg.tensor([0.5, 1.0], dtype="float64").require_grad()
        y = x.sin()
        z = (y * y.exp()).sum()
        assert y.primitive.node.saved.recompute and not z.primitive.node.saved.recompute
        g = x.grad(z.backward()).numpy()
    s = np.sin([0.5, 1.0])
    np.testing.assert_allclose(g, np.cos([0.5, 1.0]) * np.exp(s) * (1 + s), rtol=1e-12)


def test_default_backend_can_be_set():
    original = rg.default_backend()
    balanced = rg.Autodiff(inner_backend(), rg.BalancedCheckpointing())
    try:
        rg.set_default_backend(balanced)
        assert rg.zeros((1,)).backend is balanced
    finally:
        rg.set_default_backend(original)
    assert repr(original) == f"Autodiff({inner_backend()!r}, checkpointing=NoCheckpointing())"


@pytest.mark.numpy_only("the NumPy backend's bit-select kernel on NumPy arrays")
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("value", [0.0, -0.0, -2.5])
@pytest.mark.parametrize("special", [False, True])
def test_masked_selects_on_large_arrays_equal_np_where_bit_for_bit(dtype, value, special):
    """Large arrays are selected on their bits; the result must be np.where's, bit for bit
    (NaN, infinities and signed zeros included), broadcasting and strided views too."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((40, 300)) * 10).astype(dtype)
    if dtype != "int64":
        x[0, :50] = -0.0
        if special:
            x[1, :3] = [np.inf, -np.inf, np.nan]
    backend = inner_backend()
    fill = x.dtype.type(value)
    cases = [
        (x, rng.random(x.shape) < 0.5),
        (x, rng.random((1, 300)) < 0.5),  # the mask broadcasts
        (x.T, rng.random((300, 40)) < 0.5),  # a strided view
    ]
    for array, mask in cases:
        expected = np.where(mask, fill, array)
        for got in (
            backend.mask_fill(array, mask, value),
            backend.mask_where(array, mask, np.full_like(array, value)),
            backend.mask_where(array, mask, np.asarray(fill)),
        ):
            assert got.dtype == array.dtype and got.shape == expected.shape
            assert got.tobytes() == expected.tobytes()
