"""Small torch names found missing this round, against torch."""

import numpy as np
import torch

import retrograd as rg


def test_tensor_istft_method_is_torchs():
    signal = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    window = torch.hann_window(16)
    spectrum = torch.from_numpy(signal).stft(16, hop_length=4, window=window, return_complex=True)
    expected = spectrum.istft(16, hop_length=4, window=window, length=64)
    mine = rg.tensor(spectrum.numpy()).istft(
        16, hop_length=4, window=rg.tensor(window.numpy()), length=64
    )
    np.testing.assert_allclose(mine.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
