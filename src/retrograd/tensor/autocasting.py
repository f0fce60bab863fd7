"""Autocast's policy: which ops compute in the lower-precision dtype inside an ``autocast``
region, which in float32, and how their tensor arguments are cast -- torch's op lists
(``aten/src/ATen/autocast_mode.cpp``), applied where retrograd's ops begin.

An op takes part by its decorator, :func:`autocast_op` ``("linear")``. Outside every region
the decorator costs one thread-local read. Inside one, the op's floating arguments on the
region's device type are cast by the op's policy on that device type:

- ``LOWER`` (matrix products, convolutions, ``linear``, ``prelu``, attention, on the CPU the
  LSTM and RNN recurrences): float32 and the other half dtype are cast to the region's dtype
  (float64 is left alone, as torch's);
- ``FP32`` (losses, ``prod``, ``cdist``, the linear algebra, 3-d pooling, padding by
  reflection...): bfloat16 and float16 are cast to float32;
- no policy on this device type (``mv``, ``dot``, ``bilinear``, ``softmax``, ``layer_norm``,
  GRU on the CPU): as given.

Where torch builds an unlisted op of listed ones (its GRU and cells, ``bilinear``), its
inner products are autocast; here such an op runs whole in its inputs' dtype, so it is not
bit for bit torch's (within bfloat16's precision of it).

The op then runs with autocast off, whichever policy it has: retrograd builds many ops from
others (``mv`` calls ``matmul``, ``cross_entropy`` calls ``log_softmax``), where torch's are
single kernels, so an op's inner steps compute as the op's own kernel would in torch.

Casts of float32 leaves that require a gradient (parameters) to the lower dtype are cached
for the outermost region (torch's weight cache, ``cache_enabled``): a weight used by several
ops is cast once, and its gradients meet in the cast's dtype before they are cast back, as
torch's do. The cache is emptied when the outermost region ends.

The state (enabled device types, their dtypes, the nesting depth, the cache) is per thread,
as torch's. A backend without the region's dtype (NumPy has no bfloat16 nor float16) runs the
``LOWER`` ops in their inputs' dtypes: :mod:`retrograd.amp` warns of it when the region opens.
Nothing here knows which backend runs: the backend answers whether it has a dtype
(``Backend.has_dtype``).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ._dispatch import TensorBase

__all__ = [
    "FP32",
    "LOWER",
    "POLICIES",
    "autocast_op",
    "cast_floats",
    "state",
]

LOWER = "lower"
FP32 = "fp32"

#: torch's default autocast dtype per device type
DEFAULT_DTYPES = {
    "cpu": "bfloat16",
    "cuda": "float16",
    "mps": "float16",
    "xpu": "bfloat16",
    "ipu": "float16",
    "xla": "bfloat16",
    "hpu": "bfloat16",
}


def _names(text: str) -> list[str]:
    return text.split()


_CPU_LOWER = _names(
    "conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d "
    "bmm mm matmul linalg_vecdot baddbmm addmm addbmm linear prelu "
    "scaled_dot_product_attention "
    # composites torch builds of mm/bmm, so computed in the lower dtype there too
    "einsum tensordot inner multi_dot chain_matmul "
    # the recurrences torch's CPU computes in the lower dtype (oneDNN's layers)
    "lstm rnn_tanh rnn_relu"
)
_CPU_FP32 = _names(
    "avg_pool3d binary_cross_entropy grid_sample polar prod quantile nanquantile stft cdist "
    "trace view_as_complex cholesky cholesky_inverse cholesky_solve inverse lu_solve orgqr "
    "ormqr pinverse max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d reflection_pad1d "
    "reflection_pad2d replication_pad1d replication_pad2d replication_pad3d mse_loss "
    "cosine_embedding_loss nll_loss hinge_embedding_loss poisson_nll_loss smooth_l1_loss "
    "cross_entropy l1_loss huber_loss margin_ranking_loss soft_margin_loss "
    "triplet_margin_loss multi_margin_loss ctc_loss kl_div multilabel_margin_loss "
    "binary_cross_entropy_with_logits fractional_max_pool2d fractional_max_pool3d "
    "adaptive_max_pool3d linalg_det linalg_slogdet linalg_inv linalg_pinv linalg_matrix_rank "
    "linalg_solve linalg_eig linalg_eigh linalg_eigvals linalg_eigvalsh linalg_lstsq "
    "linalg_cholesky linalg_qr linalg_svd linalg_svdvals linalg_matrix_exp linalg_lu "
    "linalg_lu_factor linalg_lu_solve linalg_householder_product linalg_tensorinv "
    "linalg_tensorsolve linalg_cond linalg_matrix_power qr svd triangular_solve geqrf"
)
# torch's CUDA lists (float16 by default): more products in the lower dtype, and the
# normalizations, softmaxes and losses in float32 (the float32 elementwise math and
# reductions of torch's CUDA list -- exp, log, pow, sum, cumsum, norms... -- are not marked,
# so they compute in their inputs' dtypes here)
_CUDA_LOWER = _names(
    "conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d prelu "
    "addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm "
    "chain_matmul multi_dot scaled_dot_product_attention tensordot inner"
)
_CUDA_FP32 = _names(
    "poisson_nll_loss cosine_embedding_loss nll_loss hinge_embedding_loss kl_div l1_loss "
    "smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss "
    "soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits "
    "cdist prod cross_entropy ctc_loss softmax log_softmax layer_norm group_norm"
)

#: device type -> op name -> policy
POLICIES: dict[str, dict[str, str]] = {
    "cpu": {**dict.fromkeys(_CPU_LOWER, LOWER), **dict.fromkeys(_CPU_FP32, FP32)},
    "cuda": {**dict.fromkeys(_CUDA_LOWER, LOWER), **dict.fromkeys(_CUDA_FP32, FP32)},
}
POLICIES["xpu"] = POLICIES["cuda"]
POLICIES["mps"] = POLICIES["cuda"]

_ELIGIBLE = frozenset({"float32", "bfloat16", "float16"})  # float64 is never autocast


class _State(threading.local):
    """One thread's autocast state (torch's is thread-local)."""

    def __init__(self) -> None:
        #: device type -> the dtype its enabled region computes in; None when none is
        #: (the one read an op makes outside every region)
        self.active: dict[str, str] | None = None
        self.enabled: dict[str, bool] = {}
        self.dtypes: dict[str, str] = {}
        self.nesting = 0
        self.cache_enabled = True
        #: id(source) -> (weak reference to the source, its cast)
        self.cache: dict[int, tuple[Any, Any]] = {}

    def refresh(self) -> None:
        """Recompute :attr:`active` from the enabled flags and dtypes."""
        active = {
            device_type: self.dtypes.get(device_type, DEFAULT_DTYPES.get(device_type, "float32"))
            for device_type, on in self.enabled.items()
            if on
        }
        self.active = active or None


state = _State()


def _cached_cast(tensor: Any, dtype: str) -> Any:
    """``tensor`` cast to ``dtype``; a float32 leaf requiring a gradient is cast once per
    outermost region (while the cache is enabled), as torch's weight cache does."""
    if not (
        state.cache_enabled
        and state.nesting > 0
        and tensor.requires_grad
        and tensor.is_leaf
        and tensor._backend.dtype(tensor._prim) == "float32"
    ):
        return tensor.cast(dtype)
    key = (id(tensor), dtype)
    hit = state.cache.get(key)
    if hit is not None and hit[0]() is tensor and not _consumed(hit[1]):
        return hit[1]
    cast = tensor.cast(dtype)
    cache = state.cache

    def forget(source: weakref.ref) -> None:
        # the weight went before the region ended (one made at each step of a long region):
        # its entry, the cast and its graph node, goes with it
        entry = cache.get(key)
        if entry is not None and entry[0] is source:
            del cache[key]

    cache[key] = (weakref.ref(tensor, forget), cast)
    return cast


def _consumed(cast: Any) -> bool:
    """Whether a backward consumed the graph node of the cached ``cast``. torch's cache would
    hand the cast out again (stale, where an optimizer step changed the weight in between: a
    loop of several steps in one region); a consumed node cannot carry a gradient again, so
    the weight is cast anew -- from its current values."""
    node = getattr(cast._prim, "node", None)
    return bool(getattr(node, "consumed", False))


def _cast_value(value: Any, device_type: str, dtype: str, cache: bool) -> Any:
    if isinstance(value, TensorBase):
        if value._device.kind != device_type:
            return value
        have = value._backend.dtype(value._prim)
        if have == dtype or have not in _ELIGIBLE:
            return value
        if not value._backend.has_dtype(dtype):  # this backend computes as given
            return value
        return _cached_cast(value, dtype) if cache else value.cast(dtype)
    if isinstance(value, list | tuple) and value:  # (tensors in lists: weights of layers)
        items = [_cast_value(v, device_type, dtype, cache) for v in value]
        if hasattr(value, "_fields"):  # a named tuple
            return type(value)(*items)
        return type(value)(items)
    return value


def cast_floats(args: Any, kwargs: dict, device_type: str, dtype: str) -> tuple[Any, dict]:
    """``args`` and ``kwargs`` with their floating tensors on ``device_type`` (not float64)
    cast to ``dtype`` (torch's ``custom_fwd(cast_inputs=)`` and the policies' cast)."""
    cache = dtype != "float32"  # torch caches the casts to the lower dtype only
    args = tuple(_cast_value(a, device_type, dtype, cache) for a in args)
    kwargs = {k: _cast_value(v, device_type, dtype, cache) for k, v in kwargs.items()}
    return args, kwargs


def _device_type(args: Any, kwargs: dict) -> str | None:
    """The device type of the op's first tensor argument (lists of tensors included)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, TensorBase):
            return value._device.kind
        if isinstance(value, list | tuple):
            found = _device_type(value, {})
            if found is not None:
                return found
    return None


def _autocast_call(name: Any, fn: Callable[..., Any], args: Any, kwargs: dict) -> Any:
    active = state.active
    device_type = _device_type(args, kwargs)
    if device_type in active:  # type: ignore[operator]
        if not isinstance(name, str):  # an op whose kernel depends on its arguments
            name = name(*args, **kwargs)
        policy = POLICIES.get(device_type, {}).get(name)  # type: ignore[arg-type]
        if policy == LOWER:
            args, kwargs = cast_floats(args, kwargs, device_type, active[device_type])  # type: ignore[arg-type,index]
        elif policy == FP32:
            args, kwargs = cast_floats(args, kwargs, device_type, "float32")  # type: ignore[arg-type]
    state.active = None  # the op's inner steps are the op's own kernel: not autocast again
    try:
        return fn(*args, **kwargs)
    finally:
        state.active = active


def autocast_op(name: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate the op ``name`` (torch's name in the autocast lists; or a function of the op's
    arguments giving it, for an op whose torch kernel depends on them, as ``pad``'s on its
    mode) so that an autocast region casts its arguments by :data:`POLICIES` and runs it with
    autocast off."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            if state.active is None:
                return fn(*args, **kwargs)
            return _autocast_call(name, fn, args, kwargs)

        return run

    return decorate
