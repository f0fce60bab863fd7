"""Convolutional training steps beside PyTorch eager, one CPU thread: the small CNN, ResNet-18
and U-Net, each on retrograd over NumPy, retrograd over ``rg.TorchBackend("cpu")`` (the same
engine on torch's kernels) and torch eager.

The models:

- *cnn*: bench_cnn.py's net, batch 64 of 1x28x28: conv(1->32, 3x3) + relu -> conv(32->64, 3x3)
  + relu -> max-pool 2x2 -> linear(9216 -> 10) -> cross-entropy, plain SGD (lr 0.01);
- *resnet18*: torchvision's ``resnet18`` (``cnn_models.make_resnet18``), batch 16 of
  3x64x64, 1000 classes, SGD with momentum 0.9 and weight decay 1e-4 (torchvision's recipe);
- *unet*: milesial's ``UNet(3, 2)`` (``cnn_models.make_unet``, transposed-convolution
  upsampling), batch 2 of 3x64x64, per-pixel cross-entropy, the same SGD.

The three implementations start from the same weights and data, and their first losses must
agree before anything is timed. Each round runs one step of each in turn (interleaved), so
that the load of a shared machine hits all three alike; every step is timed in wall-clock
and in CPU time of the process (one thread: CPU time leaves out the time other jobs hold the
core), and split into forward, backward and optimizer (CPU time). Reported: medians and
min-max over rounds, and each step's ratio to torch eager's step of the same round (paired),
median and min-max.

Run: ``PYTHONPATH=src python benchmarks/bench_convnets.py [--rounds 10] [--only cnn,resnet18,unet]``
(writes ``benchmarks/results/convnets.json``). ``--alone "retrograd torch"`` (or another
implementation) times that one alone after the first-loss check, its page faults those of a
process of its own, and writes nothing.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time

import common  # noqa: F401  (pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from cnn_models import make_resnet18, make_unet
from common import machine, table, torch_single_thread, write_results
from retrograd import nn as rnn
from retrograd import optim as roptim
from retrograd.nn import functional as RF  # noqa: N812

IMPLEMENTATIONS = ("retrograd numpy", "retrograd torch", "torch eager")


def make_cnn(lib, nn, F):  # noqa: N803  (the libraries' own names)
    """bench_cnn.py's net as a module."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(9216, 10),
    )


# name: (builder, input shape, target shape, classes, SGD options, default rounds)
MODELS = {
    "cnn": (make_cnn, (64, 1, 28, 28), (64,), 10, {"lr": 0.01}, 20),
    "resnet18": (
        make_resnet18,
        (16, 3, 64, 64),
        (16,),
        1000,
        {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
        10,
    ),
    "unet": (
        make_unet,
        (2, 3, 64, 64),
        (2, 64, 64),
        2,
        {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4},
        6,
    ),
}


def retrograd_step(builder, state, x, y, sgd, inner):
    """A step function on ``Autodiff(inner)``: ``step() -> (loss, (forward, backward,
    optimizer) CPU seconds)``."""
    backend = rg.Autodiff(inner)
    with rg.use_backend(backend):
        model = builder(rg, rnn, RF)
        model.load_state_dict(state)
        optimizer = roptim.SGD(model.parameters(), **sgd)
        inputs, targets = rg.tensor(x), rg.tensor(y)
    # The last step's gradients live until the next step begins, as torch's .grad tensors
    # live until its zero_grad(set_to_none=True): the implementations share one process and
    # its heap, and one that freed a step's gradients at its end would leave the freed
    # memory to the others' next steps and grow the heap (page faults) in its own.
    last = []

    def step():
        with rg.use_backend(backend):
            start = time.process_time()
            last.clear()
            loss = RF.cross_entropy(model(inputs), targets)
            forward = time.process_time()
            grads = loss.backward()
            backward = time.process_time()
            optimizer.step(grads)
            last.append(grads)
            value = loss.item()
            end = time.process_time()
        return value, (forward - start, backward - forward, end - backward)

    return step


def torch_step(torch, builder, state, x, y, sgd):
    model = builder(torch, torch.nn, torch.nn.functional)
    model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in state.items()})
    optimizer = torch.optim.SGD(model.parameters(), **sgd)
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        start = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        forward = time.process_time()
        loss.backward()
        backward = time.process_time()
        optimizer.step()
        value = loss.item()
        end = time.process_time()
        return value, (forward - start, backward - forward, end - backward)

    return step


def measure(name: str, rounds: int, torch, alone: str | None = None) -> dict[str, dict[str, list]]:
    """Samples per implementation; with ``alone`` only that implementation's, the other two
    dropped after the first-loss check, so that its steps have the process's heap to
    themselves."""
    builder, x_shape, y_shape, classes, sgd, _ = MODELS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    y = rng.integers(0, classes, y_shape).astype(np.int64)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend())):
        rg.seed(0)
        state = builder(rg, rnn, RF).state_dict()
    steps = {
        "retrograd numpy": retrograd_step(builder, state, x, y, sgd, rg.NumpyBackend()),
        "retrograd torch": retrograd_step(builder, state, x, y, sgd, rg.TorchBackend("cpu")),
        "torch eager": torch_step(torch, builder, state, x, y, sgd),
    }
    first = {label: step()[0] for label, step in steps.items()}
    reference = first["torch eager"]
    for loss in first.values():
        if abs(loss - reference) > 1e-3 * max(1.0, abs(reference)):
            raise SystemExit(f"{name}: first losses differ: {first}")
    if alone is not None:
        steps = {alone: steps[alone]}
        gc.collect()
    for step in steps.values():  # a second warm-up step each
        step()
    samples = {label: {"wall": [], "cpu": [], "phases": [], "faults": []} for label in steps}
    for _ in range(rounds):
        for label, step in steps.items():
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            wall, cpu = time.perf_counter(), time.process_time()
            _, phases = step()
            samples[label]["wall"].append(time.perf_counter() - wall)
            samples[label]["cpu"].append(time.process_time() - cpu)
            samples[label]["phases"].append(phases)
            samples[label]["faults"].append(
                resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            )
    return samples


def summarize(name: str, samples: dict[str, dict[str, list]]) -> list[list[str]]:
    eager = samples["torch eager"]
    rows = []
    for label in IMPLEMENTATIONS:
        s = samples[label]
        wall, cpu = np.array(s["wall"]) * 1e3, np.array(s["cpu"]) * 1e3
        cpu_ratio = np.array(s["cpu"]) / np.array(eager["cpu"])
        wall_ratio = np.array(s["wall"]) / np.array(eager["wall"])
        phases = np.median(np.array(s["phases"]), axis=0) * 1e3
        rows.append(
            [
                name,
                label,
                f"{np.median(wall):.1f} [{wall.min():.1f}-{wall.max():.1f}]",
                f"{np.median(cpu):.1f} [{cpu.min():.1f}-{cpu.max():.1f}]",
                f"{np.median(cpu_ratio):.3f} [{cpu_ratio.min():.3f}-{cpu_ratio.max():.3f}]",
                f"{np.median(wall_ratio):.3f} [{wall_ratio.min():.3f}-{wall_ratio.max():.3f}]",
                " / ".join(f"{p:.1f}" for p in phases),
                f"{np.median(s['faults']):.0f}",
            ]
        )
    return rows


HEADER = [
    "model",
    "implementation",
    "wall ms, median [min-max]",
    "CPU ms, median [min-max]",
    "CPU / torch eager, paired",
    "wall / torch eager, paired",
    "CPU ms: forward / backward / optimizer",
    "page faults per step, median",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="rounds per model")
    parser.add_argument("--only", default=",".join(MODELS), help="comma-separated models")
    parser.add_argument(
        "--alone",
        choices=IMPLEMENTATIONS,
        help="time only this implementation, in a process of its own (no results file)",
    )
    args = parser.parse_args()
    torch = torch_single_thread()
    if torch is None:
        raise SystemExit("bench_convnets needs torch")
    print(machine())
    if args.alone:
        for name in args.only.split(","):
            s = measure(name, args.rounds or MODELS[name][-1], torch, args.alone)[args.alone]
            cpu = np.array(s["cpu"]) * 1e3
            print(
                f"{name} {args.alone} alone: CPU ms {np.median(cpu):.1f} "
                f"[{cpu.min():.1f}-{cpu.max():.1f}], page faults per step "
                f"{np.median(s['faults']):.0f}"
            )
        return
    rows = []
    for name in args.only.split(","):
        rounds = args.rounds or MODELS[name][-1]
        rows += summarize(name, measure(name, rounds, torch))
        print(table(rows[-3:], HEADER), flush=True)
    print()
    print(table(rows, HEADER))
    path = write_results(
        "convnets",
        {"steps": {"header": HEADER, "rows": rows, "unit": "ms"}},
        command="PYTHONPATH=src python benchmarks/bench_convnets.py " + " ".join(sys.argv[1:]),
        notes=(
            "One thread each; rounds interleave the three implementations; CPU time is the "
            "process's (it leaves out time other jobs hold the core); ratios are paired per "
            "round. Measured on a machine shared with other jobs unless the notes say otherwise."
        ),
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
