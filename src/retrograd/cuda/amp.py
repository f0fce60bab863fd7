"""``torch.cuda.amp``: the older spellings of :mod:`retrograd.amp`'s names, for the GPU
(``GradScaler(init_scale, ...)``, ``autocast(enabled=True, dtype=float16, ...)``), importable
as torch's are (``from torch.cuda.amp import GradScaler, autocast``)."""

from __future__ import annotations

from typing import Any

from .. import amp as _amp

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


def GradScaler(  # noqa: N802 (torch's name)
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
    enabled: bool = True,
) -> _amp.GradScaler:
    return _amp.GradScaler(
        "cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled
    )


def autocast(
    enabled: bool = True, dtype: Any = "float16", cache_enabled: bool = True
) -> _amp.autocast:
    return _amp.autocast("cuda", dtype, enabled, cache_enabled)


def custom_fwd(fwd: Any = None, *, cast_inputs: Any = None) -> Any:
    """``torch.cuda.amp.custom_fwd``: :func:`retrograd.amp.custom_fwd` for CUDA."""
    return _amp.custom_fwd(fwd, device_type="cuda", cast_inputs=cast_inputs)


def custom_bwd(bwd: Any = None) -> Any:
    """``torch.cuda.amp.custom_bwd``: :func:`retrograd.amp.custom_bwd` for CUDA."""
    return _amp.custom_bwd(bwd, device_type="cuda")
