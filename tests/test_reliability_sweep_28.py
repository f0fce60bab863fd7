"""Round 28 of the reliability sweep: concurrency and interruption, with torch's semantics as
the reference (grad mode is per thread, the default dtype is the process's, a model may be
evaluated from several threads at once, independent graphs differentiate safely on threads).

* Two threads training two models for 20 steps, on backends of their own and on one shared
  backend, under ``NoCheckpointing`` and ``BudgetCheckpointing`` (one budget shared by both
  threads' graphs: safe, and bit-identical to the sequential runs).
* ``no_grad``/``set_grad_enabled(False)``/``inference_mode`` held by one thread while another
  records and differentiates (gradients checked against torch).
* One model evaluated from 4 threads at once under ``no_grad``; a ``DataLoader`` read on a
  worker thread while the main thread trains.
* A ``KeyboardInterrupt`` from a forward hook, a backward hook, a ``collate_fn``, an
  ``lr_lambda`` and an optimizer step pre-hook: afterwards the model, optimizer, schedule and
  budget are consistent, the repeated step gives the uninterrupted run's weights, and the
  memory (the budget's held bytes, live tracked objects) comes back once the graph is dropped.
* ``rg.save`` interrupted after part of the archive was written keeps the previous file.

Every thread is joined with a deadline (``concurrency_cases.run_in_threads``); threads meet
at barriers and events, never sleeps.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import queue
import threading
from collections.abc import Iterator
from unittest import mock

import numpy as np
import pytest
import torch

import cycle_probe
import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812 (torch's name)
from backends import inner_backend
from concurrency_cases import DEADLINE, run_in_threads
from retrograd import nn, optim
from retrograd.utils.data import DataLoader, TensorDataset

STRATEGIES = {
    "none": rg.NoCheckpointing,
    "budget": lambda: rg.BudgetCheckpointing(1 << 11),
}


def backend_of(strategy: str) -> rg.Backend:
    return rg.Autodiff(inner_backend(), checkpointing=STRATEGIES[strategy]())


def weights_of(seed: int) -> list[np.ndarray]:
    gen = np.random.default_rng(seed)
    return [
        (0.4 * gen.standard_normal(shape)).astype(np.float32)
        for shape in ((12, 5), (12,), (3, 12), (3,))
    ]


def data_of(seed: int, steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    gen = np.random.default_rng(seed + 100)
    return [
        (gen.standard_normal((6, 5)).astype(np.float32), gen.integers(0, 3, 6))
        for _ in range(steps)
    ]


def model_of(seed: int) -> nn.Module:
    model = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 3))
    with rg.no_grad():
        for p, w in zip(model.parameters(), weights_of(seed), strict=True):
            p.copy_(rg.tensor(w))
    return model


def train(seed: int, backend: rg.Backend, steps: int = 20) -> tuple[list, list]:
    """Losses and final weights of ``steps`` SGD-with-momentum steps (with a schedule)."""
    with rg.use_backend(backend):
        model = model_of(seed)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        schedule = optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.9**epoch)
        losses = []
        for x, y in data_of(seed, steps):
            loss = F.cross_entropy(model(rg.tensor(x)), rg.tensor(y))
            opt.step(loss.backward())
            schedule.step()
            losses.append(loss.item())
        return losses, [p.detach().numpy().copy() for p in model.parameters()]


@functools.cache
def sequential_run(seed: int, strategy: str) -> tuple[list, list]:
    """:func:`train` alone on a fresh backend (computed once per test module)."""
    return train(seed, backend_of(strategy))


@pytest.fixture
def heap_set_aside() -> Iterator[None]:
    """The test run inside ``cycle_probe.heap_set_aside``: its ``gc.collect()`` calls and
    object counts look only at what the test made. A full collection of a CI worker's heap
    walked every object its earlier files left: about 1 s of CPU each, 2 to 3 a test here,
    for the few hundred objects a test makes. What a test checks is made in it: a graph's
    held bytes or the objects an interrupted step left."""
    with cycle_probe.heap_set_aside():
        yield


def assert_same(got: tuple, expected: tuple, what: str) -> None:
    assert got[0] == expected[0], f"{what}: losses differ"
    for p, q in zip(got[1], expected[1], strict=True):
        np.testing.assert_array_equal(p, q, err_msg=what)


# == 1. two threads training two models ===========================================================
@pytest.mark.parametrize(
    ("strategy", "shared"),
    [("none", True), ("budget", True), ("budget", False)],
    ids=["none-one_backend", "budget-one_backend", "budget-own_backends"],
)
def test_two_threads_training_20_steps_match_the_sequential_runs(strategy, shared, heap_set_aside):
    # (NoCheckpointing on backends of their own: test_reliability_sweep_18's first test)
    if shared:  # one strategy instance (one budget, its pool and plans) for both graphs
        backends = [backend_of(strategy)] * 2
    else:
        backends = [backend_of(strategy), backend_of(strategy)]
    alone = [sequential_run(seed, strategy) for seed in (1, 2)]
    together = run_in_threads(train, [(1, backends[0]), (2, backends[1])])
    for seed, got, expected in zip((1, 2), together, alone, strict=True):
        assert_same(got, expected, f"thread of seed {seed}")
    if strategy == "budget":
        gc.collect()
        for backend in backends:  # every graph dropped: nothing counted as held any more
            assert backend.checkpointing.held_bytes == 0


# == 2. grad mode is per thread ====================================================================
def _torch_grads(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    model = torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights_of(3), strict=True):
            p.copy_(torch.tensor(w))
    torch.nn.functional.cross_entropy(model(torch.tensor(x)), torch.tensor(y)).backward()
    return [p.grad.numpy() for p in model.parameters()]


MODES = {
    "no_grad": rg.no_grad,
    "set_grad_enabled": lambda: rg.set_grad_enabled(False),
    "inference_mode": rg.inference_mode,
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("mode", list(MODES))
def test_a_thread_off_grad_leaves_another_thread_s_recording_whole(strategy, mode):
    backend = backend_of(strategy)
    with rg.use_backend(backend):
        model = model_of(3)
    x, y = data_of(3, 1)[0]
    entered, recorded = threading.Barrier(2), threading.Barrier(2)

    def off_grad():
        with rg.use_backend(backend), MODES[mode]():
            entered.wait(DEADLINE)  # the recorder starts while this thread's block is open
            out = model(rg.tensor(x))
            recorded.wait(DEADLINE)
            return out.requires_grad, rg.is_grad_enabled()

    def recording():
        with rg.use_backend(backend):
            entered.wait(DEADLINE)
            loss = F.cross_entropy(model(rg.tensor(x)), rg.tensor(y))
            recorded.wait(DEADLINE)  # the other thread's block still open
            grads = loss.backward()
            return rg.is_grad_enabled(), [p.grad(grads).numpy() for p in model.parameters()]

    (off_tracked, off_enabled), (on_enabled, grads) = run_in_threads(
        lambda f: f(), [(off_grad,), (recording,)]
    )
    assert (off_tracked, off_enabled, on_enabled) == (False, False, True)
    for g, h in zip(grads, _torch_grads(x, y), strict=True):
        np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)
    assert rg.is_grad_enabled()


def test_the_default_dtype_is_the_process_s_as_torch_s():
    def seen_elsewhere(set_dtype, get_dtype, wanted, previous):
        set_dtype(wanted)
        try:
            return run_in_threads(lambda: str(get_dtype()), [()])[0]
        finally:
            set_dtype(previous)

    theirs = seen_elsewhere(
        torch.set_default_dtype, torch.get_default_dtype, torch.float64, torch.float32
    )
    ours = seen_elsewhere(rg.set_default_dtype, rg.get_default_dtype, rg.float64, rg.float32)
    assert theirs.endswith("float64") and ours.endswith("float64")


# == 3. one model evaluated from 4 threads =========================================================
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_one_model_evaluated_from_four_threads_gives_the_sequential_outputs(strategy):
    backend = backend_of(strategy)
    with rg.use_backend(backend):
        model = nn.Sequential(model_of(4), nn.LayerNorm(3), nn.Softmax(-1))
        inputs = [rg.tensor(x) for x, _ in data_of(4, 4)]
        with rg.no_grad():
            expected = [model(x).numpy().copy() for x in inputs]

    def evaluate(i):
        with rg.use_backend(backend), rg.no_grad():
            outs = [model(inputs[i]) for _ in range(5)]
            return [o.numpy().copy() for o in outs], any(o.requires_grad for o in outs)

    got = run_in_threads(evaluate, [(i,) for i in range(4)])
    for i, (outs, tracked) in enumerate(got):
        assert not tracked
        for out in outs:
            np.testing.assert_array_equal(out, expected[i], err_msg=f"thread {i}")


# == 4. a DataLoader read on a worker thread =======================================================
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_loader_read_on_a_worker_thread_feeds_the_training_of_the_main_thread(strategy):
    gen = np.random.default_rng(5)
    xs = gen.standard_normal((24, 5)).astype(np.float32)
    ys = gen.integers(0, 3, 24)

    def run(threaded: bool):
        backend = backend_of(strategy)
        with rg.use_backend(backend):
            model = model_of(5)
            opt = optim.Adam(model.parameters(), lr=0.05)
            loader = DataLoader(TensorDataset(rg.tensor(xs), rg.tensor(ys)), batch_size=5)
            if threaded:
                handoff: queue.Queue = queue.Queue(maxsize=2)

                def read():
                    with rg.use_backend(backend):
                        for batch in loader:
                            handoff.put(batch, timeout=DEADLINE)
                        handoff.put(None, timeout=DEADLINE)

                reader = threading.Thread(target=read, daemon=True)
                reader.start()
                batches = iter(lambda: handoff.get(timeout=DEADLINE), None)
            else:
                batches = iter(loader)
            losses = []
            for x, y in batches:
                loss = F.cross_entropy(model(x), y)
                opt.step(loss.backward())
                losses.append(loss.item())
            if threaded:
                reader.join(DEADLINE)
                assert not reader.is_alive()
            return losses, [p.detach().numpy().copy() for p in model.parameters()]

    expected = run(threaded=False)
    assert len(expected[0]) == 5
    assert_same(run(threaded=True), expected, "training fed by a reader thread")


# == 5. KeyboardInterrupt in the middle of a training step ========================================
class Run:
    """One training loop (model, optimizer with momentum, LambdaLR, a DataLoader) whose
    steps can be interrupted; ``points`` names where a KeyboardInterrupt is raised once."""

    def __init__(self, strategy: str, interrupt: str | None = None, backend=None):
        self.backend = backend_of(strategy) if backend is None else backend
        self.interrupt = interrupt
        gen = np.random.default_rng(6)
        self.xs = gen.standard_normal((12, 5)).astype(np.float32)
        self.ys = gen.integers(0, 3, 12)
        with rg.use_backend(self.backend):
            self.model = model_of(6)
            self.opt = optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
            self.schedule = optim.lr_scheduler.LambdaLR(self.opt, self._factor)
            self.loader = DataLoader(
                TensorDataset(rg.tensor(self.xs), rg.tensor(self.ys)),
                batch_size=4,
                collate_fn=self._collate,
            )
        self.model[0].register_forward_hook(self._forward_hook)
        self.model[2].register_full_backward_hook(self._backward_hook)
        self.opt.register_step_pre_hook(self._step_pre_hook)

    def _fire(self, where: str) -> None:
        if self.interrupt == where:
            self.interrupt = None
            raise KeyboardInterrupt(where)

    def _factor(self, epoch: int) -> float:
        if epoch:  # the constructor's call is no step
            self._fire("lr_lambda")
        return 0.8**epoch

    def _collate(self, samples):
        self._fire("collate_fn")
        return rg.utils.data.default_collate(samples)

    def _forward_hook(self, module, args, out):
        self._fire("forward_hook")

    def _backward_hook(self, module, grad_input, grad_output):
        self._fire("backward_hook")

    def _step_pre_hook(self, optimizer, args, kwargs):
        self._fire("step_pre_hook")

    def step(self, x: rg.Tensor, y: rg.Tensor) -> None:
        """One step; done again after an interrupt, it resumes after its last finished part
        (the optimizer's update, once made, is not made twice)."""
        with rg.use_backend(self.backend):
            if not getattr(self, "updated", False):
                loss = F.cross_entropy(self.model(x), y)
                self.opt.step(loss.backward())
                self.updated = True
            self.schedule.step()
            self.updated = False

    def epoch(self) -> None:
        """Every batch once; a batch whose step was interrupted is stepped again (a fresh
        iterator when the loader itself was interrupted: the epoch restarts)."""
        done = 0
        while done < 3:
            try:
                for i, (x, y) in enumerate(self.loader):
                    if i < done:
                        continue
                    while True:
                        try:
                            self.step(x, y)
                            break
                        except KeyboardInterrupt:
                            self.interrupted()
                    done += 1
            except KeyboardInterrupt:
                self.interrupted()

    def interrupted(self) -> None:
        """What a user's handler may check: nothing counted for the unfinished step."""
        self.interruptions = getattr(self, "interruptions", 0) + 1

    def state(self) -> tuple:
        momenta = [
            self.opt.state[p]["momentum_buffer"].numpy().copy()
            for p in self.model.parameters()
            if "momentum_buffer" in self.opt.state[p]
        ]
        return (
            [p.detach().numpy().copy() for p in self.model.parameters()],
            momenta,
            self.schedule.last_epoch,
            self.opt.param_groups[0]["lr"],
        )


POINTS = ["forward_hook", "backward_hook", "collate_fn", "lr_lambda", "step_pre_hook"]


@functools.cache
def clean_state(strategy: str) -> tuple:
    """The state after two uninterrupted epochs of :class:`Run`."""
    clean = Run(strategy)
    clean.epoch()
    clean.epoch()
    return clean.state()


def _same_state(got: tuple, expected: tuple, what: str) -> None:
    for a, b in zip(got[0] + got[1], expected[0] + expected[1], strict=True):
        np.testing.assert_array_equal(a, b, err_msg=what)
    assert len(got[1]) == len(expected[1]), what
    assert got[2:] == expected[2:], what


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("point", POINTS)
def test_an_interrupted_step_done_again_gives_the_uninterrupted_run(
    strategy, point, heap_set_aside
):
    run = Run(strategy)
    run.epoch()  # the first epoch clean: a budget's plan is followed in the second
    run.interrupt = point
    run.epoch()
    assert getattr(run, "interruptions", 0) == 1 and run.interrupt is None
    _same_state(run.state(), clean_state(strategy), f"interrupted at {point}")
    if strategy == "budget":
        gc.collect()
        assert run.backend.checkpointing.held_bytes == 0


@pytest.mark.parametrize("point", ["forward_hook", "backward_hook", "step_pre_hook"])
def test_an_interrupt_on_one_thread_leaves_another_thread_s_training_on_one_budget(
    point, heap_set_aside
):
    # one budget (its pool, recorder and planner) serves both threads: the interrupted
    # step's half-recorded trace or failed backward must not change the other's training
    shared = backend_of("budget")

    def interrupted():
        run = Run("budget", backend=shared)
        run.epoch()
        run.interrupt = point
        run.epoch()
        return run.state(), run.interruptions

    (state, interruptions), training = run_in_threads(
        lambda f, *a: f(*a), [(interrupted,), (train, 1, shared)]
    )
    assert interruptions == 1
    _same_state(state, clean_state("budget"), f"interrupted at {point} beside a training thread")
    assert_same(training, sequential_run(1, "budget"), "the training thread")
    gc.collect()
    assert shared.checkpointing.held_bytes == 0


def _live_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("point", ["forward_hook", "backward_hook"])
def test_an_interrupted_graph_once_dropped_leaves_the_memory_of_a_clean_step(
    strategy, point, heap_set_aside
):
    run = Run(strategy)
    with rg.use_backend(run.backend):
        x, y = rg.tensor(run.xs[:4]), rg.tensor(run.ys[:4])
    for _ in range(3):  # warm: the schedule's and optimizer's state exist, plans are made
        run.step(x, y)
    baseline = _live_objects()
    held = getattr(run.backend.checkpointing, "held_bytes", 0)
    for _ in range(3):
        run.interrupt = point
        with contextlib.suppress(KeyboardInterrupt):
            run.step(x, y)
    assert _live_objects() <= baseline + 10
    assert getattr(run.backend.checkpointing, "held_bytes", 0) == held
    run.step(x, y)  # and training goes on


# == 6. rg.save interrupted mid-write ==============================================================
def test_a_save_interrupted_mid_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "model.pt"
    rg.save({"w": rg.ones(50), "step": 1}, path)
    before = path.read_bytes()
    real_copy = rg.serialization._Prepared.copy_to

    def interrupted_midway(prepared, handle):
        real_copy(prepared, handle)  # the archive written, then cut off before the end
        handle.truncate(handle.tell() // 2)
        raise KeyboardInterrupt

    with mock.patch("retrograd.serialization._Prepared.copy_to", interrupted_midway):
        try:
            rg.save({"w": rg.zeros(50), "step": 2}, path)
        except KeyboardInterrupt:
            pass
        else:  # pragma: no cover - the writer must see the interrupt
            raise AssertionError("the interrupt was swallowed")
    assert os.listdir(tmp_path) == ["model.pt"]
    assert path.read_bytes() == before
    assert rg.load(path)["step"] == 1
