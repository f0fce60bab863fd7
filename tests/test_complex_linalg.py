"""Linear algebra of complex tensors against torch (complex128): ``linalg.eig``/``eigvals``
(complex results for real input too), ``inv``, ``det``, ``slogdet``, ``logdet``, ``solve``,
``pinv``, ``matrix_power``, ``matrix_exp``, the spectral matrix norms, ``svd``/``svdvals``,
``qr``, ``eigh``/``eigvalsh``, ``cholesky`` and ``lstsq``: values, first derivatives with
complex ``grad_outputs`` (torch's conjugate-Wirtinger convention), second derivatives where
torch has them, and finite differences of a real loss; a loss depending on an eigenvector's
phase is refused in backward, as torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import AutodiffError


def complex_matrix(seed, shape):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def hermitian_positive(seed, n):
    a = complex_matrix(seed, (n, n))
    return a @ a.conj().T + n * np.eye(n)


def outputs(result):
    return tuple(result) if isinstance(result, tuple) else (result,)


def values(t):
    return t.resolve_conj().detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def eig_phase_free(lib):
    """Eigenvalues and the eigenvectors' magnitudes (independent of each vector's phase)."""

    def f(a):
        eigenvalues, eigenvectors = lib.linalg.eig(a)
        return eigenvalues, eigenvectors.abs()

    return f


def eigh_phase_free(lib):
    def f(a):
        eigenvalues, eigenvectors = lib.linalg.eigh(a)
        return eigenvalues, eigenvectors.abs()

    return f


def svd_phase_free(lib):
    """S, the magnitudes of U and Vh, and the rank-one term ``u_1 v_1^H`` (whose phases
    cancel)."""

    def f(a):
        u, s, vh = lib.linalg.svd(a, full_matrices=False)
        return s, u.abs(), vh.abs(), u[..., :, :1] @ vh[..., :1, :]

    return f


def qr_pair(lib):
    return lambda a: tuple(lib.linalg.qr(a))


def slogdet_pair(lib):
    return lambda a: tuple(lib.linalg.slogdet(a))


SQUARE = complex_matrix(1, (2, 3, 3))
TALL = complex_matrix(2, (4, 3))
HPD = hermitian_positive(3, 3)
# name: (function of the library, input)
CASES = {
    "eig": (eig_phase_free, SQUARE),
    "eig_real_input": (eig_phase_free, SQUARE.real.copy()),
    "eigvals": (lambda lib: lib.linalg.eigvals, SQUARE),
    "inv": (lambda lib: lib.linalg.inv, SQUARE),
    "inverse": (lambda lib: lambda a: a.inverse(), SQUARE),
    "det": (lambda lib: lib.linalg.det, SQUARE),
    "slogdet": (slogdet_pair, SQUARE),
    "logdet": (lambda lib: lambda a: a.logdet(), SQUARE),
    "solve": (lambda lib: lambda a: lib.linalg.solve(a, a.sum(-1)), SQUARE),
    "solve_right": (lambda lib: lambda a: lib.linalg.solve(a, a[..., :1, :], left=False), SQUARE),
    "pinv_tall": (lambda lib: lib.linalg.pinv, TALL),
    "pinv_wide": (lambda lib: lib.linalg.pinv, TALL.T.copy()),
    "pinverse": (lambda lib: lambda a: a.pinverse(), TALL),
    "matrix_power": (lambda lib: lambda a: lib.linalg.matrix_power(a, -2), SQUARE),
    "matrix_exp": (lambda lib: lib.linalg.matrix_exp, SQUARE),
    "norm_nuc": (lambda lib: lambda a: lib.linalg.matrix_norm(a, "nuc"), TALL),
    "norm_2": (lambda lib: lambda a: lib.linalg.matrix_norm(a, 2), TALL),
    "norm_-2": (lambda lib: lambda a: lib.linalg.matrix_norm(a, -2), TALL),
    "svdvals": (lambda lib: lib.linalg.svdvals, TALL),
    "svd_tall": (svd_phase_free, TALL),
    "svd_wide": (svd_phase_free, TALL.T.copy()),
    "svd_square": (svd_phase_free, SQUARE),
    "qr_tall": (qr_pair, TALL),
    "qr_wide": (qr_pair, TALL.T.copy()),
    "eigh": (eigh_phase_free, HPD),
    "eigvalsh": (lambda lib: lib.linalg.eigvalsh, HPD),
    "cholesky": (lambda lib: lib.linalg.cholesky, HPD),
    "cholesky_upper": (lambda lib: lambda a: lib.linalg.cholesky(a, upper=True), HPD),
    "lstsq": (lambda lib: lambda a: lib.linalg.lstsq(a, a[..., :, :2]).solution, TALL),
    "cond": (lambda lib: lib.linalg.cond, SQUARE),
}


def run(lib, name, data):
    make, _ = CASES[name]
    a = lib.tensor(data, requires_grad=True)
    return a, outputs(make(lib)(a))


@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_linalg_values_and_gradients_match_torch(name):
    data = CASES[name][1]
    ta, t_outs = run(torch, name, data)
    ra, r_outs = run(rg, name, data)
    rng = np.random.default_rng(11)
    cotangents = [
        rng.standard_normal(tuple(o.shape))
        + (1j * rng.standard_normal(tuple(o.shape)) if o.is_complex() else 0)
        for o in t_outs
    ]
    for got, expected in zip(r_outs, t_outs):
        assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1], name
        np.testing.assert_allclose(values(got), values(expected), atol=1e-10, err_msg=name)
    (t_grad,) = torch.autograd.grad(t_outs, ta, [torch.tensor(c) for c in cotangents])
    (r_grad,) = rg.autograd.grad(list(r_outs), ra, [rg.tensor(c) for c in cotangents])
    assert r_grad.dtype == rg.float64 if not ta.is_complex() else r_grad.dtype == rg.complex128
    np.testing.assert_allclose(values(r_grad), values(t_grad), atol=1e-9, err_msg=name)


def real_loss(outs, weights):
    """A real loss reading both parts of each (complex) output unevenly."""
    total = 0
    for out, w in zip(outs, weights):
        if out.is_complex():
            total = total + (out.real * w).sum() + 2 * (out.imag * w).sum() + (out.abs() ** 2).sum()
        else:
            total = total + (out * w).sum()
    return total


@pytest.mark.parametrize(
    "name", ["eig", "eig_real_input", "det", "slogdet", "svd_tall", "qr_wide", "eigh", "cholesky"]
)
def test_complex_linalg_gradients_match_finite_differences(name):
    # the gradient of a real loss in z = x + iy is dL/dx + i dL/dy (torch's convention)
    make, data = CASES[name]
    data = np.asarray(data)[0] if data.ndim == 3 else np.asarray(data)
    rng = np.random.default_rng(5)
    a = rg.tensor(data, requires_grad=True)
    outs = outputs(make(rg)(a))
    weights = [rg.tensor(rng.standard_normal(tuple(o.shape))) for o in outs]
    (grad,) = rg.autograd.grad(real_loss(outs, weights), a)

    def loss_at(shifted):
        with rg.no_grad():
            return float(real_loss(outputs(make(rg)(rg.tensor(shifted))), weights).item())

    h = 1e-6
    expected = np.zeros(data.shape, dtype=data.dtype)
    hermitian = name in ("eigh", "cholesky")
    for index in np.ndindex(*data.shape):
        for step in (1.0, 1j) if np.iscomplexobj(data) else (1.0,):
            bump = np.zeros(data.shape, dtype=data.dtype)
            bump[index] = step * h
            if hermitian:  # stay Hermitian: the ops read one triangle
                bump = (bump + bump.conj().T) / 2
            slope = (loss_at(data + bump) - loss_at(data - bump)) / (2 * h)
            expected[index] += slope * step
    if hermitian:  # compare on Hermitian directions only
        got = grad.numpy()
        got, expected = (got + got.conj().T) / 2, expected
    else:
        got = grad.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "name",
    [
        "eigvals",
        "eig",
        "inv",
        "det",
        "slogdet",
        "solve",
        "pinv_tall",
        "matrix_exp",
        "cholesky",
        "svdvals",
        "qr_tall",
        "eigvalsh",
        "norm_nuc",
    ],
)
def test_complex_linalg_second_derivatives_match_torch(name):
    make, data = CASES[name]
    rng = np.random.default_rng(13)
    weights = rng.standard_normal(data.shape) + 1j * rng.standard_normal(data.shape)
    results = {}
    for lib in (torch, rg):
        a = lib.tensor(data, requires_grad=True)
        outs = outputs(make(lib)(a))
        loss = sum(
            ((o * o).real.sum() + o.imag.sum()) if o.is_complex() else (o * o).sum() for o in outs
        )
        if lib is torch:
            (g,) = torch.autograd.grad(loss, a, create_graph=True)
        else:
            (g,) = rg.autograd.grad(loss, a, create_graph=True)
        w = lib.tensor(weights)
        second = (g * w).real.sum() + (g.abs() ** 2).sum()
        (gg,) = (torch.autograd.grad if lib is torch else rg.autograd.grad)(second, a)
        results[lib.__name__] = values(gg)
    np.testing.assert_allclose(results["retrograd"], results["torch"], atol=1e-8, err_msg=name)


def test_eig_of_a_real_matrix_is_complex_with_torchs_vectors():
    data = np.array([[0.0, -2.0, 1.0], [2.0, 0.0, 0.5], [0.3, 0.1, 1.0]])  # a complex pair
    for dtype, complex_dtype in (("float64", rg.complex128), ("float32", rg.complex64)):
        eigenvalues, eigenvectors = rg.linalg.eig(rg.tensor(data, dtype=dtype))
        t_values, t_vectors = torch.linalg.eig(torch.tensor(data, dtype=getattr(torch, dtype)))
        assert eigenvalues.dtype == complex_dtype and eigenvectors.dtype == complex_dtype
        np.testing.assert_allclose(eigenvalues.numpy(), t_values.numpy(), atol=1e-5)
        np.testing.assert_allclose(eigenvectors.numpy(), t_vectors.numpy(), atol=1e-5)
    np.testing.assert_allclose(
        rg.linalg.eigvals(rg.tensor(data)).numpy(), torch.linalg.eigvals(torch.tensor(data)).numpy()
    )


def test_eig_refuses_a_loss_that_depends_on_the_eigenvectors_phase():
    a = rg.tensor(SQUARE[0], requires_grad=True)
    _, eigenvectors = rg.linalg.eig(a)
    with pytest.raises(AutodiffError, match=r"linalg\.eig:.*phase"):
        rg.autograd.grad(eigenvectors.real.sum(), a)
    with pytest.raises(RuntimeError, match=r"e\^\{i phi\}"):  # torch's
        ta = torch.tensor(SQUARE[0], requires_grad=True)
        torch.autograd.grad(torch.linalg.eig(ta)[1].real.sum(), ta)
    b = rg.tensor(HPD, requires_grad=True)
    with pytest.raises(AutodiffError, match=r"linalg\.eigh:.*phase"):
        rg.autograd.grad(rg.linalg.eigh(b)[1].real.sum(), b)
    c = rg.tensor(TALL, requires_grad=True)
    with pytest.raises(AutodiffError, match=r"linalg\.svd:.*phase"):
        rg.autograd.grad(rg.linalg.svd(c)[0].real.sum(), c)


def test_linalg_still_refuses_integer_input_naming_the_op():
    with pytest.raises(rg.errors.DTypeError, match=r"linalg\.eig"):
        rg.linalg.eig(rg.tensor([[1, 2], [3, 4]]))
    with pytest.raises(rg.errors.ShapeError, match=r"linalg\.eig"):
        rg.linalg.eig(rg.zeros(2, 3, dtype=rg.complex64))


# -- logaddexp, cov/corrcoef, l1_loss and the convolutions of complex tensors ---------------------
def c(seed, *shape):
    return complex_matrix(seed, shape)


FUNCTIONS = {
    "logaddexp": (lambda lib, a, b: lib.logaddexp(a, b), (c(1, 3, 4), c(2, 3, 4))),
    "cov": (lambda lib, a: lib.cov(a), (c(3, 3, 5),)),
    "cov_weighted": (
        lambda lib, a: lib.cov(a, aweights=lib.tensor(np.arange(1.0, 6.0)), correction=0),
        (c(4, 3, 5),),
    ),
    "corrcoef": (lambda lib, a: lib.corrcoef(a), (c(5, 3, 5),)),
    "l1_loss": (lambda lib, a, b: lib.nn.functional.l1_loss(a, b), (c(6, 3, 4), c(7, 3, 4))),
    "l1_loss_none": (
        lambda lib, a, b: lib.nn.functional.l1_loss(a, b, reduction="none"),
        (c(8, 3, 4), c(9, 3, 4)),
    ),
    "conv1d": (
        lambda lib, x, w, b: lib.nn.functional.conv1d(x, w, b, padding=1),
        (c(10, 2, 3, 6), c(11, 4, 3, 3), c(12, 4)),
    ),
    "conv2d": (
        lambda lib, x, w: lib.nn.functional.conv2d(x, w, stride=2, groups=2),
        (c(13, 1, 4, 5, 5), c(14, 2, 2, 3, 3)),
    ),
    "conv_transpose1d": (
        lambda lib, x, w, b: lib.nn.functional.conv_transpose1d(x, w, b, stride=2),
        (c(15, 2, 3, 4), c(16, 3, 2, 3), c(17, 2)),
    ),
    "conv_transpose2d": (
        lambda lib, x, w: lib.nn.functional.conv_transpose2d(x, w, padding=1),
        (c(18, 1, 2, 3, 3), c(19, 2, 2, 2, 2)),
    ),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_complex_functions_values_and_gradients_match_torch(name):
    f, arrays = FUNCTIONS[name]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    r_in = [rg.tensor(a, requires_grad=True) for a in arrays]
    t_out, r_out = f(torch, *t_in), f(rg, *r_in)
    assert str(r_out.dtype).split(".")[-1] == str(t_out.dtype).split(".")[-1], name
    np.testing.assert_allclose(values(r_out), values(t_out), atol=1e-12, err_msg=name)
    rng = np.random.default_rng(21)
    shape = tuple(t_out.shape)
    cotangent = rng.standard_normal(shape) + (
        1j * rng.standard_normal(shape) if t_out.is_complex() else 0
    )
    t_grads = torch.autograd.grad(t_out, t_in, torch.tensor(cotangent), create_graph=True)
    r_grads = rg.autograd.grad(r_out, r_in, rg.tensor(cotangent), create_graph=True)
    for got, expected in zip(r_grads, t_grads):
        np.testing.assert_allclose(values(got), values(expected), atol=1e-12, err_msg=name)
    # second derivatives, of a real function of the first (a bias's reaches no input: left)
    t_second = torch.autograd.grad(sum((g.abs() ** 2).sum() for g in t_grads), t_in[:2])
    r_second = rg.autograd.grad(sum((g.abs() ** 2).sum() for g in r_grads), r_in[:2])
    for got, expected in zip(r_second, t_second):
        np.testing.assert_allclose(values(got), values(expected), atol=1e-10, err_msg=name)


def test_complex_convolution_refuses_mixed_dtypes_naming_the_op():
    x = rg.tensor(c(1, 1, 2, 4))
    with pytest.raises(rg.errors.DTypeError, match="conv1d"):
        rg.nn.functional.conv1d(x, rg.ones(1, 2, 2, dtype=rg.float64))
    with pytest.raises(rg.errors.DTypeError, match="conv1d"):
        rg.nn.functional.conv1d(x, rg.tensor(c(2, 1, 2, 2)), rg.ones(1, dtype=rg.float64))


def test_complex_logaddexp_keeps_torchs_values_at_infinities_and_large_gaps():
    inf = float("inf")
    a = np.array([-inf + 0j, inf + 0j, -inf + 0j, 1000 + 1j, 1 + 1j, inf + 0j, -inf + 2j])
    b = np.array([-inf + 0j, inf + 0j, 2 + 1j, -1000 + 0j, 1 + 1j, -inf + 0j, -inf + 1j])
    expected = torch.logaddexp(torch.tensor(a), torch.tensor(b)).numpy()
    got = rg.logaddexp(rg.tensor(a), rg.tensor(b)).numpy()
    np.testing.assert_array_equal(np.isinf(got.real), np.isinf(expected.real))
    np.testing.assert_allclose(got, expected)


def test_hermitian_pinv_of_complex_input_reads_the_lower_triangle_as_torchs():
    # the upper triangle and the diagonal's imaginary parts are not read (LAPACK's heevd)
    for data in (HPD, SQUARE[0]):
        got = rg.linalg.pinv(rg.tensor(data), hermitian=True).numpy()
        expected = torch.linalg.pinv(torch.tensor(data), hermitian=True).numpy()
        np.testing.assert_allclose(got, expected, atol=1e-10)
