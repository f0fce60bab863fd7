"""Focused checks of the defects found porting VQGAN, SRGAN/ESRGAN, ControlNet, Autoformer,
RetNet and the beta-VAEs (``test_real_ports_87.py``, ``test_real_ports_88.py``), each against
torch."""

from __future__ import annotations

import warnings

import pytest
import torch

import retrograd as rg


def test_autocast_cache_flag_is_torchs():
    """ControlNet's (latent diffusion's) ``CheckpointFunction.forward`` saves
    ``torch.is_autocast_cache_enabled()`` and backward hands it back to
    ``torch.cuda.amp.autocast(cache_enabled=...)``: there was no such function. The flag is
    torch's: on by default, set by ``set_autocast_cache_enabled`` (a bool only) and by
    ``autocast(cache_enabled=)`` for its block, enabled or not."""
    for lib in (torch, rg):
        assert lib.is_autocast_cache_enabled() is True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with lib.cuda.amp.autocast(enabled=False, cache_enabled=False):
                assert lib.is_autocast_cache_enabled() is False
            with lib.autocast("cpu", enabled=False, cache_enabled=False):
                assert lib.is_autocast_cache_enabled() is False
                with lib.autocast("cpu", enabled=False):
                    assert lib.is_autocast_cache_enabled() is False
            assert lib.is_autocast_cache_enabled() is True
        lib.set_autocast_cache_enabled(False)
        try:
            assert lib.is_autocast_cache_enabled() is False
        finally:
            lib.set_autocast_cache_enabled(True)
        assert lib.clear_autocast_cache() is None
        with pytest.raises(TypeError, match="enabled must be a bool"):
            lib.set_autocast_cache_enabled(1)
        assert lib.is_autocast_cache_enabled() is True
    with pytest.raises(rg.DTypeError, match=r"^set_autocast_cache_enabled: "):
        rg.set_autocast_cache_enabled("yes")
