"""torch's ``torch.multiprocessing``: Python's :mod:`multiprocessing`, plus ``spawn`` and
``start_processes``, which run ``fn(i, *args)`` in ``nprocs`` processes and raise in the parent
when one fails (its traceback included), after stopping the others.

As with torch, a tensor passed to another process arrives as a copy of its values (torch would
share CPU memory; retrograd's tensors are not shared). The DDP idiom runs as written::

    def main(rank, world_size):
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", "12355"
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        ...
        dist.destroy_process_group()

    mp.spawn(main, args=(2,), nprocs=2)
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import sys
import traceback
from multiprocessing import *  # noqa: F403  (torch's module re-exports Python's)
from typing import Any

from .errors import InvalidArgumentError

__all__ = [
    "ProcessContext",
    "ProcessExitedException",
    "ProcessRaisedException",
    "spawn",
    "start_processes",
    *multiprocessing.__all__,
]


class ProcessException(Exception):  # noqa: N818  (torch's names)
    def __init__(self, msg: str, error_index: int, pid: int):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid

    def __reduce__(self) -> Any:
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process's ``fn`` raised; the message carries its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a non-zero code (or a signal) without raising in ``fn``."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int,
                 signal_name: str | None = None):  # fmt: skip
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self) -> Any:
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _stop_with_parent() -> None:
    """Have the kernel send this process SIGINT when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``, as torch's spawned processes do): a parent killed outright (SIGKILL,
    out of memory) leaves no process of the job running without it."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGINT))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def _wrap(fn: Any, index: int, args: tuple, errors: Any) -> None:
    """A spawned process's body: ``fn(index, *args)``; a raised exception's traceback goes to
    the parent through ``errors`` and the process exits with code 1."""
    _stop_with_parent()
    try:
        fn(index, *args)
    except KeyboardInterrupt:
        pass  # the parent stopped the job
    except Exception:
        errors.put(traceback.format_exc())
        raise SystemExit(1) from None


class ProcessContext:
    """The processes of one :func:`start_processes`: ``join()`` until all finished."""

    def __init__(self, processes: list, error_queues: list):
        self.processes, self.error_queues = processes, error_queues
        self.sentinels = {process.sentinel: index for index, process in enumerate(processes)}

    def pids(self) -> list[int]:
        return [int(process.pid) for process in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the processes; ``True`` once all exited successfully, ``False`` at the
        timeout. The first failure stops the others and raises
        :class:`ProcessRaisedException` or :class:`ProcessExitedException`."""
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(self.sentinels.keys(), timeout=timeout)
        failed = None
        for sentinel in ready:
            index = self.sentinels.pop(sentinel)
            process = self.processes[index]
            process.join()
            if process.exitcode != 0 and failed is None:
                failed = index
        if failed is None:
            return not self.sentinels
        self.stop()
        process = self.processes[failed]
        queue = self.error_queues[failed]
        trace = queue.get() if not queue.empty() else None
        # The error raised here keeps this frame (and so this context) for as long as the
        # caller keeps it: the error queues' pipes are closed now, not when it is dropped
        for errors in self.error_queues:
            errors.close()
        if trace is not None:
            raise ProcessRaisedException(
                f"\n\n-- Process {failed} terminated with the following error:\n{trace}",
                failed, process.pid,
            )  # fmt: skip
        code = process.exitcode
        if code < 0:
            name = signal.Signals(-code).name
            raise ProcessExitedException(
                f"process {failed} terminated with signal {name}", failed, process.pid, code, name
            )
        raise ProcessExitedException(
            f"process {failed} terminated with exit code {code}", failed, process.pid, code
        )

    def stop(self) -> None:
        """End every process still running (SIGTERM) and wait for each; join() then returns
        at once."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join()
        self.sentinels.clear()


def start_processes(
    fn: Any,
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """Run ``fn(i, *args)`` for ``i`` in ``range(nprocs)``, each in a new process started by
    ``start_method``; with ``join``, wait for all (raising on the first failure), else return
    the :class:`ProcessContext`."""
    if not isinstance(nprocs, int) or isinstance(nprocs, bool) or nprocs < 1:
        raise InvalidArgumentError(f"spawn: nprocs must be a positive int, got {nprocs!r}")
    context = multiprocessing.get_context(start_method)
    processes, error_queues = [], []
    for index in range(nprocs):
        errors = context.SimpleQueue()
        process = context.Process(
            target=_wrap, args=(fn, index, tuple(args), errors), daemon=daemon
        )
        process.start()
        processes.append(process)
        error_queues.append(errors)
    running = ProcessContext(processes, error_queues)
    if not join:
        return running
    try:
        while not running.join():
            pass
    except KeyboardInterrupt:
        # Ctrl-C (or a kill -INT of this process alone): its processes are stopped and
        # waited for before the interrupt goes on, rather than left running (torch's wait
        # for them at exit, however long their work)
        # (closed now: the interrupt's traceback keeps this frame as long as it is kept)
        running.stop()
        for process, errors in zip(processes, error_queues, strict=True):
            process.close()
            errors.close()
        raise
    return None


def spawn(
    fn: Any,
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """torch's ``spawn``: :func:`start_processes` (``start_method`` ``"spawn"`` by default)."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
