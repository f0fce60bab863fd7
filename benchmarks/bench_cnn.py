"""A small CNN training step, retrograd beside PyTorch eager, on one CPU thread.

Batch 64x1x28x28 -> conv(1->32, 3x3) + relu -> conv(32->64, 3x3) + relu -> max_pool 2x2
-> linear(9216 -> 10) -> cross-entropy -> backward -> SGD update. Also times conv2d forward
alone (each of the step's two convolutions). Repetitions are interleaved (retrograd, torch,
retrograd, ...) so that machine noise hits both alike; medians and ratios are reported.

Run: ``PYTHONPATH=src python benchmarks/bench_cnn.py [--reps 30]``
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread, set before NumPy or torch load their thread pools.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

import retrograd as rg  # noqa: E402
import retrograd.nn.functional as F  # noqa: E402, N812  (PyTorch's idiom)
from common import command_line, write_results  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # the environment variables above already did it
    threadpool_limits = None

BATCH, LR = 64, 0.01


def make_data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def uniform(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    return {
        "x": rng.standard_normal((BATCH, 1, 28, 28), dtype=np.float32),
        "y": rng.integers(0, 10, BATCH).astype(np.int64),
        "w1": uniform((32, 1, 3, 3), 9),
        "b1": uniform((32,), 9),
        "w2": uniform((64, 32, 3, 3), 288),
        "b2": uniform((64,), 288),
        "w3": uniform((10, 64 * 12 * 12), 9216),
        "b3": uniform((10,), 9216),
    }


PARAMS = ("w1", "b1", "w2", "b2", "w3", "b3")


class RetrogradCNN:
    def __init__(self, data, checkpointing):
        self.backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=checkpointing)
        with rg.use_backend(self.backend):
            self.x = rg.tensor(data["x"])
            self.y = rg.tensor(data["y"])
            self.params = {name: rg.tensor(data[name]).require_grad() for name in PARAMS}

    def loss(self):
        p = self.params
        h = F.relu(F.conv2d(self.x, p["w1"], p["b1"]))
        h = F.relu(F.conv2d(h, p["w2"], p["b2"]))
        h = F.max_pool2d(h, 2)
        logits = F.linear(h.reshape((BATCH, -1)), p["w3"], p["b3"])
        return F.cross_entropy(logits, self.y)

    def step(self):
        with rg.use_backend(self.backend):
            loss = self.loss()
            grads = loss.backward()
            self.params = {
                name: (p - LR * p.grad(grads)).detach().require_grad()
                for name, p in self.params.items()
            }
        return float(loss.item())


class TorchCNN:
    def __init__(self, torch, data):
        self.torch = torch
        self.nnf = torch.nn.functional
        self.x = torch.from_numpy(data["x"].copy())
        self.y = torch.from_numpy(data["y"].copy())
        self.params = {n: torch.from_numpy(data[n].copy()).requires_grad_() for n in PARAMS}

    def loss(self):
        nnf, p = self.nnf, self.params
        h = nnf.relu(nnf.conv2d(self.x, p["w1"], p["b1"]))
        h = nnf.relu(nnf.conv2d(h, p["w2"], p["b2"]))
        h = nnf.max_pool2d(h, 2)
        logits = nnf.linear(h.reshape(BATCH, -1), p["w3"], p["b3"])
        return nnf.cross_entropy(logits, self.y)

    def step(self):
        loss = self.loss()
        loss.backward()
        with self.torch.no_grad():
            for p in self.params.values():
                p -= LR * p.grad
                p.grad = None
        return float(loss.item())


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(candidates: dict[str, Callable[[], object]], reps: int, warmup: int = 3):
    """Median seconds per call of each candidate, run in turn ``reps`` times."""
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    samples = {name: [] for name in candidates}
    for _ in range(reps):
        for name, fn in candidates.items():
            samples[name].append(timed(fn))
    return {name: statistics.median(values) for name, values in samples.items()}


def report(title, medians, reference="torch"):
    print(f"\n{title}")
    base = medians.get(reference)
    for name, seconds in medians.items():
        ratio = f"  {seconds / base:5.2f}x {reference}" if base and name != reference else ""
        print(f"  {name:<28}{seconds * 1e3:9.2f} ms{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    if threadpool_limits is not None:
        threadpool_limits(1)
    import torch

    torch.set_num_threads(1)
    data = make_data()

    print(
        f"python {platform.python_version()}, numpy {np.__version__}, torch "
        f"{torch.__version__}, retrograd {rg.__version__}"
    )
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} "
        f"({os.cpu_count()} cpus; 1 thread used)"
    )

    # Both start from the same weights and agree on the first loss.
    reference = TorchCNN(torch, data)
    retro = RetrogradCNN(data, rg.NoCheckpointing())
    first = (retro.step(), reference.step())
    print(f"first-step loss: retrograd {first[0]:.6f}, torch {first[1]:.6f}")

    # -- conv2d forward alone -----------------------------------------------------------------
    x1 = rg.tensor(data["x"])
    x2 = F.relu(F.conv2d(x1, rg.tensor(data["w1"]), rg.tensor(data["b1"])))
    t1 = torch.from_numpy(data["x"])
    t2 = torch.from_numpy(x2.numpy().copy())
    convs = {}
    for label, rx, tx, w, b in (
        ("conv1 1->32", x1, t1, "w1", "b1"),
        ("conv2 32->64", x2, t2, "w2", "b2"),
    ):
        rw, rb = rg.tensor(data[w]), rg.tensor(data[b])
        tw, tb = torch.from_numpy(data[w]), torch.from_numpy(data[b])
        medians = interleaved(
            {
                "retrograd": lambda rx=rx, rw=rw, rb=rb: F.conv2d(rx, rw, rb),
                "torch": lambda tx=tx, tw=tw, tb=tb: torch.nn.functional.conv2d(tx, tw, tb),
            },
            args.reps,
        )
        convs[label] = medians
        report(f"conv2d forward, {label} ({args.reps} reps, medians)", medians)
    total = {name: sum(m[name] for m in convs.values()) for name in ("retrograd", "torch")}
    report("conv2d forward, both convolutions of the step", total)

    # -- the training step --------------------------------------------------------------------
    balanced = RetrogradCNN(data, rg.BalancedCheckpointing())
    medians = interleaved(
        {
            "retrograd NoCheckpointing": retro.step,
            "retrograd Balanced": balanced.step,
            "torch": reference.step,
        },
        args.reps,
    )
    report(f"CNN training step ({args.reps} reps, medians)", medians)

    timed = {f"conv2d forward, {label}": m for label, m in convs.items()}
    timed["conv2d forward, both convolutions"] = total
    for strategy, name in (
        ("NoCheckpointing", "NoCheckpointing"),
        ("BalancedCheckpointing", "Balanced"),
    ):
        timed[f"training step, {strategy}"] = {
            "retrograd": medians[f"retrograd {name}"],
            "torch": medians["torch"],
        }
    rows = [
        [
            name,
            f"{m['retrograd'] * 1e3:.2f}",
            f"{m['torch'] * 1e3:.2f}",
            f"{m['retrograd'] / m['torch']:.2f}",
        ]
        for name, m in timed.items()
    ]
    header = ["timed", f"retrograd ms (median of {args.reps})", "torch ms", "retrograd / torch"]
    note = f"First-step loss: retrograd {first[0]:.6f}, torch {first[1]:.6f}."
    title = "CNN training step and its convolutions, batch 64x1x28x28, float32"
    table = {"header": header, "rows": rows, "note": note}
    write_results("cnn", {title: table}, command=command_line())


if __name__ == "__main__":
    main()
