"""Regressions of reliability round 33 (``test_reliability_sweep_33.py``): each test failed on
the code before its fix. Expected values come from torch 2.13.

* ``Tensor.mvlgamma(p)`` built ``p`` shifted copies one op at a time: ``p = 2**70`` on an
  empty tensor never answered (torch: an overflow error), a large ``p`` took minutes.
* ``AdaptiveMaxPool*d(output_size)`` cut its windows one at a time in Python: an
  ``output_size`` of ``2**40`` never answered (torch: its allocator refuses), ``10**5`` took
  a minute.
* ``tensor_split(x, 2**70)`` made its pieces one at a time: it never answered (torch: an
  overflow error).
* A torch tensor given where a number or flag belongs (``diag_embed(offset=t)``,
  ``hardtanh(x, t)``, ``fft2(x, t)``...): torch's own ``RuntimeError`` ("Boolean value of
  Tensor with more than one value is ambiguous") came out bare.
* ``add``/``sub``/``add_``/``sub_``/``addmm`` given a tuple, a list or a tensor of several
  elements for ``alpha`` (or ``beta``) scaled elementwise and returned a wrong result; a
  complex ``alpha`` made a real sum complex. torch refuses both (``alpha`` must be a Number;
  "For non-complex input tensors, argument alpha must not be a complex number").
* On the torch backend, a size past int64's bytes (``TransformerEncoderLayer(2**40)``):
  torch's ``RuntimeError`` ("Storage size calculation overflowed") came out bare.
"""

from __future__ import annotations

import signal
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)


@contextmanager
def _answers_within(seconds: int) -> Iterator[None]:
    """Fail, rather than hang the suite, where the block takes longer than ``seconds``."""

    def _late(*_: Any) -> None:
        raise AssertionError(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, _late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _still_differentiable(x: rg.Tensor) -> None:
    """A failed call left ``x`` usable: a backward through it gives d(sum x^2)/dx = 2x."""
    leaf = x.detach().require_grad()
    grads = (leaf * leaf).sum().backward()
    np.testing.assert_allclose(leaf.grad(grads).numpy(), 2 * x.numpy(), rtol=1e-6)


# -- mvlgamma ---------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_mvlgamma_values_and_gradients_are_torchs(p):
    data = np.array([[3.5, 4.25], [10.0, 2.75]])
    expected_input = torch.tensor(data, requires_grad=True)
    expected = expected_input.mvlgamma(p)
    expected.backward(torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64))
    x = rg.tensor(data).require_grad()
    out = x.mvlgamma(p)
    grads = out.backward(rg.tensor([[1.0, -2.0], [0.5, 3.0]]))
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad(grads).numpy(), expected_input.grad.numpy(), rtol=1e-10)


def test_mvlgamma_gradient_matches_finite_differences():
    data = np.array([2.6, 3.1, 7.5])
    x = rg.tensor(data).require_grad()
    grads = x.mvlgamma(3).sum().backward()
    step = 1e-6
    numeric = [
        (
            rg.tensor(data + step * np.eye(3)[i]).mvlgamma(3).sum().item()
            - rg.tensor(data - step * np.eye(3)[i]).mvlgamma(3).sum().item()
        )
        / (2 * step)
        for i in range(3)
    ]
    np.testing.assert_allclose(x.grad(grads).numpy(), numeric, rtol=1e-6)


def test_mvlgamma_of_a_huge_p_answers_at_once():
    with _answers_within(10):
        empty = rg.zeros((0, 3)).mvlgamma(10**6)
        assert empty.shape == tuple(torch.zeros(0, 3).mvlgamma(10**6).shape)
        assert empty.dtype == "float32"
        with pytest.raises(ValueError):  # torch's: past int64
            torch.zeros(0, 0).mvlgamma(2**70)
        with pytest.raises(rg.InvalidArgumentError, match=r"mvlgamma: p must be an int64"):
            rg.zeros((0, 0)).mvlgamma(2**70)
        big = rg.full((3,), 1e15)
        with pytest.raises(rg.OutOfMemoryError, match=r"mvlgamma: out of memory.*p = 10+"):
            big.mvlgamma(10**13)
    _still_differentiable(big)


# -- adaptive max pooling -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape, output_size",
    [((2, 3, 7), 3), ((2, 3, 5), 11), ((3, 13), 5), ((1, 2, 5, 6), (3, 4)),
     ((1, 2, 4, 5, 3), (2, 3, 5)), ((2, 3, 4), 4), ((2, 3, 5), 1)],
)  # fmt: skip
def test_adaptive_max_pool_values_and_gradients_are_torchs_with_ties(shape, output_size):
    """Halves make ties: the gradient goes to the first maximum of each window, as torch's."""
    data = np.round(np.random.default_rng(33).normal(size=shape) * 2) / 2
    spatial = max(len(shape) - 2, 1)
    name = f"adaptive_max_pool{spatial}d"
    expected_input = torch.tensor(data, requires_grad=True)
    expected = getattr(torch.nn.functional, name)(expected_input, output_size)
    seed = np.arange(expected.numel(), dtype=np.float64).reshape(tuple(expected.shape))
    expected.backward(torch.tensor(seed))
    x = rg.tensor(data).require_grad()
    out = getattr(F, name)(x, output_size)
    grads = out.backward(rg.tensor(seed))
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    np.testing.assert_array_equal(x.grad(grads).numpy(), expected_input.grad.numpy())


def test_adaptive_max_pool_to_a_huge_output_answers_at_once():
    x = rg.tensor(np.linspace(-1.0, 1.0, 30, dtype=np.float32).reshape(2, 3, 5))
    with _answers_within(20):
        wide = rg.nn.AdaptiveMaxPool1d(10**5)(x)
        expected = torch.nn.AdaptiveMaxPool1d(10**5)(torch.tensor(x.numpy()))
        np.testing.assert_array_equal(wide.numpy(), expected.numpy())
        with pytest.raises(rg.OutOfMemoryError, match=r"adaptive_max_pool1d: out of memory"):
            rg.nn.AdaptiveMaxPool1d(2**40)(x)
        with pytest.raises(rg.OutOfMemoryError, match=r"adaptive_max_pool2d: out of memory"):
            F.adaptive_max_pool2d(x.unsqueeze(0), (2**40, 2**40))
    _still_differentiable(x)


# -- tensor_split -------------------------------------------------------------------------------
def test_tensor_split_into_countless_pieces_is_refused_at_once():
    x = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.raises(ValueError):  # torch's: past int64
        torch.tensor_split(torch.ones(2, 3), 2**70)
    with _answers_within(10):
        with pytest.raises(rg.InvalidArgumentError, match=r"tensor_split: sections must fit"):
            rg.tensor_split(x, 2**70)
        with pytest.raises(rg.OutOfMemoryError, match=r"tensor_split: out of memory"):
            x.tensor_split(2**62, 1)
    pieces = x.tensor_split(5)  # more pieces than rows: empty ones, as torch's
    assert [p.shape for p in pieces] == [tuple(p.shape) for p in torch.ones(2, 3).tensor_split(5)]
    _still_differentiable(x)


# -- foreign tensors and overflowing sizes --------------------------------------------------------
_TORCH_TENSOR_AS_NUMBER: dict[str, Callable[[rg.Tensor, torch.Tensor], Any]] = {
    "diag_embed": lambda x, t: x.diag_embed(t),
    "diagflat": lambda x, t: x.flatten().diagflat(t),
    "random_": lambda x, t: x.clone().random_(t),
    "hardtanh": lambda x, t: F.hardtanh(x, t),
    "lu": lambda x, t: rg.lu(x[:, :2], t),
    "qr": lambda x, t: rg.qr(x, t),
    "fft2": lambda x, t: rg.fft.fft2(x, t),
    "matrix_norm": lambda x, t: rg.linalg.matrix_norm(x, t),
}


@pytest.mark.parametrize("op", sorted(_TORCH_TENSOR_AS_NUMBER))
def test_a_torch_tensor_given_for_a_number_is_a_dtype_error_naming_the_op(op):
    x = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.raises(rg.DTypeError, match=rf"{op}.*Tensor \[2, 3\] torch.float32"):
        _TORCH_TENSOR_AS_NUMBER[op](x, torch.ones(2, 3))
    _still_differentiable(x)


def test_a_size_past_int64_bytes_is_refused_by_the_hierarchy_on_every_backend():
    """The torch backend's allocator says so in a RuntimeError of its own words."""
    with pytest.raises(rg.RetrogradError, match=r"MultiheadAttention"):
        rg.nn.TransformerEncoderLayer(2**40, 2, 8, 0.0)
    with pytest.raises(rg.RetrogradError, match=r"zeros"):
        rg.zeros((2**40, 2**40))
    layer = rg.nn.TransformerEncoderLayer(4, 2, 8, 0.0)  # the next layer is built and trains
    out = layer(rg.ones((3, 2, 4)))
    grads = out.sum().backward()
    assert all(p.grad(grads) is not None for p in layer.parameters())


# -- alpha and beta -----------------------------------------------------------------------------
_SCALED = {
    "add": lambda lib, x, y, alpha: x.add(y, alpha=alpha),
    "sub": lambda lib, x, y, alpha: x.sub(y, alpha=alpha),
    "add_": lambda lib, x, y, alpha: x.clone().add_(y, alpha=alpha),
    "sub_": lambda lib, x, y, alpha: x.clone().sub_(y, alpha=alpha),
    "rg.add": lambda lib, x, y, alpha: lib.add(x, y, alpha=alpha),
    "addmm": lambda lib, x, y, alpha: lib.addmm(x, x, x, alpha=alpha),
    "addmm beta": lambda lib, x, y, alpha: lib.addmm(x, x, x, beta=alpha),
}


@pytest.mark.parametrize(
    "op, alpha",
    [
        (op, alpha)
        for op in sorted(_SCALED)
        for alpha in ("tuple", "list", "tensor of two", "complex")
        if not (op.startswith("addmm") and alpha == "complex")  # (torch's addmm casts it)
    ],
)
def test_alpha_that_is_no_real_number_is_refused_as_torch_refuses(op, alpha):
    def value(lib):
        return {
            "tuple": (-1, 2),
            "list": [1],
            "tensor of two": lib.ones(2),
            "complex": 1j,
        }[alpha]

    x_torch = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises((TypeError, RuntimeError)):
        _SCALED[op](torch, x_torch, torch.ones(2, 2), value(torch))
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(rg.DTypeError, match=rf"{op.split()[0].removeprefix('rg.').rstrip('_')}"):
        _SCALED[op](rg, x, rg.ones((2, 2)), value(rg))
    _still_differentiable(x)


@pytest.mark.parametrize("alpha", [2, 2.5, "0-d tensor", "complex on complex"])
def test_alpha_that_is_a_number_still_scales_as_torchs(alpha):
    def value(lib):
        return {2: 2, 2.5: 2.5, "0-d tensor": lib.tensor(2.5), "complex on complex": 1j}[alpha]

    dtype = "complex64" if alpha == "complex on complex" else "float32"
    data = np.array([1.0, -2.0, 3.0]).astype(dtype)
    expected = torch.tensor(data).add(torch.ones(3), alpha=value(torch))
    result = rg.tensor(data).add(rg.ones(3), alpha=value(rg))
    np.testing.assert_allclose(result.numpy(), expected.numpy())


# -- complex results written into real tensors ----------------------------------------------------
_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
           "float64", "complex64", "complex128"]  # fmt: skip


def test_can_cast_is_torchs_for_every_pair_of_dtypes():
    """``rg.can_cast(complex64, float64)`` said True: torch's rule keeps complex from real."""
    for source in _DTYPES:
        for target in _DTYPES:
            expected = torch.can_cast(getattr(torch, source), getattr(torch, target))
            assert rg.can_cast(getattr(rg, source), getattr(rg, target)) == expected, (
                source,
                target,
            )


_IN_PLACE_WITH_COMPLEX = {
    "add_": lambda x, c: x.add_(c),
    "sub_": lambda x, c: x.sub_(c),
    "mul_": lambda x, c: x.mul_(c),
    "div_": lambda x, c: x.div_(c),
    "pow_": lambda x, c: x.pow_(c),
    "addcmul_": lambda x, c: x.addcmul_(c, c),
    "add_ of 1j": lambda x, c: x.add_(1j),
}


@pytest.mark.parametrize("op", sorted(_IN_PLACE_WITH_COMPLEX))
@pytest.mark.parametrize("size", [3, 70_000])  # (from 65,536 elements: the in-buffer path)
def test_a_complex_result_is_not_written_into_a_real_tensor(op, size):
    """The imaginary part was dropped silently; torch refuses: "result type ComplexDouble
    can't be cast to the desired output type Double"."""
    data = np.linspace(1.0, 2.0, size)
    complex_data = data * (1 + 0.5j)
    expected = torch.tensor(data)
    with pytest.raises(RuntimeError, match="can't be cast"):
        _IN_PLACE_WITH_COMPLEX[op](expected, torch.tensor(complex_data))
    x = rg.tensor(data)
    with pytest.raises(rg.DTypeError, match=rf"{op.split()[0]}: result type complex"):
        _IN_PLACE_WITH_COMPLEX[op](x, rg.tensor(complex_data))
    np.testing.assert_array_equal(x.numpy(), data)  # nothing written
    _still_differentiable(x[:3])


def test_copy_of_a_complex_source_into_a_real_tensor_keeps_the_real_part_as_torchs():
    data = np.array([1 + 2j, 3 - 1j, 0.5j])
    expected = torch.zeros(3, dtype=torch.float64)
    with warnings.catch_warnings():  # (torch warns once a process: no test can expect it)
        warnings.simplefilter("ignore")
        expected.copy_(torch.tensor(data))
    x = rg.zeros(3, dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x.copy_(rg.tensor(data))
    np.testing.assert_array_equal(x.numpy(), expected.numpy())


# -- reshape_as ------------------------------------------------------------------------------------
def test_reshape_as_an_empty_tensor_is_refused_as_torchs_not_the_input_back():
    """``reshape_as`` went through Burn's ``reshape``, where a 0 keeps the input's size: the
    shape ``[0, 0]`` of an empty ``other`` gave a ``[2, 3]`` input back unchanged."""
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        torch.ones(2, 3).reshape_as(torch.zeros(0, 0))
    x = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.raises(rg.ShapeError, match=r"reshape_as: cannot reshape \[2, 3\].*\[0, 0\]"):
        x.reshape_as(rg.zeros((0, 0)))
    assert x.reshape_as(rg.zeros((3, 2))).shape == (3, 2)
    assert rg.zeros((0, 3)).reshape_as(rg.zeros((3, 0))).shape == (3, 0)
    leaf = x.require_grad()
    weights = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    grads = (leaf.reshape_as(rg.zeros((3, 2))) * rg.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(leaf.grad(grads).numpy(), np.reshape(weights, (2, 3)))


# -- clamp of complex tensors, hsplit of a 0-d count --------------------------------------------
_CLAMPS_OF_COMPLEX = {
    "clamp(max=)": lambda c: c.clamp(max=0.0),
    "clamp_min": lambda c: c.clamp_min(0.0),
    "clip_(max=)": lambda c: c.clone().clip_(max=0.0),
    "rg.clamp(min=)": lambda c: (rg if isinstance(c, rg.Tensor) else torch).clamp(c, min=0.0),
}


@pytest.mark.parametrize("op", sorted(_CLAMPS_OF_COMPLEX))
def test_clamp_with_one_bound_refuses_a_complex_tensor_as_torch(op):
    """With one bound the tensor was cast to its real part: ``[1+2j, -3-1j].clamp(max=0)``
    gave the float32 ``[0, -3]``. torch: "clamp is not supported for complex types"."""
    data = np.array([1 + 2j, -3 - 1j, 0.5j], dtype=np.complex64)
    with pytest.raises((NotImplementedError, RuntimeError)):
        _CLAMPS_OF_COMPLEX[op](torch.tensor(data))
    c = rg.tensor(data)
    with pytest.raises(rg.DTypeError, match=r"clamp: not implemented for complex64"):
        _CLAMPS_OF_COMPLEX[op](c)
    np.testing.assert_array_equal(c.numpy(), data)


def test_clamp_with_a_complex_bound_is_refused():
    with pytest.raises(rg.DTypeError, match=r"clamp: a complex bound \(1j\)"):
        rg.ones(3).clamp(min=1j)
    np.testing.assert_array_equal(rg.tensor([1.0, 5.0]).clamp(max=2.0).numpy(), [1.0, 2.0])


def test_hsplit_of_a_0d_count_checks_that_it_divides_as_torch():
    """A 0-d tensor count skipped the divisibility check: ``hsplit(tensor(2))`` of 3 columns
    gave pieces of 2 and 1, where torch refuses."""
    with pytest.raises(RuntimeError, match="not divisible"):
        torch.ones(2, 3).hsplit(torch.tensor(2))
    x = rg.ones((2, 3))
    with pytest.raises(rg.ShapeError, match=r"hsplit: dimension 1 of size 3 is not divisible"):
        x.hsplit(rg.tensor(2))
    expected = [tuple(p.shape) for p in torch.ones(2, 3).hsplit(torch.tensor(3))]
    assert [p.shape for p in x.hsplit(rg.tensor(3))] == expected


# -- non-finite numbers written into int64 tensors ----------------------------------------------
_INT64_WRITES = {
    "fill_diagonal_ nan": lambda lib, x: x.fill_diagonal_(float("nan")),
    "fill_diagonal_ inf": lambda lib, x: x.fill_diagonal_(float("inf")),
    "index_fill_ nan": lambda lib, x: x.index_fill_(0, lib.tensor([0]), float("nan")),
    "index_fill_ 1e30": lambda lib, x: x.index_fill_(0, lib.tensor([0]), 1e30),
}


@pytest.mark.parametrize("case", sorted(_INT64_WRITES))
def test_a_number_past_int64_is_not_written_into_an_int64_tensor(case):
    """NumPy's cast wrote -2**63 for NaN, inf and 1e30; torch refuses: "value cannot be
    converted to type int64_t without overflow"."""
    with pytest.raises(RuntimeError, match="without overflow"):
        _INT64_WRITES[case](torch, torch.arange(6).reshape(2, 3))
    x = rg.tensor(np.arange(6).reshape(2, 3))
    with pytest.raises(rg.InvalidArgumentError, match=r"cannot be converted to int64"):
        _INT64_WRITES[case](rg, x)
    np.testing.assert_array_equal(x.numpy(), np.arange(6).reshape(2, 3))
    expected = torch.arange(6).reshape(2, 3).fill_diagonal_(2.7)  # a finite float truncates
    np.testing.assert_array_equal(x.fill_diagonal_(2.7).numpy(), expected.numpy())


def test_div_given_an_array_for_rounding_mode_names_the_argument():
    """``rounding_mode == "trunc"`` of a NumPy array is elementwise: NumPy's "truth value of
    an array ... is ambiguous" ValueError came out bare."""
    x = rg.tensor([7.0, -7.0, 5.0])
    with pytest.raises(rg.DTypeError, match=r"div: rounding_mode must be None, 'trunc' or"):
        x.div(rg.tensor([2.0, 2.0, 2.0]), rounding_mode=np.ones(3))
    for mode in ("trunc", "floor"):
        expected = torch.tensor([7.0, -7.0, 5.0]).div(torch.tensor(2.0), rounding_mode=mode)
        np.testing.assert_array_equal(x.div(2.0, rounding_mode=mode).numpy(), expected.numpy())


# -- L-BFGS options -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "option, value, error",
    [("max_eval", "a", rg.DTypeError), ("max_eval", 1j, rg.DTypeError),
     ("max_iter", (1, 2), rg.DTypeError), ("tolerance_grad", None, rg.DTypeError),
     ("tolerance_change", "a", rg.DTypeError), ("history_size", None, rg.DTypeError),
     ("history_size", 2.5, rg.DTypeError), ("history_size", 0, rg.InvalidArgumentError),
     ("history_size", 2**70, rg.InvalidArgumentError)],
)  # fmt: skip
def test_lbfgs_options_torch_fails_on_inside_step_are_refused_when_built(option, value, error):
    """torch's L-BFGS takes these and fails in ``step`` with a bare TypeError, IndexError or
    OverflowError (``history_size=None``: a list times None); retrograd's did too."""
    weight = torch.nn.Parameter(torch.ones(3))

    def closure():
        weight.grad = None
        loss = (weight * weight).sum()
        loss.backward()
        return loss

    with pytest.raises((TypeError, IndexError, OverflowError, NotImplementedError)):
        optimizer = torch.optim.LBFGS([weight], **{option: value})  # (max_iter: here)
        for _ in range(2):
            optimizer.step(closure)
    with pytest.raises(error, match=rf"LBFGS: {option} must be"):
        rg.optim.LBFGS([rg.nn.Parameter(rg.ones(3))], **{option: value})
