"""``rg.linalg.inv`` and ``rg.linalg.pinv`` against torch (values and gradients, float64 and
float32), against finite differences, to second order, and their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from nn_testing import check_finite_differences
from surface_testing import same_gradients

RNG = np.random.default_rng(31)


def _well_conditioned(*shape: int) -> np.ndarray:
    """Random square matrices, diagonally shifted away from singularity."""
    n = shape[-1]
    return RNG.standard_normal(shape) + 3.0 * np.eye(n)


def _rank_deficient(m: int, n: int, rank: int) -> np.ndarray:
    return RNG.standard_normal((m, rank)) @ RNG.standard_normal((rank, n))


INV_CASES = {"3x3": (3, 3), "batch": (2, 3, 4, 4), "1x1": (1, 1)}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(INV_CASES))
def test_inv_matches_torch(case, dtype):
    same_gradients(lambda lib, a: lib.linalg.inv(a), [_well_conditioned(*INV_CASES[case])], dtype)


PINV_CASES = {
    "wide": lambda: RNG.standard_normal((3, 5)),
    "tall": lambda: RNG.standard_normal((5, 3)),
    "square batch": lambda: RNG.standard_normal((2, 4, 4)),
    "wide rank 2": lambda: _rank_deficient(3, 5, 2),
    "tall rank 2": lambda: _rank_deficient(6, 4, 2),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(PINV_CASES))
def test_pinv_matches_torch(case, dtype):
    scale = 50.0 if dtype == "float32" and "rank" in case else 1.0
    same_gradients(lambda lib, a: lib.linalg.pinv(a), [PINV_CASES[case]()], dtype, scale_atol=scale)


@pytest.mark.parametrize(
    "options", [dict(atol=0.5), dict(rtol=0.3), dict(atol=0.1, rtol=0.2), dict(atol=0.0)]
)
def test_pinv_tolerances_cut_the_singular_values_torch_cuts(options):
    a = RNG.standard_normal((4, 6)) * np.array([[1.0], [0.4], [0.05], [1e-3]])
    same_gradients(lambda lib, x: lib.linalg.pinv(x, **options), [a])


def test_gradients_match_finite_differences_and_second_order():
    a = _well_conditioned(3, 3)
    check_finite_differences(lambda x: rg.linalg.inv(x), [a], rtol=1e-6, atol=1e-8)
    check_finite_differences(
        lambda x: rg.linalg.pinv(x), [RNG.standard_normal((3, 4))], rtol=1e-6, atol=1e-8
    )
    x, t = rg.tensor(a).require_grad(), torch.tensor(a, requires_grad=True)
    (g,) = rg.autograd.grad(rg.linalg.inv(x).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad(torch.linalg.inv(t).sum(), t, create_graph=True)
    (gg,) = rg.autograd.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-9, atol=1e-10)


def test_errors_name_the_op_and_leave_the_input_usable():
    singular = rg.tensor([[1.0, 2.0], [2.0, 4.0]], dtype="float64")
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(torch.tensor(singular.numpy()))
    with pytest.raises(rg.InvalidArgumentError, match="singular"):
        rg.linalg.inv(singular)
    np.testing.assert_allclose(rg.linalg.pinv(singular).numpy(), np.linalg.pinv(singular.numpy()))
    with pytest.raises(rg.ShapeError, match="square"):
        rg.linalg.inv(rg.ones((2, 3)))
    with pytest.raises(rg.ShapeError, match="at least 2 dimensions"):
        rg.linalg.pinv(rg.ones((3,)))
    with pytest.raises(rg.DTypeError, match="floating point"):
        rg.linalg.inv(rg.tensor([[1, 0], [0, 1]]))
    # hermitian=True reads the lower triangle (torch's eigh); a non-square input is refused
    expected = torch.linalg.pinv(torch.tensor(singular.numpy()), hermitian=True).numpy()
    np.testing.assert_allclose(rg.linalg.pinv(singular, hermitian=True).numpy(), expected)
    with pytest.raises(rg.ShapeError, match=r"linalg\.pinv.*square"):
        rg.linalg.pinv(rg.ones((2, 3)), hermitian=True)
