"""burn-nn's tests beside its code (tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747)
not ported before: ``crates/burn-nn/src/activation/activation_wrapper.rs``,
``src/modules/norm/normalization_wrapper.rs``, ``src/modules/pool/{max,avg}_pool{1,2}d.rs``,
``src/modules/norm/group.rs``'s half-precision case, ``src/padding.rs`` and the argument checks
of ``src/modules/conv/*.rs`` (their sections below say how Burn's configs map to torch's).
Burn checks that its ``Activation``/``Normalization`` enums give what the wrapped module gives;
their torch counterparts are the ``rg.nn`` modules themselves, so each case runs the module on
Burn's input and checks the output and the gradients (input and parameters) against the same
torch module, under every checkpointing strategy on the chosen inner backend. Burn's inputs put
points on the kinks (``0`` for ReLU, PReLU, LeakyReLU, ``+-0.5`` for the shrinks) and make every
norm's variance zero (inputs of ones), which is where the subgradient and ``eps`` conventions
show.

Burn's configs map to torch's modules with Burn's defaults: ``LeakyReluConfig`` slope 0.01,
``PReluConfig`` one parameter at 0.25, ``EluConfig``/``CeluConfig`` alpha 1, ``SoftplusConfig``
beta 1, ``ThresholdedReluConfig`` alpha 1 (``nn.Threshold(1.0, 0.0)``),
``HardShrinkConfig``/``SoftShrinkConfig`` lambda 0.5, ``GeluApproximate`` ``approximate="tanh"``;
``InstanceNormConfig`` is affine (torch's ``affine=True``), ``RmsNormConfig``'s eps is 1e-5.
Burn's ``HardSigmoid`` (alpha 0.2, not torch's 1/6) is checked against its formula; its
``SwiGlu`` and ``Shrink`` have no torch module (``test_burn_tensor_ports_10`` has SwiGLU's
formula), and ``test_match_feature_size`` is a config accessor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import backends
import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)

BURN_INPUT = np.array([[-1.0, -0.5, 0.0], [1.0, 0.5, 0.0]], dtype=np.float32)


def close(actual, expected, tol=1e-5):
    assert actual is not None, "expected a gradient, got None"
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=tol, atol=tol)


def output_weights(shape):
    """Distinct weights for ``(module(x) * w).sum()``: every output's gradient differs."""
    return np.linspace(-1.0, 2.0, int(np.prod(shape)), dtype=np.float32).reshape(shape)


def compare_with_torch(make, base, tol=1e-5):
    """``make(nn)`` (``nn`` is ``rg.nn`` or ``torch.nn``) on ``base``: the outputs and the
    gradients of ``(out * w).sum()`` for the input and each parameter, retrograd's against
    torch's."""
    module, reference = make(rg.nn), make(torch.nn)
    x = rg.tensor(base).require_grad()
    out = module(x)
    w = output_weights(out.shape)
    grads = (out * rg.tensor(w)).sum().backward()
    tx = torch.tensor(base, requires_grad=True)
    expected = reference(tx)
    (expected * torch.tensor(w)).sum().backward()
    close(out, expected.detach().numpy(), tol)
    close(x.grad(grads), tx.grad.numpy(), tol)
    params = dict(module.named_parameters())
    reference_params = dict(reference.named_parameters())
    assert params.keys() == reference_params.keys()
    for name, param in params.items():
        close(param.grad(grads), reference_params[name].grad.numpy(), tol)


ACTIVATIONS = {
    "identity": lambda nn: nn.Identity(),
    "gelu": lambda nn: nn.GELU(),
    "gelu_approximate": lambda nn: nn.GELU(approximate="tanh"),
    "prelu": lambda nn: nn.PReLU(),
    "relu": lambda nn: nn.ReLU(),
    "leaky_relu": lambda nn: nn.LeakyReLU(0.01),
    "selu": lambda nn: nn.SELU(),
    "sigmoid": lambda nn: nn.Sigmoid(),
    "tanh": lambda nn: nn.Tanh(),
    "softsign": lambda nn: nn.Softsign(),
    "elu": lambda nn: nn.ELU(1.0),
    "softplus": lambda nn: nn.Softplus(1.0),
    "celu": lambda nn: nn.CELU(1.0),
    "thresholded_relu": lambda nn: nn.Threshold(1.0, 0.0),
    "hard_shrink": lambda nn: nn.Hardshrink(0.5),
    "soft_shrink": lambda nn: nn.Softshrink(0.5),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_wrapper(name):
    compare_with_torch(ACTIVATIONS[name], BURN_INPUT)


def test_activation_wrapper_prelu_weight_gradient_at_zero():
    # PReLU's weight collects x where x <= 0: the zeros add nothing, as in torch
    compare_with_torch(lambda nn: nn.PReLU(3, 0.1), np.tile(BURN_INPUT, (2, 1)))


def test_activation_wrapper_hard_sigmoid():
    # Burn's HardSigmoidConfig::new(): clamp(0.2 x + 0.5, 0, 1), whose slope is 0.2 inside
    # and 0 where it clamps (+-3 here)
    base = BURN_INPUT * 3.0
    x = rg.tensor(base).require_grad()
    out = F.hard_sigmoid(x)
    close(out, np.clip(0.2 * base + 0.5, 0.0, 1.0))
    w = output_weights(out.shape)
    inside = np.abs(0.2 * base) < 0.5
    close(x.grad((out * rg.tensor(w)).sum().backward()), np.where(inside, w * 0.2, 0.0))


NORMALIZATIONS = {
    # (module, input shape): Burn's inputs are ones, channels second for batch/group/instance
    # norm and last for layer/RMS norm
    "batch_norm": (lambda nn: nn.BatchNorm2d(12), (2, 12, 3, 4)),
    "group_norm": (lambda nn: nn.GroupNorm(3, 12), (2, 12, 3, 4)),
    "instance_norm": (lambda nn: nn.InstanceNorm2d(12, affine=True), (2, 12, 3, 4)),
    "layer_norm": (lambda nn: nn.LayerNorm(12), (2, 3, 4, 12)),
    "rms_norm": (lambda nn: nn.RMSNorm(12, eps=1e-5), (2, 3, 4, 12)),
    "identity_norm": (lambda nn: nn.Identity(), (2, 12, 3, 4)),
}


@pytest.mark.parametrize("name", list(NORMALIZATIONS))
def test_normalization_wrapper_on_a_constant_input(name):
    make, shape = NORMALIZATIONS[name]
    # a zero variance: the input gradient is (g - mean g) / sqrt(eps), hundreds of times g
    compare_with_torch(make, np.ones(shape, dtype=np.float32), 1e-4)


@pytest.mark.parametrize("name", list(NORMALIZATIONS))
def test_normalization_wrapper_on_a_varied_input(name):
    make, shape = NORMALIZATIONS[name]
    base = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
    compare_with_torch(make, base, 1e-4)


# ---- burn-nn src/modules/pool/{max,avg}_pool{1,2}d.rs and src/padding.rs -------------------------
# Burn's PaddingConfig (Valid, Same, Explicit) maps to torch's padding argument where torch has
# one (``"valid"``, ``"same"`` for convolutions, a symmetric int or tuple) and to ``F.pad`` before
# the op otherwise (Burn's asymmetric Explicit(top, left, bottom, right) and an even kernel's Same,
# which pads one more at the end): max pools pad with -inf, as Burn's do, average pools with
# zeros that count (Burn's count_include_pad default). Burn's pools accept a padding over half
# the kernel; torch's (API.md's) refuse it, so that case checks the error.


class ModuleOf:
    """A callable as a module without parameters, for ``compare_with_torch``."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x):
        return self.fn(x)

    def named_parameters(self):
        return iter(())


POOLS = ["MaxPool1d", "AvgPool1d", "MaxPool2d", "AvgPool2d"]


def pool_input(name, batch_shape=(1, 2)):
    spatial = (4, 5) if name.endswith("2d") else (5,)
    return np.arange(np.prod(batch_shape + spatial), dtype=np.float32).reshape(
        batch_shape + spatial
    )


@pytest.mark.parametrize("name", POOLS)
def test_pool_default_stride_is_the_kernel(name):
    # default_strides_match_kernel_size: [2, 2] and [1, 2] in 2-d (each dimension's own), 2 in 1-d
    # (stored as torch stores it: AvgPool1d keeps the one-element tuple (2,))
    kernel_size = 2 if name.endswith("1d") else (1, 2)
    stride = getattr(rg.nn, name)(kernel_size).stride
    assert stride == getattr(torch.nn, name)(kernel_size).stride
    assert stride in (kernel_size, (kernel_size,))
    compare_with_torch(lambda nn: getattr(nn, name)(kernel_size), pool_input(name))


def padded_pool(nn, name, pad, kernel=3):
    """Burn's pool with an explicit (possibly asymmetric) padding: ``F.pad`` then the pool."""
    functional = F if nn is rg.nn else torch.nn.functional
    value = -float("inf") if name.startswith("Max") else 0.0
    pool = getattr(nn, name)(kernel, stride=1)
    return lambda x: pool(functional.pad(x, pad, value=value))


@pytest.mark.parametrize("name", POOLS)
def test_pool_asymmetric_and_symmetric_explicit_padding(name):
    # asymmetric_padding_forward: top=1, left=2, bottom=3, right=4 on [1, 2, 4, 5] -> [1, 2, 6, 9]
    # (1-d: left=1, right=2 on length 5 -> 6); symmetric_explicit_padding_forward: 2 all round ->
    # [1, 2, 6, 7] (1-d: 7)
    two_d = name.endswith("2d")
    cases = [((2, 4, 1, 3), (1, 2, 6, 9)), ((2, 2, 2, 2), (1, 2, 6, 7))]
    if not two_d:
        cases = [((1, 2), (1, 2, 6)), ((2, 2), (1, 2, 7))]
    for pad, shape in cases:
        assert padded_pool(rg.nn, name, pad)(rg.ones(pool_input(name).shape)).shape == shape
        compare_with_torch(
            lambda nn, pad=pad: ModuleOf(padded_pool(nn, name, pad)), pool_input(name)
        )
    # Burn pads 2 inside the pool; torch's pools refuse more than half the kernel
    with pytest.raises(rg.ShapeError, match="must be at most half the kernel"):
        getattr(rg.nn, name)(3, stride=1, padding=2)(rg.tensor(pool_input(name)))


@pytest.mark.parametrize("name", ["MaxPool2d", "AvgPool2d"])
def test_pool_same_padding_with_an_even_kernel(name):
    # same_with_even_kernel_uses_asymmetric_padding: kernel [2, 2], stride 1, Same on
    # [1, 2, 5, 5] keeps [5, 5] by padding one at the bottom and right
    base = np.random.default_rng(5).standard_normal((1, 2, 5, 5)).astype(np.float32)
    assert padded_pool(rg.nn, name, (0, 1, 0, 1), 2)(rg.tensor(base)).shape == (1, 2, 5, 5)
    compare_with_torch(lambda nn: ModuleOf(padded_pool(nn, name, (0, 1, 0, 1), 2)), base)


@pytest.mark.parametrize(
    "conv, padding, spatial",
    [
        # padding.rs: PaddingConfig1d::Valid / Explicit(1, 2) / Same (kernel 3, stride 1,
        # length 10: (1, 1)); PaddingConfig2d::Valid / Explicit(1, 2, 3, 4) (pairs (1, 3) and
        # (2, 4)) / Explicit(2, 3, 2, 3) (symmetric [2, 3]); PaddingConfig3d::Valid /
        # Explicit(1, 2, 3) / Same (odd kernel: [1, 1, 1])
        ("Conv1d", "valid", (10,)),
        ("Conv1d", (1, 2), (10,)),
        ("Conv1d", "same", (10,)),
        ("Conv2d", "valid", (6, 7)),
        ("Conv2d", (2, 4, 1, 3), (6, 7)),
        ("Conv2d", (2, 3), (6, 7)),
        ("Conv3d", "valid", (4, 5, 6)),
        ("Conv3d", (1, 2, 3), (4, 5, 6)),
        ("Conv3d", "same", (4, 5, 6)),
    ],
    ids=str,
)
def test_padding_configs(conv, padding, spatial):
    n = len(spatial)
    base = np.random.default_rng(7).standard_normal((1, 2) + spatial).astype(np.float32)
    asymmetric = isinstance(padding, tuple) and len(padding) == 2 * n

    def make(nn):
        torch.manual_seed(0)
        layer = getattr(torch.nn, conv)(2, 3, 3, padding=0 if asymmetric else padding)
        module = getattr(nn, conv)(2, 3, 3, padding=0 if asymmetric else padding)
        if nn is rg.nn:
            module.load_state_dict({k: v.detach().numpy() for k, v in layer.state_dict().items()})
        else:
            module = layer
        if not asymmetric:
            return module
        functional = F if nn is rg.nn else torch.nn.functional
        wrapped = ModuleOf(lambda x: module(functional.pad(x, padding)))
        wrapped.named_parameters = module.named_parameters
        return wrapped

    compare_with_torch(make, base, 1e-4)


# ---- burn-nn src/modules/conv/conv{1,2,3}d.rs, conv_transpose1d.rs: argument checks --------------


@pytest.mark.parametrize("module", ["Conv2d", "ConvTranspose2d"])
def test_conv_module_channels_with_groups(module):
    # channels_with_groups_is_invalid: 3 input channels in 2 groups
    with pytest.raises(rg.InvalidArgumentError, match=rf"{module}: .*divisible by groups 2"):
        getattr(rg.nn, module)(3, 4, 3, groups=2)
    # Burn's ConvOptions check a zero group count; torch's modules say "groups must be a
    # positive integer" (retrograd said "must be divisible by groups 0")
    for groups in (0, -1):
        with pytest.raises(rg.InvalidArgumentError, match=rf"{module}: groups must be a positive"):
            getattr(rg.nn, module)(2, 4, 3, groups=groups)


def test_conv_module_padding_strings_are_checked_when_built():
    # torch refuses padding="same" with a stride, and an unknown padding string, in the
    # constructor; retrograd built the module and failed only at its first forward
    with pytest.raises(rg.InvalidArgumentError, match=r"Conv2d: padding='same' .* strided"):
        rg.nn.Conv2d(2, 3, 3, stride=(1, 2), padding="same")
    with pytest.raises(rg.InvalidArgumentError, match="Conv1d: invalid padding string 'full'"):
        rg.nn.Conv1d(2, 3, 3, padding="full")
    assert rg.nn.Conv2d(2, 3, 3, stride=2, padding="valid").padding == "valid"


def test_conv_module_input_channels_mismatch():
    # input_channels_mismatch (conv1d.rs, conv_transpose1d.rs, ...): the error names the op and
    # the channel counts, and the module stays usable
    conv = rg.nn.Conv1d(2, 3, 3)
    with pytest.raises(rg.ShapeError, match="conv1d: input has 4 channels but weight expects 2"):
        conv(rg.ones((1, 4, 6)))
    transposed = rg.nn.ConvTranspose1d(2, 3, 3)
    with pytest.raises(rg.ShapeError, match="conv_transpose1d: input has 4 channels"):
        transposed(rg.ones((1, 4, 6)))
    assert conv(rg.ones((1, 2, 6))).shape == (1, 3, 4)


def test_conv3d_same_padding_with_an_even_kernel():
    # Burn's same_with_even_kernel_is_invalid (conv3d.rs, deform_conv2d.rs): torch pads an even
    # kernel's "same" one more at the end, and so does retrograd (API.md follows torch)
    base = np.random.default_rng(3).standard_normal((1, 2, 3, 4, 3)).astype(np.float32)

    def make(nn):
        torch.manual_seed(1)
        layer = torch.nn.Conv3d(2, 3, 2, padding="same")
        if nn is torch.nn:
            return layer
        module = rg.nn.Conv3d(2, 3, 2, padding="same")
        module.load_state_dict({k: v.detach().numpy() for k, v in layer.state_dict().items()})
        return module

    compare_with_torch(make, base, 1e-4)


HALF_NORMS = {
    # Burn's case is GroupNorm(4, 64) on [1, 64, 64, 64] (65,536 values per group); 1,024
    # values per group already overflow 16 bits in the backward, and keep the test small
    "group_norm": (lambda nn: nn.GroupNorm(4, 16, affine=False), (1, 16, 16, 16)),
    "instance_norm": (lambda nn: nn.InstanceNorm2d(4), (1, 4, 32, 32)),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(HALF_NORMS))
def test_norm_half_precision_large_group(name, dtype):
    # group.rs group_norm_f16_large_group_does_not_underflow_mean: a large group of 0.5s gives
    # zeros. torch takes half-precision statistics in float32; retrograd's composite took them
    # in 16 bits, and the backward's sum over the group overflowed to inf: the gradient was NaN
    # everywhere. Half precision is the torch backend's (API.md section 9); NumPy's refuses it.
    make, shape = HALF_NORMS[name]
    if not backends.on_torch():
        with pytest.raises(rg.DTypeError, match=dtype):
            rg.full(shape, 0.5, dtype=dtype)
        return
    weights = np.linspace(-1.0, 1.0, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    # Burn's constant input under a uniform upstream gradient (whose sum is what overflowed),
    # and a varied input under distinct weights
    for base, upstream in (
        (np.full(shape, 0.5, dtype=np.float32), np.full(shape, 2.0)),
        (weights * 3.0, weights),
    ):
        x = rg.tensor(base).cast(dtype).require_grad()
        out = make(rg.nn)(x)
        assert out.dtype == dtype
        grads = (out * rg.tensor(upstream).cast(dtype)).sum().backward()
        grad = x.grad(grads)
        assert grad.dtype == dtype
        # the reference is torch's in float64 (torch's own float16 backward rounds its
        # (g - mean g) terms in 16 bits and strays further from it than retrograd's)
        reference = torch.tensor(base, dtype=torch.float64, requires_grad=True)
        expected = make(torch.nn).double()(reference)
        (expected * torch.tensor(upstream)).sum().backward()
        tol = 3e-2 if dtype == "bfloat16" else 3e-3  # a few roundings in 8 or 11 bits
        np.testing.assert_allclose(
            out.float().numpy(), expected.float().detach().numpy(), rtol=tol, atol=tol
        )
        np.testing.assert_allclose(
            grad.float().numpy(), reference.grad.float().numpy(), rtol=tol, atol=tol
        )
    assert make(rg.nn)(rg.full(shape, 0.5, dtype=dtype)).abs().max().item() == 0.0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rms_norm_half_precision(dtype):
    # Found beside the group-norm case: rms_norm's default eps (torch's finfo(dtype).eps) had
    # no half-precision entry, so F.rms_norm and nn.RMSNorm refused float16/bfloat16 inputs as
    # "invalid arguments", and its mean of squares overflowed 16 bits (300 squared is past
    # float16's 65504): torch takes it in float32.
    if not backends.on_torch():
        with pytest.raises(rg.DTypeError, match=dtype):
            rg.tensor([1.0]).cast(dtype)
        return
    torch_dtype = getattr(torch, dtype)
    data = np.array([[3.0, 4.0, 1e-3, -2.0], [300.0, 300.0, -300.0, 300.0]], dtype=np.float32)
    x = rg.tensor(data).cast(dtype).require_grad()
    out = F.rms_norm(x, 4)
    reference = torch.tensor(data).to(torch_dtype).requires_grad_()
    expected = torch.nn.functional.rms_norm(reference, (4,))
    tol = 1e-2 if dtype == "bfloat16" else 2e-3
    np.testing.assert_allclose(
        out.float().numpy(), expected.float().detach().numpy(), rtol=tol, atol=tol
    )
    w = rg.tensor(weights_like_half(out.shape)).cast(dtype)
    grad = x.grad((out * w).sum().backward())
    (expected * torch.tensor(weights_like_half(out.shape)).to(torch_dtype)).sum().backward()
    np.testing.assert_allclose(
        grad.float().numpy(), reference.grad.float().numpy(), rtol=tol, atol=tol
    )
    module = rg.nn.RMSNorm(4).to(dtype=dtype)
    np.testing.assert_allclose(
        module(x.detach()).float().numpy(), expected.float().detach().numpy(), rtol=tol, atol=tol
    )


def weights_like_half(shape):
    return np.linspace(-1.0, 1.0, int(np.prod(shape)), dtype=np.float32).reshape(shape)
