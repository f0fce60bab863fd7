"""Run bench_convnets.py's CNN step as its ``--alone`` mode does (all three implementations'
first steps, then one alone), marking each timed step in the heap trace ``rtrace.so`` writes.

``RTRACE_FILE=cnn.tr LD_PRELOAD=./rtrace.so PYTHONPATH=src python
benchmarks/heaptrace/trace_cnn.py "retrograd torch" [STEPS]``
"""

from __future__ import annotations

import ctypes
import gc
import os
import resource
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import common  # noqa: F401  (pins BLAS threads before NumPy loads)

# isort: split
import numpy as np
import torch

import bench_convnets as bc
import retrograd as rg

mark = ctypes.CDLL(None).rtrace_mark if os.environ.get("RTRACE_FILE") else None


def main(alone: str, count: int) -> None:
    torch.set_num_threads(1)
    builder, x_shape, y_shape, classes, sgd, _ = bc.MODELS["cnn"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    y = rng.integers(0, classes, y_shape).astype(np.int64)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend())):
        rg.seed(0)
        state = builder(rg, bc.rnn, bc.RF).state_dict()
    steps = {
        "retrograd numpy": bc.retrograd_step(builder, state, x, y, sgd, rg.NumpyBackend()),
        "retrograd torch": bc.retrograd_step(builder, state, x, y, sgd, rg.TorchBackend("cpu")),
        "torch eager": bc.torch_step(torch, builder, state, x, y, sgd),
    }
    for run in steps.values():
        run()
    step = steps[alone]
    del steps, run
    gc.collect()
    step()
    faults = []
    for i in range(count):
        if mark is not None:
            mark(f"=== step {i}".encode())
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(alone, "page faults per step:", faults)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6)
