"""torch's ``torch.autograd.graph``: hooks on the tensors saved for backward
(``saved_tensors_hooks``, ``save_on_cpu``, ``disable_saved_tensors_hooks``) and
``register_multi_grad_hook``.

Inside ``with saved_tensors_hooks(pack_hook, unpack_hook):`` every value an op's backward
rules will read is given to ``pack_hook`` as it is recorded, and what that returns is held
instead of the value; backward gives it to ``unpack_hook``, which returns the tensor the
rule reads, once per op that saved it, as torch's (the engine's part:
:mod:`retrograd.autodiff.saved_hooks`).

The tensor ``pack_hook`` gets holds the saved values outside the graph (torch gives the saved
tensor itself, ``requires_grad`` included); the one ``unpack_hook`` returns must have the
saved value's shape and dtype. Values are saved as the op table declares its rules' reads,
which for some ops differ from torch's choice (an op that saves its output where torch saves
its input): the gradients agree, the count of calls may not.

>>> calls = []
>>> def pack(t):
...     calls.append("pack")
...     return t * 2
>>> def unpack(t):
...     calls.append("unpack")
...     return t / 2
>>> a = rg.tensor([1.0, 2.0]).require_grad()
>>> with saved_tensors_hooks(pack, unpack):
...     y = (a * a).sum()
>>> a.grad(y.backward()).tolist(), calls
([2.0, 4.0], ['pack', 'pack', 'unpack', 'unpack'])
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ..autodiff import saved_hooks
from ..autodiff.graph import AutodiffPrimitive
from ..autodiff.handles import RemovableHandle
from ..autodiff.runtime import running_tape
from ..device import Device
from ..errors import AutodiffError, DTypeError, InvalidArgumentError, ShapeError, check_callable
from ..tensor import Tensor, selection

__all__ = [
    "disable_saved_tensors_hooks",
    "register_multi_grad_hook",
    "save_on_cpu",
    "saved_tensors_hooks",
]


def _device_of(backend: Any, value: Any) -> Device:
    device = backend.inner.device(value)
    if device is None:
        return Device("cpu")
    # (a torch device by its text; one of ours as it is: "cpu" is a rank's own CPU device)
    return device if isinstance(device, Device) else Device(str(device))


class saved_tensors_hooks:  # noqa: N801 (torch's name)
    """Context manager: ``pack_hook(tensor) -> anything`` for each tensor saved for backward
    while it is active, ``unpack_hook(packed) -> tensor`` when backward reads it. Nested, the
    innermost pair applies; the pair is this thread's."""

    def __init__(
        self, pack_hook: Callable[[Tensor], Any], unpack_hook: Callable[[Any], Tensor]
    ) -> None:
        check_callable("saved_tensors_hooks", pack_hook, "pack_hook")
        check_callable("saved_tensors_hooks", unpack_hook, "unpack_hook")
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def _pack(self, backend: Any, value: Any) -> tuple:
        inner = backend.inner
        saved = Tensor(AutodiffPrimitive(value, None), backend, _device_of(backend, value))
        shape, dtype = inner.shape(value), inner.dtype(value)
        return self.pack_hook(saved), backend, shape, dtype

    def _unpack(self, held: tuple) -> Any:
        packed, backend, shape, dtype = held
        result = self.unpack_hook(packed)
        if not isinstance(result, Tensor):
            raise DTypeError(
                "saved_tensors_hooks: Output of saved tensor unpack_hook expected to be a "
                f"Tensor but got result of type {type(result).__name__}"
            )
        if result.shape != tuple(shape) or result.dtype != dtype:
            error = ShapeError if result.shape != tuple(shape) else DTypeError
            raise error(
                f"saved_tensors_hooks: unpack_hook returned a tensor of shape "
                f"{tuple(result.shape)} and dtype {result.dtype} for a value saved with shape "
                f"{tuple(shape)} and dtype {dtype}"
            )
        result_backend = result._backend
        if getattr(result_backend, "is_autodiff", False):
            if result_backend.inner != backend.inner:
                raise AutodiffError(
                    f"saved_tensors_hooks: unpack_hook returned a tensor of {result_backend!r}"
                    f" for a value saved by {backend!r}"
                )
            return result_backend.inner_value(result._prim)
        if result_backend != backend.inner:
            raise AutodiffError(
                f"saved_tensors_hooks: unpack_hook returned a tensor of {result_backend!r} "
                f"for a value saved by {backend!r}"
            )
        return result._prim

    def __enter__(self) -> None:
        saved_hooks.push(self._pack, self._unpack)

    def __exit__(self, *args: object) -> None:
        saved_hooks.pop()


class save_on_cpu(saved_tensors_hooks):  # noqa: N801 (torch's name)
    """Saved tensors are held on the CPU and moved back to their device when backward reads
    them (GPU memory traded for transfers). ``pin_memory`` and ``device_type`` are torch's;
    a CPU tensor is held as it is."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack_to_cpu(tensor: Tensor) -> tuple[Any, Tensor]:
            return tensor.device, tensor.cpu()

        def unpack_from_cpu(packed: tuple[Any, Tensor]) -> Tensor:
            device, tensor = packed
            return tensor.to(device)

        super().__init__(pack_to_cpu, unpack_from_cpu)
        self.pin_memory, self.device_type = pin_memory, device_type


@contextmanager
def disable_saved_tensors_hooks(error_message: str) -> Iterator[None]:
    """Within it, entering ``saved_tensors_hooks`` raises ``AutodiffError(error_message)``
    (torch's ``RuntimeError``); entering it with hooks active raises at once."""
    if saved_hooks.active_pair() is not None:
        raise AutodiffError(error_message)
    previous = saved_hooks.set_disabled(error_message)
    try:
        yield
    finally:
        saved_hooks.set_disabled(previous)


class _MultiHandle(RemovableHandle):
    """The handle of :func:`register_multi_grad_hook`: ``remove()`` removes the hook from
    every tensor."""

    def __init__(self, handles: tuple[RemovableHandle, ...]) -> None:
        super().__init__({})
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _current_backward(op: str) -> Any:
    tape = running_tape()
    if tape is None:
        raise AutodiffError(f"{op}: expected this hook to be called inside a backward call")
    return tape


def register_multi_grad_hook(
    tensors: Iterable[Tensor], fn: Callable[[Any], None], *, mode: str = "all"
) -> RemovableHandle:
    """torch's multi-tensor gradient hook. ``mode="all"``: in each backward that reaches
    any of ``tensors``, ``fn(grads)`` once the gradients of all those it reaches are
    computed, ``grads`` a list with ``None`` for the others. ``mode="any"``: ``fn(grad)``
    with the first gradient computed among ``tensors`` (those that require grad), once per
    backward. ``fn``'s result is ignored; the gradients flow on unchanged."""
    op = "register_multi_grad_hook"
    if mode not in ("all", "any"):
        raise InvalidArgumentError(f"{op}: Expects mode to be one of ('all', 'any') but got {mode}")
    check_callable(op, fn, "fn")
    tensors = tuple(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise DTypeError(f"{op}: expected tensors, got {type(t).__name__}")
    lock = threading.Lock()
    # per backward (its walked graph, held weakly: a backward's state goes with it)
    progress: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    if mode == "any":

        def first_gradient(grad: Tensor) -> None:
            tape = _current_backward(op)
            with lock:
                if tape in progress:
                    return
                progress[tape] = True
            fn(grad)

        return _MultiHandle(
            tuple(t.register_hook(first_gradient) for t in tensors if t.requires_grad)
        )
    nodes = [getattr(t._prim, "node", None) for t in tensors]

    def gradient_of(index: int) -> Callable[[Tensor], None]:
        def collect(grad: Tensor) -> None:
            tape = _current_backward(op)
            with lock:
                entry = progress.get(tape)
                if entry is None:  # the first: how many of the tensors this backward reaches
                    expected = sum(n is not None and tape.runs_hooks_of(n) for n in nodes)
                    entry = progress[tape] = [0, expected, [None] * len(nodes)]
                entry[2][index] = grad
                entry[0] += 1
                complete = entry[0] == entry[1]
                if complete:
                    del progress[tape]
            if complete:
                fn(entry[2])

        return collect

    return _MultiHandle(tuple(t.register_hook(gradient_of(i)) for i, t in enumerate(tensors)))


selection.SAVED_TENSORS_HOOKS[0] = saved_tensors_hooks  # grad_fn._raw_saved_*.register_hooks
