"""Complex tensors (complex64, complex128) against torch: creation, promotion, casts, the parts
of a complex number, elementwise ops, reductions, products and shape ops, with their gradients
under torch's convention (the gradient of a real loss with respect to ``z`` is the conjugate
Wirtinger derivative: ``2z`` for ``|z|^2``), and the refusal, by name, of the ops that compute
no complex numbers here."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import retrograd as rg

RNG_SEED = 7


def values(t):
    return t.resolve_conj().detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def leaves(lib, *arrays):
    return [lib.tensor(a, requires_grad=True) for a in arrays]


def gradients(lib, loss, inputs):
    if lib is torch:
        return torch.autograd.grad(loss, inputs)
    grads = loss.backward()
    return [x.grad(grads) for x in inputs]


def real_loss(lib, out):
    """A real loss that reads both parts of a complex ``out`` unevenly (so that a gradient
    with the parts swapped or conjugated differs)."""
    if out.is_complex():
        return out.real.sum() + 2 * out.imag.sum() + (out.abs() ** 2).sum()
    return (out * out).sum()


def complex_array(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


# -- creation, dtypes, conversions --------------------------------------------------------------
def test_tensors_of_complex_data_take_torchs_dtypes():
    assert rg.tensor([1 + 2j, 3]).dtype == rg.complex64  # torch: complex64 (default float32)
    assert rg.tensor(np.array([1j], np.complex128)).dtype == rg.complex128
    assert rg.tensor(np.array([1j], np.complex64)).dtype == rg.complex64
    assert rg.tensor([1.0, 2.0], dtype=rg.cfloat).tolist() == [1 + 0j, 2 + 0j]
    assert rg.cfloat == rg.complex64 and rg.cdouble == rg.complex128
    assert rg.complex64.is_complex and not rg.float32.is_complex
    for name in ("zeros", "ones", "empty", "randn", "rand"):
        made = getattr(rg, name)(2, 3, dtype=rg.cfloat)
        assert made.dtype == rg.complex64 and made.shape == (2, 3) and made.is_complex()
    assert rg.full((2,), 1 - 2j).tolist() == torch.full((2,), 1 - 2j).tolist()
    assert rg.full((2,), 1 - 2j).dtype == rg.complex64
    rg.manual_seed(RNG_SEED)
    draws = rg.randn(4000, dtype=rg.cdouble).numpy()
    # torch's complex normal: each part of variance 1/2, so E|z|^2 = 1
    assert abs(np.mean(np.abs(draws) ** 2) - 1.0) < 0.1
    assert abs(np.var(draws.real) - 0.5) < 0.05 and abs(np.var(draws.imag) - 0.5) < 0.05
    uniform = rg.rand(1000, dtype=rg.cfloat).numpy()
    assert uniform.real.min() >= 0 and uniform.imag.max() < 1 and uniform.imag.min() >= 0


def test_parts_of_complex_numbers_match_torch():
    data = [1 + 2j, -3 - 0.5j, 0j, -2 + 0j]
    z, t = rg.tensor(data), torch.tensor(data)
    for name in ("real", "imag"):
        np.testing.assert_array_equal(values(getattr(z, name)), values(getattr(t, name)))
        assert str(getattr(z, name).dtype) == str(getattr(t, name).dtype).removeprefix("torch.")
    for name in ("conj", "resolve_conj", "abs", "angle"):
        np.testing.assert_allclose(
            values(getattr(z, name)()), values(getattr(t, name)()), rtol=1e-6
        )
    np.testing.assert_array_equal(values(rg.conj(z)), values(torch.conj(t)))
    assert rg.is_complex(z) and not rg.is_complex(z.abs())
    assert not z.is_conj()  # conjugation here is physical (torch's resolve_conj)
    re, im = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0])
    np.testing.assert_array_equal(
        values(rg.complex(rg.tensor(re.numpy()), rg.tensor(im.numpy()))),
        values(torch.complex(re, im)),
    )
    np.testing.assert_allclose(
        values(rg.polar(rg.tensor(re.abs().numpy()), rg.tensor(im.numpy()))),
        values(torch.polar(re.abs(), im)),
        rtol=1e-6,
    )
    pairs = torch.arange(12.0).reshape(3, 2, 2)
    np.testing.assert_array_equal(
        values(rg.view_as_complex(rg.tensor(pairs.numpy()))), values(torch.view_as_complex(pairs))
    )
    np.testing.assert_array_equal(values(rg.view_as_real(z)), values(torch.view_as_real(t)))
    # a real tensor: its own real part and conjugate; its angle 0 or pi, as torch's
    x = rg.tensor([-1.0, 2.0])
    assert x.real is x and x.conj() is x
    np.testing.assert_allclose(values(x.angle()), values(torch.tensor([-1.0, 2.0]).angle()))
    with pytest.raises(rg.DTypeError, match="complex"):
        rg.complex(rg.ones(2), rg.ones(2, dtype=rg.float64))
    with pytest.raises(rg.ShapeError, match="size 2"):
        rg.view_as_complex(rg.ones(2, 3))
    with pytest.raises(rg.DTypeError, match="view_as_real"):
        rg.view_as_real(rg.ones(2))


DTYPES = ["bool", "int64", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("left", DTYPES)
def test_promotion_with_complex_is_torchs(left):
    for right in DTYPES:
        if "complex" not in left + right:
            continue
        for shapes in (((2,), (2,)), ((2,), ()), ((), (2,))):
            a = torch.ones(shapes[0], dtype=getattr(torch, left))
            b = torch.ones(shapes[1], dtype=getattr(torch, right))
            ours = rg.tensor(a.numpy()) + rg.tensor(b.numpy())
            assert ours.dtype == str(torch.result_type(a, b)).removeprefix("torch."), (
                left,
                right,
                shapes,
            )
    t = torch.ones(2, dtype=getattr(torch, left))
    x = rg.tensor(t.numpy())
    for scalar in (2, 1.5, 1j):
        assert (x * scalar).dtype == str((t * scalar).dtype).removeprefix("torch."), scalar


def test_casts_items_and_files():
    z = rg.tensor([1 + 2j, -3 + 0.5j])
    t = torch.tensor([1 + 2j, -3 + 0.5j])
    assert z.to(rg.float32).tolist() == t.real.tolist()  # torch keeps the real part
    assert z.to(rg.complex128).dtype == rg.complex128
    assert rg.tensor([1.0, 2.0]).to(rg.cfloat).tolist() == [1 + 0j, 2 + 0j]
    assert z.tolist() == t.tolist() and z[1].item() == t[1].item()
    assert isinstance(z[0].item(), complex) and complex(z[1]) == complex(t[1])
    assert z.numpy().dtype == np.complex64
    buffer = io.BytesIO()
    rg.save({"z": z, "w": z.to(rg.cdouble)}, buffer)
    buffer.seek(0)
    loaded = rg.load(buffer)
    assert loaded["z"].dtype == rg.complex64 and loaded["z"].tolist() == z.tolist()
    assert loaded["w"].dtype == rg.complex128
    buffer = io.BytesIO()  # a file torch wrote (its ComplexFloatStorage, ComplexDoubleStorage)
    torch.save({"z": t, "w": t.to(torch.complex128)}, buffer)
    buffer.seek(0)
    from_torch = rg.load(buffer)
    assert from_torch["z"].dtype == rg.complex64 and from_torch["z"].tolist() == t.tolist()
    assert from_torch["w"].dtype == rg.complex128


# -- values and gradients against torch ------------------------------------------------------------
UNARY = {
    "neg": lambda lib, a: -a,
    "exp": lambda lib, a: a.exp(),
    "log": lambda lib, a: a.log(),
    "sqrt": lambda lib, a: a.sqrt(),
    "sin": lambda lib, a: a.sin(),
    "cos": lambda lib, a: a.cos(),
    "sinh": lambda lib, a: a.sinh(),
    "cosh": lambda lib, a: a.cosh(),
    "tanh": lambda lib, a: a.tanh(),
    "sigmoid": lambda lib, a: a.sigmoid(),
    "reciprocal": lambda lib, a: a.reciprocal(),
    "square": lambda lib, a: a.square(),
    "pow": lambda lib, a: a**3,
    "pow_half": lambda lib, a: a**0.5,
    "abs": lambda lib, a: a.abs(),
    "angle": lambda lib, a: a.angle(),
    "conj": lambda lib, a: a.conj() * a.conj(),
    "real_imag": lambda lib, a: a.real * a.imag,
    "view_as_real": lambda lib, a: lib.view_as_real(a) ** 2,
    "sum": lambda lib, a: a.sum(0),
    "mean": lambda lib, a: a.mean(),
    "cumsum": lambda lib, a: a.cumsum(1),
    "scalars": lambda lib, a: (2 - a) * (1 + 2j) / (3 - 1j) + 1.5 / a,
    "shapes": lambda lib, a: lib.cat([a.T.reshape(6), a.flatten().flip(0)])[2:9].unsqueeze(0),
    "stack_index": lambda lib, a: lib.stack([a, a[:, [2, 0, 1]]], 1)[1:, :, 1:].permute(2, 0, 1),
    "expand_roll": lambda lib, a: a[:, None].expand(2, 3, 3).roll(1, 2) * a.unsqueeze(1),
    "transpose_view": lambda lib, a: a.transpose(0, 1).contiguous().view(3, 2),
    "mH": lambda lib, a: a.mH * a.T,
    "H": lambda lib, a: a.H,
    "vdot": lambda lib, a: lib.vdot(a[0], a[1]),
    "sgn": lambda lib, a: a.sgn(),
    "masked_fill": lambda lib, a: a.masked_fill(a.real > 0, 1 - 2j),
    "tan": lambda lib, a: (a * 0.5).tan(),
    "expm1": lambda lib, a: a.expm1(),
    "log1p": lambda lib, a: a.log1p(),
    "asin": lambda lib, a: a.asin(),
    "acos": lambda lib, a: a.acos(),
    "atan": lambda lib, a: a.atan(),
    "asinh": lambda lib, a: a.asinh(),
    "acosh": lambda lib, a: a.acosh(),
    "atanh": lambda lib, a: a.atanh(),
    "rpow": lambda lib, a: 2.0**a,
    "pow_complex": lambda lib, a: a ** (0.5 + 1j),
    "norm": lambda lib, a: a.norm() + a.norm(1, dim=0).sum(),
    "vector_norm": lambda lib, a: lib.linalg.vector_norm(a, 3, dim=1),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_values_and_gradients_match_torch(name):
    rng = np.random.default_rng(RNG_SEED)
    data = complex_array(rng, (2, 3))
    results = []
    for lib in (torch, rg):
        (a,) = leaves(lib, data)
        out = UNARY[name](lib, a)
        results.append((values(out), gradients(lib, real_loss(lib, out), [a])))
    (expected, (expected_grad,)), (got, (got_grad,)) = results
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(values(got_grad), values(expected_grad), rtol=1e-9, atol=1e-12)


BINARY = {
    "add": lambda lib, a, b: a + b,
    "sub": lambda lib, a, b: a - b,
    "mul": lambda lib, a, b: a * b,
    "div": lambda lib, a, b: a / b,
    "broadcast": lambda lib, a, b: a[:1] * b + b.sum(0),
    "matmul": lambda lib, a, b: a @ b.T,
    "mm": lambda lib, a, b: lib.mm(a.T, b),
    "bmm": lambda lib, a, b: lib.bmm(a.reshape(1, 2, 3), b.reshape(1, 3, 2)),
    "einsum": lambda lib, a, b: lib.einsum("ij,kj->ik", a, b),
    "where": lambda lib, a, b: lib.where(a.real > 0, a, b),
    "pow": lambda lib, a, b: a**b,
}
#: torch's products refuse a real operand with a complex one, and its where's backward fails
#: on them: the mixed cases are the elementwise ones
MIXED = ["add", "sub", "mul", "div", "broadcast"]
BINARY_CASES = [
    (name, dtypes)
    for name in BINARY
    for dtypes in ("complex", "complex_real", "real_complex", "complex64")
    if name in MIXED or "real" not in dtypes
]


@pytest.mark.parametrize("name, dtypes", BINARY_CASES)
def test_binary_values_and_gradients_match_torch(name, dtypes):
    rng = np.random.default_rng(RNG_SEED)
    a = complex_array(rng, (2, 3), np.complex64 if dtypes == "complex64" else np.complex128)
    b = complex_array(rng, (2, 3), np.complex64 if dtypes == "complex64" else np.complex128)
    if dtypes == "complex_real":  # a real operand: its gradient is the real part, as torch's
        b = b.real.copy()
    if dtypes == "real_complex":
        a = a.real.copy()
    results = []
    for lib in (torch, rg):
        x, y = leaves(lib, a, b)
        out = BINARY[name](lib, x, y)
        results.append((values(out), out.dtype, gradients(lib, real_loss(lib, out), [x, y])))
    tolerance = 1e-5 if dtypes == "complex64" else 1e-10
    (expected, expected_dtype, expected_grads), (got, got_dtype, got_grads) = results
    assert str(got_dtype) == str(expected_dtype).removeprefix("torch.")
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)
    for ours, theirs in zip(got_grads, expected_grads):
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_allclose(values(ours), values(theirs), rtol=tolerance, atol=tolerance)


def test_gradients_match_finite_differences_in_complex128():
    """Independent of torch: d loss / d re + i d loss / d im, by central differences."""
    rng = np.random.default_rng(RNG_SEED)
    za, zb = complex_array(rng, (3,)), complex_array(rng, (3,))
    weights = rng.standard_normal(3)

    def loss_of(a, b):
        out = (a * b.conj()).exp() / (a + 2.0) + (a.sqrt() * b).sin()
        return ((out.abs() ** 2) * rg.tensor(weights)).sum() + out.imag.sum()

    a, b = leaves(rg, za, zb)
    grad_a, grad_b = gradients(rg, loss_of(a, b), [a, b])
    step = 1e-6
    for which, grad in ((0, grad_a), (1, grad_b)):
        expected = np.zeros(3, np.complex128)
        for k in range(3):
            for unit in (1.0, 1j):
                bumped = [za.copy(), zb.copy()], [za.copy(), zb.copy()]
                bumped[0][which][k] += step * unit
                bumped[1][which][k] -= step * unit
                up = loss_of(*(rg.tensor(v) for v in bumped[0])).item()
                down = loss_of(*(rg.tensor(v) for v in bumped[1])).item()
                expected[k] += unit * (up - down) / (2 * step)
        np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_abs_gradient_at_zero_is_torchs_zero():
    for lib in (torch, rg):
        z = lib.tensor([0j, 3 + 4j], requires_grad=True)
        (grad,) = gradients(lib, z.abs().sum(), [z])
        np.testing.assert_allclose(values(grad), [0, 0.6 + 0.8j])


def test_writes_of_complex_numbers_and_seeds_of_backward_match_torch():
    data = [[1 + 2j, 3 - 1j], [0.5j, 2]]
    results = []
    for lib in (torch, rg):
        z = lib.tensor(data)
        z[0, 1] = 5j
        z[1] += 1 - 1j
        filled = lib.zeros(2, dtype=lib.cfloat).fill_(2 - 1j)
        w = lib.tensor(data, requires_grad=True)
        out = w * w.conj() * (1 + 1j)
        if lib is torch:
            (grad,) = torch.autograd.grad(out, [w], torch.tensor([[1.0, 2j], [-1j, 0.5]]))
        else:
            grad = w.grad(out.backward(rg.tensor([[1.0, 2j], [-1j, 0.5]])))
        results.append([values(z), values(filled), values(grad), z.type().split(".")[1]])
    for ours, theirs in zip(results[1], results[0]):
        if isinstance(ours, str):
            assert ours == theirs
        else:
            np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    z = rg.tensor([1 + 1j], requires_grad=True)
    with pytest.raises(rg.AutodiffError, match=r"real outputs.*complex64"):
        z.sum().backward()  # torch: "grad can be implicitly created only for real scalar outputs"
    with pytest.raises(rg.AutodiffError, match="complex64"):
        rg.autograd.grad(z.sum(), [z])


def test_second_derivatives_match_torch():
    data = np.array([1 + 2j, -0.5 + 1j])
    results = []
    for lib in (torch, rg):
        z = lib.tensor(data, requires_grad=True)
        loss = ((z * z).exp().abs() ** 2).sum() + lib.fft.fft(z).imag.sum()
        (grad,) = lib.autograd.grad(loss, [z], create_graph=True)
        (second,) = lib.autograd.grad((grad.abs() ** 2).sum(), [z])
        results.append([values(grad), values(second)])
    for ours, theirs in zip(*results[::-1]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 0.0])
def test_clip_grad_norm_of_complex_gradients_is_torchs(norm_type):
    data = np.array([1 + 2j, -0.5 + 1j])
    p, q = rg.nn.Parameter(rg.tensor(data)), torch.nn.Parameter(torch.tensor(data))
    grads = ((p * p).abs() ** 2).sum().backward()
    ((q * q).abs() ** 2).sum().backward()
    ours = rg.nn.utils.clip_grad_norm_(grads, [p], 1.0, norm_type=norm_type)
    theirs = torch.nn.utils.clip_grad_norm_([q], 1.0, norm_type=norm_type)
    assert ours.dtype == rg.float64 and ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    np.testing.assert_allclose(p.grad(grads).numpy(), q.grad.numpy(), rtol=1e-12)


# -- refusals ----------------------------------------------------------------------------------
REFUSED = {
    "greater": lambda z: z > z,
    "lower": lambda z: z < 1,
    "clamp_relu": lambda z: z.relu(),
    "floor": lambda z: z.floor(),
    "round": lambda z: z.round(),
    "clamp": lambda z: z.clamp(0, 1),
    "max": lambda z: z.max(),
    "argmax": lambda z: z.argmax(),
    "sort": lambda z: z.sort(),
    "topk": lambda z: z.topk(1),
    "sign": lambda z: z.sign(),
    "erf": lambda z: z.erf(),
    "lgamma": lambda z: z.lgamma(),
    "atan2": lambda z: z.atan2(z),
    "remainder": lambda z: z % 2,
    "softmax": lambda z: rg.nn.functional.softmax(z, 0),
    "gelu": lambda z: rg.nn.functional.gelu(z),
    "layer_norm": lambda z: rg.nn.functional.layer_norm(z, (2,)),
    "norm": lambda z: rg.ones(2, 2, dtype=rg.cfloat).norm("nuc"),
}
# (prod, cumprod, var/std, logsumexp and linear compute complex tensors as torch's since round 36 of
# the fuzzer: tests/test_fuzz_complex_36.py)


@pytest.mark.parametrize("name", list(REFUSED))
def test_ops_without_complex_kernels_refuse_by_name(name):
    z = rg.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    with pytest.raises(rg.DTypeError, match="complex64") as raised:
        REFUSED[name](z)
    assert name.split("_")[0] in str(raised.value)
    assert (z * 2).tolist() == [2 + 4j, 6 - 2j]  # left usable


# -- a sweep of torch's common tensor methods: torch's values, or a refusal that names complex
SWEEP_UNARY = [
    "abs",
    "absolute",
    "acos",
    "acosh",
    "angle",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "ceil",
    "clone",
    "conj",
    "cos",
    "cosh",
    "deg2rad",
    "digamma",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "exp2",
    "expm1",
    "fix",
    "flatten",
    "floor",
    "frac",
    "i0",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "isreal",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_not",
    "logit",
    "nan_to_num",
    "neg",
    "negative",
    "positive",
    "rad2deg",
    "reciprocal",
    "relu",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "signbit",
    "sgn",
    "sin",
    "sinc",
    "sinh",
    "sqrt",
    "square",
    "tan",
    "tanh",
    "trunc",
    "t",
    "ravel",
    "argmax",
    "argmin",
    "max",
    "min",
    "mean",
    "sum",
    "prod",
    "std",
    "var",
    "median",
    "nanmean",
    "amax",
    "amin",
    "any",
    "all",
    "count_nonzero",
    "norm",
    "trace",
    "diag",
    "tril",
    "triu",
    "det",
    "inverse",
    "pinverse",
    "matrix_exp",
    "logdet",
    "float",
    "double",
    "int",
    "long",
    "bool",
    "cfloat",
    "cdouble",
    "tolist",
    "squeeze",
    "contiguous",
    "detach",
]
SWEEP_DIM = [
    "cumsum",
    "cumprod",
    "softmax",
    "log_softmax",
    "diff",
    "argsort",
    "sort",
    "logsumexp",
    "msort",
]
SWEEP_BINARY = [
    "isclose",
    "allclose",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "clamp_min",
    "floor_divide",
    "remainder",
    "fmod",
    "copysign",
    "atan2",
    "hypot",
    "logaddexp",
    "xlogy",
    "kron",
    "dist",
    "mul",
    "div",
    "true_divide",
    "sub",
    "add",
    "pow",
    "float_power",
    "heaviside",
    "logical_and",
    "lerp",
    "addcmul",
    "addcdiv",
]


def _sweep_call(lib, name, x):
    if name in SWEEP_DIM:
        return getattr(x, name)(dim=0) if "softmax" in name else getattr(x, name)(0)
    if name in ("lerp",):
        return x.lerp(x * 2, 0.5)
    if name in ("addcmul", "addcdiv"):
        return getattr(x, name)(x, x + 1)
    if name in SWEEP_BINARY:
        return getattr(x, name)(x * 0.5 + 1j)
    return getattr(x, name)()


def _as_array(value):
    if isinstance(value, tuple):
        value = value[0]
    if isinstance(value, torch.Tensor):
        return value.resolve_conj().numpy()
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


@pytest.mark.parametrize("name", SWEEP_UNARY + SWEEP_DIM + SWEEP_BINARY)
def test_common_methods_on_complex_tensors_match_torch_or_refuse_by_name(name, recwarn):
    data = np.array([[1 + 2j, -0.5 + 0.25j], [0.3 - 1j, 2 + 0.5j]])
    try:
        expected = _sweep_call(torch, name, torch.tensor(data))
    except (RuntimeError, TypeError, NotImplementedError):
        expected = None
    try:
        got = _sweep_call(rg, name, rg.tensor(data))
    except rg.DTypeError as error:  # refused: by name, naming the complex dtype
        assert "complex" in str(error)
        return
    assert expected is not None, f"{name}: computed where torch refuses"
    want, have = _as_array(expected), _as_array(got)
    assert want.shape == have.shape
    np.testing.assert_allclose(have.astype(complex), want.astype(complex), rtol=1e-6, atol=1e-6)
