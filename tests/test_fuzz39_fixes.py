"""Regressions found by round 39 of the differential fuzzer
(``tests/test_random_nn_programs_39.py``): one focused case per defect, each expected value or
refusal taken from torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)

torch = pytest.importorskip("torch")
tF = torch.nn.functional  # noqa: N816

INDICES = np.array([0, 0, 1, 2, 0, 3, 3])
OFFSETS = np.array([0, 3, 5])


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding_bag_scales_the_gradient_by_frequency_as_torch(mode, padding_idx):
    """``scale_grad_by_freq=True`` was refused; now the weight's gradient is torch's (its CPU
    kernel divides the k-th distinct index's rows by the count of the k-th sorted entry)."""
    weight = np.random.default_rng(0).standard_normal((5, 3))
    seed = np.random.default_rng(1).standard_normal((3, 3))
    theirs = torch.tensor(weight, requires_grad=True)
    out = tF.embedding_bag(torch.tensor(INDICES), theirs, torch.tensor(OFFSETS), mode=mode,
                           scale_grad_by_freq=True, padding_idx=padding_idx)  # fmt: skip
    (out * torch.tensor(seed)).sum().backward()
    ours = rg.tensor(weight).require_grad()
    got = F.embedding_bag(rg.tensor(INDICES), ours, rg.tensor(OFFSETS), mode=mode,
                          scale_grad_by_freq=True, padding_idx=padding_idx)  # fmt: skip
    grads = (got * rg.tensor(seed)).sum().backward()
    np.testing.assert_allclose(got.numpy(), out.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-12)


def test_embedding_bag_module_with_2d_bags_scales_by_frequency_and_max_mode_refuses():
    tokens = np.array([[1, 1, 2], [2, 0, 1]])
    rg.manual_seed(0)
    bag = rg.nn.EmbeddingBag(4, 2, scale_grad_by_freq=True, mode="sum")
    theirs = torch.tensor(bag.weight.detach().numpy(), requires_grad=True)
    tF.embedding_bag(
        torch.tensor(tokens), theirs, mode="sum", scale_grad_by_freq=True
    ).sum().backward()
    grads = bag(rg.tensor(tokens)).sum().backward()
    np.testing.assert_allclose(bag.weight.grad(grads).numpy(), theirs.grad.numpy())
    with pytest.raises(rg.InvalidArgumentError, match="embedding_bag: max mode"):
        F.embedding_bag(rg.tensor(tokens), bag.weight, mode="max", scale_grad_by_freq=True)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_max_unpool_to_an_empty_plane_is_empty_as_torch(dim):
    """A max pool of kernel 2, stride 2, padding 1 over one element unpools (default size
    ``(1 - 1) * 2 + 2 - 2 = 0``) to an empty plane: torch returns it, retrograd raised an
    out-of-range error for the index 0. (torch's backward through the empty plane fails; the
    empty result adds nothing to retrograd's gradient, the pool's alone.)"""
    x = np.random.default_rng(2).standard_normal((1, 2) + (1,) * dim)
    pool, unpool = f"max_pool{dim}d", f"max_unpool{dim}d"
    t = torch.tensor(x, requires_grad=True)
    values, where = getattr(tF, pool)(t, 2, 2, 1, return_indices=True)
    expected = getattr(tF, unpool)(values, where, 2, 2, 1)
    ours = rg.tensor(x).require_grad()
    v, w = getattr(F, pool)(ours, 2, 2, 1, return_indices=True)
    got = getattr(F, unpool)(v, w, 2, 2, 1)
    assert got.shape == tuple(expected.shape) == (1, 2) + (0,) * dim
    grads = (got.sum() + v.sum()).backward()
    values.sum().backward()
    np.testing.assert_array_equal(ours.grad(grads).numpy(), t.grad.numpy())


def test_max_unpool_still_refuses_an_index_outside_a_nonempty_plane():
    values = rg.ones((1, 1, 1, 1))
    with pytest.raises(IndexError, match="max_unpool2d: index 1 is out of range"):
        F.max_unpool2d(values, rg.tensor([[[[1]]]]), 3, 3, 1)


def test_lp_pool1d_refuses_a_tuple_kernel_as_torch():
    """torch's ``lp_pool1d`` multiplies by ``kernel_size`` and raises a ``TypeError`` for a
    tuple; retrograd pooled it."""
    x = np.abs(np.random.default_rng(3).standard_normal((1, 2, 5)))
    with pytest.raises(TypeError):
        tF.lp_pool1d(torch.tensor(x), 2.0, (2,))
    with pytest.raises(rg.DTypeError, match="lp_pool1d: kernel_size must be an int"):
        F.lp_pool1d(rg.tensor(x), 2.0, (2,))
    expected = tF.lp_pool1d(torch.tensor(x), 2.0, 2).numpy()
    np.testing.assert_allclose(F.lp_pool1d(rg.tensor(x), 2.0, 2).numpy(), expected)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize(
    ("input_dtype", "bias_dtype"), [("float32", "float64"), ("float64", "float32")]
)
def test_conv_refuses_a_bias_of_another_dtype_as_torch(dim, input_dtype, bias_dtype):
    """torch's ``conv1d/2d/3d`` raise "Input type ... and bias type ... should be the same";
    retrograd cast the bias to the input's dtype and computed."""
    x = np.ones((1, 1) + (3,) * dim, dtype=input_dtype)
    w = np.ones((1, 1) + (2,) * dim, dtype=input_dtype)
    b = np.ones(1, dtype=bias_dtype)
    name = f"conv{dim}d"
    with pytest.raises(RuntimeError, match="bias type"):
        getattr(tF, name)(torch.tensor(x), torch.tensor(w), torch.tensor(b))
    with pytest.raises(rg.DTypeError, match=f"{name}: input type .* bias type"):
        getattr(F, name)(rg.tensor(x), rg.tensor(w), rg.tensor(b))
    same = getattr(F, name)(rg.tensor(x), rg.tensor(w), rg.tensor(b.astype(input_dtype)))
    expected = getattr(tF, name)(
        torch.tensor(x), torch.tensor(w), torch.tensor(b.astype(input_dtype))
    )
    np.testing.assert_array_equal(same.numpy(), expected.numpy())
