"""Bad input across the public surface (err88's introspection sweep, 7 December): each case is
one defect the sweep found, where torch 2.13 refused a call that retrograd computed, computed
one retrograd refused, or retrograd's refusal was a bare Python exception. Every refusal must
be the hierarchy's class naming the op, and the tensors of the failed call stay usable."""

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg

RNG = np.random.default_rng(88)
MATRIX = RNG.standard_normal((2, 3)).astype(np.float32)
INTS = np.arange(6, dtype=np.int64).reshape(2, 3)
BOOLS = INTS % 2 == 0


def _pair(array):
    return torch.tensor(array), rg.tensor(array)


# (id, the call given a module (torch or rg) and the operands, the operands, the class
# retrograd raises, the op its message names)
REFUSED = [
    (
        "norm_except_dim_dim_out_of_range",
        lambda m, x: m.norm_except_dim(x, 2, 5),
        [MATRIX],
        rg.ShapeError,
        "norm_except_dim",
    ),
    (
        "vecdot_of_ints",
        lambda m, x, y: m.linalg.vecdot(x, y),
        [INTS, INTS],
        rg.errors.KernelDTypeError,
        "vecdot",
    ),
    (
        "vander_of_bools",
        lambda m, x: m.linalg.vander(x),
        [BOOLS[0]],
        rg.errors.KernelDTypeError,
        "vander",
    ),
    (
        "glu_of_ints",
        lambda m, x: m.nn.functional.glu(x, 0),
        [INTS],
        rg.errors.UnsupportedDTypeError,
        "glu",
    ),
    (
        "bce_with_logits_of_an_int_input",
        lambda m, x, y: m.nn.functional.binary_cross_entropy_with_logits(x, y),
        [INTS, MATRIX],
        rg.errors.UnsupportedDTypeError,
        "binary_cross_entropy_with_logits",
    ),
    (
        "bce_with_logits_of_an_int_target",
        lambda m, x, y: m.nn.functional.binary_cross_entropy_with_logits(x, y),
        [MATRIX, INTS],
        rg.errors.ResultCastError,
        "binary_cross_entropy_with_logits",
    ),
    (
        "multilabel_soft_margin_loss_of_an_int_input",
        lambda m, x, y: m.nn.functional.multilabel_soft_margin_loss(x, y),
        [INTS, MATRIX],
        rg.errors.UnsupportedDTypeError,
        "multilabel_soft_margin_loss",
    ),
    (
        "soft_margin_loss_of_an_int_input",
        lambda m, x, y: m.nn.functional.soft_margin_loss(x, y),
        [INTS, MATRIX],
        rg.errors.ResultCastError,
        "soft_margin_loss",
    ),
    (
        "bernoulli_of_bool_probabilities",
        lambda m, x: m.bernoulli(x),
        [BOOLS],
        rg.errors.UnsupportedDTypeError,
        "bernoulli",
    ),
    (
        "tensorinv_of_a_0d_tensor",
        lambda m, x: m.linalg.tensorinv(x),
        [np.array(2.0, dtype=np.float32)],
        rg.errors.InvalidValueError,
        "tensorinv",
    ),
    (
        "diag_of_a_float_diagonal",
        lambda m, x: m.diag(x, 1.5),
        [MATRIX],
        rg.errors.ArgumentTypeError,
        "diag",
    ),
    (
        "settings_query_given_an_argument",
        lambda m, x: m.get_num_threads(x),
        [MATRIX],
        rg.DTypeError,
        "get_num_threads",
    ),
    (
        "deprecated_add_with_an_operand_too_many",
        lambda m, x, i: x.add(1, i, x),
        [MATRIX, np.array([0, 7])],
        rg.DTypeError,
        "add",
    ),
    (
        "fft2_of_one_size_for_two_dims",
        lambda m, x: m.fft.fft2(x, [5]),
        [MATRIX],
        rg.errors.InvalidValueError,
        "fft2",
    ),
    (
        "trapezoid_of_points_that_do_not_broadcast",
        lambda m, y, x: m.trapezoid(y, x),
        [RNG.standard_normal((1, 2, 4)), RNG.standard_normal((3, 5, 2, 2))],
        rg.ShapeError,
        "trapezoid",
    ),
]


@pytest.mark.parametrize(
    "call, arrays, kind, op", [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_refused_as_torch_refuses_and_operands_stay_usable(call, arrays, kind, op):
    pairs = [_pair(a) for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception):  # noqa: B017 (torch's class varies; ours is below)
            call(torch, *[t for t, _ in pairs])
        with pytest.raises(kind, match=op):
            call(rg, *[r for _, r in pairs])
    for array, (_, ours) in zip(arrays, pairs):  # unchanged, and usable in a further op
        np.testing.assert_array_equal(ours.numpy(), array)
        np.testing.assert_allclose((ours * 1).sum().item(), (array * 1).sum(), rtol=1e-5)


# calls torch computes, and retrograd refused or computed otherwise
COMPUTED = [
    ("fftn_of_an_int_size", lambda m, x: m.fft.fftn(x, 5), [MATRIX]),
    ("rfft2_of_int_size_and_dim", lambda m, x: m.fft.rfft2(x, 1, 0), [MATRIX]),
    ("matrix_rank_of_a_positional_tol", lambda m, x: m.linalg.matrix_rank(x, 0.5), [MATRIX]),
    (
        "matrix_rank_of_a_tensor_tol",
        lambda m, x, tol: m.linalg.matrix_rank(x, tol),
        [MATRIX, np.array(0.5, dtype=np.float32)],
    ),
    (
        "trapezoid_of_points_of_fewer_dims_along_dim_0",
        lambda m, y, x: m.trapezoid(y, x, dim=0),
        [RNG.standard_normal((2, 3, 4)), RNG.standard_normal((3, 4))],
    ),
]


@pytest.mark.parametrize(
    "call, arrays", [case[1:] for case in COMPUTED], ids=[case[0] for case in COMPUTED]
)
def test_computed_as_torch_computes(call, arrays):
    pairs = [_pair(a) for a in arrays]
    expected = call(torch, *[t for t, _ in pairs])
    ours = call(rg, *[r for _, r in pairs])
    assert tuple(ours.shape) == tuple(expected.shape)
    np.testing.assert_allclose(ours.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
