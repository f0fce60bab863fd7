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
import contextvars
import enum
import warnings
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

from .backend.accelerators import cuda_device_count
from .errors import DTypeError, InvalidArgumentError

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


# -- scaled_dot_product_attention's kernel selection: ``nn.attention.sdpa_kernel`` sets it, the
#    ``cuda.*_sdp_enabled()`` flags read it (one state in torch) --
class SDPBackend(enum.Enum):
    """torch's kernel kinds for ``scaled_dot_product_attention``, with torch's values."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_KERNELS = [b for b in SDPBackend if b is not SDPBackend.ERROR]
_ENABLED: contextvars.ContextVar[tuple[SDPBackend, ...]] = contextvars.ContextVar(
    "sdpa_enabled", default=tuple(_KERNELS)
)


def enabled_backends() -> list[SDPBackend]:
    """The kernel kinds the current block allows (all of them outside ``sdpa_kernel``)."""
    return list(_ENABLED.get())


def _set_sdp_enabled(kind: SDPBackend, enabled: bool) -> None:
    """Allow or forbid one kernel kind from now on (torch's ``torch.backends.cuda
    .enable_flash_sdp(False)`` and its siblings, which set the flags ``sdpa_kernel`` sets);
    the rest of the selection is kept, in torch's order."""
    wanted = {b for b in _ENABLED.get() if b is not kind} | ({kind} if enabled else set())
    _ENABLED.set(tuple(b for b in _KERNELS if b in wanted))


@contextlib.contextmanager
def sdpa_kernel(backends: Any, set_priority: bool = False) -> Iterator[None]:
    """Allow only ``backends`` (one :class:`SDPBackend` or a list) in the block, as torch's
    context manager; ``set_priority`` (an order of preference) is accepted. retrograd's
    attention is the same function under every selection (see ``nn.attention``'s docstring)."""
    chosen = [backends] if isinstance(backends, SDPBackend) else backends
    if not isinstance(chosen, list | tuple) or not all(isinstance(b, SDPBackend) for b in chosen):
        raise InvalidArgumentError(
            f"sdpa_kernel: backend must be an instance of SDPBackend or a list of SDPBackend "
            f"instances, got {type(backends).__name__}"
        )
    # an empty selection is entered, as torch's: attention called inside the block raises
    usable = tuple(b for b in chosen if b is not SDPBackend.ERROR)
    token = _ENABLED.set(usable)
    try:
        yield
    finally:
        _ENABLED.reset(token)


def check_viable_backend(op: str) -> None:
    """Raise as torch's attention does when the selection (``sdpa_kernel([])``, every
    ``enable_*_sdp(False)``, ``OVERRIDEABLE`` alone: a kernel of a device retrograd has no
    backend for) leaves none of math, flash, memory-efficient or cuDNN to run."""
    if all(b is SDPBackend.OVERRIDEABLE for b in _ENABLED.get()):
        raise InvalidArgumentError(
            f"{op}: No viable backend for scaled_dot_product_attention was found: the "
            "sdpa_kernel selection (or enable_*_sdp(False)) turned off the math kernel and the "
            "fused kernels"
        )


class SDPAParams:
    """torch's ``torch.backends.cuda.SDPAParams``: the arguments the ``can_use_*`` queries
    judge (positional, as torch's constructor takes them)."""

    def __init__(
        self,
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any,
        dropout: float,
        is_causal: bool,
        enable_gqa: bool,
    ) -> None:
        self.query, self.key, self.value, self.attn_mask = query, key, value, attn_mask
        self.dropout, self.is_causal, self.enable_gqa = float(dropout), is_causal, enable_gqa


def _can_use_fused(params: SDPAParams, debug: bool = False) -> bool:
    """torch's CPU build's answer for the fused CUDA kernels: never usable without CUDA."""
    if not isinstance(params, SDPAParams):
        raise DTypeError(
            f"can_use_*_attention: params must be an SDPAParams, got {type(params).__name__}"
        )
    return False


def _sdp_enabled(kind: SDPBackend) -> Callable[[], bool]:
    """``flash_sdp_enabled()`` and its siblings: whether the current ``sdpa_kernel`` selection
    (the same state in torch) allows ``kind``."""
    return lambda: kind in enabled_backends()


def _enable_sdp(kind: SDPBackend) -> Callable[[bool], None]:
    return lambda enabled: _set_sdp_enabled(kind, enabled)


def _sdp_kernel(
    enable_flash: bool = True,
    enable_math: bool = True,
    enable_mem_efficient: bool = True,
    enable_cudnn: bool = True,
) -> contextlib.AbstractContextManager[None]:
    """torch's deprecated ``torch.backends.cuda.sdp_kernel``: warns as torch's does (when
    called), then is ``nn.attention.sdpa_kernel`` of the kinds enabled, in torch's order."""
    warnings.warn(
        "`retrograd.backends.cuda.sdp_kernel()` is deprecated, as torch's is. In the future, "
        "this context manager will be removed. Please see `retrograd.nn.attention.sdpa_kernel()` "
        "for the new context manager, with updated signature.",
        FutureWarning,
        stacklevel=2,
    )
    flags = (
        (enable_flash, SDPBackend.FLASH_ATTENTION),
        (enable_mem_efficient, SDPBackend.EFFICIENT_ATTENTION),
        (enable_math, SDPBackend.MATH),
        (enable_cudnn, SDPBackend.CUDNN_ATTENTION),
    )
    return sdpa_kernel([kind for enabled, kind in flags if enabled])


cuda = SimpleNamespace(
    matmul=SimpleNamespace(
        allow_tf32=False,
        allow_fp16_reduced_precision_reduction=True,
        allow_bf16_reduced_precision_reduction=True,
    ),
    is_built=_has_cuda,
    # retrograd's attention is one composed kernel: no fused CUDA kernel is ever picked
    is_flash_attention_available=lambda: False,
    SDPAParams=SDPAParams,
    can_use_flash_attention=_can_use_fused,
    can_use_efficient_attention=_can_use_fused,
    can_use_cudnn_attention=_can_use_fused,
    SDPBackend=SDPBackend,
    sdp_kernel=_sdp_kernel,
    flash_sdp_enabled=_sdp_enabled(SDPBackend.FLASH_ATTENTION),
    enable_flash_sdp=_enable_sdp(SDPBackend.FLASH_ATTENTION),
    mem_efficient_sdp_enabled=_sdp_enabled(SDPBackend.EFFICIENT_ATTENTION),
    enable_mem_efficient_sdp=_enable_sdp(SDPBackend.EFFICIENT_ATTENTION),
    math_sdp_enabled=_sdp_enabled(SDPBackend.MATH),
    enable_math_sdp=_enable_sdp(SDPBackend.MATH),
    cudnn_sdp_enabled=_sdp_enabled(SDPBackend.CUDNN_ATTENTION),
    enable_cudnn_sdp=_enable_sdp(SDPBackend.CUDNN_ATTENTION),
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
