"""``rg.fft``: every torch transform is here (checked against torch in
tests/test_complex_fft.py), and its real helpers (``fftfreq``, ``rfftfreq``, ``fftshift``,
``ifftshift``) against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from surface_testing import same_gradients

TRANSFORMS = [
    name
    for stem in ("fft", "hfft")
    for name in (stem, "i" + stem, stem + "2", "i" + stem + "2", stem + "n", "i" + stem + "n")
] + ["rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn"]


def test_every_torch_transform_is_here():
    helpers = {"fftfreq", "rfftfreq", "fftshift", "ifftshift"}
    public = [n for n in dir(torch.fft) if not n.startswith("_") and n != "Tensor"]
    theirs = {n for n in public if callable(getattr(torch.fft, n))}
    assert theirs - helpers == set(TRANSFORMS)
    assert set(rg.fft.__all__) == theirs


def test_real_transforms_refuse_complex_inputs_as_torch():
    with pytest.raises(RuntimeError, match="real input"):
        torch.fft.rfft(torch.ones(8, dtype=torch.cfloat))
    with pytest.raises(rg.DTypeError, match=r"^fft\.rfft expects a real input.*complex64"):
        rg.fft.rfft(rg.ones(8, dtype=rg.cfloat))


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8])
@pytest.mark.parametrize("d", [1.0, 0.1, 3])
@pytest.mark.parametrize("dtype", [None, "float64"])
def test_frequencies_are_torchs_bits(n, d, dtype):
    for name in ("fftfreq", "rfftfreq"):
        ours = getattr(rg.fft, name)(n, d, dtype=dtype)
        theirs = getattr(torch.fft, name)(n, d, dtype=getattr(torch, dtype) if dtype else None)
        assert ours.dtype == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())  # rfftfreq(0): NaN


def test_frequencies_follow_the_default_dtype_and_requires_grad():
    previous = rg.get_default_dtype()
    rg.set_default_dtype(rg.float64)
    try:
        assert rg.fft.fftfreq(4).dtype == "float64"
    finally:
        rg.set_default_dtype(previous)
    assert rg.fft.rfftfreq(6, requires_grad=True).requires_grad
    with pytest.raises(rg.InvalidArgumentError, match=r"fft\.fftfreq: n must be a non-negative"):
        rg.fft.fftfreq(-1)
    with pytest.raises(rg.InvalidArgumentError, match=r"fft\.rfftfreq: n must be"):
        rg.fft.rfftfreq(2.5)


@pytest.mark.parametrize("dim", [None, 0, -1, (1, 2), [0, 2]])
@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
def test_shifts_match_torch_with_gradients(name, dim):
    x = np.random.default_rng(0).standard_normal((2, 5, 4))
    same_gradients(lambda lib, t: getattr(lib.fft, name)(t, dim) * lib.arange(4.0), [x])


def test_shifts_name_a_dim_out_of_range():
    with pytest.raises(rg.ShapeError, match=r"fft\.fftshift"):
        rg.fft.fftshift(rg.ones(3, 4), dim=2)
