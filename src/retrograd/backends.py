"""torch's ``torch.backends`` flags that training scripts set (``torch.backends.cudnn.benchmark =
True``, ``torch.backends.cuda.matmul.allow_tf32 = True``...) and its availability queries.

The flags are kept where scripts set and read them, and change no retrograd kernel: the NumPy
backend has no cuDNN or TF32 paths, and ``rg.TorchBackend`` runs torch's kernels under torch's
own flags (set ``torch.backends`` there for those). Every computation here is deterministic, so
``cudnn.deterministic`` holds whatever it is set to. The queries answer for retrograd:
``mps.is_available()`` is False (retrograd's GPU backend is CUDA through torch), and cuDNN is
available exactly when a CUDA device is.

>>> import retrograd as rg
>>> rg.backends.cudnn.benchmark = True
>>> rg.backends.cudnn.benchmark, rg.backends.mps.is_available()
(True, False)
"""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

from .backend.accelerators import cuda_device_count

__all__ = ["cuda", "cudnn", "mkldnn", "mps", "openmp", "opt_einsum"]


def _has_cuda() -> bool:
    return cuda_device_count() > 0


def _submodule(name: str, **attributes: Any) -> ModuleType:
    """A module ``retrograd.backends.<name>`` holding ``attributes``, in ``sys.modules`` so that
    torch's import lines (``import torch.backends.cudnn as cudnn``, as most training scripts
    write it) import it as they import torch's."""
    module = ModuleType(f"{__name__}.{name}")
    module.__dict__.update(attributes)
    sys.modules[module.__name__] = module
    return module


cudnn = _submodule(
    "cudnn",
    benchmark=False,
    deterministic=False,
    enabled=True,
    allow_tf32=True,
    is_available=_has_cuda,
    version=lambda: None,
)
cuda = _submodule(
    "cuda",
    matmul=SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True),
    is_built=_has_cuda,
    flash_sdp_enabled=lambda: True,
    enable_flash_sdp=lambda enabled: None,
    mem_efficient_sdp_enabled=lambda: True,
    enable_mem_efficient_sdp=lambda enabled: None,
    math_sdp_enabled=lambda: True,
    enable_math_sdp=lambda enabled: None,
)
mps = _submodule("mps", is_available=lambda: False, is_built=lambda: False)
mkldnn = _submodule("mkldnn", enabled=True, is_available=lambda: False)
openmp = _submodule("openmp", is_available=lambda: True)
opt_einsum = _submodule("opt_einsum", enabled=True, strategy="auto", is_available=lambda: False)
