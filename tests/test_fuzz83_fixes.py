"""Round 83's defects on edge inputs, each against torch 2.13.

- ``F.soft_margin_loss`` with a target that requires grad returned a loss (and a gradient to
  the target); torch's kernel has no derivative for the target and refuses it;
- ``kthvalue``, ``median`` and ``mode`` along an empty dimension raised a ``ShapeError`` that
  is no ``IndexError`` (torch's "Expected reduction dim 1 to have non-zero size" is one, as
  ``max``/``argmax``/``amax`` already raised); ``kthvalue`` of an empty bool tensor raised
  the dtype error where torch raises that ``IndexError`` first;
- NumPy backend: ``interpolate`` in a linear mode copied an axis whose size does not change,
  where torch's kernel adds the element's second tap of weight 0: an infinity there is NaN in
  torch (``x * 1 + x * 0``), and spreads along the other axes; ours stayed infinite;
- ``F.binary_cross_entropy_with_logits`` of an input and a target of two float dtypes
  promoted both first: a float64 input with a float32 target gave a float64 loss (torch's is
  the target's dtype, float32), a float32 input with a float64 target a loss computed in
  float64 (torch's ``log_sigmoid`` is the input's, float32);
- ``F.huber_loss`` of a float32 input and a float64 target gave a float64 loss; torch's
  kernel writes into a tensor like the input (float32), as its ``soft_margin_loss``'s;
- ``F.mse_loss``/``l1_loss``/``smooth_l1_loss`` of a float32 input and a 0-d float64 target
  (or the reverse) gave a float32 loss; torch broadcasts the pair before promoting it, so the
  0-d tensor counts as dimensioned: float64;
- ``index_add`` of an int32/int16/int8 tensor with a float ``alpha`` promoted the result to
  float32 (``alpha=-0.5`` added ``-0.5 * source``); torch casts ``alpha`` to the tensor's
  dtype (0 there), as ours did for int64 only;
- ``F.linear`` of integer tensors (torch's CPU ``addmm`` takes them) was refused with "expected
  float tensors";
- ``conv1d/2d/3d`` with ``padding="same"`` and an even kernel extent padded ``ceil(total/2)``
  both sides and cropped the first output, whose zero gradient met the input's first cells:
  an infinity there made the weight's gradient NaN, torch's finite (torch pads a copy of the
  input on the right, then symmetrically);
- ``linalg.vector_norm`` (``Tensor.norm``, ``matrix_norm("fro")``) over dims of size 1
  squared (or raised to ``ord``) and took the root: a subnormal entry's norm was 0 and a
  huge one's ``inf``, torch's ``|x|`` (its gradient 0 and NaN, torch's the sign);
- NumPy backend, signs of zero: ``avg_pool1d/2d/3d`` of a window of ``-0.0`` and ``cumsum``/
  ``logcumsumexp`` of a leading ``-0.0`` were ``-0.0`` (torch's sums start at ``+0.0``: ``+0.0``);
  ``clamp(-0.0, min=0)`` was ``+0.0`` (torch's ``max(x, lo)`` keeps ``x`` at a tie: ``-0.0``).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import on_torch

torch = pytest.importorskip("torch")


def test_soft_margin_loss_refuses_a_target_that_requires_grad_as_torch():
    x_t, y_t = torch.tensor([0.5, -1.0], requires_grad=True), torch.tensor([1.0, -1.0])
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument"):
        torch.nn.functional.soft_margin_loss(x_t, y_t.requires_grad_())
    x = rg.tensor([0.5, -1.0], requires_grad=True)
    y = rg.tensor([1.0, -1.0], requires_grad=True)
    with pytest.raises(rg.AutodiffError, match=r"soft_margin_loss.*'target'.*\[2\]"):
        rg.nn.functional.soft_margin_loss(x, y)
    # no_grad computes it (as torch's), and the input's graph stays usable
    with torch.no_grad():
        want = torch.nn.functional.soft_margin_loss(x_t, y_t).item()
    with rg.no_grad():
        assert rg.nn.functional.soft_margin_loss(x, y).item() == pytest.approx(want, rel=1e-6)
    loss = rg.nn.functional.soft_margin_loss(x, rg.tensor([1.0, -1.0]))
    (grad,) = rg.autograd.grad([loss], [x])
    loss_t = torch.nn.functional.soft_margin_loss(x_t, torch.tensor([1.0, -1.0]))
    (grad_t,) = torch.autograd.grad([loss_t], [x_t])
    np.testing.assert_allclose(grad.numpy(), grad_t.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.kthvalue(x, 1, 1),
        lambda lib, x: lib.kthvalue(x.bool(), 1, 1),
        lambda lib, x: lib.median(x, 1),
        lambda lib, x: lib.mode(x, -1),
    ],
    ids=["kthvalue", "kthvalue_bool", "median", "mode"],
)
def test_selections_along_an_empty_dim_raise_torchs_index_error(call):
    with pytest.raises(IndexError, match="non-zero size"):
        call(torch, torch.zeros(2, 0))
    x = rg.zeros(2, 0, requires_grad=True)
    with pytest.raises(IndexError, match=r"\[2, 0\] is empty") as refused:
        call(rg, x)
    assert isinstance(refused.value, rg.ShapeError)
    (grad,) = rg.autograd.grad([(x * 2.0).sum()], [x])  # (the leaf stays usable)
    assert tuple(grad.shape) == (2, 0)


@pytest.mark.parametrize(
    "values, size",
    [
        ([[[1.0, -np.inf]]], (2,)),
        ([[[np.inf, 1.0, 2.0, -0.0]]], (4,)),
        ([[[[1.0, -np.inf], [2.0, 3.0]]]], (2, 2)),
        ([[[[1.0, -np.inf], [2.0, 3.0]]]], (2, 3)),
        ([[[[[1.0, -np.inf], [2.0, -0.0]]]]], (1, 2, 3)),
    ],
)
def test_linear_interpolation_keeps_torchs_nan_at_an_infinity_of_an_unchanged_axis(values, size):
    mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)]
    want = torch.nn.functional.interpolate(torch.tensor(values), size=size, mode=mode).numpy()
    got = rg.nn.functional.interpolate(rg.tensor(values), size=size, mode=mode).numpy()
    assert np.isnan(want).any()  # (torch's behaviour, asserted)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtypes", [("float64", "float32"), ("float32", "float64")])
@pytest.mark.parametrize("options", ["plain", "weight", "pos_weight"])
def test_bce_with_logits_of_two_float_dtypes_takes_torchs_steps(dtypes, options):
    rng = np.random.default_rng(83)
    x_values = rng.normal(size=(3, 4)).astype(dtypes[0])
    y_values = rng.random((3, 4)).astype(dtypes[1])
    extra = (rng.random(4) * 2).astype(dtypes[0])
    upstream = np.round(rng.normal(size=(3, 4)), 2).astype(dtypes[1])
    results = []
    for lib in (torch, rg):
        x, y = lib.tensor(x_values, requires_grad=True), lib.tensor(y_values)
        kwargs = {} if options == "plain" else {options: lib.tensor(extra)}
        loss = lib.nn.functional.binary_cross_entropy_with_logits(x, y, reduction="none", **kwargs)
        (grad,) = lib.autograd.grad([loss], [x], [lib.tensor(upstream)])
        results.append((loss, grad))
    (want, grad_t), (got, grad) = results
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1] == dtypes[1]
    assert str(grad.dtype).split(".")[-1] == dtypes[0]
    if on_torch() or dtypes[0] == "float64":
        # (torch's kernels, or float64 steps rounded to float32: the same bits)
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    else:  # NumPy's float32 log_sigmoid is within an ulp of torch's
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=3e-7)
    np.testing.assert_allclose(grad.numpy(), grad_t.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kernel", [1, 2, (1, 2)])
def test_average_pooling_of_negative_zeros_is_torchs_positive_zero(kernel):
    values = [[[[-0.0, -0.0, 1.0, -0.0], [-0.0, -0.0, -0.0, -0.0]]]]
    want = torch.nn.functional.avg_pool2d(torch.tensor(values), kernel, 1).numpy()
    got = rg.nn.functional.avg_pool2d(rg.tensor(values), kernel, 1).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert not np.signbit(want).any()  # (torch's window sums start at +0.0, asserted)


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_of_integer_tensors_is_torchs_integer_product(dtype, bias):
    rng = np.random.default_rng(830)
    values = [rng.integers(0, 9, shape).astype(dtype) for shape in ((2, 2, 3), (4, 3), (4,))]
    results = []
    for lib in (torch, rg):
        x, w, b = (lib.tensor(v) for v in values)
        results.append(lib.nn.functional.linear(x, w, b if bias else None))
    want, got = results
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1] == dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("kernel, dilation", [(2, 1), (4, 1), ((2, 3), 1), (2, 3)])
def test_same_padding_of_an_even_kernel_pads_the_right_as_torch(kernel, dilation):
    rng = np.random.default_rng(831)
    x_values = rng.normal(size=(1, 2, 5, 4))
    x_values[0, 1, 0, 0] = np.inf  # (a first cell: read by the cropped output before)
    x_values[0, 0, 0, 1] = -1e308
    w_values = rng.normal(size=(2, 2, *np.broadcast_to(kernel, (2,))))
    upstream = rng.normal(size=(1, 2, 5, 4))  # ("same": the input's size)
    results = []
    for lib in (torch, rg):
        x = lib.tensor(x_values, requires_grad=True)
        w = lib.tensor(w_values, requires_grad=True)
        out = lib.nn.functional.conv2d(x, w, padding="same", dilation=dilation)
        results.append([out, *lib.autograd.grad([out], [x, w], [lib.tensor(upstream)])])
    for k, (got, want) in enumerate(zip(results[1], results[0])):
        got, want = got.detach().numpy(), want.detach().numpy()
        assert got.shape == want.shape, k
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=str(k))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-10, atol=1e-10)
    assert np.isfinite(results[0][2].numpy()).any()  # (torch's weight gradient, asserted)


@pytest.mark.parametrize("target_shape", [(3, 2), (2,)])
@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("float64", "float32")])
def test_huber_loss_of_two_float_dtypes_is_of_the_inputs_dtype_as_torchs(target_shape, dtypes):
    rng = np.random.default_rng(832)
    x_values = (rng.normal(size=(3, 2)) * 2).astype(dtypes[0])
    y_values = (rng.normal(size=target_shape) * 2).astype(dtypes[1])
    results = []
    for lib in (torch, rg):
        results.append(
            lib.nn.functional.huber_loss(
                lib.tensor(x_values), lib.tensor(y_values), reduction="none", delta=0.7
            )
        )
    want, got = results
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1] == dtypes[0]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("order", [1, 2, 3, 0.5, -1, float("inf")])
@pytest.mark.parametrize("value", [5e-324, -1e308])
def test_a_norm_over_dims_of_size_one_is_the_magnitude_as_torchs(order, value):
    base = np.array([[[value], [3.0]]])  # [1, 2, 1]: dims 0 and 2 of size 1
    results = []
    for lib in (torch, rg):
        x = lib.tensor(base, dtype=lib.float64, requires_grad=True)
        norm = lib.linalg.vector_norm(x, order, (0, 2))
        (grad,) = lib.autograd.grad([norm], [x], [lib.ones(2, dtype=lib.float64)])
        results.append((norm.detach().numpy(), grad.numpy()))
    (want, grad_t), (got, grad) = results
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, np.abs(base).reshape(2))  # (torch's, asserted)
    if order in (1, 2, float("inf")) or 1e-300 < abs(value) < 1e300:
        # (elsewhere torch's norm_backward overflows its powers to NaN; ours is |x|'s)
        np.testing.assert_array_equal(grad, grad_t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clamp_and_cumsum_give_zeros_torchs_signs(dtype):
    values = np.array([-0.0, 0.0, 1.0, -1.0, np.nan, -0.0], dtype=dtype)
    for lo, hi in ((0.0, None), (None, -0.0), (-0.0, 0.0), (0.0, -0.0)):
        want = torch.clamp(torch.tensor(values), lo, hi).numpy()
        got = rg.clamp(rg.tensor(values), lo, hi).numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{lo}, {hi}")
    columns = np.array([[-0.0, 1.0], [-0.0, -1.0]], dtype=dtype)
    for scan in ("cumsum", "logcumsumexp"):
        want = getattr(torch, scan)(torch.tensor(columns), 0).numpy()
        got = getattr(rg, scan)(rg.tensor(columns), 0).numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=scan)
    assert np.signbit(torch.clamp(torch.tensor([-0.0]), min=0.0).numpy()).all()  # (asserted)


@pytest.mark.parametrize("dtype", ["int32", "int16", "int8"])
@pytest.mark.parametrize("alpha", [-0.5, 2.7])
def test_index_add_casts_a_float_alpha_to_the_integer_dtype_as_torch(dtype, alpha):
    results = []
    for lib in (torch, rg):
        base = lib.zeros(2, 3, dtype=getattr(lib, dtype))
        source = lib.ones(3, 3, dtype=getattr(lib, dtype))
        results.append(base.index_add(0, lib.tensor([0, 1, 1]), source, alpha=alpha))
    want, got = results
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1] == dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("loss", ["mse_loss", "l1_loss", "smooth_l1_loss"])
@pytest.mark.parametrize("shapes", [((3, 2), ()), ((), (3, 2))])
def test_a_0d_float64_target_of_a_float32_input_gives_torchs_float64_loss(loss, shapes):
    x_values = np.arange(6.0).reshape(3, 2)[: 3 if shapes[0] else 1].astype("float32") * 0.7
    x_values = x_values.reshape(shapes[0]) if shapes[0] else np.float32(0.7)
    y_values = np.full(shapes[1], 0.3)
    upstream = np.linspace(0.5, 1.5, 6).reshape(3, 2)
    results = []
    for lib in (torch, rg):
        x = lib.tensor(x_values, requires_grad=True)
        y = lib.tensor(y_values, dtype=lib.float64, requires_grad=True)
        out = getattr(lib.nn.functional, loss)(x, y, reduction="none")
        grads = lib.autograd.grad([out], [x, y], [lib.tensor(upstream)])
        results.append((out, *grads))
    for k, (got, want) in enumerate(zip(results[1], results[0])):
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], k
        assert tuple(got.shape) == tuple(want.shape), k
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-7)
    assert results[0][0].dtype == torch.float64  # (torch's, asserted)
