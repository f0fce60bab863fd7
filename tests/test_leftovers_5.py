"""Gaps left by earlier rounds, each checked against torch 2.13 (the reference).

- ``Tensor.as_strided``/``rg.as_strided`` did not exist: a view of the tensor's elements in
  row-major order, its gradient adding each incoming element into the position it came from
  (torch's ``as_strided_backward``), its strides the ones given; bad sizes, strides and offsets
  raise a ``ShapeError`` naming as_strided.
- ``rg.histogram``'s outputs did not require grad where the input did; torch's do and their
  backward raises: ours are tracked and backward raises an ``AutodiffError`` naming histogram.
  Edges that decrease are refused (torch counts them by a binary search that assumes order).
- ``x.split(rg.tensor(2.0))`` raised; torch's ``Tensor.split`` reads a tensor as
  ``int(split_size)``. A float split size (``2.0``) raised a ``DTypeError`` saying
  "'float' object is not iterable"; it names the argument now (a ``TypeError``, as torch's).
- ``clip_grad_norm_`` returned a float64 norm for float32 gradients (torch: float32) and raised
  a ``ValueError`` for a non-finite norm with ``error_if_nonfinite`` (torch: ``RuntimeError``).
- Elementwise results of a permuted input reported row-major strides; torch's follow the
  input's layout (``x.t().exp().stride() == (1, 4)``, not contiguous, ``view`` refused).
- ``rg.heaviside`` of an input that requires grad was untracked; torch's is tracked and its
  backward raises "the derivative for heaviside is not implemented".
- torch names real code uses that were missing: ``torch.cuda.FloatTensor``/``LongTensor`` (and
  the other CUDA legacy types), ``torch.cuda.is_bf16_supported``,
  ``torch.ao.quantization.QuantStub``/``DeQuantStub``, ``torch.nn.quantized.FloatFunctional``
  and ``torch.distributed.get_default_backend_for_device``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

# -- as_strided ----------------------------------------------------------------------------------
AS_STRIDED_CASES = [
    ((3, 4), (2, 2), (1, 2), 0),
    ((3, 4), (2, 2), (1, 2), 1),
    ((6,), (3, 3), (1, 1), 0),  # overlapping: each element read up to 3 times
    ((2, 3, 4), (2, 3), (12, 1), 5),
    ((3, 4), (), (), 7),
    ((3, 4), (4, 0), (1, 3), 2),
    ((2, 3), (3, 2), (1, 3), 0),  # the transpose
]


@pytest.mark.parametrize(("shape", "size", "stride", "offset"), AS_STRIDED_CASES)
def test_as_strided_values_strides_and_gradient_match_torch(shape, size, stride, offset):
    data = np.arange(float(np.prod(shape))).reshape(shape)
    weights = np.random.default_rng(0).standard_normal(size)
    xt = torch.tensor(data, requires_grad=True)
    out_t = xt.as_strided(size, stride, offset)
    (out_t * torch.tensor(weights)).sum().backward()
    xr = rg.tensor(data, requires_grad=True)
    out_r = xr.as_strided(size, stride, offset)
    np.testing.assert_array_equal(out_r.numpy(), out_t.detach().numpy())
    assert out_r.stride() == out_t.stride()
    assert out_r.is_contiguous() == out_t.is_contiguous()
    grads = (out_r * rg.tensor(weights)).sum().backward()
    np.testing.assert_allclose(xr.grad(grads).numpy(), xt.grad.numpy(), rtol=1e-15, atol=0)


def test_as_strided_function_form_and_a_write_through_the_view():
    base_t, base_r = torch.zeros(6), rg.zeros(6)
    torch.as_strided(base_t, (2,), (2,), 1).add_(1.0)
    rg.as_strided(base_r, (2,), (2,), 1).add_(1.0)
    np.testing.assert_array_equal(base_r.numpy(), base_t.numpy())


def test_a_write_through_an_overlapping_as_strided_view_is_refused():
    x = rg.zeros(6)
    with pytest.raises(rg.ShapeError, match="as_strided view whose strides overlap"):
        x.as_strided((3, 3), (1, 1)).add_(1.0)
    np.testing.assert_array_equal(x.numpy(), np.zeros(6, np.float32))  # left usable


@pytest.mark.parametrize(
    ("size", "stride", "offset", "message"),
    [
        ((2, 2), (10, 2), 0, "out of bounds"),
        ((2, 2), (1, 2), 11, "out of bounds"),
        ((2, 2), (-1, 2), 0, "negative strides"),
        ((2,), (1,), -1, "storage_offset must be non-negative"),
        ((2, -1), (1, 1), 0, "sizes must be non-negative"),
        ((2, 2), (1,), 0, "differ in length"),
    ],
)
def test_as_strided_refuses_what_torch_refuses(size, stride, offset, message):
    with pytest.raises(RuntimeError):
        torch.arange(12.0).reshape(3, 4).as_strided(size, stride, offset)
    with pytest.raises(rg.ShapeError, match=f"as_strided: .*{message}"):
        rg.arange(12.0).reshape(3, 4).as_strided(size, stride, offset)


# -- histogram ------------------------------------------------------------------------------------
def test_histogram_outputs_require_grad_as_torchs_and_backward_raises():
    values = [1.0, 2.0, 1.0, 3.0]
    expected = torch.histogram(torch.tensor(values, requires_grad=True), bins=3)
    out = rg.histogram(rg.tensor(values, requires_grad=True), bins=3)
    assert out.hist.requires_grad == expected.hist.requires_grad is True
    assert out.bin_edges.requires_grad == expected.bin_edges.requires_grad is True
    np.testing.assert_array_equal(out.hist.numpy(), expected.hist.detach().numpy())
    with pytest.raises(RuntimeError):
        expected.hist.sum().backward()
    with pytest.raises(rg.AutodiffError, match="histogram"):
        out.hist.sum().backward()
    untracked = rg.histogram(rg.tensor(values), bins=3)  # as torch's: no input requires grad
    assert not untracked.hist.requires_grad and not untracked.bin_edges.requires_grad


def test_histogram_of_weights_that_require_grad_is_tracked():
    edges = [0.0, 1.0, 5.0]
    weight_t = torch.ones(4, requires_grad=True)
    expected = torch.histogram(
        torch.tensor([1.0, 2.0, 1.0, 3.0]), torch.tensor(edges), weight=weight_t
    )
    out = rg.histogram(
        rg.tensor([1.0, 2.0, 1.0, 3.0]), rg.tensor(edges), weight=rg.ones(4, requires_grad=True)
    )
    assert out.hist.requires_grad == expected.hist.requires_grad is True
    np.testing.assert_array_equal(out.hist.numpy(), expected.hist.detach().numpy())


def test_histogram_with_repeated_edges_matches_torch_and_decreasing_edges_are_refused():
    values = [1.0, 2.0, 0.5, 1.0]
    expected = torch.histogram(torch.tensor(values), bins=torch.tensor([0.0, 1.0, 1.0, 2.0]))
    out = rg.histogram(rg.tensor(values), bins=rg.tensor([0.0, 1.0, 1.0, 2.0]))
    np.testing.assert_array_equal(out.hist.numpy(), expected.hist.numpy())
    with pytest.raises(
        rg.InvalidArgumentError, match="histogram: bin edges must be non-decreasing"
    ):
        rg.histogram(rg.tensor(values), bins=rg.tensor([0.0, 2.0, 1.0]))


# -- split with a tensor or float split size ------------------------------------------------------
@pytest.mark.parametrize("size", [2.0, 2.5, [2.0]])
def test_split_reads_a_one_element_tensor_as_torchs_int(size):
    expected = torch.ones(5).split(torch.tensor(size))
    out = rg.ones(5).split(rg.tensor(size))
    assert [p.shape for p in out] == [tuple(p.shape) for p in expected]
    assert [p.shape for p in rg.split(rg.ones(5), rg.tensor(size))] == [(2,), (2,), (1,)]


@pytest.mark.parametrize("size", [2.0, [2.0, 3]])
def test_split_refuses_a_float_split_size_with_a_type_error(size):
    with pytest.raises(TypeError):
        torch.ones(5).split(size)
    with pytest.raises(rg.DTypeError, match=r"split: split.size"):
        rg.ones(5).split(size)


# -- clip_grad_norm_ -------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 0.0])
def test_clip_grad_norm_returns_the_norm_in_torchs_dtype(norm_type):
    # float32 gradients: a float32 norm (was float64); float64 or mixed: float64
    for dtypes in [("float32",), ("float64",), ("float32", "float64")]:
        arrays = [np.linspace(-1.0, 2.0, 3 + i).astype(d) for i, d in enumerate(dtypes)]
        theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
        for p in theirs:
            p.grad = p.detach() * 3
        expected = torch.nn.utils.clip_grad_norm_(theirs, 0.5, norm_type=norm_type)
        ours = [rg.tensor(a, requires_grad=True) for a in arrays]
        grads = sum((p * p.detach() * 3).sum() for p in ours).backward()  # gradients 3 p
        total = rg.nn.utils.clip_grad_norm_(grads, ours, 0.5, norm_type=norm_type)
        assert total.dtype == str(expected.dtype).removeprefix("torch."), dtypes
        np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-6)
        for p, t in zip(ours, theirs):
            np.testing.assert_allclose(p.grad(grads).numpy(), t.grad.numpy(), rtol=1e-6)


def test_clip_grad_norm_of_no_gradients_is_a_float32_zero():
    expected = torch.nn.utils.clip_grad_norm_([], 1.0)
    w = rg.tensor([1.0], requires_grad=True)
    total = rg.nn.utils.clip_grad_norm_((w * 2).sum().backward(), [], 1.0)
    assert total.dtype == "float32" == str(expected.dtype).removeprefix("torch.")
    assert total.item() == expected.item() == 0.0


@pytest.mark.parametrize("foreach", [None, True, False])
def test_clip_grad_norm_error_if_nonfinite_is_a_runtime_error(foreach):
    p_t = torch.ones(3, requires_grad=True)
    p_t.grad = torch.tensor([float("inf"), 1.0, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        torch.nn.utils.clip_grad_norm_([p_t], 1.0, error_if_nonfinite=True, foreach=foreach)
    p = rg.ones(3, requires_grad=True)
    grads = (p * rg.tensor([float("inf"), 1.0, 1.0])).sum().backward()
    with pytest.raises(RuntimeError, match=r"clip_grad_norm_: .* inf"):
        rg.nn.utils.clip_grad_norm_(grads, [p], 1.0, error_if_nonfinite=True, foreach=foreach)
    # the gradients are left as they were, as torch's
    np.testing.assert_array_equal(p.grad(grads).numpy(), p_t.grad.numpy())
    with pytest.raises(rg.InvalidArgumentError):  # still one of the hierarchy
        rg.nn.utils.get_total_norm([p.grad(grads)], error_if_nonfinite=True)


# -- strides of elementwise results ---------------------------------------------------------------
STRIDE_CASES = {
    "t_exp": lambda lib, x: x[0].t().exp(),
    "permute_add_scalar": lambda lib, x: x.permute(2, 0, 1) + 1,
    "permute_mul_itself": lambda lib, x: x.permute(2, 0, 1) * x.permute(2, 0, 1),
    "permute_add_contiguous": lambda lib, x: x.permute(2, 0, 1) + lib.ones(4, 2, 3, dtype=x.dtype),
    "permute_add_broadcast": lambda lib, x: x.permute(2, 0, 1) + lib.ones(3, dtype=x.dtype),
    "transpose_compare": lambda lib, x: x.transpose(0, 1) > 2,
    "chain": lambda lib, x: (-x.permute(2, 0, 1).abs()).sigmoid().clamp(0.1, 0.9),
    "cast": lambda lib, x: x.transpose(1, 2).float(),
    "clone": lambda lib, x: x.transpose(1, 2).clone(),
    "expanded": lambda lib, x: x.expand(2, 2, 3, 4).permute(0, 3, 1, 2) + 1,
    "permuted_back": lambda lib, x: x.permute(2, 0, 1).exp().permute(1, 2, 0),
    "reshaped_view": lambda lib, x: x.permute(2, 0, 1).exp().reshape(4, 6),
}


@pytest.mark.parametrize("case", list(STRIDE_CASES))
def test_elementwise_results_follow_the_input_layout_as_torchs(case):
    data = np.arange(24.0).reshape(2, 3, 4)
    expected = STRIDE_CASES[case](torch, torch.tensor(data))
    out = STRIDE_CASES[case](rg, rg.tensor(data))
    assert out.stride() == expected.stride()
    assert out.is_contiguous() == expected.is_contiguous()
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-15, atol=0)


#: results that stay row-major in torch too (checked beside the refused view: they passed before)
CONTIGUOUS_CASES = {
    "contiguous_add_permute": lambda lib, x: lib.ones(4, 2, 3, dtype=x.dtype) + x.permute(2, 0, 1),
    "sliced": lambda lib, x: x[:, ::2].exp(),
    "softmax": lambda lib, x: x.transpose(1, 2).softmax(-1),
    "contiguous": lambda lib, x: x.permute(2, 0, 1).exp().contiguous(),
}


def test_view_of_a_permuted_elementwise_result_is_refused_as_torchs():
    data = np.arange(24.0).reshape(2, 3, 4)
    for case, fn in CONTIGUOUS_CASES.items():
        expected, out = fn(torch, torch.tensor(data)), fn(rg, rg.tensor(data))
        assert out.stride() == expected.stride() and out.is_contiguous(), case
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.tensor(data).permute(2, 0, 1).exp().view(24)
    with pytest.raises(rg.ShapeError, match="view: view size"):
        rg.tensor(data).permute(2, 0, 1).exp().view(24)
    y = rg.tensor(data).permute(2, 0, 1).exp()
    np.testing.assert_allclose(
        y.contiguous().view(24).numpy(), np.exp(data).transpose(2, 0, 1).ravel(), rtol=1e-15
    )


# -- heaviside -----------------------------------------------------------------------------------
@pytest.mark.parametrize("tracked", ["input", "values"])
def test_heaviside_is_tracked_and_its_backward_raises_as_torchs(tracked):
    x, v = [-1.0, 0.0, 2.0], [0.5]
    xt = torch.tensor(x, requires_grad=tracked == "input")
    vt = torch.tensor(v, requires_grad=tracked == "values")
    expected = torch.heaviside(xt, vt)
    with pytest.raises(RuntimeError, match="derivative for aten::heaviside is not implemented"):
        expected.sum().backward()
    xr = rg.tensor(x, requires_grad=tracked == "input")
    vr = rg.tensor(v, requires_grad=tracked == "values")
    out = rg.heaviside(xr, vr)
    assert out.requires_grad == expected.requires_grad is True
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    with pytest.raises(rg.AutodiffError, match=r"heaviside: the derivative .* not implemented"):
        out.sum().backward()
    with rg.no_grad():  # as torch's: untracked there
        assert not rg.heaviside(xr, vr).requires_grad


# -- torch names that were missing ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["FloatTensor", "LongTensor", "DoubleTensor", "BoolTensor"])
def test_cuda_legacy_types(name):
    ours, theirs = getattr(rg.cuda, name), getattr(torch.cuda, name)
    assert repr(ours) == repr(theirs).replace("torch", "retrograd")
    cpu = rg.ones(2).cast(getattr(rg, name).dtype_name)
    assert isinstance(cpu, getattr(rg, name)) and not isinstance(cpu, ours)
    assert isinstance(torch.ones(2).type(getattr(torch, name)), theirs) is False
    if not rg.cuda.is_available():
        with pytest.raises(TypeError, match=rf"cuda\.{name} not available"):
            theirs([1, 0])
        with pytest.raises(rg.DTypeError, match=rf"cuda\.{name} not available"):
            ours([1, 0])
        return
    with rg.use_backend(rg.Autodiff(rg.TorchBackend("cuda"))):
        made = ours([1, 0])
    assert isinstance(made, ours) and made.device.kind == "cuda"
    assert made.tolist() == theirs([1, 0]).tolist()


def test_cuda_is_bf16_supported_matches_torch():
    assert rg.cuda.is_bf16_supported() == torch.cuda.is_bf16_supported()


def test_quant_stubs_are_the_identity_as_torchs():
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3).astype(np.float32)
    for name in ("QuantStub", "DeQuantStub"):
        theirs = getattr(torch.ao.quantization, name)()
        ours = getattr(rg.ao.quantization, name)()
        assert repr(ours) == repr(theirs)
        np.testing.assert_array_equal(ours(rg.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy())
        assert getattr(rg.ao.quantization, name)(qconfig="q").qconfig == "q"


def test_float_functional_matches_torch():
    a = np.linspace(-2.0, 2.0, 6).reshape(2, 3).astype(np.float32)
    b = np.linspace(1.0, -1.5, 6).reshape(2, 3).astype(np.float32)
    theirs = torch.nn.quantized.FloatFunctional()
    ours = rg.nn.quantized.FloatFunctional()
    assert repr(ours) == repr(theirs)
    assert rg.ao.nn.quantized.FloatFunctional is rg.nn.quantized.FloatFunctional
    ta, tb, ra, rb = torch.tensor(a), torch.tensor(b), rg.tensor(a), rg.tensor(b)
    pairs = [
        (ours.add(ra, rb), theirs.add(ta, tb)),
        (ours.add_scalar(ra, 1.5), theirs.add_scalar(ta, 1.5)),
        (ours.mul(ra, rb), theirs.mul(ta, tb)),
        (ours.mul_scalar(ra, -2.0), theirs.mul_scalar(ta, -2.0)),
        (ours.cat([ra, rb], 1), theirs.cat([ta, tb], 1)),
        (ours.add_relu(ra, rb), theirs.add_relu(ta, tb)),
        (ours.matmul(ra, rb.t()), theirs.matmul(ta, tb.t())),
    ]
    for got, expected in pairs:
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="FloatFunctional is not intended to use the 'forward'"):
        theirs(ta)
    with pytest.raises(RuntimeError, match="FloatFunctional is not intended to use the 'forward'"):
        ours(ra)


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_get_default_backend_for_device_matches_torch(device):
    expected = torch.distributed.get_default_backend_for_device(device)
    assert rg.distributed.get_default_backend_for_device(device) == expected
    assert rg.distributed.get_default_backend_for_device(rg.device(device)) == expected


def test_get_default_backend_for_an_unknown_device_is_refused():
    with pytest.raises(ValueError):
        torch.distributed.get_default_backend_for_device("meta")
    with pytest.raises(rg.InvalidArgumentError, match=r"get_default_backend_for_device: .*'meta'"):
        rg.distributed.get_default_backend_for_device("meta")
