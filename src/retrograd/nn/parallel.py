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
With a process group it follows torch's options: buffers broadcast from rank 0 before each
forward (``broadcast_buffers``), ``no_sync()`` accumulation, ``find_unused_parameters`` and
``join()`` for uneven inputs (see ``docs/distributed.md``).
``DataParallel`` and ``data_parallel`` run the module on its own device
(what torch does without several GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import cuda
from .. import distributed as dist
from ..autodiff import no_grad
from ..errors import (
    DistributedError,
    DTypeError,
    InvalidArgumentError,
    check_callable,
    check_iterable,
)
from ..tensor import cat
from ..tensor.inplace import assign
from .modules.module import Module

__all__ = ["DataParallel", "DistributedDataParallel", "data_parallel"]


def _check_device_ids(module: Module, device_ids: Any, output_device: Any) -> None:
    """torch's checks of ``device_ids``/``output_device``: one device at most, and only for a
    module on one GPU (a CPU module, or one over several devices, takes neither)."""
    if device_ids is not None:
        if not isinstance(device_ids, list | tuple):
            raise DTypeError(
                "DistributedDataParallel: device_ids must be a list of one device (or None), "
                f"got {type(device_ids).__name__}"
            )
        if len(device_ids) > 1:
            raise InvalidArgumentError(
                "DistributedDataParallel: device_ids can only be None or contain a single "
                f"element, got {list(device_ids)!r}"
            )
    devices = {parameter.device for parameter in module.parameters()}
    on_one_gpu = len(devices) == 1 and next(iter(devices)).type != "cpu"
    # (torch's test is of truth: output_device=0 alone passes, as there)
    if (device_ids or output_device) and devices and not on_one_gpu:
        held = sorted(str(device) for device in devices)
        raise InvalidArgumentError(
            "DistributedDataParallel: device_ids and output_device only work with a module on "
            f"one GPU, got device_ids={device_ids!r}, output_device={output_device!r} and "
            f"module parameters on {held}; leave them out for a CPU module"
        )


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
        forward_sync_buffers: bool | None = None,
        **kwargs: Any,
    ):
        super().__init__()
        if not isinstance(module, Module):
            raise InvalidArgumentError(
                f"DistributedDataParallel: expected a Module, got {type(module).__name__}"
            )
        _check_device_ids(module, device_ids, output_device)
        self.module = module
        # torch 2.13's name for broadcast_buffers; its False still syncs the buffers at
        # construction, where broadcast_buffers=False does not
        init_sync_buffers = broadcast_buffers
        if forward_sync_buffers is not None:
            broadcast_buffers, init_sync_buffers = forward_sync_buffers, True
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
            _broadcast_from_first(module, process_group, init_sync_buffers)
        # torch's state: whether the next forward broadcasts the buffers (the last one ran
        # with gradients and outside no_sync), whether no_sync is open, the join in force
        self._group = process_group
        self._sync_buffers_next = True
        self._unsynced = 0
        self._join: dict[str, Any] | None = None

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        from ..autodiff.grad_mode import is_grad_enabled

        group = self._group
        if group is not None and group.world_size > 1:
            will_sync_buffers = self._sync_buffers_next and self.broadcast_buffers
            source = 0
            if self._join is not None:
                self._join["iterations"] += 1
                wants_sync = is_grad_enabled() and not self._unsynced
                source = self._join_round(1, wants_sync, will_sync_buffers)
            if will_sync_buffers:
                _broadcast_buffers(self.module, group, source)
        out = self.module(*inputs, **kwargs)
        self._sync_buffers_next = is_grad_enabled() and not self._unsynced
        return out

    # -- uneven inputs: torch's Join, for DDP -----------------------------------------------------
    @contextmanager
    def join(
        self,
        divide_by_initial_world_size: bool = True,
        enable: bool = True,
        throw_on_early_termination: bool = False,
    ) -> Iterator[None]:
        """torch's ``join()`` for ranks with different numbers of batches: each forward in the
        block first agrees which ranks still train; a rank whose inputs ran out (it left the
        block) shadows the others' steps, joining their buffer broadcasts and their gradient
        all-reduces with zeros (the average stays over every rank: torch's default
        ``divide_by_initial_world_size=True``), until every rank is out; then every rank takes
        the parameters and buffers of the last to leave. With
        ``throw_on_early_termination=True`` every rank raises ``DistributedError`` instead,
        once one ran out."""
        group = self._group
        if not enable or group is None or group.world_size == 1:
            yield
            return
        if not divide_by_initial_world_size:
            raise InvalidArgumentError(
                "DistributedDataParallel.join: divide_by_initial_world_size=False is not "
                "supported; gradients are averaged over every rank, as with the default True"
            )
        if self._join is not None:
            raise InvalidArgumentError("DistributedDataParallel.join: already inside join()")
        self._join = {"iterations": 0, "throw": throw_on_early_termination}
        try:
            yield
            self._shadow_until_every_rank_is_out()
        finally:
            self._join = None

    def _join_round(self, active: int, wants_sync: bool, will_sync_buffers: bool) -> int:
        """One iteration's agreement: every rank's (active, syncs gradients, syncs buffers)
        gathered; returns the rank whose buffers are broadcast (the highest active one, as
        torch's, since rank 0 may be out with stale ones). Counts what the joined rank must
        shadow into ``self._join``."""
        from ..tensor import tensor

        group = self._group
        device = group.devices[self._rank()]
        mine = tensor([[active, int(wants_sync), int(will_sync_buffers)]], device=device)
        rows = dist.all_gather(mine.cast("int64"), group.devices, 0).resolve().tolist()
        actives = [rank for rank, row in enumerate(rows) if row[0]]
        if self._join["throw"] and 0 < len(actives) < len(rows):
            raise DistributedError(
                "DistributedDataParallel.join: detected at least one rank that exhausted its "
                f"inputs (rank {min(set(range(len(rows))) - set(actives))}); throwing on every "
                "rank (throw_on_early_termination=True)"
            )
        self._join["round"] = (
            actives,
            any(row[1] for row in rows if row[0]),
            any(row[2] for row in rows if row[0]),
        )
        return max(actives) if actives else 0

    def _shadow_until_every_rank_is_out(self) -> None:
        from ..autodiff.grad_mode import enable_grad

        last_to_leave = True
        while True:
            self._join_round(0, False, False)
            actives, wants_sync, syncs_buffers = self._join["round"]
            if not actives:
                break
            last_to_leave = False
            if syncs_buffers:
                _broadcast_buffers(self.module, self._group, max(actives))
            if wants_sync:
                # the active ranks' gradient all-reduces, joined with zeros
                parameters = [p for p in self.module.parameters() if p.requires_grad]
                with enable_grad():
                    sum((p * 0).sum() for p in parameters).backward()
        # every rank takes the model of the highest-ranked of the last to leave
        from ..tensor import tensor

        group = self._group
        rank = self._rank()
        mine = tensor([rank if last_to_leave else -1], device=group.devices[rank])
        source = max(dist.all_gather(mine.cast("int64"), group.devices, 0).resolve().tolist())
        _broadcast_all(list(self.module.parameters()) + list(self.module.buffers()), group, source)

    def _rank(self) -> int:
        group = self._group
        if dist.is_initialized() and dist.process_group.default_context() is group:
            return dist.get_rank()
        device = next(p.device for p in self.module.parameters())
        return group.devices.index(device)

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
        self._unsynced += 1
        try:
            with unsynced(device):
                yield
        finally:
            self._unsynced -= 1


def _broadcast_from_first(module: Module, context: Any, buffers: bool) -> None:
    """Every replica's parameters (and buffers, of every dtype: BatchNorm's int64 count too,
    as torch's ``_sync_module_states``) replaced by those of ``context.devices[0]``: one
    broadcast per dtype (:func:`_coalesced`)."""
    devices = getattr(context, "devices", None)
    if devices is None:
        raise InvalidArgumentError(
            "DistributedDataParallel: process_group must be a running "
            "rg.distributed.DistributedContext"
        )
    tensors = list(module.parameters())
    if buffers:
        tensors += list(module.buffers())
    _broadcast_all(tensors, context, 0)


def _broadcast_all(tensors: list, context: Any, source: int) -> None:
    """Every rank's ``tensors`` replaced by rank ``source``'s, in place: one broadcast per
    dtype (:func:`_coalesced`), not one per tensor."""
    _coalesced(tensors, lambda flat: dist.broadcast(flat, source, context.devices).resolve())


def _coalesced(tensors: list, collective: Any) -> None:
    """``collective`` (a flat tensor in, the flat result out) run once per dtype over
    ``tensors`` flattened and joined, as torch's DDP coalesces its broadcasts into buckets;
    each tensor then takes its piece of the result in place. Every rank lists the same
    tensors in the same order (the module's), so every rank makes the same calls."""
    by_dtype: dict[str, list] = {}
    for t in tensors:
        by_dtype.setdefault(str(t.dtype), []).append(t)
    with no_grad():
        for group in by_dtype.values():
            flat = cat([t.detach().reshape(-1) for t in group]) if len(group) > 1 else None
            if flat is None:
                flat = group[0].detach().reshape(-1)
            result = collective(flat)
            offset = 0
            for t in group:
                count = t.numel()
                piece = result[offset : offset + count].reshape(t.shape).clone()
                assign(t, piece, "DistributedDataParallel")
                offset += count


def _broadcast_buffers(module: Module, context: Any, source: int) -> None:
    """torch's buffer sync before a forward: every rank's buffers (BatchNorm's running
    statistics and its count) replaced by rank ``source``'s."""
    _broadcast_all(list(module.buffers()), context, source)


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
        if not cuda.is_available():  # torch's on a machine without GPUs: no device ids
            device_ids = []
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


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
