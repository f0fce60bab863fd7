"""Regressions found by the round-49 number, dtype and Python-protocol programs
(tests/test_random_scalars_49.py); expected values and refusals from torch."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _same(got, want) -> None:
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


# -- complex into bool: nonzero-ness, not the real part ------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.tensor([1j, 0j, 1 + 0j, -2 - 1j]).bool(),
        lambda lib: lib.tensor([1j, 0j, 1 + 0j]).to(lib.bool),
        lambda lib: lib.tensor([1j, 0j, 2], dtype=lib.bool),
        lambda lib: lib.tensor(np.array([0j, 1j]), dtype=lib.bool),
        lambda lib: lib.tensor([True, False]).masked_fill(
            lib.tensor([0, 1]).bool(), lib.tensor(1j)
        ),
        lambda lib: lib.tensor([False, False]).fill_(lib.tensor(1j)),
        lambda lib: _assigned(lib.tensor([False, False]), lib.tensor(1j)),
    ],
)
def test_a_complex_value_made_bool_is_true_where_either_part_is_nonzero(make) -> None:
    # retrograd kept the real part (1j was False); torch's cast tests the whole number
    _same(make(rg), make(torch))


def _assigned(t, value):
    t[1] = value
    return t


# -- Python's number protocol ------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, error",
    [
        (lambda t: int(t(1j)), rg.DTypeError),
        (lambda t: float(t(2 + 1j)), rg.DTypeError),
        (lambda t: math.floor(t(1j)), rg.DTypeError),
        (lambda t: math.isnan(t([1j])), rg.DTypeError),
        (lambda t: int(t(float("nan"))), rg.InvalidArgumentError),
        (lambda t: int(t(float("inf"))), rg.InvalidArgumentError),
        (lambda t: int(t([1, 2])), rg.ShapeError),
        (lambda t: complex(t([1.0, 2.0])), rg.ShapeError),
        (lambda t: round(t(2.5)), rg.DTypeError),
        (lambda t: round(t([2.55]), 1), rg.DTypeError),
        (lambda t: math.trunc(t(2.5)), rg.DTypeError),
        (lambda t: divmod(t([7, -7]), 2), rg.DTypeError),
        (lambda t: divmod(7, t([2])), rg.DTypeError),
        (lambda t: format(t(2.5), "d"), rg.InvalidArgumentError),
        (lambda t: format(t(1j), "x"), rg.InvalidArgumentError),
    ],
)
def test_python_number_hooks_refuse_as_torch_in_retrograd_errors(call, error) -> None:
    # each was a bare TypeError/ValueError of Python's own (or none: no hook at all)
    with pytest.raises((TypeError, ValueError, RuntimeError, OverflowError)):
        call(torch.tensor)
    with pytest.raises(error):
        call(rg.tensor)


@pytest.mark.parametrize(
    "call",
    [
        lambda t: int(t(1 + 0j)),
        lambda t: float(t(2.5 + 0j)),
        lambda t: int(t(-2.7)),
        lambda t: math.floor(t(-2.5)),
        lambda t: format(t(2), ".2f"),
        lambda t: format(t(True), ".1f"),
        lambda t: f"{t(3.14159):>8.3f}",
    ],
)
def test_python_number_hooks_that_torch_takes_still_work(call) -> None:
    assert call(rg.tensor) == call(torch.tensor)


# -- sequences as operands ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda t: [1.0, 2.0] @ t,
        lambda t: t @ [1.0, 2.0],
        lambda t: (1.0, 2.0) @ t,
        lambda t: [7.0, 8.0] // t,
        lambda t: (7.0, 8.0) // t,
    ],
)
def test_a_python_sequence_is_no_operand_of_matmul_or_reflected_floor_divide(call) -> None:
    with pytest.raises(TypeError):
        call(torch.tensor([1.0, 2.0]))
    x = rg.tensor([1.0, 2.0])
    with pytest.raises(rg.DTypeError, match=r"matmul|floor_divide"):
        call(x)
    assert x.tolist() == [1.0, 2.0]


# -- promotion ---------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_a_float_alpha_is_taken_for_a_complex_result(alpha) -> None:
    a, b = [1, 2, 3], [1 + 1j, 2j, -1]
    for op in ("add", "sub"):
        for left, right in ((a, b), (b, a)):
            want = getattr(torch, op)(torch.tensor(left), torch.tensor(right), alpha=alpha)
            got = getattr(rg, op)(rg.tensor(left), rg.tensor(right), alpha=alpha)
            _same(got, want)


def test_result_type_takes_a_complex_python_number() -> None:
    cases = [(1j, 2), (2.5, 1j), (True, 1j)]
    tensors = [[1], [1.5], [True], np.array([1], np.int8)]
    for default in ("float32", "float64"):
        torch.set_default_dtype(getattr(torch, default))
        rg.set_default_dtype(getattr(rg, default))
        try:
            for a, b in cases:
                assert str(rg.result_type(a, b)) == str(torch.result_type(a, b))[6:]
            for data in tensors:
                for number in (1j, 2j + 1):
                    want = torch.result_type(torch.tensor(data), number)
                    assert str(rg.result_type(rg.tensor(data), number)) == str(want)[6:]
                    want = torch.result_type(number, torch.tensor(data))
                    assert str(rg.result_type(number, rg.tensor(data))) == str(want)[6:]
        finally:
            torch.set_default_dtype(torch.float32)
            rg.set_default_dtype(rg.float32)


# -- values written from a 0-d tensor ----------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, value",
    [("float32", 1j), ("float64", 2 + 3j), ("int64", 1j), ("int64", float("nan")),
     ("int64", float("inf")), ("int32", 1j)],
)  # fmt: skip
def test_a_zero_d_tensor_torch_cannot_convert_is_refused_by_masked_fill(dtype, value) -> None:
    # torch reads the 0-d value as a number and refuses it; retrograd cast it (dropping the
    # imaginary part, writing int64's -2**63 for NaN)
    mask = [True, False, True]
    with pytest.raises(RuntimeError, match="cannot be converted"):
        torch.zeros(3, dtype=getattr(torch, dtype)).masked_fill(
            torch.tensor(mask), torch.tensor(value)
        )
    x = rg.zeros(3, dtype=getattr(rg, dtype))
    with pytest.raises(rg.RetrogradError, match="masked_fill"):
        x.masked_fill(rg.tensor(mask), rg.tensor(value))
    assert x.tolist() == [0, 0, 0]


def test_a_zero_d_complex_tensor_with_no_imaginary_part_fills_a_real_tensor() -> None:
    mask = [True, False]
    want = torch.zeros(2).masked_fill(torch.tensor(mask), torch.tensor(2 + 0j))
    _same(rg.zeros(2).masked_fill(rg.tensor(mask), rg.tensor(2 + 0j)), want)


# -- Python ints past 64 bits --------------------------------------------------------------------
@pytest.mark.parametrize("value", [2**64, 2**100, -(2**63) - 1, -(2**80)])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int64", "bool"])
@pytest.mark.parametrize(
    "call",
    [
        lambda x, v: x + v,
        lambda x, v: v * x,
        lambda x, v: x < v,
        lambda x, v: x == v,
        lambda x, v: x.clamp(max=v),
        lambda x, v: x.fill_(v),
    ],
)
def test_a_python_int_past_64_bits_is_refused_as_torch(call, dtype, value) -> None:
    # torch: "int too big to convert" / "can't convert negative int to unsigned"; retrograd
    # wrapped it into a narrow dtype, made it a float, or raised a bare OverflowError
    with pytest.raises((RuntimeError, OverflowError)):
        call(torch.tensor([1, 0], dtype=getattr(torch, dtype)), value)
    x = rg.tensor([1, 0], dtype=getattr(rg, dtype))
    with pytest.raises(rg.InvalidArgumentError, match="too big to convert"):
        call(x, value)
    assert x.tolist() == [1, 0]


def test_python_ints_within_64_bits_still_combine() -> None:
    for value in (2**63 - 1, -(2**63), 2**40):
        _same(rg.tensor([1.5]) * value, torch.tensor([1.5]) * value)
        _same(rg.tensor([3], dtype=rg.int8) + value, torch.tensor([3], dtype=torch.int8) + value)


# -- dtype objects -----------------------------------------------------------------------------
def test_finfo_of_a_complex_dtype_is_its_parts() -> None:
    for name in ("complex64", "complex128"):
        ours, theirs = rg.finfo(getattr(rg, name)), torch.finfo(getattr(torch, name))
        for field in ("bits", "eps", "max", "min", "tiny", "resolution", "smallest_normal"):
            assert getattr(ours, field) == getattr(theirs, field), field
        assert str(ours.dtype) == str(theirs.dtype)


def test_to_complex_and_iinfo_as_torch() -> None:
    for name in ("float32", "float64", "bfloat16", "complex64", "complex128"):
        assert str(getattr(rg, name).to_complex()) == str(getattr(torch, name).to_complex())[6:]
    for name in ("int8", "uint8", "int32", "int64", "bool"):
        with pytest.raises(RuntimeError):
            getattr(torch, name).to_complex()
        with pytest.raises(rg.DTypeError, match="to_complex"):
            getattr(rg, name).to_complex()
    with pytest.raises(TypeError):
        torch.iinfo(torch.bool)
    with pytest.raises(rg.DTypeError, match="iinfo"):
        rg.iinfo(rg.bool)


def test_nansum_refuses_complex_as_torch() -> None:
    with pytest.raises(RuntimeError):
        torch.tensor([1j, float("nan")]).nansum()
    with pytest.raises(rg.DTypeError, match="nansum"):
        rg.tensor([1j, float("nan")]).nansum()


# -- found by the random programs themselves ---------------------------------------------------
def test_a_numpy_complex_array_made_a_real_tensor_keeps_its_real_part() -> None:
    # torch casts the array (its real part, with a warning); retrograd refused it. A Python
    # list of complex numbers stays refused, as torch refuses it.
    data = np.array([[1.5 + 2j, -2.25 - 1j], [0.5j, 3 + 0j]], np.complex64)
    for name in ("float32", "float64", "int64", "uint8", "bool"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's "discards the imaginary part"
            want = torch.tensor(data, dtype=getattr(torch, name))
        _same(rg.tensor(data, dtype=getattr(rg, name)), want)
    with pytest.raises(TypeError):
        torch.tensor([1 + 2j], dtype=torch.float32)
    with pytest.raises(rg.DTypeError, match="complex"):
        rg.tensor([1 + 2j], dtype=rg.float32)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "float32", "bool"])
@pytest.mark.parametrize("value", [128, -1, 300, True, 1j, 2 - 3j, 2.75, np.int64(-129)])
def test_copy_of_a_python_number_casts_as_torch(dtype, value) -> None:
    # torch copies the number as a 0-d tensor and casts it (int8's 128 wraps to -128, a
    # complex number keeps its real part or its truth); retrograd refused those
    want = torch.zeros(2, dtype=getattr(torch, dtype)).copy_(value)
    _same(rg.zeros(2, dtype=getattr(rg, dtype)).copy_(value), want)


def test_result_type_reads_a_numpy_scalar_as_a_number() -> None:
    for data in ([1], [1.5], [True], np.array([1], np.uint8)):
        for number in (np.int8(5), np.float32(-1.5), np.float64(2.0), np.int64(3)):
            want = torch.result_type(torch.tensor(data), number)
            assert str(rg.result_type(rg.tensor(data), number)) == str(want)[6:]


def test_clamp_takes_a_complex_bound_with_no_imaginary_part_on_a_float_tensor() -> None:
    x = [1.0, 5.0, -3.0]
    _same(rg.tensor(x).clamp(max=2 + 0j), torch.tensor(x).clamp(max=2 + 0j))
    _same(rg.tensor(x).clamp(0j, 3), torch.tensor(x).clamp(0j, 3))
    with pytest.raises(RuntimeError):
        torch.tensor(x).clamp(max=2 + 1j)
    with pytest.raises(rg.DTypeError, match="clamp"):
        rg.tensor(x).clamp(max=2 + 1j)


@pytest.mark.parametrize(
    "data",
    [
        [np.float64(1.5), 1j],
        [np.complex128(1j)],
        [np.complex64(1j), np.float64(1.0)],
        [np.complex128(2 - 1j), 2.0],
        [np.complex64(1j), 2.0],
        [np.float32(1.0), 1j],
        [1j, np.int64(1)],
    ],
)
def test_a_list_with_a_float64_or_complex128_numpy_scalar_infers_complex128(data) -> None:
    # torch's inference widens the complex dtype as it widens floats to float64; retrograd
    # gave complex64 (the default float's) whatever the list held
    _same(rg.tensor(data), torch.tensor(data))


@pytest.mark.parametrize("hook", [math.floor, math.ceil])
def test_math_floor_and_ceil_of_a_tensor(hook) -> None:
    for value in (2.5, -2.5, 7, True, [1.5], 2**62 + 1, 2 + 0j):
        assert hook(rg.tensor(value)) == hook(torch.tensor(value))
    for value, error in ((math.nan, rg.InvalidArgumentError), (-math.inf, rg.InvalidArgumentError),
                         ([1.0, 2.0], rg.ShapeError), (1j, rg.DTypeError)):  # fmt: skip
        with pytest.raises((ValueError, OverflowError, RuntimeError)):
            hook(torch.tensor(value))
        with pytest.raises(error, match=r"math\.(floor|ceil)|__float__"):
            hook(rg.tensor(value))


@pytest.mark.parametrize(
    "call",
    [
        lambda t: [0] * t(2),
        lambda t: t(3) * (1, 2),
        lambda t: "ab" * t(2),
        lambda t: b"x" * t(0),
        lambda t: [0] * t([2]),
    ],
)
def test_a_sequence_times_a_one_element_integer_tensor_repeats_it(call) -> None:
    # torch's * leaves a Python sequence to Python, which repeats it int(t) times; retrograd
    # refused the sequence as an operand
    assert call(rg.tensor) == call(torch.tensor)


@pytest.mark.parametrize(
    "call",
    [lambda t: [0] * t([1, 2]), lambda t: [0] * t(2.0), lambda t: t([1, 2]) * [1, 2],
     lambda t: t(2) + [1], lambda t: [1] + t(2)],
)  # fmt: skip
def test_a_sequence_with_another_tensor_is_still_refused(call) -> None:
    with pytest.raises(TypeError):
        call(torch.tensor)
    with pytest.raises(rg.DTypeError):
        call(rg.tensor)


@pytest.mark.parametrize("data", [2.5, [1, 2, 3], [[1.0, 2.0], [3.0, 4.0]], []])
def test_reversed_of_a_tensor_flips_its_first_dimension(data) -> None:
    # Python's fallback (len and indexing) failed on a 0-d tensor and gave an iterator
    _same(reversed(rg.tensor(data)), reversed(torch.tensor(data)))


@pytest.mark.parametrize("value", [1j, 0j, 2 + 0j])
def test_index_fill_refuses_a_complex_number_into_a_bool_tensor_too(value) -> None:
    for lib, error in ((torch, RuntimeError), (rg, rg.DTypeError)):
        with pytest.raises(error, match=r"index_fill|complex"):
            lib.zeros(2, dtype=lib.bool).index_fill(0, lib.tensor([0]), value)


@pytest.mark.parametrize("name", ["nan", "posinf", "neginf"])
def test_nan_to_num_refuses_a_complex_replacement(name) -> None:
    for lib, error in ((torch, TypeError), (rg, rg.DTypeError)):
        with pytest.raises(error, match="must be float, not complex"):
            lib.tensor([1.0, float("nan")]).nan_to_num(**{name: 1j})
