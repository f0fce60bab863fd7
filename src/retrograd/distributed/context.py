"""``DistributedContext``: the devices that train together, their transport and sync server.

It makes the transport its ``engine`` names, starts and closes the server, registers itself
(:mod:`.registry`) so that backwards and ``all_reduce`` calls on its devices find it, and
offers its collaborators (the backward hook, ``all_reduce``) what they need of it as public
methods: ``server``, ``start_collective`` (``start_all_reduce``), ``wait_for``,
``record_step``.
"""

from __future__ import annotations

import atexit
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from ..device import Device
from ..errors import DistributedError, DTypeError, InvalidArgumentError
from .calls import Call, check_headers, header, transport_collective
from .config import DistributedConfig, ReduceOperation
from .pending import Pending
from .reducer.backward_hook import HOOK
from .reducer.rounds import DeviceStep
from .reducer.server import SyncServer
from .registry import register_context, unregister_context
from .transport.base import Transport
from .transport.ranks import dtype_name

__all__ = ["ENGINES", "DistributedContext"]

#: the engines (transports) a context can be made with, by name
ENGINES = ("local", "mpi", "torch")


def _devices(devices: Any) -> tuple[Device, ...]:
    """``devices`` as ``Device`` values; a str (one device named, not a list of them) or an
    int is refused naming the context, not iterated or called."""
    if isinstance(devices, str) or not isinstance(devices, Iterable):
        raise DTypeError(
            f"DistributedContext: devices must be a list of devices (['cpu:0', 'cpu:1']), got "
            f"{devices!r}"
        )
    return tuple(Device(d) for d in devices)


class DistributedContext:
    """The devices that train together, their transport and their sync server.

    In one process (engine ``"local"``), one thread per device; the user starts the threads,
    the context provides the server::

        config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=60.0)
        with dist.DistributedContext(devices, config):
            ...  # each device's thread: w.set_distributed("w"); grads = loss.backward()

    Across processes started by ``mpiexec`` or ``torchrun`` (one device per rank)::

        with dist.DistributedContext.from_launcher(config, engine="mpi") as ctx:  # or "torch"
            x = rg.tensor(data, device=ctx.device)   # this rank's device; ctx.devices: all

    ``backward()`` on a device the context hosts returns once its distributed parameters'
    gradients are all-reduced; ``close()`` (or leaving the ``with``) stops the server thread.
    """

    def __init__(
        self,
        devices: Iterable[Any],
        config: DistributedConfig | None = None,
        *,
        engine: str | Transport = "local",
    ):
        self.config = config if config is not None else DistributedConfig()
        if not isinstance(self.config, DistributedConfig):
            raise DTypeError(
                f"DistributedContext: config must be a DistributedConfig, got {config!r}"
            )
        if isinstance(engine, Transport):
            self.transport = engine
        elif engine == "local":
            from .transport.local import LocalTransport

            devices = _devices(devices)
            if not devices:
                raise DistributedError("DistributedContext: needs at least one device")
            if len(set(devices)) != len(devices):
                raise DistributedError(
                    f"DistributedContext: devices repeat: {', '.join(map(str, devices))}"
                )
            self.transport = LocalTransport(devices)
        elif engine in ("mpi", "torch"):
            raise DistributedError(
                f"DistributedContext: the {engine} engine takes its devices from the launcher; "
                f'use DistributedContext.from_launcher(config, engine="{engine}")'
            )
        else:
            raise InvalidArgumentError(
                f"DistributedContext: engine must be one of {ENGINES}, got {engine!r}"
            )
        name = f"retrograd-sync-{self.transport.name}"
        self._server = SyncServer(self.transport, self.config, name)
        self._lock = threading.Lock()
        self._sequence: dict[tuple[Device, tuple[Device, ...]], int] = {}
        self._state = "new"
        self.stats = _Stats()

    @classmethod
    def from_launcher(
        cls,
        config: DistributedConfig | None = None,
        engine: str = "mpi",
        *,
        device: str | None = None,
    ) -> DistributedContext:
        """The context of this process in a job started by a launcher: ``mpiexec`` for
        ``engine="mpi"``, ``torchrun`` for ``engine="torch"``.

        Creating it is collective: every rank must create it, within ``config.timeout``.
        ``device`` (torch engine only): ``"cpu"`` (gloo) or ``"cuda"`` (NCCL, this process on
        GPU ``LOCAL_RANK``); by default, where the default backend keeps its tensors.
        """
        config = config if config is not None else DistributedConfig()
        if engine == "mpi":
            if device not in (None, "cpu"):
                raise InvalidArgumentError(
                    f"DistributedContext.from_launcher: the mpi engine reduces host memory "
                    f'only, got device={device!r}; use engine="torch" for CUDA'
                )
            from .transport.mpi import MpiTransport

            made: Transport = MpiTransport(config)
        elif engine == "torch":
            from .transport.torch_distributed import TorchTransport

            made = TorchTransport(config, device)
        else:
            raise InvalidArgumentError(
                f"DistributedContext.from_launcher: unknown engine {engine!r}; one of "
                "'mpi', 'torch'"
            )
        context = cls((), config, engine=made)
        # A context still running when the interpreter exits is closed first (this handler,
        # registered after the transport's, runs before it): its server thread must not be
        # polling the transport while it is torn down.
        atexit.register(context.close)
        return context

    # -- what it hosts --------------------------------------------------------------------------
    @property
    def devices(self) -> tuple[Device, ...]:
        """Every participating device, in rank order."""
        return self.transport.members

    @property
    def local_devices(self) -> tuple[Device, ...]:
        """The devices hosted by this process."""
        return self.transport.local

    @property
    def device(self) -> Device:
        """This process's device (one per rank across processes)."""
        if len(self.transport.local) != 1:
            raise DistributedError(
                "DistributedContext.device: this context hosts "
                f"{len(self.transport.local)} devices; use ctx.devices"
            )
        return self.transport.local[0]

    @property
    def rank(self) -> int:
        """This process's rank (its device's index in ``devices``)."""
        return self.transport.index[self.transport.local[0]]

    @property
    def world_size(self) -> int:
        return len(self.transport.members)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> DistributedContext:
        with self._lock:
            if self._state != "new":
                raise DistributedError(f"DistributedContext: cannot start a {self._state} context")
            register_context(self, HOOK)
            self._server.start()
            self._state = "running"
        return self

    def close(self) -> None:
        """Stop the server thread; collectives still in flight fail. Idempotent."""
        with self._lock:
            if self._state != "running":
                self._state = "closed"
                return
            self._state = "closed"
        try:
            self._server.close()
        finally:
            unregister_context(self, HOOK)

    @property
    def running(self) -> bool:
        return self._state == "running" and self._server.alive

    def __enter__(self) -> DistributedContext:
        if self._state == "new":
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        devices = ", ".join(map(str, self.devices))
        return f"DistributedContext({self.transport.name}: {devices}, {self._state})"

    # -- for the backward hook and all_reduce ----------------------------------------------
    @property
    def server(self) -> SyncServer:
        """The sync server (the backward hook registers and submits gradients to it)."""
        return self._server

    def start_all_reduce(
        self,
        device: Device,
        devices: tuple[Device, ...],
        array: Any,
        op: ReduceOperation,
    ) -> Pending:
        """Start ``device``'s part of an ``all_reduce`` of ``array`` (a buffer) over
        ``devices`` (:meth:`start_collective`)."""
        return self.start_collective(Call("all_reduce", op, tuple(devices)), device, array)

    def start_collective(
        self, call: Call, device: Device, buffer: Any, rejected: bool = False
    ) -> Pending | None:
        """Start ``device``'s part of ``call`` on ``buffer``: the k-th collective call of each
        device over the same devices are matched. Every member first all-gathers its header
        (:mod:`.calls`) and waits for the others' (at most the timeout); if they disagree, or
        one ``rejected`` its call, every member raises :class:`~retrograd.DistributedError`
        with the same message (a member that rejected its call gets ``None`` back at once
        and raises its own error). Then the data's collective starts; its pending result (one
        array) is returned."""
        if not self.running:
            raise DistributedError(f"{call.kind}: the distributed context is {self._state}")
        devices, index = call.devices, self.transport.index
        strangers = [d for d in devices if d not in index]
        if strangers or len(set(devices)) != len(devices):
            raise DistributedError(
                f"{call.kind}: devices must be distinct devices of the context "
                f"({', '.join(map(str, self.transport.members))}), got "
                f"{', '.join(map(str, devices))}"
            )
        group = tuple(sorted(devices, key=index.__getitem__))
        with self._lock:
            number = self._sequence.get((device, group), 0)
            self._sequence[(device, group)] = number + 1
        order = tuple(index[d] for d in devices)
        shape, dtype = tuple(buffer.shape), dtype_name(buffer)
        mine = header(call, order, dtype, shape, rejected)
        head_key: Any = ("op", group, number, "header")
        head = Pending(head_key)

        def agree(transport: Transport) -> Pending:
            # a peer that broke abandoned a call this one would be matched with
            transport.heed_peers()
            return transport.all_gather(device, [mine], head_key, group)

        self._server.collective(head, agree)
        if rejected:
            return None
        try:
            rows = self.wait_for(head, f"{call.describe()} (agreeing on the call)")[0]
        except DistributedError:
            self._skip_call(group, number)
            raise
        names = [self.transport.member_name(index[d]) for d in group]
        problem = check_headers(call, rows, names)
        if problem is not None:
            raise DistributedError(problem)
        kind, op = transport_collective(call, dtype)
        key = ("op", group, number)
        pending = Pending(key)
        if kind == "all_gather":
            self._server.collective(
                pending, lambda transport: transport.all_gather(device, [buffer], key, group)
            )
        else:
            self._server.all_reduce(pending, device, [buffer], op, key, group)
        return pending

    def _skip_call(self, group: tuple[Device, ...], number: int) -> None:
        """Call ``number`` of ``group`` failed before its members agreed (one never joined
        it: it raised before, or died): it is over for every member this context hosts, whose
        next call is ``number + 1``. Without that, a member that never made the call would
        make it with its next one, a call behind the others from then on, and every later
        collective of the group would time out (a backward's gradient sync starts a fresh
        round after a failed one for the same reason)."""
        with self._lock:
            for member in group:
                key = (member, group)
                self._sequence[key] = max(self._sequence.get(key, 0), number + 1)

    def wait_for(self, pending: Pending, what: str) -> Any:
        """The result of ``pending`` (one array per buffer), driving the transport meanwhile;
        past the timeout, :class:`~retrograd.DistributedError` saying who it waited for
        (``what`` names the collective)."""
        if not self._server.drive_until(pending, self.config.timeout):
            self._server.op_stalled(pending, what)
            pending.wait(1.0)
        return pending.outcome()

    def record_step(self, step: DeviceStep, ended: float, waited: float) -> None:
        """Count a synced backward in :attr:`stats` (``ended``: when its backward ended;
        ``waited``: seconds it then waited for its gradients)."""
        self.stats.add(step, ended, waited)


_TIMELINE_STEPS = 4096


class _Stats:
    """Totals over the gradient syncs of a context (for benchmarks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self.steps = 0
            self.buckets = 0
            #: steps whose members exchanged their registrations (the others reused the
            #: plan agreed before, on transports that agree once per graph shape)
            self.exchanges = 0
            self.comm_seconds = 0.0
            self.wait_seconds = 0.0
            #: ``(backward ended, gradients synced)`` of the latest steps, ``time.perf_counter``
            #: seconds (one clock for every process of a machine, so ranks can be compared)
            self.timeline: deque[tuple[float, float]] = deque(maxlen=_TIMELINE_STEPS)

    def add(self, step: DeviceStep, ended: float, waited: float) -> None:
        with self._lock:
            self.steps += 1
            self.buckets += len(step.intervals)
            self.exchanges += step.sync.agreement is not None
            self.comm_seconds += step.comm_seconds()
            self.wait_seconds += waited
            self.timeline.append((ended, ended + waited))

    @property
    def hidden_fraction(self) -> float:
        """The share of all-reduce time that overlapped backward (1 - waiting / in flight)."""
        if self.comm_seconds <= 0:
            return 1.0
        return max(0.0, 1.0 - self.wait_seconds / self.comm_seconds)

    def as_dict(self) -> dict[str, float]:
        return {
            "steps": self.steps,
            "buckets": self.buckets,
            "exchanges": self.exchanges,
            "comm_seconds": self.comm_seconds,
            "wait_seconds": self.wait_seconds,
            "hidden_fraction": self.hidden_fraction,
            "timeline": list(self.timeline),
        }
