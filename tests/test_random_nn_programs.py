"""Random convolutional programs: values and gradients equal PyTorch's, bit-identical under
both checkpointing strategies.

Each program is a chain of layers on a ``[2, C, H, W]`` input: convolutions (random kernel,
stride, padding, dilation, groups), transposed convolutions, pooling, interpolation,
activations and layout-changing tensor ops (spatial transposes, channel flips, slices), so
that the kernels meet inputs in every memory layout the others produce. The loss is a
weighted sum of every layer's output; the gradients of the input and of every weight are
compared.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from backends import inner_backend

LAYERS = [
    "conv",
    "conv_transpose",
    "relu",
    "gelu",
    "tanh",
    "max_pool",
    "avg_pool",
    "interpolate",
    "swap_hw",
    "flip_channels",
    "slice",
]


def plan(layers, seed):
    """Concrete layers (with their weights) for a ``[2, 3, 9, 8]`` input; layers whose
    arguments do not fit the current shape are skipped, so every plan is valid."""
    rng = np.random.default_rng(seed)
    c, h, w = 3, 9, 8
    steps = []
    for name in layers:
        if name == "conv":
            k = int(rng.integers(1, 4))
            dilation = int(rng.integers(1, 3))
            padding = int(rng.integers(0, 2))
            stride = int(rng.integers(1, 3))
            extent = dilation * (k - 1) + 1
            if min(h, w) + 2 * padding < extent:
                continue
            groups = int(rng.choice([g for g in (1, 2, 3) if c % g == 0]))
            out = groups * int(rng.integers(1, 3))
            weight = rng.standard_normal((out, c // groups, k, k)) / np.sqrt(c * k * k)
            bias = rng.standard_normal(out) * 0.1
            options = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
            steps.append(("conv", (weight, bias), options))
            c = out
            h = (h + 2 * padding - extent) // stride + 1
            w = (w + 2 * padding - extent) // stride + 1
        elif name == "conv_transpose":
            if max(h, w) > 12:
                continue
            out = int(rng.integers(1, 4))
            weight = rng.standard_normal((c, out, 2, 2)) / np.sqrt(c * 4)
            steps.append(("conv_transpose", (weight,), dict(stride=2)))
            c, h, w = out, 2 * h, 2 * w
        elif name in ("max_pool", "avg_pool"):
            if min(h, w) < 2:
                continue
            ceil_mode = bool(rng.integers(0, 2))
            steps.append((name, (), dict(kernel_size=2, ceil_mode=ceil_mode)))
            h, w = ((h + 1) // 2, (w + 1) // 2) if ceil_mode else (h // 2, w // 2)
        elif name == "interpolate":
            if max(h, w) > 10:
                continue
            mode = str(rng.choice(["bilinear", "bicubic", "nearest"]))
            steps.append(("interpolate", (), dict(size=(h + 1, w + 2), mode=mode)))
            h, w = h + 1, w + 2
        elif name == "swap_hw":
            steps.append(("swap_hw", (), {}))
            h, w = w, h
        elif name == "slice":
            if h < 3:
                continue
            steps.append(("slice", (), {}))
            h -= 1
        else:
            steps.append((name, (), {}))
    return steps


def run(steps, x, weights, weights_out, api):
    """The program on ``api`` (``"rg"`` or ``"torch"``): the weighted sum of every output."""
    nnf = F if api == "rg" else __import__("torch").nn.functional
    loss = None
    for (name, _, options), params, seed in zip(steps, weights, weights_out):
        if name == "conv":
            x = nnf.conv2d(x, *params, **options)
        elif name == "conv_transpose":
            x = nnf.conv_transpose2d(x, *params, **options)
        elif name == "max_pool":
            x = nnf.max_pool2d(x, **options)
        elif name == "avg_pool":
            x = nnf.avg_pool2d(x, **options)
        elif name == "interpolate":
            corners = None if options["mode"] == "nearest" else False
            x = nnf.interpolate(x, **options, align_corners=corners)
        elif name == "swap_hw":
            x = x.swap_dims(2, 3) if api == "rg" else x.transpose(2, 3)
        elif name == "flip_channels":
            x = x.flip((1,)) * 0.5 + x
        elif name == "slice":
            x = x[:, :, 1:, :]
        elif name in ("relu", "tanh"):
            x = getattr(x, name)()
        else:  # gelu
            x = x.gelu() if api == "rg" else nnf.gelu(x)
        term = (x * seed).sum()
        loss = term if loss is None else loss + term
    return loss


def retrograd_gradients(steps, x_array, strategy):
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        x = rg.tensor(x_array).require_grad()
        weights = [[rg.tensor(p).require_grad() for p in params] for _, params, _ in steps]
        seeds = shapes_seeds(steps, x_array)
        loss = run(steps, x, weights, [rg.tensor(s) for s in seeds], "rg")
        grads = loss.backward()
        return float(loss.item()), [x.grad(grads).numpy()] + [
            p.grad(grads).numpy() for params in weights for p in params
        ]


def shapes_seeds(steps, x_array):
    """The loss weights of every layer's output (shapes found by running the layers)."""
    rng = np.random.default_rng(len(steps))
    seeds = []
    with rg.use_backend(inner_backend()):
        x = rg.tensor(x_array)
        for name, params, options in steps:
            x = reshape_only(name, params, options, x)
            seeds.append(rng.standard_normal(x.shape))
    return seeds


def reshape_only(name, params, options, x):
    """One layer, for its output shape (layers that keep the shape are skipped)."""
    if name == "conv":
        return F.conv2d(x, *[rg.tensor(p) for p in params], **options)
    if name == "conv_transpose":
        return F.conv_transpose2d(x, *[rg.tensor(p) for p in params], **options)
    if name == "max_pool":
        return F.max_pool2d(x, **options)
    if name == "avg_pool":
        return F.avg_pool2d(x, **options)
    if name == "interpolate":
        return F.interpolate(x, size=options["size"])
    if name == "swap_hw":
        return x.swap_dims(2, 3)
    if name == "slice":
        return x[:, :, 1:, :]
    return x


layer_lists = st.lists(st.sampled_from(LAYERS), min_size=1, max_size=7)


@settings(max_examples=40, deadline=None)
@given(layers=layer_lists, seed=st.integers(0, 2**31 - 1))
def test_random_conv_programs_match_torch_and_strategies(layers, seed):
    torch = pytest.importorskip("torch")
    steps = plan(layers, seed)
    if not steps:
        return
    x_array = np.random.default_rng(seed).standard_normal((2, 3, 9, 8))
    value, plain = retrograd_gradients(steps, x_array, rg.NoCheckpointing())
    _, balanced = retrograd_gradients(steps, x_array, rg.BalancedCheckpointing())
    for a, b in zip(plain, balanced):
        assert np.array_equal(a, b)

    x = torch.tensor(x_array, requires_grad=True)
    weights = [[torch.tensor(p, requires_grad=True) for p in params] for _, params, _ in steps]
    seeds = [torch.tensor(s) for s in shapes_seeds(steps, x_array)]
    loss = run(steps, x, weights, seeds, "torch")
    loss.backward()
    np.testing.assert_allclose(value, loss.item(), rtol=1e-10)
    expected = [x.grad] + [p.grad for params in weights for p in params]
    for ours, theirs in zip(plain, expected):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-8, atol=1e-10)
