"""Regressions found while checking the transforms the round-93 ports reach
(``tests/test_real_ports_ports93.py``; the ports themselves agreed with torch): the real
forward transforms of ``rg.fft`` (``rfft``, ``rfft2``, ``rfftn``, ``ihfft``) were the complex
transform of the input, cut; its rounding left imaginary parts of about 1e-16 at the bins that
are real for every real input (frequency 0 and ``n / 2``), where torch's real-input kernels give
exact zeros, so a phase (``angle``) of the spectrum jumped by 2 pi there (6 of 50 rows of a
length-6 ``rfft``). They are a real-input kernel now, and ``fft``/``ifft`` of a real input
that kernel completed by Hermitian symmetry, as torch computes them (they had the same
rounding, and halves that were not exact conjugates). The real transforms of no axis are
refused in torch's words. Expected values from torch 2.13.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _signal(shape, seed):
    # negative means: the frequency-0 bins sit on the negative real axis, where angle is +-pi
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) - 0.5


@pytest.mark.parametrize("n", [6, 10, 12, 30, 100])
def test_rfft_phase_at_frequency_zero_and_nyquist_is_torchs(n):
    x = _signal((50, n), n)
    theirs = torch.fft.rfft(torch.tensor(x))
    ours = rg.fft.rfft(rg.tensor(x))
    np.testing.assert_allclose(ours.angle().numpy(), theirs.angle().numpy(), rtol=1e-5, atol=1e-5)
    nyquist = ours.numpy()[:, -1]  # real for every real input: zero, +0.0 as torch's
    assert (nyquist.imag == 0).all() and not np.signbit(nyquist.imag).any()


@pytest.mark.parametrize(
    "shape, dims", [((6, 6), (1, 2)), ((12, 30), (1, 2)), ((6, 10), (2, 1)), ((5, 10), (1, 2))]
)
def test_rfftn_real_bins_are_exactly_real_as_torchs(shape, dims):
    x = _signal((20, *shape), sum(shape))
    theirs = torch.fft.rfftn(torch.tensor(x), dim=dims, norm="ortho").numpy()
    ours = rg.fft.rfftn(rg.tensor(x), dim=dims, norm="ortho").numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours.imag == 0, theirs.imag == 0)
    np.testing.assert_allclose(np.angle(ours), np.angle(theirs), rtol=1e-5, atol=1e-5)


def test_rfft2_phase_and_ihfft_as_torchs():
    x = _signal((8, 6, 6), 7)
    theirs = torch.fft.rfft2(torch.tensor(x)).angle().numpy()
    ours = rg.fft.rfft2(rg.tensor(x)).angle().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    y = _signal((8, 12), 8)
    theirs = torch.fft.ihfft(torch.tensor(y)).resolve_conj().numpy()
    ours = rg.fft.ihfft(rg.tensor(y)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(ours.imag == 0, theirs.imag == 0)


def _gradients(lib, x, transform, weight, create_graph=False):
    t = lib.tensor(x, requires_grad=True)
    loss = (lib.view_as_real(transform(lib, t)) * lib.tensor(weight)).sum()
    if lib is torch:
        (g,) = torch.autograd.grad(loss, t, create_graph=create_graph)
        if not create_graph:
            return g.numpy()
        (gg,) = torch.autograd.grad((g * g).sum(), t)
        return g.detach().numpy(), gg.numpy()
    grads = loss.backward(create_graph=create_graph)
    g = t.grad(grads)
    if not create_graph:
        return g.numpy()
    return g.detach().numpy(), t.grad((g * g).sum().backward()).numpy()


@pytest.mark.parametrize(
    "name, transform",
    [
        ("rfft n=7 of 6", lambda lib, t: lib.fft.rfft(t, n=7, norm="forward")),
        ("rfft2 ortho", lambda lib, t: lib.fft.rfft2(t, norm="ortho")),
        ("rfftn s", lambda lib, t: lib.fft.rfftn(t, s=(4, 8), dim=(0, 2))),
        ("ihfft", lambda lib, t: lib.fft.ihfft(t, dim=1).resolve_conj()),
        ("ihfft2", lambda lib, t: lib.fft.ihfft2(t).resolve_conj()),
    ],
)
def test_real_transform_gradients_as_torchs(name, transform):
    x = np.random.default_rng(3).standard_normal((5, 6, 6))
    shape = tuple(torch.view_as_real(transform(torch, torch.tensor(x))).shape)
    weight = np.random.default_rng(4).standard_normal(shape)
    np.testing.assert_allclose(
        _gradients(rg, x, transform, weight),
        _gradients(torch, x, transform, weight),
        rtol=1e-10,
        atol=1e-12,
    )


def test_rfft_second_order_gradient_as_torchs():
    x = np.random.default_rng(5).standard_normal((3, 10))
    weight = np.random.default_rng(6).standard_normal((3, 6, 2))

    def transform(lib, t):
        return lib.fft.rfft(t * t, norm="ortho")

    ours = _gradients(rg, x, transform, weight, create_graph=True)
    theirs = _gradients(torch, x, transform, weight, create_graph=True)
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", ["rfftn", "ihfftn", "irfftn", "hfftn"])
@pytest.mark.parametrize("shape, dim", [((), None), ((3,), ())])
def test_real_transforms_of_no_axis_are_refused_naming_the_op(op, shape, dim):
    with pytest.raises(RuntimeError, match="must transform at least one axis"):
        getattr(torch.fft, op)(torch.ones(shape), dim=dim)
    with pytest.raises(rg.InvalidArgumentError, match=f"fft.{op} must transform at least one axis"):
        getattr(rg.fft, op)(rg.ones(shape), dim=dim)


@pytest.mark.parametrize("op", ["fft", "ifft"])
@pytest.mark.parametrize("n", [6, 12, 30])
def test_one_dimensional_transform_of_a_real_signal_is_hermitian_as_torchs(op, n):
    # torch's fft/ifft of a real input are its real-input kernel, completed by symmetry
    x = _signal((50, n), n + 1)
    theirs = getattr(torch.fft, op)(torch.tensor(x), norm="ortho").resolve_conj().numpy()
    ours = getattr(rg.fft, op)(rg.tensor(x), norm="ortho").numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.angle(ours), np.angle(theirs), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours[:, 1:], np.conj(ours[:, :0:-1]))  # exactly, as torch's


@pytest.mark.parametrize(
    "transform",
    [
        lambda lib, t: lib.fft.fft(t, n=7),
        lambda lib, t: lib.fft.ifft(t, dim=1, norm="forward"),
        lambda lib, t: lib.fft.fft(t[..., :1], n=4),
    ],
)
def test_one_dimensional_transform_gradients_of_a_real_signal_as_torchs(transform):
    x = np.random.default_rng(9).standard_normal((5, 6, 6))
    shape = tuple(torch.view_as_real(transform(torch, torch.tensor(x)).resolve_conj()).shape)
    weight = np.random.default_rng(10).standard_normal(shape)

    def resolved(lib, t):
        return transform(lib, t).resolve_conj()

    np.testing.assert_allclose(
        _gradients(rg, x, resolved, weight),
        _gradients(torch, x, resolved, weight),
        rtol=1e-10,
        atol=1e-12,
    )
