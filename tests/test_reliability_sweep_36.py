"""Reliability sweep 36: concurrency and interrupts.

* Grad mode is per thread, as torch's: ``no_grad``, ``inference_mode`` and
  ``set_grad_enabled(False)`` on one thread leave another thread recording; a new thread
  starts with grad on; nesting of ``enable_grad``/``inference_mode`` reads as torch's.
* A ``DataLoader`` worker's exception comes out as torch re-raises it: its type kept (a
  ``RuntimeError`` where the type cannot be made from a message), its message naming the
  worker (``Caught ValueError in DataLoader worker process 1.``) and holding the original
  traceback; a failed ``worker_init_fn`` fails that worker's first batch. Before, the
  exception came bare, without the worker. ``timeout=`` is honoured, and a
  ``KeyboardInterrupt`` mid-epoch leaves the next epoch whole.
* Ctrl-C (or SIGTERM) while Numba loaded or compiled a kernel ran its handler inside
  llvmlite's ctypes callback, which swallowed the ``KeyboardInterrupt`` and left the kernel
  half-made: ``retrograd train --model gpt`` interrupted in its first steps exited with
  status 1 and "unexpected RuntimeError: no compiled object yet for <Library
  'softmax_grad'>". The signal is now held until the kernel is made, then delivered.
* A ``KeyboardInterrupt`` from an optimizer's step pre-hook during a capture, or during a
  replay of the captured step, leaves the parameters and optimizer of an uninterrupted run.

torch's values below were read from torch 2.13.0 (CPU), whose ``DataLoader`` starts worker
processes (kept here as literals: these tests start none).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import retrograd as rg
from concurrency_cases import open_files
from retrograd import nn, optim
from retrograd.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info


# == grad mode is per thread ======================================================================
def _modes(lib):
    return {
        "no_grad": lib.no_grad,
        "inference_mode": lib.inference_mode,
        "set_grad_enabled": lambda: lib.set_grad_enabled(False),
    }


def _beside_a_mode(lib, mode: str) -> list:
    """What a second thread sees and records while the first holds ``mode``."""
    seen: list = []
    held, done = threading.Event(), threading.Event()

    def other() -> None:
        held.wait(10)
        x = lib.ones(2, requires_grad=True)
        seen.extend([lib.is_grad_enabled(), lib.is_inference_mode_enabled()])
        seen.append((x * 2).sum().requires_grad)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with _modes(lib)[mode]():
        held.set()
        done.wait(10)
        seen.append(lib.is_grad_enabled())  # still off here
    thread.join(10)
    seen.append(lib.is_grad_enabled())
    return seen


def _nesting(lib) -> list:
    seen = []
    with lib.no_grad():
        with lib.enable_grad():
            seen.append(lib.is_grad_enabled())
            with lib.inference_mode():
                seen.append((lib.is_grad_enabled(), lib.is_inference_mode_enabled()))
                with lib.inference_mode(False):
                    seen.append((lib.is_grad_enabled(), lib.is_inference_mode_enabled()))
                with lib.enable_grad():
                    seen.append((lib.is_grad_enabled(), lib.is_inference_mode_enabled()))
        seen.append(lib.is_grad_enabled())
    lib.set_grad_enabled(False)
    try:
        started: list = []
        thread = threading.Thread(target=lambda: started.append(lib.is_grad_enabled()))
        thread.start()
        thread.join(10)
        seen.append(started)
    finally:
        lib.set_grad_enabled(True)
    return seen


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "set_grad_enabled"])
def test_a_grad_mode_held_on_one_thread_leaves_another_recording_as_torchs(mode):
    assert (
        _beside_a_mode(rg, mode) == _beside_a_mode(torch, mode) == [True, False, True, False, True]
    )
    assert rg.is_grad_enabled() and torch.is_grad_enabled()


def test_nested_grad_modes_and_a_new_thread_read_as_torchs():
    assert _nesting(rg) == _nesting(torch)
    assert rg.is_grad_enabled() and not rg.is_inference_mode_enabled()


# == a DataLoader worker raising ==================================================================
class _TwoArgumentError(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)


class _FailsAtThree(Dataset):
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> np.float32:
        if index == 3 and self.error is not None:
            raise self.error
        return np.float32(index)


# torch 2.13: the type of what comes out, and the last line of the original traceback
RAISED = {
    "ValueError": (ValueError("bad sample 3"), ValueError, "ValueError: bad sample 3"),
    "KeyError": (KeyError("k3"), KeyError, "KeyError: 'k3'"),
    "two-argument": (_TwoArgumentError(1, 2), RuntimeError, "_TwoArgumentError: (1, 2)"),
}


@pytest.mark.parametrize("case", list(RAISED))
def test_a_worker_s_error_names_the_worker_and_keeps_torchs_type(case):
    error, kind, last_line = RAISED[case]
    loader = DataLoader(_FailsAtThree(error), batch_size=2, num_workers=2)
    seen = []
    with pytest.raises(kind) as caught:
        for batch in loader:
            seen.append(batch.tolist())
    assert seen == [[0.0, 1.0]]  # batch 1 (indices 2, 3) is worker 1's, as in torch
    lines = str(caught.value).splitlines()  # a KeyError's lines are not quoted (torch's)
    assert lines[0] == f"Caught {type(error).__name__} in DataLoader worker process 1."
    assert lines[1] == "Original Traceback (most recent call last):"
    assert lines[-1].endswith(last_line), lines[-1]
    assert caught.value.__cause__ is None and get_worker_info() is None
    loader.dataset.error = None  # and the loader reads a whole epoch afterwards
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]


def test_a_failing_collate_stream_or_worker_init_names_its_worker():
    def collate(batch):
        raise TypeError("collate refuses")

    loader = DataLoader(list(range(4)), batch_size=2, num_workers=2, collate_fn=collate)
    with pytest.raises(TypeError, match=r"^Caught TypeError in DataLoader worker process 0\."):
        next(iter(loader))

    class Stream(IterableDataset):
        def __iter__(self):
            yield 1
            raise RuntimeError("stream broke")

    with pytest.raises(RuntimeError, match=r"(?s)worker process 0\..*stream broke"):
        list(DataLoader(Stream(), batch_size=None, num_workers=1))

    def init(worker_id):
        if worker_id == 1:
            raise ValueError("no such device")

    # torch's worker sends its init error in place of its first batch: worker 0's comes first
    batches = iter(DataLoader(list(range(6)), batch_size=2, num_workers=2, worker_init_fn=init))
    assert next(batches).tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"(?s)^Caught ValueError in DataLoader worker process 1"):
        next(batches)


# == timeout and an interrupt mid-epoch ===========================================================
class _Slow(Dataset):
    def __init__(self, slow_index: int, seconds: float) -> None:
        self.slow_index, self.seconds = slow_index, seconds

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        if index == self.slow_index:
            time.sleep(self.seconds)
        return index


def test_a_batch_slower_than_timeout_raises_a_runtime_error_in_time():
    loader = DataLoader(_Slow(1, 0.6), batch_size=1, num_workers=1, timeout=0.1)
    batches = iter(loader)
    assert next(batches).tolist() == [0]
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0\.1 seconds"):
        next(batches)
    assert time.monotonic() - started < 0.5
    # as torch's iterator: the next call waits for that same batch again, then goes on
    time.sleep(0.6)
    assert [b.tolist() for b in batches] == [[1], [2], [3]]


def test_a_worker_init_fn_that_hangs_times_out_as_a_batch_does():
    # worker_init_fn ran when the iterator was made, outside the wait of the timeout: one that
    # hangs (a lock, a network mount) hung the loop however small the timeout
    release = threading.Event()

    def init(worker_id):
        if worker_id == 1:
            release.wait(10)

    loader = DataLoader(
        list(range(4)), batch_size=2, num_workers=2, worker_init_fn=init, timeout=0.1
    )
    batches = iter(loader)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0\.1 seconds"):
        next(batches)
    assert time.monotonic() - started < 2
    release.set()  # and once it returns, the epoch goes on whole
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3]]


class _Interrupting(Dataset):
    def __init__(self) -> None:
        self.interrupt_at = [2]  # shared by the workers' copies (a worker's own would not be)

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> int:
        if index in self.interrupt_at:
            self.interrupt_at.clear()
            raise KeyboardInterrupt
        return index


@pytest.mark.parametrize("timeout", [0, 5])
def test_an_interrupt_mid_epoch_stops_the_loop_and_the_next_epoch_is_whole(timeout):
    threads_before = threading.active_count()
    loader = DataLoader(_Interrupting(), batch_size=2, num_workers=2, timeout=timeout)
    seen = []
    with pytest.raises(KeyboardInterrupt):  # never wrapped: it is the user's Ctrl-C
        for batch in loader:
            seen.append(batch.tolist())
    assert seen == [[0, 1]] and get_worker_info() is None
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]
    deadline = time.monotonic() + 5  # the batch threads of a timeout end with their batch
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == threads_before


# == Ctrl-C while Numba makes a kernel =============================================================
class _SignalMidCompile:
    """A listener of Numba's ``numba:compile`` event that sends this process ``signum``
    while the kernel is being compiled (where llvmlite's ctypes callbacks run)."""

    def __init__(self, signum: int) -> None:
        from numba.core import event

        self.signum = signum

        class Listener(event.Listener):
            def on_start(inner, ev):  # noqa: N805
                os.kill(os.getpid(), signum)

            def on_end(inner, ev):  # noqa: N805
                pass

        self.listener = Listener()
        self.event = event

    def __enter__(self):
        self.event.register("numba:compile", self.listener)
        return self

    def __exit__(self, *exc):
        self.event.unregister("numba:compile", self.listener)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_an_interrupt_while_a_kernel_compiles_comes_after_the_kernel_is_whole():
    import numba

    import retrograd.backend.compiled  # noqa: F401  (retrograd's kernels hold the interrupts)

    @numba.njit(cache=False)
    def twice(x):
        return 2 * x

    handler = signal.getsignal(signal.SIGINT)
    with _SignalMidCompile(signal.SIGINT), pytest.raises(KeyboardInterrupt):
        twice(3)
    # the interrupt came once the kernel was made: it is loaded, and the handler is back
    assert len(twice.overloads) == 1
    assert signal.getsignal(signal.SIGINT) is handler
    assert twice(21) == 42

    # a program's own SIGTERM handler runs too, once, after the kernel is made
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:

        @numba.njit(cache=False)
        def thrice(x):
            return 3 * x

        with _SignalMidCompile(signal.SIGTERM):
            assert thrice(2) == 6
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


# == an interrupt during a capture or its replay ===================================================
def _twins():
    rg.manual_seed(0)
    first = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    second = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    second.load_state_dict(first.state_dict())
    return (first, optim.Adam(first.parameters(), lr=0.01)), (
        second,
        optim.Adam(second.parameters(), lr=0.01),
    )


def test_an_interrupt_from_a_step_hook_during_capture_or_replay_keeps_the_run_exact():
    rng = np.random.default_rng(0)
    xs = [rg.tensor(rng.standard_normal((5, 4)).astype(np.float32)) for _ in range(5)]
    (model, opt), (twin, twin_opt) = _twins()
    interrupt = [True]

    def pre_hook(optimizer, args, kwargs):
        if interrupt[0]:
            interrupt[0] = False
            raise KeyboardInterrupt

    opt.register_step_pre_hook(pre_hook)

    def step(x):
        loss = model(x).pow(2).mean()
        opt.step(loss.backward())
        return loss

    def eager(x):
        loss = twin(x).pow(2).mean()
        twin_opt.step(loss.backward())
        return loss

    with pytest.raises(KeyboardInterrupt):
        rg.capture(step, xs[0], state=[model, opt])
    captured = rg.capture(step, xs[0], state=[model, opt])
    eager(xs[0])
    captured(xs[1])
    eager(xs[1])
    interrupt[0] = True
    with pytest.raises(KeyboardInterrupt):
        captured(xs[2])
    for x in xs[2:]:  # the interrupted replay done again, and the rest
        captured(x)
        eager(x)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert opt.state_dict()["state"][0]["step"] == twin_opt.state_dict()["state"][0]["step"] == 5
    gc.collect()


# == spawned processes: an interrupted or killed parent leaves none running ========================
def _sleep_after_writing_pid(index, folder):
    (folder / f"{index}.pid").write_text(str(os.getpid()))
    time.sleep(30)


def _pids_written(folder, count: int, seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        files = sorted(folder.glob("*.pid"))
        if len(files) == count and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.02)
    raise AssertionError(f"the processes did not start within {seconds} s")


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left to a reaper that never comes does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _all_ended(pids: list[int], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_running(pid) for pid in pids)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_an_interrupted_spawn_stops_its_processes_before_the_interrupt_goes_on(tmp_path):
    # The parent alone interrupted (kill -INT, a notebook's stop button) waited in spawn's
    # join, at exit, for its processes to finish their work (torch's too); they are now
    # stopped and reaped before the KeyboardInterrupt leaves spawn
    from retrograd import multiprocessing as mp

    def interrupt_once_started():
        _pids_written(tmp_path, 2)
        # (a moment for the parent to reach join: an interrupt inside os.fork's own
        # after-fork handlers is lost there, Python's "Exception ignored in _releaseLock")
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    files_before = open_files()
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt) as interrupt:
        mp.start_processes(
            _sleep_after_writing_pid, args=(tmp_path,), nprocs=2, start_method="fork"
        )
    pids = _pids_written(tmp_path, 2)
    assert not any(_running(pid) for pid in pids)  # already ended, not ending
    # and their pipes closed, though the interrupt (and its frames) is still kept
    assert interrupt.value is not None and open_files() == files_before
    # and the next job runs
    mp.start_processes(_write_pid_only, args=(tmp_path / "again",), nprocs=2, start_method="fork")
    assert len(list((tmp_path / "again").glob("*.pid"))) == 2


def _write_pid_only(index, folder):
    folder.mkdir(exist_ok=True)
    (folder / f"{index}.pid").write_text(str(os.getpid()))


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_the_processes_of_a_killed_parent_end_with_it(tmp_path):
    # A parent killed outright (SIGKILL, the out-of-memory killer) left its spawned processes
    # running on without it; as torch's, they are now sent SIGINT when it dies
    program = textwrap.dedent(
        f"""
        import os, pathlib, time
        from retrograd import multiprocessing as mp

        def sleep_after_writing_pid(index, folder):
            (folder / f"{{index}}.pid").write_text(str(os.getpid()))
            time.sleep(30)

        mp.start_processes(sleep_after_writing_pid, args=(pathlib.Path({str(tmp_path)!r}),),
                           nprocs=2, start_method="fork")
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", program],
        env=dict(os.environ, PYTHONPATH=str(Path(rg.__file__).resolve().parents[1])),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pids = _pids_written(tmp_path, 2, seconds=60)
        parent.kill()
        parent.wait(10)
        assert _all_ended(pids), "a spawned process outlived its killed parent"
    finally:
        parent.kill()
        parent.wait(10)
        for file in tmp_path.glob("*.pid"):  # (a failed run's processes: not left running)
            if file.read_text() and _running(int(file.read_text())):
                os.kill(int(file.read_text()), signal.SIGKILL)


# == threads stepping one optimizer ===============================================================
@pytest.mark.parametrize("name", ["SGD", "Adagrad"])
def test_threads_stepping_one_optimizer_lose_no_update_and_run_every_hook(name):
    # Hogwild over threads: each thread steps the shared optimizer with the gradients its own
    # backward() returned. Two updates at once read the same value and one was lost (four
    # threads of 60 SGD steps moved the parameter about a third of the way); and a second
    # thread's step skipped the hooks while another step was in progress.
    parameter = nn.Parameter(rg.zeros(8, dtype=rg.float64))
    optimizer = getattr(optim, name)([parameter], lr=0.5)
    hooked = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: hooked.append(1))
    weights = [rg.tensor(np.full(8, k + 1.0)) for k in range(4)]
    barrier = threading.Barrier(4)

    def train(k: int) -> None:
        barrier.wait(10)
        for _ in range(60):
            optimizer.step((parameter * weights[k]).sum().backward())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads switch often: the race shows within a few steps)
    try:
        threads = [threading.Thread(target=train, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert len(hooked) == 240
    if name == "SGD":  # every update counted: -lr * steps * (1 + 2 + 3 + 4), exact in float64
        np.testing.assert_array_equal(parameter.detach().numpy(), np.full(8, -300.0))
    else:  # Adagrad's sum of squares holds every gradient: 60 * (1 + 4 + 9 + 16)
        state = optimizer.state_dict()["state"][0]
        np.testing.assert_array_equal(np.asarray(state["sum"]), np.full(8, 1800.0))
        assert float(np.asarray(state["step"])) == 240
