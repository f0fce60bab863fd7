"""``retrograd warmup``: compile the NumPy backend's Numba kernels ahead of time, into Numba's
on-disk cache, so that no later process compiles them (an install step, a CI step).

Kernels are compiled per signature (dtypes, dimensions, memory layouts), on first use: the
warm-up uses them the way training does, one step each of two small models whose layers take
the compiled paths (their sizes pass each kernel's threshold), in float32 on
``Autodiff(NumpyBackend())``:

- *conv*: a ResNet-like net: 3x3 convolutions on 32x32 and 4x4 maps (Winograd's F(4x4, 3x3)
  and F(2x2, 3x3)), a stride-1 transposed convolution, batch norm, ReLU, max pooling, a
  linear layer and cross-entropy, SGD with momentum;
- *gpt*: the ``retrograd train --model gpt`` model (embeddings, layer norm, attention,
  softmax, GELU), AdamW.

Each runs in a process of its own (``RETROGRAD_KERNEL_COMPILE=wait``: compiled in that
process, no background compiler), ``jobs`` at a time. Signatures a program meets beyond these
(float64, other layouts) still compile on first use.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ._usage import CommandError

__all__ = ["WORKLOADS", "run_workload", "warmup"]

WORKLOADS = ("conv", "gpt")


def _conv_step() -> None:
    import numpy as np

    import retrograd as rg
    from retrograd import nn, optim
    from retrograd.nn import functional as F  # noqa: N812

    rng = np.random.default_rng(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),  # 32x32 maps: F(4x4, 3x3)
        nn.ConvTranspose2d(16, 16, 3, padding=1),  # stride 1: Winograd, the weight flipped
        nn.ReLU(),
        nn.MaxPool2d(8),
        nn.Conv2d(16, 16, 3, padding=1),  # 4x4 maps: F(2x2, 3x3), and (a gradient
        nn.Flatten(),  # free of zeros) its weight gradient
        nn.Linear(256, 10),
    )
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = rg.tensor(rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    y = rg.tensor(rng.integers(0, 10, 16))
    optimizer.step(F.cross_entropy(model(x), y).backward())


def _gpt_step() -> None:
    import numpy as np

    import retrograd as rg
    from retrograd import optim

    from .models import GPT, GPTConfig

    rng = np.random.default_rng(0)
    model = GPT(GPTConfig(vocab_size=96, block_size=64, n_layer=1, n_head=4, n_embd=64))
    optimizer = optim.AdamW(model.parameters(), lr=1e-3)
    idx = rg.tensor(rng.integers(0, 96, (8, 64)))
    _, loss = model(idx, rg.tensor(rng.integers(0, 96, (8, 64))))
    optimizer.step(loss.backward())


def run_workload(name: str) -> None:
    """One step of ``name`` (:data:`WORKLOADS`) in this process, on the NumPy backend."""
    import retrograd as rg

    with rg.use_backend(rg.Autodiff(rg.NumpyBackend())):
        rg.seed(0)
        {"conv": _conv_step, "gpt": _gpt_step}[name]()


def _ending(done: subprocess.CompletedProcess) -> str:
    """How a failed workload's process ended: its error (the last line of its output), or the
    signal that killed it (the system's out-of-memory killer sends SIGKILL)."""
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"killed by {name}" + (", out of memory?" if name == "SIGKILL" else "")
    lines = done.stderr.strip().splitlines()
    last = lines[-1].strip() if lines else "no error output"
    return f"exit status {done.returncode}: {last}"


def warmup(jobs: int = 2, echo=print) -> float:
    """Run every workload in a fresh process, ``jobs`` at a time; the seconds taken. A
    workload that fails raises a one-line :class:`~._usage.CommandError`: how its process
    ended and the last line of its error output (its traceback's exception)."""
    from concurrent.futures import ThreadPoolExecutor

    start = time.perf_counter()
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, RETROGRAD_KERNEL_COMPILE="wait")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)

    def run(name: str) -> None:
        began = time.perf_counter()
        program = f"from retrograd.app.warmup import run_workload; run_workload({name!r})"
        done = subprocess.run(
            [sys.executable, "-c", program], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise CommandError(
                f"the {name} warm-up failed ({_ending(done)}) — see its traceback with: "
                f'{Path(sys.executable).name} -c "{program}"'
            )
        echo(f"{name}: kernels compiled or loaded in {time.perf_counter() - began:.1f} s")

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for future in [pool.submit(run, name) for name in WORKLOADS]:
            future.result()
    return time.perf_counter() - start
