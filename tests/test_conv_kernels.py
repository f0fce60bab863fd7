"""The convolution, batch-norm and ReLU kernels behind CNN training, and their joint backward.

Each kernel is checked against PyTorch's own (``aten.convolution_backward``,
``native_batch_norm`` and its backward, ``threshold_backward``) in float64 and against central
finite differences, on the shapes real models use (3x3 and 1x1, strides 1 and 2, padding,
dilation, groups, transposed convolutions whose stride equals their kernel, 1-d to 3-d), in
every memory layout (contiguous NCHW, channels-last, a strided view), with the NumPy
convolutions' two column orders each forced (``_channel_major``: they pick one by size), and
the protocol's composed defaults against the fused kernels of both backends.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from backends import inner_backend, on_torch
from nn_testing import check_finite_differences, compare_with_torch
from retrograd.backend import numpy_conv
from retrograd.backend.protocol_nn import NNProtocol
from retrograd.backend.sizes import conv_transpose_output_padding

torch = pytest.importorskip("torch")
aten = torch.ops.aten

RNG = np.random.default_rng(2024)
NUMPY = rg.NumpyBackend()
TORCH = rg.TorchBackend("cpu")
#: the tests that call these backends' kernels by name and never the default backend: the same
#: run on every pass, so the torch pass, which would repeat it, skips them
KERNELS_BY_NAME = pytest.mark.numpy_only(
    "calls NUMPY's (and TORCH's) kernels by name: the torch pass would repeat this run"
)

# (x shape [N, C, *spatial], out channels, kernel, stride, padding, dilation, groups)
CONVS = {
    "3x3": ((3, 4, 9, 9), 6, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    "3x3-stride2": ((2, 4, 9, 8), 5, (3, 3), (2, 2), (1, 1), (1, 1), 1),
    "1x1": ((2, 6, 5, 5), 4, (1, 1), (1, 1), (0, 0), (1, 1), 1),
    "1x1-stride2": ((2, 6, 7, 6), 4, (1, 1), (2, 2), (0, 0), (1, 1), 1),
    "7x7-stride2": ((2, 3, 12, 11), 4, (7, 7), (2, 2), (3, 3), (1, 1), 1),
    "dilated": ((2, 3, 9, 9), 4, (3, 3), (1, 1), (2, 2), (2, 2), 1),
    "asymmetric": ((2, 3, 7, 6), 4, (3, 2), (1, 2), (1, 0), (1, 1), 1),
    "over-padded": ((2, 3, 5, 5), 2, (2, 2), (1, 1), (2, 2), (1, 1), 1),
    "wide": ((1, 3, 3, 3), 40, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    "groups": ((2, 4, 7, 7), 6, (3, 3), (1, 1), (1, 1), (1, 1), 2),
    "depthwise": ((2, 4, 7, 7), 4, (3, 3), (2, 2), (1, 1), (1, 1), 4),
    "1d": ((2, 3, 11), 4, (3,), (2,), (1,), (1,), 1),
    "3d": ((1, 2, 5, 4, 5), 3, (2, 3, 2), (1, 1, 2), (1, 0, 1), (1, 1, 1), 1),
}
# (x shape [N, C_in, *spatial], C_out, kernel, stride, padding, output_padding, dilation,
# groups)
TRANSPOSED = {
    "unet-up": ((2, 6, 4, 4), 3, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1),
    "unet-up-wide": ((1, 40, 2, 2), 3, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1),
    "stride2": ((2, 4, 4, 5), 3, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
    "stride1": ((2, 4, 5, 5), 3, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), 1),
    "stride1-dilated": ((2, 3, 5, 5), 2, (3, 3), (1, 1), (0, 0), (1, 1), (2, 2), 1),
    "stride1-widening": ((2, 2, 5, 5), 4, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), 1),
    "stride1-over-padded": ((2, 2, 6, 6), 3, (2, 2), (1, 1), (2, 2), (0, 0), (1, 1), 1),
    "disjoint-cropped": ((2, 4, 3, 3), 3, (2, 2), (2, 2), (1, 1), (1, 1), (1, 1), 1),
    "groups": ((2, 4, 4, 4), 6, (3, 3), (2, 2), (1, 1), (0, 0), (1, 1), 2),
    "1d": ((2, 3, 6), 2, (3,), (2,), (1,), (1,), (1,), 1),
    "3d": ((1, 2, 3, 3, 2), 3, (2, 2, 2), (2, 1, 2), (0, 1, 0), (1, 0, 0), (1, 1, 1), 1),
}


def channels_last(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)


def strided(x: np.ndarray) -> np.ndarray:
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


LAYOUTS = {"contiguous": np.ascontiguousarray, "channels_last": channels_last, "strided": strided}


@pytest.fixture(params=[None, False, True], ids=["by-size", "kernel-major", "channel-major"])
def column_order(request, monkeypatch):
    """The NumPy convolutions' column order: chosen by size, or forced either way (on the
    torch pass, chosen by size only: the tests that reach the default backend run torch's
    kernels, whatever the order, and the NumPy kernels' orders were all checked on the NumPy
    pass)."""
    if request.param is not None and on_torch():
        pytest.skip("the NumPy convolutions' column order: checked on the NumPy pass")
    if request.param is not None:
        monkeypatch.setattr(numpy_conv, "_channel_major", lambda *_: request.param)
    return request.param


def conv_arrays(case, transposed=False):
    if transposed:
        shape, c_out, kernel, *_, groups = case
        weight = RNG.standard_normal((shape[1], c_out // groups, *kernel))
    else:
        shape, c_out, kernel, *_, groups = case
        weight = RNG.standard_normal((c_out, shape[1] // groups, *kernel))
    return RNG.standard_normal(shape), weight, RNG.standard_normal(c_out)


def torch_backward(g, x, w, params, transposed, needs):
    if transposed:
        stride, padding, output_padding, dilation, groups = params
        bias_size = w.shape[1] * groups
    else:
        stride, padding, dilation, groups = params
        output_padding, bias_size = (0,) * len(stride), w.shape[0]
    grads = aten.convolution_backward(
        *(torch.from_numpy(np.ascontiguousarray(a)) for a in (g, x, w)),
        [bias_size],
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        list(needs),
    )
    return [None if t is None else t.numpy() for t in grads]


def assert_grads_close(ours, theirs, needs):
    for i, (mine, expected) in enumerate(zip(ours, theirs)):
        if needs[i]:
            np.testing.assert_allclose(mine, expected, rtol=1e-10, atol=1e-10, err_msg=str(i))
        else:
            assert mine is None, i


# -- convolution kernels ---------------------------------------------------------------------------
@KERNELS_BY_NAME
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", CONVS)
def test_conv_and_its_joint_backward_match_torch(name, layout, column_order):
    _, _, _, stride, padding, dilation, groups = CONVS[name]
    x, w, b = conv_arrays(CONVS[name])
    relaid = LAYOUTS[layout]
    out = NUMPY.conv(relaid(x), w, b, stride, padding, dilation, groups)
    expected = aten.convolution(
        *(torch.from_numpy(a) for a in (x, w, b)),
        stride,
        padding,
        dilation,
        False,
        (0,) * len(stride),
        groups,
    )
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-10, atol=1e-10)
    g = RNG.standard_normal(out.shape)
    for needs in ((True, True, True), (False, True, False), (True, False, False)):
        ours = NUMPY.conv_backward(
            relaid(g), relaid(x), w, stride, padding, dilation, groups, needs
        )
        theirs = torch_backward(g, x, w, (stride, padding, dilation, groups), False, needs)
        assert_grads_close(ours, theirs, needs)


@KERNELS_BY_NAME
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", TRANSPOSED)
def test_conv_transpose_and_its_joint_backward_match_torch(name, layout, column_order):
    _, _, _, stride, padding, output_padding, dilation, groups = TRANSPOSED[name]
    x, w, b = conv_arrays(TRANSPOSED[name], transposed=True)
    relaid = LAYOUTS[layout]
    params = (stride, padding, output_padding, dilation, groups)
    out = NUMPY.conv_transpose(relaid(x), w, b, *params)
    expected = aten.convolution(
        *(torch.from_numpy(a) for a in (x, w, b)),
        stride,
        padding,
        dilation,
        True,
        output_padding,
        groups,
    )
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-10, atol=1e-10)
    g = RNG.standard_normal(out.shape)
    for needs in ((True, True, True), (False, True, True), (True, False, False)):
        ours = NUMPY.conv_transpose_backward(relaid(g), relaid(x), w, *params, needs)
        assert_grads_close(ours, torch_backward(g, x, w, params, True, needs), needs)


@pytest.mark.parametrize("name", ["3x3", "3x3-stride2", "1x1-stride2", "groups", "wide", "1d"])
def test_conv_gradients_match_finite_differences(name, column_order):
    _, _, _, stride, padding, dilation, groups = CONVS[name]
    x, w, b = conv_arrays(CONVS[name])
    x, w = x[:1, :, :5, :4] if x.ndim == 4 else x[:1], w
    spatial = x.ndim - 2
    conv = getattr(F, f"conv{spatial}d")
    check_finite_differences(
        lambda x, w, b: conv(x, w, b, stride, padding, dilation, groups).tanh(), [x, w, b]
    )


@pytest.mark.parametrize("name", ["unet-up", "stride2", "stride1", "unet-up-wide"])
def test_conv_transpose_gradients_match_finite_differences(name, column_order):
    _, _, _, stride, padding, output_padding, dilation, groups = TRANSPOSED[name]
    x, w, b = conv_arrays(TRANSPOSED[name], transposed=True)
    x = x[:1, :, :3, :3]
    check_finite_differences(
        lambda x, w, b: F.conv_transpose2d(
            x, w, b, stride, padding, output_padding, groups, dilation
        ).tanh(),
        [x, w, b],
    )


@KERNELS_BY_NAME
@pytest.mark.parametrize("backend", [NUMPY, TORCH], ids=["numpy", "torch"])
@pytest.mark.parametrize("name", ["3x3-stride2", "groups", "7x7-stride2", "1d"])
def test_the_protocol_defaults_give_the_kernels_results(backend, name):
    """conv_backward's composed default (its adjoints) and each backend's fused kernel."""
    _, _, _, stride, padding, dilation, groups = CONVS[name]
    x, w, _ = conv_arrays(CONVS[name])
    on = (lambda a: torch.from_numpy(a)) if backend is TORCH else (lambda a: a)
    out_shape = NUMPY.conv(x, w, np.zeros(0), stride, padding, dilation, groups).shape
    g = RNG.standard_normal(out_shape)
    needs = (True, True, True)
    fused = backend.conv_backward(on(g), on(x), on(w), stride, padding, dilation, groups, needs)
    composed = NNProtocol.conv_backward(
        backend, on(g), on(x), on(w), stride, padding, dilation, groups, needs
    )
    for mine, default in zip(fused, composed):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(default), rtol=1e-10, atol=1e-10)
    output_padding = conv_transpose_output_padding(
        x.shape[2:], out_shape[2:], w.shape[2:], stride, padding, dilation
    )
    params = (stride, padding, output_padding, dilation, groups)
    fused = backend.conv_transpose_backward(on(x), on(g), on(w), *params, needs)
    composed = NNProtocol.conv_transpose_backward(backend, on(x), on(g), on(w), *params, needs)
    for mine, default in zip(fused, composed):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(default), rtol=1e-10, atol=1e-10)


def test_a_torch_refused_output_padding_takes_the_default_backward():
    """output_padding >= stride (Burn allows it): the trailing cells no input reaches get
    only the bias; their gradients are the composed default's, checked against finite
    differences."""
    x, w, b = RNG.standard_normal((1, 2, 3)), RNG.standard_normal((2, 2, 2)), np.ones(2)
    check_finite_differences(
        lambda x, w, b: F.conv_transpose1d(x, w, b, stride=1, output_padding=2).sin(), [x, w, b]
    )


@KERNELS_BY_NAME
def test_numpy_convolutions_write_channels_last_outputs():
    x, w, b = conv_arrays(CONVS["3x3"])
    out = NUMPY.conv(x, w, b, (1, 1), (1, 1), (1, 1), 1)
    assert np.moveaxis(out, 1, -1).flags.c_contiguous
    g = RNG.standard_normal(out.shape)
    dx = NUMPY.conv_backward(g, x, w, (1, 1), (1, 1), (1, 1), 1, (True, False, False))[0]
    assert np.moveaxis(dx, 1, -1).flags.c_contiguous


@KERNELS_BY_NAME
def test_the_column_order_follows_the_larger_copy():
    """Columns take the weight's order exactly when the weight outweighs them."""
    assert numpy_conv._channel_major(9 * 512 * 512, 64 * 9 * 512)  # a 2x2 map, 512 channels
    assert not numpy_conv._channel_major(9 * 64 * 64, 4096 * 9 * 64)  # a 64x64 map


FOLDED = {**CONVS, **{f"transposed-{k}": v for k, v in TRANSPOSED.items()}}
# 2-d cases whose folds, when they have one, run only in the weight's column order (compiled
# folds take the other): a stride-1 gradient that is a convolution in the other order
FOLDED_CHANNEL_MAJOR_ONLY = {
    "over-padded",
    "transposed-stride1-widening",
    "transposed-stride1-over-padded",
}


@KERNELS_BY_NAME
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", [k for k, c in FOLDED.items() if len(c[2]) == 2])
def test_the_compiled_fold_gives_numpys_bits(name, dtype, monkeypatch):
    """The compiled col2im (2-d, overlapping windows) against NumPy's strided adds, bit for
    bit: a convolution's input gradient and a transposed convolution's output, each column
    order, float32 and float64 (the compiled one forced at every size)."""
    case = FOLDED[name]
    transposed = len(case) == 8
    x, w, b = (a.astype(dtype) for a in conv_arrays(case, transposed))
    params = case[3:]
    if not transposed:
        g = RNG.standard_normal(NUMPY.conv(x, w, b, *params).shape).astype(dtype)
    folds = []
    choose = numpy_conv._compiled_fold

    def run(minimum, channel_major):
        monkeypatch.setattr(numpy_conv, "COMPILED_FOLD_MIN_SIZE", minimum)
        monkeypatch.setattr(numpy_conv, "_channel_major", lambda *_: channel_major)
        if transposed:
            return NUMPY.conv_transpose(x, w, b, *params)
        return NUMPY.conv_backward(g, x, w, *params, (True, False, False))[0]

    def spy(*args):
        folds.append(choose(*args))
        return folds[-1]

    monkeypatch.setattr(numpy_conv, "_compiled_fold", spy)
    for channel_major in (False, True):
        np.testing.assert_array_equal(run(0, channel_major), run(1 << 62, channel_major))
    if folds and name not in FOLDED_CHANNEL_MAJOR_ONLY:
        assert any(fold is not None for fold in folds)  # a fold of this case ran compiled


@KERNELS_BY_NAME
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(64, 24, 24, 64), (3, 5, 7, 2), (2, 9, 9, 300)])
def test_the_compiled_bias_gradient_sums_as_einsum_does(shape, dtype, monkeypatch):
    """A convolution's bias gradient, compiled (forced at every size), against NumPy's
    float64 ``einsum`` over the channels-last output gradient; and against torch."""
    g = np.moveaxis(RNG.standard_normal(shape).astype(dtype), -1, 1)
    x = RNG.standard_normal((shape[0], 3, shape[1] + 2, shape[2] + 2)).astype(dtype)
    w = RNG.standard_normal((shape[3], 3, 3, 3)).astype(dtype)
    needs = (False, False, True)

    def bias_grad(minimum):
        monkeypatch.setattr(numpy_conv, "COMPILED_FOLD_MIN_SIZE", minimum)
        return NUMPY.conv_backward(g, x, w, (1, 1), (0, 0), (1, 1), 1, needs)[2]

    compiled, numpy = bias_grad(0), bias_grad(1 << 62)
    assert compiled.dtype == numpy.dtype == dtype
    np.testing.assert_array_equal(compiled, numpy)
    expected = torch.from_numpy(g.astype(np.float64)).sum(dim=(0, 2, 3)).numpy()
    scale = np.abs(g.astype(np.float64)).sum(axis=(0, 2, 3))  # the sums' rounding scale
    tolerance = 4 * np.finfo(np.float32).eps if dtype == "float32" else 1e-12
    assert np.all(np.abs(compiled - expected) <= tolerance * scale)


# -- batch norm ------------------------------------------------------------------------------------
NORM_SHAPES = {
    "2d": (8, 3),
    "3d": (4, 3, 5),
    "4d": (3, 4, 5, 3),
    "4d-channels-last": (3, 4, 5, 3),
    "5d": (2, 3, 3, 2, 2),
}


@pytest.fixture(params=["numpy", "compiled"])
def norm_kernels(request, monkeypatch):
    """Channels-last batch norm by NumPy's operations, or (float64 too) by the compiled
    kernels that run float32's."""
    from retrograd.backend import numpy_nn

    dtypes = (np.float32, np.float64) if request.param == "compiled" else ()
    monkeypatch.setattr(numpy_nn, "COMPILED_BATCH_NORM_DTYPES", dtypes)
    return request.param


@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NORM_SHAPES)
def test_batch_norm_training_matches_torch(name, dtype, affine, norm_kernels):
    x = RNG.standard_normal(NORM_SHAPES[name]) * 3 + 2
    if name == "4d-channels-last":
        x = channels_last(x)
    channels = x.shape[1]
    weight, bias = RNG.standard_normal(channels), RNG.standard_normal(channels)
    arrays = [x, weight, bias][: {"both": 3, "weight": 2, "none": 1}[affine]]

    def ours(x, weight=None, bias=None):
        return F.batch_norm(x, None, None, weight, bias, training=True, eps=1e-3)

    def theirs(x, weight=None, bias=None):
        return torch.nn.functional.batch_norm(x, None, None, weight, bias, True, eps=1e-3)

    compare_with_torch(ours, theirs, arrays, dtype, scale_atol=5.0)


@pytest.mark.parametrize("name", ["2d", "4d", "4d-channels-last"])
def test_batch_norm_gradients_match_finite_differences(name, norm_kernels):
    x = RNG.standard_normal(NORM_SHAPES[name]) + 1
    if name == "4d-channels-last":
        x = channels_last(x)
    channels = x.shape[1]
    check_finite_differences(
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True).sin(),
        [x, RNG.standard_normal(channels), RNG.standard_normal(channels)],
    )


@pytest.mark.parametrize("momentum", [0.1, 0.7])
def test_batch_norm_running_statistics_follow_torch(momentum):
    x = RNG.standard_normal((6, 3, 4, 4)) * 2 - 1
    with rg.use_backend(rg.Autodiff(inner_backend())):
        mean, var = rg.zeros((3,), dtype="float64"), rg.ones((3,), dtype="float64")
        for _ in range(2):
            F.batch_norm(rg.tensor(x), mean, var, training=True, momentum=momentum, eps=1e-2)
        t_mean, t_var = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
        for _ in range(2):
            torch.nn.functional.batch_norm(
                torch.from_numpy(x), t_mean, t_var, training=True, momentum=momentum, eps=1e-2
            )
        np.testing.assert_allclose(mean.numpy(), t_mean.numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(var.numpy(), t_var.numpy(), rtol=1e-12)


def test_batch_norm_second_derivative_matches_torch():
    """Through the protocol's composed batch_norm_backward (recorded on the autodiff backend)."""
    x, w, b = RNG.standard_normal((4, 3, 2, 2)), RNG.standard_normal(3), RNG.standard_normal(3)
    seed = RNG.standard_normal(x.shape)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        xs = [rg.tensor(a).require_grad() for a in (x, w, b)]
        out = F.batch_norm(xs[0], None, None, xs[1], xs[2], training=True)
        first = (out * rg.tensor(seed)).sin().sum().backward(create_graph=True)
        total = sum((t.grad(first) * t.grad(first)).sum() for t in xs[:2])
        second = total.backward()
        ours = [t.grad(second).numpy() for t in xs]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    out = torch.nn.functional.batch_norm(ts[0], None, None, ts[1], ts[2], training=True)
    grads = torch.autograd.grad((out * torch.from_numpy(seed)).sin().sum(), ts, create_graph=True)
    torch.autograd.backward(sum((g * g).sum() for g in grads[:2]))
    for mine, t in zip(ours, ts):
        np.testing.assert_allclose(mine, t.grad.numpy(), rtol=1e-9, atol=1e-10)


@KERNELS_BY_NAME
@pytest.mark.parametrize("backend", [NUMPY, TORCH], ids=["numpy", "torch"])
def test_batch_norm_kernels_give_the_protocol_defaults_results(backend):
    x = channels_last(RNG.standard_normal((3, 4, 5, 2)) * 2 + 1)
    w, b, g = RNG.standard_normal(4), RNG.standard_normal(4), RNG.standard_normal(x.shape)
    on = (lambda a: torch.from_numpy(np.ascontiguousarray(a))) if backend is TORCH else np.asarray
    out, stats = backend.batch_norm(on(x), on(w), on(b), 1e-5)
    default_out, default_stats = NNProtocol.batch_norm(backend, on(x), on(w), on(b), 1e-5)
    np.testing.assert_allclose(np.asarray(out), np.asarray(default_out), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(stats), np.asarray(default_stats), rtol=1e-12)
    fused = backend.batch_norm_backward(on(g), on(x), on(w), stats, 1e-5)
    composed = NNProtocol.batch_norm_backward(backend, on(g), on(x), on(w), stats, 1e-5)
    for mine, default in zip(fused, composed):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(default), rtol=1e-9, atol=1e-11)
    # no weight: the kernel still gives [C] gradients for it
    _, dweight, dbias = backend.batch_norm_backward(on(g), on(x), on(np.zeros(0)), stats, 1e-5)
    assert np.asarray(dweight).shape == np.asarray(dbias).shape == (4,)


@KERNELS_BY_NAME
def test_numpy_batch_norm_keeps_the_layout_and_sums_float32_exactly():
    x = channels_last(RNG.standard_normal((16, 4, 32, 32)).astype(np.float32) + 100)
    out, stats = NUMPY.batch_norm(x, np.zeros(0, np.float32), np.zeros(0, np.float32), 1e-5)
    assert np.moveaxis(out, 1, -1).flags.c_contiguous and out.dtype == np.float32
    exact = x.astype(np.float64).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(stats[0], exact, rtol=np.finfo(np.float32).eps)


@KERNELS_BY_NAME
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 3, 3), (16, 5, 5, 5), (7, 6, 11, 4)])
def test_compiled_channels_last_batch_norm_matches_the_numpy_kernels(shape, dtype, monkeypatch):
    """Channels-last float32 batch norm runs compiled (``compiled_norm``; float64 forced
    here), a contiguous NCHW one in NumPy's operations: the same values within rounding, rows
    fewer than a sum block (18), and not a multiple of it (400, 308)."""
    from retrograd.backend import numpy_nn

    monkeypatch.setattr(numpy_nn, "COMPILED_BATCH_NORM_DTYPES", (np.float32, np.float64))
    x = (RNG.standard_normal(shape) * 3 + 5).astype(dtype)
    w, b, g = (RNG.standard_normal(n).astype(dtype) for n in (shape[1], shape[1], shape))
    eps = 1e-4
    # within a few units in the last place of the outputs' scale (the two sum in other orders)
    unit = 4 * np.finfo(dtype).eps

    def close(actual, expected):
        assert actual.dtype == dtype and actual.shape == expected.shape
        np.testing.assert_allclose(actual, expected, rtol=unit, atol=unit * np.abs(expected).max())

    for weight, bias in ((w, b), (w[:0], b[:0])):
        out, stats = NUMPY.batch_norm(channels_last(x), weight, bias, eps)
        ref_out, ref_stats = NUMPY.batch_norm(x, weight, bias, eps)
        assert np.moveaxis(out, 1, -1).flags.c_contiguous
        close(stats, ref_stats)
        close(out, ref_out)
        mine = NUMPY.batch_norm_backward(channels_last(g), channels_last(x), weight, stats, eps)
        theirs = NUMPY.batch_norm_backward(g, x, weight, stats, eps)
        assert np.moveaxis(mine[0], 1, -1).flags.c_contiguous
        for a, e in zip(mine, theirs):
            close(a, e)


@KERNELS_BY_NAME
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_batch_norm_update_is_the_protocols_arithmetic(dtype):
    x = channels_last((RNG.standard_normal((4, 3, 2, 5)) * 2 + 1).astype(dtype))
    _, stats = NUMPY.batch_norm(x, np.zeros(0, dtype), np.zeros(0, dtype), 1e-3)
    running = RNG.standard_normal(3).astype(dtype), RNG.random(3).astype(dtype) + 0.5
    mine = NUMPY.batch_norm_update(*running, stats, 0.3, 1e-3, 40)
    default = NNProtocol.batch_norm_update(NUMPY, *running, stats, 0.3, 1e-3, 40)
    for a, e in zip(mine, default):
        assert a.dtype == e.dtype == dtype
        np.testing.assert_array_equal(a, e)
    variance = x.astype(np.float64).var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(mine[1], 0.7 * running[1] + 0.3 * variance, rtol=1e-5)


@KERNELS_BY_NAME
def test_batch_norm_is_one_compute_bound_op():
    from retrograd.autodiff.ops import OPS

    assert OPS["batch_norm"].joint and OPS["batch_norm"].aux
    assert not OPS["batch_norm"].memory_bound


# -- relu ------------------------------------------------------------------------------------------
@KERNELS_BY_NAME
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", [NUMPY, TORCH], ids=["numpy", "torch"])
def test_relu_backward_is_torchs_threshold_backward(backend, dtype):
    g = np.array([1.0, -2.0, np.inf, np.nan, -0.0, 3.0, -np.inf, 5.0] * 600, dtype)
    out = np.array([1.0, 0.0, 0.0, 0.0, 2.0, np.nan, 0.0, 1e-30] * 600, dtype)
    expected = aten.threshold_backward(torch.from_numpy(g), torch.from_numpy(out), 0).numpy()
    on = torch.from_numpy if backend is TORCH else np.asarray
    ours = np.asarray(backend.relu_backward(on(g), on(out)))
    assert ours.dtype == dtype
    bits = np.dtype(f"u{ours.itemsize}")  # bit for bit: +0.0 where masked, NaN kept
    np.testing.assert_array_equal(ours.view(bits), expected.view(bits))
    default = np.asarray(rg.Backend.relu_backward(backend, on(g), on(out)))
    np.testing.assert_array_equal(ours.view(bits), default.view(bits))


@KERNELS_BY_NAME
def test_relu_backward_keeps_a_channels_last_layout():
    out = np.maximum(channels_last(RNG.standard_normal((2, 3, 4, 4))), 0)
    g = channels_last(RNG.standard_normal(out.shape))
    assert np.moveaxis(NUMPY.relu_backward(g, out), 1, -1).flags.c_contiguous


@pytest.mark.numpy_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_first_layers_bias_added_in_the_product_matches_torch(dtype, monkeypatch):
    """A convolution of few rows (one channel, 3x3) adds its bias in the product (a column
    of ones): within rounding of the bias added after it, and of torch's float64 result."""
    x = RNG.standard_normal((4, 1, 10, 10)).astype(dtype)
    w, b = RNG.standard_normal((8, 1, 3, 3)).astype(dtype), RNG.standard_normal(8).astype(dtype)
    assert numpy_conv.BIAS_COLUMN_ROWS > 9
    in_product = NUMPY.conv(x, w, b, (1, 1), (1, 1), (1, 1), 1)
    monkeypatch.setattr(numpy_conv, "BIAS_COLUMN_ROWS", 0)
    added_after = NUMPY.conv(x, w, b, (1, 1), (1, 1), (1, 1), 1)
    expected = aten.convolution(
        *(torch.from_numpy(a.astype(np.float64)) for a in (x, w, b)),
        (1, 1),
        (1, 1),
        (1, 1),
        False,
        (0, 0),
        1,
    ).numpy()
    tolerance = 4 * np.finfo(dtype).eps * np.abs(expected).max()
    assert in_product.dtype == dtype and numpy_conv.channels_last(in_product)
    np.testing.assert_allclose(in_product, added_after, rtol=0, atol=tolerance)
    np.testing.assert_allclose(in_product, expected, rtol=0, atol=tolerance)
