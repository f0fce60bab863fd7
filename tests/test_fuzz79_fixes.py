"""Defects round 79's random complex programs (tests/test_random_79.py) found, one focused
test each: retrograd's refusal must be an instance of the exception class torch raises (the
hierarchy's classes subclass torch's, API.md section 7), and what torch computes must be
computed."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

A = np.array([[1 + 2j, -0.5 + 1j, 2 - 1j], [0.3 - 1j, 1.5 + 0.5j, -1 + 0j], [2j, 1 - 1j, 0.5]])
X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 1.0, 3.0]])


def _refusal(lib, fn):
    try:
        fn(lib, lib.tensor(A), lib.tensor(X))
    except Exception as err:  # (the class is what is compared)
        return err
    return None


def assert_same_refusal(fn):
    expected = _refusal(torch, fn)
    assert expected is not None, "torch computes this"
    got = _refusal(rg, fn)
    assert got is not None, f"retrograd computes where torch raised {expected!r}"
    assert isinstance(got, rg.RetrogradError), repr(got)
    assert isinstance(got, type(expected)), f"{got!r} is no {type(expected).__name__}"


# -- ops torch refuses on complex tensors: its NotImplementedError or RuntimeError, where
# retrograd raised a plain DTypeError (a TypeError only) -------------------------------------
COMPLEX_REFUSALS = {
    "sort": lambda lib, z, x: lib.sort(z),  # RuntimeError
    "argsort": lambda lib, z, x: z.argsort(),
    "topk": lambda lib, z, x: z.topk(1),
    "argmax": lambda lib, z, x: z.argmax(),
    "min_dim": lambda lib, z, x: z.min(0),
    "max": lambda lib, z, x: z.max(),  # NotImplementedError
    "amax": lambda lib, z, x: z.amax(-1),
    "gt": lambda lib, z, x: z > z,
    "lt_scalar": lambda lib, z, x: z < 1,
    "maximum": lambda lib, z, x: lib.maximum(z, z),
    "clamp": lambda lib, z, x: z.clamp(-1, 1),
    "relu": lambda lib, z, x: lib.relu(z),
    "floor": lambda lib, z, x: z.floor(),
    "round": lambda lib, z, x: z.round(),
    "sign": lambda lib, z, x: z.sign(),
    "median": lambda lib, z, x: z.median(),
    "cummax": lambda lib, z, x: z.cummax(0),
    "atan2": lambda lib, z, x: lib.atan2(z, z),
    "erf": lambda lib, z, x: z.erf(),
    "heaviside": lambda lib, z, x: lib.heaviside(z, z),
    "logit": lambda lib, z, x: z.logit(),
    "deg2rad": lambda lib, z, x: z.deg2rad(),
    "softmax": lambda lib, z, x: z.softmax(-1),
    "log_softmax": lambda lib, z, x: z.log_softmax(0),
    "frac": lambda lib, z, x: z.frac(),
    "hypot": lambda lib, z, x: lib.hypot(z, z),
    "gelu": lambda lib, z, x: lib.nn.functional.gelu(z),
    "elu": lambda lib, z, x: lib.nn.functional.elu(z),
    "softplus": lambda lib, z, x: lib.nn.functional.softplus(z),
    "mse_loss": lambda lib, z, x: lib.nn.functional.mse_loss(z, z),
    "cosine_similarity": lambda lib, z, x: lib.nn.functional.cosine_similarity(z, z),
    "nansum": lambda lib, z, x: z.nansum(),
    "rfft": lambda lib, z, x: lib.fft.rfft(z),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_REFUSALS))
def test_complex_refusal_is_torchs_class(name):
    assert_same_refusal(COMPLEX_REFUSALS[name])


def test_complex_refusal_leaves_the_hierarchy_class():
    with pytest.raises(rg.DTypeError, match="sort"):  # still a DTypeError (a TypeError)
        rg.tensor(A).sort()
    with pytest.raises(NotImplementedError, match="complex128"):
        rg.tensor(A).gt(0)


# -- operands of two dtypes that torch multiplies or solves only in one: its RuntimeError ----
MIXED = {
    "solve": lambda lib, z, x: lib.linalg.solve(z.to(lib.complex64), z),
    "solve_real": lambda lib, z, x: lib.linalg.solve(x.float(), x),
    "lstsq": lambda lib, z, x: lib.linalg.lstsq(x.float(), x),
    "vecdot": lambda lib, z, x: lib.linalg.vecdot(z.to(lib.complex64), z),
    "einsum": lambda lib, z, x: lib.einsum("ij,jk->ik", z.to(lib.complex64), z),
    "cdist": lambda lib, z, x: lib.cdist(x.float(), x),
    "linear": lambda lib, z, x: lib.nn.functional.linear(z, x),
    "isclose": lambda lib, z, x: lib.isclose(z, x),
}


@pytest.mark.parametrize("name", sorted(MIXED))
def test_mixed_dtype_refusal_is_runtime_error(name):
    assert_same_refusal(MIXED[name])


# -- making and unmaking complex tensors ------------------------------------------------------
CONSTRUCTION = {
    "imag_of_real": lambda lib, z, x: x.imag,
    "view_as_real_of_real": lambda lib, z, x: lib.view_as_real(x),
    "view_as_complex_of_int": lambda lib, z, x: lib.view_as_complex(x.long()[:, :2]),
    "view_as_complex_last_3": lambda lib, z, x: lib.view_as_complex(x),
    "view_as_complex_0d": lambda lib, z, x: lib.view_as_complex(x[0, 0]),
    "view_as_complex_strided": lambda lib, z, x: lib.view_as_complex(x[:2, :2].T),
    "complex_mixed": lambda lib, z, x: lib.complex(x, x.float()),
    "complex_of_int": lambda lib, z, x: lib.complex(x.long(), x.long()),
    "polar_mixed": lambda lib, z, x: lib.polar(x.abs(), x.float()),
    "float_of_complex": lambda lib, z, x: float(z[0, 0]),
    "int_of_complex": lambda lib, z, x: int(z[0, 0]),
    # (a guard: passed before; not a tensor stays torch's TypeError after the split above)
    "view_as_real_of_list": lambda lib, z, x: lib.view_as_real([1.0]),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTION))
def test_construction_refusal_is_torchs_class(name):
    assert_same_refusal(CONSTRUCTION[name])


# -- norms with dtype= of a complex input -----------------------------------------------------
NORM_REFUSALS = {
    "vector_norm_real_dtype": lambda lib, z, x: lib.linalg.vector_norm(z, dtype=lib.float64),
    "vector_norm_narrowing": lambda lib, z, x: lib.linalg.vector_norm(z, dtype=lib.complex64),
    "vector_norm_of_int": lambda lib, z, x: lib.linalg.vector_norm(x.long()),
    "vector_norm_complex_dtype_of_real": lambda lib, z, x: lib.linalg.vector_norm(
        x, dtype=lib.complex128
    ),
    "matrix_norm_real_dtype": lambda lib, z, x: lib.linalg.matrix_norm(z, dtype=lib.float64),
    "norm_real_dtype": lambda lib, z, x: lib.norm(z, dtype=lib.float64),
    "inv_of_int": lambda lib, z, x: lib.linalg.inv(x.long()),
    "eigvalsh_of_int": lambda lib, z, x: lib.linalg.eigvalsh(x.long()),
}


@pytest.mark.parametrize("name", sorted(NORM_REFUSALS))
def test_norm_and_linalg_dtype_refusal_is_torchs_class(name):
    assert_same_refusal(NORM_REFUSALS[name])


@pytest.mark.parametrize("order", ["fro", "nuc", 2, 1, float("inf")])
def test_matrix_norm_of_complex64_with_complex128_dtype(order):
    # torch computes it (in complex128, a float64 result); retrograd refused any dtype= of a
    # complex input ("expected a floating point tensor")
    a64 = A.astype(np.complex64)
    want = torch.linalg.matrix_norm(torch.tensor(a64), order, dtype=torch.complex128)
    got = rg.linalg.matrix_norm(rg.tensor(a64), order, dtype=rg.complex128)
    assert str(got.dtype) == "float64" == str(want.dtype).removeprefix("torch.")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_vector_norm_of_complex_with_wider_complex_dtype_keeps_its_gradient():
    # (a guard: passed before; the cast of a complex input to dtype= now goes through the
    # checks above)
    z = rg.tensor(A.astype(np.complex64), requires_grad=True)
    zt = torch.tensor(A.astype(np.complex64), requires_grad=True)
    out = rg.linalg.vector_norm(z, 3, dtype=rg.complex128)
    want = torch.linalg.vector_norm(zt, 3, dtype=torch.complex128)
    assert str(out.dtype) == "float64" == str(want.dtype).removeprefix("torch.")
    np.testing.assert_allclose(out.item(), want.item(), rtol=1e-12)
    (g,) = rg.autograd.grad(out, [z])
    (gt,) = torch.autograd.grad(want, [zt])
    assert str(g.dtype) == "complex64"
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-6)


# -- powers at zero ---------------------------------------------------------------------------
@pytest.mark.parametrize("exponent", [0, 0.0, 0j])
def test_gradient_of_complex_power_zero_is_zero_at_zero(exponent):
    # torch: x ** 0 is 1, its gradient 0; retrograd's rule s * x ** (s - 1) gave 0 * inf = NaN
    # at x = 0 (a polynomial sum c_k z ** k evaluated at z = 0)
    for lib in (torch, rg):
        z = lib.tensor([0j, 1 + 1j, 0j], requires_grad=True)
        (g,) = lib.autograd.grad(lib.view_as_real(z**exponent).sum(), [z])
        got = g.numpy()
        np.testing.assert_array_equal(got, np.zeros(3, complex), err_msg=lib.__name__)


CALLS_AT_ZERO = {
    "pow_-1": lambda lib, z: z**-1,
    "pow_-2.5": lambda lib, z: z**-2.5,
    "pow_complex": lambda lib, z: z ** (-1 + 1j),
    "pow_imaginary": lambda lib, z: z**1j,  # (a guard: NumPy's nan + nan j was right here)
    "reciprocal": lambda lib, z: z.reciprocal(),
    "rsqrt": lambda lib, z: z.rsqrt(),
    "pow_tensor_zero": lambda lib, z: z ** lib.zeros(2, dtype=z.dtype),
    "pow_tensor_negative": lambda lib, z: z ** lib.tensor([-1 + 0j, -0.5 + 2j], dtype=z.dtype),
}


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", sorted(CALLS_AT_ZERO))
def test_complex_power_at_zero_is_torchs(name, dtype):
    # torch's kernel is exp(y log x) with log 0 = -inf: inf + nan j for Re y < 0, nan + nan j
    # for Re y == 0; NumPy's power and reciprocal gave nan + nan j, and 1 for a zero exponent
    fn = CALLS_AT_ZERO[name]
    want = fn(torch, torch.tensor([0j, 1 - 2j], dtype=getattr(torch, dtype))).numpy()
    got = fn(rg, rg.tensor([0j, 1 - 2j], dtype=getattr(rg, dtype))).numpy()
    for part in (np.real, np.imag):
        np.testing.assert_array_equal(np.isnan(part(got)), np.isnan(part(want)))
        np.testing.assert_array_equal(np.isinf(part(got)), np.isinf(part(want)))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


# -- autograd and in-place refusals -----------------------------------------------------------
AUTOGRAD_REFUSALS = {
    "complex_grad_of_real": lambda lib, z: lib.autograd.grad(
        z.abs().sum(), z, grad_outputs=lib.tensor(1j)
    ),
    "real_grad_of_complex": lambda lib, z: lib.autograd.grad(
        z * z, z, grad_outputs=lib.ones(3, dtype=lib.float64)
    ),
    "abs_in_place": lambda lib, z: z.detach().clone().abs_(),
}


@pytest.mark.parametrize("name", sorted(AUTOGRAD_REFUSALS))
def test_autograd_and_in_place_refusal_is_torchs_class(name):
    def run(lib, z, x):
        z = lib.tensor(A[0], requires_grad=True)
        return AUTOGRAD_REFUSALS[name](lib, z)

    assert_same_refusal(run)


# -- assigning to .real and .imag ---------------------------------------------------------------
PART_WRITES = {
    "real_number": lambda lib, z: setattr(z, "real", 0),
    "real_tensor": lambda lib, z: setattr(z, "real", lib.tensor([5.0, 6.0, 7.0])),
    "imag_broadcast": lambda lib, z: setattr(z, "imag", lib.tensor(9.0)),
    "imag_int": lambda lib, z: setattr(z, "imag", lib.tensor([1, 2, 3])),
    "imag_iadd": lambda lib, z: _imag_iadd(z),
}


def _imag_iadd(z):
    z.imag += z.real * 2


@pytest.mark.parametrize("name", sorted(PART_WRITES))
def test_assigning_real_and_imag_writes_into_the_tensor(name):
    # torch's Tensor.real and .imag have setters (z.real = v copies v in; z.imag += v
    # assigns back); retrograd's properties had none: AttributeError
    results = []
    for lib in (torch, rg):
        z = lib.tensor(A[0])
        PART_WRITES[name](lib, z)
        results.append(z.numpy())
    np.testing.assert_array_equal(results[1], results[0])


def test_augmented_assignment_of_imag_keeps_the_gradient():
    grads = []
    for lib in (torch, rg):
        z = lib.tensor(A[0], requires_grad=True)
        c = z * 1
        c.imag += c.real
        (g,) = lib.autograd.grad(c.abs().sum(), [z])
        grads.append(g.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)


@pytest.mark.parametrize("name", ["imag_of_real", "shape", "leaf_requiring_grad"])
def test_assigning_real_and_imag_refusals_are_torchs(name):
    def run(lib, z, x):
        if name == "imag_of_real":
            x.imag = x
        elif name == "shape":
            z.imag = x[:, :2]
        else:
            lib.tensor(A[0], requires_grad=True).real = x[0]

    assert_same_refusal(run)


# -- layouts of complex results -----------------------------------------------------------------
LAYOUTS = {
    "conj_physical": lambda lib, z: lib.conj_physical(z),
    "mul_complex_number": lambda lib, z: z * 0.5j,
    "complex_number_plus": lambda lib, z: (1 + 1j) + z,
    "div_complex_number": lambda lib, z: z / (1 - 2j),
    "real_times_j": lambda lib, z: z.real * 1j,
    "complex": lambda lib, z: lib.complex(z.real, z.imag),
    "polar": lambda lib, z: lib.polar(z.abs(), z.imag),
    "nan_to_num": lambda lib, z: lib.nan_to_num(z),
    "view_as_real_of_product": lambda lib, z: lib.view_as_real(z * 1j),
    # (a guard: torch's pow(Scalar, Tensor) is row-major, a complex number too)
    "complex_base_power": lambda lib, z: (1 + 1j) ** z,
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_complex_elementwise_result_follows_torchs_layout(name):
    # torch's elementwise kernels give a transposed operand's layout to the result; these
    # (a complex number operand, the conj/complex kernels) gave row-major results
    strides = []
    for lib in (torch, rg):
        z = lib.tensor(np.stack([A, A * 2])).mT.contiguous().mT
        strides.append(tuple(LAYOUTS[name](lib, z).stride()))
    assert strides[1] == strides[0]
