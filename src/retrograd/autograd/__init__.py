"""torch's ``torch.autograd`` names over retrograd's gradients-as-a-value: ``Variable``,
``grad``, ``inference_mode``, custom functions (``Function``) and ``vmap`` (torch's
``torch.vmap``, here since it maps functions of tensors as ``grad`` does).

``Variable(t, requires_grad=False)`` is the tensor itself (torch deprecated the wrapper long
ago: a tensor is a variable); with ``requires_grad=True`` a leaf that requires grad.
``grad(outputs, inputs)`` returns the gradients of ``outputs`` with respect to ``inputs``, as
torch's does: it runs ``backward`` on the sum of the outputs (weighted by ``grad_outputs``)
and reads each input's gradient from the result. The inputs must be leaves that require grad
or tensors whose gradient is retained (``retain_grad()``) before the outputs are computed.

>>> import retrograd as rg
>>> x = rg.autograd.Variable(rg.tensor([1.0, 2.0]), requires_grad=True)
>>> rg.autograd.grad((x * x).sum(), x)[0].tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import threading
from typing import Any

from ..autodiff import enable_grad, no_grad, set_grad_enabled
from ..errors import InvalidArgumentError, ShapeError, check_callable
from ..tensor import Tensor
from . import forward_ad, function, functional, graph, profiler
from .anomaly_mode import (
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_anomaly_enabled,
    set_detect_anomaly,
)
from .differentiate import backward, grad
from .function import Function, FunctionCtx
from .gradient_checks import GradcheckError, gradcheck, gradgradcheck

__all__ = [
    "Function",
    "FunctionCtx",
    "GradcheckError",
    "Variable",
    "backward",
    "detect_anomaly",
    "enable_grad",
    "forward_ad",
    "function",
    "functional",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "graph",
    "inference_mode",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "is_inference_mode_enabled",
    "is_multithreading_enabled",
    "is_view_replay_enabled",
    "no_grad",
    "profiler",
    "set_anomaly_enabled",
    "set_detect_anomaly",
    "set_grad_enabled",
    "set_multithreading_enabled",
    "vmap",
]


def Variable(data: Any, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802 (torch's name)
    """The tensor ``data`` itself; with ``requires_grad``, a new leaf that requires grad
    sharing ``data``'s values (torch's: ``data`` itself is left as it was, so a later
    in-place write to it, or to the replay buffer it was indexed from, is allowed and shows
    in the leaf)."""
    if not isinstance(data, Tensor):
        from ..tensor import tensor

        data = tensor(data)
    if requires_grad and not data.is_require_grad():
        data = data.detach()
        data.require_grad()
    return data


class inference_mode(no_grad):  # noqa: N801 (torch's name)
    """torch's ``inference_mode``: nothing is recorded in the block (``rg.no_grad``);
    ``inference_mode(False)`` records as usual. A context manager and a decorator."""

    def __init__(self, mode: bool = True):
        super().__init__()
        self._target = not mode

    def __enter__(self) -> None:
        super().__enter__()
        _INFERENCE.saved = [*getattr(_INFERENCE, "saved", ()), is_inference_mode_enabled()]
        _INFERENCE.enabled = not self._target

    def __exit__(self, *exc: object) -> None:
        *_INFERENCE.saved, _INFERENCE.enabled = _INFERENCE.saved
        super().__exit__(*exc)


class _InferenceMode(threading.local):
    """Whether this thread is inside ``inference_mode()`` (its innermost block's setting),
    and the settings of the blocks around it."""

    enabled = False


_INFERENCE = _InferenceMode()


_MULTITHREADING = [True]


class set_multithreading_enabled:  # noqa: N801 (torch's name)
    """torch's switch of its multithreaded backward (one thread per device): set at once,
    and back to what it was at the end of a ``with`` block. Recorded: retrograd's backward
    runs on the calling thread whatever it says."""

    def __init__(self, mode: bool) -> None:
        self._previous = _MULTITHREADING[0]
        _MULTITHREADING[0] = bool(mode)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        _MULTITHREADING[0] = self._previous


def is_multithreading_enabled() -> bool:
    """Whether torch's multithreaded backward is on (True unless switched off)."""
    return _MULTITHREADING[0]


def is_view_replay_enabled() -> bool:
    """False: torch replays views only under its functionalization, which is not here."""
    return False


def is_inference_mode_enabled() -> bool:
    """Whether this thread runs inside ``inference_mode()`` (torch's
    ``torch.is_inference_mode_enabled``)."""
    return _INFERENCE.enabled


# -- vmap ------------------------------------------------------------------------------------------
def vmap(
    func: Any,
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Any:
    """torch's ``vmap``: ``func`` mapped over dimension ``in_dims`` of its tensor arguments
    (an int for all, or one int or ``None`` per positional argument; an argument may be a
    pytree, a tuple, list or dict of tensors, mapped leaf by leaf), the results stacked along
    ``out_dims`` (an int, or one per output of a tuple; a dict or list output is stacked leaf
    by leaf, as torch's per-sample gradients of ``grad`` over a parameter dict are). Computed
    as a loop over the batch (the results and gradients are those of torch's batching rules;
    the speed is a loop's). torch refuses random ops inside unless ``randomness`` says how;
    here each call draws for itself, as ``randomness="different"`` does."""
    check_callable("vmap", func)

    def checked(dim: Any, leaf: Tensor) -> Any:
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise InvalidArgumentError(
                f"vmap: in_dims={in_dims!r}: each in_dim must be an int or None, got {dim!r}"
            )
        if not -max(leaf.ndim, 1) <= dim < max(leaf.ndim, 1) or leaf.ndim == 0:
            raise ShapeError(
                f"vmap: in_dims={in_dims!r}: got in_dim={dim} for an input of shape "
                f"{tuple(leaf.shape)}; expected {-leaf.ndim} <= in_dim < {leaf.ndim}"
            )
        return leaf.shape[dim]

    def mapped(*args: Any) -> Any:
        dims = in_dims if isinstance(in_dims, tuple | list) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ShapeError(
                f"vmap: in_dims is compatible with {len(dims)} arguments, got {len(args)}"
            )
        sizes = {
            checked(d, leaf)
            for a, d in zip(args, dims)
            if d is not None
            for leaf in _leaves(a)
            if isinstance(leaf, Tensor)
        }
        if len(sizes) != 1:
            raise ShapeError(
                "vmap: expected all tensors to have the same size in the mapped dimension, got "
                f"sizes {sorted(sizes)} (and at least one mapped tensor)"
            )
        (size,) = sizes
        results = []
        for i in range(size):
            picked = [a if d is None else _select(a, d, i) for a, d in zip(args, dims)]
            results.append(func(*picked))
        if isinstance(results[0], Tensor) and isinstance(out_dims, tuple) and len(out_dims) == 1:
            return _stacked(results, out_dims[0], out_dims)  # torch's one exception
        return _stacked(results, out_dims, out_dims)

    return mapped


# vmap's helpers are module functions, not closures: a closure that calls itself is a
# reference cycle, left to the garbage collector at every vmap call
def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    if isinstance(tree, tuple | list):
        return [leaf for value in tree for leaf in _leaves(value)]
    return [tree]


def _select(tree: Any, dim: int, i: int) -> Any:
    if isinstance(tree, dict):
        return {key: _select(value, dim, i) for key, value in tree.items()}
    if isinstance(tree, tuple | list):
        return type(tree)(_select(value, dim, i) for value in tree)
    return tree.select(dim, i) if isinstance(tree, Tensor) else tree


def _stacked(results: list[Any], dim: Any, out_dims: Any) -> Any:
    """The results stacked leaf by leaf, ``dim`` an int for a whole subtree or a tree of
    dims with the results' structure (torch's pytree prefix); ``out_dims`` as vmap got it."""
    from ..tensor import stack

    first = results[0]
    if isinstance(first, dict):
        if isinstance(dim, dict) and set(dim) != set(first):
            _mismatch(out_dims, dim, first)
        return {
            key: _stacked(
                [r[key] for r in results], dim[key] if isinstance(dim, dict) else dim, out_dims
            )
            for key in first
        }
    if isinstance(first, tuple | list):
        if isinstance(dim, tuple | list) and (
            type(dim) is not type(first) or len(dim) != len(first)
        ):
            _mismatch(out_dims, dim, first)
        return type(first)(
            _stacked(
                [r[k] for r in results], dim[k] if isinstance(dim, tuple | list) else dim, out_dims
            )
            for k in range(len(first))
        )
    if not isinstance(dim, int) or isinstance(dim, bool):
        _mismatch(out_dims, dim, first)
    return stack(results, dim=dim)


def _mismatch(out_dims: Any, dim: Any, output: Any) -> None:
    raise InvalidArgumentError(
        f"vmap: out_dims={out_dims!r} is not compatible with the structure of the outputs "
        f"(out_dims {dim!r} against a {type(output).__name__})"
    )
