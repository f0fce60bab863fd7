"""Round 18 of the reliability work: one regression per defect the sweep
(``test_reliability_sweep_18.py``) and its probes found; each fails on the code before the fix."""

from __future__ import annotations

import gc
import os
import threading
import time
import warnings

import numpy as np
import pytest

import retrograd as rg
from concurrency_cases import DEADLINE, fresh_backend, mlp, open_files, run_in_threads, train
from retrograd import nn
from retrograd.capture import kernels
from retrograd.nn.modules.module import Module


def test_captures_on_two_threads_that_overlap_leave_no_wrapper_behind():
    # Thread A's capture starts, then B's, then A's ends before B's: B had saved A's recording
    # wrappers as the "original" methods and put them back at its end, so the shared inner
    # backend (and Module.__call__, Optimizer.step) kept A's wrappers for ever: every later
    # host read on A's thread raised CaptureError, and later steps were recorded into A.
    backend = fresh_backend()
    inner = backend.inner
    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()

    def capture_on(index):
        if index == 1:  # B starts capturing once A's capture is under way
            assert a_inside.wait(DEADLINE), "A's capture never started"
        with rg.use_backend(backend):
            model = nn.Linear(3, 1)
            opt = rg.optim.SGD(model.parameters(), lr=0.1)

            def step(x):
                (a_inside if index == 0 else b_inside).set()
                # A finishes while B is inside its capture; B once A's capture returned
                assert (b_inside if index == 0 else a_done).wait(DEADLINE), "no other capture"
                loss = (model(x) ** 2).mean()
                opt.step(loss.backward())
                return loss

            captured = rg.capture(step, rg.ones((2, 3)), state=[opt])
            if index == 0:
                a_done.set()
            return captured(rg.ones((2, 3))).item()  # a host read after the capture

    run_in_threads(capture_on, [(0,), (1,)])
    assert not [name for name in ("matmul", "add", "to_numpy") if name in vars(inner)]
    assert not hasattr(Module.__call__, "__wrapped__")
    assert not hasattr(rg.optim.SGD.step, "__wrapped__")
    with rg.use_backend(backend):
        assert rg.ones(2).sum().item() == 2.0  # no capture holds this thread's host reads


def test_two_threads_capturing_on_one_backend_train_as_they_do_alone():
    backend = fresh_backend()
    alone = [train(seed, backend, 2, capture=True, make=mlp) for seed in range(3)]
    together = run_in_threads(
        lambda s: train(s, backend, 2, capture=True, make=mlp), [(s,) for s in range(3)]
    )
    for seed in range(3):
        assert together[seed][0] == alone[seed][0], seed
        for p, q in zip(together[seed][2], alone[seed][2], strict=True):
            np.testing.assert_array_equal(p, q)


def _truncated_npz(tmp_path) -> str:
    path = tmp_path / "model.npz"
    state = {k: v.numpy() for k, v in nn.Linear(3, 2).state_dict().items()}
    np.savez(path, **state)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # the zip directory (at the end) is gone
    return str(path)


def test_load_state_dict_of_a_damaged_file_closes_it_while_the_error_is_kept(tmp_path):
    # np.load(path) opened the file and left it open when the archive's directory could not
    # be read, and _read_archive kept the error in a local (a cycle with its traceback): the
    # descriptor stayed open until the garbage collector ran, or for as long as the caller kept
    # the error (a notebook's last error, a retry loop's).
    path = _truncated_npz(tmp_path)
    model = nn.Linear(3, 2)
    kept = []
    gc.disable()
    try:
        before = open_files()
        for _ in range(3):
            with pytest.raises(
                rg.errors.InvalidArgumentError, match=r"not a readable \.npz"
            ) as info:
                model.load_state_dict(path)
            kept.append(info.value)
        assert open_files() == before
    finally:
        gc.enable()


def test_get_unsafe_globals_in_checkpoint_closes_the_file_it_opens(tmp_path):
    path = tmp_path / "state.pt"
    rg.save({"w": rg.ones(2)}, path)
    gc.collect()  # files earlier tests in this worker left open warn here, not below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rg.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
        gc.collect()
    unclosed = [
        w for w in caught if issubclass(w.category, ResourceWarning) and str(path) in str(w.message)
    ]
    assert not unclosed


def test_threads_compiling_one_fused_kernel_write_and_import_it_once(tmp_path, monkeypatch):
    # Each thread that missed the cache wrote the kernel's file under the same temporary name
    # (the process id only) and renamed it: a thread could truncate the file another was
    # renaming or importing, and every thread compiled the kernel again.
    pytest.importorskip("numba")
    monkeypatch.setattr(kernels, "CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_CACHE", {})
    written = []
    real_replace = kernels.os.replace

    def slow_replace(source, target):
        written.append(source)
        time.sleep(0.2)  # another thread missing the cache now reaches the write
        return real_replace(source, target)

    monkeypatch.setattr(kernels.os, "replace", slow_replace)
    source = "def run(a):\n    return a + 18.0\n"
    out = run_in_threads(lambda: kernels._compiled(source)(np.ones(2)), [()] * 3)
    for value in out:
        np.testing.assert_array_equal(value, [19.0, 19.0])
    kernel_files = [path for path in written if os.path.dirname(path) == str(tmp_path)]
    assert len(kernel_files) == 1, kernel_files  # (Numba's own cache files are renamed too)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".tmp") == []


def test_an_overlapping_capture_does_not_leave_modules_recorded_into_it():
    # The module-call wrapper appended every module called by any thread to the capture's
    # list while the capture ran; it notes only the capturing thread's calls now.
    backend = fresh_backend()
    with rg.use_backend(backend):
        mine, other = nn.Linear(2, 1), nn.Linear(2, 1)
        opt = rg.optim.SGD(mine.parameters(), lr=0.1)
        started, finished = threading.Event(), threading.Event()

        def elsewhere():
            assert started.wait(DEADLINE)
            with rg.no_grad():
                other(rg.ones((1, 2)))
            finished.set()

        thread = threading.Thread(target=elsewhere, daemon=True)
        thread.start()

        def step(x):
            started.set()
            assert finished.wait(DEADLINE)
            loss = mine(x).sum()
            opt.step(loss.backward())
            return loss

        captured = rg.capture(step, rg.ones((1, 2)), state=[opt])
        thread.join(DEADLINE)
        other.eval()  # a module the step never called: switching it must not recapture
        captured(rg.ones((1, 2)))
        assert captured.programs == 1


def _fails_at_rank_one(rank):
    if rank == 1:
        raise ValueError("rank 1 fails")


def test_a_failed_spawn_closes_its_error_pipes_while_the_error_is_kept():
    # The error raised by join() keeps its frame, and so the context with every process's
    # error queue (two pipe ends each), for as long as the caller keeps it. The queues are
    # closed before it is raised; the processes, the caller's to inspect, are closed by it.
    import retrograd.multiprocessing as rmp

    before = open_files()
    context = rmp.spawn(_fails_at_rank_one, nprocs=2, join=False, start_method="fork")
    with pytest.raises(rmp.ProcessRaisedException, match="rank 1 fails") as info:
        while not context.join(DEADLINE):
            pass
    assert info.value.error_index == 1
    for process in context.processes:
        assert process.exitcode is not None  # every process was joined
        process.close()
    assert open_files() == before
