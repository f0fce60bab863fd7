"""Complex and small-integer dtypes across the surface, found by a sweep (helper cplx89): every
public callable of ``rg.Tensor``, ``rg``, ``rg.nn.functional``, ``rg.linalg``, ``rg.fft`` and
``rg.special`` called with complex64/complex128, uint8/int8/int16/int32/int64, bool (and
float16/bfloat16 on torch), alone, beside float32 tensors and beside Python numbers, against
torch 2.13. Each case here differed from torch before its fix: a call torch computes that
retrograd refused, or a call torch refuses that retrograd computed (it must refuse with a
``RetrogradError`` naming the op).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _pair(array: np.ndarray, requires_grad: bool = False) -> tuple[torch.Tensor, rg.Tensor]:
    ours = rg.tensor(array, requires_grad=requires_grad)
    return torch.tensor(array, requires_grad=requires_grad), ours


_RNG = np.random.default_rng(89)
_Z = _RNG.normal(size=(2, 5)) + 1j * _RNG.normal(size=(2, 5))
_X = _RNG.normal(size=(2, 5)).astype(np.float32)
_U8 = np.array([[0, 1, 2, 255], [7, 1, 0, 3]], dtype=np.uint8)


# -- calls torch computes -------------------------------------------------------------------------
def test_float_power_in_place_on_complex128_is_torchs():
    """``complex128.float_power_(e)``: torch's result is complex128 (double precision of the
    complex kind), so the in-place form takes it; retrograd refused every complex base."""
    for exponent in (2, 0.5, 1j, _Z[1]):
        ours, theirs = rg.tensor(_Z), torch.tensor(_Z)
        arg_ours = rg.tensor(exponent) if isinstance(exponent, np.ndarray) else exponent
        arg_theirs = torch.tensor(exponent) if isinstance(exponent, np.ndarray) else exponent
        assert ours.float_power_(arg_ours) is ours
        theirs.float_power_(arg_theirs)
        assert str(ours.dtype) == "complex128"
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)
    # a float64 base with a complex exponent: the result is complex128, not the base's dtype
    with pytest.raises(RuntimeError):
        torch.ones(3, dtype=torch.float64).float_power_(torch.tensor(_Z[0, :3]))
    with pytest.raises(rg.DTypeError, match=r"float_power_.*complex128"):
        rg.ones(3, dtype=rg.float64).float_power_(rg.tensor(_Z[0, :3]))


@pytest.mark.parametrize(
    ("name", "shape", "size"),
    [
        ("adaptive_avg_pool1d", (3, 6), 1),
        ("adaptive_avg_pool2d", (2, 3, 4, 5), 1),
        ("adaptive_avg_pool2d", (3, 4, 5), (1, 1)),
        ("adaptive_avg_pool3d", (1, 2, 3, 4, 2), 1),
    ],
)
def test_complex_global_average_pooling_is_torchs_mean(name, shape, size):
    """A complex input pooled to one cell (the global average pooling of a complex network):
    torch takes the mean over the spatial dims, its only complex form; retrograd refused every
    complex input. The value and the gradient of a real loss (the conjugate Wirtinger one)."""
    data = _RNG.normal(size=shape) + 1j * _RNG.normal(size=shape)
    theirs_in, ours_in = _pair(data, requires_grad=True)
    theirs = getattr(torch.nn.functional, name)(theirs_in, size)
    ours = getattr(rg.nn.functional, name)(ours_in, size)
    assert str(ours.dtype) == "complex128" and tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-14)
    weights = np.cos(np.arange(theirs.numel())).reshape(tuple(theirs.shape))
    (theirs.real * torch.tensor(weights) - 0.5 * theirs.imag).sum().backward()
    grads = (rg.real(ours) * rg.tensor(weights) - 0.5 * rg.imag(ours)).sum().backward()
    np.testing.assert_allclose(ours_in.grad(grads).numpy(), theirs_in.grad.numpy(), atol=1e-14)
    # to more cells torch has no complex kernel: refused, naming the op
    with pytest.raises(NotImplementedError):
        getattr(torch.nn.functional, name)(torch.tensor(data), 2)
    with pytest.raises(rg.RetrogradError, match=name):
        getattr(rg.nn.functional, name)(rg.tensor(data), 2)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_silu_is_torchs_outside_a_graph(dtype):
    """torch computes ``F.silu`` of a complex tensor (``x / (1 + exp(-x))``) but records no
    gradient for it; retrograd refused every complex input. Untracked: torch's values; a
    tracked input: refused as torch refuses it."""
    data = _Z.astype(dtype)
    ours = rg.nn.functional.silu(rg.tensor(data))
    theirs = torch.nn.functional.silu(torch.tensor(data))
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    tolerance = 1e-6 if dtype == np.complex64 else 1e-14
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=tolerance, atol=tolerance)
    with pytest.raises(RuntimeError, match="complex"):
        torch.nn.functional.silu(torch.tensor(data, requires_grad=True))
    with pytest.raises(rg.RetrogradError, match="silu"):
        rg.nn.functional.silu(rg.tensor(data, requires_grad=True))


@pytest.mark.parametrize(
    ("name", "complex_input", "args"),
    [
        ("fftn", True, (2,)),
        ("ifftn", True, (3, 0)),
        ("rfftn", False, (2,)),
        ("irfftn", True, (4,)),
        ("hfftn", True, (3,)),
    ],
)
def test_an_int_s_of_the_n_dimensional_transforms_is_one_size(name, complex_input, args):
    """``torch.fft.fftn(x, 2)``: torch reads an int ``s`` as a one-entry list (the last dim,
    or ``dim``, cut or padded to it); retrograd refused it (``object of type 'int' has no
    len()``), for every dtype the sweep tried."""
    data = _Z[:, :4] if complex_input else _X[:, :4].astype(np.float64)
    theirs = getattr(torch.fft, name)(torch.tensor(data), *args)
    ours = getattr(rg.fft, name)(rg.tensor(data), *args)
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_allclose(ours.numpy(), theirs.resolve_conj().numpy(), atol=1e-12)


# -- calls torch refuses --------------------------------------------------------------------------
def _refusals():
    f, g = torch.nn.functional, rg.nn.functional
    zeros = np.zeros((2, 5), np.float32)
    return {
        "isin": (
            lambda: torch.isin(torch.tensor(_Z), torch.tensor(_Z[0])),
            lambda: rg.isin(rg.tensor(_Z), rg.tensor(_Z[0])),
        ),
        "mode": (lambda: torch.tensor(_Z).mode(), lambda: rg.tensor(_Z).mode()),
        "binomial": (
            lambda: torch.binomial(torch.ones(3), torch.tensor([True, False, True])),
            lambda: rg.binomial(rg.ones(3), rg.tensor([True, False, True])),
        ),
        "binary_cross_entropy_with_logits": (
            lambda: f.binary_cross_entropy_with_logits(torch.tensor(_X[:, :4]), torch.tensor(_U8)),
            lambda: g.binary_cross_entropy_with_logits(rg.tensor(_X[:, :4]), rg.tensor(_U8)),
        ),
        "binary_cross_entropy_with_logits ": (  # an integer input
            lambda: f.binary_cross_entropy_with_logits(
                torch.tensor(_U8), torch.tensor(zeros[:, :4])
            ),
            lambda: g.binary_cross_entropy_with_logits(rg.tensor(_U8), rg.tensor(zeros[:, :4])),
        ),
        "fft.fft2": (  # one size for the two dims of a 2-d transform
            lambda: torch.fft.fft2(torch.tensor(_Z), (3,)),
            lambda: rg.fft.fft2(rg.tensor(_Z), (3,)),
        ),
        "glu": (lambda: f.glu(torch.tensor(_Z[:, :4])), lambda: g.glu(rg.tensor(_Z[:, :4]))),
        "hardtanh": (lambda: f.hardtanh(torch.tensor(_U8)), lambda: g.hardtanh(rg.tensor(_U8))),
    }


@pytest.mark.parametrize("name", sorted(_refusals()))
def test_refused_as_torch_refuses(name):
    theirs, ours = _refusals()[name]
    with pytest.raises((RuntimeError, NotImplementedError, ValueError, TypeError)):
        theirs()
    with pytest.raises(rg.RetrogradError, match=name.strip()):
        ours()


def test_what_torch_still_computes_there():
    """The refusals above stop where torch's do: ``relu6`` of uint8 (limits 0 and 6), hardtanh
    of a signed integer tensor, a float target beside float logits."""
    f, g = torch.nn.functional, rg.nn.functional
    assert np.array_equal(g.relu6(rg.tensor(_U8)).numpy(), f.relu6(torch.tensor(_U8)).numpy())
    i8 = _U8.astype(np.int8)
    assert np.array_equal(g.hardtanh(rg.tensor(i8)).numpy(), f.hardtanh(torch.tensor(i8)).numpy())
    target = (_U8[:, :4] % 2).astype(np.float32)
    ours = g.binary_cross_entropy_with_logits(rg.tensor(_X[:, :4]), rg.tensor(target))
    theirs = f.binary_cross_entropy_with_logits(torch.tensor(_X[:, :4]), torch.tensor(target))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
