"""Memory is part of correctness: flat training loops, graphs freed when unreferenced, saved
states released at their last use, deep graphs without recursion."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

TRACEMALLOC = (
    "tracemalloc sees NumPy's allocations, not torch's CPU allocator (which keeps no counters)"
)

STRATEGIES = [rg.NoCheckpointing(), rg.BalancedCheckpointing()]
IDS = ["none", "balanced"]


def _mlp_step(params, x, target):
    w1, b1, w2, b2 = params
    hidden = (x @ w1 + b1).gelu()
    out = hidden @ w2 + b2
    loss = ((out - target) ** 2).mean()
    grads = loss.backward()
    return [(p - 0.05 * p.grad(grads)).detach().require_grad() for p in params], loss.item()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=IDS)
def test_training_loop_memory_stays_flat(strategy):
    rng = np.random.default_rng(0)
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        params = [
            rg.tensor(rng.normal(0, 0.3, (8, 16))).require_grad(),
            rg.tensor(np.zeros(16)).require_grad(),
            rg.tensor(rng.normal(0, 0.3, (16, 2))).require_grad(),
            rg.tensor(np.zeros(2)).require_grad(),
        ]
        x = rg.tensor(rng.normal(size=(32, 8)))
        target = rg.tensor(rng.normal(size=(32, 2)))
        losses = [0.0, 0.0]  # first and last: a growing list would itself be a leak
        try:
            for step in range(1200):
                if step == 150:  # (traced from here: the warm-up runs at full speed)
                    tracemalloc.start()
                params, loss = _mlp_step(params, x, target)
                losses[min(step, 1)] = loss
                if step == 199:  # (the live set then was allocated while traced, as later)
                    gc.collect()
                    early = tracemalloc.take_snapshot()
            gc.collect()
            late = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
    assert losses[-1] < losses[0]
    # 1000 more steps may not leave more than a few KiB behind (no per-step leak: a tuple a
    # step is 40 bytes, 40 KiB here). The first 200 steps are warm-up (caches, interned
    # shapes). On the torch backend, torch's argument parser once kept a 67-byte block now and
    # then for a ``torch.Size`` argument (19 KB over these steps in ci124, in a worker that had
    # run other tests): the backend now hands torch plain tuples, see test_torch_backend.py.
    # Counted where Python allocated it: retrograd's code, or this loop (what NumPy and torch
    # allocate for a call is counted at the line that called them); a thread another test of
    # this worker left running is not this loop's leak (seen once: 18 KB on the torch pass).
    ours = [tracemalloc.Filter(True, "*retrograd*"), tracemalloc.Filter(True, __file__)]
    growth = sum(
        stat.size_diff
        for stat in late.filter_traces(ours).compare_to(early.filter_traces(ours), "filename")
    )
    assert growth < 16 * 1024, f"memory grew by {growth} bytes over 1000 steps"


def test_unreferenced_graph_is_freed_without_backward():
    x = rg.tensor(np.ones((64, 64))).require_grad()
    y = (x * 2.0).exp().sin()
    node = weakref.ref(y.primitive.node)
    parent = weakref.ref(y.primitive.node.parents[0])
    del y
    assert node() is None and parent() is None


@pytest.mark.numpy_only(TRACEMALLOC)
def test_backward_releases_saved_states_even_if_the_root_is_kept():
    # NoCheckpointing whatever RETROGRAD_CHECKPOINTING says: it is the one that saves them
    x = rg.tensor(np.ones((256, 256)), backend=rg.Autodiff(inner_backend())).require_grad()
    tracemalloc.start()
    try:
        loss = ((x * 3.0).sin() * (x * 2.0).cos()).sum()  # saves several 512 KiB arrays
        before = tracemalloc.get_traced_memory()[0]
        grads = loss.backward()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    gradient_bytes = x.grad(grads).numpy().nbytes
    assert before > 3 * gradient_bytes  # the saved intermediates
    assert after < before - 2 * gradient_bytes  # released although `loss` is still alive
    assert loss.primitive.node.consumed


@pytest.mark.parametrize("strategy", STRATEGIES, ids=IDS)
def test_twenty_thousand_op_chain(strategy):
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        x = rg.tensor([0.5, -0.25], dtype="float64").require_grad()
        y = x
        for _ in range(20_000):
            y = y * 0.9999 + 0.0001
        grads = y.sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), [0.9999**20_000] * 2, rtol=1e-9)


def test_deep_graph_is_freed_without_recursion_error():
    x = rg.tensor([1.0]).require_grad()
    y = x
    for _ in range(100_000):
        y = y + 1.0
    head = weakref.ref(y.primitive.node)
    del y  # deallocating 100,000 nested nodes must not overflow the C stack
    assert head() is None


@pytest.mark.numpy_only(TRACEMALLOC)
def test_balanced_keeps_less_after_forward_than_no_checkpointing():
    def saved_after_forward(strategy):
        with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
            w = rg.tensor(np.ones((128, 128), np.float32) * 0.01).require_grad()
            x = rg.tensor(np.ones((128, 128), np.float32))
            tracemalloc.start()
            try:
                h = x @ w
                for _ in range(12):
                    h = (h.sin() * 0.5 + h).tanh()  # memory-bound chain
                loss = h.sum()
                size = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
            grads = loss.backward()
            return size, w.grad(grads).numpy()

    plain_size, plain_grad = saved_after_forward(rg.NoCheckpointing())
    balanced_size, balanced_grad = saved_after_forward(rg.BalancedCheckpointing())
    assert np.array_equal(plain_grad, balanced_grad)
    assert balanced_size < 0.3 * plain_size


class _CountingDevice(rg.NumpyBackend):
    """A backend whose "device" allocator counts the bytes of every ``exp`` it computes (and
    frees nothing): what ``memory_allocated`` reports on a GPU, made visible on the CPU."""

    def __init__(self):
        self.now = self.peak = 0
        self.traced = []

    def memory_allocated(self):
        self.traced.append(tracemalloc.is_tracing())
        return self.now, self.peak

    def reset_peak_memory(self):
        self.peak = self.now

    def exp(self, x):
        out = np.exp(x)
        self.now += out.nbytes
        self.peak = max(self.peak, self.now)
        return out


def test_step_memory_on_a_device_reads_the_backends_allocator_counters():
    from retrograd.memory import measure_step_memory

    device = _CountingDevice()
    backend = rg.Autodiff(device)
    x = rg.tensor(np.ones((64, 64), np.float32), backend=backend).require_grad()
    measured = measure_step_memory(lambda: x.exp().exp().sum(), [x])
    assert measured.peak_activation_bytes == 2 * 64 * 64 * 4  # the two exps, as counted
    assert measured.after_forward_bytes == 2 * 64 * 64 * 4
    assert device.traced and not any(device.traced)  # tracemalloc stayed off


@pytest.mark.numpy_only(TRACEMALLOC)
def test_gelu_output_is_freed_when_the_next_layers_backward_has_read_it():
    """GELU's backward reads its input only (as torch's): its output, which the next matmul
    saves, goes at that matmul's backward instead of being held to the GELU's (at GPT-small's
    shapes that held the activation peak 4 MiB above torch's)."""
    from retrograd.memory import measure_step_memory

    rng = np.random.default_rng(0)
    rows, width = 512, 1024
    with rg.use_backend(rg.Autodiff(inner_backend(), rg.NoCheckpointing())):
        x = rg.tensor(rng.standard_normal((rows, 64)).astype(np.float32))
        w1 = rg.tensor(rng.standard_normal((64, width)).astype(np.float32) * 0.1).require_grad()
        w2 = rg.tensor(rng.standard_normal((width, 1)).astype(np.float32) * 0.1).require_grad()
        step = lambda: ((x @ w1).gelu() @ w2).sum()  # noqa: E731
        step().backward()  # a process's first GELU compiles its kernel: 30 MB traced
        memory = measure_step_memory(step, [w1, w2])
    hidden = rows * width * 4  # one (rows, width) float32 array
    # forward keeps x @ w1 and its GELU; at GELU's backward: x @ w1, the gradient arriving
    # and the one leaving (2 MiB each), not the GELU's output on top
    assert memory.after_forward_bytes >= 2 * hidden
    assert memory.peak_activation_bytes < 3.5 * hidden


@pytest.mark.numpy_only(TRACEMALLOC)
def test_a_parameter_gradient_made_beside_an_input_gradient_is_not_an_activation():
    """A fused op's backward (linear) makes the gradients of its input and its weight in one
    rule; the weight's registers first, so the step's activation peak leaves it out."""
    from retrograd.memory import measure_step_memory

    rng = np.random.default_rng(1)
    with rg.use_backend(rg.Autodiff(inner_backend(), rg.NoCheckpointing())):
        x = rg.tensor(rng.standard_normal((4, 1024)).astype(np.float32)).require_grad()
        w = rg.tensor(rng.standard_normal((1024, 1024)).astype(np.float32)).require_grad()
        b = rg.tensor(np.zeros(1024, np.float32)).require_grad()
        memory = measure_step_memory(
            lambda: rg.nn.functional.linear(x * 2.0, w, b).sum(), [x, w, b]
        )
    # the weight's gradient alone is 4 MiB; x, the output and their gradients are 16 KiB each
    assert memory.peak_activation_bytes < 256 * 1024
