"""Burn's forward module tests (``crates/burn-backend-tests/tests/tensor/float/module``,
tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747): convolutions, transposed
convolutions, deformable convolution, pooling, adaptive pooling and interpolation, through
rg.nn.functional's torch signatures (API.md section 6; deform_conv2d is torchvision's),
under every checkpointing strategy on the chosen inner backend.

Burn writes these as ``XTestCase { sizes }.assert_output(expected)``, the inputs being
``arange`` reshaped to the case's shapes (weights and bias too); burn_module_forward_cases.json
holds each case's sizes and expected array as its test source writes them, and the builders
below are its ``assert_output`` bodies. Burn's ``ConvOptions::new(stride, padding, dilation,
groups)`` and ``avg_pool2d(x, kernel, stride, padding, count_include_pad, ceil_mode)`` map to
torch's keyword arguments."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)

CASES = json.loads((Path(__file__).parent / "burn_module_forward_cases.json").read_text())


def arange(*shape):
    return rg.arange(0, math.prod(shape)).float().reshape(shape)


def pair(case, name, n):
    return tuple(case[f"{name}_{i}"] for i in range(1, n + 1))


def conv_case(case, n, transposed):
    spatial = {1: ("length",), 2: ("height", "width"), 3: ("depth", "height", "width")}[n]
    kernel = (case["kernel_size"],) if n == 1 else pair(case, "kernel_size", n)
    groups = case["groups"]
    if transposed:
        w_shape = (case["channels_in"], case["channels_out"] // groups, *kernel)
    else:
        w_shape = (case["channels_out"], case["channels_in"] // groups, *kernel)
    x = arange(case["batch_size"], case["channels_in"], *(case[s] for s in spatial))
    weight, bias = arange(*w_shape), rg.arange(0, case["channels_out"]).float()

    def opt(name):
        return case[name] if n == 1 else pair(case, name, n)

    kwargs = dict(
        stride=opt("stride"), padding=opt("padding"), dilation=opt("dilation"), groups=groups
    )
    if transposed:
        fn = getattr(F, f"conv_transpose{n}d")
        return fn(x, weight, bias, output_padding=opt("padding_out"), **kwargs)
    return getattr(F, f"conv{n}d")(x, weight, bias, **kwargs)


def avg_pool_case(case, n):
    if n == 1:
        x = arange(case["batch_size"], case["channels"], case["length"])
        return F.avg_pool1d(
            x,
            case["kernel_size"],
            case["stride"],
            case["padding"],
            count_include_pad=case["count_include_pad"],
        )
    x = arange(case["batch_size"], case["channels"], case["height"], case["width"])
    return F.avg_pool2d(
        x,
        pair(case, "kernel_size", 2),
        pair(case, "stride", 2),
        pair(case, "padding", 2),
        count_include_pad=case["count_include_pad"],
    )


def adaptive_case(case, n):
    spatial = {1: ("length",), 2: ("height", "width"), 3: ("depth", "height", "width")}[n]
    x = arange(case["batch_size"], case["channels"], *(case[s] for s in spatial))
    out = tuple(case[f"{s}_out"] for s in spatial)
    return getattr(F, f"adaptive_avg_pool{n}d")(x, out[0] if n == 1 else out)


def interpolate_case(case, mode, align_corners):
    x = arange(case["batch_size"], case["channels"], case["height"], case["width"])
    size = (case["height_out"], case["width_out"])
    if mode == "nearest":
        return F.interpolate(x, size=size, mode="nearest")
    return F.interpolate(x, size=size, mode=mode, align_corners=align_corners)


def deform_case(case):
    """Burn's deform_conv2d case: x, offset, mask, weight and bias are ``arange`` over their
    sizes divided by their element counts; torchvision's F.deform_conv2d takes the weight and
    offset groups from the shapes."""
    kh, kw = pair(case, "kernel_size", 2)
    (ph, pw), (sh, sw), (dh, dw) = (pair(case, n, 2) for n in ("padding", "stride", "dilation"))
    out_h = (case["height"] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    out_w = (case["width"] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    batch, groups = case["batch_size"], case["offset_groups"]

    def scaled(*shape):
        return arange(*shape) / float(math.prod(shape))

    x = scaled(batch, case["channels_in"], case["height"], case["width"])
    weight = scaled(case["channels_out"], case["channels_in"] // case["weight_groups"], kh, kw)
    bias = rg.arange(0, case["channels_out"]).float() / float(case["channels_out"])
    offset = scaled(batch, kh * kw * groups * 2, out_h, out_w)
    mask = scaled(batch, kh * kw * groups, out_h, out_w)
    return F.deform_conv2d(x, offset, weight, bias, (sh, sw), (ph, pw), (dh, dw), mask=mask)


#: file -> (how to build the output, Burn's tolerance as (relative, absolute))
BUILDERS = {
    "conv1d": (lambda c, e: conv_case(c, 1, False), (1e-5, 1e-5)),
    "conv2d": (lambda c, e: conv_case(c, 2, False), (5e-3, 1e-5)),
    "conv3d": (lambda c, e: conv_case(c, 3, False), (1e-5, 1e-5)),
    "conv_transpose1d": (lambda c, e: conv_case(c, 1, True), (5e-3, 1e-5)),
    "conv_transpose2d": (lambda c, e: conv_case(c, 2, True), (1e-1, 1e-2)),
    "conv_transpose3d": (lambda c, e: conv_case(c, 3, True), (5e-3, 1e-5)),
    "avgpool1d": (lambda c, e: avg_pool_case(c, 1), (5e-3, 1e-5)),
    "avgpool2d": (lambda c, e: avg_pool_case(c, 2), (5e-3, 1e-5)),
    "adaptive_avgpool1d": (lambda c, e: adaptive_case(c, 1), (5e-3, 1e-5)),
    "adaptive_avgpool2d": (lambda c, e: adaptive_case(c, 2), (5e-3, 1e-5)),
    "adaptive_avgpool3d": (lambda c, e: adaptive_case(c, 3), (5e-3, 1e-5)),
    "nearest_interpolate": (lambda c, e: interpolate_case(c, "nearest", None), (5e-3, 1e-5)),
    "bilinear_interpolate": (
        lambda c, e: interpolate_case(c, "bilinear", e != "false"),
        (1e-2, 1e-2),
    ),
    "deform_conv2d": (lambda c, e: deform_case(c), (1e-2, 1e-2)),
    "bicubic_interpolate": (
        lambda c, e: interpolate_case(c, "bicubic", e != "false"),
        (1e-2, 1e-2),
    ),
}


@pytest.mark.parametrize("entry", CASES, ids=[f"{c['file']}-{c['test']}" for c in CASES])
def test_module_case(entry):
    build, (rtol, atol) = BUILDERS[entry["file"]]
    out = build(entry["case"], entry["extra"])
    expected = np.asarray(entry["expected"], dtype=np.float64)
    assert out.shape == expected.shape
    # Burn's |x - y| < max(R * |x + y|, A), a little looser than assert_allclose's form
    np.testing.assert_allclose(
        np.asarray(out, dtype=np.float64), expected, rtol=2 * rtol, atol=atol
    )


# ---- maxpool1d.rs, maxpool2d.rs: each test's kernel/stride/padding/dilation lets, its input and
# expected arrays and its ceil_mode flags, as burn_max_pool_forward_cases.json holds them ------

POOL_CASES = json.loads((Path(__file__).parent / "burn_max_pool_forward_cases.json").read_text())


def pool_args(params, n):
    if n == 1:
        return [params[k] for k in ("kernel_size", "stride", "padding", "dilation")]
    return [pair(params, k, 2) for k in ("kernel_size", "stride", "padding", "dilation")]


@pytest.mark.parametrize("entry", POOL_CASES, ids=[c["test"] for c in POOL_CASES])
def test_max_pool_case(entry):
    arrays, params = entry["arrays"], entry["params"]
    n = 1 if entry["file"] == "maxpool1d" else 2
    x = rg.tensor(arrays["x"])
    if arrays.get("x_negate"):
        x = x.neg()
    kernel, stride, padding, dilation = pool_args(params, n)
    if "y_floor" in arrays:
        expected = [(arrays["y_floor"], None), (arrays["y_ceil"], None)]
    elif "expected_values" in arrays:
        expected = [(arrays["expected_values"], arrays["expected_indices"])]
    else:
        expected = [(arrays["y"], arrays.get("indices"))]
    assert len(entry["calls"]) == len(expected)
    for call, (values, indices) in zip(entry["calls"], expected):
        fn = getattr(F, f"max_pool{n}d")
        out = fn(
            x,
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode=call["ceil"],
            return_indices=call["fn"].endswith("_with_indices"),
        )
        if call["fn"].endswith("_with_indices"):
            out, out_indices = out
            np.testing.assert_array_equal(np.asarray(out_indices), indices)
            assert out_indices.dtype == "int64"
            with_fn = getattr(F, f"max_pool{n}d_with_indices")(
                x, kernel, stride, padding, dilation, ceil_mode=call["ceil"]
            )
            np.testing.assert_array_equal(np.asarray(with_fn[1]), indices)
        np.testing.assert_allclose(np.asarray(out), values, rtol=1e-2, atol=1e-5)


# ---- the module tests written out by hand ----------------------------------------------------


def test_avg_pool_ceil_mode():
    x = rg.tensor([[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]])
    np.testing.assert_allclose(
        F.avg_pool1d(x, 3, 2, 0, count_include_pad=True).numpy(), [[[1.0, 3.0]]], rtol=1e-3
    )
    out = F.avg_pool1d(x, 3, 2, 0, ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(out.numpy(), [[[1.0, 3.0, 4.5]]], rtol=1e-3)
    out = F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True)
    np.testing.assert_allclose(out.numpy(), [[[0.3333, 2.0, 4.0, 2.5]]], rtol=1e-3)
    x = arange(1, 1, 6, 6)
    np.testing.assert_allclose(
        F.avg_pool2d(x, (3, 3), (2, 2), (0, 0)).numpy(), [[[[7.0, 9.0], [19.0, 21.0]]]], rtol=1e-3
    )
    out = F.avg_pool2d(x, (3, 3), (2, 2), (0, 0), ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(
        out.numpy(), [[[[7.0, 9.0, 10.5], [19.0, 21.0, 22.5], [28.0, 30.0, 31.5]]]], rtol=1e-3
    )
    out = F.avg_pool2d(x, (3, 3), (2, 2), (1, 1), ceil_mode=True, count_include_pad=True)
    np.testing.assert_allclose(
        out.numpy(),
        [
            [
                [
                    [1.5556, 3.3333, 4.6667, 2.6667],
                    [8.3333, 14.0000, 16.0000, 8.5000],
                    [16.3333, 26.0000, 28.0000, 14.5000],
                    [10.1667, 16.0000, 17.0000, 8.7500],
                ]
            ]
        ],
        rtol=1e-3,
    )


def test_adaptive_avg_pool3d_uneven():
    out = F.adaptive_avg_pool3d(arange(1, 2, 4, 6, 8), (2, 3, 2))
    assert out.shape == (1, 2, 2, 3, 2)
    v = out.numpy()
    assert np.isfinite(v).all() and (v >= 0).all()
    assert abs(v.mean() - 383.0 / 2.0) < 1.0  # the mean over both channels, as Burn checks
    out = F.adaptive_avg_pool3d(arange(1, 2, 5, 7, 9), (3, 4, 5))
    assert out.shape == (1, 2, 3, 4, 5) and (out.numpy() >= 0).all() and out.numpy().mean() > 0
    out = F.adaptive_avg_pool3d(arange(1, 1, 2, 3, 4), (3, 4, 5))
    assert out.shape == (1, 1, 3, 4, 5)
    assert abs(out.numpy().mean() - 11.5) < 2.0


ONE_ROW = [[[[1.5410, -0.2934, -2.1788, 0.5684, -1.0845, -1.3986]]]]


def test_interpolate_one_row():
    # Burn's InterpolateOptions default to align_corners=true; torch's (API.md's) to false,
    # so the bilinear and bicubic cases pass it.
    x = rg.tensor(ONE_ROW)
    out = F.interpolate(x, size=(1, 9), mode="nearest")
    assert out.shape == (1, 1, 1, 9) and not np.isnan(out.numpy()).any()
    np.testing.assert_allclose(
        out.numpy(),
        [[[[1.541, 1.541, -0.2934, -2.1788, -2.1788, 0.5684, -1.0845, -1.0845, -1.3986]]]],
        rtol=1e-2,
        atol=1e-5,
    )
    out = F.interpolate(x, size=(1, 9), mode="bilinear", align_corners=True)
    np.testing.assert_allclose(
        out.numpy(),
        [
            [
                [
                    [
                        1.541,
                        0.39450002,
                        -0.76475,
                        -1.943125,
                        -0.80520004,
                        0.36178753,
                        -0.671275,
                        -1.2022874,
                        -1.3986,
                    ]
                ]
            ]
        ],
        rtol=1e-2,
        atol=1e-5,
    )
    out = F.interpolate(x, size=(1, 9), mode="bicubic", align_corners=True)
    np.testing.assert_allclose(
        out.numpy(),
        [
            [
                [
                    [
                        1.541,
                        0.5747652,
                        -1.010614,
                        -2.197787,
                        -0.8269969,
                        0.59609234,
                        -0.5803058,
                        -1.3792794,
                        -1.3986,
                    ]
                ]
            ]
        ],
        rtol=1e-2,
        atol=1e-5,
    )


def test_interpolate_bilinear_cast():
    x = arange(1, 1, 4, 4).cast("float32")
    out = F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=True)
    row = np.array([0.0, 0.42857, 0.8571, 1.2857, 1.7142, 2.1428, 2.5714, 3.0])
    expected = row[None, :] + 4 * row[:, None]
    np.testing.assert_allclose(expected[1, 0], 1.7142, atol=1e-3)  # Burn's second row starts so
    np.testing.assert_allclose(out.numpy()[0, 0], expected, rtol=1e-2, atol=1e-2)


def test_linear():
    # Burn's linear takes weight [in, out]; API.md's (torch's) takes [out, in], so the weights
    # below are Burn's transposed.
    w = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).transpose()
    np.testing.assert_allclose(F.linear(rg.tensor([1.0, 2.0]), w).numpy(), [7.0, 10.0], rtol=1e-5)
    w1 = rg.tensor([[3.0], [4.0]]).transpose()
    np.testing.assert_allclose(F.linear(rg.tensor([1.0, 2.0]), w1).numpy(), [11.0], rtol=1e-5)
    x = rg.tensor([[[1.0, 2.0], [3.0, 4.0]], [[-1.0, -2.0], [-3.0, -4.0]]])
    np.testing.assert_allclose(
        F.linear(x, w).numpy(), [[[7, 10], [15, 22]], [[-7, -10], [-15, -22]]], rtol=1e-5
    )
    np.testing.assert_allclose(
        F.linear(x, w, rg.tensor([1.0, -1.0])).numpy(),
        [[[8, 9], [16, 21]], [[-6, -11], [-14, -23]]],
        rtol=1e-5,
    )


def test_embedding():
    weight = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    out = F.embedding(rg.tensor([[0, 1], [1, 1]]), weight)
    np.testing.assert_array_equal(out.numpy(), [[[0, 1, 2], [3, 4, 5]], [[3, 4, 5], [3, 4, 5]]])


def test_batch_norm_inference():
    x = rg.tensor(
        [
            [[0.9601, 0.7277], [0.6272, 0.9034], [0.9378, 0.7230]],
            [[0.6356, 0.1362], [0.0249, 0.9509], [0.6600, 0.5945]],
        ]
    )
    out = F.batch_norm(
        x,
        rg.tensor([1.0, 2.0, 3.0]),
        rg.tensor([3.0, 8.0, 15.0]),
        weight=rg.tensor([2.0, 3.0, 4.0]),
        bias=rg.tensor([0.5, -1.0, 2.0]),
        training=False,
        eps=1.0,
    )
    np.testing.assert_allclose(
        out.numpy(),
        [
            [[0.4601, 0.2277], [-2.3728, -2.0966], [-0.0622, -0.2770]],
            [[0.1356, -0.3638], [-2.9751, -2.0491], [-0.3400, -0.4055]],
        ],
        rtol=1e-3,
        atol=1e-4,
    )


CONV2D_WEIGHT = [  # Burn's conv2d_weight(), shape [8, 1, 3, 3]
    0.048065186,
    -0.3059082,
    -0.10345459,
    -0.34643555,
    -0.20788574,
    -0.021072388,
    0.13745117,
    -0.05102539,
    0.024536133,
    -0.16479492,
    -0.19519043,
    0.27270508,
    0.17700195,
    -0.33764648,
    -0.08239746,
    -0.27929688,
    0.17321777,
    -0.1315918,
    0.04574585,
    -0.17980957,
    -0.33569336,
    0.27612305,
    0.30004883,
    -0.28979492,
    -0.17297363,
    -0.021759033,
    -0.27148438,
    0.005657196,
    0.29956055,
    -0.06958008,
    -0.29345703,
    -0.14440918,
    0.10827637,
    -0.13305664,
    -0.20239258,
    0.24890137,
    -0.1541748,
    -0.20019531,
    -0.2854004,
    0.17016602,
    0.07861328,
    -0.09075928,
    0.30908203,
    -0.00013422966,
    0.29589844,
    0.15258789,
    -0.25708008,
    0.20422363,
    -0.2529297,
    0.07891846,
    -0.19506836,
    0.23571777,
    0.27124023,
    0.17370605,
    -0.16992188,
    -0.23522949,
    0.14648438,
    -0.09576416,
    -0.18310547,
    0.21044922,
    -0.08911133,
    -0.2541504,
    -0.2775879,
    -0.2064209,
    -0.16271973,
    -0.048919678,
    -0.03555298,
    -0.11639404,
    0.09661865,
    -0.10241699,
    0.08929443,
    0.2866211,
]


def test_conv2d_binary_broadcasted():
    # conv2d -> batch norm written as broadcast binary ops -> gelu, on a constant input
    x = rg.full((1, 1, 28, 28), -0.42421296)
    weight = rg.tensor(CONV2D_WEIGHT).reshape((8, 1, 3, 3))
    bias = rg.tensor(
        [
            0.082336426,
            -0.049591064,
            0.0031795502,
            0.00095653534,
            0.02357483,
            0.005569458,
            0.07525635,
            0.056396484,
        ]
    )
    x = F.conv2d(x, weight, bias, stride=1, padding=0, dilation=1, groups=1)
    gamma = rg.tensor(
        [1.0048828, 0.9902344, 1.0185547, 0.97558594, 1.0097656, 0.97802734, 1.0009766, 1.0146484]
    )
    beta = rg.tensor(
        [
            0.026290894,
            0.0007505417,
            0.006134033,
            0.02418518,
            0.07373047,
            0.020507813,
            0.01902771,
            0.02003479,
        ]
    )
    mean = rg.tensor(
        [
            0.029159546,
            -0.08673096,
            -0.03894043,
            -0.01108551,
            0.032440186,
            0.03237915,
            0.013839722,
            0.04397583,
        ]
    ).reshape([1, 8, 1, 1])
    var = rg.tensor(
        [
            0.67089844,
            0.29956055,
            0.5209961,
            0.1862793,
            0.30419922,
            0.21313477,
            0.7504883,
            0.26342773,
        ]
    ).reshape([1, 8, 1, 1])
    std = var.add_scalar(1e-5).sqrt()
    x = x.sub(mean).div(std).mul(gamma.reshape([1, 8, 1, 1])).add(beta.reshape([1, 8, 1, 1]))
    out = x.gelu()
    per_channel = [
        0.36432067,
        0.34909567,
        0.30684796,
        0.13217466,
        -0.018471397,
        -0.1389876,
        0.39402074,
        0.12394252,
    ]
    expected = np.broadcast_to(np.asarray(per_channel)[None, :, None, None], (1, 8, 26, 26))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-2, atol=1e-5)


# ---- attention.rs: Burn compares its attention with attention_fallback on random inputs;
# here F.scaled_dot_product_attention (API.md section 8, torch's meaning) is compared with
# that fallback written in NumPy. Differences from Burn's API: Burn's bool mask is true where
# a key is hidden, torch's where it is kept (so the ports pass ~mask); Burn takes a mask and a
# bias together, torch one attn_mask (the ports fold them into one float mask); Burn's causal
# mask is bottom-right aligned when seq_q != seq_k, torch's (and API.md's) top-left, so the
# cross-attention port builds Burn's mask by hand; torch has no softcap (not ported), and
# torch refuses attn_mask with is_causal=True (as retrograd does), so those ports fold the
# causal mask into attn_mask. ---------------------------------------------------------------

RNG = np.random.default_rng(4325)


def uniform(shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def attention_fallback(q, k, v, hidden=None, bias=None, scale=None, causal=False):
    """Burn's attention_fallback in float64: ``hidden`` true where a key is masked; causal
    bottom-right aligned; a fully masked row gives zeros."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if hidden is not None:
        scores = np.where(hidden, -np.inf, scores)
    if causal:
        seq_q, seq_k = scores.shape[-2:]
        future = np.arange(seq_k)[None, :] > np.arange(seq_q)[:, None] + (seq_k - seq_q)
        scores = np.where(future, -np.inf, scores)
    if bias is not None:
        scores = scores + bias
    peak = np.maximum(scores.max(-1, keepdims=True), np.finfo(np.float64).min)
    numerator = np.exp(scores - peak)
    return numerator / np.maximum(numerator.sum(-1, keepdims=True), 1e-300) @ v


def sdpa(q, k, v, **kwargs):
    return F.scaled_dot_product_attention(rg.tensor(q), rg.tensor(k), rg.tensor(v), **kwargs)


def close_to(out, expected):
    np.testing.assert_allclose(np.asarray(out, dtype=np.float64), expected, rtol=1e-2, atol=1e-3)


def test_attention_no_mask_and_scale():
    q, k, v = (uniform((1, 1, 128, 64), 0.0, 1.0) for _ in range(3))
    close_to(sdpa(q, k, v), attention_fallback(q, k, v))
    q, k, v = (uniform((1, 2, 16, 32)) for _ in range(3))
    close_to(sdpa(q, k, v, scale=0.1), attention_fallback(q, k, v, scale=0.1))


def test_attention_bias_and_causal():
    q, k, v = (uniform((1, 2, 16, 32)) for _ in range(3))
    bias = uniform((1, 2, 16, 16), -0.5, 0.5)
    close_to(sdpa(q, k, v, attn_mask=rg.tensor(bias)), attention_fallback(q, k, v, bias=bias))
    q, k, v = (uniform((2, 4, 16, 32)) for _ in range(3))
    close_to(sdpa(q, k, v, is_causal=True), attention_fallback(q, k, v, causal=True))
    for shape in ((1, 1, 16, 16), (2, 1, 16, 16)):
        q, k, v = (uniform((2, 3, 16, 32)) for _ in range(3))
        bias = uniform(shape, -0.5, 0.5)
        close_to(sdpa(q, k, v, attn_mask=rg.tensor(bias)), attention_fallback(q, k, v, bias=bias))


def test_attention_cross_attention_with_bias():
    q = uniform((2, 2, 8, 32))
    k, v = uniform((2, 2, 24, 32)), uniform((2, 2, 24, 32))
    bias = uniform((2, 2, 8, 24), -0.5, 0.5)
    future = np.arange(24)[None, :] > np.arange(8)[:, None] + 16  # Burn's bottom-right mask
    folded = np.where(future, -np.inf, bias).astype(np.float32)
    close_to(
        sdpa(q, k, v, attn_mask=rg.tensor(folded)),
        attention_fallback(q, k, v, bias=bias, causal=True),
    )
    # attn_mask with is_causal: both apply, the causal mask top-left aligned (torch's fused
    # CPU path; tests/test_attention_mask_and_causal.py compares with torch itself)
    top_left_future = np.arange(24)[None, :] > np.arange(8)[:, None]
    close_to(
        sdpa(q, k, v, attn_mask=rg.tensor(bias), is_causal=True),
        attention_fallback(q, k, v, hidden=top_left_future, bias=bias),
    )


def test_attention_fully_masked_rows_are_zero():
    q, k, v = (uniform((1, 1, 4, 8)) for _ in range(3))
    out = sdpa(q, k, v, attn_mask=rg.zeros((1, 1, 4, 4), dtype="bool")).numpy()
    assert not np.isnan(out).any() and (np.abs(out) < 1e-4).all()
    hidden = np.zeros((1, 1, 4, 4), dtype=bool)
    hidden[..., 0] = True
    keep = ~hidden & np.tril(np.ones((4, 4), dtype=bool))
    out = sdpa(q, k, v, attn_mask=rg.tensor(keep)).numpy()
    assert not np.isnan(out).any()
    assert (np.abs(out[0, 0, 0]) < 1e-4).all()
    assert (np.abs(out[0, 0, 1:]) > 1e-4).any()
    close_to(out, attention_fallback(q, k, v, hidden=hidden, causal=True))


def test_attention_mask_bias_scale_causal_together():
    q, k, v = (uniform((2, 2, 16, 32)) for _ in range(3))
    bias = uniform((2, 2, 16, 16), -0.5, 0.5)
    hidden = uniform((2, 2, 16, 16), 0.0, 1.0) > 0.7
    hidden[..., 0] = False  # keep every row attending somewhere, as a float mask needs
    causal = np.tril(np.ones((16, 16), dtype=bool))
    folded = np.where(hidden | ~causal, -np.inf, bias).astype(np.float32)
    close_to(
        sdpa(q, k, v, attn_mask=rg.tensor(folded), scale=0.05),
        attention_fallback(q, k, v, hidden=hidden, bias=bias, scale=0.05, causal=True),
    )
    q, k, v = (uniform((2, 3, 16, 32)) for _ in range(3))
    hidden = uniform((1, 1, 16, 16), 0.0, 1.0) > 0.7
    close_to(
        sdpa(q, k, v, attn_mask=rg.tensor(~hidden)), attention_fallback(q, k, v, hidden=hidden)
    )


# ---- burn-nn's loss tests (crates/burn-nn/src/loss/{cross_entropy,mse}.rs): Burn's
# CrossEntropyLossConfig options as F.cross_entropy's torch arguments (weights -> weight,
# smoothing -> label_smoothing). Its pad_tokens divide by the whole batch, torch's
# ignore_index by the kept rows, so they are not ported. -------------------------------------

CE_TARGETS = [2, 0, 4, 1]
CE_ONE_HOT = np.eye(5, dtype=np.float32)[CE_TARGETS]


def log_softmax_np(x):
    x = np.asarray(x, dtype=np.float64)
    shifted = x - x.max(1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(1, keepdims=True))


def test_cross_entropy_index_and_probability_targets():
    logits = RNG.normal(0.0, 1.0, (4, 5)).astype(np.float32)
    by_index = F.cross_entropy(rg.tensor(logits), rg.tensor(CE_TARGETS))
    by_probs = F.cross_entropy(rg.tensor(logits), rg.tensor(CE_ONE_HOT))
    expected = -(log_softmax_np(logits) * CE_ONE_HOT).sum(1).mean()
    np.testing.assert_allclose(by_index.item(), expected, rtol=5e-3, atol=1e-5)
    np.testing.assert_allclose(by_probs.item(), expected, rtol=5e-3, atol=1e-5)
    np.testing.assert_allclose(
        rg.nn.CrossEntropyLoss()(rg.tensor(logits), rg.tensor(CE_TARGETS)).item(),
        expected,
        rtol=5e-3,
        atol=1e-5,
    )


def test_cross_entropy_weights_and_smoothing():
    logits = RNG.normal(0.0, 1.0, (4, 5)).astype(np.float32)
    weights = np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32)
    loss = F.cross_entropy(rg.tensor(logits), rg.tensor(CE_TARGETS), weight=rg.tensor(weights))
    expected = -(log_softmax_np(logits) * CE_ONE_HOT * weights).sum() / (1.0 + 2.0 + 3.0 + 5.0)
    np.testing.assert_allclose(loss.item(), expected, rtol=5e-3, atol=1e-5)
    zero = F.cross_entropy(
        rg.tensor(logits), rg.tensor(CE_TARGETS), weight=rg.tensor(weights), label_smoothing=0.0
    )
    np.testing.assert_allclose(zero.item(), loss.item(), rtol=1e-6)
    smoothed = np.array(
        [
            [0.01, 0.01, 0.96, 0.01, 0.01],
            [0.96, 0.01, 0.01, 0.01, 0.01],
            [0.01, 0.01, 0.01, 0.01, 0.96],
            [0.01, 0.96, 0.01, 0.01, 0.01],
        ]
    )
    loss = F.cross_entropy(rg.tensor(logits), rg.tensor(CE_TARGETS), label_smoothing=0.05)
    expected = -(log_softmax_np(logits) * smoothed).sum(1).mean()
    np.testing.assert_allclose(loss.item(), expected, rtol=5e-3, atol=1e-5)


def test_cross_entropy_of_probabilities_as_logits():
    probs = rg.tensor(
        [
            [0.1, 0.2, 0.7, 0.0, 0.0],
            [0.7, 0.1, 0.1, 0.1, 0.0],
            [0.2, 0.2, 0.2, 0.2, 0.2],
            [0.0, 0.3, 0.3, 0.2, 0.2],
        ]
    )
    loss = F.cross_entropy(probs, rg.tensor(CE_TARGETS))
    np.testing.assert_allclose(loss.item(), 1.354197, rtol=5e-3)
    # Burn's logits=false form is torch's negative log-likelihood of the log-probabilities
    nll = F.nll_loss(probs.clamp_min(1e-8).log(), rg.tensor(CE_TARGETS))
    np.testing.assert_allclose(nll.item(), 0.88169014, rtol=5e-3)


def test_mse_loss():
    logits = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    targets = rg.tensor([[2.0, 1.0], [3.0, 2.0]])
    np.testing.assert_array_equal(
        F.mse_loss(logits, targets, reduction="none").numpy(), [[1.0, 1.0], [0.0, 4.0]]
    )
    assert F.mse_loss(logits, targets).item() == 1.5
    assert F.mse_loss(logits, targets, reduction="sum").item() == 6.0
    assert rg.nn.MSELoss()(logits, targets).item() == 1.5


# ---- unfold4d.rs, fold4d.rs: Burn's unfold4d/fold4d are torch's F.unfold/F.fold ------------------


def test_unfold4d():
    out = F.unfold(arange(2, 5, 3, 4), (2, 3), dilation=1, padding=0, stride=1)
    assert out.shape == (2, 30, 4)
    out = F.unfold(arange(1, 2, 4, 4), (2, 2), dilation=1, padding=0, stride=1)
    np.testing.assert_allclose(
        out.numpy(),
        [
            [
                [0, 1, 2, 4, 5, 6, 8, 9, 10],
                [1, 2, 3, 5, 6, 7, 9, 10, 11],
                [4, 5, 6, 8, 9, 10, 12, 13, 14],
                [5, 6, 7, 9, 10, 11, 13, 14, 15],
                [16, 17, 18, 20, 21, 22, 24, 25, 26],
                [17, 18, 19, 21, 22, 23, 25, 26, 27],
                [20, 21, 22, 24, 25, 26, 28, 29, 30],
                [21, 22, 23, 25, 26, 27, 29, 30, 31],
            ]
        ],
        rtol=5e-3,
    )
    out = F.unfold(arange(1, 2, 3, 4), (2, 3), dilation=(1, 2), padding=(0, 1), stride=(1, 2))
    np.testing.assert_allclose(
        out.numpy(),
        [
            [
                [0, 0],
                [1, 5],
                [3, 7],
                [0, 0],
                [5, 9],
                [7, 11],
                [0, 0],
                [13, 17],
                [15, 19],
                [0, 0],
                [17, 21],
                [19, 23],
            ]
        ],
        rtol=5e-3,
    )


def test_fold4d():
    def columns(batch, channels, kernel, padding, stride, size):
        blocks = math.prod(
            (size[i] + 2 * padding[i] - (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)
        )
        return arange(batch, channels * kernel[0] * kernel[1], blocks)

    cols = columns(2, 3, (2, 2), (1, 1), (2, 2), (3, 3))
    assert F.fold(cols, (3, 3), (2, 2), padding=(1, 1), stride=(2, 2)).shape == (2, 3, 3, 3)
    cols = columns(1, 1, (2, 2), (1, 1), (2, 2), (3, 3))
    np.testing.assert_allclose(
        F.fold(cols, (3, 3), (2, 2), padding=(1, 1), stride=(2, 2)).numpy(),
        [[[[12, 9, 13], [6, 3, 7], [14, 11, 15]]]],
        rtol=5e-3,
    )
    cols = columns(1, 1, (2, 2), (0, 0), (2, 2), (4, 4))
    np.testing.assert_allclose(
        F.fold(cols, (4, 4), (2, 2), padding=0, stride=(2, 2)).numpy(),
        [[[[0, 4, 1, 5], [8, 12, 9, 13], [2, 6, 3, 7], [10, 14, 11, 15]]]],
        rtol=5e-3,
    )


# ---- ctc.rs: Burn's ctc_loss(log_probs, targets, input_lengths, target_lengths, blank) is
# torch's F.ctc_loss(..., blank, reduction="none") -------------------------------------------------


def ctc(log_probs, targets, input_lengths, target_lengths):
    return F.ctc_loss(
        log_probs,
        rg.tensor(targets),
        rg.tensor(input_lengths),
        rg.tensor(target_lengths),
        blank=0,
        reduction="none",
    )


def sine_logits(t, n, c, mix=(7, 13, 3)):
    a, b, k = mix
    idx = np.arange(t)[:, None, None] * a + np.arange(n)[None, :, None] * b
    return rg.tensor(np.sin((idx + np.arange(c)[None, None, :] * k) * 0.1).astype(np.float32))


def test_ctc_loss_small_cases():
    out = ctc(rg.full((2, 1, 3), math.log(1.0 / 3.0)), [[1, 1]], [2], [2]).numpy()
    assert np.isposinf(out[0])
    for target, length in (([[0]], 0), ([[1, 1]], 2)):
        out = ctc(rg.full((3, 1, 2), math.log(0.5)), target, [3], [length])
        np.testing.assert_allclose(out.numpy(), [3.0 * math.log(2.0)], rtol=1e-3, atol=1e-3)


def test_ctc_loss_matches_pytorch():
    log_probs = sine_logits(5, 3, 4).log_softmax(2)
    out = ctc(log_probs, [[1, 2, 0], [1, 0, 0], [3, 2, 1]], [5, 5, 5], [2, 1, 3])
    np.testing.assert_allclose(
        out.numpy(),
        [3.5236570835113525, 3.495313882827759, 4.262677192687988],
        rtol=1e-3,
        atol=1e-3,
    )


def test_ctc_loss_long_sequences():
    for t, lengths, max_target, cut in ((400, [400, 400], 60, 40), (494, [494, 390], 64, 43)):
        log_probs = sine_logits(t, 2, 36).log_softmax(2)
        first = [i % 35 + 1 for i in range(max_target)]
        second = [i % 35 + 1 if i < cut else 0 for i in range(max_target)]
        out = ctc(log_probs, [first, second], lengths, [max_target, cut]).numpy()
        assert np.isfinite(out).all() and (out > 10.0).all() and (out < 10000.0).all()


def test_ctc_loss_of_strided_log_probs():
    full = sine_logits(10, 1, 4).log_softmax(2)
    narrowed = full.narrow(0, 3, 7)
    reference = rg.tensor(np.ascontiguousarray(np.asarray(full)[3:10]))
    a = ctc(narrowed, [[1, 2]], [7], [2]).numpy()
    b = ctc(reference, [[1, 2]], [7], [2]).numpy()
    np.testing.assert_allclose(a, b, atol=1e-3)
    btc = sine_logits(2, 8, 4, mix=(31, 7, 3)).log_softmax(2)  # [b, t, c]
    narrowed = btc.swap_dims(0, 1).narrow(0, 2, 6)
    reference = rg.tensor(np.ascontiguousarray(np.asarray(btc).swapaxes(0, 1)[2:8]))
    a = ctc(narrowed, [[1, 2], [2, 3]], [6, 6], [2, 2]).numpy()
    b = ctc(reference, [[1, 2], [2, 3]], [6, 6], [2, 2]).numpy()
    np.testing.assert_allclose(a, b, atol=1e-3)
