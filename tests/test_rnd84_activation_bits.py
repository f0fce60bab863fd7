"""Activations whose values and gradients round as torch's (7 December, late morning).

On the torch backend the values are torch's own kernels and the rules torch's backward
kernels (``softplus_backward``, ``log_sigmoid_backward`` with the forward's buffer recomputed,
``elu_backward`` with SELU's scale and CELU's ``1 / float(alpha)``, ``gelu_backward`` in its
tanh mode), so both are compared with torch bit for bit on random float32 and float64 inputs,
with a random upstream gradient. On NumPy, where the exponentials are NumPy's own (which round
otherwise than torch's vectorized kernels), the rules are compared with torch's kernels'
formulas evaluated over NumPy's exponential; a rule of arithmetic alone (softsign's, torch's
composite's div and abs rules) is torch's to the bit on both backends.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import INNER, inner_backend

torch = pytest.importorskip("torch")

N = 20003  # (not a multiple of the vector width: the last elements are a scalar tail)
RNG = np.random.default_rng(84)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946

#: (label, the call on torch.nn.functional or retrograd.nn.functional, given as fn)
CASES = [
    ("softplus", lambda fn, x: fn.softplus(x)),
    ("softplus_beta2_threshold5", lambda fn, x: fn.softplus(x, beta=2.0, threshold=5.0)),
    ("softplus_beta0.7", lambda fn, x: fn.softplus(x, beta=0.7)),
    ("selu", lambda fn, x: fn.selu(x)),
    ("mish", lambda fn, x: fn.mish(x)),
    ("celu", lambda fn, x: fn.celu(x)),
    ("celu_alpha0.7", lambda fn, x: fn.celu(x, alpha=0.7)),
    ("celu_alpha2", lambda fn, x: fn.celu(x, alpha=2.0)),
    ("elu_alpha0.7", lambda fn, x: fn.elu(x, alpha=0.7)),
    ("logsigmoid", lambda fn, x: fn.logsigmoid(x)),
    ("softsign", lambda fn, x: fn.softsign(x)),
    ("tanhshrink", lambda fn, x: fn.tanhshrink(x)),
    ("hardswish", lambda fn, x: fn.hardswish(x)),
    ("hardsigmoid", lambda fn, x: fn.hardsigmoid(x)),
    ("gelu", lambda fn, x: fn.gelu(x)),
    ("gelu_tanh", lambda fn, x: fn.gelu(x, approximate="tanh")),
    ("hardtanh", lambda fn, x: fn.hardtanh(x, -1.3, 0.9)),
    ("relu6", lambda fn, x: fn.relu6(x)),
    ("leaky_relu", lambda fn, x: fn.leaky_relu(x, 0.1)),
    ("rrelu_eval", lambda fn, x: fn.rrelu(x)),
]

#: the values where the branches meet or the kernels saturate, ahead of the random draws
SPECIAL = [0.0, -0.0, 3.0, -3.0, 6.0, 0.9, -1.3, 2.5, 5.0, 20.0, 25.0, -20.0, -90.0, 90.0]
SPECIAL += [1e-30, -1e-30, np.inf, -np.inf]


def _draw(dtype, nan=False):
    """``N`` inputs, the special ones first, and an upstream gradient. NaN inputs (with
    ``nan``) only where retrograd runs torch's own kernels on the same array: torch's
    vectorized loops and their scalar tails treat NaN otherwise (hardtanh's, hardswish's and
    elu's gradient there is 0, NaN or g by the position in the array)."""
    special = SPECIAL + [np.nan] * nan
    x = np.concatenate([special, RNG.standard_normal(N - len(special)) * 4]).astype(dtype)
    if nan:
        x[-1] = np.nan  # (in the scalar tail)
    return x, RNG.standard_normal(N).astype(dtype)


def _value_and_gradient(lib, call, x, g):
    leaf = lib.tensor(x, requires_grad=True)
    out = call(lib.nn.functional, leaf)
    (grad,) = lib.autograd.grad(out, leaf, lib.tensor(g))
    return out.detach().numpy(), grad.numpy()


def _ours(call, x, g):
    with rg.use_backend(rg.Autodiff(inner_backend())):
        return _value_and_gradient(rg, call, x, g)


def _assert_bits(ours, theirs, what):
    np.testing.assert_array_equal(ours, theirs, err_msg=what)
    assert ours.dtype == theirs.dtype, what


@pytest.mark.skipif(INNER == "numpy", reason="torch's kernels: the torch inner backend's bits")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("label", "call"), CASES, ids=[label for label, _ in CASES])
def test_on_the_torch_backend_values_and_gradients_are_torchs(label, call, dtype):
    x, g = _draw(dtype, nan=True)
    value, grad = _ours(call, x, g)
    torch_value, torch_grad = _value_and_gradient(torch, call, x, g)
    _assert_bits(value, torch_value, f"{label}: value")
    _assert_bits(grad, torch_grad, f"{label}: gradient")


@pytest.mark.skipif(INNER == "numpy", reason="16-bit floats: the torch inner backend's")
@pytest.mark.parametrize(("label", "call"), CASES, ids=[label for label, _ in CASES])
def test_on_the_torch_backend_float16_values_and_gradients_are_torchs(label, call):
    # torch's 16-bit kernels compute in float32 and round once; hardtanh's compares the
    # 16-bit output with unrounded bounds, so its rule here compares in float16 (as before)
    x, g = (RNG.standard_normal((2, 2003)) * 4).astype(np.float32)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        leaf = rg.tensor(x, dtype="float16", requires_grad=True)
        out = call(rg.nn.functional, leaf)
        (grad,) = rg.autograd.grad(out, leaf, rg.tensor(g, dtype="float16"))
        ours = [out.detach().cast("float32").numpy(), grad.cast("float32").numpy()]
    leaf = torch.tensor(x).half().requires_grad_()
    out = call(torch.nn.functional, leaf)
    (grad,) = torch.autograd.grad(out, leaf, torch.tensor(g).half())
    theirs = [out.detach().float().numpy(), grad.float().numpy()]
    for mine, torchs, what in zip(ours, theirs, ("value", "gradient")):
        _assert_bits(mine, torchs, f"{label}: {what}")


#: activations of arithmetic and comparisons alone (no exp, log or tanh): torch's on NumPy too
ARITHMETIC = ["softsign", "hardswish", "hardsigmoid", "hardtanh", "relu6", "leaky_relu"]
ARITHMETIC += ["rrelu_eval"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("label", ARITHMETIC)
def test_activations_of_arithmetic_alone_are_torchs_on_both_backends(label, dtype):
    call = dict(CASES)[label]
    x, g = _draw(dtype)
    value, grad = _ours(call, x, g)
    torch_value, torch_grad = _value_and_gradient(torch, call, x, g)
    _assert_bits(value, torch_value, f"{label}: value")
    _assert_bits(grad, torch_grad, f"{label}: gradient")


def _kernel_exp_of_nonpositive(y):
    """torch's kernels' own exponential (the vectorized one inside elu_backward and
    softplus_backward, which ``torch.exp`` does not round alike) of ``y <= 0``: the buffer
    ``exp(-|y|)`` of ``log_sigmoid_forward``."""
    return torch.ops.aten.log_sigmoid_forward(torch.tensor(y))[1].numpy()


def _elu_rule(g, x, alpha, scale, input_scale, exp):
    # torch's elu_backward (is_result false): ((g * input_scale) * (alpha * scale)) * exp(x
    # * input_scale) where x <= 0, g * scale elsewhere; the constants are the dtype's, and the
    # product alpha * scale is rounded in it
    dtype = x.dtype.type
    negcoef = dtype(alpha) * dtype(scale)
    negative = ((g * dtype(input_scale)) * negcoef) * exp(np.minimum(x, 0) * dtype(input_scale))
    return np.where(x <= 0, negative, g * dtype(scale))


def _softplus(x, beta, threshold, exp):
    dtype = x.dtype.type
    scaled = x * dtype(beta)
    above = scaled > threshold
    return np.where(above, x, np.log1p(exp(np.where(above, 0, scaled))) / dtype(beta))


def _softplus_rule(g, x, beta, threshold, exp):
    dtype = x.dtype.type
    scaled = x * dtype(beta)
    above = scaled > threshold
    z = exp(np.where(above, 0, scaled))
    return np.where(above, g, g * z / (z + 1))


ELU_FAMILY = [  # (label, alpha, scale, input scale of the rule)
    ("selu", SELU_ALPHA, SELU_SCALE, 1.0),
    ("celu", 1.0, 1.0, 1.0),
    ("celu_alpha0.7", 0.7, 1.0, 1.0 / float(np.float32(0.7))),  # torch's 1 / alpha.toFloat()
    ("celu_alpha2", 2.0, 1.0, 0.5),
    ("elu_alpha0.7", 0.7, 1.0, 1.0),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the formulas' exp of NaN and inf)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_rules_are_torchs_kernels_formulas(dtype):
    """The formulas the NumPy backend follows are torch's kernels': with the kernels' own
    exponential (on the non-positive half, where the test can read it) they are torch's to
    the bit; on NumPy retrograd's rules are those formulas over NumPy's exponential."""
    x, g = _draw(dtype)
    # the non-positive half, whose kernel exponential the test can read, in whole vectors (a
    # scalar tail takes the C library's exp, in each kernel at its own positions)
    x, g = -np.abs(x[:20000]), g[:20000]
    calls = dict(CASES)
    for label, alpha, scale, input_scale in ELU_FAMILY:
        theirs = _value_and_gradient(torch, calls[label], x, g)[1]
        formula = _elu_rule(g, x, alpha, scale, input_scale, _kernel_exp_of_nonpositive)
        _assert_bits(formula, theirs, f"{label}: torch's formula")
    for label, beta, threshold in [("softplus", 1.0, 20.0), ("softplus_beta0.7", 0.7, 20.0)]:
        # (the value's formula goes through the kernel's log1p too, which the test cannot read)
        grad = _value_and_gradient(torch, calls[label], x, g)[1]
        formula = _softplus_rule(g, x, beta, threshold, _kernel_exp_of_nonpositive)
        _assert_bits(formula, grad, f"{label}: torch's formula")
    if INNER != "numpy":
        return  # (the torch backend's bits are torch's: the test above)
    x, g = _draw(dtype)
    for label, alpha, scale, input_scale in ELU_FAMILY:
        grad = _ours(calls[label], x, g)[1]
        _assert_bits(grad, _elu_rule(g, x, alpha, scale, input_scale, np.exp), label)
    for label, beta, threshold in [
        ("softplus", 1.0, 20.0),
        ("softplus_beta2_threshold5", 2.0, 5.0),
        ("softplus_beta0.7", 0.7, 20.0),
    ]:
        value, grad = _ours(calls[label], x, g)
        _assert_bits(value, _softplus(x, beta, threshold, np.exp), f"{label}: value")
        _assert_bits(grad, _softplus_rule(g, x, beta, threshold, np.exp), f"{label}: rule")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logsigmoids_rule_is_torchs_kernel_of_its_buffer(dtype):
    # torch's log_sigmoid_backward reads the forward's buffer exp(-|x|); retrograd's rule
    # reads x alone and recomputes it (torch's log_sigmoid_forward on the torch backend,
    # NumPy's exp on NumPy), so it is torch's kernel fed with that buffer
    x, g = _draw(dtype)
    grad = _ours(dict(CASES)["logsigmoid"], x, g)[1]
    if INNER == "numpy":
        with np.errstate(invalid="ignore"):
            buffer = torch.tensor(np.exp(-np.abs(x)))
    else:
        buffer = torch.ops.aten.log_sigmoid_forward(torch.tensor(x))[1]
    theirs = torch.ops.aten.log_sigmoid_backward(torch.tensor(g), torch.tensor(x), buffer)
    _assert_bits(grad, theirs.numpy(), "log_sigmoid_backward")


@pytest.mark.parametrize(
    "label", ["softplus_beta2_threshold5", "selu", "celu_alpha0.7", "logsigmoid", "gelu_tanh"]
)
def test_second_derivatives_match_torchs(label):
    call = dict(CASES)[label]
    x = np.concatenate([[-2.0, -0.3, 0.4, 1.7, 2.6, 3.0], RNG.standard_normal(6)])
    v = RNG.standard_normal(x.size)
    results = []
    for lib in (torch, rg):
        leaf = lib.tensor(x, requires_grad=True)
        (g,) = lib.autograd.grad(call(lib.nn.functional, leaf).sum(), leaf, create_graph=True)
        (h,) = lib.autograd.grad((g * lib.tensor(v)).sum(), leaf)
        results.append((g.detach().numpy(), h.numpy()))
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15, err_msg=label)
