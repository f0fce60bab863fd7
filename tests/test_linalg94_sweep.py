"""The torch.linalg surface against torch 2.13, output by output (helper linalg94): whether each
output of the multi-output functions requires grad and has a ``grad_fn`` as torch's, its dtype
and shape, and what a backward through an output of no derivative does. Each case here
differed before its fix; the seeded sweep at the end pins what was found right."""

import numpy as np
import pytest
import torch

import retrograd as rg

RNG_SEED = 94


def _pair(array: np.ndarray) -> tuple[torch.Tensor, rg.Tensor]:
    return torch.tensor(array, requires_grad=True), rg.tensor(array, requires_grad=True)


def _assert_outputs_match(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for index, (mine, reference) in enumerate(zip(ours, theirs)):
        where = f"output {index}"
        assert tuple(mine.shape) == tuple(reference.shape), where
        assert str(mine.dtype).split(".")[-1] == str(reference.dtype).split(".")[-1], where
        assert mine.requires_grad == reference.requires_grad, where
        assert (mine.grad_fn is None) == (reference.grad_fn is None), where


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_slogdet_sign_requires_grad_and_its_backward_leaves_no_gradient(dtype):
    matrix = (np.eye(3) + 0.1).astype(dtype)
    t, x = _pair(matrix)
    _assert_outputs_match(rg.linalg.slogdet(x), torch.linalg.slogdet(t))
    _assert_outputs_match(rg.slogdet(x), torch.slogdet(t))
    torch.linalg.slogdet(t)[0].sum().backward()
    assert t.grad is None  # torch's backward runs and reaches nothing
    grads = rg.linalg.slogdet(x)[0].sum().backward()
    assert x.grad(grads) is None


def test_slogdet_sign_in_a_loss_changes_nothing_first_and_second_order():
    matrix = np.random.default_rng(RNG_SEED).standard_normal((2, 3, 3))
    t, x = _pair(matrix)

    def loss(lib, a):
        sign, logabsdet = lib.linalg.slogdet(a)
        return (sign * logabsdet.square()).sum()

    (tg,) = torch.autograd.grad(loss(torch, t), t, create_graph=True)
    (g,) = rg.autograd.grad(loss(rg, x), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-10, atol=1e-12)
    (tgg,) = torch.autograd.grad(tg.square().sum(), t)
    (gg,) = rg.autograd.grad(g.square().sum(), x)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("driver", ["gelsd", "gelss"])
def test_lstsq_singular_values_are_not_differentiable(driver):
    rng = np.random.default_rng(RNG_SEED)
    t, x = _pair(rng.standard_normal((4, 3)))
    rhs = rng.standard_normal((4, 2))
    ours = rg.linalg.lstsq(x, rg.tensor(rhs), driver=driver)
    theirs = torch.linalg.lstsq(t, torch.tensor(rhs), driver=driver)
    _assert_outputs_match(ours, theirs)
    assert not ours.singular_values.requires_grad


@pytest.mark.parametrize("driver", [None, "gelsy"])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_lstsq_empty_residuals_require_grad_as_torch(driver, dtype):
    rng = np.random.default_rng(RNG_SEED)
    matrix = rng.standard_normal((2, 4, 3)) + (1j if dtype == "complex128" else 0) * rng.random()
    matrix = matrix.astype(dtype)
    rhs = rng.standard_normal((2, 4, 2)).astype(dtype)
    t, x = _pair(matrix)
    ours = rg.linalg.lstsq(x, rg.tensor(rhs), driver=driver)
    theirs = torch.linalg.lstsq(t, torch.tensor(rhs), driver=driver)
    _assert_outputs_match(ours, theirs)
    # only B requiring grad: torch's residuals follow it
    tb, b = _pair(rhs)
    ours = rg.linalg.lstsq(rg.tensor(matrix), b, driver=driver)
    theirs = torch.linalg.lstsq(torch.tensor(matrix), tb, driver=driver)
    _assert_outputs_match(ours, theirs)


@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 3, 3)])
def test_qr_mode_r_empty_q_is_an_output_of_the_factorization(shape):
    matrix = np.random.default_rng(RNG_SEED).standard_normal(shape)
    t, x = _pair(matrix)
    ours, theirs = rg.linalg.qr(x, mode="r"), torch.linalg.qr(t, mode="r")
    _assert_outputs_match(ours, theirs)
    with pytest.raises(RuntimeError, match="depends on Q"):
        theirs.Q.sum().backward()
    with pytest.raises(rg.RetrogradError, match="depends on Q"):
        ours.Q.sum().backward()


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_ldl_factor_of_a_complex_matrix_requiring_grad(dtype):
    rng = np.random.default_rng(RNG_SEED)
    raw = rng.standard_normal((2, 3, 3)) + 1j * rng.standard_normal((2, 3, 3))
    matrix = (raw + np.swapaxes(raw.conj(), -1, -2)).astype(dtype)
    t, x = _pair(matrix)
    for hermitian in (False, True):
        ours = rg.linalg.ldl_factor_ex(x, hermitian=hermitian)
        theirs = torch.linalg.ldl_factor_ex(t, hermitian=hermitian)
        _assert_outputs_match(ours, theirs)
        np.testing.assert_allclose(ours.LD.detach().numpy(), theirs.LD.detach().numpy(), 1e-5)
        assert ours.pivots.tolist() == theirs.pivots.tolist()
        _assert_outputs_match(
            rg.linalg.ldl_factor(x, hermitian=hermitian),
            torch.linalg.ldl_factor(t, hermitian=hermitian),
        )
    with pytest.raises(RuntimeError, match="ldl_factor"):
        torch.linalg.ldl_factor(t)[0].real.sum().backward()
    with pytest.raises(rg.RetrogradError, match="ldl_factor"):
        rg.linalg.ldl_factor(x)[0].real.sum().backward()


@pytest.mark.parametrize("p", [None, "fro", "nuc", 1, 2, -2, float("inf")])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_cond_of_an_empty_batch_of_complex_matrices_is_real(p, dtype):
    matrix = np.zeros((0, 3, 3), dtype)
    ours = rg.linalg.cond(rg.tensor(matrix), p)
    theirs = torch.linalg.cond(torch.tensor(matrix), p)
    _assert_outputs_match([ours], [theirs])


def _flat(value) -> list:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat(item)]
    return [value]


def _sweep_cases(rng: np.random.Generator, dtype: str, batch: tuple[int, ...]):
    def draw(*shape):
        values = rng.standard_normal(batch + shape)
        if dtype.startswith("complex"):
            values = values + 1j * rng.standard_normal(batch + shape)
        return values.astype(dtype)

    square, tall, wide = draw(3, 3), draw(4, 3), draw(3, 5)
    positive = square @ np.swapaxes(square.conj(), -1, -2) + 3 * np.eye(3, dtype=dtype)
    hermitian = square + np.swapaxes(square.conj(), -1, -2)
    rhs = draw(4, 2)
    return [
        ("slogdet", lambda la, a: la.slogdet(a), [square]),
        ("eigh", lambda la, a: la.eigh(a), [hermitian]),
        ("eig", lambda la, a: la.eig(a), [square]),
        ("svd full", lambda la, a: la.svd(a), [tall]),
        ("svd reduced", lambda la, a: la.svd(a, full_matrices=False), [wide]),
        ("qr complete", lambda la, a: la.qr(a, mode="complete"), [wide]),
        ("qr r", lambda la, a: la.qr(a, mode="r"), [tall]),
        ("lu_factor_ex", lambda la, a: la.lu_factor_ex(a), [square]),
        ("lu", lambda la, a: la.lu(a), [tall]),
        ("inv_ex", lambda la, a: la.inv_ex(a), [square]),
        ("cholesky_ex", lambda la, a: la.cholesky_ex(a), [positive]),
        ("ldl_factor_ex", lambda la, a: la.ldl_factor_ex(a), [hermitian]),
        ("matrix_rank", lambda la, a: la.matrix_rank(a, hermitian=True), [hermitian]),
        ("pinv hermitian", lambda la, a: la.pinv(a, hermitian=True), [hermitian]),
        ("cond nuc", lambda la, a: la.cond(a, "nuc"), [square]),
        ("lstsq gelsd", lambda la, a, b: la.lstsq(a, b, driver="gelsd"), [tall, rhs]),
        ("lstsq gelsy", lambda la, a, b: la.lstsq(a, b, driver="gelsy"), [tall, rhs]),
        ("lstsq gels", lambda la, a, b: la.lstsq(a, b, driver="gels"), [tall, rhs]),
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_seeded_sweep_of_the_multi_output_functions(dtype):
    """Every output's shape, dtype, requires_grad and grad_fn as torch's, batched, unbatched
    and over an empty batch (values of the unique outputs to float rounding)."""
    rng = np.random.default_rng(RNG_SEED)
    for batch in ((), (2,), (0,)):
        for name, call, arrays in _sweep_cases(rng, dtype, batch):
            pairs = [_pair(array) for array in arrays]
            theirs = _flat(call(torch.linalg, *[t for t, _ in pairs]))
            ours = _flat(call(rg.linalg, *[x for _, x in pairs]))
            try:
                _assert_outputs_match(ours, theirs)
            except AssertionError as failure:
                raise AssertionError(f"{name} {dtype} batch {batch}: {failure}") from None


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_slogdet_sign_of_a_singular_matrix_is_zero(dtype):
    matrices = np.stack([np.ones((3, 3)), 1j * np.eye(3)]).astype(dtype)
    ours = rg.linalg.slogdet(rg.tensor(matrices))
    theirs = torch.linalg.slogdet(torch.tensor(matrices))
    np.testing.assert_allclose(ours.sign.numpy(), theirs.sign.numpy(), atol=1e-6)
    np.testing.assert_array_equal(ours.logabsdet.numpy(), theirs.logabsdet.numpy())


@pytest.mark.parametrize("shape", [(2, 0, 0), (3, 0), (0, 3)])
def test_lu_factor_of_empty_matrices_is_a_recorded_copy(shape):
    t, x = _pair(np.zeros(shape))
    ours, theirs = rg.linalg.lu_factor_ex(x), torch.linalg.lu_factor_ex(t)
    _assert_outputs_match(ours, theirs)
    assert ours.LU is not x
    _assert_outputs_match(rg.linalg.lu_factor(x), torch.linalg.lu_factor(t))


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 3)])
def test_lu_unpack_without_data_gives_empty_factors_that_require_grad(shape):
    t, x = _pair(np.random.default_rng(RNG_SEED).standard_normal(shape))
    theirs = torch.lu_unpack(*torch.linalg.lu_factor(t), unpack_data=False)
    ours = rg.lu_unpack(*rg.linalg.lu_factor(x), unpack_data=False)
    _assert_outputs_match(ours, theirs)
    np.testing.assert_array_equal(ours.P.numpy(), theirs.P.numpy())
