"""The layers' common calls (``F.linear``, ``F.layer_norm``, ``F.scaled_dot_product_attention``
of one float dtype, backend and device, the plain shapes) take a fast path that records the
general path's ops without its lifts and promotions; ``F.embedding`` of 1-d indices records
no reshapes. These check the ops recorded, the values and gradients against torch 2.13, and
that calls the fast paths leave to the general path keep its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812 (PyTorch's idiom)
from backends import inner_backend
from retrograd.errors import MixedDTypeError, ShapeError, SizeMismatchError


class RecordLog(rg.Autodiff):
    """An autodiff backend that logs the name of each op it records."""

    def __init__(self, *args):
        super().__init__(*args)
        self.names = []

    def _on_record(self, node, out):
        self.names.append(node.op.name)


def _leaf(backend, values):
    return rg.tensor(values, backend=backend).require_grad()


def _check_against_torch(backend, function, torch_function, arrays):
    """``function`` of leaves holding ``arrays`` against ``torch_function`` of torch leaves:
    values and the gradients of a weighted sum, float64 (a tight tolerance)."""
    leaves = [_leaf(backend, a) for a in arrays]
    torch_leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = function(*leaves)
    expected = torch_function(*torch_leaves)
    weights = np.random.default_rng(3).standard_normal(tuple(expected.shape))
    grads = (out * rg.tensor(weights, backend=backend)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    for leaf, torch_leaf in zip(leaves, torch_leaves, strict=True):
        np.testing.assert_allclose(
            leaf.grad(grads).numpy(), torch_leaf.grad.numpy(), rtol=1e-11, atol=1e-12
        )


def test_embedding_of_one_dim_indices_records_only_the_row_selection():
    backend = RecordLog(inner_backend())
    table = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    weight = _leaf(backend, table)
    backend.names.clear()
    rows = F.embedding(rg.tensor(np.array([4, 0, 2]), backend=backend), weight)
    assert backend.names == ["select"]
    assert rows.shape == (3, 4)
    grads = (rows * 2.0).sum().backward()
    torch_weight = torch.tensor(table, requires_grad=True)
    expected = torch.nn.functional.embedding(torch.tensor([4, 0, 2]), torch_weight)
    (expected * 2.0).sum().backward()
    assert np.array_equal(rows.numpy(), expected.detach().numpy())
    assert np.array_equal(weight.grad(grads).numpy(), torch_weight.grad.numpy())
    backend.names.clear()
    # 2-d indices still flatten and shape the rows back
    grid = F.embedding(rg.tensor(np.array([[1, 5], [0, 0]]), backend=backend), weight)
    assert backend.names == ["select", "reshape"]
    assert grid.shape == (2, 2, 4)


def test_layer_calls_record_the_general_paths_ops():
    backend = RecordLog(inner_backend())
    rng = np.random.default_rng(1)
    x3 = _leaf(backend, rng.standard_normal((2, 3, 4)).astype(np.float32))
    x2 = _leaf(backend, rng.standard_normal((5, 4)).astype(np.float32))
    weight = _leaf(backend, rng.standard_normal((6, 4)).astype(np.float32))
    bias = _leaf(backend, rng.standard_normal((6,)).astype(np.float32))
    q = _leaf(backend, rng.standard_normal((2, 2, 3, 4)).astype(np.float32))
    cases = [
        (lambda: F.linear(x3, weight, bias), ["reshape", "linear", "reshape"]),
        (lambda: F.linear(x2, weight), ["linear"]),
        (lambda: F.layer_norm(x3, (4,), bias[:4], bias[2:]), ["slice", "slice", "layer_norm"]),
        (lambda: F.layer_norm(x2, 4), ["layer_norm"]),
        (lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), None),
    ]
    for call, expected in cases:
        backend.names.clear()
        call()
        if expected is None:  # one op, the fused attention
            assert len(backend.names) == 1
        else:
            assert backend.names == expected


def test_layer_calls_match_torch_float64():
    backend = rg.Autodiff(inner_backend())
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5))
    weight, bias = rng.standard_normal((4, 5)), rng.standard_normal((4,))
    tf = torch.nn.functional
    _check_against_torch(backend, F.linear, tf.linear, [x, weight, bias])
    _check_against_torch(backend, F.linear, tf.linear, [x[0], weight])
    gamma, beta = rng.standard_normal((5,)), rng.standard_normal((5,))
    _check_against_torch(
        backend,
        lambda t, g, b: F.layer_norm(t, 5, g, b, 1e-3),
        lambda t, g, b: tf.layer_norm(t, (5,), g, b, 1e-3),
        [x, gamma, beta],
    )
    _check_against_torch(
        backend, lambda t: F.layer_norm(t, (5,)), lambda t: tf.layer_norm(t, (5,)), [x]
    )
    q, k, v = (rng.standard_normal((2, 2, 3, 4)) for _ in range(3))
    for causal, scale in ((True, None), (False, 0.3)):
        _check_against_torch(
            backend,
            lambda a, b, c, causal=causal, scale=scale: F.scaled_dot_product_attention(
                a, b, c, is_causal=causal, scale=scale
            ),
            lambda a, b, c, causal=causal, scale=scale: tf.scaled_dot_product_attention(
                a, b, c, is_causal=causal, scale=scale
            ),
            [q, k, v],
        )


def test_calls_outside_the_fast_paths_keep_the_general_paths_errors():
    backend = rg.Autodiff(inner_backend())
    rng = np.random.default_rng(4)
    x = rg.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32), backend=backend)
    weight = rg.tensor(rng.standard_normal((6, 4)).astype(np.float32), backend=backend)
    wide = rg.tensor(rng.standard_normal((6,)), backend=backend)
    with pytest.raises(MixedDTypeError, match="linear"):
        F.linear(x, weight, wide)
    with pytest.raises(ShapeError, match="linear"):
        F.linear(x, weight[:, :3])
    # a bias that broadcasts to the output without being [out]: torch adds it
    lone = rg.tensor(np.array([0.5], np.float32), backend=backend)
    expected = torch.nn.functional.linear(
        torch.tensor(x.numpy()), torch.tensor(weight.numpy()), torch.tensor([0.5])
    )
    np.testing.assert_allclose(
        F.linear(x, weight, lone).numpy(), expected.numpy(), rtol=1e-6, atol=1e-6
    )
    with pytest.raises(MixedDTypeError, match="layer_norm"):
        F.layer_norm(x, 4, wide[:4])
    with pytest.raises(SizeMismatchError, match="layer_norm"):
        F.layer_norm(x, 3)
    with pytest.raises(MixedDTypeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(x, x.double(), x)
    with pytest.raises(SizeMismatchError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(x, x[:1, :, :3], x)
