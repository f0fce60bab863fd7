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

Ranks may also be threads of this process: each calls ``init_process_group(rank=r,
world_size=n, store=ctx)`` with one running local context (torch's threaded process groups, as
its tests use them); the thread's default group is then its own, and the tensors it makes
without a device are made on ``ctx.devices[r]``.
"""

from __future__ import annotations

import datetime
import os
import pickle
import threading
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

import numpy as np

from ..errors import (
    DistributedError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    ResultCastError,
    ShapeError,
)
from .config import DistributedConfig, ReduceOperation
from .context import DistributedContext

__all__ = [
    "ReduceOp",
    "Work",
    "all_gather_into_tensor",
    "all_gather_object",
    "barrier",
    "broadcast_object_list",
    "default_context",
    "destroy_process_group",
    "gather",
    "gather_object",
    "get_backend",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "is_available",
    "is_initialized",
    "new_group",
    "scatter",
    "scatter_object_list",
]


class ReduceOp:
    """torch's reduce operations. ``SUM`` and ``AVG`` are :class:`ReduceOperation`'s (``MEAN``),
    which retrograd's differentiable collectives and the gradient sync perform; ``PRODUCT``,
    ``MIN``, ``MAX`` and the bitwise ones (integers) are for torch's in-place form of
    ``all_reduce`` and ``reduce`` (metrics, flags), which gathers every rank's tensor and
    reduces elementwise."""

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
#: the process's default group: ``context``, ``backend``, ``rank`` and ``device`` (this rank's)
_default: dict[str, Any] = {}
#: a thread's own default group, when the thread is one rank of an in-process job
#: (``init_process_group(store=ctx)``); it takes precedence over the process's
_thread = threading.local()


def _state() -> dict[str, Any]:
    """This thread's default group if it joined one, else the process's."""
    mine = getattr(_thread, "state", None)
    return mine if mine is not None else _default


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
    return "context" in _state()


def default_context(op: str = "default_context") -> DistributedContext:
    """The context :func:`init_process_group` started; :class:`DistributedError` before,
    naming ``op``, the function that needed it."""
    context = _state().get("context")
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
    if isinstance(store, DistributedContext):
        _join_as_thread(store, world_size, rank, backend)
        return
    if store is not None:
        raise InvalidArgumentError(
            "init_process_group: a store is not supported; use init_method 'env://' or "
            "'tcp://host:port', or store=ctx (a running local DistributedContext) for ranks "
            "that are threads of this process"
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
        if "context" in _default or is_initialized():
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
        _default.update(rank=context.rank, device=context.local_devices[0])
        _default["former_device"] = _make_tensors_on(context.local_devices[0])


def _join_as_thread(context: DistributedContext, world_size: int, rank: int, backend: Any) -> None:
    """Make the calling thread rank ``rank`` of the in-process job ``context`` runs (the local
    engine, one device per thread): its default group until it calls
    ``destroy_process_group``, and its tensors made on ``context.devices[rank]``, as torch's
    threaded process groups do for tests (``init_process_group(rank=r, world_size=n,
    store=store)`` from each thread)."""
    _job_size(world_size, rank)
    members = context.devices
    if not context.running or len(context.local_devices) != len(members):
        raise InvalidArgumentError(
            "init_process_group: store must be a running DistributedContext whose devices are "
            "all in this process (the local engine); across processes use init_method"
        )
    if world_size not in (-1, len(members)):
        raise InvalidArgumentError(
            f"init_process_group: world_size {world_size} differs from the {len(members)} "
            "devices of the context given as store"
        )
    if not 0 <= rank < len(members):
        raise InvalidArgumentError(
            f"init_process_group: give this thread's rank (0 to {len(members) - 1}) with "
            f"store=ctx, got {rank}"
        )
    if is_initialized():
        raise DistributedError("trying to initialize the default process group twice!")
    from ..context import thread_device

    device = members[rank]
    token = thread_device.set(device)
    _thread.state = {
        "context": context,
        "backend": (backend or "gloo").split(",")[0].split(":")[-1].lower(),
        "rank": rank,
        "device": device,
        "token": token,
    }


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
    mine = getattr(_thread, "state", None)
    if mine is not None:  # a thread rank leaves; the context is its creator's to close
        from ..context import thread_device

        _thread.state = None
        thread_device.reset(mine["token"])
        return
    with _lock:
        context, device = _default.pop("context", None), _default.get("former_device")
        _default.clear()
    if context is not None:
        _make_tensors_on(device)
        context.close()


def get_rank(group: Any = None) -> int:
    default_context("get_rank")
    return _state()["rank"]


def get_world_size(group: Any = None) -> int:
    return default_context("get_world_size").world_size


def get_default_backend_for_device(device: Any) -> str:
    """torch's choice of collective backend for a device: ``"gloo"`` for the CPU, ``"nccl"``
    for a GPU (a device string, with or without an index, or an ``rg.device``)."""
    kind = device if isinstance(device, str) else getattr(device, "type", None)
    kind = str(kind).split(":")[0]
    backends = {"cpu": "gloo", "cuda": "nccl"}
    if kind not in backends:
        raise InvalidArgumentError(
            f"get_default_backend_for_device: no default backend is registered for device "
            f"{device!r} (known: 'cpu' -> 'gloo', 'cuda' -> 'nccl')"
        )
    return backends[kind]


def get_backend(group: Any = None) -> str:
    default_context("get_backend")
    return _state()["backend"]


def new_group(ranks: Any = None, timeout: Any = None, backend: Any = None,
              pg_options: Any = None, **kwargs: Any) -> Any:  # fmt: skip
    """torch's ``new_group``: the group of every rank (``ranks`` ``None`` or all of them), which
    is the default group; subgroups are refused, saying so (the collectives run over every
    rank)."""
    size = default_context("new_group").world_size
    if ranks is not None and sorted(ranks) != list(range(size)):
        raise InvalidArgumentError(
            f"new_group: subgroups are not supported (ranks {list(ranks)} of {size}); "
            "collectives run over every rank"
        )
    return group.WORLD


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Wait until every member arrives (an all-reduce of one number)."""
    from ..tensor import zeros
    from .collective import all_reduce

    context = default_context("barrier")
    token = zeros((1,), device=_state()["device"])
    all_reduce(token, ReduceOperation.SUM, context.devices).resolve()
    return Work() if async_op else None


# -- the collectives in both forms -----------------------------------------------------------------
# retrograd's form names its devices and returns a pending, differentiable result
# (``collective.py``); torch's names none (the default group), works in place outside the
# graph, and returns None (a done :class:`Work` with ``async_op=True``).


#: the operations torch's c10d has beyond SUM and AVG, each as an elementwise NumPy reduction
#: over the ranks' values (gathered first: they are for metrics and flags, not gradients)
_GATHERED_OPS = {
    "PRODUCT": np.multiply,
    "MIN": np.minimum,
    "MAX": np.maximum,
    "BAND": np.bitwise_and,
    "BOR": np.bitwise_or,
    "BXOR": np.bitwise_xor,
}


#: torch's form on a tensor of no floating dtype: SUM of bools is their OR (gloo adds them as
#: C++ bools; measured on torch 2.13: [T, F, T, F] and [T, T, F, F] give [T, T, T, F]); AVG
#: divides into a float result that torch cannot write back into the tensor (its RuntimeError)
_NON_FLOAT_OPS = {("bool", ReduceOperation.SUM): "BOR"}


def _reduce_operation(op: Any, what: str) -> ReduceOperation | str:
    if isinstance(op, ReduceOperation) or (isinstance(op, str) and op in _GATHERED_OPS):
        return op
    raise InvalidArgumentError(
        f"{what}: op {op!r} is not a ReduceOp (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR)"
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


def _mine(value: Any, what: str) -> Any:
    """``value``, detached, on this rank's device, where the collectives find each rank's
    part (a CPU tensor made elsewhere in the process moves: CPU labels are logical)."""
    tensor = _tensor(value, what).detach()
    device = _state()["device"]
    if tensor.device == device:
        return tensor
    if tensor.device.kind != device.kind:
        raise InvalidArgumentError(
            f"{what}: the tensor is on {tensor.device}, this rank's device is {device}"
        )
    return tensor.to(device)


def _rank(value: Any, what: str, name: str) -> int:
    size = default_context(what).world_size
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise IndexOutOfRangeError(
            f"{what}: {name} {value!r} is not a rank of the {size} in the group"
        )
    return value


def _gathered(tensor: Any, what: str) -> Any:
    """Every rank's ``tensor`` stacked along a new first dim, in rank order."""
    from . import collective

    mine = _mine(tensor, what)
    rows = mine.reshape((1, *mine.shape))
    return collective.all_gather(rows, default_context(what).devices, 0).resolve()


def _reduced(tensor: Any, op: Any, what: str) -> Any:
    """The reduction of every rank's ``tensor`` with ``op`` (on this rank's device)."""
    from ..tensor import tensor as make_tensor
    from . import collective

    op = _reduce_operation(op, what)
    value = _tensor(tensor, what)
    if not value.is_floating_point():
        dtype = str(value.dtype).removeprefix("retrograd.")
        if op is ReduceOperation.MEAN:
            raise ResultCastError(
                f"{what}: ReduceOp.AVG of a tensor of dtype {dtype}: result type Float can't be "
                f"cast to the desired output type {dtype} (the tensor is reduced in place)"
            )
        op = _NON_FLOAT_OPS.get((dtype, op), op)
    if isinstance(op, ReduceOperation):
        devices = default_context(what).devices
        return collective.all_reduce(_mine(tensor, what), op, devices).resolve()
    values = _gathered(tensor, what)
    array = values.numpy()
    if op.startswith("B") and array.dtype.kind not in "iub":
        raise DTypeError(f"{what}: ReduceOp.{op} needs an integer tensor, got {values.dtype}")
    total = _GATHERED_OPS[op].reduce(array, axis=0, dtype=array.dtype)
    return make_tensor(np.asarray(total), dtype=values.dtype, device=values.device)


def all_reduce(
    tensor: Any, op: Any = None, devices: Any = None, group: Any = None, async_op: bool = False
) -> Any:
    """retrograd's ``all_reduce(tensor, op, devices)`` (:func:`collective.all_reduce`), or
    torch's ``all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False)``: ``tensor``
    replaced, in place, by the reduction over the default group (any of torch's ops)."""
    from . import collective

    if devices is not None:
        return collective.all_reduce(tensor, op, devices)
    total = _reduced(tensor, ReduceOp.SUM if op is None else op, "all_reduce")
    return _in_place(tensor, total, "all_reduce", async_op)


def reduce(
    tensor: Any, dst: int = 0, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Work | None:
    """torch's ``reduce``: rank ``dst``'s ``tensor`` becomes the reduction; the others keep
    theirs."""
    dst = _rank(dst, "reduce", "dst")
    total = _reduced(tensor, op, "reduce")
    if get_rank() == dst:
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
    source = collective.broadcast(_mine(tensor, "broadcast"), src, devices).resolve()
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
    outputs = tensor
    _listed(outputs, default_context("all_gather").world_size, "all_gather", "tensor_list")
    gathered = _gathered(devices, "all_gather")
    for index, output in enumerate(outputs):
        _in_place(output, gathered[index], "all_gather", False)
    return Work() if async_op else None


def all_gather_into_tensor(
    output_tensor: Any, input_tensor: Any, group: Any = None, async_op: bool = False
) -> Work | None:
    """torch's ``all_gather_into_tensor``: ``output_tensor`` (every rank's ``input_tensor``
    concatenated along dim 0, or stacked along a new one) filled in place."""
    gathered = _gathered(input_tensor, "all_gather_into_tensor")
    output = _tensor(output_tensor, "all_gather_into_tensor")
    world, *rows = gathered.shape
    shapes = [tuple(gathered.shape)]
    if rows:
        shapes.append((world * rows[0], *rows[1:]))
    if tuple(output.shape) not in shapes:
        raise ShapeError(
            f"all_gather_into_tensor: the output has shape {list(output.shape)}; every rank's "
            f"input {rows} concatenated along dim 0 needs {list(shapes[-1])}"
        )
    value = gathered.reshape(tuple(output.shape))
    return _in_place(output, value, "all_gather_into_tensor", async_op)


def _listed(values: Any, size: int, what: str, name: str, items: str = "tensors") -> None:
    if not isinstance(values, list):
        raise InvalidArgumentError(
            f"{what}: {name} must be a list of one per rank, got {type(values).__name__}"
        )
    if len(values) != size:
        raise InvalidArgumentError(f"{what}: {name} has {len(values)} {items} for {size} ranks")


def gather(
    tensor: Any, gather_list: Any = None, dst: int = 0, group: Any = None, async_op: bool = False
) -> Work | None:
    """torch's ``gather``: rank ``dst``'s ``gather_list[i]`` becomes rank ``i``'s ``tensor``
    (``gather_list`` only on ``dst``)."""
    dst = _rank(dst, "gather", "dst")
    if get_rank() == dst:
        _listed(gather_list, get_world_size(), "gather", "gather_list")
    elif gather_list:
        raise InvalidArgumentError(f"gather: gather_list is given only on the dst rank ({dst})")
    gathered = _gathered(tensor, "gather")
    if get_rank() == dst:
        for index, output in enumerate(gather_list):
            _in_place(output, gathered[index], "gather", False)
    return Work() if async_op else None


def scatter(
    tensor: Any, scatter_list: Any = None, src: int = 0, group: Any = None, async_op: bool = False
) -> Work | None:
    """torch's ``scatter``: rank ``i``'s ``tensor`` becomes rank ``src``'s
    ``scatter_list[i]`` (``scatter_list`` only on ``src``, each of ``tensor``'s shape)."""
    from ..tensor import stack, zeros
    from . import collective

    src = _rank(src, "scatter", "src")
    mine = _mine(tensor, "scatter")
    size = default_context("scatter").world_size
    if get_rank() == src:
        _listed(scatter_list, size, "scatter", "scatter_list")
        parts = [_mine(part, "scatter") for part in scatter_list]
        for index, part in enumerate(parts):
            if tuple(part.shape) != tuple(mine.shape):
                raise ShapeError(
                    f"scatter: scatter_list[{index}] has shape {list(part.shape)}, the output "
                    f"tensor {list(mine.shape)}"
                )
        stacked = stack([p.cast(mine.dtype) for p in parts])
    else:
        if scatter_list:
            raise InvalidArgumentError(
                f"scatter: scatter_list is given only on the src rank ({src})"
            )
        stacked = zeros((size, *mine.shape), dtype=mine.dtype, device=mine.device)
    devices = default_context("scatter").devices
    shared = collective.broadcast(stacked, src, devices).resolve()
    return _in_place(tensor, shared[get_rank()], "scatter", async_op)


# -- objects: pickled, the bytes padded to the longest and gathered ----------------------


def _all_objects(obj: Any, what: str) -> list[Any]:
    """Every rank's ``obj``, in rank order: pickled, and unpickled on every rank, as torch's
    object collectives do (so, as torch's docs say of them, for data you trust: the job's own
    ranks; nothing read from a file goes through here)."""
    from ..tensor import tensor as make_tensor

    payload = pickle.dumps(obj)
    device = _state()["device"]
    lengths = _gathered(make_tensor([len(payload)], dtype="int64", device=device), what)
    lengths = [int(n) for n in lengths.numpy().reshape(-1)]
    # the bytes travel as int64 words, zero-padded (an eighth of the elements uint8 would take)
    padded = bytearray(8 * -(-max(lengths) // 8))
    padded[: len(payload)] = payload
    words = np.frombuffer(bytes(padded), dtype="<i8")
    rows = _gathered(make_tensor(words, dtype="int64", device=device), what).numpy()
    rows = rows.astype("<i8", copy=False)
    return [pickle.loads(rows[i].tobytes()[:n]) for i, n in enumerate(lengths)]


def all_gather_object(object_list: Any, obj: Any, group: Any = None) -> None:
    """torch's ``all_gather_object``: ``object_list[i]`` becomes rank ``i``'s ``obj`` (any
    picklable object; as torch's, it unpickles what the other ranks send)."""
    _listed(object_list, default_context("all_gather_object").world_size,
            "all_gather_object", "object_list", "objects")  # fmt: skip
    object_list[:] = _all_objects(obj, "all_gather_object")


def gather_object(obj: Any, object_gather_list: Any = None, dst: int = 0,
                  group: Any = None) -> None:  # fmt: skip
    """torch's ``gather_object``: on rank ``dst``, ``object_gather_list[i]`` becomes rank
    ``i``'s ``obj``."""
    dst = _rank(dst, "gather_object", "dst")
    if get_rank() == dst:
        _listed(object_gather_list, get_world_size(), "gather_object", "object_gather_list",
                "objects")  # fmt: skip
    objects = _all_objects(obj, "gather_object")
    if get_rank() == dst:
        object_gather_list[:] = objects


def broadcast_object_list(object_list: Any, src: int = 0, group: Any = None,
                          device: Any = None) -> None:  # fmt: skip
    """torch's ``broadcast_object_list``: every rank's ``object_list`` gets rank ``src``'s
    objects, in place (the lists have the same length on every rank)."""
    src = _rank(src, "broadcast_object_list", "src")
    if not isinstance(object_list, list):
        raise InvalidArgumentError(
            f"broadcast_object_list: object_list must be a list, got {type(object_list).__name__}"
        )
    sent = list(object_list) if get_rank() == src else None
    objects = _all_objects(sent, "broadcast_object_list")[src]
    if len(objects) != len(object_list):
        raise InvalidArgumentError(
            f"broadcast_object_list: rank {get_rank()}'s object_list has {len(object_list)} "
            f"items, rank {src}'s {len(objects)}"
        )
    object_list[:] = objects


def scatter_object_list(scatter_object_output_list: Any, scatter_object_input_list: Any = None,
                        src: int = 0, group: Any = None) -> None:  # fmt: skip
    """torch's ``scatter_object_list``: ``scatter_object_output_list[0]`` becomes rank
    ``src``'s ``scatter_object_input_list[rank]``."""
    src = _rank(src, "scatter_object_list", "src")
    output = scatter_object_output_list
    if not isinstance(output, list) or not output:
        raise InvalidArgumentError(
            "scatter_object_list: scatter_object_output_list must be a non-empty list"
        )
    if get_rank() == src:
        _listed(scatter_object_input_list, get_world_size(), "scatter_object_list",
                "scatter_object_input_list", "objects")  # fmt: skip
    sent = list(scatter_object_input_list) if get_rank() == src else None
    output[0] = _all_objects(sent, "scatter_object_list")[src][get_rank()]


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
