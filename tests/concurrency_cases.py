"""Shared pieces of the round-18 reliability tests (``test_reliability_sweep_18.py`` and
``test_reliability_regressions_18.py``): running functions on threads with a deadline, a small
seeded training loop whose losses, gradients and parameters are compared bit for bit, and the
process's open files and threads.

Every thread is joined with a timeout: a deadlock fails the test (naming the threads still
running) instead of blocking the suite.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

import backends
import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812 (torch's name)
from retrograd import nn

#: seconds a test waits for its threads before it fails as a hang
DEADLINE = 60.0

STRATEGIES = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
    "budget": lambda: rg.BudgetCheckpointing(1 << 12),
}


def fresh_backend(strategy: str = "none") -> rg.Backend:
    """An autodiff backend of its own, on the suite's inner backend."""
    return rg.Autodiff(backends.inner_backend(), checkpointing=STRATEGIES[strategy]())


@contextmanager
def fine_switching() -> Iterator[None]:
    """Let the interpreter switch threads every few microseconds, so threads interleave
    inside the library's Python (CPython's default is every 5 ms)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def run_in_threads(fn: Callable[..., Any], args: Sequence[tuple]) -> list[Any]:
    """``fn(*a)`` for each ``a`` of ``args``, each on its own thread, all started together; the
    results in order. A thread's error is raised here (with its traceback in the message);
    threads not done after :data:`DEADLINE` seconds fail the test as a hang."""
    results: list[Any] = [None] * len(args)
    errors: list[str] = []
    start = threading.Barrier(len(args))
    threads_of_torch = _torch_threads()

    def body(index: int) -> None:
        try:
            _set_torch_threads(threads_of_torch)
            start.wait(DEADLINE)
            results[index] = fn(*args[index])
        except BaseException:  # reported by the caller's thread
            errors.append(traceback.format_exc())

    threads = [
        threading.Thread(target=body, args=(i,), name=f"r18-{i}", daemon=True)
        for i in range(len(args))
    ]
    with fine_switching():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
    hung = [thread.name for thread in threads if thread.is_alive()]
    assert not hung, f"threads {hung} still running after {DEADLINE} s: a deadlock"
    assert not errors, errors[0]
    return results


def _torch_threads() -> int | None:
    """The calling thread's torch thread count (None without torch)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - a dev dependency
        return None
    return torch.get_num_threads()


def _set_torch_threads(count: int | None) -> None:
    """Give this thread the thread count the test's own thread has. OpenMP's thread count
    is a per-thread setting: the suite's per-worker limit (``tests/conftest.py``) reaches
    only the thread that set it, and a new thread's MKL/OpenMP kernels ran as wide as the
    machine, splitting their sums otherwise (on the torch backend the threads' gradients
    differed from one thread's in the last bits: torch does the same)."""
    if count is not None:
        import torch

        torch.set_num_threads(count)


class Net(nn.Module):
    """A convolution, GELU, layer norm, a GRU over the rows and a linear head: kernels with
    compiled NumPy paths, a recurrent loop and a reduction-heavy norm in one small step."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.norm = nn.LayerNorm(4 * 6 * 6)
        self.rnn = nn.GRU(6, 5, batch_first=True)
        self.head = nn.Linear(4 * 6 * 6 + 5, 3)

    def forward(self, x: rg.Tensor) -> rg.Tensor:
        h = self.norm(F.gelu(self.conv(x)).flatten(1))
        r, _ = self.rnn(x[:, 0])
        return self.head(rg.cat([h, r[:, -1]], 1))


def seeded_net(seed: int, make: Callable[[], nn.Module] = Net) -> nn.Module:
    """A :class:`Net` (or what ``make`` builds) whose parameters come from NumPy's generator
    (no retrograd RNG: the threads of a test must not draw from one shared generator in an
    order of their own)."""
    model = make()
    gen = np.random.default_rng(seed)
    with rg.no_grad():
        for p in model.parameters():
            p.copy_(rg.tensor((0.3 * gen.standard_normal(p.shape)).astype(np.float32)))
    return model


def mlp() -> nn.Module:
    """A small stand-in for :class:`Net` where its recurrent loop would cost too much (a
    captured step's recording, on the torch backend): the same input and classes."""
    return nn.Sequential(nn.Flatten(), nn.Linear(72, 16), nn.Tanh(), nn.Linear(16, 3))


def batches(seed: int, steps: int) -> list[tuple[rg.Tensor, rg.Tensor]]:
    """``steps`` batches of :class:`Net`'s input, of sizes 5, 6 and 7 in turn."""
    gen = np.random.default_rng(seed + 1000)
    return [
        (
            rg.tensor(gen.standard_normal((5 + s % 3, 2, 6, 6)).astype(np.float32)),
            rg.tensor(gen.integers(0, 3, 5 + s % 3)),
        )
        for s in range(steps)
    ]


def train(
    seed: int,
    backend: rg.Backend | None = None,
    steps: int = 4,
    capture: bool = False,
    make: Callable[[], nn.Module] = Net,
):
    """Train :func:`seeded_net` with Adam for ``steps`` steps on ``backend`` (the default if
    ``None``); the losses, every step's gradients and the final parameters, as NumPy."""
    with rg.use_backend(backend if backend is not None else rg.default_backend()):
        model = seeded_net(seed, make)
        opt = rg.optim.Adam(model.parameters(), lr=0.01)
        seen: list[list[np.ndarray]] = []

        def step(x: rg.Tensor, y: rg.Tensor) -> rg.Tensor:
            loss = F.cross_entropy(model(x), y)
            grads = loss.backward()
            if not capture:
                seen.append([p.grad(grads).numpy().copy() for p in model.parameters()])
            opt.step(grads)
            return loss

        data = batches(seed, steps)
        if capture:  # one shape for every step: one program
            data = [data[0]] * steps
            step = rg.capture(step, *data[0], state=[model, opt])
        losses = [step(x, y).item() for x, y in data]
        return losses, seen, [p.detach().numpy().copy() for p in model.parameters()]


def assert_same_run(got: tuple, expected: tuple, what: str) -> None:
    """Losses, gradients and parameters of two :func:`train` runs equal bit for bit."""
    assert got[0] == expected[0], f"{what}: losses {got[0]} != {expected[0]}"
    for step, (a, b) in enumerate(zip(got[1], expected[1], strict=True)):
        for g, h in zip(a, b, strict=True):
            np.testing.assert_array_equal(g, h, err_msg=f"{what}: gradient of step {step}")
    for p, q in zip(got[2], expected[2], strict=True):
        np.testing.assert_array_equal(p, q, err_msg=f"{what}: parameters")


def open_files() -> int:
    """How many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


def other_threads() -> list[str]:
    """The names of the live threads other than this one."""
    me = threading.current_thread()
    return sorted(t.name for t in threading.enumerate() if t is not me)
