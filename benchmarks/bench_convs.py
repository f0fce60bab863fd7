"""The roofline of the convolutions of the CNN benchmarks: each layer's FLOPs and bytes against
this machine's measured peak GEMM rate and memory bandwidth, and how close retrograd's NumPy
kernels and torch's own (oneDNN) come to it, one CPU thread.

Measured first, on this machine: the peak float32 GEMM rate (a 2048 x 2048 product, NumPy's
BLAS and torch's, the better of repeated runs) and the memory bandwidth (a copy of a 256 MiB
array: bytes read plus written per second). Then every distinct convolution of the three
models of bench_convnets.py (the small CNN, ResNet-18 at batch 16 and U-Net at batch 2, both
on 64x64 images; their shapes recorded from a forward pass): forward, and the joint backward
(input and weight gradients; the weight's alone where the input is the data), each timed in
CPU time, best of ``--repeats`` runs. FLOPs count the multiply-adds of the dense product (2 per
multiply-add, padding included as the kernels compute it); bytes are the least traffic, each
operand read and each result written once, float32. The roofline time is ``max(FLOPs / peak,
bytes / bandwidth)``; "of roofline" is that time over the measured one.

Run: ``PYTHONPATH=src python benchmarks/bench_convs.py [--repeats 5] [--only cnn,resnet18,unet]``
(writes ``benchmarks/results/convs.json``). Two variants print their table without writing it:
``--split`` times the backward's input and weight gradients apart (the passes ``input grad`` and
``weight grad``), and ``--cold`` flushes the caches (a copy of 64 MiB) before every timed call,
as a training step finds a layer's weight: last touched by the previous step's update.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import common  # noqa: F401  (pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from bench_convnets import MODELS
from common import machine, table, torch_single_thread, write_results
from retrograd import nn as rnn
from retrograd.nn import functional as RF  # noqa: N812

BYTES = 4  # float32


#: Set by ``--cold``: called before every timed call (a copy that evicts the caches).
FLUSH: list = []


def best_seconds(function, repeats: int) -> float:
    """The least CPU time of ``repeats`` calls (after one warm-up call)."""
    function()
    best = math.inf
    for _ in range(repeats):
        for flush in FLUSH:
            flush()
        start = time.process_time()
        function()
        best = min(best, time.process_time() - start)
    return best


def peak_gemm(torch, repeats: int) -> dict[str, float]:
    """FLOP/s of a 2048 x 2048 float32 product, NumPy's and torch's."""
    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    flops = 2 * 2048**3
    rates = {"numpy": flops / best_seconds(lambda: a @ a, repeats)}
    ta = torch.from_numpy(a)
    rates["torch"] = flops / best_seconds(lambda: ta @ ta, repeats)
    return rates


def bandwidth(repeats: int) -> float:
    """Bytes per second of a 256 MiB copy (read and written)."""
    source = np.ones(64 << 20, dtype=np.float32)
    target = np.empty_like(source)
    return 2 * source.nbytes / best_seconds(lambda: np.copyto(target, source), repeats)


def recorded_convolutions(name: str) -> list[tuple]:
    """The distinct convolutions of one forward pass of model ``name``: ``(transposed, x
    shape, weight shape, stride, padding, output_padding, dilation, groups)``."""
    builder, x_shape, *_ = MODELS[name]
    inner = rg.NumpyBackend()
    seen: dict[tuple, None] = {}
    conv, conv_transpose = inner.conv, inner.conv_transpose

    def record_conv(x, weight, bias, stride, padding, dilation, groups):
        zeros = (0,) * len(stride)
        seen[(False, x.shape, weight.shape, stride, padding, zeros, dilation, groups)] = None
        return conv(x, weight, bias, stride, padding, dilation, groups)

    def record_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups):
        key = (True, x.shape, weight.shape, stride, padding, output_padding, dilation, groups)
        seen[key] = None
        return conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups)

    inner.conv, inner.conv_transpose = record_conv, record_transpose
    with rg.use_backend(rg.Autodiff(inner)), rg.no_grad():
        model = builder(rg, rnn, RF)
        model(rg.tensor(np.zeros(x_shape, dtype=np.float32)))
    return list(seen)


def layer_costs(spec, out_shape, split: bool = False) -> dict[str, tuple[float, float]]:
    """``{"forward": (flops, bytes), "backward": (flops, bytes)}`` of one convolution; with
    ``split``, ``"input grad"`` (where the input needs one) and ``"weight grad"`` in place of
    ``"backward"``."""
    transposed, x_shape, w_shape = spec[:3]
    x_size, w_size, y_size = math.prod(x_shape), math.prod(w_shape), math.prod(out_shape)
    # multiply-adds: each output (input, for a transposed one) cell of each channel pairs
    # with the weight's receptive field
    cells = math.prod(x_shape[2:]) if transposed else math.prod(out_shape[2:])
    macs = x_shape[0] * cells * w_size
    forward = (2 * macs, BYTES * (x_size + w_size + y_size))
    data_needed = x_shape[1] > 3 or transposed  # the data's gradient is never needed
    backward_flops = 2 * macs * (2 if data_needed else 1)
    backward_bytes = BYTES * (y_size + x_size + w_size + w_size + (x_size if data_needed else 0))
    if not split:
        return {"forward": forward, "backward": (backward_flops, backward_bytes)}, data_needed
    costs = {"forward": forward}
    if data_needed:
        costs["input grad"] = (2 * macs, BYTES * (y_size + w_size + x_size))
    costs["weight grad"] = (2 * macs, BYTES * (y_size + x_size + w_size))
    return costs, data_needed


def time_layer(spec, torch, repeats: int, split: bool = False):
    transposed, x_shape, w_shape, stride, padding, output_padding, dilation, groups = spec
    rng = np.random.default_rng(1)
    numpy_backend = rg.NumpyBackend()
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    none = np.zeros(0, dtype=np.float32)
    if transposed:
        y = numpy_backend.conv_transpose(
            x, w, none, stride, padding, output_padding, dilation, groups
        )
    else:
        y = numpy_backend.conv(x, w, none, stride, padding, dilation, groups)
    g = rng.standard_normal(y.shape).astype(np.float32)
    costs, data_needed = layer_costs(spec, y.shape, split)
    masks = {"backward": (data_needed, True, False)}
    if split:
        masks = {"input grad": (True, False, False)} if data_needed else {}
        masks["weight grad"] = (False, True, False)
    # NumPy's kernels take the channels-last arrays the network hands them
    x_last, g_last = (
        np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 1, -1)), -1, 1) for a in (x, g)
    )
    if transposed:
        ours = {
            "forward": lambda: numpy_backend.conv_transpose(
                x_last, w, none, stride, padding, output_padding, dilation, groups
            ),
            **{
                phase: lambda needs=needs: numpy_backend.conv_transpose_backward(
                    g_last, x_last, w, stride, padding, output_padding, dilation, groups, needs
                )
                for phase, needs in masks.items()
            },
        }
    else:
        ours = {
            "forward": lambda: numpy_backend.conv(
                x_last, w, none, stride, padding, dilation, groups
            ),
            **{
                phase: lambda needs=needs: numpy_backend.conv_backward(
                    g_last, x_last, w, stride, padding, dilation, groups, needs
                )
                for phase, needs in masks.items()
            },
        }
    aten = torch.ops.aten
    tx, tw, tg = (torch.from_numpy(a) for a in (x, w, g))
    theirs = {
        "forward": lambda: aten.convolution(
            tx, tw, None, stride, padding, dilation, transposed, output_padding, groups
        ),
        **{
            phase: lambda needs=needs: aten.convolution_backward(
                tg,
                tx,
                tw,
                None,
                stride,
                padding,
                dilation,
                transposed,
                output_padding,
                groups,
                list(needs),
            )
            for phase, needs in masks.items()
        },
    }
    times = {
        (label, phase): best_seconds(kernels[phase], repeats)
        for label, kernels in (("numpy", ours), ("torch", theirs))
        for phase in costs
    }
    return costs, times, y.shape


def describe(spec) -> str:
    transposed, x_shape, w_shape, stride = spec[:4]
    groups = spec[-1]
    kernel = "x".join(str(k) for k in w_shape[2:])
    c_in, c_out = (w_shape[0], w_shape[1] * groups) if transposed else (x_shape[1], w_shape[0])
    kind = "convT" if transposed else "conv"
    size = "x".join(str(n) for n in x_shape[2:])
    return f"{kind} {c_in}->{c_out} {kernel}/{stride[0]} on {x_shape[0]}x{size}"


HEADER = [
    "model",
    "layer",
    "pass",
    "GFLOP",
    "MB",
    "FLOP/byte",
    "roofline ms",
    "numpy ms",
    "numpy of roofline",
    "torch ms",
    "torch of roofline",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default=",".join(MODELS))
    parser.add_argument(
        "--split", action="store_true", help="input and weight gradients apart (not written)"
    )
    parser.add_argument(
        "--cold", action="store_true", help="caches flushed before each call (not written)"
    )
    args = parser.parse_args()
    torch = torch_single_thread()
    if torch is None:
        raise SystemExit("bench_convs needs torch")
    print(machine())
    peaks = peak_gemm(torch, args.repeats)
    memory = bandwidth(args.repeats)
    peak = max(peaks.values())
    print(
        f"peak float32 GEMM: numpy {peaks['numpy'] / 1e9:.1f} GFLOP/s, torch "
        f"{peaks['torch'] / 1e9:.1f} GFLOP/s; memory bandwidth {memory / 1e9:.1f} GB/s; "
        f"balance {peak / memory:.1f} FLOP/byte"
    )
    if args.cold:
        source, target = np.ones(16 << 20, dtype=np.float32), np.empty(16 << 20, np.float32)
        FLUSH.append(lambda: np.copyto(target, source))
    rows = []
    totals: dict[tuple[str, str], float] = {}
    for name in args.only.split(","):
        for spec in recorded_convolutions(name):
            costs, times, _ = time_layer(spec, torch, args.repeats, args.split)
            for phase, (flops, nbytes) in costs.items():
                bound = max(flops / peak, nbytes / memory)
                row = [name, describe(spec), phase, f"{flops / 1e9:.3f}", f"{nbytes / 1e6:.1f}"]
                row += [f"{flops / nbytes:.0f}", f"{bound * 1e3:.2f}"]
                for label in ("numpy", "torch"):
                    seconds = times[label, phase]
                    totals[name, label] = totals.get((name, label), 0.0) + seconds
                    row += [f"{seconds * 1e3:.2f}", f"{bound / seconds:.0%}"]
                rows.append(row)
                print(table([row], HEADER).splitlines()[-1], flush=True)
    print()
    print(table(rows, HEADER))
    sums = [
        [name, f"{totals[name, 'numpy'] * 1e3:.1f}", f"{totals[name, 'torch'] * 1e3:.1f}"]
        for name in args.only.split(",")
    ]
    print()
    print(table(sums, ["model", "numpy ms (all layers, both passes)", "torch ms"]))
    if args.split or args.cold:  # variants: the results file keeps the default's table
        return
    path = write_results(
        "convs",
        {
            "machine": {
                "header": ["quantity", "value"],
                "rows": [
                    ["peak float32 GEMM, NumPy (GFLOP/s)", f"{peaks['numpy'] / 1e9:.1f}"],
                    ["peak float32 GEMM, torch (GFLOP/s)", f"{peaks['torch'] / 1e9:.1f}"],
                    ["memory bandwidth, copy (GB/s)", f"{memory / 1e9:.1f}"],
                ],
            },
            "layers": {"header": HEADER, "rows": rows},
            "totals": {"header": ["model", "numpy ms", "torch ms"], "rows": sums},
        },
        command="PYTHONPATH=src python benchmarks/bench_convs.py " + " ".join(sys.argv[1:]),
        notes=(
            "CPU time, best of repeats, one thread; the peak is the better of NumPy's and "
            "torch's 2048x2048 float32 product. Measured on a machine shared with other jobs "
            "unless the notes say otherwise."
        ),
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
