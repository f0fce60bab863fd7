"""Regressions found by differential fuzzing of the uint8 and int32 dtypes against torch 2.13
(``tests/test_fuzz29.py``): one test per defect, each expected value taken from torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _same(ours, theirs):
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize(
    "expression",
    [
        lambda lib, u, i: u % 256,  # 256 wraps to uint8's 0
        lambda lib, u, i: u // 512,
        lambda lib, u, i: u.fmod(256),
        lambda lib, u, i: u % lib.tensor(2**40),  # a 0-d int64 divisor keeps uint8, wraps to 0
        lambda lib, u, i: u.clone().floor_divide_(lib.tensor(-(2**31), dtype=lib.int32)),
        lambda lib, u, i: i % 2**32,
    ],
)
def test_integer_divisor_that_wraps_to_zero_is_a_division_by_zero(expression):
    """A divisor wrapped into the result's narrow dtype (``uint8 % 256``) is 0: torch raises
    ZeroDivisionError; retrograd divided by the unwrapped value's zero check and returned
    zeros."""
    torch_u = torch.tensor([7, 128, 255], dtype=torch.uint8)
    torch_i = torch.tensor([5, -7, 2**31 - 1], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        expression(torch, torch_u, torch_i)
    u = rg.tensor([7, 128, 255], dtype=rg.uint8)
    i = rg.tensor([5, -7, 2**31 - 1], dtype=rg.int32)
    with pytest.raises(rg.InvalidArgumentError, match="division by zero"):
        expression(rg, u, i)
    _same(u, torch_u)  # left usable and unchanged
    _same(rg.tensor([7, 128, 255], dtype=rg.uint8) % 257, torch_u % 257)


@pytest.mark.parametrize("dtype", ["uint8", "int32"])
@pytest.mark.parametrize("value", [2.9, -0.5, float("nan"), 1e10])
def test_float_written_through_a_mask_into_uint8_and_int32(dtype, value):
    """``x[mask] = 2.9`` on a uint8/int32 tensor raised a ``DTypeError`` (float32 can't be
    cast); torch truncates toward zero within the dtype's bounds, and refuses a value past
    them."""

    def run(lib):
        x = lib.tensor([1, 2, 3], dtype=getattr(lib, dtype))
        x[x > 1] = value
        return x

    try:
        theirs = run(torch)
    except RuntimeError:
        with pytest.raises(rg.InvalidArgumentError, match="index_put_"):
            run(rg)
        return
    _same(run(rg), theirs)


@pytest.mark.parametrize(
    "write",
    [
        lambda lib, x, v: x.masked_fill(x > 1, v),
        lambda lib, x, v: x.clone().masked_fill_(x > 1, v),
        lambda lib, x, v: x.clone().__setitem__(x > 1, v),
    ],
)
@pytest.mark.parametrize(
    "dtype, value",
    [("int32", 2**31), ("int32", -(2**31) - 1), ("uint8", -(2**31)), ("uint8", 300)],
)
def test_one_element_tensor_past_the_bounds_written_through_a_mask(write, dtype, value):
    """A 0-d tensor past uint8's/int32's bounds written through a mask (``masked_fill``,
    ``x[mask] = tensor(2**31)``): torch reads it as a number and refuses it; retrograd cast it,
    silently wrapping it. Values within the bounds still wrap as torch's (``-1`` is 255)."""
    torch_x = torch.tensor([1, 2, 3], dtype=getattr(torch, dtype))
    with pytest.raises(RuntimeError, match="without overflow"):
        write(torch, torch_x, torch.tensor(value))
    x = rg.tensor([1, 2, 3], dtype=getattr(rg, dtype))
    with pytest.raises(rg.InvalidArgumentError, match="without overflow"):
        write(rg, x, rg.tensor(value))
    _same(x, torch_x)
    _same(x.masked_fill(x > 1, rg.tensor(-1)), torch_x.masked_fill(torch_x > 1, torch.tensor(-1)))


@pytest.mark.parametrize(
    "expression",
    [
        lambda lib, u: u / lib.tensor(-1, dtype=lib.int32),  # not u / 255
        lambda lib, u: lib.atan2(u, lib.tensor(-1)),
        lambda lib, u: lib.xlogy(u, 300),  # not log(44)
        lambda lib, u: lib.xlogy(300, u),
        lambda lib, u: lib.xlogy(u, lib.tensor(2**40)),  # not log(0)
        lambda lib, u: lib.xlogy(u, lib.tensor(-1, dtype=lib.int32)),  # NaN, not log(255)
    ],
)
def test_float_ops_cast_integer_operands_straight_to_float(expression):
    """An op computed in float (``/``, ``atan2``, ``xlogy``) of a uint8 tensor and a 0-d
    int32/int64 tensor or a number: torch casts each operand straight to float32; retrograd
    first cast both to their common integer dtype (uint8), wrapping the other operand."""
    ours = expression(rg, rg.tensor([7, 128, 0], dtype=rg.uint8))
    theirs = expression(torch, torch.tensor([7, 128, 0], dtype=torch.uint8))
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "expression",
    [
        lambda lib, s, v: lib.searchsorted(s, v, out_int32=True),
        lambda lib, s, v: lib.searchsorted(s, v, out_int32=True, right=True),
        lambda lib, s, v: lib.bucketize(v, s, out_int32=True),
    ],
)
def test_out_int32_gives_int32_indices(expression):
    """``searchsorted``/``bucketize`` with ``out_int32=True`` gave int64 indices; torch's are
    int32 (retrograd has int32 tensors now)."""
    _same(
        expression(rg, rg.tensor([1, 5, 9]), rg.tensor([0, 5, 7, 10])),
        expression(torch, torch.tensor([1, 5, 9]), torch.tensor([0, 5, 7, 10])),
    )


@pytest.mark.parametrize(
    "fill",
    [
        lambda lib, u, v: u.index_fill(0, lib.tensor([0]), v),
        lambda lib, u, v: u.clone().fill_diagonal_(v),
        lambda lib, u, v: u.masked_fill(u > 1, v),
    ],
)
@pytest.mark.parametrize("value", [-1, -255, 2.7, -0.5, 256.0, 300])
def test_numbers_filled_into_uint8_follow_torch_s_bounds(fill, value):
    """``index_fill``/``fill_diagonal_`` of ``-1`` into uint8 raised NumPy's "out of bounds"
    (torch writes 255), and ``masked_fill(m, -0.5)`` wrote 0 where torch refuses a float past
    uint8's bounds."""
    torch_u = torch.tensor([[7, 128], [1, 2]], dtype=torch.uint8)
    u = rg.tensor([[7, 128], [1, 2]], dtype=rg.uint8)
    try:
        theirs = fill(torch, torch_u, value)
    except RuntimeError:
        with pytest.raises(rg.InvalidArgumentError, match="without overflow"):
            fill(rg, u, value)
        return
    _same(fill(rg, u, value), theirs)


@pytest.mark.parametrize(
    "expression",
    [
        lambda lib: lib.tensor([3, 2], dtype=lib.uint8) ** 256,  # not a wrapped 0 (ones)
        lambda lib: lib.tensor([3, 2], dtype=lib.uint8).pow(300),
        lambda lib: lib.tensor([3, 2], dtype=lib.uint8).pow_(1000),
        lambda lib: lib.tensor([3, 2], dtype=lib.int32) ** 2**31,
    ],
)
def test_number_exponent_past_a_narrow_base_s_bounds_is_refused(expression):
    """``u8 ** 256`` gave ones (the exponent wrapped to 0); torch converts the exponent to the
    base's dtype and refuses one past its bounds. Exponents within them still agree."""
    with pytest.raises(RuntimeError, match="without overflow"):
        expression(torch)
    with pytest.raises(rg.InvalidArgumentError, match="without overflow"):
        expression(rg)
    _same(rg.tensor([3, 2], dtype=rg.uint8) ** 255, torch.tensor([3, 2], dtype=torch.uint8) ** 255)


def test_clamp_with_tensor_bounds_promotes_all_three_together():
    """``bool_tensor.clamp(uint8 0-d, int32 0-d)`` was uint8 (promoted pairwise, self with each
    bound in turn); torch's kernel promotes the three together: int32."""

    def run(lib):
        flags = lib.tensor([True, False, True])
        return flags.clamp(lib.tensor(1, dtype=lib.uint8), lib.tensor(5, dtype=lib.int32))

    _same(run(rg), run(torch))


@pytest.mark.parametrize("number", [300, -1, 2**40])
@pytest.mark.parametrize("dtype", ["uint8", "int32"])
def test_number_floor_divided_by_a_narrow_tensor_wraps(number, dtype):
    """``300 // u8_tensor`` raised NumPy's ``OverflowError`` ("Python integer 300 out of bounds
    for uint8"); torch wraps the number into the tensor's dtype first (44 // 7 is 6)."""
    values = [7, 3, 127]
    ours = number // rg.tensor(values, dtype=getattr(rg, dtype))
    _same(ours, number // torch.tensor(values, dtype=getattr(torch, dtype)))


@pytest.mark.parametrize("value", [-1, -0.5, 2.5, 300])
def test_scatter_value_into_uint8_follows_torch_s_bounds(value):
    """``u8.scatter(0, index, value=-1)`` raised NumPy's ``OverflowError`` (torch writes 255)
    and ``value=-0.5`` wrote 0 (torch refuses it)."""

    def run(lib):
        return lib.tensor([1, 2, 3], dtype=lib.uint8).scatter(0, lib.tensor([0]), value)

    try:
        theirs = run(torch)
    except RuntimeError:
        with pytest.raises(rg.InvalidArgumentError, match="without overflow"):
            run(rg)
        return
    _same(run(rg), theirs)


@pytest.mark.parametrize("dtype", ["int32", "uint8"])
def test_ldexp_with_uint8_and_int32_exponents_uses_the_exact_kernel(dtype):
    """``ldexp`` with an int32/uint8 exponent went through ``2.0 ** exponent`` in float32:
    a 0-d float64 mantissa's result was float32, and ``1e-40 * 2**200`` overflowed to inf;
    torch's kernel (as for int64 exponents) stays in the mantissa's dtype, exactly."""
    for mantissa, exponent in (([3.0], [5]), ([1e-40, 3.0], [200, 127])):
        ours = rg.ldexp(
            rg.tensor(mantissa, dtype=rg.float64 if len(mantissa) == 1 else rg.float32),
            rg.tensor(exponent, dtype=getattr(rg, dtype)),
        )
        theirs = torch.ldexp(
            torch.tensor(mantissa, dtype=torch.float64 if len(mantissa) == 1 else torch.float32),
            torch.tensor(exponent, dtype=getattr(torch, dtype)),
        )
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    ours = rg.ldexp(rg.tensor(3.0, dtype=rg.float64), rg.tensor([5], dtype=getattr(rg, dtype)))
    assert ours.dtype == rg.float64  # a 0-d float64 mantissa with a 1-d integer exponent


@pytest.mark.parametrize(
    "dtype, low, high",
    [("uint8", -1, 5), ("uint8", 0, 257), ("int32", 0, 2**31 + 1), ("int32", -(2**31) - 1, 0)],
)
def test_randint_bounds_past_a_narrow_dtype_are_refused(dtype, low, high):
    """``randint(0, 257, dtype=uint8)`` drew wrapped values; torch refuses bounds the dtype
    cannot hold (and takes the widest ones it can: ``randint(0, 256, dtype=uint8)``)."""
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.randint(low, high, (2,), dtype=getattr(torch, dtype))
    with pytest.raises(rg.InvalidArgumentError, match="out of bounds"):
        rg.randint(low, high, (2,), dtype=getattr(rg, dtype))
    widest = rg.randint(0, 256, (50,), dtype=rg.uint8)
    assert widest.dtype == rg.uint8 and widest.numpy().min() >= 0


def test_repeat_interleave_of_int32_counts_alone():
    """``repeat_interleave(int32_counts)`` was refused ("counts alone must be an int64
    tensor"); torch takes int32 counts and gives int32 indices."""
    counts = [1, 0, 3]
    _same(
        rg.repeat_interleave(rg.tensor(counts, dtype=rg.int32)),
        torch.repeat_interleave(torch.tensor(counts, dtype=torch.int32)),
    )
