"""``rg.fft``'s transforms and ``stft(return_complex=True)``/``istft`` against torch: values and
gradients for every ``norm`` and for ``n``/``s``/``dim`` that cut or pad (the real inverse
transforms differentiate as torch's ``c2r``: the imaginary parts at frequency 0 and at the
Nyquist frequency count for nothing), and a finite-difference check independent of torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

RNG_SEED = 11


def values(t):
    return t.resolve_conj().detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def loss_of(out):
    if out.is_complex():
        return (out.abs() ** 2).sum() + out.real.sum() + 2 * out.imag.sum()
    return (out * out).sum() + 3 * out.sum()


def run(lib, transform, data):
    x = lib.tensor(data, requires_grad=True)
    out = transform(lib, x)
    loss = loss_of(out)
    grad = torch.autograd.grad(loss, [x])[0] if lib is torch else x.grad(loss.backward())
    return values(out), str(out.dtype).removeprefix("torch."), values(grad)


TRANSFORMS = {
    "fft": (lambda lib, x, norm: lib.fft.fft(x, norm=norm), "complex"),
    "fft_n_dim0": (lambda lib, x, norm: lib.fft.fft(x, n=5, dim=0, norm=norm), "complex"),
    "ifft_n": (lambda lib, x, norm: lib.fft.ifft(x, n=6, norm=norm), "complex"),
    "fft_of_real": (lambda lib, x, norm: lib.fft.fft(x, norm=norm), "real"),
    "rfft": (lambda lib, x, norm: lib.fft.rfft(x, norm=norm), "real"),
    "rfft_n": (lambda lib, x, norm: lib.fft.rfft(x, n=11, norm=norm), "real"),
    "irfft": (lambda lib, x, norm: lib.fft.irfft(x, norm=norm), "complex"),
    "irfft_odd_n": (lambda lib, x, norm: lib.fft.irfft(x, n=9, norm=norm), "complex"),
    "irfft_short_n": (lambda lib, x, norm: lib.fft.irfft(x, n=4, dim=0, norm=norm), "complex"),
    "hfft": (lambda lib, x, norm: lib.fft.hfft(x, norm=norm), "complex"),
    "ihfft": (lambda lib, x, norm: lib.fft.ihfft(x, norm=norm), "real"),
    "fft2": (lambda lib, x, norm: lib.fft.fft2(x, norm=norm), "complex"),
    "ifft2_s": (lambda lib, x, norm: lib.fft.ifft2(x, s=(4, 6), norm=norm), "complex"),
    "rfft2": (lambda lib, x, norm: lib.fft.rfft2(x, norm=norm), "real"),
    "irfft2": (lambda lib, x, norm: lib.fft.irfft2(x, norm=norm), "complex"),
    "irfft2_s": (lambda lib, x, norm: lib.fft.irfft2(x, s=(5, 7), norm=norm), "complex"),
    "fftn": (lambda lib, x, norm: lib.fft.fftn(x, norm=norm), "complex"),
    "ifftn_dim": (lambda lib, x, norm: lib.fft.ifftn(x, dim=(0,), norm=norm), "complex"),
    "rfftn": (lambda lib, x, norm: lib.fft.rfftn(x, norm=norm), "real"),
    "irfftn_s": (lambda lib, x, norm: lib.fft.irfftn(x, s=(3, 10), norm=norm), "complex"),
    "hfft2": (lambda lib, x, norm: lib.fft.hfft2(x, norm=norm), "complex"),
    "hfftn_s": (lambda lib, x, norm: lib.fft.hfftn(x, s=(5, 7), norm=norm), "complex"),
    "ihfft2": (lambda lib, x, norm: lib.fft.ihfft2(x, norm=norm), "real"),
    "ihfftn_dim": (lambda lib, x, norm: lib.fft.ihfftn(x, dim=(0,), norm=norm), "real"),
    "shifted": (
        lambda lib, x, norm: lib.fft.ifftshift(lib.fft.fftshift(lib.fft.fft(x, norm=norm)), 0),
        "complex",
    ),
}


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transforms_match_torch_values_and_gradients(name, norm):
    transform, kind = TRANSFORMS[name]
    rng = np.random.default_rng(RNG_SEED)
    data = rng.standard_normal((3, 8))
    if kind == "complex":
        data = data + 1j * rng.standard_normal((3, 8))
    (expected, expected_dtype, expected_grad), (got, got_dtype, got_grad) = (
        run(lib, lambda lib, x: transform(lib, x, norm), data) for lib in (torch, rg)
    )
    assert got_dtype == expected_dtype
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got_grad, expected_grad, rtol=1e-10, atol=1e-10)


def test_float32_signals_give_complex64_spectra():
    x = np.random.default_rng(RNG_SEED).standard_normal(8).astype(np.float32)
    ours, theirs = rg.fft.rfft(rg.tensor(x)), torch.fft.rfft(torch.tensor(x))
    assert ours.dtype == rg.complex64 and theirs.dtype == torch.complex64
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
    assert rg.fft.fft(rg.arange(4)).dtype == rg.complex64  # an integer signal, as torch's


def test_irfft_gradient_matches_finite_differences():
    """Independent of torch: the gradient in each real and imaginary part of the spectrum,
    the ones at frequency 0 and n / 2 (which irfft ignores) zero."""
    rng = np.random.default_rng(RNG_SEED)
    spectrum = rng.standard_normal(5) + 1j * rng.standard_normal(5)
    weights = rng.standard_normal(8)

    def loss(z):
        return (rg.fft.irfft(z, norm="ortho") ** 3 * rg.tensor(weights)).sum()

    z = rg.tensor(spectrum, requires_grad=True)
    grad = z.grad(loss(z).backward()).numpy()
    step, expected = 1e-6, np.zeros(5, np.complex128)
    for k in range(5):
        for unit in (1.0, 1j):
            up, down = spectrum.copy(), spectrum.copy()
            up[k] += step * unit
            down[k] -= step * unit
            slope = (loss(rg.tensor(up)).item() - loss(rg.tensor(down)).item()) / (2 * step)
            expected[k] += unit * slope
    np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-7)
    assert grad[0].imag == 0 and grad[4].imag == 0


@pytest.mark.parametrize(
    "options",
    [{}, {"center": False}, {"normalized": True}, {"hop_length": 3, "win_length": 12}],
)
def test_stft_complex_and_istft_match_torch(options):
    rng = np.random.default_rng(RNG_SEED)
    signal = rng.standard_normal((2, 40))
    window = np.hanning(options.get("win_length", 16)) + 0.1
    results = []
    for lib in (torch, rg):
        x, w = lib.tensor(signal, requires_grad=True), lib.tensor(window, requires_grad=True)
        spectrum = lib.stft(x, 16, window=w, return_complex=True, **options)
        y = lib.istft(spectrum * (1 + 0.5j), 16, window=w, **options)
        loss = (y**2).sum() + (spectrum.abs() ** 2).sum()
        if lib is torch:
            grads = torch.autograd.grad(loss, [x, w])
        else:
            gradients = loss.backward()
            grads = [x.grad(gradients), w.grad(gradients)]
        results.append([values(spectrum), values(y), *[values(g) for g in grads]])
    for got, expected in zip(results[1], results[0]):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_istft_with_length_and_a_one_dimensional_spectrum():
    rng = np.random.default_rng(RNG_SEED)
    spectrum = rng.standard_normal((9, 6)) + 1j * rng.standard_normal((9, 6))
    window = np.hanning(16) + 0.1
    for length in (20, 34):  # cut, and padded with zeros past the frames
        ours = rg.istft(rg.tensor(spectrum), 16, window=rg.tensor(window), length=length)
        theirs = torch.istft(torch.tensor(spectrum), 16, window=torch.tensor(window), length=length)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-9)
    # a window whose squares overlap-add to zero where the signal is read: refused, as torch's
    with pytest.raises(RuntimeError, match="window overlap add min"):
        torch.istft(torch.tensor(spectrum), 16, window=torch.tensor(np.hanning(16)), length=30)
    with pytest.raises(rg.InvalidArgumentError, match="window overlap add min"):
        rg.istft(rg.tensor(spectrum), 16, window=rg.tensor(np.hanning(16)), length=30)


def test_bad_arguments_name_the_transform():
    with pytest.raises(rg.InvalidArgumentError, match=r"fft\.fft: invalid normalization"):
        rg.fft.fft(rg.ones(4), norm="half")
    with pytest.raises(rg.InvalidArgumentError, match=r"fft\.rfft: invalid number of data"):
        rg.fft.rfft(rg.ones(4), n=0)
    with pytest.raises(rg.InvalidArgumentError, match=r"fft\.fft2: when given, dim and s"):
        rg.fft.fft2(rg.ones(4, 4), s=(4,), dim=(0, 1))
    with pytest.raises(rg.DTypeError, match="istft requires a complex"):
        rg.istft(rg.ones(9, 4), 16)


def autoformer_correlation(torch, queries, keys):
    """Autoformer's ``AutoCorrelation.forward`` (thuml/Autoformer, ``layers/AutoCorrelation.py``)
    up to the period-based dependencies, as written."""
    B, L, H, E = queries.shape  # noqa: N806, RUF059 (as written)
    q_fft = torch.fft.rfft(queries.permute(0, 2, 3, 1).contiguous(), dim=-1)
    k_fft = torch.fft.rfft(keys.permute(0, 2, 3, 1).contiguous(), dim=-1)
    res = q_fft * torch.conj(k_fft)
    corr = torch.fft.irfft(res, n=L, dim=-1)
    return corr.permute(0, 3, 1, 2)


def test_autoformer_autocorrelation_matches_torch():
    rng = np.random.default_rng(RNG_SEED)
    queries, keys = rng.standard_normal((2, 6, 2, 3)), rng.standard_normal((2, 6, 2, 3))
    results = []
    for lib in (torch, rg):
        q = lib.tensor(queries, dtype=lib.float32, requires_grad=True)
        k = lib.tensor(keys, dtype=lib.float32, requires_grad=True)
        corr = autoformer_correlation(lib, q, k)
        loss = (corr * corr.detach().cos()).sum()
        if lib is torch:
            grads = torch.autograd.grad(loss, [q, k])
        else:
            gradients = loss.backward()
            grads = [q.grad(gradients), k.grad(gradients)]
        assert corr.dtype == lib.float32
        results.append([values(corr), *[values(g) for g in grads]])
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
