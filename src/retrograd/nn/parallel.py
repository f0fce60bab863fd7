"""torch's ``torch.nn.parallel``: ``DistributedDataParallel``, ``DataParallel``,
``data_parallel``.

``DistributedDataParallel(module)`` is a thin wrapper over the public distributed API: it marks
every parameter of ``module`` for gradient all-reduce (``module.set_distributed()``, each
parameter's dotted name its id), so that inside a running ``rg.distributed.DistributedContext``
``loss.backward()`` returns gradients all-reduced with the context's operation (``MEAN`` as
torch's averaging). Given the context as ``process_group``, it also makes every replica start
from rank 0's parameters (and buffers), as torch's broadcast at construction; without one,
replicas must start equal (seed every rank alike). ``state_dict`` keys carry torch's
``module.`` prefix. After ``dist.init_process_group`` the default group is the process group.
``DataParallel`` and ``data_parallel`` run the module on its own device
(what torch does without several GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import distributed as dist
from ..autodiff import no_grad
from ..errors import (
    DTypeError,
    InvalidArgumentError,
    check_callable,
    check_iterable,
)
from ..tensor import zeros_like
from ..tensor.inplace import assign
from .modules.module import Module

__all__ = ["DataParallel", "DistributedDataParallel", "data_parallel"]


class DistributedDataParallel(Module):
    """torch's ``DistributedDataParallel(module, device_ids=None, output_device=None, dim=0,
    broadcast_buffers=True, process_group=None, ...)`` (see the module docstring)."""

    def __init__(
        self,
        module: Module,
        device_ids: Any = None,
        output_device: Any = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: Any = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        **kwargs: Any,
    ):
        super().__init__()
        if not isinstance(module, Module):
            raise InvalidArgumentError(
                f"DistributedDataParallel: expected a Module, got {type(module).__name__}"
            )
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.process_group = process_group
        module.set_distributed()
        self.find_unused_parameters = find_unused_parameters
        if find_unused_parameters:
            from ..distributed.reducer.backward_hook import expect_every_parameter

            # torch registers every parameter and lets those without a gradient contribute
            # zeros, so a parameter some replicas skip in a step still reduces
            expect_every_parameter(module)
        if process_group is None and dist.is_initialized():  # init_process_group's, as torch
            process_group = dist.process_group.default_context()
        if process_group is not None:
            _broadcast_from_first(module, process_group, broadcast_buffers)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """torch's ``no_sync()`` for gradient accumulation: backwards inside the block are not
        all-reduced (their ``Gradients`` are this replica's own), and the first backward after
        it all-reduces the sum of theirs and its own, so the ``Gradients`` it returns are what
        torch's ``.grad`` holds then: step with those alone (adding the block's ones to them
        would count them twice)."""
        from ..distributed.reducer.backward_hook import unsynced

        device = next((p.device for p in self.module.parameters()), None)
        if device is None:
            yield
            return
        with unsynced(device):
            yield


def _broadcast_from_first(module: Module, context: Any, buffers: bool) -> None:
    """Every replica's parameters (and buffers) replaced by those of ``context.devices[0]``:
    an all-reduce ``SUM`` to which only that device contributes its values (adding zeros is
    exact)."""
    devices = getattr(context, "devices", None)
    if devices is None:
        raise InvalidArgumentError(
            "DistributedDataParallel: process_group must be a running "
            "rg.distributed.DistributedContext"
        )
    first = devices[0]
    tensors = list(module.parameters())
    if buffers:
        tensors += [b for b in module.buffers() if b.dtype in ("float32", "float64")]
    with no_grad():
        for t in tensors:
            mine = t.detach() if t.device == first else zeros_like(t)
            total = dist.all_reduce(mine, dist.ReduceOperation.SUM, devices).resolve()
            assign(t, total, "DistributedDataParallel")


class DataParallel(Module):
    """torch's ``DataParallel(module, device_ids=None, output_device=None, dim=0)``: the
    module runs on its device (several GPUs in one process are not split across here)."""

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None,
                 dim: int = 0):  # fmt: skip
        super().__init__()
        if not isinstance(module, Module):  # here, not as "not callable" at the first batch
            raise DTypeError(f"DataParallel: expected a Module, got {type(module).__name__}")
        if device_ids is not None:
            check_iterable("DataParallel", device_ids, "device_ids")
        if device_ids is not None and len(list(device_ids)) > 1:
            raise InvalidArgumentError(
                "DataParallel: splitting a batch over several devices in one process is not "
                "supported; use DistributedDataParallel with one process per device"
            )
        self.module = module
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


def data_parallel(module: Module, inputs: Any, device_ids: Any = None, output_device: Any = None,
                  dim: int = 0, module_kwargs: Any = None) -> Any:  # fmt: skip
    """``module(*inputs)`` on one device (see :class:`DataParallel`)."""
    check_callable("data_parallel", module, "module")
    if device_ids is not None:
        check_iterable("data_parallel", device_ids, "device_ids")
    if device_ids is not None and len(list(device_ids)) > 1:
        raise InvalidArgumentError(
            "data_parallel: splitting a batch over several devices in one process is not "
            "supported; use DistributedDataParallel with one process per device"
        )
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    return module(*inputs, **(module_kwargs or {}))
