"""Round 75's defects in the less-used tensor functions, each against torch.

- the refusals torch raises as ``RuntimeError`` (or its ``NotImplementedError`` or
  ``IndexError``) were ``ShapeError``s, ``InvalidArgumentError``s (``ValueError``s) or
  ``DTypeError``s (a ``TypeError``) only, in ``renorm``, ``diag_embed``/``diagonal``,
  ``rot90``, ``roll``, ``cross``/``linalg.cross``, ``cartesian_prod``, ``combinations``,
  ``block_diag``, ``tril_indices``/``triu_indices``, ``vander``, ``meshgrid``, ``cdist``,
  ``pdist``, ``histc``, ``bincount``, ``cov``/``corrcoef``, ``gradient``, ``diff``,
  ``einsum``, ``tensordot``, ``broadcast_shapes``/``broadcast_tensors``, ``cat``,
  ``logcumsumexp``, ``nanmean``, ``aminmax``/``nanmedian`` (an empty dimension), and
  ``cross``'s batch sizes that do not broadcast or operands of two dtypes, a matrix product of
  bools, ``histc``'s and ``histogram``'s refusals; now
  ``SizeMismatchError``, ``MixedDTypeError``, the new ``InvalidValueError`` (an
  ``InvalidArgumentError`` and a ``RuntimeError``), ``UnsupportedDTypeError`` (a
  ``DTypeError`` and a ``NotImplementedError``) and ``EmptyReductionError`` (a
  ``ShapeError``, an ``IndexError`` and a ``RuntimeError``);
- ``combinations`` with a negative ``r`` and ``bincount`` with a negative ``minlength`` or
  weights of another length failed inside NumPy (an ``InvalidArgumentError`` of its words);
- ``diff`` took a ``prepend``/``append`` of another rank with ``n=0``, and
  ``trapezoid``/``cumulative_trapezoid`` 1-d points ``x`` of another length than the samples
  where they broadcast (one point for two intervals); torch refuses both;
- bool samples of ``trapezoid``/``cumulative_trapezoid``, ``cov`` and ``cross`` were taken
  or failed inside NumPy, ``meshgrid``/``cartesian_prod`` took tensors of several dtypes
  (promoted); torch refuses them;
- ``histogram`` took bin edges with a ``range=`` (torch's ``TypeError``: no such overload);
- ``cov`` refused ``fweights`` of an integer dtype other than int64 (int32...); torch takes
  any integral dtype;
- ``nanmean(dtype=torch.int64)`` of a float tensor gave an int mean; torch refuses it;
- ``broadcast_shapes`` returned a tuple, torch a ``Size`` (``.numel()``);
- ``trapezoid`` of integer samples along an empty dimension was float32 zeros, torch's int64;
- ``block_diag`` of a 0-d float64 tensor beside a float32 matrix was float64: torch's dtype
  takes a 0-d input by its category alone (float32).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg
import retrograd.errors as errors

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(75)
X1, X2, X3 = RNG.standard_normal(3), RNG.standard_normal((3, 3)), RNG.standard_normal((2, 3, 3))
I1 = np.array([0, 2, 1])
B2 = X2 > 0


def _refusal(lib, make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make(lib)
        except Exception as error:  # (the class is what is compared)
            return error
    return None


T = lambda lib, a: lib.tensor(a)  # noqa: E731

#: name: (make, torch's class, the hierarchy's class retrograd raises)
REFUSALS = {
    "renorm of a 1-d tensor": (
        lambda lib: T(lib, X1).renorm(2, 0, 1.0), RuntimeError, "SizeMismatchError"),
    "renorm maxnorm < 0": (
        lambda lib: T(lib, X2).renorm(2, 0, -1.0), RuntimeError, "InvalidValueError"),
    "renorm p < 0": (lambda lib: T(lib, X2).renorm(-1, 0, 1.0), RuntimeError, "InvalidValueError"),
    "renorm of ints": (
        lambda lib: T(lib, I1.reshape(1, 3)).renorm(2, 0, 1.0), RuntimeError,
        "UnsupportedDTypeError"),
    "diag_embed dim1 == dim2": (
        lambda lib: T(lib, X2).diag_embed(0, 1, 1), RuntimeError, "SizeMismatchError"),
    "diagonal dim1 == dim2": (
        lambda lib: T(lib, X2).diagonal(0, 1, -1), RuntimeError, "SizeMismatchError"),
    "rot90 dims equal": (
        lambda lib: T(lib, X2).rot90(1, [0, 0]), RuntimeError, "SizeMismatchError"),
    "rot90 one dim": (lambda lib: T(lib, X2).rot90(1, [0]), RuntimeError, "SizeMismatchError"),
    "roll shifts and dims": (
        lambda lib: T(lib, X2).roll((1, 2), (0,)), RuntimeError, "SizeMismatchError"),
    "cross size 2": (
        lambda lib: lib.cross(T(lib, X2[:, :2]), T(lib, X2[:, :2]), dim=1), RuntimeError,
        "SizeMismatchError"),
    "linalg.cross size 2": (
        lambda lib: lib.linalg.cross(T(lib, X2[:2]), T(lib, X2[:2]), dim=0), RuntimeError,
        "SizeMismatchError"),
    "linalg.cross batch sizes": (
        lambda lib: lib.linalg.cross(T(lib, X3[:, :2]), T(lib, X3)), RuntimeError,
        "SizeMismatchError"),
    "cross dtypes": (
        lambda lib: lib.linalg.cross(T(lib, X1), T(lib, X1.astype(np.float32))), RuntimeError,
        "MixedDTypeError"),
    "cross of bools": (lambda lib: lib.linalg.cross(T(lib, B2), T(lib, B2)), NotImplementedError,
                       "UnsupportedDTypeError"),
    "meshgrid of two dtypes": (
        lambda lib: lib.meshgrid(T(lib, X1), T(lib, I1), indexing="ij"), RuntimeError,
        "MixedDTypeError"),
    "meshgrid 2-d": (lambda lib: lib.meshgrid(T(lib, X2), indexing="ij"), RuntimeError,
                     "SizeMismatchError"),
    "cartesian_prod of two dtypes": (
        lambda lib: lib.cartesian_prod(T(lib, X1), T(lib, I1)), RuntimeError, "MixedDTypeError"),
    "matmul of bools": (lambda lib: T(lib, B2) @ T(lib, B2), NotImplementedError,
                        "UnsupportedDTypeError"),
    "trapezoid of bools": (lambda lib: lib.trapezoid(T(lib, B2)), RuntimeError,
                           "UnsupportedDTypeError"),
    "cumulative_trapezoid of bools": (lambda lib: lib.cumulative_trapezoid(T(lib, B2)),
                                      RuntimeError, "UnsupportedDTypeError"),
    "cov of bools": (lambda lib: lib.cov(T(lib, B2)), RuntimeError, "UnsupportedDTypeError"),
    "histc of a NaN": (lambda lib: lib.histc(T(lib, np.array([np.nan, 1.0]))), RuntimeError,
                       "InvalidValueError"),
    "histogram min > max": (lambda lib: lib.histogram(T(lib, X1), 3, range=(1.0, -1.0)),
                            RuntimeError, "InvalidValueError"),
    "histogram of a NaN": (lambda lib: lib.histogram(T(lib, np.array([np.nan, 1.0])), 3),
                           RuntimeError, "InvalidValueError"),
    "histogram of ints": (lambda lib: lib.histogram(T(lib, I1), 3), NotImplementedError,
                          "UnsupportedDTypeError"),
    "histogram edges of another dtype": (
        lambda lib: lib.histogram(T(lib, X1), T(lib, np.array([0.0, 1.0], np.float32))),
        RuntimeError, "MixedDTypeError"),
    "histogram 2-d edges": (lambda lib: lib.histogram(T(lib, X1), T(lib, X2)), RuntimeError,
                            "SizeMismatchError"),
    "histogram no edges": (lambda lib: lib.histogram(T(lib, X1), T(lib, X1[:0])), RuntimeError,
                           "SizeMismatchError"),
    "histogram bins 0": (lambda lib: lib.histogram(T(lib, X1), 0), RuntimeError,
                         "InvalidValueError"),
    "histogram weight shape": (
        lambda lib: lib.histogram(T(lib, X1), 3, weight=T(lib, X1[:2])), RuntimeError,
        "SizeMismatchError"),
    "histogram weight dtype": (
        lambda lib: lib.histogram(T(lib, X1), 3, weight=T(lib, X1.astype(np.float32))),
        RuntimeError, "MixedDTypeError"),
    "histogram edges with range": (
        lambda lib: lib.histogram(T(lib, X1), T(lib, X1[:2]), range=(0.0, 1.0)), TypeError,
        "DTypeError"),
    "cartesian_prod 2-d": (lambda lib: lib.cartesian_prod(T(lib, X2)), RuntimeError,
                           "SizeMismatchError"),
    "combinations 2-d": (lambda lib: lib.combinations(T(lib, X2)), RuntimeError,
                         "SizeMismatchError"),
    "combinations r < 0": (lambda lib: lib.combinations(T(lib, X1), r=-1), RuntimeError,
                           "InvalidValueError"),
    "block_diag 3-d": (lambda lib: lib.block_diag(T(lib, X3)), RuntimeError, "SizeMismatchError"),
    "tril_indices row < 0": (lambda lib: lib.tril_indices(-1, 3), RuntimeError,
                             "InvalidValueError"),
    "triu_indices float": (lambda lib: lib.triu_indices(3, 3, dtype=lib.float32),
                           NotImplementedError, "UnsupportedDTypeError"),
    "vander 2-d": (lambda lib: lib.vander(T(lib, X2)), RuntimeError, "SizeMismatchError"),
    "vander N < 0": (lambda lib: lib.vander(T(lib, X1), N=-1), RuntimeError, "InvalidValueError"),
    "meshgrid indexing": (lambda lib: lib.meshgrid(T(lib, X1), indexing="yx"), RuntimeError,
                          "InvalidValueError"),
    "cdist p < 0": (lambda lib: lib.cdist(T(lib, X2), T(lib, X2), p=-1.0), RuntimeError,
                    "InvalidValueError"),
    "cdist of ints": (
        lambda lib: lib.cdist(T(lib, I1.reshape(3, 1)), T(lib, I1.reshape(3, 1))), RuntimeError,
        "UnsupportedDTypeError"),
    "cdist columns": (lambda lib: lib.cdist(T(lib, X2), T(lib, X2[:, :2])), RuntimeError,
                      "SizeMismatchError"),
    "pdist 3-d": (lambda lib: lib.nn.functional.pdist(T(lib, X3)), RuntimeError,
                  "SizeMismatchError"),
    "pdist p < 0": (lambda lib: lib.nn.functional.pdist(T(lib, X2), -1.0), RuntimeError,
                    "InvalidValueError"),
    "histc max < min": (lambda lib: lib.histc(T(lib, X1), 3, 1.0, -1.0), RuntimeError,
                        "InvalidValueError"),
    "histc of ints": (lambda lib: lib.histc(T(lib, I1)), NotImplementedError,
                      "UnsupportedDTypeError"),
    "bincount negative": (lambda lib: lib.bincount(T(lib, -I1)), RuntimeError,
                          "InvalidValueError"),
    "bincount of floats": (lambda lib: lib.bincount(T(lib, X1)), NotImplementedError,
                           "UnsupportedDTypeError"),
    "bincount minlength < 0": (lambda lib: lib.bincount(T(lib, I1), minlength=-1), RuntimeError,
                               "InvalidValueError"),
    "bincount weights length": (
        lambda lib: lib.bincount(T(lib, I1), weights=T(lib, X2[0, :2])), RuntimeError,
        "SizeMismatchError"),
    "cov 3-d": (lambda lib: lib.cov(T(lib, X3)), RuntimeError, "SizeMismatchError"),
    "corrcoef 3-d": (lambda lib: lib.corrcoef(T(lib, X3)), RuntimeError, "SizeMismatchError"),
    "cov float fweights": (lambda lib: lib.cov(T(lib, X2), fweights=T(lib, X1)), RuntimeError,
                           "UnsupportedDTypeError"),
    "cov negative aweights": (
        lambda lib: lib.cov(T(lib, X2), aweights=T(lib, np.array([1.0, -1.0, 1.0]))),
        RuntimeError, "InvalidValueError"),
    "cov weights sum to 0": (
        lambda lib: lib.cov(T(lib, X2), fweights=T(lib, np.zeros(3, np.int64))), RuntimeError,
        "InvalidValueError"),
    "gradient too short": (lambda lib: lib.gradient(T(lib, X1[:1])), RuntimeError,
                           "SizeMismatchError"),
    "gradient edge_order 3": (lambda lib: lib.gradient(T(lib, X1), edge_order=3), RuntimeError,
                              "InvalidValueError"),
    "diff n < 0": (lambda lib: lib.diff(T(lib, X1), n=-1), RuntimeError, "InvalidValueError"),
    "diff prepend rank": (lambda lib: lib.diff(T(lib, X2), prepend=T(lib, X1)), RuntimeError,
                          "SizeMismatchError"),
    "diff prepend rank, n=0": (
        lambda lib: lib.diff(T(lib, X2), n=0, append=T(lib, X3)), RuntimeError,
        "SizeMismatchError"),
    "diff prepend sizes": (
        lambda lib: lib.diff(T(lib, X2), dim=0, prepend=T(lib, X2[:, :2])), RuntimeError,
        "SizeMismatchError"),
    "einsum repeated index sizes": (
        lambda lib: lib.einsum("ii->i", T(lib, X2[:2])), RuntimeError, "SizeMismatchError"),
    "einsum operand sizes": (
        lambda lib: lib.einsum("ij,jk->ik", T(lib, X2), T(lib, X2[:2])), RuntimeError,
        "SizeMismatchError"),
    "tensordot dims": (
        lambda lib: lib.tensordot(T(lib, X2), T(lib, X2[:2]), dims=([1], [0])), RuntimeError,
        "SizeMismatchError"),
    "tensordot dims < 0": (lambda lib: lib.tensordot(T(lib, X2), T(lib, X2), dims=-1),
                           RuntimeError, "SizeMismatchError"),
    "broadcast_shapes": (lambda lib: lib.broadcast_shapes((2,), (3,)), RuntimeError,
                         "SizeMismatchError"),
    "broadcast_tensors": (lambda lib: lib.broadcast_tensors(T(lib, X1), T(lib, X1[:2])),
                          RuntimeError, "SizeMismatchError"),
    "cat sizes": (lambda lib: lib.cat([T(lib, X2), T(lib, X2[:, :2])]), RuntimeError,
                  "SizeMismatchError"),
    "trapezoid x length": (lambda lib: lib.trapezoid(T(lib, X1), T(lib, X1[:2])), RuntimeError,
                           "SizeMismatchError"),
    "cumulative_trapezoid x length": (
        lambda lib: lib.cumulative_trapezoid(T(lib, X1), x=T(lib, X1[:2])), RuntimeError,
        "SizeMismatchError"),
    "logcumsumexp of ints": (lambda lib: T(lib, I1).logcumsumexp(0), NotImplementedError,
                             "UnsupportedDTypeError"),
    "nanmean to ints": (lambda lib: T(lib, X1).nanmean(dtype=lib.int64), RuntimeError,
                        "UnsupportedDTypeError"),
    "nanmean of ints": (lambda lib: T(lib, I1).nanmean(), RuntimeError, "UnsupportedDTypeError"),
    "aminmax of an empty dim": (
        lambda lib: lib.aminmax(T(lib, X2[:0]), dim=0), IndexError, "EmptyReductionError"),
    "aminmax of nothing": (lambda lib: lib.aminmax(T(lib, X1[:0])), RuntimeError,
                           "EmptyReductionError"),
    "amax of an empty dim": (lambda lib: lib.amax(T(lib, X2[:0]), dim=0), IndexError,
                             "EmptyReductionError"),
    "nanmedian of an empty dim": (
        lambda lib: lib.nanmedian(T(lib, X2[:0]), dim=0), IndexError, "EmptyReductionError"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_raise_torch_s_exception_class(name):
    make, expected_class, ours_class = REFUSALS[name]
    theirs = _refusal(torch, make)
    assert type(theirs) is expected_class, repr(theirs)
    mine = _refusal(rg, make)
    assert isinstance(mine, expected_class), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, getattr(errors, ours_class)), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, rg.RetrogradError)


def test_the_new_classes_keep_the_old_ones():
    """``except rg.ShapeError``/``InvalidArgumentError``/``DTypeError`` still catch them."""
    assert issubclass(errors.InvalidValueError, rg.InvalidArgumentError)
    assert issubclass(errors.UnsupportedDTypeError, rg.DTypeError)
    assert issubclass(errors.EmptyReductionError, rg.ShapeError)


def test_broadcast_shapes_returns_a_size():
    got = rg.broadcast_shapes(3, (2, 1))
    assert isinstance(got, rg.Size) and got == torch.broadcast_shapes(3, (2, 1)) == (2, 3)
    assert got.numel() == 6


def test_trapezoid_of_int_samples_along_an_empty_dim_is_int64():
    y = np.zeros((2, 0), np.int64)
    for kwargs in ({}, {"dx": 0.5}):
        expected = torch.trapezoid(torch.tensor(y), **kwargs)
        got = rg.trapezoid(rg.tensor(y), **kwargs)
        assert str(expected.dtype) == "torch.int64" and str(got.dtype).endswith("int64")
        assert got.shape == expected.shape == (2,) and not np.any(got.numpy())


def test_block_diag_takes_a_0d_input_by_its_category():
    zero = np.array(2.0)
    m = RNG.standard_normal((2, 3)).astype(np.float32)
    expected = torch.block_diag(torch.tensor(zero), torch.tensor(m))
    got = rg.block_diag(rg.tensor(zero), rg.tensor(m))
    assert expected.dtype == torch.float32 and got.dtype == rg.float32
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_bincount_of_nothing_still_takes_weights_of_any_length():
    expected = torch.bincount(torch.zeros(0, dtype=torch.int64), torch.ones(1), minlength=3)
    got = rg.bincount(rg.zeros(0, dtype=rg.int64), rg.ones(1), minlength=3)
    assert got.dtype == rg.int64 and expected.dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_cov_takes_fweights_of_any_integer_dtype():
    x = RNG.standard_normal((2, 4))
    for dtype in (np.int32, np.int16, np.uint8):
        fw = np.array([1, 2, 0, 3], dtype)
        expected = torch.cov(torch.tensor(x), fweights=torch.tensor(fw))
        got = rg.cov(rg.tensor(x), fweights=rg.tensor(fw))
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12)
