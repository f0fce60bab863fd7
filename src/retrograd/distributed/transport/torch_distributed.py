"""The ``torch`` transport: one device per process, processes started by ``torchrun``,
collectives over ``torch.distributed``: gloo between CPUs, NCCL between GPUs.

::

    torchrun --nproc_per_node 2 train.py      # train.py: DistributedContext.from_launcher(
                                              #     config, engine="torch")

What crosses the wire, and how:

- **Gradient buckets and user collectives**: ``torch.distributed.all_reduce(...,
  async_op=True)`` on two process groups of their own (each issued in one order on every rank,
  as collectives on one group must be), so the two kinds never need a common order. Host
  buffers (NumPy arrays, CPU tensors seen through DLPack) are packed into one CPU tensor that
  shares nothing with the gradients and reduced by gloo; device buffers (CUDA tensors) into one
  CUDA tensor reduced by NCCL (the groups are made with ``"cpu:gloo,cuda:nccl"`` on GPUs).
  ``MEAN`` divides while packing (as the ``mpi`` transport does), so both round alike.
- **Registrations and heartbeats** (the membership's :class:`StoreChannel`): through the
  launcher's key-value store (torchrun's ``TCPStore``), under a prefix of their own: each rank
  writes its registration for a step under a key, so a rank that never registers is *named*
  (its key is the one missing), and writes a heartbeat (counter, step, state) a few times per
  timeout. The store also holds each rank's host and process id, so a peer on this machine
  that has exited is reported as such.

Faults never hang a rank. Creating the context waits for every rank at most ``timeout`` (the
ranks are counted in the store first, so the missing ones are named; torch's own set-up then
runs under a watchdog), gloo and NCCL get ``timeout`` as their own, and every wait of the sync
server has its deadline. A collective a peer never joins cannot be taken back, so after a
timeout the membership is broken: every later operation fails at once, and the process exits
with status 1 at the end without tearing torch.distributed down (which could wait for the
dead peer).

When one rank fails, torchrun stops the others with SIGTERM (after ``--monitor-interval``,
0.1 s). While a rank waits on its peers, the transport catches that signal and fails what is
in flight with :class:`~retrograd.DistributedError` (naming the rank that exited), so the
survivor reports why instead of vanishing; a rank that waits on nobody dies of the signal as
it would without retrograd.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Hashable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np

from ...errors import DistributedError, InvalidArgumentError
from ..config import DistributedConfig, ReduceOperation
from .base import Capabilities
from .ranks import InFlight, RankTransport, StartError

__all__ = ["StoreChannel", "TorchTransport", "launcher_environment"]

_REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: contexts this process has created, in order: the same count on every rank (creating one
#: is collective), so it names a context's keys in the store
_GENERATIONS = itertools.count()


def _load_torch() -> tuple[Any, Any]:
    try:
        import torch
        import torch.distributed as tdist
    except ImportError as error:
        raise DistributedError(
            f'the torch engine needs PyTorch: pip install "retrograd[torch]" ({error})'
        ) from None
    if not tdist.is_available():
        raise DistributedError("the torch engine: this PyTorch build has no torch.distributed")
    return torch, tdist


def launcher_environment() -> dict[str, str]:
    """What ``torchrun`` tells each process (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``, ...); :class:`DistributedError` when it is missing."""
    missing = [name for name in _REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        raise DistributedError(
            "DistributedContext.from_launcher(engine='torch'): run this script under torchrun "
            f"(torchrun --nproc_per_node N script.py); {', '.join(missing)} not set"
        )
    names = (*_REQUIRED_ENV, "LOCAL_RANK", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID")
    return {name: os.environ.get(name, "") for name in names} | {
        "TORCHELASTIC_RESTART_COUNT": os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    }


def _device_kind(device: str | None) -> str:
    """``"cpu"`` or ``"cuda"``: as asked, else where the default backend keeps its tensors."""
    if device is None:
        from ...context import default_backend

        backend = default_backend()
        inner = getattr(backend, "inner", backend)
        try:  # where a tensor made without a device lives (``None``: a host-only backend)
            device = str(inner.device(inner.zeros((0,), "float32", None)) or "cpu")
        except Exception:  # a backend that wants a device named: the host, unless asked
            device = "cpu"
    kind = str(device).partition(":")[0]
    if kind not in ("cpu", "cuda"):
        raise InvalidArgumentError(
            f"DistributedContext.from_launcher(engine='torch'): device must be 'cpu' or "
            f"'cuda', got {device!r}"
        )
    return kind


def _process_gone(pid: int) -> bool:
    """Whether process ``pid`` of this machine has exited (or is a zombie nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


class StoreChannel:
    """The membership's channel through the launcher's key-value store: each rank writes its
    heartbeat and registrations under keys of its own, and reads its peers'."""

    #: a read is a round trip to the store: once per interval
    reads_per_beat = 1
    #: so is a write: a step's begin rides on the next heartbeat
    announces_steps = False

    def __init__(self, store: Any, rank: int, size: int):
        self.store = store
        self.rank, self.size = rank, size
        self.peers = [r for r in range(size) if r != rank]
        #: each rank's (host, process id), once every rank has arrived
        self.processes: dict[int, tuple[str, int]] = {}
        #: the steps this rank's registration keys are kept for
        self._registered: list[int] = []

    def failure(self, error: Exception) -> str | None:
        return f"the launcher's store failed: {error}"  # the store is gone (the launcher died)

    def beat(self, number: int, step: int, state: int) -> None:
        self.store.set(f"hb/{self.rank}", f"{number} {step} {state}")

    def beats(self) -> dict[int, tuple[int, int, int]]:
        if not self.peers:
            return {}
        latest = {}
        for peer, beat in zip(self.peers, self.store.multi_get([f"hb/{p}" for p in self.peers])):
            number, step, state = (int(v) for v in beat.split())
            latest[peer] = (number, step, state)
        return latest

    def flush(self) -> None:
        pass  # every write completes at once

    def post(self, number: int, values: np.ndarray) -> dict[int, str]:
        self.store.set(f"reg/{number}/{self.rank}", values.tobytes())
        # Every rank has read the registrations of two steps back: this rank's previous step
        # agreed, so every rank had registered it, so every rank had read the ones before.
        # (Not so for the previous step: a step that failed on a mismatch ends on one rank
        # while a peer may still be reading.)
        self._registered.append(number)
        if len(self._registered) > 2:
            self.store.delete_key(f"reg/{self._registered.pop(0)}/{self.rank}")
        return {rank: f"reg/{number}/{rank}" for rank in range(self.size)}

    def collect(self, ticket: dict[int, str], waiting: list[int]) -> dict[int, np.ndarray]:
        keys = [ticket[r] for r in waiting]
        if not keys or not self.store.check(keys):
            return {}
        found = self.store.multi_get(keys)
        return {rank: np.frombuffer(data, dtype=np.int64) for rank, data in zip(waiting, found)}

    def absent(self, ticket: dict[int, str], waiting: list[int]) -> list[int]:
        return [r for r in waiting if not self.store.check([ticket[r]])]

    def exited(self, peer: int) -> str | None:
        host, pid = self.processes.get(peer, ("", 0))
        if host == socket.gethostname() and pid and _process_gone(pid):
            return f"rank {peer} has exited (its process {pid} on this machine is gone)"
        return None

    def leave(self) -> None:
        self.store.set(f"closed/{self.rank}", b"1")

    def left(self) -> bool:
        return self.store.check([f"closed/{r}" for r in range(self.size)])

    def close(self, timeout: float) -> None:
        pass  # the keys go with the launcher's store


class TorchTransport(RankTransport):
    """Collectives between the processes of a ``torchrun`` job. See the module docstring."""

    name = "torch"
    capabilities = Capabilities(ordered=True, recoverable=False)

    def __init__(self, config: DistributedConfig, device: str | None = None):
        torch, tdist = _load_torch()
        self.torch, self.tdist = torch, tdist
        env = launcher_environment()
        rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
        self.local_rank = int(env["LOCAL_RANK"] or rank)
        kind = _device_kind(device)
        super().__init__(config, rank, size, kind)
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise DistributedError(
                    f"torch: rank {self.rank} was asked for a CUDA device but torch sees none"
                )
            torch.cuda.set_device(self.local_rank)
            #: this process's torch device (on one machine, ``ctx.device`` names it)
            self.torch_device = torch.device("cuda", self.local_rank)
            self.process_backend = "cpu:gloo,cuda:nccl"
        else:
            self.torch_device = torch.device("cpu")
            self.process_backend = "gloo"
        self._terminated = False
        self._created_default_group = False
        self._groups: tuple[Any, Any] | None = None
        deadline = time.monotonic() + self.timeout
        generation = next(_GENERATIONS)
        prefix = (
            f"retrograd/{env['TORCHELASTIC_RUN_ID'] or 'job'}/"
            f"{env['TORCHELASTIC_RESTART_COUNT']}/{generation}"
        )
        self._root_store = self._connect(env)
        #: this context's keys in the launcher's store
        self.store = tdist.PrefixStore(prefix, self._root_store)
        channel = StoreChannel(self.store, self.rank, self.size)
        self.membership.connect(channel)  # a heartbeat first: peers read it from now on
        self.store.set(f"who/{self.rank}", f"{socket.gethostname()} {os.getpid()}")
        channel.processes = self._arrive(deadline)
        self._make_groups(tdist.PrefixStore(f"{prefix}/pg", self._root_store), deadline)
        self._previous_sigterm: Any = signal.SIG_DFL
        self._sigterm_installed = False
        self._install_sigterm()

    # -- set-up ---------------------------------------------------------------------------------
    def _connect(self, env: dict[str, str]) -> Any:
        """A client of the launcher's store (torchrun's agent hosts it; without torchelastic,
        rank 0 does, as ``init_method="env://"``)."""
        host = env["TORCHELASTIC_USE_AGENT_STORE"] != "True" and self.rank == 0
        try:
            return self.tdist.TCPStore(
                env["MASTER_ADDR"],
                int(env["MASTER_PORT"]),
                self.size if host else None,
                host,
                timeout=timedelta(seconds=self.timeout),
                wait_for_workers=False,
                multi_tenant=True,  # shares the port with the user's own env:// group
            )
        except Exception as error:  # torch raises DistStoreError, RuntimeError, ValueError
            self.membership.never_started("its store could not be reached")
            raise DistributedError(
                f"torch: rank {self.rank} cannot reach the launcher's store at "
                f"{env['MASTER_ADDR']}:{env['MASTER_PORT']} within {self.timeout:g} s: {error}"
            ) from None

    def _arrive(self, deadline: float) -> dict[int, tuple[str, int]]:
        """Wait until every rank has written its ``who`` key (created its context); every
        rank's (host, process id)."""
        keys = [f"who/{r}" for r in range(self.size)]
        while not self.store.check(keys):
            if time.monotonic() > deadline:
                absent = [r for r in range(self.size) if not self.store.check([keys[r]])]
                self.membership.never_started("not every rank created its DistributedContext")
                names = ", ".join(f"rank {r}" for r in absent)
                raise DistributedError(
                    f"torch: rank {self.rank} of {self.size}: {names} did not create its "
                    f"DistributedContext within {self.timeout:g} s"
                )
            time.sleep(0.002)
        processes = {}
        for rank, value in zip(range(self.size), self.store.multi_get(keys)):
            host, _, pid = value.decode().partition(" ")
            processes[rank] = (host, int(pid))
        return processes

    def _make_groups(self, store: Any, deadline: float) -> None:
        """The process groups: torch's default one (unless the program made it) and one for
        gradient buckets, one for user collectives. torch may block here (a peer that stops
        half-way), so it runs on a thread this one waits for at most until ``deadline``."""
        tdist, backend = self.tdist, self.process_backend
        timeout = timedelta(seconds=self.timeout)
        outcome: dict[str, Any] = {}

        def make() -> None:
            try:
                if not tdist.is_initialized():
                    tdist.init_process_group(
                        backend, store=store, rank=self.rank, world_size=self.size, timeout=timeout
                    )
                    outcome["default"] = True
                outcome["groups"] = (
                    tdist.new_group(backend=backend, timeout=timeout),
                    tdist.new_group(backend=backend, timeout=timeout),
                )
            except Exception as error:  # reported by the waiting thread
                outcome["error"] = error

        thread = threading.Thread(target=make, name="retrograd-torch-setup", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        self._created_default_group = bool(outcome.get("default"))
        if thread.is_alive() or "error" in outcome:
            self.membership.never_started("torch.distributed could not be set up")
            why = outcome.get("error") or f"not done within {self.timeout:g} s"
            raise DistributedError(
                f"torch: rank {self.rank} of {self.size}: torch.distributed "
                f"({backend}) could not set up its process groups: {why}"
            )
        self._groups = outcome["groups"]

    def _install_sigterm(self) -> None:
        """Catch torchrun's SIGTERM while this rank waits on its peers (module docstring)."""
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers belong to the main thread
        self._previous_sigterm = signal.getsignal(signal.SIGTERM) or signal.SIG_DFL
        reference = weakref.ref(self)

        def on_sigterm(signum: int, frame: Any) -> None:
            transport = reference()
            if transport is not None and transport._waiting_on_peers():
                # Only a flag: this runs between two bytecodes of the main thread, which may
                # be inside the server; the next poll fails what is in flight.
                transport._terminated = True
                return
            if transport is not None:
                transport._restore_sigterm()
                previous = transport._previous_sigterm
            else:
                previous = signal.SIG_DFL
                signal.signal(signal.SIGTERM, previous)
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                os.kill(os.getpid(), signum)  # the default action, now restored

        signal.signal(signal.SIGTERM, on_sigterm)
        self._sigterm_installed = True

    def _restore_sigterm(self) -> None:
        """Put back the handler found at start (once)."""
        if self._sigterm_installed and threading.current_thread() is threading.main_thread():
            self._sigterm_installed = False
            signal.signal(signal.SIGTERM, self._previous_sigterm)

    def _waiting_on_peers(self) -> bool:
        """Whether something this rank started needs its peers (a collective, an exchange,
        closing): a device waiting for a result always waits on one of these."""
        return not self._closed and (self.needs_progress() or self.membership.closing)

    def _interruption(self) -> str | None:
        if not self._terminated:
            return None
        waiting = [
            f"rank {rank} never registered its distributed parameters for backward step {step}"
            for step, rank in self.membership.unregistered()
        ]
        head = (
            f"rank {self.rank} was stopped by its launcher (SIGTERM: torchrun stops every "
            "rank once one has failed)"
        )
        # torchrun may stop this rank before the library reports the dead peer: say what the
        # rank was waiting for, which the library's own error would have named
        flying = [
            f"the all-reduce of {self._named(item)} was in flight" for item in self._in_flight
        ]
        return "; ".join([head, *flying, *waiting, self.membership.peers_status()])

    # -- collectives -------------------------------------------------------------------------
    def _tensors(self, buffers: Sequence[Any]) -> list[Any]:
        """Buffers (NumPy arrays or tensors) as torch tensors, sharing their memory."""
        tensors = []
        for buffer in buffers:
            if isinstance(buffer, np.ndarray):
                if not buffer.flags.writeable or any(stride < 0 for stride in buffer.strides):
                    buffer = np.array(buffer)  # torch takes neither; only read, so a copy will do
                buffer = self.torch.from_numpy(buffer)
            tensors.append(buffer)
        return tensors

    def _pack(self, tensors: Sequence[Any], scale: int | None) -> Any:
        """One new tensor holding ``tensors`` one after another (on the device of the first
        that is not on the host), each divided by ``scale`` on the way if given (one pass)."""
        torch = self.torch
        target = next((t.device for t in tensors if t.device.type != "cpu"), tensors[0].device)
        flat = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=target)
        offset = 0
        for t in tensors:
            part = flat[offset : offset + t.numel()]
            source = t.reshape(-1).to(target, non_blocking=True)
            if scale is None:
                part.copy_(source)
            else:
                torch.div(source, scale, out=part)
            offset += t.numel()
        return flat

    def _group(self, key: Hashable) -> Any:
        grads_group, ops_group = self._groups
        return grads_group if key[0] == "grad" else ops_group

    def _start_all_reduce(
        self, buffers: Sequence[Any], op: ReduceOperation, key: Hashable, donated: Any
    ) -> tuple[Any, list[Any]]:
        # never reduced in place (no ``in_place`` capability): ``donated`` is not read
        tensors = self._tensors(buffers)
        # MEAN divides by the world size while packing (as ``mpi``: both transports round
        # alike).
        scale = self.size if op is ReduceOperation.MEAN else None
        try:
            flat = self._pack(tensors, scale)
            work = self.tdist.all_reduce(
                flat, op=self.tdist.ReduceOp.SUM, group=self._group(key), async_op=True
            )
        except Exception as error:  # torch raises RuntimeError and its DistError kinds
            raise StartError(f"an all-reduce failed to start: {error}") from None
        base = flat.numpy() if all(isinstance(b, np.ndarray) for b in buffers) else flat
        views, offset = [], 0
        for b, t in zip(buffers, tensors):
            views.append(base[offset : offset + t.numel()].reshape(tuple(b.shape)))
            offset += t.numel()
        return (work, flat), views

    def _start_all_gather(self, buffers: Sequence[Any], key: Hashable) -> tuple[Any, list[Any]]:
        tensors = self._tensors(buffers)
        try:
            flat = self._pack(tensors, None)
            # gloo takes the concatenation form only: every rank's part one after another
            every = self.torch.empty(self.size * flat.numel(), dtype=flat.dtype, device=flat.device)
            work = self.tdist.all_gather_single(every, flat, group=self._group(key), async_op=True)
        except Exception as error:  # torch raises RuntimeError and its DistError kinds
            raise StartError(f"an all-gather failed to start: {error}") from None
        base = every.numpy() if all(isinstance(b, np.ndarray) for b in buffers) else every
        base = base.reshape(self.size, -1)
        views, offset = [], 0
        for b, t in zip(buffers, tensors):
            views.append(base[:, offset : offset + t.numel()].reshape(self.size, *b.shape))
            offset += t.numel()
        return (work, (flat, every)), views

    def _complete(self, handle: Any) -> bool:
        work = handle[0]
        if not work.is_completed():
            return False
        work.wait()  # completed: returns at once, or raises its error
        return True

    @staticmethod
    def _named(item: InFlight) -> str:
        """What ``item`` reduces, as an error names it."""
        kind, number, what = item.pending.key
        if kind == "grad":
            return f"gradient bucket {what + 1} of backward step {number}"
        return "an all_reduce call"

    def _failure(self, item: InFlight, error: Exception) -> str:
        thing = self._named(item)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        peers = self.membership.peers_status()
        return f"the all-reduce of {thing} failed ({first_line}); {peers}"

    def close(self, timeout: float) -> None:
        """Tell peers, wait (at most ``timeout``) until every rank closes, free the process
        groups. A broken transport is only marked closed (tearing down could wait for a dead
        peer)."""
        if self._closed:
            return
        self.membership.close(timeout, self._interruption)
        if self.broken is None:
            for group in self._groups or ():
                self.tdist.destroy_process_group(group)
            if self._created_default_group:
                self.tdist.destroy_process_group()
        self._restore_sigterm()
        self._closed = True
