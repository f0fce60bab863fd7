"""BudgetCheckpointing in training loops written as a new user writes them: the input batch
and the attention mask are built anew every step, and the parameters either too (leaves made
from arrays each step) or once, as ``nn.Module`` parameters.

Workloads (NumPy backend, float32):

- ``mlp``: a residual MLP, ``h = h + tanh(h @ W1) @ W2`` over 6 layers (width 512, batch 128);
- ``masked``: a masked-attention transformer, attention written out
  (``att.mask_fill(mask, -inf).softmax(-1)``), 4 blocks, d 128, 4 heads, sequence 128;
- ``sdpa``: the same blocks through ``F.scaled_dot_product_attention`` with a boolean mask;
- ``mlp-module``, ``masked-module``: the first two with their weights ``nn.Parameter`` of an
  ``nn.Module`` made once;
- ``nanogpt``: the nanoGPT of ``tests/test_models_vs_torch.py`` (``nn.Module`` parameters,
  a registered causal-mask buffer, tied embeddings), 4 layers, n_embd 128, block 128, batch 8.

For each, NoCheckpointing's ``Gradients.peak_bytes`` of the first step is the reference; the
budgets are 0.5x and 0.25x of it. Every step of the three runs (NoCheckpointing, 0.5x, 0.25x)
is timed in turn (A B C A B C ...), so that a shared machine's load affects them alike; the
table reports, per budget: the peak of the steps after the plan against the budget and against
NoCheckpointing's, the plan's predicted peak, the time ratio (median of steps 4-8 against
NoCheckpointing's) and the seconds of recomputation the plan expects (its ops priced at their
measured times) against NoCheckpointing's step and the fewest any schedule under the budget
needs at the same prices (``plan.recompute_floor``: a lower bound, so that a time ratio above
``1 + fewest`` is no fault of the plan), the ops recomputed per step after the plan
(one number when every step does the same work), and whether every step's gradients are
bit-identical to NoCheckpointing's.

A second table alternates two graphs under one budget (the masked transformer at batch 4 and
2, budget 0.5x of the larger one's peak): each graph alone, then both in turn, each against
NoCheckpointing running the same steps; an alternating loop should cost no more than its
slower graph alone (median over step pairs 3-6).

    python benchmarks/bench_budget_loops.py [--steps 8] [--quick] [--only mlp,masked] [--explain]
        [--inner torch]

``--explain`` prints, per workload and budget, what the plan's steps pay and why: the ops a
planned step recomputes by op kind (count, MiB, the seconds they took in a step run after the
timed ones, and the seconds the plan priced them at) against NoCheckpointing's step, and what
the plan holds at its peak by op kind (the untracked values held, such as the input batch and
masks, apart): where a budget is missed, the bytes that stay.

It writes ``benchmarks/results/budget_loops.json`` (``benchmarks/common.py: write_results``)
and, with matplotlib, the memory-time plot ``benchmarks/results/budget_loops.png`` beside it
(``benchmarks/plot_budget_loops.py`` redraws it from the results file).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time
from types import SimpleNamespace
from typing import Any

import common  # (first: pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from common import median, optional, table, write_results
from retrograd.autodiff.checkpoint.budget.plan import profile, recompute_floor
from retrograd.autodiff.checkpoint.budget.planner import FITS, FLOOR
from retrograd.autodiff.checkpoint.budget.segments import engine_profile
from retrograd.autodiff.checkpoint.checkpointer import Checkpointer
from retrograd.nn import functional as F  # noqa: N812

FRACTIONS = (0.5, 0.25)
#: steps timed: 4-8
TIMED = slice(3, 8)


#: the inner backend's name (``--inner``)
INNER = ["numpy"]


def inner_backend() -> rg.Backend:
    """A fresh inner backend of the kind ``--inner`` names (NumPy by default; torch on the
    CPU, one thread, as NumPy's BLAS is pinned)."""
    if INNER[0] == "torch":
        return rg.TorchBackend("cpu")
    return rg.NumpyBackend()


def weights_of(arrays: list, module: bool, backend: rg.Autodiff):
    """The weights of one run: a function that gives this step's weights. ``module``: the
    ``nn.Parameter`` of an ``nn.Module`` made once (its weights the same every step); else
    leaves made from ``arrays`` in each step, as a hand-written loop makes them."""
    if not module:
        return lambda: [rg.tensor(a).require_grad() for a in arrays]
    with rg.use_backend(backend):
        holder = rg.nn.Module()
        holder.weights = rg.nn.ParameterList([rg.nn.Parameter(rg.tensor(a)) for a in arrays])
    return lambda: list(holder.weights)


class ResidualMLP:
    def __init__(self, scale: int, module: bool = False):
        self.module = module
        self.name = "residual MLP" + (" (nn.Module)" if module else "")
        self.width, self.batch, self.layers = 512 // scale, 128 // scale, 6
        rng = np.random.default_rng(0)
        w = self.width
        self.arrays = [
            (rng.standard_normal((w, w)) / w**0.5).astype(np.float32)
            for _ in range(2 * self.layers)
        ]

    def make(self, backend: rg.Autodiff):
        weights = weights_of(self.arrays, self.module, backend)

        def step(index: int):
            with rg.use_backend(backend):
                ws = weights()
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

    def __init__(self, scale: int, fused: bool, module: bool = False, batch: int = 4):
        self.fused, self.module = fused, module
        self.name = "transformer, F.sdpa" if fused else "transformer, masked attention"
        self.name += " (nn.Module)" if module else ""
        self.d, self.heads, self.seq, self.batch = 128 // scale, 4, 128 // scale, batch
        self.blocks = 4
        rng = np.random.default_rng(1)
        d = self.d
        shapes = [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)]
        self.arrays = [
            (rng.standard_normal(shape) / shape[0] ** 0.5).astype(np.float32)
            for _ in range(self.blocks)
            for shape in shapes
        ]

    def make(self, backend: rg.Autodiff, batch: int | None = None):
        b, t, d, h = batch or self.batch, self.seq, self.d, self.heads
        weights = weights_of(self.arrays, self.module, backend)

        def step(index: int):
            with rg.use_backend(backend):
                ws = weights()
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


def timed_in_turn(runs: dict, steps: int) -> tuple[dict, dict, dict, bool]:
    """Every run's steps in turn (A B C A B C ...): seconds, peaks and recomputed ops per
    step, by run, and whether every run's gradients equal the first run's at every step.
    The seconds are wall time, and ``(name, "cpu")`` holds the process CPU time (less
    disturbed by other jobs on a shared machine)."""
    seconds: dict = {key: [] for name in runs for key in (name, (name, "cpu"))}
    peaks: dict = {name: [] for name in runs}
    ops: dict = {name: [] for name in runs}
    identical = True
    for index in range(steps):
        expected = None
        for name, step in runs.items():
            start, cpu = time.perf_counter(), time.process_time()
            grads, arrays = step(index)
            seconds[name].append(time.perf_counter() - start)
            seconds[name, "cpu"].append(time.process_time() - cpu)
            peaks[name].append(grads.peak_bytes)
            ops[name].append(grads.recomputed_ops)
            if expected is None:
                expected = arrays
            else:
                identical &= all(np.array_equal(a, b) for a, b in zip(expected, arrays))
    return seconds, peaks, ops, identical


def time_columns(seconds: dict, name: Any, timed: slice) -> list[str]:
    """Run ``name``'s time against NoCheckpointing's (``seconds["none"]``) over the ``timed``
    steps: the median wall-time ratio, the lowest and highest ratio of paired steps
    (``"0.98-1.12"``), the median ratio of CPU time."""
    ours, theirs = seconds[name][timed], seconds["none"][timed]
    ratios = [a / b for a, b in zip(ours, theirs)]
    cpu = median(seconds[name, "cpu"][timed]) / median(seconds["none", "cpu"][timed])
    return [
        f"{median(ours) / median(theirs):.2f}",
        f"{min(ratios):.2f}-{max(ratios):.2f}",
        f"{cpu:.2f}",
    ]


def planned_seconds(strategy: rg.BudgetCheckpointing) -> float:
    """Seconds of recomputation per step the strategy's latest plan expects."""
    plan = strategy.planner.kept[0]
    return profile(plan.trace, plan.evict, plan.target, views=False).seconds


def floor_seconds(strategy: rg.BudgetCheckpointing) -> float:
    """The fewest seconds of recomputation per step that any schedule keeping the latest
    plan's trace under the budget needs, at the same prices (``plan.recompute_floor``)."""
    return recompute_floor(strategy.planner.kept[0].trace, strategy.max_bytes)


def run(workload, steps: int, explained: list | None = None) -> list[list]:
    """One workload's rows: a NoCheckpointing run and a budget per fraction, steps in turn.
    ``explained``: where the rows of :func:`explain` go, when given."""
    plain_step = workload.make(rg.Autodiff(inner_backend()))
    first, _ = plain_step(0)
    full = first.peak_bytes
    strategies = {f: rg.BudgetCheckpointing(int(f * full)) for f in FRACTIONS}
    rows = []
    for f, strategy in strategies.items():
        runs = {"none": plain_step, f: workload.make(rg.Autodiff(inner_backend(), strategy))}
        seconds, peaks, ops, identical = timed_in_turn(runs, steps)
        base = median(seconds["none"][TIMED])
        after = peaks[f][1:]
        rows.append(
            [
                workload.name,
                f"{f}x",
                f"{full / 2**20:.2f}",
                f"{max(after) / strategy.max_bytes:.2f}",
                f"{max(after) / full:.2f}",
                f"{strategy.predicted_peak / full:.2f}",
                *time_columns(seconds, f, TIMED),
                f"{planned_seconds(strategy) / base:.3f}",
                f"{floor_seconds(strategy) / base:.3f}",
                "/".join(str(n) for n in sorted(set(ops[f][1:]))),
                f"{strategy.plans}/{strategy.planned_steps}",
                "yes" if identical else "NO",
            ]
        )
        if explained is not None:  # after the row: its extra step is none of the row's
            explained.extend(explain(workload.name, f, strategy, runs[f], steps, base, full))
    return rows


def _tally(entries: list[tuple[str, int, float]]) -> dict[str, list]:
    """``(op kind, bytes, seconds)`` entries summed by kind: kind -> [count, bytes, seconds]."""
    kinds: dict[str, list] = {}
    for kind, nbytes, seconds in entries:
        total = kinds.setdefault(kind, [0, 0, 0.0])
        total[0] += 1
        total[1] += nbytes
        total[2] += seconds
    return kinds


def _by_kind(entries: list[tuple[str, int, float]], seconds: bool = True) -> str:
    """``entries`` summed by kind (:func:`_tally`), the dearest (else the largest) first:
    ``"matmul 6 (1.50 MiB, 3.80 ms), tanh 4 (...)"``."""
    ordered = sorted(_tally(entries).items(), key=lambda item: (-item[1][2], -item[1][1]))
    return ", ".join(
        f"{kind} {count} ({nbytes / 2**20:.2f} MiB"
        + (f", {spent * 1e3:.2f} ms)" if seconds else ")")
        for kind, (count, nbytes, spent) in ordered
    )


def recomputed_in(step, index: int) -> tuple[Any, list[tuple[str, int, float]]]:
    """Run ``step(index)`` (not timed) and return its gradients and the ops its backward
    recomputed, in order: ``(op name, output bytes, seconds)``. It listens at the
    checkpointer's one recomputation call (:meth:`Checkpointer._rerun`) for that step alone."""
    done: list[tuple[str, int, float]] = []
    original = Checkpointer._rerun

    def listening(self, node_id, node, values):
        start = time.perf_counter()
        output = original(self, node_id, node, values)
        done.append((node.op.name, getattr(output, "nbytes", 0), time.perf_counter() - start))
        return output

    Checkpointer._rerun = listening
    try:
        grads, _ = step(index)
    finally:
        Checkpointer._rerun = original
    return grads, done


def explain(
    name: str, fraction: float, strategy, step, steps: int, base: float, full: int
) -> list[list]:
    """Why a budget's planned steps cost what they do (see the module docstring), one row:
    the plan's mode; the ops one more step recomputed, by kind, at their measured seconds,
    and their sum against NoCheckpointing's step (``base`` seconds); the evicted values as
    the plan prices them; and what the plan holds, by kind (``fixed``: the untracked values
    held), against the budget and NoCheckpointing's peak (``full``): at the peak of its model
    (:func:`profile`) for a greedy plan, at the end of forward for the others (whose peak
    :func:`engine_profile` counts op by op within a recomputation: the row gives it)."""
    grads, done = recomputed_in(step, steps)
    plan = strategy.planner.kept[0]
    trace = plan.trace
    found = profile(trace, plan.evict, plan.target, views=False)
    if plan.mode in (FITS, FLOOR):
        at, peak, where = found.at, found.peak, "peak"
    else:
        at, peak, where = 0, engine_profile(trace, plan.evict)[0], "end of forward"
    planned, held = [], []
    for v, signature in enumerate(plan.signatures):
        if found.last[v] < 0:
            continue
        if plan.evict[v]:
            planned.append((signature[0], trace.sizes[v], trace.costs[v]))
        start = found.first[v] if plan.evict[v] else 0
        if start <= at <= found.last[v]:
            held.append((signature[0], trace.sizes[v], 0.0))
    fixed = sum(nbytes for nbytes, first, last in trace.fixed if first <= at <= last)
    held_bytes = fixed + sum(nbytes for _, nbytes, _ in held)
    return [
        [
            name,
            f"{fraction}x",
            f"{plan.mode}: peak {peak / full:.2f}x NoCkpt",
            f"{len(done)}: {_by_kind(done)}",
            f"{sum(s for _, _, s in done) / base:.3f}",
            _by_kind(planned),
            f"{where} (step {at}/{trace.horizon}): {held_bytes / full:.2f}x NoCkpt "
            f"({held_bytes / strategy.max_bytes:.2f}x budget); fixed "
            f"{fixed / 2**20:.2f} MiB, {_by_kind(held, seconds=False)}",
            f"{grads.peak_bytes / full:.2f}",
        ]
    ]


EXPLAIN_HEADER = [
    "workload",
    "budget",
    "plan",
    "recomputed in a planned step (measured)",
    "its seconds / NoCkpt step",
    "recomputed as the plan prices it",
    "what the plan holds",
    "measured peak / NoCkpt",
]


HEADER = [
    "workload",
    "budget",
    "NoCkpt peak MiB",
    "peak / budget",
    "peak / NoCkpt",
    "predicted / NoCkpt",
    "time / NoCkpt",
    "paired range",
    "CPU time / NoCkpt",
    "planned recompute / NoCkpt step",
    "fewest recompute / NoCkpt step",
    "recomputed ops per step",
    "plans/planned steps",
    "bit-identical",
]


def alternating(scale: int, pairs: int) -> list[list]:
    """Two graphs (the masked transformer at batch 4 and 2) under one budget (0.5x of the
    larger one's peak): each alone, then both in turn, each against NoCheckpointing."""
    workload = Attention(scale, fused=False)
    sizes = (4, 2)
    full = workload.make(rg.Autodiff(inner_backend()), sizes[0])(0)[0].peak_bytes
    budget = int(0.5 * full)
    rows = []

    def ratio_and_row(label: str, graphs: tuple) -> None:
        strategy = rg.BudgetCheckpointing(budget)
        plain = [workload.make(rg.Autodiff(inner_backend()), b) for b in graphs]
        ours = [workload.make(rg.Autodiff(inner_backend(), strategy), b) for b in graphs]

        def in_turn(steps):  # one step of each graph: a pair
            def pair(index):
                results = [step(index) for step in steps]
                report = SimpleNamespace(
                    peak_bytes=max(grads.peak_bytes for grads, _ in results),
                    recomputed_ops=sum(grads.recomputed_ops for grads, _ in results),
                )
                return report, [a for _, arrays in results for a in arrays]

            return pair

        runs = {"none": in_turn(plain), "budget": in_turn(ours)}
        seconds, peaks, _ops, identical = timed_in_turn(runs, pairs)
        timed = slice(2, pairs)
        rows.append(
            [
                label,
                f"{max(peaks['budget'][1:]) / budget:.2f}",
                *time_columns(seconds, "budget", timed),
                f"{strategy.plans}/{strategy.planned_steps}",
                "yes" if identical else "NO",
            ]
        )

    for size in sizes:
        ratio_and_row(f"batch {size} alone", (size,))
    ratio_and_row(f"batch {sizes[0]} and {sizes[1]} in turn", sizes)
    return rows


ALTERNATING_HEADER = [
    "graphs",
    "peak / budget",
    "time / NoCkpt",
    "paired range",
    "CPU time / NoCkpt",
    "plans/planned steps",
    "bit-identical",
]

WORKLOADS = {
    "mlp": lambda scale: ResidualMLP(scale),
    "mlp-module": lambda scale: ResidualMLP(scale, module=True),
    "masked": lambda scale: Attention(scale, False),
    "masked-module": lambda scale: Attention(scale, False, module=True),
    "sdpa": lambda scale: Attention(scale, True),
    "nanogpt": lambda scale: NanoGPT(scale),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="quarter-size models")
    parser.add_argument(
        "--only", help=f"comma-separated workloads of {','.join(WORKLOADS)} (and 'alternating')"
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="per budget: the ops a planned step recomputes and what its peak holds, by op kind",
    )
    parser.add_argument(
        "--inner", choices=("numpy", "torch"), default="numpy", help="the inner backend"
    )
    args = parser.parse_args()
    INNER[0] = args.inner
    if args.inner == "torch":
        common.torch_single_thread()
    scale = 4 if args.quick else 1
    chosen = args.only.split(",") if args.only else [*WORKLOADS, "alternating"]
    rows = []
    explained: list | None = [] if args.explain else None
    for name in chosen:
        if name in WORKLOADS:
            rows.extend(run(WORKLOADS[name](scale), max(args.steps, 8), explained))
            print(table(rows[-len(FRACTIONS) :], HEADER), flush=True)
            if explained:
                print(table(explained[-len(FRACTIONS) :], EXPLAIN_HEADER), flush=True)
    tables = {"loops": {"header": HEADER, "rows": rows}}
    if "alternating" in chosen:
        pair_rows = alternating(scale, max(args.steps // 2 + 2, 6))
        print(table(pair_rows, ALTERNATING_HEADER), flush=True)
        tables["alternating"] = {"header": ALTERNATING_HEADER, "rows": pair_rows}
    print(table(rows, HEADER))
    command = common.command_line()
    path = write_results(
        "budget_loops",
        tables,
        command=command,
        notes="peak: Gradients.peak_bytes of the steps after the plan; predicted: the plan's "
        "count of it; time: median of steps 4-8 against NoCheckpointing's, the two runs' "
        "steps interleaved (paired range: the lowest and highest of the five paired ratios; "
        "CPU time: the median ratio of process CPU time, less disturbed by other jobs); "
        "planned recompute: the seconds of recomputation the plan expects per step (its ops "
        "priced at their measured times) against NoCheckpointing's step; fewest recompute: the "
        "lower bound of any schedule under the budget at the same prices (recompute_floor)",
    )
    print(path)
    if optional("matplotlib") is not None:
        from plot_budget_loops import plot

        print(plot(path))


if __name__ == "__main__":
    main()
