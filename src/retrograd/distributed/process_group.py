"""torch's process-group functions (``torch.distributed``'s c10d surface) over one default
:class:`~retrograd.distributed.DistributedContext`, so that a torch DDP script runs as written::

    dist.init_process_group("gloo")           # under torchrun (or mpiexec with "mpi")
    model = DDP(model)                        # gradients averaged during backward
    sampler = DistributedSampler(dataset)     # this rank's share
    dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)   # torch's form: in place
    dist.destroy_process_group()

``init_process_group`` reads the launcher's environment as torch's ``env://`` does (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; ``init_method="tcp://host:port"`` with
``rank`` and ``world_size`` sets them), and starts the context on the ``torch`` engine (gloo,
or NCCL for ``"nccl"``) or the ``mpi`` engine (``"mpi"``). A single process without a launcher
(``world_size`` 1) gets a one-member context on this process's device, where every collective
is the identity: the script runs unchanged on one process, as torch's does. Until
``destroy_process_group``, the default device is this rank's (``cpu:RANK`` on the torch and mpi
engines), so that tensors made after ``init_process_group`` are where the context reduces.

The default context averages the gradients of parameters marked distributed (``MEAN``, as DDP).
"""

from __future__ import annotations

import datetime
import os
import threading
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

from ..errors import DistributedError, DTypeError, IndexOutOfRangeError, InvalidArgumentError
from .config import DistributedConfig, ReduceOperation
from .context import DistributedContext

__all__ = [
    "ReduceOp",
    "Work",
    "barrier",
    "default_context",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "is_available",
    "is_initialized",
]


class ReduceOp:
    """torch's reduce operations that retrograd's collectives perform: ``SUM`` and ``AVG``
    (:class:`ReduceOperation` ``MEAN``). ``PRODUCT``, ``MIN``, ``MAX`` and the bitwise ones are
    named so that a script using them fails saying so."""

    SUM = ReduceOperation.SUM
    AVG = ReduceOperation.MEAN
    PRODUCT = "PRODUCT"
    MIN = "MIN"
    MAX = "MAX"
    BAND = "BAND"
    BOR = "BOR"
    BXOR = "BXOR"


#: ``dist.group.WORLD``: the default group (every member), as torch spells it
group = SimpleNamespace(WORLD=None)

_lock = threading.Lock()
_default: dict[str, Any] = {}


class Work:
    """What an ``async_op=True`` collective returns: done already (retrograd's torch-form
    collectives complete before returning), ``wait()`` returns ``True``."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return "context" in _default


def default_context(op: str = "default_context") -> DistributedContext:
    """The context :func:`init_process_group` started; :class:`DistributedError` before,
    naming ``op``, the function that needed it."""
    context = _default.get("context")
    if context is None:
        raise DistributedError(
            f"{op}: Default process group has not been initialized, please make sure to call "
            "init_process_group."
        )
    return context


def _job_size(world_size: Any, rank: Any) -> None:
    """Refuse a ``world_size`` or ``rank`` no job has (a job of 0 processes, rank 5 of 2, a
    str), before any rendezvous would wait for peers that never come."""
    for name, value in (("world_size", world_size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise DTypeError(f"init_process_group: {name} must be an int, got {value!r}")
    if world_size == 0 or world_size < -1:
        raise InvalidArgumentError(
            f"init_process_group: world_size must be a positive number of processes (or -1 "
            f"for the launcher's), got {world_size}"
        )
    if rank < -1 or (world_size > 0 and rank >= world_size):
        raise InvalidArgumentError(
            f"init_process_group: rank {rank} is not a rank of a job of {world_size} processes"
        )


def _seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        return float(timeout)
    raise InvalidArgumentError(
        f"init_process_group: timeout must be a datetime.timedelta or seconds, got {timeout!r}"
    )


def _launcher_environment(init_method: Any, world_size: int, rank: int) -> bool:
    """Whether this process is one rank of a job of several, the launcher's environment
    completed from ``init_method``, ``world_size`` and ``rank`` as torch's rendezvous reads
    them (a job of one process leaves the environment alone)."""
    if init_method not in (None, "env://"):
        parsed = urlparse(str(init_method))
        if parsed.scheme != "tcp" or not parsed.hostname or not parsed.port:
            raise InvalidArgumentError(
                f"init_process_group: init_method must be 'env://' or 'tcp://host:port', "
                f"got {init_method!r}"
            )
    size = world_size if world_size not in (-1, None) else os.environ.get("WORLD_SIZE", 1)
    if int(size) <= 1:
        return False
    if init_method not in (None, "env://"):
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = parsed.hostname, str(parsed.port)
    os.environ["WORLD_SIZE"] = str(size)
    if rank not in (-1, None):
        os.environ["RANK"] = str(rank)
    return True


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: Any = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any = None,
    group_name: str = "",
    pg_options: Any = None,
    device_id: Any = None,
) -> None:
    """Join the job (see the module docstring); ``backend`` ``"gloo"``, ``"nccl"``,
    ``"mpi"`` or ``None`` (gloo on CPU, NCCL where the default backend keeps tensors on
    CUDA; a ``"cpu:gloo,cuda:nccl"`` string takes its first)."""
    if store is not None:
        raise InvalidArgumentError(
            "init_process_group: a store is not supported; use init_method 'env://' or "
            "'tcp://host:port'"
        )
    _job_size(world_size, rank)
    name = (backend or "").split(",")[0].split(":")[-1].lower() or None
    if name not in (None, "gloo", "nccl", "mpi"):
        raise InvalidArgumentError(
            f"init_process_group: backend must be 'gloo', 'nccl' or 'mpi', got {backend!r}"
        )
    settings = {"all_reduce_op": ReduceOperation.MEAN}
    if (seconds := _seconds(timeout)) is not None:
        settings["timeout"] = seconds
    config = DistributedConfig(**settings)
    with _lock:
        if is_initialized():
            raise DistributedError("trying to initialize the default process group twice!")
        if name == "mpi":
            context = DistributedContext.from_launcher(config, engine="mpi")
        elif _launcher_environment(init_method, world_size, rank):
            device = {"gloo": "cpu", "nccl": "cuda"}.get(name or "")
            context = DistributedContext.from_launcher(config, engine="torch", device=device)
        else:
            if int(os.environ.get("RANK", "0") or 0) not in (0, -1):
                raise InvalidArgumentError(
                    f"init_process_group: rank {os.environ['RANK']} of a job of one process"
                )
            from ..context import current_backend

            context = DistributedContext([current_backend().default_device], config)
        _default.update(context=context.start(), backend=name or "gloo")
        _default["device"] = _make_tensors_on(context.local_devices[0])


def _make_tensors_on(device: Any) -> Any:
    """Label the tensors the default backend makes from now on with ``device`` (a rank's
    ``cpu:RANK``: CPU labels are logical, the memory is this process's); returns the label
    it had. A rank process is one device, as a torch rank is one ``cuda:LOCAL_RANK``."""
    from ..context import current_backend

    backend = current_backend()
    inner = backend.inner if backend.is_autodiff else backend
    before = inner.default_device
    if device != before:
        inner.default_device = device
    return before


def destroy_process_group(group: Any = None) -> None:
    """Leave the job: the default context is closed; ``init_process_group`` may run again."""
    with _lock:
        context, device = _default.pop("context", None), _default.get("device")
        _default.clear()
    if context is not None:
        _make_tensors_on(device)
        context.close()


def get_rank(group: Any = None) -> int:
    return default_context("get_rank").rank


def get_world_size(group: Any = None) -> int:
    return default_context("get_world_size").world_size


def get_backend(group: Any = None) -> str:
    default_context("get_backend")
    return _default["backend"]


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Wait until every member arrives (an all-reduce of one number)."""
    from ..tensor import zeros
    from .collective import all_reduce

    context = default_context("barrier")
    token = zeros((1,), device=context.local_devices[0])
    all_reduce(token, ReduceOperation.SUM, context.devices).resolve()
    return Work() if async_op else None


# -- the collectives in both forms -----------------------------------------------------------------
# retrograd's form names its devices and returns a pending, differentiable result
# (``collective.py``); torch's names none (the default group), works in place outside the
# graph, and returns None (a done :class:`Work` with ``async_op=True``).


def _reduce_operation(op: Any, what: str) -> ReduceOperation:
    if isinstance(op, ReduceOperation):
        return op
    raise InvalidArgumentError(
        f"{what}: op {op!r} is not supported; retrograd's collectives reduce with "
        "ReduceOp.SUM or ReduceOp.AVG"
    )


def _in_place(target: Any, value: Any, what: str, async_op: bool) -> Work | None:
    from ..autodiff import no_grad
    from ..errors import AutodiffError
    from ..tensor.inplace import assign

    with no_grad():
        try:
            assign(target, value, what)  # a leaf's .data or a parameter: through to it
        except AutodiffError:
            # ``loss.detach()`` of a computed value, which torch's c10d overwrites in storage:
            # here the view alone takes the result, untracked (the graph keeps its value)
            assign(target, value, what, untrack=True)
    return Work() if async_op else None


def _tensor(value: Any, what: str) -> Any:
    from ..tensor import Tensor

    if not isinstance(value, Tensor):
        raise InvalidArgumentError(f"{what}: expected a Tensor, got {type(value).__name__}")
    return value


def all_reduce(
    tensor: Any, op: Any = None, devices: Any = None, group: Any = None, async_op: bool = False
) -> Any:
    """retrograd's ``all_reduce(tensor, op, devices)`` (:func:`collective.all_reduce`), or
    torch's ``all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False)``: ``tensor``
    replaced, in place, by the reduction over the default group."""
    from . import collective

    if devices is not None:
        return collective.all_reduce(tensor, op, devices)
    op = _reduce_operation(ReduceOp.SUM if op is None else op, "all_reduce")
    devices = default_context("all_reduce").devices
    total = collective.all_reduce(_tensor(tensor, "all_reduce").detach(), op, devices).resolve()
    return _in_place(tensor, total, "all_reduce", async_op)


def reduce(
    tensor: Any, dst: int = 0, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Work | None:
    """torch's ``reduce``: rank ``dst``'s ``tensor`` becomes the reduction; the others keep
    theirs."""
    from . import collective

    op = _reduce_operation(op, "reduce")
    context = default_context("reduce")
    if isinstance(dst, bool) or not isinstance(dst, int) or not 0 <= dst < context.world_size:
        raise IndexOutOfRangeError(
            f"reduce: dst {dst!r} is not a rank of the {context.world_size} in the group"
        )
    total = collective.all_reduce(_tensor(tensor, "reduce").detach(), op, context.devices)
    total = total.resolve()
    if context.rank == dst:
        return _in_place(tensor, total, "reduce", async_op)
    return Work() if async_op else None


def broadcast(
    tensor: Any, src: int, devices: Any = None, group: Any = None, async_op: bool = False
) -> Any:
    """retrograd's ``broadcast(tensor, src, devices)``, or torch's ``broadcast(tensor, src,
    group=None, async_op=False)``: every rank's ``tensor`` replaced by rank ``src``'s."""
    from . import collective

    if devices is not None:
        return collective.broadcast(tensor, src, devices)
    devices = default_context("broadcast").devices
    source = collective.broadcast(_tensor(tensor, "broadcast").detach(), src, devices).resolve()
    return _in_place(tensor, source, "broadcast", async_op)


def all_gather(
    tensor: Any, devices: Any = None, dim: int = 0, group: Any = None, async_op: bool = False
) -> Any:
    """retrograd's ``all_gather(tensor, devices, dim=0)``, or torch's ``all_gather(tensor_list,
    tensor, group=None, async_op=False)`` (a list first): rank ``i``'s ``tensor`` written into
    ``tensor_list[i]``."""
    from . import collective

    if not isinstance(tensor, list | tuple):
        if devices is None:
            raise InvalidArgumentError(
                "all_gather: give devices (retrograd's form) or a list to gather into first "
                "(torch's all_gather(tensor_list, tensor))"
            )
        return collective.all_gather(tensor, devices, dim)
    outputs, mine = tensor, _tensor(devices, "all_gather")
    members = default_context("all_gather").devices
    if len(outputs) != len(members):
        raise InvalidArgumentError(
            f"all_gather: tensor_list has {len(outputs)} tensors for {len(members)} ranks"
        )
    rows = mine.detach().reshape((1, *mine.shape))
    gathered = collective.all_gather(rows, members, 0).resolve()
    for index, output in enumerate(outputs):
        _in_place(output, gathered[index], "all_gather", False)
    return Work() if async_op else None


def reduce_scatter(
    tensor: Any, op: Any = None, devices: Any = None, dim: int = 0, group: Any = None
) -> Any:
    """retrograd's ``reduce_scatter(tensor, op, devices, dim=0)`` (torch's, which scatters a
    list into an output, is not provided)."""
    from . import collective

    if devices is None:
        raise InvalidArgumentError(
            "reduce_scatter: give op and devices (retrograd's form reduce_scatter(tensor, op, "
            "devices, dim)); torch's reduce_scatter(output, input_list) is not supported"
        )
    return collective.reduce_scatter(tensor, op, devices, dim)
