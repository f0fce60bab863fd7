"""Burn's autodiff-side module tests that the earlier batches left (tracel-ai/burn at
2c06be351006851d42fdb6df16b976f4a82d9747): burn-core's ``tests/reparameterization.rs`` (weight
normalization attached to a linear weight), ``src/module/base.rs`` (freezing and thawing part of
a module), burn-optim's ``src/optim/module/module_optimizer.rs`` (gradient clipping on one group
of parameters only) and burn-tensor's ``src/tensor/api/extension.rs`` (the primitive of a tracked
tensor), under every checkpointing strategy on the chosen inner backend.

Burn's forms map to torch's (API.md sections 8 and 10): its ``WeightNormMapper`` on a
``[d_input, d_output]`` weight normalized along dimension 1 is torch's
``nn.utils.weight_norm(linear)`` (and ``nn.utils.parametrizations.weight_norm``) on the
``[out, in]`` weight along dimension 0: ``weight = g * v / ||v||`` with one magnitude per output
row; ``valid()`` folding the reparameterization is ``remove_weight_norm`` /
``parametrize.remove_parametrizations``; a record round trip is ``state_dict`` /
``load_state_dict``; ``freeze_group``/``unfreeze_group`` of a path is ``requires_grad_`` on that
parameter; ``with_group(group, SgdConfig, GradientClipping::Value(t))`` is
``clip_grad_value_(grads, group_parameters, t)`` before ``optim.SGD(...).step(grads)``.
Expected values are Burn's assertions, and the gradients of the weight normalization are its
derivative written out in NumPy (float64).

Deliberate differences: Burn's ``valid()`` moves a module to the inner backend and drops
``require_grad`` until ``train()``; torch's ``eval()`` (which API.md follows) changes no
parameter's ``requires_grad``, which is what the test checks. Burn's autodiff primitive is the
tracked tensor itself; API.md's ``t.inner()`` is the inner backend's value, so
``Tensor.from_inner`` gives an untracked leaf that may be marked again.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn as nn
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)


def arr(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t, dtype=np.float64)


def seeded_linear(in_features=4, out_features=6, seed=0):
    rg.seed(seed)
    return nn.Linear(in_features, out_features)


def weight_norm_forms():
    """Both torch forms of weight normalization, with accessors for the magnitude ``g`` and the
    direction ``v`` and the function that folds the reparameterization away."""
    hook = (
        lambda m: nn.utils.weight_norm(m),
        lambda m: m.weight_g,
        lambda m: m.weight_v,
        lambda m: nn.utils.remove_weight_norm(m),
    )
    parametrization = (
        lambda m: nn.utils.parametrizations.weight_norm(m),
        lambda m: m.parametrizations.weight.original0,
        lambda m: m.parametrizations.weight.original1,
        lambda m: nn.utils.parametrize.remove_parametrizations(m, "weight"),
    )
    return {"hook": hook, "parametrization": parametrization}


WEIGHT_NORM_FORMS = weight_norm_forms()


# ---- reparameterization.rs ------------------------------------------------------------------


@pytest.mark.parametrize("form", list(WEIGHT_NORM_FORMS))
def test_weight_norm_preserves_the_effective_weight_when_attached(form):
    attach, _, _, _ = WEIGHT_NORM_FORMS[form]
    original = seeded_linear()
    expected = arr(original.weight).copy()
    model = attach(original)
    np.testing.assert_allclose(arr(model.weight), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", list(WEIGHT_NORM_FORMS))
def test_weight_norm_exposes_the_magnitude_as_a_parameter(form):
    attach, magnitude, direction, _ = WEIGHT_NORM_FORMS[form]
    model = attach(seeded_linear())
    g, v = magnitude(model), direction(model)
    # One magnitude per normalized vector (per output row; torch keeps the reduced dims).
    assert g.shape == (6, 1)
    assert g is not v
    np.testing.assert_allclose(arr(g)[:, 0], np.linalg.norm(arr(v), axis=1), rtol=1e-5)
    n_params = sum(int(np.prod(p.shape)) for p in model.parameters())
    assert n_params == 6 * 4 + 6 + 6  # direction + bias + magnitude


@pytest.mark.parametrize("form", list(WEIGHT_NORM_FORMS))
def test_weight_norm_state_dict_round_trip_keeps_direction_and_magnitude(form):
    attach, magnitude, direction, _ = WEIGHT_NORM_FORMS[form]
    source = attach(seeded_linear(seed=1))
    # A different magnitude than the one attached, so the round trip has to carry it.
    with rg.no_grad():
        magnitude(source).mul_(2.0)
    target = attach(seeded_linear(seed=2))
    target.load_state_dict(source.state_dict())
    np.testing.assert_array_equal(arr(direction(target)), arr(direction(source)))
    np.testing.assert_array_equal(arr(magnitude(target)), arr(magnitude(source)))
    # The hook form recomputes ``weight`` in the forward pre-hook (torch's), so compare outputs.
    x = rg.tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
    np.testing.assert_allclose(arr(target(x)), arr(source(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", list(WEIGHT_NORM_FORMS))
def test_weight_norm_gradients_flow_to_direction_and_magnitude(form):
    attach, magnitude, direction, _ = WEIGHT_NORM_FORMS[form]
    model = attach(seeded_linear())
    with rg.no_grad():
        magnitude(model).mul_(1.5)  # g != ||v||, so both terms of the derivative show
    g, v = magnitude(model), direction(model)
    # Through the forward, which (re)computes the weight in both forms (torch's hook form
    # only refreshes ``weight`` in its forward pre-hook).
    grads = model(rg.ones((2, 4))).sum().backward()
    g_grad, v_grad = g.grad(grads), v.grad(grads)
    assert g_grad is not None and v_grad is not None

    # weight = g * v / ||v|| row-wise; d loss / d weight = 2 everywhere (two rows of ones).
    v64, g64 = arr(v), arr(g)
    norm = np.linalg.norm(v64, axis=1, keepdims=True)
    row_sum = v64.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(arr(g_grad), 2.0 * row_sum / norm, rtol=1e-4, atol=1e-5)
    expected_v = 2.0 * g64 * (1.0 / norm - v64 * row_sum / norm**3)
    np.testing.assert_allclose(arr(v_grad), expected_v, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(arr(model.bias.grad(grads)), np.full(6, 2.0))


@pytest.mark.parametrize("form", list(WEIGHT_NORM_FORMS))
def test_removing_weight_norm_folds_it_into_a_plain_weight(form):
    attach, _, _, remove = WEIGHT_NORM_FORMS[form]
    model = attach(seeded_linear())
    materialized = arr(model.weight).copy()
    remove(model)
    names = sorted(name for name, _ in model.named_parameters())
    assert names == ["bias", "weight"]
    np.testing.assert_allclose(arr(model.weight), materialized, rtol=1e-6, atol=1e-7)
    grads = model(rg.ones((2, 4))).sum().backward()
    np.testing.assert_allclose(arr(model.weight.grad(grads)), np.full((6, 4), 2.0))


# ---- module/base.rs ---------------------------------------------------------------------------


def test_freeze_only_the_selected_parameter():
    model = seeded_linear(4, 4)
    assert model.weight.requires_grad and model.bias.requires_grad
    model.weight.requires_grad_(False)
    assert not model.weight.requires_grad
    assert model.bias.requires_grad
    grads = model(rg.ones((2, 4))).sum().backward()
    assert model.weight.grad(grads) is None
    np.testing.assert_allclose(arr(model.bias.grad(grads)), np.full(4, 2.0))


def test_unfreeze_only_the_selected_parameter():
    model = seeded_linear(4, 4)
    model.requires_grad_(False)
    assert not model.weight.requires_grad and not model.bias.requires_grad
    model.weight.requires_grad_(True)
    assert model.weight.requires_grad
    assert not model.bias.requires_grad
    x = rg.tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
    grads = model(x).sum().backward()
    assert model.bias.grad(grads) is None
    np.testing.assert_allclose(
        arr(model.weight.grad(grads)), np.tile([4.0, 6.0, 8.0, 10.0], (4, 1))
    )


def test_eval_and_train_keep_each_parameters_requires_grad():
    model = seeded_linear(4, 4)
    model.bias.requires_grad_(False)
    for mode in (model.eval, model.train, model.eval):
        mode()
        assert model.weight.requires_grad
        assert not model.bias.requires_grad


# ---- optim/module/module_optimizer.rs ---------------------------------------------------------


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        rg.seed(3)
        self.layer_a = nn.Linear(4, 4)
        self.layer_b = nn.Linear(4, 4)

    def forward(self, x):
        return self.layer_b(self.layer_a(x))


def test_gradient_clipping_of_one_group_leaves_the_other_unclipped():
    lr, threshold = 0.01, 0.01
    bound = lr * threshold
    model = TwoLayers()
    optimizer = rg.optim.SGD(model.parameters(), lr=lr)
    # Large inputs give gradients far above the clipping threshold.
    x = rg.tensor(np.random.default_rng(4).uniform(100.0, 200.0, (2, 4)).astype(np.float32))
    weight_a_before = arr(model.layer_a.weight).copy()
    weight_b_before = arr(model.layer_b.weight).copy()

    grads = model(x).sum().backward()
    nn.utils.clip_grad_value_(grads, model.layer_a.parameters(), threshold)
    optimizer.step(grads)

    diff_a = weight_a_before - arr(model.layer_a.weight)
    diff_b = weight_b_before - arr(model.layer_b.weight)
    assert np.all(np.abs(diff_a) <= bound + 1e-6)
    assert np.any(np.abs(diff_b) > bound + 1e-6)


# ---- burn-tensor src/tensor/api/extension.rs --------------------------------------------------


def test_primitive_of_a_tracked_leaf_comes_back_as_a_fresh_leaf(backend):  # noqa: F811
    x = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).require_grad()
    assert x.is_require_grad()
    back = rg.Tensor.from_inner(x.inner(), backend=backend)
    np.testing.assert_array_equal(arr(back), arr(x))
    assert not back.is_require_grad()
    back = back.require_grad()
    grads = (back * back).sum().backward()
    np.testing.assert_allclose(arr(back.grad(grads)), 2.0 * arr(x))
    # The original leaf is still usable, and untouched by the other's backward.
    assert x.grad(grads) is None
    np.testing.assert_allclose(arr(x.grad(x.sum().backward())), np.ones((2, 3)))


# ---- burn-backend-tests/tests/cubecl/{select_assign, scatter, gather, mask_where, repeat_dim,
# cat, slice_assign, clamp}.rs ------------------------------------------------------------------
# Burn compares each GPU kernel with its reference backend on random inputs; here the op runs on
# tracked inputs, the output is compared with NumPy and so is the gradient of
# ``sum(out * weights)``, which under each strategy goes through the op's backward (and its
# recomputation).


def rand(rng, shape):
    return rng.uniform(0.0, 1.0, shape).astype(np.float32)


def tracked(*arrays):
    return [rg.tensor(a).require_grad() for a in arrays]


def check_output_and_grads(out, expected, weights, inputs, expected_grads):
    np.testing.assert_allclose(arr(out), expected, rtol=1e-5, atol=1e-5)
    grads = (out * rg.tensor(weights)).sum().backward()
    for tensor, grad in zip(inputs, expected_grads):
        np.testing.assert_allclose(arr(tensor.grad(grads)), grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "dim, shape",
    [(0, (256, 6)), (1, (6, 256)), (0, (256, 6, 6)), (1, (6, 256, 6)), (2, (6, 6, 256))],
)
def test_select_add_matches_numpy(dim, shape):
    rng = np.random.default_rng(10 + dim)
    data, value = rand(rng, shape), rand(rng, shape)
    indices = rng.integers(0, shape[dim], shape[dim])
    expected = data.astype(np.float64).copy()
    np.add.at(np.moveaxis(expected, dim, 0), indices, np.moveaxis(value, dim, 0))
    weights = rand(rng, shape)
    t, v = tracked(data, value)
    out = t.select_assign(dim, rg.tensor(indices), v, update="add")
    check_output_and_grads(
        out, expected, weights, [t, v], [weights, np.take(weights, indices, axis=dim)]
    )


@pytest.mark.parametrize(
    "dim, shape, value_shape",
    [
        (0, (256, 32), (256, 32)),
        (1, (32, 256), (32, 256)),
        (1, (6, 256, 6), (6, 256, 6)),
        (2, (6, 6, 256), (6, 6, 256)),
        (1, (32, 128), (32, 1)),
    ],
)
def test_scatter_add_matches_numpy(dim, shape, value_shape):
    rng = np.random.default_rng(20 + dim)
    data, value = rand(rng, shape), rand(rng, value_shape)
    indices = rng.integers(0, value_shape[dim], value_shape)
    expected = data.astype(np.float64).copy()
    position = list(np.indices(value_shape))
    position[dim] = indices
    np.add.at(expected, tuple(position), value)
    weights = rand(rng, shape)
    t, v = tracked(data, value)
    out = t.scatter(dim, rg.tensor(indices), v, update="add")
    check_output_and_grads(
        out, expected, weights, [t, v], [weights, np.take_along_axis(weights, indices, dim)]
    )


@pytest.mark.parametrize("dim", [0, 1])
def test_gather_matches_numpy(dim):
    rng = np.random.default_rng(30 + dim)
    shape = (6, 256)
    data = rand(rng, shape)
    indices = rng.integers(0, shape[dim], shape)
    weights = rand(rng, shape)
    grad = np.zeros(shape)
    position = list(np.indices(shape))
    position[dim] = indices
    np.add.at(grad, tuple(position), weights)
    (t,) = tracked(data)
    out = t.gather(dim, rg.tensor(indices))
    check_output_and_grads(out, np.take_along_axis(data, indices, dim), weights, [t], [grad])


def test_mask_where_matches_numpy():
    rng = np.random.default_rng(40)
    shape = (2, 6, 256)
    data, value = rand(rng, shape), rand(rng, shape)
    mask = rand(rng, shape) <= 0.5
    weights = rand(rng, shape)
    t, v = tracked(data, value)
    out = t.mask_where(rg.tensor(mask), v)
    check_output_and_grads(
        out, np.where(mask, value, data), weights, [t, v], [weights * ~mask, weights * mask]
    )


@pytest.mark.parametrize(
    "shape, dim, times",
    [((1, 6, 6), 0, 4), ((6, 1, 6), 1, 4), ((6, 6, 1), 2, 4), ((10, 10, 1), 2, 200)],
)
def test_repeat_dim_matches_numpy(shape, dim, times):
    rng = np.random.default_rng(50 + dim)
    data = rand(rng, shape)
    expected = np.concatenate([data] * times, axis=dim)
    weights = rand(rng, expected.shape)
    (t,) = tracked(data)
    grad = weights.reshape(shape[:dim] + (times,) + shape[dim:]).sum(axis=dim)
    check_output_and_grads(t.repeat_dim(dim, times), expected, weights, [t], [grad])


@pytest.mark.parametrize("shape, dim", [((6, 256), 0), ((6, 256), 1), ((1, 137), 0)])
def test_cat_matches_numpy(shape, dim):
    rng = np.random.default_rng(60 + dim)
    a, b = rand(rng, shape), rand(rng, shape)
    expected = np.concatenate([a, b], axis=dim)
    weights = rand(rng, expected.shape)
    ta, tb = tracked(a, b)
    grads = np.split(weights, 2, axis=dim)
    check_output_and_grads(rg.cat([ta, tb], dim), expected, weights, [ta, tb], grads)


def test_slice_assign_matches_numpy():
    rng = np.random.default_rng(70)
    data, value = rand(rng, (6, 256)), rand(rng, (2, 211))
    expected = data.copy()
    expected[3:5, 45:256] = value
    weights = rand(rng, (6, 256))
    t, v = tracked(data, value)
    out = t.slice_assign([(3, 5), (45, 256)], v)
    grad_t = weights.copy()
    grad_t[3:5, 45:256] = 0.0
    check_output_and_grads(out, expected, weights, [t, v], [grad_t, weights[3:5, 45:256]])


def test_clamp_matches_numpy():
    rng = np.random.default_rng(80)
    data = rand(rng, (1, 5, 32, 32))
    weights = rand(rng, data.shape)
    (t,) = tracked(data)
    inside = (data >= 0.3) & (data <= 0.7)
    check_output_and_grads(
        t.clamp(0.3, 0.7), np.clip(data, 0.3, 0.7), weights, [t], [weights * inside]
    )


def test_broadcast_against_an_empty_dimension_has_zero_gradients():
    a, b = rg.zeros([2, 0]).require_grad(), rg.zeros([2, 1]).require_grad()
    grads = ((a + b) * 2.0).sum().backward()
    assert arr(a.grad(grads)).shape == (2, 0)
    np.testing.assert_array_equal(arr(b.grad(grads)), np.zeros((2, 1)))
    value = rg.zeros([2, 1]).require_grad()
    out = rg.zeros([2, 0]).mask_where(rg.tensor([[True], [False]]), value)
    assert out.shape == (2, 0)
    np.testing.assert_array_equal(arr(value.grad(out.sum().backward())), np.zeros((2, 1)))


# ---- cubecl/{conv2d, conv3d, conv_transpose2d, max_pool2d, max_pool2d_backward, avg_pool2d,
# interpolate_nearest, matmul, cross}.rs ---------------------------------------------------------
# Burn's reference backend is torch here (``torch.nn.functional`` in float64): the output and
# the gradients of ``sum(out * weights)`` for every input, on smaller shapes than Burn's GPU
# sizes (the options, which pick the kernels' paths, are Burn's).


def against_torch(rg_fn, torch_fn, shapes, seed, tol=1e-4):
    import torch

    rng = np.random.default_rng(seed)
    arrays = [rand(rng, shape) for shape in shapes]
    inputs = tracked(*arrays)
    out = rg_fn(*inputs)
    weights = rand(rng, tuple(out.shape))
    references = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    expected = torch_fn(*references)
    (expected * torch.tensor(weights, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(arr(out), expected.detach().numpy(), rtol=tol, atol=tol)
    grads = (out * rg.tensor(weights)).sum().backward()
    for tensor, reference in zip(inputs, references):
        np.testing.assert_allclose(
            arr(tensor.grad(grads)), reference.grad.numpy(), rtol=tol, atol=tol
        )


def torch_functional():
    import torch.nn.functional as torch_f

    return torch_f


def test_conv2d_strided_padded_dilated_grouped():
    tf = torch_functional()
    options = dict(stride=(2, 3), padding=(2, 3), dilation=(2, 3), groups=2)
    against_torch(
        lambda x, w, b: F.conv2d(x, w, b, **options),
        lambda x, w, b: tf.conv2d(x, w, b, **options),
        [(2, 16, 12, 12), (12, 8, 3, 3), (12,)],
        seed=90,
    )


def test_conv2d_implicit_padding_larger_than_the_kernel_reach():
    tf = torch_functional()
    options = dict(stride=1, padding=2, dilation=1)
    against_torch(
        lambda x, w, b: F.conv2d(x, w, b, **options),
        lambda x, w, b: tf.conv2d(x, w, b, **options),
        [(2, 16, 6, 6), (16, 16, 3, 3), (16,)],
        seed=91,
    )


def test_conv2d_of_a_single_pixel_with_bias_then_permuted():
    tf = torch_functional()
    against_torch(
        lambda x, w, b: F.conv2d(x, w, b, padding=1).permute([0, 2, 3, 1]),
        lambda x, w, b: tf.conv2d(x, w, b, padding=1).permute(0, 2, 3, 1),
        [(1, 1, 1, 1), (32, 1, 3, 3), (32,)],
        seed=92,
    )


def test_conv2d_weight_gradient_of_a_wide_1x1_input():
    tf = torch_functional()
    against_torch(
        lambda x, w: F.conv2d(x.permute([0, 3, 1, 2]), w),
        lambda x, w: tf.conv2d(x.permute(0, 3, 1, 2), w),
        [(1, 1, 1, 96), (24, 96, 1, 1)],
        seed=93,
    )


def test_conv3d_strided_padded_dilated_grouped():
    tf = torch_functional()
    options = dict(stride=(2, 3, 4), padding=(2, 3, 4), dilation=(2, 3, 4), groups=2)
    against_torch(
        lambda x, w, b: F.conv3d(x, w, b, **options),
        lambda x, w, b: tf.conv3d(x, w, b, **options),
        [(1, 4, 8, 9, 10), (6, 2, 3, 3, 3), (6,)],
        seed=94,
    )


def test_conv_transpose2d_padded():
    tf = torch_functional()
    against_torch(
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=1, padding=1),
        lambda x, w, b: tf.conv_transpose2d(x, w, b, stride=1, padding=1),
        [(4, 8, 8, 8), (8, 8, 3, 3), (8,)],
        seed=95,
    )


def test_max_pool2d_with_indices_and_its_backward():
    import torch

    tf = torch_functional()
    options = dict(kernel_size=3, stride=2, padding=1, dilation=1)
    against_torch(
        lambda x: F.max_pool2d(x, **options),
        lambda x: tf.max_pool2d(x, **options),
        [(2, 4, 16, 16)],
        seed=96,
    )
    data = rand(np.random.default_rng(96), (2, 4, 16, 16))
    _, indices = F.max_pool2d_with_indices(rg.tensor(data), **options)
    _, expected = tf.max_pool2d(torch.tensor(data), return_indices=True, **options)
    np.testing.assert_array_equal(np.asarray(indices.numpy()), expected.numpy())


def test_avg_pool2d_counting_padding():
    tf = torch_functional()
    for options in [
        dict(kernel_size=(3, 4), stride=(1, 2), padding=(1, 2), count_include_pad=True),
        dict(kernel_size=3, stride=1, padding=1, count_include_pad=True),
    ]:
        against_torch(
            lambda x, o=options: F.avg_pool2d(x, **o),
            lambda x, o=options: tf.avg_pool2d(x, **o),
            [(2, 4, 16, 16)],
            seed=97,
        )


@pytest.mark.parametrize("size", [7, 13, 15])
def test_nearest_interpolate_doubling_odd_sizes(size):
    tf = torch_functional()
    against_torch(
        lambda x: F.interpolate(x, size=(2 * size, 2 * size), mode="nearest"),
        lambda x: tf.interpolate(x, size=(2 * size, 2 * size), mode="nearest"),
        [(1, 4, size, size)],
        seed=98 + size,
    )


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape, transpose_lhs",
    [((1024, 8), (64, 8), False), ((1, 128), (512, 128), False), ((128, 1), (512, 128), True)],
)
def test_matmul_with_transposed_operands(lhs_shape, rhs_shape, transpose_lhs):
    def operation(lhs, rhs):
        return (lhs.transpose(0, 1) if transpose_lhs else lhs) @ rhs.transpose(0, 1)

    against_torch(operation, operation, [lhs_shape, rhs_shape], seed=99, tol=1e-3)


def test_cross_product_cases():
    pairs = [
        ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
        ([[2.0, 3.0, 4.0]], [[0.0, 0.0, 0.0]]),
        ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]),
        ([[1.0, 2.0, 3.0]], [[2.0, 4.0, 6.0]]),
    ]
    expected = [
        [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
        [[0.0, 0.0, 0.0]],
        [[-3.0, 6.0, -3.0], [-3.0, 6.0, -3.0]],
        [[0.0, 0.0, 0.0]],
    ]
    for (a, b), result in zip(pairs, expected):
        ta, tb = tracked(np.array(a, np.float32), np.array(b, np.float32))
        out = ta.cross(tb, 1)
        np.testing.assert_allclose(arr(out), result, atol=1e-6)
        grads = out.sum().backward()
        # d sum(a x b) / da = b x 1 and / db = 1 x a (the all-ones vector).
        ones = np.ones_like(np.array(a))
        np.testing.assert_allclose(arr(ta.grad(grads)), np.cross(b, ones), atol=1e-6)
        np.testing.assert_allclose(arr(tb.grad(grads)), np.cross(ones, a), atol=1e-6)
    with pytest.raises(rg.ShapeError):
        rg.zeros([1, 4]).cross(rg.zeros([1, 4]), 1)


# ---- fusion/nhwc_relayout.rs: elementwise ops feeding a pool, with their gradients ------------

GRID = [
    [[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]],
    [[[9.0, 10.0], [11.0, 12.0]], [[13.0, 14.0], [15.0, 16.0]]],
]
# Each 2x2 window's maximum is its last element: the gradient of the pooled sum lands there.
LAST_OF_EACH_WINDOW = np.tile([[0.0, 0.0], [0.0, 1.0]], (2, 2, 1, 1))


def pool_2x2(x):
    return F.max_pool2d(x, 2, 2)


def test_scaled_input_then_max_pool():
    (x,) = tracked(np.array(GRID, np.float32))
    out = pool_2x2(x * 2.0)
    assert arr(out).ravel().tolist() == [8.0, 16.0, 24.0, 32.0]
    np.testing.assert_array_equal(arr(x.grad(out.sum().backward())), 2.0 * LAST_OF_EACH_WINDOW)


def test_broadcast_scalar_tensor_then_max_pool():
    x, scalar = tracked(np.array(GRID, np.float32), np.array([[[[10.0]]]], np.float32))
    out = pool_2x2(x + scalar)
    assert arr(out).ravel().tolist() == [14.0, 18.0, 22.0, 26.0]
    grads = out.sum().backward()
    np.testing.assert_array_equal(arr(x.grad(grads)), LAST_OF_EACH_WINDOW)
    np.testing.assert_array_equal(arr(scalar.grad(grads)), [[[[4.0]]]])


def test_broadcast_of_different_shapes_then_max_pool():
    a = np.array([[[[1.0, 1.0], [1.0, 1.0]], [[2.0, 2.0], [2.0, 2.0]]]], np.float32)
    b = np.array([[[[10.0]]], [[[20.0]]]], np.float32)
    ta, tb = tracked(a, b)
    out = pool_2x2(ta + tb)
    assert out.shape == (2, 2, 1, 1)
    assert arr(out).ravel().tolist() == [11.0, 12.0, 21.0, 22.0]
    grads = out.sum().backward()
    # Ties in a window of equal values: torch's max pool routes the gradient to the first one.
    first = np.zeros((1, 2, 2, 2))
    first[:, :, 0, 0] = 2.0
    np.testing.assert_array_equal(arr(ta.grad(grads)), first)
    np.testing.assert_array_equal(arr(tb.grad(grads)), np.full((2, 1, 1, 1), 2.0))


def test_shared_input_of_a_pool_and_a_product():
    (x,) = tracked(np.array([GRID[0]], np.float32))
    filtered = x * 2.0
    out = filtered * F.adaptive_avg_pool2d(filtered, (1, 1))
    expected = [[[[10.0, 20.0], [30.0, 40.0]], [[130.0, 156.0], [182.0, 208.0]]]]
    np.testing.assert_array_equal(arr(out), expected)
    # Per channel, sum(out) = S**2 / 4 with S = sum(2x) over the 2x2 plane, so d/dx = S.
    grid = np.array([GRID[0]], np.float64)
    expected_grad = (2.0 * grid).sum(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(
        arr(x.grad(out.sum().backward())), np.broadcast_to(expected_grad, grid.shape)
    )


# ---- cubecl/{select, slice, scatter_nd}.rs ----------------------------------------------------


def test_select_of_many_indices_matches_numpy():
    rng = np.random.default_rng(100)
    data = rand(rng, (6, 256))
    weights = rand(rng, (6, 100))
    (t,) = tracked(data)
    grad = np.zeros((6, 256))
    grad[:, :100] = weights
    out = t.select(1, rg.arange(0, 100))
    check_output_and_grads(out, data[:, :100], weights, [t], [grad])


def test_slice_of_a_wide_range_matches_numpy():
    rng = np.random.default_rng(101)
    data = rand(rng, (6, 256))
    weights = rand(rng, (2, 211))
    (t,) = tracked(data)
    grad = np.zeros((6, 256))
    grad[3:5, 45:256] = weights
    check_output_and_grads(t.slice([(3, 5), (45, 256)]), data[3:5, 45:256], weights, [t], [grad])


def scatter_nd_case():
    indices = np.array([[0, i, j, 0] for i in range(2) for j in range(4)], dtype=np.int64).reshape(
        1, 2, 4, 1, 4
    )
    values = np.array([(i * 4 + j + 1) * 10.0 for i in range(2) for j in range(4)], np.float32)
    expected = np.zeros((1, 2, 4, 2), np.float32)
    expected[0, :, :, 0] = values.reshape(2, 4)
    return indices, values.reshape(1, 2, 4, 1), expected


def test_scatter_nd_assign_with_a_leading_batch_dimension_of_one():
    indices, values, expected = scatter_nd_case()
    data, v = tracked(np.zeros((1, 2, 4, 2), np.float32), values)
    out = data.scatter_nd(rg.tensor(indices), v, "assign")
    np.testing.assert_array_equal(arr(out), expected)
    grads = (out * rg.tensor(np.arange(16, dtype=np.float32).reshape(1, 2, 4, 2))).sum().backward()
    # Assigned positions take their gradient from the values, the others keep the data's.
    weights = np.arange(16.0).reshape(1, 2, 4, 2)
    data_grad = weights.copy()
    data_grad[..., 0] = 0.0
    np.testing.assert_array_equal(arr(data.grad(grads)), data_grad)
    np.testing.assert_array_equal(arr(v.grad(grads)), weights[..., :1])


def test_scatter_nd_assign_of_strided_values():
    indices, values, expected = scatter_nd_case()
    wide = np.zeros((1, 2, 8, 1), np.float32)
    wide[:, :, 0::2] = values
    (w,) = tracked(wide)
    strided = w[:, :, 0:8:2]
    out = rg.zeros([1, 2, 4, 2]).scatter_nd(rg.tensor(indices), strided, "assign")
    np.testing.assert_array_equal(arr(out), expected)
    wide_grad = np.zeros((1, 2, 8, 1))
    wide_grad[:, :, 0::2] = 1.0
    np.testing.assert_array_equal(arr(w.grad(out.sum().backward())), wide_grad)
