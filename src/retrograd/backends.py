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

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace

from .backend.accelerators import cuda_device_count

__all__ = [
    "cpu",
    "cuda",
    "cudnn",
    "mha",
    "mkl",
    "mkldnn",
    "mps",
    "openmp",
    "opt_einsum",
    "quantized",
]


def _has_cuda() -> bool:
    return cuda_device_count() > 0


@contextlib.contextmanager
def _cudnn_flags(
    enabled: bool = False,
    benchmark: bool = False,
    benchmark_limit: int = 10,
    deterministic: bool = False,
    allow_tf32: bool = True,
    fp32_precision: str = "none",
    depthwise_kernel: str = "auto",
) -> Iterator[None]:
    """torch's ``cudnn.flags(...)``: the flags set for the block (torch's defaults for those
    not given), then restored (the NTK tutorial's ``with torch.backends.cudnn.flags(
    allow_tf32=False):``)."""
    given = {"enabled": enabled, "benchmark": benchmark, "benchmark_limit": benchmark_limit,
             "deterministic": deterministic, "allow_tf32": allow_tf32}  # fmt: skip
    saved = {name: getattr(cudnn, name) for name in given}
    for name, value in given.items():
        setattr(cudnn, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(cudnn, name, value)


cudnn = SimpleNamespace(
    benchmark=False,
    benchmark_limit=None,
    deterministic=False,
    enabled=True,
    allow_tf32=True,
    flags=_cudnn_flags,
    is_available=_has_cuda,
    version=lambda: None,
)
cuda = SimpleNamespace(
    matmul=SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True),
    is_built=_has_cuda,
    flash_sdp_enabled=lambda: True,
    enable_flash_sdp=lambda enabled: None,
    mem_efficient_sdp_enabled=lambda: True,
    enable_mem_efficient_sdp=lambda enabled: None,
    math_sdp_enabled=lambda: True,
    enable_math_sdp=lambda enabled: None,
)
mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)
mkldnn = SimpleNamespace(enabled=True, is_available=lambda: False)
openmp = SimpleNamespace(is_available=lambda: True)
opt_einsum = SimpleNamespace(enabled=True, strategy="auto", is_available=lambda: False)


def _cpu_capability() -> str:
    """The widest SIMD the host's NumPy kernels run (torch's ``get_cpu_capability`` names its
    own dispatch level: ``"AVX512"``, ``"AVX2"`` or ``"DEFAULT"``)."""
    import numpy as np

    features = getattr(getattr(np, "_core", np), "_multiarray_umath", None)
    flags = getattr(features, "__cpu_features__", {}) if features is not None else {}
    if flags.get("AVX512F") and flags.get("AVX512BW"):
        return "AVX512"
    if flags.get("AVX2"):
        return "AVX2"
    return "DEFAULT"


class _MklVerbose:
    """``torch.backends.mkl.verbose(level)``: a context manager (MKL's verbose output, of
    which retrograd, computing without MKL, has none)."""

    def __init__(self, enable: int) -> None:
        self.enable = enable

    def __enter__(self) -> _MklVerbose:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


_MHA_FASTPATH = [True]


def _set_fastpath_enabled(value: bool) -> None:
    _MHA_FASTPATH[0] = bool(value)


cpu = SimpleNamespace(get_cpu_capability=_cpu_capability)
mkl = SimpleNamespace(is_available=lambda: False, verbose=_MklVerbose, VERBOSE_OFF=0, VERBOSE_ON=1)
#: ``nn.MultiheadAttention``'s fast path (torch's native kernel for inference): a flag here,
#: recorded; retrograd's attention computes one way whatever it says
mha = SimpleNamespace(
    get_fastpath_enabled=lambda: _MHA_FASTPATH[0], set_fastpath_enabled=_set_fastpath_enabled
)
#: the quantized engine torch's quantized kernels would use, recorded (torch's CPU default)
quantized = SimpleNamespace(engine="x86", supported_engines=["qnnpack", "onednn", "x86", "fbgemm"])
