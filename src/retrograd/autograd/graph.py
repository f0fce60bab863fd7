"""torch's ``torch.autograd.graph``: hooks on the tensors saved for backward
(``saved_tensors_hooks``, ``save_on_cpu``, ``disable_saved_tensors_hooks``).

Inside ``with saved_tensors_hooks(pack_hook, unpack_hook):`` every value an op's backward
rules will read is given to ``pack_hook`` as it is recorded, and what that returns is held
instead of the value; backward gives it to ``unpack_hook``, which returns the tensor the
rule reads, once per read (the engine's part: :mod:`retrograd.autodiff.saved_hooks`).

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

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..autodiff import saved_hooks
from ..autodiff.graph import AutodiffPrimitive
from ..device import Device
from ..errors import AutodiffError, DTypeError, ShapeError, check_callable
from ..tensor import Tensor

__all__ = ["disable_saved_tensors_hooks", "save_on_cpu", "saved_tensors_hooks"]


def _device_of(backend: Any, value: Any) -> Device:
    device = backend.inner.device(value)
    return Device(str(device)) if device is not None else Device("cpu")


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
                f"saved_tensors_hooks: unpack_hook returned a tensor of shape {result.shape} "
                f"and dtype {result.dtype} for a value saved with shape {tuple(shape)} and "
                f"dtype {dtype}"
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
