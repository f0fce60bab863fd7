"""BudgetCheckpointing in training loops written as a new user writes them: the leaves, the
input batch and the attention mask are built anew every step.

Workloads (NumPy backend, float32):

- ``mlp``: a residual MLP, ``h = h + tanh(h @ W1) @ W2`` over 6 layers (width 512, batch 128);
- ``masked``: a masked-attention transformer, attention written out
  (``att.mask_fill(mask, -inf).softmax(-1)``), 4 blocks, d 128, 4 heads, sequence 128;
- ``sdpa``: the same blocks through ``F.scaled_dot_product_attention`` with a boolean mask;
- ``nanogpt``: the nanoGPT of ``tests/test_models_vs_torch.py`` (``nn.Module`` parameters,
  a registered causal-mask buffer, tied embeddings), 4 layers, n_embd 128, block 128, batch 8.

For each, NoCheckpointing's ``Gradients.peak_bytes`` of the first step is the reference; the
budgets are 0.5x and 0.25x of it. Every step of the three runs (NoCheckpointing, 0.5x, 0.25x)
is timed in turn (A B C A B C ...), so that a shared machine's load affects them alike; the
table reports, per budget: the peak of the steps after the plan against the budget and against
NoCheckpointing's, the time ratio (median of steps 4-8 against NoCheckpointing's), the ops
recomputed per step after the plan (one number when every step does the same work), and
whether every step's gradients are bit-identical to NoCheckpointing's.

    python benchmarks/bench_budget_loops.py [--steps 8] [--quick]

It writes ``benchmarks/results/budget_loops.json`` (``benchmarks/common.py: write_results``).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import common  # noqa: F401  (pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from common import median, table, write_results
from retrograd.nn import functional as F  # noqa: N812

FRACTIONS = (0.5, 0.25)


class ResidualMLP:
    name = "residual MLP"

    def __init__(self, scale: int):
        self.width, self.batch, self.layers = 512 // scale, 128 // scale, 6
        rng = np.random.default_rng(0)
        w = self.width
        self.arrays = [
            (rng.standard_normal((w, w)) / w**0.5).astype(np.float32)
            for _ in range(2 * self.layers)
        ]

    def make(self, backend: rg.Autodiff):
        def step(index: int):
            with rg.use_backend(backend):
                ws = [rg.tensor(a).require_grad() for a in self.arrays]
                data = np.random.default_rng(index).standard_normal((self.batch, self.width))
                h = rg.tensor(data.astype(np.float32))
                for k in range(self.layers):
                    h = h + (h @ ws[2 * k]).tanh() @ ws[2 * k + 1]
                grads = (h * h).mean().backward()
                return grads, [w.grad(grads).numpy() for w in ws]

        return step


class Attention:
    """Pre-norm-free attention blocks with a residual MLP; ``fused``: the attention through
    ``F.scaled_dot_product_attention``, else written out with ``mask_fill`` and softmax."""

    def __init__(self, scale: int, fused: bool):
        self.fused = fused
        self.name = "transformer, F.sdpa" if fused else "transformer, masked attention"
        self.d, self.heads, self.seq, self.batch, self.blocks = 128 // scale, 4, 128 // scale, 4, 4
        rng = np.random.default_rng(1)
        d = self.d
        shapes = [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)]
        self.arrays = [
            (rng.standard_normal(shape) / shape[0] ** 0.5).astype(np.float32)
            for _ in range(self.blocks)
            for shape in shapes
        ]

    def make(self, backend: rg.Autodiff):
        b, t, d, h = self.batch, self.seq, self.d, self.heads

        def step(index: int):
            with rg.use_backend(backend):
                ws = [rg.tensor(a).require_grad() for a in self.arrays]
                data = np.random.default_rng(index).standard_normal((b, t, d))
                x = rg.tensor(data.astype(np.float32))
                causal = np.triu(np.ones((t, t), dtype=bool), 1)
                for k in range(self.blocks):
                    qkv, proj, up, down = ws[4 * k : 4 * k + 4]
                    q, key, v = (x @ qkv).split(d, 2)
                    q, key, v = (z.reshape((b, t, h, d // h)).swap_dims(1, 2) for z in (q, key, v))
                    if self.fused:
                        mask = rg.tensor(~causal, dtype="bool")
                        y = F.scaled_dot_product_attention(q, key, v, attn_mask=mask)
                    else:
                        mask = rg.tensor(causal, dtype="bool")
                        att = (q @ key.swap_dims(2, 3)) * (1.0 / math.sqrt(d // h))
                        y = att.mask_fill(mask, float("-inf")).softmax(-1) @ v
                    x = x + y.swap_dims(1, 2).reshape((b, t, d)) @ proj
                    x = x + F.gelu(x @ up) @ down
                grads = (x * x).mean().backward()
                return grads, [w.grad(grads).numpy() for w in ws]

        return step


class NanoGPT:
    name = "nanoGPT (nn.Module)"

    def __init__(self, scale: int):
        from types import SimpleNamespace

        self.config = SimpleNamespace(
            block_size=128 // scale,
            vocab_size=65,
            n_layer=4,
            n_head=4,
            n_embd=128 // scale,
            dropout=0.0,
            bias=True,
        )
        self.batch = 8 // scale

    def make(self, backend: rg.Autodiff):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
        from test_models_vs_torch import GPT

        c = self.config
        with rg.use_backend(backend):
            rg.seed(0)
            model = GPT(c)

        def step(index: int):
            rng = np.random.default_rng(index)
            tokens = rng.integers(0, c.vocab_size, (self.batch, c.block_size + 1))
            with rg.use_backend(backend):
                _, loss = model(rg.tensor(tokens[:, :-1]), rg.tensor(tokens[:, 1:]))
                grads = loss.backward()
                return grads, [p.grad(grads).numpy() for p in model.parameters()]

        return step


def run(workload, steps: int) -> list[list[str]]:
    """One workload's rows: a NoCheckpointing run and a budget per fraction, steps in turn."""
    plain_step = workload.make(rg.Autodiff(rg.NumpyBackend()))
    first, _ = plain_step(0)
    full = first.peak_bytes
    strategies = {f: rg.BudgetCheckpointing(int(f * full)) for f in FRACTIONS}
    runs = {"none": plain_step}
    runs.update(
        {f: workload.make(rg.Autodiff(rg.NumpyBackend(), s)) for f, s in strategies.items()}
    )
    seconds: dict = {name: [] for name in runs}
    peaks: dict = {name: [] for name in runs}
    ops: dict = {name: [] for name in runs}
    identical = {f: True for f in FRACTIONS}
    for index in range(steps):
        expected = None
        for name, step in runs.items():
            start = time.perf_counter()
            grads, arrays = step(index)
            seconds[name].append(time.perf_counter() - start)
            peaks[name].append(grads.peak_bytes)
            ops[name].append(grads.recomputed_ops)
            if name == "none":
                expected = arrays
            else:
                identical[name] &= all(np.array_equal(a, b) for a, b in zip(expected, arrays))
    timed = slice(3, 8)  # steps 4-8
    base = median(seconds["none"][timed])
    rows = []
    for f, strategy in strategies.items():
        after = peaks[f][1:]
        rows.append(
            [
                workload.name,
                f"{f}x",
                f"{full / 2**20:.2f}",
                f"{max(after) / strategy.max_bytes:.2f}",
                f"{max(after) / full:.2f}",
                f"{median(seconds[f][timed]) / base:.2f}",
                "/".join(str(n) for n in sorted(set(ops[f][1:]))),
                f"{strategy.plans}/{strategy.planned_steps}",
                "yes" if identical[f] else "NO",
            ]
        )
    return rows


HEADER = [
    "workload",
    "budget",
    "NoCkpt peak MiB",
    "peak / budget",
    "peak / NoCkpt",
    "time / NoCkpt",
    "recomputed ops per step",
    "plans/planned steps",
    "bit-identical",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="quarter-size models")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    workloads = [
        ResidualMLP(scale),
        Attention(scale, False),
        Attention(scale, True),
        NanoGPT(scale),
    ]
    rows = []
    for workload in workloads:
        rows.extend(run(workload, max(args.steps, 8)))
        print(table(rows[-len(FRACTIONS) :], HEADER), flush=True)
    print(table(rows, HEADER))
    command = "python benchmarks/bench_budget_loops.py" + (" --quick" if args.quick else "")
    path = write_results(
        "budget_loops",
        {"loops": {"header": HEADER, "rows": rows}},
        command=command,
        notes="peak: Gradients.peak_bytes of the steps after the plan; time: median of steps "
        "4-8 against NoCheckpointing's, steps of the three runs interleaved",
    )
    print(path)


if __name__ == "__main__":
    main()
