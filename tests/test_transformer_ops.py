"""The fused transformer ops: exact and tanh GELU, layer norm, scaled dot-product attention.

Values and gradients against PyTorch (float32 and float64) and against central finite
differences (float64, both checkpointing strategies bit-identical), second derivatives through
``backward(create_graph=True)`` against PyTorch's double backward, the float32 erf against
scipy in float64, dropout by seed and by statistics, and errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from nn_testing import check_finite_differences, compare_with_torch
from retrograd.backend import numpy_transformer, special

torch = pytest.importorskip("torch")
tf = torch.nn.functional

rng = np.random.default_rng(7)


def normal(*shape):
    return rng.standard_normal(shape)


# -- erf and GELU ----------------------------------------------------------------------------------
def test_float32_erf_is_within_four_epsilons_of_scipy_float64():
    x = np.concatenate([np.linspace(-7, 7, 200_001), [0.0, 1e-30, -1e-20, 3.9999, 4.0, 4.5]])
    ours = special.erf(x.astype(np.float32))
    assert ours.dtype == np.float32
    exact = scipy.special.erf(x.astype(np.float32).astype(np.float64))
    relative = np.abs(ours - exact) / np.maximum(np.abs(exact), np.finfo(np.float32).tiny)
    assert relative.max() < 4 * np.finfo(np.float32).eps
    assert np.isnan(special.erf(np.array([np.nan], np.float32)))[0]
    assert special.erf(np.array([np.inf, -np.inf], np.float32)).tolist() == [1.0, -1.0]


def test_float64_erf_is_scipys():
    x = normal(1000) * 3
    np.testing.assert_array_equal(special.erf(x), scipy.special.erf(x))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(dtype, approximate):
    x = normal(3, 70_000) * 3  # more than one block of the float32 kernel
    x[0, :5] = [0.0, -0.0, 1e-8, -40.0, 40.0]
    compare_with_torch(
        lambda t: F.gelu(t, approximate=approximate),
        lambda t: tf.gelu(t, approximate=approximate),
        [x],
        dtype,
        scale_atol=5.0,
    )


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_finite_differences(approximate):
    check_finite_differences(lambda t: F.gelu(t, approximate=approximate), [normal(4, 5) * 2])


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(rg.InvalidArgumentError, match="gelu"):
        F.gelu(rg.ones((2,)), approximate="fast")


# -- layer norm ------------------------------------------------------------------------------------
LAYER_NORM_CASES = [
    ((4, 6), 6, True, True),
    ((2, 3, 8), 8, True, False),
    ((2, 3, 8), 8, False, False),
    ((2, 3, 4), (3, 4), True, True),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shape", "normalized", "has_weight", "has_bias"), LAYER_NORM_CASES)
def test_layer_norm_matches_torch(dtype, shape, normalized, has_weight, has_bias):
    trailing = (normalized,) if isinstance(normalized, int) else normalized
    arrays = [normal(*shape) * 3 + 1]
    if has_weight:
        arrays.append(normal(*trailing))
    if has_bias:
        arrays.append(normal(*trailing))

    def call(module, x, *affine):
        weight = affine[0] if has_weight else None
        bias = affine[1] if has_bias else None
        return module.layer_norm(x, normalized if module is F else trailing, weight, bias, 1e-5)

    compare_with_torch(lambda *a: call(F, *a), lambda *a: call(tf, *a), arrays, dtype)


@pytest.mark.parametrize(("shape", "normalized", "has_weight", "has_bias"), LAYER_NORM_CASES)
def test_layer_norm_finite_differences(shape, normalized, has_weight, has_bias):
    trailing = (normalized,) if isinstance(normalized, int) else normalized
    arrays = [normal(*shape)]
    arrays += [normal(*trailing)] * has_weight + [normal(*trailing)] * has_bias

    def fn(x, *affine):
        weight = affine[0] if has_weight else None
        bias = affine[1] if has_bias else None
        return F.layer_norm(x, normalized, weight, bias, 1e-3)

    check_finite_differences(fn, arrays)


@pytest.mark.numpy_only("the NumPy backend's compiled layer norm kernels against torch's")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_compiled_layer_norm_kernels_match_torch_float64(dtype, affine, layout):
    # 111 rows: several flushes of the weight and bias gradients' partial sums and a partial
    # last one; width 130 is no multiple of a vector width; a transposed input is copied.
    x = (normal(3, 130, 37) * 3 + 1).transpose(0, 2, 1) if layout == "transposed" else None
    x = normal(3, 37, 130) * 3 + 1 if x is None else x
    weight, bias, grad = normal(130), normal(130), normal(3, 37, 130)
    kernels = rg.NumpyBackend()
    none = np.empty(0, dtype)
    args = [a.astype(dtype) for a in (x, weight, bias, grad)]
    affine_args = args[1:3] if affine else [none, none]
    assert numpy_transformer._compiled_layer_norm(args[0], *affine_args)
    out, stats = kernels.layer_norm(args[0], *affine_args, 1e-5)
    dx, dweight, dbias = kernels.layer_norm_backward(args[3], args[0], affine_args[0], stats, 1e-5)
    tx = torch.tensor(args[0], dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(args[1], dtype=torch.float64, requires_grad=True) if affine else None
    tb = torch.tensor(args[2], dtype=torch.float64, requires_grad=True) if affine else None
    expected = tf.layer_norm(tx, (130,), tw, tb, 1e-5)
    expected.backward(torch.tensor(args[3], dtype=torch.float64))
    unit = np.finfo(dtype).eps
    for name, ours, theirs in [("out", out, expected), ("dx", dx, tx.grad)]:
        assert ours.dtype == np.dtype(dtype) and ours.shape == x.shape, name
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=0, atol=64 * unit)
    mean, var = args[0].astype(np.float64).mean(-1), args[0].astype(np.float64).var(-1)
    np.testing.assert_allclose(stats[0], mean, rtol=8 * unit, atol=8 * unit)
    np.testing.assert_allclose(stats[1], 1 / np.sqrt(var + 1e-5), rtol=8 * unit)
    if affine:  # sums over 111 rows, within a few ulp of their size
        np.testing.assert_allclose(dweight, tw.grad.numpy(), rtol=0, atol=64 * 111 * unit)
        np.testing.assert_allclose(dbias, tb.grad.numpy(), rtol=0, atol=64 * 111 * unit)
    else:  # without affine parameters torch has no weight gradient: sum(grad * xhat) then
        xhat = (args[0].astype(np.float64) - mean[..., None]) / np.sqrt(var + 1e-5)[..., None]
        want = (args[3] * xhat).sum((0, 1))
        np.testing.assert_allclose(dweight, want, rtol=0, atol=64 * 111 * unit)
        np.testing.assert_allclose(dbias, args[3].astype(np.float64).sum((0, 1)), atol=1e3 * unit)


def test_layer_norm_rejects_bad_shapes():
    with pytest.raises(rg.ShapeError, match="layer_norm"):
        F.layer_norm(rg.ones((2, 3)), 4)
    with pytest.raises(rg.ShapeError, match="weight"):
        F.layer_norm(rg.ones((2, 3)), 3, rg.ones((2,)))


# -- attention -------------------------------------------------------------------------------------
def _torch_mask(mask):
    return None if mask is None else torch.tensor(mask)


ATTENTION_CASES = {
    "plain": dict(shape=(2, 3, 5, 7, 4, 6)),
    "causal": dict(shape=(2, 3, 5, 5, 4, 4), is_causal=True),
    "causal rows in blocks": dict(shape=(2, 2, 150, 150, 8, 8), is_causal=True),
    "causal L < S": dict(shape=(1, 2, 70, 130, 4, 4), is_causal=True),
    "causal L > S": dict(shape=(1, 2, 130, 70, 4, 4), is_causal=True),
    "bool mask": dict(shape=(2, 3, 5, 7, 4, 4), mask="bool"),
    "float mask": dict(shape=(2, 3, 5, 7, 4, 4), mask="float"),
    "key mask": dict(shape=(2, 3, 5, 7, 4, 4), mask="keys"),
    "scale": dict(shape=(2, 3, 5, 7, 4, 4), scale=0.3),
    "3-d": dict(shape=(None, 3, 5, 7, 4, 4)),
}


def _attention_arrays(shape, mask=None, **_):
    batch, heads, length, source, e, ev = shape
    lead = (heads,) if batch is None else (batch, heads)
    arrays = [normal(*lead, length, e), normal(*lead, source, e), normal(*lead, source, ev)]
    if mask == "bool":
        keep = rng.random((length, source)) > 0.3
        keep[:, 0] = True  # no row fully masked
        arrays.append(keep)
    elif mask == "float":
        arrays.append(normal(heads, length, source))
    elif mask == "keys":
        keep = rng.random((1, source)) > 0.3
        keep[:, 0] = True
        arrays.append(keep)
    return arrays


def _attention(module, case):
    options = {k: case[k] for k in ("is_causal", "scale") if k in case}

    def fn(q, k, v, *mask):
        return module.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[0] if mask else None, **options
        )

    return fn


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ATTENTION_CASES)
def test_attention_matches_torch(dtype, name):
    case = ATTENTION_CASES[name]
    arrays = _attention_arrays(**case)
    if len(arrays) == 4 and arrays[3].dtype != bool:  # a float mask: torch wants it untracked
        mask = arrays.pop()

        def ours(q, k, v):
            return _attention(F, case)(q, k, v, rg.tensor(mask.astype(dtype)))

        def theirs(q, k, v):
            return _attention(tf, case)(q, k, v, torch.tensor(mask.astype(dtype)))

        compare_with_torch(ours, theirs, arrays, dtype, scale_atol=5.0)
        return
    compare_with_torch(_attention(F, case), _attention(tf, case), arrays, dtype, scale_atol=5.0)


@pytest.mark.parametrize("name", ["plain", "causal", "bool mask", "float mask", "causal L > S"])
def test_attention_finite_differences(name):
    case = dict(ATTENTION_CASES[name])
    if name == "causal L > S":
        case["shape"] = (1, 1, 9, 5, 2, 3)
    arrays = _attention_arrays(**case)
    check_finite_differences(_attention(F, case), arrays)


def test_attention_small_blocks_agree_with_one_block(monkeypatch):
    """The batch and row blocking changes no value beyond rounding."""
    case = ATTENTION_CASES["causal rows in blocks"]
    arrays = [a.astype(np.float64) for a in _attention_arrays(**case)]
    seed = normal(2, 2, 150, 8)

    def run():
        q, k, v = (rg.tensor(a).require_grad() for a in arrays)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grads = (out * rg.tensor(seed)).sum().backward()
        return [out.numpy()] + [t.grad(grads).numpy() for t in (q, k, v)]

    blocked = run()
    monkeypatch.setattr(numpy_transformer, "ATTENTION_ROWS", 10**9)
    monkeypatch.setattr(numpy_transformer, "ATTENTION_BLOCK_ELEMENTS", 10**12)
    whole = run()
    for a, b in zip(blocked, whole):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_attention_float_mask_that_requires_grad_gets_its_gradient():
    q, k, v, mask = normal(2, 3, 4), normal(2, 3, 4), normal(2, 3, 4), normal(2, 3, 3)
    tensors = [rg.tensor(a).require_grad() for a in (q, k, v, mask)]
    out = F.scaled_dot_product_attention(*tensors[:3], attn_mask=tensors[3])
    grads = out.sum().backward()
    t = [torch.tensor(a, requires_grad=True) for a in (q, k, v, mask)]
    tf.scaled_dot_product_attention(*t[:3], attn_mask=t[3]).sum().backward()
    for ours, theirs in zip(tensors, t):
        np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), atol=1e-12)


def test_attention_without_graph_on_the_plain_backend():
    q, k, v = (normal(2, 5, 4) for _ in range(3))
    with rg.use_backend(rg.NumpyBackend()):
        out = F.scaled_dot_product_attention(rg.tensor(q), rg.tensor(k), rg.tensor(v))
    expected = tf.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=1e-12)


def test_attention_dropout_is_reproducible_by_seed_and_drops_about_p():
    q, k, v = (rg.tensor(normal(4, 64, 8)) for _ in range(3))
    rg.seed(3)
    first = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    rg.seed(3)
    again = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    np.testing.assert_array_equal(first, again)
    plain = F.scaled_dot_product_attention(q, k, v).numpy()
    assert not np.allclose(first, plain)
    # with v = identity rows, out = the dropped probabilities: about half of them are zero
    eye = rg.tensor(np.broadcast_to(np.eye(64), (4, 64, 64)).copy())
    rg.seed(4)
    probs = F.scaled_dot_product_attention(
        rg.tensor(normal(4, 64, 8)), rg.tensor(normal(4, 64, 8)), eye, dropout_p=0.3
    ).numpy()
    dropped = np.mean(probs == 0.0)
    assert abs(dropped - 0.3) < 0.02
    # kept ones are scaled by 1 / (1 - p): each row still sums to 1 in expectation
    assert abs(probs.sum(-1).mean() - 1.0) < 0.02


def test_attention_dropout_gradients_match_the_mask_it_drew():
    """Backward through dropout uses the same mask as forward: the gradient of v is
    ``dropped_probs^T @ g``, the dropped probabilities read off with v = identity."""
    q, k = normal(2, 6, 3), normal(2, 6, 3)
    eye = np.broadcast_to(np.eye(6), (2, 6, 6)).copy()
    rg.seed(11)
    probs = F.scaled_dot_product_attention(
        rg.tensor(q), rg.tensor(k), rg.tensor(eye), dropout_p=0.4
    ).numpy()
    v = normal(2, 6, 5)
    tv = rg.tensor(v).require_grad()
    seed = normal(2, 6, 5)
    rg.seed(11)
    out = F.scaled_dot_product_attention(rg.tensor(q), rg.tensor(k), tv, dropout_p=0.4)
    np.testing.assert_allclose(out.numpy(), probs @ v, atol=1e-12)
    grad = tv.grad((out * rg.tensor(seed)).sum().backward()).numpy()
    np.testing.assert_allclose(grad, np.swapaxes(probs, -1, -2) @ seed, atol=1e-12)


def test_attention_errors_name_the_function_and_shapes():
    q = rg.ones((2, 3, 4))
    with pytest.raises(rg.ShapeError, match=r"scaled_dot_product_attention.*\[2, 3, 4\]"):
        F.scaled_dot_product_attention(q, rg.ones((2, 3, 5)), rg.ones((2, 3, 4)))
    with pytest.raises(rg.ShapeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=rg.ones((4, 4)))
    with pytest.raises(rg.InvalidArgumentError, match="dropout_p"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(rg.DTypeError):
        F.scaled_dot_product_attention(q, q, q.cast("float64"))


# -- second derivatives, against torch's double backward -------------------------------------------
def _double_backward(rfn, tfn, arrays):
    """d/d inputs of <grad of sum(seed * f), v>, ours (create_graph) and torch's."""
    seed = normal(*tfn(*[torch.tensor(a) for a in arrays]).shape)
    directions = [normal(*a.shape) for a in arrays]
    t_inputs = [torch.tensor(a, requires_grad=True) for a in arrays]
    first = torch.autograd.grad(
        (tfn(*t_inputs) * torch.tensor(seed)).sum(), t_inputs, create_graph=True
    )
    inner = sum((g * torch.tensor(d)).sum() for g, d in zip(first, directions))
    expected = torch.autograd.grad(inner, t_inputs, allow_unused=True)
    tensors = [rg.tensor(a).require_grad() for a in arrays]
    grads = (rfn(*tensors) * rg.tensor(seed)).sum().backward(create_graph=True)
    inner = None
    for t, d in zip(tensors, directions):
        term = (t.grad(grads) * rg.tensor(d)).sum()
        inner = term if inner is None else inner + term
    second = inner.backward()
    for t, e in zip(tensors, expected):
        ours = t.grad(second)
        ours = np.zeros(t.shape) if ours is None else ours.numpy()
        e = np.zeros(t.shape) if e is None else e.numpy()  # an input of zero second derivative
        np.testing.assert_allclose(ours, e, rtol=1e-9, atol=1e-10)


def test_gelu_second_derivative():
    _double_backward(F.gelu, tf.gelu, [normal(3, 4) * 2])


def test_layer_norm_second_derivative():
    _double_backward(
        lambda x, w, b: F.layer_norm(x, 5, w, b),
        lambda x, w, b: tf.layer_norm(x, (5,), w, b),
        [normal(3, 5), normal(5), normal(5)],
    )


@pytest.mark.parametrize("causal", [False, True])
def test_attention_second_derivative(causal):
    _double_backward(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        lambda q, k, v: tf.scaled_dot_product_attention(q, k, v, is_causal=causal),
        [normal(2, 4, 3), normal(2, 4, 3), normal(2, 4, 2)],
    )


# -- checkpointing ---------------------------------------------------------------------------------
def test_fused_ops_are_compute_bound():
    from retrograd.autodiff.ops import op_kind

    assert op_kind("attention") == "compute-bound"
    assert op_kind("layer_norm") == "compute-bound"


def test_a_transformer_block_has_identical_gradients_under_both_strategies():
    x, w1, w2 = normal(2, 6, 8), normal(24, 8) * 0.3, normal(8, 24) * 0.3
    ln_w, ln_b = normal(8), normal(8)

    def block(x, w1, w2, ln_w, ln_b):
        h = F.layer_norm(x, 8, ln_w, ln_b)
        q, k, v = F.linear(h, w1).split(8, 2)
        q, k, v = (t.reshape((2, 6, 2, 4)).swap_dims(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = x + y.swap_dims(1, 2).reshape((2, 6, 8))
        return y + F.linear(F.gelu(F.linear(F.layer_norm(y, 8), w2.transpose())), w2)

    check_finite_differences(block, [x, w1, w2, ln_w, ln_b], rtol=1e-5, atol=1e-7)


def test_protocol_defaults_agree_with_the_numpy_kernels():
    """The Backend base class's compositions (what a new backend inherits) give the fused
    kernels' values."""
    from retrograd.backend.protocol import Backend

    class Composed(rg.NumpyBackend):
        pass

    for name in ("gelu_backward", "layer_norm", "layer_norm_backward", "attention"):
        setattr(Composed, name, getattr(Backend, name))
    Composed.attention_backward = Backend.attention_backward
    fused, composed = rg.NumpyBackend(), Composed()
    x, g = normal(3, 4, 6), normal(3, 4, 6)
    np.testing.assert_allclose(composed.gelu_backward(g, x), fused.gelu_backward(g, x))
    w, b, empty = normal(6), normal(6), np.zeros((0,))
    for weight, bias in ((w, b), (empty, empty)):
        out, stats = fused.layer_norm(x, weight, bias, 1e-5)
        ref_out, ref_stats = composed.layer_norm(x, weight, bias, 1e-5)
        np.testing.assert_allclose(out, ref_out, atol=1e-12)
        np.testing.assert_allclose(stats, ref_stats, atol=1e-12)
        for ours, ref in zip(
            fused.layer_norm_backward(g, x, weight, stats, 1e-5),
            composed.layer_norm_backward(g, x, weight, stats, 1e-5),
        ):
            np.testing.assert_allclose(ours, ref, atol=1e-12)
    q, k, v = normal(2, 70, 4), normal(2, 90, 4), normal(2, 90, 3)
    mask = np.where(rng.random((1, 70, 90)) > 0.2, 0.0, -math.inf)
    mask[..., 0] = 0.0
    for m, causal in ((empty, True), (mask, False)):
        out, lse = fused.attention(q, k, v, m, empty, 0.5, causal)
        ref_out, ref_lse = composed.attention(q, k, v, m, empty, 0.5, causal)
        np.testing.assert_allclose(out, ref_out, atol=1e-12)
        np.testing.assert_allclose(lse, ref_lse, atol=1e-12)
        g = normal(2, 70, 3)
        for ours, ref in zip(
            fused.attention_backward(g, q, k, v, out, lse, m, empty, 0.5, causal),
            composed.attention_backward(g, q, k, v, out, lse, m, empty, 0.5, causal),
        ):
            np.testing.assert_allclose(ours, ref, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("weight_decay", "decoupled"), [(0.0, False), (0.1, False), (0.1, True)])
def test_adam_update_kernel_is_the_default_bit_for_bit(dtype, weight_decay, decoupled):
    """The fused AdamW kernel keeps the composed default's order of operations, so the same
    rounding (the optimizer tests compare the result with torch.optim)."""
    from retrograd.backend.protocol import Backend

    fused = rg.NumpyBackend()
    arrays = [normal(5, 7).astype(dtype) for _ in range(3)] + [np.abs(normal(5, 7)).astype(dtype)]
    hyper = (3, 1e-3, 0.9, 0.95, 1e-8, weight_decay, decoupled)
    ours = fused.adam_update(*arrays, *hyper)
    composed = Backend.adam_update(fused, *arrays, *hyper)
    for a, b in zip(ours, composed):
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, b)


def test_linear_kernel_is_the_default():
    from retrograd.backend.protocol import Backend

    fused = rg.NumpyBackend()
    x, w, b = normal(6, 4), normal(3, 4), normal(3)
    for bias in (b, np.zeros((0,))):
        np.testing.assert_allclose(
            fused.linear(x, w, bias), Backend.linear(fused, x, w, bias), atol=1e-14
        )


def test_attention_rows_with_every_key_masked_are_zero_as_in_torch():
    q, k, v = normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 2)
    keep = rng.random((2, 3, 5)) > 0.3
    keep[:, :, 0] = True
    keep[0, 1] = False  # query 1 of batch 0 sees nothing
    tensors = [rg.tensor(a).require_grad() for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*tensors, attn_mask=rg.tensor(keep))
    seed = normal(2, 3, 2)
    grads = (out * rg.tensor(seed)).sum().backward()
    t = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    expected = tf.scaled_dot_product_attention(*t, attn_mask=torch.tensor(keep))
    (expected * torch.tensor(seed)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), atol=1e-12)
    assert not out.numpy()[0, 1].any()
    for ours, theirs in zip(tensors, t):
        np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_a_long_key_at_right_angles_to_long_queries(dtype, causal):
    """Long queries and one long key at right angles to them (an attention sink): every score
    is small, but any bound on the scores (|q| |k| scale ~ 141 here) is far above them, and
    exp of scores less that bound would underflow in every row. The kernel subtracts each row's
    own maximum and agrees with torch."""
    q, k, v = normal(2, 2, 70, 8) * 0.3, normal(2, 2, 70, 8) * 0.3, normal(2, 2, 70, 8)
    q[..., 0] += 20.0
    k[..., 0, 1] += 20.0
    compare_with_torch(
        _attention(F, {"is_causal": causal}),
        _attention(tf, {"is_causal": causal}),
        [q, k, v],
        dtype,
        scale_atol=5.0,
    )


def _relative_errors(q, k, v, g, causal):
    """The float32 error of (output, dq, dk, dv) against torch's float64 result, ours and
    torch's float32 one: the root of the summed squared relative RMS errors."""
    import torch

    def torch_results(dtype):
        ts = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v)]
        out = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal)
        (out * torch.tensor(g, dtype=dtype)).sum().backward()
        return [out.detach().double().numpy()] + [t.grad.double().numpy() for t in ts]

    exact, theirs = torch_results(torch.float64), torch_results(torch.float32)
    ts = [rg.tensor(a.astype(np.float32)).require_grad() for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, is_causal=causal)
    grads = (out * rg.tensor(g.astype(np.float32))).sum().backward()
    ours = [out.numpy()] + [t.grad(grads).numpy() for t in ts]

    def error(found):
        return np.sqrt(sum(((f - t) ** 2).mean() / (t**2).mean() for f, t in zip(found, exact)))

    return error(ours), error(theirs)


@pytest.mark.numpy_only("the NumPy attention kernel's rounding")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sink", [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 20.0, 40.0])
def test_float32_attention_is_as_accurate_as_torch_for_every_sink_length(causal, sink):
    """Queries and one key lengthened by ``sink`` along one axis (an attention sink): scores
    stay small while |q| max|k| grows, so a kernel that shifted scores by such a bound would
    round every exponent at the bound's size. Across the whole range (bound over the row
    maximum by 0 to 570; the kernel's earlier bound was redone only beyond ~41, and from 6 to
    41 its error was up to 4.7x torch's) the error, over 8 seeds, is torch's own float32 error
    to within rounding luck (measured 0.60-1.07x)."""
    ours = theirs = 0.0
    for seed in range(8):
        local = np.random.default_rng(seed)
        q, k, v, g = (local.standard_normal((2, 2, 70, 8)) for _ in range(4))
        q, k = q * 0.3, k * 0.3
        q[..., 0] += sink
        k[..., 0, 1] += sink
        mine, reference = _relative_errors(q, k, v, g, causal)
        ours, theirs = ours + mine, theirs + reference
    assert ours <= 1.1 * theirs


def test_gelu_backward_float32_is_within_a_few_float32_epsilons():
    """float32 GELU backward differentiates the forward's fitted logistic: within a few float32
    epsilons of the exact float64 derivative, from the tails to 0."""
    x = np.concatenate(
        [np.linspace(-12.0, 12.0, 200_001), [0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0]]
    ).astype(np.float32)
    grad = np.ones_like(x)
    exact = special.gelu_backward(grad.astype(np.float64), x.astype(np.float64))
    found = special.gelu_backward(grad, x)
    assert found.dtype == np.float32
    error = np.abs(found.astype(np.float64) - exact)
    assert error.max() < 8 * np.finfo(np.float32).eps
    assert (found[x == 0.0] == 0.5).all()


def test_gelu_backward_float32_is_the_derivative_of_the_float32_formula():
    """float32 GELU backward is the slope of the function float32 forward computes: the same
    formula (the fitted logit's float32 coefficients) evaluated and differentiated in float64
    by central differences agrees within two float32 epsilons."""
    from retrograd.backend.compiled import MINUS_LOGIT

    x = np.linspace(-9.0, 9.0, 4_001)
    coefficients = -np.array(MINUS_LOGIT, np.float64)  # v(x) = x * V(x^2), highest first

    def formula(t):
        with np.errstate(over="ignore"):  # exp(-v) = inf in the far left tail: gelu -0
            return t / (1.0 + np.exp(-t * np.polyval(coefficients, t * t)))

    step = 1e-5
    slope = (formula(x + step) - formula(x - step)) / (2 * step)
    found = special.gelu_backward(np.ones(x.size, np.float32), x.astype(np.float32))
    assert np.abs(found - slope).max() < 2 * np.finfo(np.float32).eps


def test_layer_norm_row_blocks_agree_with_one_block(monkeypatch):
    """The NumPy kernels' blocks of rows (here 3 rows a block, the last one short) change no
    value beyond rounding, forward or backward."""
    arrays = [normal(5, 7, 6) * 2 + 1, normal(6), normal(6)]
    seed = normal(5, 7, 6)

    def run():
        x, w, b = (rg.tensor(a).require_grad() for a in arrays)
        out = F.layer_norm(x, 6, w, b, 1e-5)
        grads = (out * rg.tensor(seed)).sum().backward()
        return [out.numpy()] + [t.grad(grads).numpy() for t in (x, w, b)]

    monkeypatch.setattr(numpy_transformer, "LAYER_NORM_BLOCK_ELEMENTS", 18)
    blocked = run()
    monkeypatch.setattr(numpy_transformer, "LAYER_NORM_BLOCK_ELEMENTS", 10**12)
    whole = run()
    for a, b in zip(blocked, whole):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_kernel_run_inside_another_kernels_block_loop_gets_its_own_scratch():
    """The float32 kernels' scratch is a per-thread workspace, taken while a block loop runs:
    a kernel called inside that loop works in fresh buffers and leaves the loop's alone."""
    x = (normal(70_000) * 3).astype(np.float32)
    grad = normal(70_000).astype(np.float32)
    expected, expected_grad = special.gelu(x), special.gelu_backward(grad, x)
    outer = special._blocks(100, 2)
    _, _, first, second = next(outer)
    first[:] = 7.0
    second[:] = -7.0
    np.testing.assert_array_equal(special.gelu(x), expected)
    np.testing.assert_array_equal(special.gelu_backward(grad, x), expected_grad)
    assert (first == 7.0).all() and (second == -7.0).all()
    outer.close()
    np.testing.assert_array_equal(special.gelu(x), expected)  # the workspace is back
