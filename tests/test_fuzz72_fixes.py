"""Round 72's defects in the FFT, STFT and window functions, each against torch.

- ``istft`` took a ``hop_length`` longer than ``win_length`` whenever the overlap-added squared
  window stayed nonzero over the kept samples (one frame, ``length=`` short of the gap); torch
  refuses every such hop ("expected 0 < hop_length <= win_length", a ``RuntimeError``).
- ``istft`` with ``center=True`` and no ``length=`` returned an empty signal where the center
  padding cut from each end left no samples; torch refuses it (a ``RuntimeError``).
- ``fft.fftfreq``/``fft.rfftfreq`` took an integer or bool ``dtype`` (frequencies truncated to
  integers); torch refuses it ("requires a floating point or complex dtype").
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def test_istft_refuses_a_hop_longer_than_the_window_as_torch_does():
    spectrum = (np.arange(6.0) + 1j * np.arange(6.0)[::-1]).reshape(2, 3, 1).astype(np.complex64)
    kw = dict(n_fft=3, hop_length=3, win_length=1, center=True, normalized=True, length=1)
    with pytest.raises(RuntimeError, match="hop_length <= win_length"):
        torch.istft(torch.tensor(spectrum), window=torch.hann_window(1), **kw)
    with pytest.raises(rg.InvalidArgumentError, match=r"istft.*hop_length=3, win_length=1"):
        rg.istft(rg.tensor(spectrum), window=rg.hann_window(1), **kw)


def test_istft_still_takes_a_hop_of_the_window_s_length():
    signal = np.random.default_rng(72).standard_normal(20)
    kw = dict(n_fft=8, hop_length=4, win_length=4)
    expected = torch.istft(
        torch.stft(torch.tensor(signal), window=torch.ones(4, dtype=torch.float64),
                   return_complex=True, **kw),
        window=torch.ones(4, dtype=torch.float64), length=20, **kw,
    )  # fmt: skip
    got = rg.istft(
        rg.stft(rg.tensor(signal), window=rg.ones(4, dtype=rg.float64), return_complex=True, **kw),
        window=rg.ones(4, dtype=rg.float64), length=20, **kw,
    )  # fmt: skip
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)


def test_istft_refuses_a_centered_inversion_that_leaves_no_samples():
    # one frame of n_fft=2 (a signal of one sample, padded by 1 at each end): the center
    # padding cut from both ends leaves nothing, where torch's check of the window's overlap
    # finds no minimum (a RuntimeError)
    spectrum = np.array([[1.0 + 0.0j], [0.5 + 0.0j]])
    kw = dict(n_fft=2, hop_length=2, center=True)
    with pytest.raises(RuntimeError):
        torch.istft(torch.tensor(spectrum), window=torch.ones(2, dtype=torch.float64), **kw)
    with pytest.raises(rg.InvalidArgumentError, match=r"istft: the 1 frame\(s\) of n_fft=2"):
        rg.istft(rg.tensor(spectrum), window=rg.ones(2, dtype=rg.float64), **kw)
    # a length= keeps the samples torch keeps
    expected = torch.istft(
        torch.tensor(spectrum), window=torch.ones(2, dtype=torch.float64), length=3, **kw
    )
    got = rg.istft(rg.tensor(spectrum), window=rg.ones(2, dtype=rg.float64), length=3, **kw)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("op", ["fftfreq", "rfftfreq"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_fftfreq_refuses_an_integer_or_bool_dtype_as_torch_does(op, dtype):
    with pytest.raises(RuntimeError, match="requires a floating point or complex dtype"):
        getattr(torch.fft, op)(6, d=0.5, dtype=getattr(torch, dtype))
    with pytest.raises(rg.DTypeError, match=rf"fft\.{op} requires a floating point.*{dtype}"):
        getattr(rg.fft, op)(6, d=0.5, dtype=getattr(rg, dtype))
    # a floating dtype still gives torch's frequencies
    expected = getattr(torch.fft, op)(6, d=0.5, dtype=torch.float64)
    got = getattr(rg.fft, op)(6, d=0.5, dtype=rg.float64)
    assert got.dtype == rg.float64
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
