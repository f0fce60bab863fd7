"""Random programs against PyTorch, round 49: numbers, dtypes and the Python protocol of tensors.

Five families, each drawn from a seeded NumPy generator (one seed per test):

* construction: ``tensor()``/``as_tensor()``/``from_numpy()`` of nested lists mixing bool,
  int, float and complex (ragged ones too), NumPy scalars and arrays of every dtype retrograd
  holds (transposed and strided views, 0-d and empty ones), with and without ``dtype=``, under
  the float32 and the float64 default dtype;
* binary operators and functions (``+ - * / // % ** & | ^ << >>``, the comparisons,
  ``floor_divide``, ``remainder``, ``fmod``, ``div`` with a rounding mode, ``clamp``,
  ``maximum``, ``where``) between tensors of int8/uint8/int16/int32/int64/float32/float64/bool/
  complex64, 0-d tensors (torch's promotion by category) and Python or NumPy numbers on either
  side: wrap-around, zero divisors (an integer one refused, a float one inf/nan), negative and
  oversized shifts, NaN and infinity;
* in-place forms (``x op= y``, ``add_``, ``clamp_``...) whose result dtype may not cast into
  ``x`` (refused as torch refuses, ``x`` left as it was);
* the Python protocol of 0-d, one-element and other tensors: ``item tolist int float bool
  complex operator.index len iter reversed abs - ~ format round divmod math.floor`` and
  sequence repetition (``[0] * t``);
* float64 gradients of the differentiable ones with numbers on either side.

retrograd must agree with torch on whether a call raises (retrograd with a ``RetrogradError``)
and on the values, dtypes and shapes of what it returns. The inner backend and the
checkpointing strategy are the suite's (``RETROGRAD_INNER``, ``RETROGRAD_CHECKPOINTING``).
Left out, as retrograd's documented differences: NumPy arrays of float16 (float32 on the NumPy
backend), uint16/32/64 (int64) and negative strides (copied; torch refuses them); NumPy bool and
complex scalars as operands (torch reads them inconsistently); ints in ``[2**63, 2**64)`` (torch's
unsigned reading); ``//`` and number ``%`` tensor gradients (torch defines none).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

DTYPES = ("int8", "uint8", "int16", "int32", "int64", "float32", "float64", "bool", "complex64")
NUMPY_DTYPES = (*DTYPES, "complex128")
_INTEGRAL = ("int8", "uint8", "int16", "int32", "int64")


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


# -- comparing ---------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """A result of either library as comparable Python data."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype)[6:], tuple(value.shape), value.detach().numpy())
    if isinstance(value, rg.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.detach().numpy())
    if isinstance(value, torch.dtype):
        return ("dtype", str(value)[6:])
    if isinstance(value, rg.dtype):
        return ("dtype", str(value))
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _agree(what: str, got: Any, want: Any) -> None:
    _compare(what, _plain(got), _plain(want))


def _compare(what: str, got: Any, want: Any) -> None:
    if isinstance(want, tuple) and want and want[0] == "tensor":
        if not (isinstance(got, tuple) and got[:3] == want[:3]):
            raise Mismatch(f"{what}: got {got[:3] if isinstance(got, tuple) else got!r}, "
                           f"torch {want[:3]}")  # fmt: skip
        ours, theirs = got[3], want[3]
        if theirs.dtype.kind == "c":  # (complex64 powers: a few ulps of each part's scale)
            np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=5e-5, err_msg=what)
        elif theirs.dtype.kind == "f":
            np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-6, err_msg=what)
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=what)
        return
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            raise Mismatch(f"{what}: got {got!r}, torch {want!r}")
        for g, w in zip(got, want, strict=True):
            _compare(what, g, w)
        return
    same = type(got) is type(want) and (got == want or _both_nan(got, want))
    if not same:
        raise Mismatch(f"{what}: got {got!r}, torch {want!r}")


def _both_nan(got: Any, want: Any) -> bool:
    """Whether two Python numbers are NaN in the same parts (``nan + 0j`` and ``nan + 0j``)."""
    if isinstance(want, float | complex):
        parts = [(complex(got).real, complex(want).real), (complex(got).imag, complex(want).imag)]
        return all(g == w or (math.isnan(g) and math.isnan(w)) for g, w in parts)
    return False


def _both(what: str, program: Callable[[Any], Any]) -> None:
    """``program(torch)`` and ``program(rg)`` agree, on results or on raising."""
    try:
        want = program(torch)
    except Exception as refusal:  # torch refuses: retrograd must, in its own terms
        try:
            got = program(rg)
        except rg.RetrogradError:
            return
        except Exception as error:
            raise Mismatch(f"{what}: raised {error!r}, not a RetrogradError") from error
        raise Mismatch(f"{what}: torch raised {refusal!r}, got {_plain(got)!r}") from None
    try:
        got = program(rg)
    except Exception as error:
        raise Mismatch(f"{what}: torch ran, got {error!r}") from error
    _agree(what, got, want)


def _lib_dtype(lib: Any, name: str) -> Any:
    return getattr(lib, name)


# -- drawing -----------------------------------------------------------------------------------
def _array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.asarray(_values(rng, dtype, shape))  # (a 0-d array, never a NumPy scalar)


def _values(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> Any:
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype == "uint8":
        return rng.integers(0, 256, shape).astype(np.uint8)
    if dtype == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    if dtype in ("int16", "int32", "int64"):
        return rng.integers(-300, 300, shape).astype(dtype)
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    values = rng.standard_normal(shape) * 4
    if values.size and rng.random() < 0.3:
        values.flat[rng.integers(values.size)] = rng.choice([np.nan, np.inf, -np.inf, 0.0])
    return values.astype(dtype)


def _shape(rng: np.random.Generator) -> tuple[int, ...]:
    return [(), (1,), (3,), (2, 3), (0,), (1, 1), (2, 0)][rng.integers(7)]


def _python_number(rng: np.random.Generator) -> Any:
    kind = rng.integers(6)
    if kind == 0:
        return bool(rng.integers(2))
    if kind == 1:
        return _pick(rng, [0, 1, -1, 2, -7, 3, 127, 128, 255, 256, -129, 300, 2**40])
    if kind == 2:
        return _pick(rng, [0.0, -0.0, 0.5, -2.5, 3.0, 1e-3, math.nan, math.inf, -math.inf])
    if kind == 3:
        return complex(float(rng.integers(-2, 3)), float(rng.integers(-2, 3)))
    if kind == 4:
        return _pick(rng, [np.int64(3), np.int32(-2), np.int8(5), np.uint8(200)])
    return _pick(rng, [np.float64(2.5), np.float32(-1.5), np.float64(0.0)])


def _pick(rng: np.random.Generator, options: list) -> Any:
    """One of ``options`` as it is (``rng.choice`` would make NumPy scalars one dtype)."""
    return options[rng.integers(len(options))]


def _nested(rng: np.random.Generator, depth: int, width: int, kinds: list[str]) -> Any:
    if depth == 0:
        kind = kinds[rng.integers(len(kinds))]
        return {
            "bool": lambda: bool(rng.integers(2)),
            "int": lambda: int(rng.integers(-50, 50)),
            "float": lambda: round(float(rng.standard_normal()), 3),
            "complex": lambda: complex(int(rng.integers(-3, 3)), int(rng.integers(-3, 3))),
            "np": lambda: _pick(rng, [np.float64(1.5), np.int64(2), np.float32(-0.5)]),
        }[kind]()
    return [_nested(rng, depth - 1, width, kinds) for _ in range(width)]


# -- family 1: construction ----------------------------------------------------------------------
def _construction(rng: np.random.Generator, index: int) -> None:
    pick = rng.integers(3)
    dtype = None if rng.random() < 0.5 else str(rng.choice(NUMPY_DTYPES[:-1]))
    if pick == 0:  # nested Python lists (ragged at times)
        kinds = list(rng.choice(["bool", "int", "float", "complex", "np"], rng.integers(1, 4)))
        if "np" in kinds and dtype not in (None, "float32", "float64", "complex64"):
            dtype = None  # (torch refuses a NumPy float in a list made an int tensor, not here)
        data: Any = _nested(rng, int(rng.integers(0, 3)), int(rng.integers(0, 3)), kinds)
        if rng.random() < 0.15 and isinstance(data, list) and data:
            data = [*data, [data[0]]]  # ragged: refused by both
        makers = ("tensor", "as_tensor")
    elif pick == 1:  # a NumPy array, maybe a view
        source = _array(rng, str(rng.choice(NUMPY_DTYPES)), _shape(rng))
        view = rng.integers(3)
        if view == 1 and source.ndim == 2:
            source = source.T
        elif view == 2 and source.ndim >= 1 and source.shape[-1] > 1:
            source = source[..., ::2]
        data = source
        if source.dtype.kind == "f" and not np.isfinite(source).all() and dtype in _INTEGRAL:
            dtype = None  # (torch's cast of NaN or inf into an integer is undefined: refused)
        makers = ("tensor", "as_tensor", "from_numpy")
    else:  # a NumPy scalar or a Python number
        data = _python_number(rng)
        if isinstance(data, np.generic) and dtype not in (None, "float32", "float64", "complex64"):
            dtype = None  # (torch refuses np.float32(1.5) made an int tensor, not here)
        makers = ("tensor", "as_tensor")
    for maker in makers:
        if maker == "from_numpy" and dtype is not None:
            continue

        def build(lib: Any, maker: str = maker) -> Any:
            kwargs = {} if dtype is None else {"dtype": _lib_dtype(lib, dtype)}
            return getattr(lib, maker)(data, **kwargs)

        _both(f"#{index} {maker}({data!r}, dtype={dtype})", build)


@pytest.mark.parametrize("seed", range(4))
def test_random_construction(seed: int) -> None:
    rng = np.random.default_rng(4900 + seed)
    for index in range(80):
        _construction(rng, index)


def test_random_construction_under_the_float64_default() -> None:
    rng = np.random.default_rng(4910)
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    try:
        for index in range(30):
            _construction(rng, index)
        for what, program in [
            ("full", lambda lib: lib.full((2,), 1.5)),
            ("arange", lambda lib: lib.arange(0, 1, 0.25)),
            ("int / int", lambda lib: lib.tensor([3, 4]) / 2),
            ("int * float", lambda lib: lib.tensor([3, 4]) * 0.5),
            ("complex", lambda lib: lib.tensor([1j, 2])),
            ("float32 + float", lambda lib: lib.tensor([1.0], dtype=lib.float32) + 2.5),
            ("bool + 0-d", lambda lib: lib.tensor([True]) + lib.tensor(1.5)),
            ("zeros", lambda lib: lib.zeros(2, 1)),
            ("randn", lambda lib: lib.randn(2).dtype),
        ]:
            _both(what, program)
    finally:
        torch.set_default_dtype(torch.float32)
        rg.set_default_dtype(rg.float32)


# -- family 2: binary operators and functions ----------------------------------------------------
BINARY: dict[str, Callable] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}
FUNCTIONS: dict[str, Callable] = {
    "floor_divide": lambda lib, a, b: lib.floor_divide(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "div_floor": lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "maximum": lambda lib, a, b: lib.maximum(a, b),
    "clamp_min": lambda lib, a, b: lib.clamp(a, min=b),
    "clamp_max": lambda lib, a, b: a.clamp(max=b),
    "where": lambda lib, a, b: lib.where(a != 0, a, b),
    "result_type": lambda lib, a, b: lib.result_type(a, b),
    "add_alpha": lambda lib, a, b: lib.add(a, b, alpha=2),
}


def _binary(rng: np.random.Generator, index: int) -> None:
    a_dtype = str(rng.choice(DTYPES))
    a = _array(rng, a_dtype, _shape(rng))
    kind = rng.integers(3)
    if kind == 0:  # a tensor of its own dtype and shape (broadcasting or 0-d)
        b_dtype = str(rng.choice(DTYPES))
        b: Any = _array(rng, b_dtype, [a.shape, (), a.shape[-1:]][rng.integers(3)])
        if b_dtype not in ("bool", "float32", "float64", "complex64") and b.size:
            b.flat[0] = 0  # an integer zero divisor, at times
    else:
        b = _python_number(rng)
        if a_dtype == "complex64" and isinstance(b, float) and not math.isfinite(b):
            b = 2.0  # (torch's complex + inf scalar: a NaN imaginary part, a quirk of its own)
    tensor_b = isinstance(b, np.ndarray)
    swapped = bool(rng.integers(2))
    if rng.random() < 0.7:
        name = str(rng.choice(list(BINARY)))
        op = BINARY[name]

        def program(lib: Any) -> Any:
            x = lib.tensor(a)
            y = lib.tensor(b) if tensor_b else b
            return op(y, x) if swapped else op(x, y)
    else:
        name = str(rng.choice(list(FUNCTIONS)))
        function = FUNCTIONS[name]

        def program(lib: Any) -> Any:
            x = lib.tensor(a)
            y = lib.tensor(b) if tensor_b else b
            return function(lib, x, y)

        swapped = False
    shown = f"tensor({a_dtype}{list(a.shape)})" if tensor_b else repr(b)
    order = f"{shown} {name} {a_dtype}{list(a.shape)}" if swapped else f"{a_dtype} {name} {shown}"
    _both(f"#{index} {order} (a={a.tolist()}, b={b.tolist() if tensor_b else b!r})", program)


@pytest.mark.parametrize("seed", range(8))
def test_random_binary_ops(seed: int) -> None:
    rng = np.random.default_rng(4920 + seed)
    for index in range(200):
        _binary(rng, index)


# -- family 3: in-place forms ------------------------------------------------------------------
INPLACE: dict[str, Callable] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "&=": operator.iand,
    "<<=": operator.ilshift,
    "add_": lambda x, y: x.add_(y),
    "mul_": lambda x, y: x.mul_(y),
    "div_": lambda x, y: x.div_(y),
    "clamp_": lambda x, y: x.clamp_(min=y),
    "copy_": lambda x, y: x.copy_(y),
    "fill_": lambda x, y: x.fill_(y),
}


def _inplace(rng: np.random.Generator, index: int) -> None:
    x_dtype, y_dtype = (str(d) for d in rng.choice(DTYPES, 2))
    x = _array(rng, x_dtype, (3,))
    zero_d = bool(rng.integers(2))
    y: Any = _array(rng, y_dtype, () if zero_d else (3,)) if rng.random() < 0.6 else None
    number = _python_number(rng) if y is None else None
    if x_dtype == "complex64" and isinstance(number, float) and not math.isfinite(number):
        number = 1.5
    if x_dtype == "complex64" and y is not None and y.dtype.kind == "f":
        # (torch's in-place complex add scales an infinite operand by alpha = 1 + 0j: a NaN
        # imaginary part, a quirk of its own)
        y = np.where(np.isfinite(y), y, 1.5).astype(y.dtype)
    name = str(rng.choice(list(INPLACE)))
    if name == "copy_" and isinstance(number, float) and not math.isfinite(number):
        number = 2.5  # (torch's cast of NaN or inf into an integer is undefined: refused here)
    if name == "copy_" and x_dtype == "uint8" and isinstance(number, float) and number < 0:
        number = 2.5  # (so is a negative float's into uint8)
    if name == "fill_" and y is not None and y.ndim:
        y = y[0]  # (fill_ takes a number or a 0-d tensor)
    op = INPLACE[name]

    def program(lib: Any) -> Any:
        target = lib.tensor(x)
        alias = target
        other = number if y is None else lib.tensor(y)
        try:
            result = op(target, other)
        except Exception:
            _agree(f"{name} left its target", alias, torch.tensor(x))
            raise
        return [result, alias]

    other = number if y is None else f"tensor({y_dtype}{list(np.shape(y))})"
    _both(f"#{index} {x_dtype}[3] {name} {other!r} (x={x.tolist()})", program)


@pytest.mark.parametrize("seed", range(4))
def test_random_inplace_ops(seed: int) -> None:
    rng = np.random.default_rng(4930 + seed)
    for index in range(120):
        _inplace(rng, index)


# -- family 4: the Python protocol -------------------------------------------------------------
PROTOCOL: dict[str, Callable] = {
    "item": lambda t: t.item(),
    "tolist": lambda t: t.tolist(),
    "int": int,
    "float": float,
    "bool": bool,
    "complex": complex,
    "index": operator.index,
    "len": len,
    "iter": lambda t: list(iter(t)),
    "abs": abs,
    "neg": operator.neg,
    "invert": operator.invert,
    "format .3f": lambda t: format(t, ".3f"),
    "format d": lambda t: format(t, "d"),
    "f-string": lambda t: f"{t:>9.2e}",
    "round": round,
    "round 2": lambda t: round(t, 2),
    "divmod": lambda t: divmod(t, 2),
    "rdivmod": lambda t: divmod(7, t),
    "floor": math.floor,
    "trunc": math.trunc,
    "range": lambda t: list(range(t)),
    "in": lambda t: 1 in t,
    "reversed": reversed,
    "[0] * t": lambda t: [0] * t,
    "t * 'ab'": lambda t: t * "ab",
}


@pytest.mark.parametrize("seed", range(3))
def test_random_python_protocol(seed: int) -> None:
    rng = np.random.default_rng(4940 + seed)
    for index in range(200):
        dtype = str(rng.choice(DTYPES))
        data = _array(rng, dtype, [(), (1,), (1, 1), (3,), (0,), (2, 2)][rng.integers(6)])
        name = str(rng.choice(list(PROTOCOL)))
        hook = PROTOCOL[name]
        _both(
            f"#{index} {name}({dtype} {data.tolist()})",
            lambda lib, hook=hook, data=data: hook(lib.tensor(data)),
        )


# -- family 5: float64 gradients ---------------------------------------------------------------
GRADIENTS: dict[str, Callable] = {
    "x + c": lambda x, c: x + c,
    "c - x": lambda x, c: c - x,
    "c * x": lambda x, c: c * x,
    "c / x": lambda x, c: c / x,
    "x / c": lambda x, c: x / c,
    "x ** c": lambda x, c: x**c,
    "c ** x": lambda x, c: c**x,
    "x % c": lambda x, c: x % c,
    "fmod": lambda x, c: x.fmod(c),
    "clamp": lambda x, c: x.clamp(-abs(c), abs(c)),
    "clamp_min": lambda x, c: x.clamp(min=c),
    "abs": lambda x, c: abs(x) * c,
    "neg": lambda x, c: -x + c,
    "where": lambda x, c: x.where(x > 0, c),
}


@pytest.mark.parametrize("seed", range(3))
def test_random_gradients_with_numbers(seed: int) -> None:
    rng = np.random.default_rng(4950 + seed)
    for index in range(60):
        values = rng.standard_normal(5)
        values[rng.integers(5)] = rng.choice([0.0, 1.0, -1.0])
        number = [2, -1, 0, 3, 0.5, -2.5, 1.0, True, 2.0][rng.integers(9)]
        name = str(rng.choice(list(GRADIENTS)))
        if name == "c ** x" and number is True:
            number = 2  # (torch's True ** x fails an internal assert of its own)
        program = GRADIENTS[name]
        weights = rng.standard_normal(5)
        want_leaf = torch.tensor(values, requires_grad=True)
        try:
            want_out = program(want_leaf, number)
            loss = (want_out * torch.tensor(weights)).sum()
            (want_grad,) = torch.autograd.grad(loss, [want_leaf])
        except Exception:  # torch refuses the program: retrograd must too
            with pytest.raises(rg.RetrogradError):
                leaf = rg.tensor(values, requires_grad=True)
                rg.autograd.grad((program(leaf, number) * rg.tensor(weights)).sum(), [leaf])
            continue
        leaf = rg.tensor(values, requires_grad=True)
        out = program(leaf, number)
        (grad,) = rg.autograd.grad((out * rg.tensor(weights)).sum(), [leaf])
        what = f"#{index} {name} with c={number!r} at {values.tolist()}"
        _agree(what, out.detach(), want_out.detach())
        _agree(f"{what} (gradient)", grad, want_grad)
