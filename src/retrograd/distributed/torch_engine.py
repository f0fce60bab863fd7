"""The ``torch`` engine: one device per process, processes started by ``torchrun``, collectives
over ``torch.distributed``: gloo between CPUs, NCCL between GPUs.

::

    torchrun --nproc_per_node 2 train.py      # train.py: DistributedContext.from_launcher(
                                              #     config, engine="torch")

What crosses the wire, and how:

- **Gradient buckets and user ``all_reduce`` calls**: ``torch.distributed.all_reduce(...,
  async_op=True)`` on two process groups of their own (each issued in one order on every rank,
  as collectives on one group must be), so the two kinds never need a common order. Host
  buffers (NumPy arrays, CPU tensors seen through DLPack) are packed into one CPU tensor that
  shares nothing with the gradients and reduced by gloo; device buffers (CUDA tensors) into one
  CUDA tensor reduced by NCCL (the groups are made with ``"cpu:gloo,cuda:nccl"`` on GPUs).
  ``MEAN`` divides while packing (as the MPI engine does), so both engines round alike.
- **Registrations and heartbeats**: through the launcher's key-value store (torchrun's
  ``TCPStore``), under a prefix of their own: each rank writes its registration for a step
  under a key, so a rank that never registers is *named* (its key is the one missing), and
  writes a heartbeat (counter, step, state) a few times per timeout. The store also holds each
  rank's host and process id, so a peer on this machine that has exited is reported as such.

Faults never hang a rank. Creating the context waits for every rank at most ``timeout`` (the
ranks are counted in the store first, so the missing ones are named; torch's own set-up then
runs under a watchdog), gloo and NCCL get ``timeout`` as their own, and every wait of the sync
server has its deadline. A collective a peer never joins cannot be taken back, so after a
timeout the engine is *broken*, as the MPI engine: every later operation fails at once, and
the process exits with status 1 at the end without tearing torch.distributed down (which
could wait for the dead peer).

When one rank fails, torchrun stops the others with SIGTERM (after ``--monitor-interval``,
0.1 s). While a rank waits on its peers, the engine catches that signal and fails what is in
flight with :class:`~retrograd.DistributedError` (naming the rank that exited), so the
survivor reports why instead of vanishing; a rank that waits on nobody dies of the signal as
it would without retrograd.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Hashable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np

from ..device import Device
from ..errors import DistributedError, InvalidArgumentError
from .config import DistributedConfig, ReduceOperation
from .engine import CLOSING, IDLE, STATE_TEXT, Pending, RankCollective

__all__ = ["TorchEngine", "launcher_environment"]

# gloo and NCCL progress on their own threads: polling only decides how soon a completed
# collective is noticed. While backward computes, poll gently; while a device waits for its
# results, poll back to back briefly, then every 0.2 ms (the MPI engine's reasoning: spinning
# long on a machine with few cores slows the peer it waits for).
_POLL_SECONDS = 0.001
_SPIN_SECONDS = 0.002
_BACKED_OFF_POLL_SECONDS = 0.0002
_REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

_ENGINES: weakref.WeakSet = weakref.WeakSet()
_EXIT_HANDLER_REGISTERED = False
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
        from ..context import default_backend

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


class _InFlight:
    __slots__ = ("flat", "pending", "views", "work")

    def __init__(self, pending: Pending, work: Any, flat: Any, views: list[Any]):
        self.pending = pending
        self.work = work
        self.flat = flat  # the buffer reduced in place, kept until completion
        self.views = views


class _Exchange:
    """An all-gather of int64 arrays through the store: each rank's array under its own key,
    so the ranks whose key is missing can be named."""

    __slots__ = ("engine", "keys", "number", "pending", "received")

    def __init__(self, engine: TorchEngine, pending: Pending, number: int, values: np.ndarray):
        self.engine = engine
        self.pending = pending
        self.number = number
        self.keys = {rank: f"reg/{number}/{rank}" for rank in range(engine.size)}
        self.received: dict[int, np.ndarray] = {engine.rank: values}

    def poll(self) -> bool:
        """Advance; true once complete."""
        store = self.engine.store
        waiting = [r for r in range(self.engine.size) if r not in self.received]
        keys = [self.keys[r] for r in waiting]
        if keys and not store.check(keys):
            return False
        for rank, data in zip(waiting, store.multi_get(keys) if keys else ()):
            self.received[rank] = np.frombuffer(data, dtype=np.int64)
        self.pending.finish([self.received[r] for r in range(self.engine.size)])
        return True

    def missing(self) -> list[int]:
        store = self.engine.store
        return [
            r
            for r in range(self.engine.size)
            if r not in self.received and not store.check([self.keys[r]])
        ]


class TorchEngine(RankCollective):
    """Collectives between the processes of a ``torchrun`` job. See the module docstring."""

    name = "torch"
    ordered = True
    recoverable = False

    def __init__(self, config: DistributedConfig, device: str | None = None):
        torch, tdist = _load_torch()
        self.torch, self.tdist = torch, tdist
        env = launcher_environment()
        self.rank, self.size = int(env["RANK"]), int(env["WORLD_SIZE"])
        self.local_rank = int(env["LOCAL_RANK"] or self.rank)
        kind = _device_kind(device)
        members = [Device(kind, r) for r in range(self.size)]
        super().__init__(members, [members[self.rank]])
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
        self.peers = [r for r in range(self.size) if r != self.rank]
        self.timeout = config.timeout
        self.heartbeat_interval = config.heartbeat_interval
        self._in_flight: list[_InFlight] = []
        self._exchanges: list[_Exchange] = []
        self._closing = False
        self._closed = False
        self._terminated = False
        self._spinning_since: float | None = None
        self._step, self._state = 0, IDLE
        self._created_default_group = False
        self._groups: tuple[Any, Any] | None = None
        #: the steps this rank's registration keys are kept for
        self._registered: list[int] = []
        global _EXIT_HANDLER_REGISTERED
        if not _EXIT_HANDLER_REGISTERED:
            atexit.register(_exit_without_teardown_if_broken)
            _EXIT_HANDLER_REGISTERED = True
        _ENGINES.add(self)
        deadline = time.monotonic() + self.timeout
        generation = next(_GENERATIONS)
        prefix = (
            f"retrograd/{env['TORCHELASTIC_RUN_ID'] or 'job'}/"
            f"{env['TORCHELASTIC_RESTART_COUNT']}/{generation}"
        )
        self._root_store = self._connect(env)
        #: this context's keys in the launcher's store
        self.store = tdist.PrefixStore(prefix, self._root_store)
        started = time.monotonic()
        self._heartbeat_number = 0
        self._last_seen = dict.fromkeys(self.peers, started)
        self._peer_beat = dict.fromkeys(self.peers, -1)
        self._peer_state = {peer: (0, IDLE) for peer in self.peers}
        self._peer_process: dict[int, tuple[str, int]] = {}
        self._publish()
        self.store.set(f"who/{self.rank}", f"{socket.gethostname()} {os.getpid()}")
        self._next_heartbeat = started + self.heartbeat_interval
        self._arrive(deadline)
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
            self.broken = "its store could not be reached"
            raise DistributedError(
                f"torch: rank {self.rank} cannot reach the launcher's store at "
                f"{env['MASTER_ADDR']}:{env['MASTER_PORT']} within {self.timeout:g} s: {error}"
            ) from None

    def _arrive(self, deadline: float) -> None:
        """Wait until every rank has written its ``who`` key (created its context)."""
        keys = [f"who/{r}" for r in range(self.size)]
        while not self.store.check(keys):
            if time.monotonic() > deadline:
                absent = [r for r in range(self.size) if not self.store.check([keys[r]])]
                self.broken = "not every rank created its DistributedContext"
                names = ", ".join(f"rank {r}" for r in absent)
                raise DistributedError(
                    f"torch: rank {self.rank} of {self.size}: {names} did not create its "
                    f"DistributedContext within {self.timeout:g} s"
                )
            time.sleep(0.002)
        for rank, value in zip(range(self.size), self.store.multi_get(keys)):
            host, _, pid = value.decode().partition(" ")
            self._peer_process[rank] = (host, int(pid))

    def _make_groups(self, store: Any, deadline: float) -> None:
        """The process groups: torch's default one (unless the program made it) and one for
        gradient buckets, one for ``all_reduce`` calls. torch may block here (a peer that
        stops half-way), so it runs on a thread this one waits for at most until
        ``deadline``."""
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
            self.broken = "torch.distributed could not be set up"
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
            engine = reference()
            if engine is not None and engine._waiting_on_peers():
                # Only a flag: this runs between two bytecodes of the main thread, which may
                # be inside the server; the next poll fails what is in flight.
                engine._terminated = True
                return
            if engine is not None:
                engine._restore_sigterm()
                previous = engine._previous_sigterm
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
        return not self._closed and bool(
            self._in_flight or self._exchanges or self.urgent or self._closing
        )

    # -- collectives -------------------------------------------------------------------------
    def _tensor(self, buffer: Any) -> Any:
        """A buffer (NumPy array or tensor) as a torch tensor, sharing its memory."""
        if not isinstance(buffer, np.ndarray):
            return buffer
        if not buffer.flags.writeable or any(stride < 0 for stride in buffer.strides):
            buffer = np.array(buffer)  # torch takes neither; only read, so a copy will do
        return self.torch.from_numpy(buffer)

    def all_reduce(
        self,
        device: Device,
        buffers: Sequence[Any],
        op: ReduceOperation,
        key: Hashable,
        group: tuple[Device, ...],
        donated: Sequence[bool] | None = None,  # never reduced in place (``donates``)
    ) -> Pending:
        pending = Pending(key)
        if self.broken:
            pending.finish(error=f"torch: {self.broken}")
            return pending
        if tuple(group) != self.members:
            pending.finish(
                error=(
                    "torch: all_reduce runs over every rank (ctx.devices); subgroups are not "
                    f"supported, got {', '.join(map(str, group))}"
                )
            )
            return pending
        if self.size == 1:  # nothing to reduce with: the gradients are the result
            pending.finish(list(buffers))
            return pending
        torch = self.torch
        tensors = [self._tensor(b) for b in buffers]
        dtype = tensors[0].dtype
        if any(t.dtype != dtype for t in tensors):
            pending.finish(error="torch: a fused all-reduce needs one dtype")
            return pending
        on_host = all(isinstance(b, np.ndarray) for b in buffers)
        target = next((t.device for t in tensors if t.device.type != "cpu"), tensors[0].device)
        # One pass packs the buffers into the tensor reduced in place and, for MEAN, divides
        # them by the world size on the way (as the MPI engine: both engines round alike).
        scale = self.size if op is ReduceOperation.MEAN else None
        try:
            flat = torch.empty(sum(t.numel() for t in tensors), dtype=dtype, device=target)
            offset = 0
            for t in tensors:
                part = flat[offset : offset + t.numel()]
                source = t.reshape(-1).to(target, non_blocking=True)
                if scale is None:
                    part.copy_(source)
                else:
                    torch.div(source, scale, out=part)
                offset += t.numel()
            grads_group, ops_group = self._groups
            work = self.tdist.all_reduce(
                flat,
                op=self.tdist.ReduceOp.SUM,
                group=grads_group if key[0] == "grad" else ops_group,
                async_op=True,
            )
        except Exception as error:  # torch raises RuntimeError and its DistError kinds
            self._break(f"an all-reduce failed to start: {error}")
            pending.finish(error=f"torch: {self.broken}")
            return pending
        views, offset = [], 0
        base = flat.numpy() if on_host else flat
        for b, t in zip(buffers, tensors):
            views.append(base[offset : offset + t.numel()].reshape(tuple(b.shape)))
            offset += t.numel()
        self._in_flight.append(_InFlight(pending, work, flat, views))
        return pending

    def all_gather(self, device: Device, values: np.ndarray, key: Hashable) -> Pending:
        pending = Pending(key)
        if self.broken:
            pending.finish(error=f"torch: {self.broken}")
            return pending
        number = int(key[1])
        values = np.ascontiguousarray(values, dtype=np.int64)
        try:
            self.store.set(f"reg/{number}/{self.rank}", values.tobytes())
            # Every rank has read the registrations of two steps back: this rank's previous
            # step agreed, so every rank had registered it, so every rank had read the ones
            # before. (Not so for the previous step: a step that failed on a mismatch ends on
            # one rank while a peer may still be reading.)
            self._registered.append(number)
            if len(self._registered) > 2:
                self.store.delete_key(f"reg/{self._registered.pop(0)}/{self.rank}")
            exchange = _Exchange(self, pending, number, values)
            self._exchanges.append(exchange)
            if exchange.poll():
                self._exchanges.remove(exchange)
        except Exception as error:  # the store is gone (the launcher died)
            self._break(f"the launcher's store failed: {error}")
            pending.finish(error=f"torch: {self.broken}")
        return pending

    def needs_progress(self) -> bool:
        return bool(self._in_flight or self._exchanges)

    def progress(self) -> float | None:
        if self._closed:
            return None
        if self._terminated and self.broken is None:
            self._break(self._termination_reason())
        for item in list(self._in_flight):  # a completion's callbacks may launch more
            if not item.work.is_completed():
                continue
            self._spinning_since = None  # progress: a fresh spin budget
            try:
                item.work.wait()  # completed: returns at once, or raises its error
            except Exception as error:
                self._break(self._failure(item.pending, error))  # fails it and the rest
                return None
            self._in_flight.remove(item)
            item.pending.finish(item.views)
        try:
            for exchange in list(self._exchanges):
                if exchange.poll() and exchange in self._exchanges:
                    self._exchanges.remove(exchange)
            self._heartbeat()
        except Exception as error:  # the store is gone (the launcher died)
            self._break(f"the launcher's store failed: {error}")
        if self._in_flight or self._exchanges:
            if not self.urgent:
                return _POLL_SECONDS
            if self._spinning_since is None:
                self._spinning_since = time.monotonic()
            elif time.monotonic() - self._spinning_since > _SPIN_SECONDS:
                return _BACKED_OFF_POLL_SECONDS
            return 0.0
        self._spinning_since = None
        return max(0.0, self._next_heartbeat - time.monotonic())

    # -- heartbeats ---------------------------------------------------------------------------
    def _publish(self) -> None:
        self._heartbeat_number += 1
        beat = f"{self._heartbeat_number} {self._step} {self._state}"
        self.store.set(f"hb/{self.rank}", beat)

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now < self._next_heartbeat or self._closing:
            return
        self._next_heartbeat = now + self.heartbeat_interval
        self._publish()
        self._read_peers(now)

    def _read_peers(self, now: float) -> None:
        if not self.peers:
            return
        beats = self.store.multi_get([f"hb/{peer}" for peer in self.peers])
        for peer, beat in zip(self.peers, beats):
            number, step, state = (int(v) for v in beat.split())
            if number != self._peer_beat[peer]:
                self._peer_beat[peer] = number
                self._last_seen[peer] = now
            self._peer_state[peer] = (step, state)

    def set_state(self, step: int, state: int) -> None:
        # Published with the next heartbeat (a store round trip per state change would cost
        # every step three); a diagnosis comes a timeout later, when the heartbeats are fresh.
        self._step, self._state = step, state

    # -- faults -------------------------------------------------------------------------------
    def missing(self, pending: Pending) -> list[int] | None:
        for exchange in self._exchanges:
            if exchange.pending is pending:
                with contextlib.suppress(Exception):  # the store is gone: nobody known
                    return exchange.missing()
        return None  # a collective: torch does not say who has not joined

    def member_name(self, index: int) -> str:
        return f"rank {index}"

    def member_status(self, index: int) -> str | None:
        if index == self.rank:
            return None
        with contextlib.suppress(Exception):  # the statuses below are the best known anyway
            self._read_peers(time.monotonic())
        host, pid = self._peer_process.get(index, ("", 0))
        if host == socket.gethostname() and pid and _process_gone(pid):
            return f"rank {index} has exited (its process {pid} on this machine is gone)"
        step, state = self._peer_state[index]
        if state == CLOSING:
            return f"rank {index} closed its distributed context (its process is exiting)"
        silent = time.monotonic() - self._last_seen[index]
        if silent > 3 * self.heartbeat_interval:
            return f"rank {index} has sent no heartbeat for {silent:.1f} s, so it has probably died"
        return (
            f"rank {index} is alive (last heartbeat {silent:.1f} s ago) at backward step {step}, "
            f"{STATE_TEXT.get(state, '?')}"
        )

    def _peers_status(self) -> str:
        known = [self.member_status(peer) for peer in self.peers]
        return "; ".join(text for text in known if text)

    def _failure(self, pending: Pending, error: Exception) -> str:
        kind, number, what = pending.key
        thing = (
            f"gradient bucket {what + 1} of backward step {number}"
            if kind == "grad"
            else ("an all_reduce call")
        )
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return f"the all-reduce of {thing} failed ({first_line}); {self._peers_status()}"

    def _termination_reason(self) -> str:
        waiting = [
            f"rank {rank} never registered its distributed parameters for backward step "
            f"{exchange.number}"
            for exchange in self._exchanges
            for rank in self._quietly_missing(exchange)
        ]
        head = (
            f"rank {self.rank} was stopped by its launcher (SIGTERM: torchrun stops every "
            "rank once one has failed)"
        )
        return "; ".join([head, *waiting, self._peers_status()])

    @staticmethod
    def _quietly_missing(exchange: _Exchange) -> list[int]:
        try:
            return exchange.missing()
        except Exception:  # the store went with the launcher
            return []

    def close(self, timeout: float) -> None:
        """Tell peers, wait (at most ``timeout``) until every rank closes, free the process
        groups. On a broken engine, only mark it closed (tearing down could wait for a dead
        peer)."""
        if self._closed:
            return
        if self.broken is None:
            try:
                self._state = CLOSING
                self._publish()
                self._closing = True
                self.store.set(f"closed/{self.rank}", b"1")
                keys = [f"closed/{r}" for r in range(self.size)]
                deadline = time.monotonic() + timeout
                while not self.store.check(keys):
                    if self._terminated:
                        self._break(self._termination_reason())
                        break
                    if time.monotonic() > deadline:
                        self._break(
                            f"closing: not every rank closed its context ({self._peers_status()})"
                        )
                        break
                    time.sleep(0.002)
            except Exception as error:  # the store is gone
                self._break(f"closing: the launcher's store failed: {error}")
        if self.broken is None:
            for group in self._groups or ():
                self.tdist.destroy_process_group(group)
            if self._created_default_group:
                self.tdist.destroy_process_group()
        self._restore_sigterm()
        self._closed = True


def _exit_without_teardown_if_broken() -> None:
    """At exit: tearing torch.distributed down (its groups' destructors) can wait for a peer
    that is gone, so a process with a broken engine ends here, with status 1."""
    if any(engine.broken for engine in list(_ENGINES)):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # nothing left to report to
                stream.flush()
        os._exit(1)
