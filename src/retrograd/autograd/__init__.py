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

import contextlib
import sys
import threading
from typing import Any

from ..autodiff import enable_grad, no_grad, set_grad_enabled
from ..autodiff.grad_mode import set_inference
from ..backend.protocol import random_allowed, random_refused
from ..errors import AutodiffError, InvalidArgumentError, ShapeError, check_callable
from ..tensor import Tensor
from ..tensor.inference import inference_block_entered, inference_block_left
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
from .vmap_depth import VMAP

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
    """torch's ``inference_mode``: nothing is recorded in the block (``rg.no_grad``), and
    the tensors made there are inference tensors, with torch's rules (:mod:`..tensor.inference`);
    ``inference_mode(False)`` records as usual. A context manager and a decorator."""

    def __init__(self, mode: bool = True):
        super().__init__()
        self._target = not mode

    def __enter__(self) -> None:
        super().__enter__()
        _INFERENCE.saved = [*getattr(_INFERENCE, "saved", ()), is_inference_mode_enabled()]
        _INFERENCE.enabled = not self._target
        set_inference(_INFERENCE.enabled)
        if _INFERENCE.enabled:
            inference_block_entered()

    def __exit__(self, *exc: object) -> None:
        if _INFERENCE.enabled:
            inference_block_left()
        *_INFERENCE.saved, _INFERENCE.enabled = _INFERENCE.saved
        set_inference(_INFERENCE.enabled)
        super().__exit__(*exc)


class _InferenceMode(threading.local):
    """Whether this thread is inside ``inference_mode()`` (its innermost block's setting),
    and the settings of the blocks around it."""

    enabled = False


_INFERENCE = _InferenceMode()


class _Multithreading(threading.local):
    """This thread's setting of torch's multithreaded backward (class attribute: a new
    thread's default, on). Per thread, as torch's (``c10::AutogradState`` is thread-local):
    one process-wide flag let a thread's ``set_multithreading_enabled(False)`` block turn it
    off for every other thread while it lasted."""

    enabled = True


_MULTITHREADING = _Multithreading()


class set_multithreading_enabled:  # noqa: N801 (torch's name)
    """torch's switch of its multithreaded backward (one thread per device), for this
    thread: set at once, and back to what it was at the end of a ``with`` block. Recorded:
    retrograd's backward runs on the calling thread whatever it says."""

    def __init__(self, mode: bool) -> None:
        self._previous = _MULTITHREADING.enabled
        _MULTITHREADING.enabled = bool(mode)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        _MULTITHREADING.enabled = self._previous


def is_multithreading_enabled() -> bool:
    """Whether torch's multithreaded backward is on in this thread (True unless switched
    off)."""
    return _MULTITHREADING.enabled


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
    (an int for all, or a tuple with one entry per positional argument: an int, ``None``, or
    for a pytree argument, a tuple, list or dict of tensors, an int or ``None`` for all its
    leaves or a tree of them with its structure), keyword arguments passed unmapped; the
    results stacked along ``out_dims`` (an int, or a tree of ints and ``None`` matching the
    outputs; ``None`` returns an output that does not vary over the batch as it is).
    Computed as a loop over the batch (the results and gradients are those of torch's
    batching rules; the speed is a loop's; ``chunk_size`` is checked, and changes nothing).
    ``randomness="same"`` draws the same random numbers for every element (the stream
    rewound before each); ``"different"``: each element draws its own; ``"error"`` (the
    default): a random op inside ``func`` raises, as torch's."""
    check_callable("vmap", func)
    if randomness not in ("error", "different", "same"):
        raise InvalidArgumentError(
            "vmap: only allowed values for randomness are 'error', 'different', or 'same', "
            f"got {randomness!r}"
        )
    if chunk_size is not None and (
        not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size <= 0
    ):
        raise InvalidArgumentError(
            f"vmap: chunk_size should be None or an int greater than 0, got {chunk_size!r}"
        )
    if not (
        isinstance(in_dims, tuple) or (isinstance(in_dims, int) and not isinstance(in_dims, bool))
    ):
        raise InvalidArgumentError(
            f"vmap: expected in_dims to be an int or a (potentially nested) tuple matching the "
            f"structure of the inputs, got {type(in_dims).__name__} ({in_dims!r})"
        )

    def mapped(*args: Any, **kwargs: Any) -> Any:
        if not args:
            raise InvalidArgumentError(
                "vmap: got no inputs (a function of no positional arguments cannot be mapped)"
            )
        if isinstance(in_dims, tuple) and len(in_dims) != len(args):
            raise InvalidArgumentError(
                f"vmap: in_dims={in_dims!r} is compatible with {len(in_dims)} positional "
                f"arguments, got {len(args)}"
            )
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
        pairs: list[tuple[Any, int]] = []
        for arg, dim in zip(args, dims):
            _mapped_leaves(arg, dim, in_dims, pairs)
        if not pairs:
            raise InvalidArgumentError(
                f"vmap: in_dims={in_dims!r} maps no tensor: at least one tensor input must be "
                "mapped (an in_dim that is not None)"
            )
        sizes = [_checked_dim(leaf, dim, in_dims) for leaf, dim in pairs]
        if len(set(sizes)) != 1:
            raise ShapeError(
                "vmap: expected all tensors to have the same size in the mapped dimension, got "
                f"sizes {sizes} for the mapped dimension"
            )
        size = sizes[0]
        if size == 0:
            # torch runs the function once on empty batched tensors; a loop has no element to
            # run it on, so it runs on one zero-filled element to learn the outputs' shapes
            picked = [_select(a, d, None) for a, d in zip(args, dims)]
            with _randomness_rule(randomness), _mapping():
                outputs = func(*picked, **kwargs)
            return _stacked([outputs], out_dims, out_dims, empty=True)
        if randomness == "same":
            from ..tensor.generator import get_rng_state, set_rng_state

            start = get_rng_state()
        results = []
        for i in range(size):
            if randomness == "same":
                set_rng_state(start)  # every element draws the same numbers
            picked = [_select(a, d, i) for a, d in zip(args, dims)]
            with _randomness_rule(randomness), _mapping():
                results.append(func(*picked, **kwargs))
        if isinstance(results[0], Tensor) and isinstance(out_dims, tuple) and len(out_dims) == 1:
            return _stacked(results, out_dims[0], out_dims)  # torch's one exception
        return _stacked(results, out_dims, out_dims)

    return mapped


#: torch's words for a random op inside ``vmap(randomness="error")``
_RANDOM_IN_VMAP = (
    "vmap: called random operation while in randomness error mode. Please either use the "
    "'same' or 'different' randomness flags on vmap or perform the randomness operation out "
    "of vmap"
)


@contextlib.contextmanager
def _mapping() -> Any:
    """The block ``func`` runs in for one element: inside a vmap (see :class:`_MappedSlice`)."""
    _VMAP.depth += 1
    try:
        yield
    finally:
        _VMAP.depth -= 1


def _randomness_rule(randomness: str) -> Any:
    """The block one element of a vmap runs in: random draws refused under torch's default
    ``"error"`` (every draw, as torch's: a user's generator's too), allowed otherwise (the
    innermost vmap's rule holds)."""
    if randomness == "error":
        return random_refused(_RANDOM_IN_VMAP)
    return random_allowed()


_VMAP = VMAP

#: torch's words for reading a mapped value on the host inside ``vmap``
_ITEM_IN_VMAP = (
    "vmap: It looks like you're calling .item() on a Tensor. We don't support vmap over "
    "calling .item() on a Tensor, please try to rewrite what you're doing with other "
    "operations. If error is occurring somewhere inside PyTorch internals, please file a bug "
    "report."
)
_CONTROL_FLOW_IN_VMAP = (
    "vmap: It looks like you're attempting to use a Tensor in some data-dependent control "
    "flow. We don't support that yet, please file an issue at "
    "https://github.com/pytorch/pytorch/issues ."
)

#: torch's words for reading a mapped value into host memory (``tolist``, ``numpy``)
_NO_STORAGE_IN_VMAP = (
    "vmap: Cannot access data pointer of Tensor that doesn't have storage (a value of the "
    "batch read on the host inside vmap)"
)
#: torch's words for an op whose result's shape depends on the values of the batch
_DYNAMIC_SHAPE_IN_VMAP = (
    "vmap: We do not support batching operators that can output dynamic shape. Attempted to "
    "vmap over {op}. Please file an issue at https://github.com/pytorch/functorch/issues"
)


class _MappedSlice(Tensor):
    """One element of a mapped input, as ``func`` sees it inside :func:`vmap` (and what ops
    on it return, their results being of their first operand's class): a value of the batch,
    which torch's ``vmap`` cannot read on the host. Read by the function's own code --
    ``.item()``, ``float()``, ``int()``, ``bool()`` (``if x.sum() > 0:``) -- it raises as
    torch's while a vmap runs; retrograd's own ops, which read values to check them, read on.
    A tensor of the batch that escapes the call reads as any other, and tensors that do not
    derive from the mapped inputs (constants the function closes over) stay readable, as
    torch's."""

    __slots__ = ()
    _sticky = True  # what derives from it is of the batch, whichever operand it was

    def item(self) -> Any:
        _refuse_read(_ITEM_IN_VMAP)
        return super().item()

    def __float__(self) -> float:
        _refuse_read(_ITEM_IN_VMAP)
        return super().__float__()

    def __int__(self) -> int:
        _refuse_read(_ITEM_IN_VMAP)
        return super().__int__()

    def __index__(self) -> int:
        _refuse_read(_ITEM_IN_VMAP)
        return super().__index__()

    def __bool__(self) -> bool:
        _refuse_read(_CONTROL_FLOW_IN_VMAP)
        return super().__bool__()

    # copies and the tensors made like this one are of the batch too, as torch's batching
    # rules give them (``a.clone().add_(a)``, ``a.new_zeros(n).copy_(...)`` write batch values)
    def clone(self, *args: Any, **kwargs: Any) -> Any:
        return _of_the_batch(super().clone(*args, **kwargs))

    def detach(self) -> Any:
        return _of_the_batch(super().detach())

    def new_zeros(self, *args: Any, **kwargs: Any) -> Any:
        return _of_the_batch(super().new_zeros(*args, **kwargs))

    def new_ones(self, *args: Any, **kwargs: Any) -> Any:
        return _of_the_batch(super().new_ones(*args, **kwargs))

    def new_empty(self, *args: Any, **kwargs: Any) -> Any:
        return _of_the_batch(super().new_empty(*args, **kwargs))

    def new_full(self, *args: Any, **kwargs: Any) -> Any:
        return _of_the_batch(super().new_full(*args, **kwargs))

    def tolist(self) -> Any:
        _refuse_read(_NO_STORAGE_IN_VMAP)
        return super().tolist()

    def numpy(self, *, force: bool = False) -> Any:
        _refuse_read(_NO_STORAGE_IN_VMAP)
        return super().numpy(force=force)

    def nonzero(self, *, as_tuple: bool = False) -> Any:
        if _VMAP.depth:  # each element would have its own count of rows: no batch of them
            raise AutodiffError(_DYNAMIC_SHAPE_IN_VMAP.format(op="aten::nonzero"))
        return super().nonzero(as_tuple=as_tuple)

    def argwhere(self) -> Any:
        # torch's argwhere runs element by element, stacking rows of equal counts
        return Tensor.argwhere(self.as_subclass(Tensor))

    def unique(self, *args: Any, **kwargs: Any) -> Any:
        if _VMAP.depth:
            raise AutodiffError(_DYNAMIC_SHAPE_IN_VMAP.format(op="aten::_unique2"))
        return super().unique(*args, **kwargs)


def _of_the_batch(value: Any) -> Any:
    """``value``, a plain tensor made from an element of the batch, as one of the batch."""
    if type(value) is Tensor:
        value.__class__ = _MappedSlice
    return value


def _refuse_read(message: str) -> None:
    """Raise ``message`` where a mapped value is read on the host, inside a vmap, by code
    that is not retrograd's (the caller of the method that called this)."""
    if _VMAP.depth:
        caller = sys._getframe(2).f_globals.get("__name__", "")
        if not (caller == "retrograd" or caller.startswith("retrograd.")):
            raise AutodiffError(message)


def _plain(value: Any) -> Any:
    """A result of the vmap as the caller gets it: a plain tensor, not a mapped slice."""
    if type(value) is _MappedSlice:
        value.__class__ = Tensor
    return value


# vmap's helpers are module functions, not closures: a closure that calls itself is a
# reference cycle, left to the garbage collector at every vmap call
def _mapped_leaves(tree: Any, dim: Any, in_dims: Any, pairs: list[tuple[Any, int]]) -> None:
    """Collect (leaf, in_dim) for each leaf of ``tree`` mapped by ``dim``, an int or None for
    the whole subtree or a tree of them with its structure (torch's pytree prefix)."""
    if dim is None:
        return
    if isinstance(dim, tuple | list | dict):
        if isinstance(dim, dict):
            same = isinstance(tree, dict) and set(dim) == set(tree)
            items = [(tree[k], dim[k]) for k in dim] if same else []
        else:
            same = type(tree) is type(dim) and len(tree) == len(dim)
            items = list(zip(tree, dim)) if same else []
        if not same:
            raise InvalidArgumentError(
                f"vmap: in_dims={in_dims!r} is not compatible with the structure of the inputs "
                f"(in_dim {dim!r} against a {type(tree).__name__})"
            )
        for sub, sub_dim in items:
            _mapped_leaves(sub, sub_dim, in_dims, pairs)
        return
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise InvalidArgumentError(
            f"vmap: in_dims={in_dims!r}: each in_dim must be an int or None, got {dim!r}"
        )
    if isinstance(tree, dict):
        for value in tree.values():
            _mapped_leaves(value, dim, in_dims, pairs)
    elif isinstance(tree, tuple | list):
        for value in tree:
            _mapped_leaves(value, dim, in_dims, pairs)
    elif isinstance(tree, Tensor):
        pairs.append((tree, dim))
    else:
        raise InvalidArgumentError(
            f"vmap: in_dims={in_dims!r}: got in_dim={dim} for an input of type "
            f"{type(tree).__name__}; only tensors can be mapped (use None for this input)"
        )


def _checked_dim(leaf: Tensor, dim: int, in_dims: Any) -> int:
    if leaf.ndim == 0 or not -leaf.ndim <= dim < leaf.ndim:
        raise ShapeError(
            f"vmap: in_dims={in_dims!r}: got in_dim={dim} for an input of shape "
            f"{tuple(leaf.shape)}; expected {-leaf.ndim} <= in_dim < {leaf.ndim}"
        )
    return leaf.shape[dim]


def _select(tree: Any, dim: Any, i: int | None) -> Any:
    """Element ``i`` of ``tree`` along ``dim`` (a tree prefix of in_dims); ``i`` None: a
    zero-filled element (the batch is empty)."""
    if dim is None:
        return tree
    if isinstance(tree, dict):
        return {
            key: _select(value, dim[key] if isinstance(dim, dict) else dim, i)
            for key, value in tree.items()
        }
    if isinstance(tree, tuple | list):
        return _same_sequence(
            tree,
            [
                _select(value, dim[k] if isinstance(dim, tuple | list) else dim, i)
                for k, value in enumerate(tree)
            ],
        )
    if not isinstance(tree, Tensor):
        return tree
    if i is None:
        from ..tensor import zeros

        shape = list(tree.shape)
        del shape[dim]
        return zeros(*shape, dtype=tree.dtype, device=tree.device)
    element = tree.select(dim, i)
    if type(element) is Tensor:
        element.__class__ = _MappedSlice
    return element


def _same_sequence(like: tuple | list, items: list[Any]) -> tuple | list:
    """``items`` in a sequence of ``like``'s type: a namedtuple (a user's, or what ``max``
    and ``sort`` return) takes them field by field, as torch's pytree rebuilds it."""
    if isinstance(like, tuple) and hasattr(like, "_fields"):
        return type(like)(*items)
    return type(like)(items)


def _stacked(results: list[Any], dim: Any, out_dims: Any, empty: bool = False) -> Any:
    """The results stacked leaf by leaf, ``dim`` an int or None for a whole subtree or a tree
    of them with the results' structure (torch's pytree prefix); ``out_dims`` as vmap got it.
    ``empty``: the batch has no element (``results`` is one stand-in's)."""
    from ..tensor import stack

    first = results[0]
    if dim is None:
        if isinstance(first, Tensor) and not empty:
            for other in results[1:]:
                if other is not first and not (
                    other.shape == first.shape and bool((other == first).all().item())
                ):
                    raise InvalidArgumentError(
                        f"vmap: out_dims={out_dims!r}: an output mapped to out_dim None varies "
                        "over the batch (torch: can not return a BatchedTensor when out_dim "
                        "is None)"
                    )
        return _plain(first)
    if isinstance(first, dict):
        if isinstance(dim, dict) and set(dim) != set(first):
            _mismatch(out_dims, dim, first)
        return {
            key: _stacked(
                [r[key] for r in results],
                dim[key] if isinstance(dim, dict) else dim,
                out_dims,
                empty,
            )
            for key in first
        }
    if isinstance(first, tuple | list):
        if isinstance(dim, tuple | list) and (
            type(dim) is not type(first) or len(dim) != len(first)
        ):
            _mismatch(out_dims, dim, first)
        return _same_sequence(
            first,
            [
                _stacked(
                    [r[k] for r in results],
                    dim[k] if isinstance(dim, tuple | list) else dim,
                    out_dims,
                    empty,
                )
                for k in range(len(first))
            ],
        )
    if not isinstance(dim, int):  # (a bool is the int it is, as torch's out_dims takes it)
        _mismatch(out_dims, dim, first)
    if not isinstance(first, Tensor):
        raise InvalidArgumentError(
            f"vmap: the function must only return tensors, got {type(first).__name__} "
            f"(out_dims={out_dims!r}; an out_dim of None returns a value as it is)"
        )
    if not -(first.ndim + 1) <= dim <= first.ndim:
        raise ShapeError(
            f"vmap: out_dims={out_dims!r}: out_dim {dim} is out of range for an output of "
            f"shape {tuple(first.shape)} (expected {-(first.ndim + 1)} to {first.ndim})"
        )
    out = _plain(stack(results, dim=int(dim)))
    return _plain(out.narrow(int(dim), 0, 0)) if empty else out


def _mismatch(out_dims: Any, dim: Any, output: Any) -> None:
    raise InvalidArgumentError(
        f"vmap: out_dims={out_dims!r} is not compatible with the structure of the outputs "
        f"(out_dims {dim!r} against a {type(output).__name__})"
    )
