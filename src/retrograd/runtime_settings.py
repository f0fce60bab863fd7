"""torch's process-wide settings and dtype queries that scripts call at their top:
``set_num_threads``/``get_num_threads``, ``set_printoptions``,
``use_deterministic_algorithms``, ``get_default_dtype``/``set_default_dtype``, and
``promote_types``/``result_type``/``can_cast``.

- ``set_num_threads(n)`` sets the threads of the BLAS/OpenMP pools NumPy uses (threadpoolctl)
  and of torch, for ``rg.TorchBackend``.
- ``set_printoptions`` sets how tensors print (torch's keywords and profiles;
  :mod:`retrograd.tensor.printing`).
- Every computation here is deterministic, so ``use_deterministic_algorithms(True)`` holds.
- ``set_float32_matmul_precision("high")`` (nanoGPT's first line on a GPU) is recorded and
  checked as torch checks it; float32 products are computed in float32 always (no TF32), the
  ``"highest"`` of torch.
- ``set_default_dtype(rg.float64)`` makes float64 the dtype of every new floating tensor made
  without a dtype, as ``torch.set_default_dtype``: Python floats and lists of them, the
  creation functions (``zeros``, ``rand``, ``arange`` with a float, ``linspace``...), nn
  modules' parameters and buffers, distributions, and an int tensor meeting a Python float or
  a float op (``int_tensor / 2``, ``int_tensor.sqrt()``). Any float dtype may be the default
  (float32, float64, and bfloat16/float16 where the backend has them: rg.TorchBackend); an int
  or bool one is refused, as torch refuses it. The setting is process-wide, as torch's;
  NumPy arrays keep their dtype, and ``*_like`` functions their source's.

>>> import retrograd as rg
>>> rg.promote_types(rg.int64, rg.float32), rg.can_cast(rg.float64, rg.int64)
(retrograd.float32, False)
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np

from .errors import DTypeError, InvalidArgumentError
from .tensor import Tensor
from .tensor.dtypes import (
    DTYPE_OBJECTS,
    FLOAT_DTYPES,
    canonical_dtype,
    default_float_dtype,
    set_default_float_dtype,
)
from .tensor.dtypes import can_cast as dtype_can_cast
from .tensor.internal import promote, result_dtype, scalar_dtype
from .tensor.printing import get_printoptions, set_printoptions

__all__ = [
    "are_deterministic_algorithms_enabled",
    "can_cast",
    "get_default_dtype",
    "get_deterministic_debug_mode",
    "get_float32_matmul_precision",
    "get_num_interop_threads",
    "get_num_threads",
    "get_printoptions",
    "is_deterministic_algorithms_warn_only_enabled",
    "is_warn_always_enabled",
    "promote_types",
    "result_type",
    "set_default_dtype",
    "set_default_tensor_type",
    "set_deterministic_debug_mode",
    "set_float32_matmul_precision",
    "set_flush_denormal",
    "set_num_interop_threads",
    "set_num_threads",
    "set_printoptions",
    "set_warn_always",
    "use_deterministic_algorithms",
]


# -- threads ---------------------------------------------------------------------------------------
def set_num_threads(threads: int) -> None:
    """The number of threads NumPy's BLAS/OpenMP pools and torch use."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise InvalidArgumentError(f"set_num_threads: expected a positive int, got {threads!r}")
    global _limits
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # an optional dependency (the "examples" extra)
        threadpool_limits = None
    if threadpool_limits is not None:
        _limits = threadpool_limits(limits=threads)  # kept: the limit lasts while it is held
    _set_torch_threads(threads)


_limits: Any = None


def _set_torch_threads(threads: int) -> None:
    torch = sys.modules.get("torch")  # only where torch is in use: no import for it
    if torch is not None:
        torch.set_num_threads(threads)


def get_num_threads() -> int:
    """The threads of the BLAS pool NumPy uses (the cores, without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return os.cpu_count() or 1
    pools = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(pools) if pools else 1


_INTEROP_THREADS = [os.cpu_count() or 1]


def get_num_interop_threads() -> int:
    """torch's inter-op pool size: the number :func:`set_num_interop_threads` set (the cores
    by default). retrograd runs ops one after another, so it sizes nothing here."""
    return _INTEROP_THREADS[0]


def set_num_interop_threads(threads: int) -> None:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise InvalidArgumentError(
            f"set_num_interop_threads: expected a positive int, got {threads!r}"
        )
    _INTEROP_THREADS[0] = threads


def set_flush_denormal(mode: bool) -> bool:
    """torch's switch of the CPU's flush-to-zero of denormal floats, which returns whether
    the machine supports it: False here, nothing is switched (NumPy exposes no FTZ control),
    so results keep their denormals, as torch's do with the switch off."""
    if not isinstance(mode, bool):
        raise InvalidArgumentError(f"set_flush_denormal: expected a bool, got {mode!r}")
    return False


# -- determinism and dtypes ---------------------------------------------------------------------
_DETERMINISTIC = [False, False]  # enabled, warn_only


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Recorded; every retrograd kernel is deterministic already."""
    _DETERMINISTIC[:] = [bool(mode), bool(warn_only)]


def are_deterministic_algorithms_enabled() -> bool:
    return _DETERMINISTIC[0]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """Whether ``use_deterministic_algorithms`` was given ``warn_only=True``."""
    return _DETERMINISTIC[1]


_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_deterministic_debug_mode(debug_mode: int | str) -> None:
    """torch's other spelling of :func:`use_deterministic_algorithms`: ``"default"`` (0) off,
    ``"warn"`` (1) on with ``warn_only``, ``"error"`` (2) on."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise InvalidArgumentError(
                "set_deterministic_debug_mode: invalid value of debug_mode, expected one of "
                f"`default`, `warn`, `error`, but got {debug_mode}"
            )
        debug_mode = _DEBUG_MODES[debug_mode]
    if isinstance(debug_mode, bool) or debug_mode not in (0, 1, 2):
        raise InvalidArgumentError(
            "set_deterministic_debug_mode: invalid value of debug_mode, expected 0, 1, or 2, "
            f"but got {debug_mode!r}"
        )
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode() -> int:
    """0 when deterministic algorithms are off, 1 when on with ``warn_only``, 2 when on."""
    if not _DETERMINISTIC[0]:
        return 0
    return 1 if _DETERMINISTIC[1] else 2


def set_default_tensor_type(t: Any) -> None:
    """torch's deprecated ``set_default_tensor_type``: a legacy floating type (``rg.DoubleTensor``
    or its name, ``"torch.DoubleTensor"``) makes its dtype the default (:func:`set_default_dtype`);
    an integer type is refused as torch refuses it, and a CUDA type where there is no GPU, or
    else with the backend to use (tensors are made on their backend's device)."""
    import warnings

    from .tensor.dtypes import legacy_type_dtype

    warnings.warn(
        "set_default_tensor_type() is deprecated, as torch's; use set_default_dtype() (and a "
        "backend on the device) instead",
        UserWarning,
        stacklevel=2,
    )
    name = t if isinstance(t, str) else getattr(t, "__name__", repr(t))
    on_cuda = ".cuda." in f".{name}" if isinstance(t, str) else getattr(t, "device_kind", None)
    if on_cuda:
        from .context import current_backend

        if current_backend().default_device.kind != "cuda":
            raise InvalidArgumentError(
                f"set_default_tensor_type: {name} is a CUDA type, and tensors are made on their "
                "backend's device (the CPU here); make the backend compute on a GPU instead: "
                "rg.set_default_backend(rg.Autodiff(rg.TorchBackend('cuda')))"
            )
    try:
        dtype = legacy_type_dtype(t)
    except (DTypeError, InvalidArgumentError):
        raise DTypeError(
            f"set_default_tensor_type: expected a legacy tensor type (rg.DoubleTensor) or its "
            f"name, got {t!r}"
        ) from None
    if dtype not in FLOAT_DTYPES:
        raise DTypeError(
            "set_default_tensor_type: only floating-point types are supported as the default "
            f"type, got {name}"
        )
    set_default_dtype(dtype)


_WARN_ALWAYS = [False]


def set_warn_always(b: bool, /) -> None:
    """torch's flag for warnings it gives once a process to be given every time: recorded
    (retrograd's one-time warnings are Python's, which ``warnings.simplefilter("always")``
    repeats)."""
    _WARN_ALWAYS[0] = bool(b)


def is_warn_always_enabled() -> bool:
    return _WARN_ALWAYS[0]


_MATMUL_PRECISION = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """Recorded (``"highest"``, ``"high"`` or ``"medium"``); the float32 products are computed
    in float32 whatever it says. Any other str is torch's warning and changes nothing, as
    torch's call does (a script written for a newer or older torch still runs); a value that
    is not a str is refused."""
    if not isinstance(precision, str):
        raise DTypeError(
            f"set_float32_matmul_precision expects a str, but got {type(precision).__name__}"
        )
    if precision not in ("highest", "high", "medium"):
        warnings.warn(
            f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
            "set_float32_matmul_precision call has no effect.",
            UserWarning,
            stacklevel=2,
        )
        return
    _MATMUL_PRECISION[0] = precision


def get_float32_matmul_precision() -> str:
    return _MATMUL_PRECISION[0]


def get_default_dtype() -> Any:
    """The dtype of new floating tensors made without a dtype (float32 until
    :func:`set_default_dtype` changes it)."""
    return DTYPE_OBJECTS[default_float_dtype()]


def set_default_dtype(d: Any) -> None:
    """Make ``d`` (a float dtype: float32, float64, bfloat16 or float16) the default float
    dtype, process-wide, as ``torch.set_default_dtype``; an int or bool dtype is refused."""
    name = canonical_dtype("set_default_dtype", d)
    if name not in FLOAT_DTYPES:
        raise DTypeError(
            f"set_default_dtype: only floating-point dtypes ({', '.join(FLOAT_DTYPES)}) can be "
            f"the default, got {name}"
        )
    set_default_float_dtype(name)


def promote_types(type1: Any, type2: Any) -> Any:
    """The dtype two tensors of these dtypes combine to (torch's ``promote_types``)."""
    a = canonical_dtype("promote_types", type1)
    b = canonical_dtype("promote_types", type2)
    return DTYPE_OBJECTS[result_dtype(a, b)]


def _number_kind(value: bool | int | float | complex) -> type:
    """The category of a Python number in torch's promotion (a bool is no int)."""
    if isinstance(value, complex):
        return complex
    if isinstance(value, float):
        return float
    return int if type(value) is int else bool


def result_type(tensor1: Any, tensor2: Any) -> Any:
    """The dtype of an arithmetic op on these operands (tensors or Python numbers), with
    torch's rules for 0-d tensors and scalars (a NumPy scalar read as the Python number)."""
    tensor1, tensor2 = (x.item() if isinstance(x, np.generic) else x for x in (tensor1, tensor2))
    for operand in (tensor1, tensor2):
        if not isinstance(operand, Tensor | bool | int | float | complex):
            raise DTypeError(
                f"result_type: expected tensors or Python numbers, got {type(operand).__name__}"
            )
    if not isinstance(tensor1, Tensor) and not isinstance(tensor2, Tensor):
        kinds = [_number_kind(x) for x in (tensor1, tensor2)]
        name = default_float_dtype() if float in kinds else ("int64" if int in kinds else "bool")
        if complex in kinds:  # torch's: the complex dtype of the default float's width
            name = "complex128" if default_float_dtype() == "float64" else "complex64"
        return DTYPE_OBJECTS[name]
    a, b = (tensor1, tensor2) if isinstance(tensor1, Tensor) else (tensor2, tensor1)
    if not isinstance(b, Tensor):
        return DTYPE_OBJECTS[scalar_dtype(str(a.dtype), b)]
    return DTYPE_OBJECTS[str(promote(a, b, "result_type")[0].dtype)]


def can_cast(from_: Any, to: Any) -> bool:
    """Whether torch's casting rules allow ``from_`` into ``to`` (no float into an integer
    or bool, no integer into bool)."""
    return dtype_can_cast(canonical_dtype("can_cast", from_), canonical_dtype("can_cast", to))
