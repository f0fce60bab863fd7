"""Round 76's defects in creation, conversion and integer/bool arithmetic, each against torch.

- refusals torch raises as ``RuntimeError`` were ``ValueError``/``TypeError``s alone: integer
  division (``//``, ``%``, ``fmod``, ``div(rounding_mode=)``) by zero and integers to negative
  integer powers (``InvalidArgumentError``, now ``InvalidValueError``); ``-`` and ``neg`` of a
  bool tensor (now ``KernelDTypeError``); ``arange``'s zero step and its bounds against the
  step's sign, ``linspace``/``logspace``'s negative steps, ``eye``'s negative size, a number
  past an integer dtype's range (``tensor(256, dtype=int8)``), a complex fill value into a
  real tensor (``full``, ``full_like``), ``randint``'s bounds past the dtype's; ``item()`` and
  ``bool()`` of a tensor that does not hold one value; operands that do not broadcast together
  and an in-place or ``copy_`` result that does not fit its target (now ``SizeMismatchError``);
- refusals torch raises as ``NotImplementedError`` (no kernel for the dtype) were
  ``DTypeError``s: bitwise ops and shifts of floats or complex numbers, ``abs``/
  ``remainder``/``fmod``/``div(rounding_mode=)`` of bools, orderings, ``remainder``, ``fmod``
  and rounded division with a complex number, ``rand_like`` of an integer dtype (now
  ``UnsupportedDTypeError``, a ``NotImplementedError`` and so a ``RuntimeError``: the in-place
  and ``out=`` forms, which torch refuses with a ``RuntimeError``, are caught by both);
- ``zeros()``/``ones()``/``empty()`` with no size raised a ``ShapeError``; torch's
  ``TypeError`` (now ``ArgumentTypeError``, both);
- ``arange`` of an int8/int16/int32/uint8 ``dtype``: torch counts the steps from the values
  given and writes ``int(start) + i * int(step)`` (seven 1s for ``arange(1, 4.5, 0.5)``,
  six values for ``arange(-1.5, 4.5)``); retrograd truncated the three first, as torch's int64
  (one value short, or "step must not be zero");
- ``logspace`` of one step in int8/int16/uint8 took the power of the truncated start (1 for
  ``logspace(0.5, 1, 1)``; torch's ``trunc(10 ** 0.5)`` is 3);
- ``linspace`` of an integer dtype added its steps in two roundings where torch's kernel fuses
  the multiply-add (``linspace(1, -3, 11)``'s sixth value -1, torch's 0); of 0 steps into
  uint8, it refused a negative end that torch never writes;
- the torch inner backend's ``tensor(1j, dtype=bool)`` failed (a NumPy bool scalar where an
  array was due).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.errors as errors

torch = pytest.importorskip("torch")


def _refusal(lib, make):
    try:
        make(lib)
    except Exception as error:  # (the class is what is compared)
        return error
    return None


def _ints(lib, values, dtype="int64"):
    return lib.tensor(values, dtype=getattr(lib, dtype))


REFUSALS = {
    "int // 0": (lambda lib: _ints(lib, [3, 4]) // 0, RuntimeError, "InvalidValueError"),
    "int % int zero": (
        lambda lib: _ints(lib, [3, 4]) % _ints(lib, [1, 0]),
        RuntimeError,
        "InvalidValueError",
    ),
    "int fmod False": (lambda lib: _ints(lib, [3]).fmod(False), RuntimeError, "InvalidValueError"),
    "div floor by 0": (
        lambda lib: _ints(lib, [3]).div(_ints(lib, [0]), rounding_mode="floor"),
        RuntimeError,
        "InvalidValueError",
    ),
    "int ** -1": (lambda lib: _ints(lib, [3]) ** -1, RuntimeError, "InvalidValueError"),
    "bool - 1": (lambda lib: lib.tensor([True]) - 1, RuntimeError, "KernelDTypeError"),
    "0.5 - bool": (lambda lib: 0.5 - lib.tensor([True]), RuntimeError, "KernelDTypeError"),
    "-bool": (lambda lib: -lib.tensor([True]), RuntimeError, "KernelDTypeError"),
    "float & 1": (lambda lib: lib.tensor([1.5]) & 1, NotImplementedError, "UnsupportedDTypeError"),
    "float ^ float": (
        lambda lib: lib.tensor([1.5]) ^ lib.tensor([2.0]),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "int << 1.5": (
        lambda lib: _ints(lib, [3]) << 1.5,
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "~float": (lambda lib: ~lib.tensor([1.5]), TypeError, "UnsupportedDTypeError"),
    "bitwise_not(float)": (
        lambda lib: lib.tensor([1.5]).bitwise_not(),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "int <<= 2.0": (lambda lib: _ints(lib, [3]).__ilshift__(2.0), RuntimeError, "DTypeError"),
    "bitwise_and out= int of float": (
        lambda lib: lib.bitwise_and(lib.tensor([1.5]), 1, out=_ints(lib, [0])),
        RuntimeError,
        "DTypeError",
    ),
    "abs(bool)": (
        lambda lib: abs(lib.tensor([True])),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "bool % bool": (
        lambda lib: lib.tensor([True]) % lib.tensor([True]),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "bool fmod bool": (
        lambda lib: lib.tensor([True]).fmod(lib.tensor([True])),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "bool div floor True": (
        lambda lib: lib.tensor([True]).div(True, rounding_mode="floor"),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "int < 1j": (lambda lib: _ints(lib, [3]) < 1j, NotImplementedError, "UnsupportedDTypeError"),
    "int % 2j": (lambda lib: _ints(lib, [3]) % 2j, NotImplementedError, "UnsupportedDTypeError"),
    "float fmod 1j": (
        lambda lib: lib.tensor([1.5]).fmod(1j),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "int // (1+1j)": (
        lambda lib: _ints(lib, [3]) // (1 + 1j),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "1j // bool": (
        lambda lib: 1j // lib.tensor([True]),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "rand_like int32": (
        lambda lib: lib.rand_like(lib.ones(2), dtype=lib.int32),
        NotImplementedError,
        "UnsupportedDTypeError",
    ),
    "arange step 0": (lambda lib: lib.arange(0, 3, 0), RuntimeError, "InvalidValueError"),
    "arange against the step": (
        lambda lib: lib.arange(3, 0, 1),
        RuntimeError,
        "InvalidValueError",
    ),
    "arange int64 step 0.5": (
        lambda lib: lib.arange(0, 3, 0.5, dtype=lib.int64),
        ValueError,
        "InvalidValueError",
    ),
    "linspace -1 steps": (lambda lib: lib.linspace(0, 1, -1), RuntimeError, "InvalidValueError"),
    "logspace -1 steps": (lambda lib: lib.logspace(0, 1, -1), RuntimeError, "InvalidValueError"),
    "eye(-1)": (lambda lib: lib.eye(-1), RuntimeError, "InvalidValueError"),
    "tensor(256, int8)": (
        lambda lib: lib.tensor(256, dtype=lib.int8),
        RuntimeError,
        "InvalidValueError",
    ),
    "full complex into float64": (
        lambda lib: lib.full((2,), 1 + 2j, dtype=lib.float64),
        RuntimeError,
        "DTypeError",
    ),
    "full_like complex": (
        lambda lib: lib.full_like(lib.ones(2, dtype=lib.float64), 2 + 1j),
        RuntimeError,
        "DTypeError",
    ),
    "randint bool to 5": (
        lambda lib: lib.randint(0, 5, (2,), dtype=lib.bool),
        RuntimeError,
        "InvalidValueError",
    ),
    "item of two": (lambda lib: _ints(lib, [1, 2]).item(), RuntimeError, "ShapeError"),
    "bool of two": (lambda lib: bool(_ints(lib, [1, 2])), RuntimeError, "ShapeError"),
    "bool of none": (lambda lib: bool(_ints(lib, [])), RuntimeError, "ShapeError"),
    "[2] + [3]": (lambda lib: lib.ones(2) + lib.ones(3), RuntimeError, "ShapeError"),
    "[0] >= [3] ints": (
        lambda lib: _ints(lib, []) >= _ints(lib, [1, 2, 3]),
        RuntimeError,
        "ShapeError",
    ),
    "[] += [3]": (
        lambda lib: _ints(lib, 1).__iadd__(_ints(lib, [1, 2, 3])),
        RuntimeError,
        "ShapeError",
    ),
    "[3].copy_([2])": (
        lambda lib: lib.zeros(3).copy_(lib.ones(2)),
        RuntimeError,
        "ShapeError",
    ),
    "[2, 1].copy_([3])": (
        lambda lib: lib.zeros(2, 1).copy_(lib.ones(3)),
        RuntimeError,
        "ShapeError",
    ),
    "zeros()": (lambda lib: lib.zeros(), TypeError, "ShapeError"),
    "empty(dtype=)": (lambda lib: lib.empty(dtype=lib.float32), TypeError, "ShapeError"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_raise_torchs_class(name):
    make, expected, ours = REFUSALS[name]
    theirs = _refusal(torch, make)
    assert isinstance(theirs, expected), theirs
    mine = _refusal(rg, make)
    assert isinstance(mine, type(theirs)), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, getattr(errors, ours)), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, rg.RetrogradError)


NARROW_ARANGES = [
    (1, 4.5, 0.5),
    (-1.5, 4.5, 1),
    (1, 4.5, 1),
    (-1.5, -2.5, -0.5),
    (2.25, -2.5, -0.7),
    (0.5, 3, 1.5),
    (0.5, 3.7, 0.7),
    (-1.5, 1, 2),
]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_arange_of_an_integer_dtype_counts_as_torch(dtype):
    for args in NARROW_ARANGES:
        theirs = _refusal(torch, lambda lib, a=args: lib.arange(*a, dtype=getattr(lib, dtype)))
        if theirs is not None:  # (int64 truncates the step first: 0.5 is refused)
            assert dtype == "int64"
            with pytest.raises(ValueError):
                rg.arange(*args, dtype=getattr(rg, dtype))
            continue
        want = torch.arange(*args, dtype=getattr(torch, dtype)).tolist()
        got = rg.arange(*args, dtype=getattr(rg, dtype))
        assert got.dtype == getattr(rg, dtype)
        assert got.tolist() == want, (args, dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
def test_logspace_of_one_integer_step_powers_the_start_given(dtype):
    for start, base in [(0.5, 10.0), (1.5, 10.0), (0.5, 10), (1.75, 2.0), (2.5, 3)]:
        want = torch.logspace(start, 3, 1, base=base, dtype=getattr(torch, dtype)).tolist()
        got = rg.logspace(start, 3, 1, base=base, dtype=getattr(rg, dtype)).tolist()
        assert got == want, (start, base, dtype)


@pytest.mark.parametrize("dtype", ["int64", "int16", "int8", "uint8"])
def test_integer_linspace_fuses_its_multiply_add(dtype):
    rng = np.random.default_rng(76)
    cases = [(1, -3, 11), (-7, 9, 13), (5, -5, 16)]
    cases += [tuple(int(v) for v in rng.integers(-9, 10, 2)) + (int(rng.integers(2, 30)),)
              for _ in range(60)]  # fmt: skip
    for start, end, steps in cases:
        if dtype == "uint8" and min(start, end) < 0:
            start, end = abs(start), abs(end)
        want = torch.linspace(start, end, steps, dtype=getattr(torch, dtype)).tolist()
        got = rg.linspace(start, end, steps, dtype=getattr(rg, dtype)).tolist()
        assert got == want, (start, end, steps, dtype)


def test_linspace_of_no_steps_writes_no_end():
    want = torch.linspace(-1.0, -3, 0, dtype=torch.uint8)
    got = rg.linspace(-1.0, -3, 0, dtype=rg.uint8)
    assert got.shape == tuple(want.shape) == (0,) and got.dtype == rg.uint8


def test_complex_data_made_a_bool_tensor():
    for data in [-1j, 2 + 2j, 0j, np.array(-6.3 + 0j, np.complex64), [1j, 0]]:
        want = torch.as_tensor(data, dtype=torch.bool)
        got = rg.as_tensor(data, dtype=rg.bool)
        assert got.dtype == rg.bool and got.tolist() == want.tolist(), data
