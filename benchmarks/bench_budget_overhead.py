"""What a memory budget costs beside its recomputation, and what its plan recomputes.

On the workloads of ``bench_budget_loops.py`` (NumPy backend, float32), three runs step in
turn (the order reversed every other step, so that a shared machine's load falls on all
alike): NoCheckpointing, a budget so large that its plan evicts nothing (8x NoCheckpointing's
peak: the budget machinery alone) and a budget of 0.5x. Per run, the median ratio of process
CPU time to NoCheckpointing's over steps 4 and on, with the lowest and highest ratio of
paired steps. Then, for the 0.5x plan, the recomputation it expects and the fewest any
schedule under the budget needs (``plan.recompute_floor``), both against NoCheckpointing's
step, and the ops it recomputes, by op: count, bytes and priced milliseconds. A time ratio
cannot go below ``1 + fewest``.

    python benchmarks/bench_budget_overhead.py [--steps 12] [--only mlp,masked] [--quick]

It writes ``benchmarks/results/budget_overhead.json``.
"""

from __future__ import annotations

import argparse
import time

import common  # (first: pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from bench_budget_loops import WORKLOADS
from common import median, table, write_results
from retrograd.autodiff.checkpoint.budget.plan import profile, recompute_floor

#: budgets, as fractions of NoCheckpointing's peak: one that evicts nothing, and 0.5x
FRACTIONS = (8.0, 0.5)
#: the first steps are not timed (the first is eager, the second may still be re-planned)
SKIPPED = 3


def steps_in_turn(runs: dict, steps: int) -> tuple[dict, dict]:
    """CPU seconds and recomputed ops per step, by run; asserts that every run's gradients
    equal the first run's at every step."""
    seconds: dict = {name: [] for name in runs}
    ops: dict = {name: [] for name in runs}
    for index in range(steps):
        order = list(runs.items())
        expected = None
        for name, step in order if index % 2 == 0 else order[::-1]:
            start = time.process_time()
            grads, arrays = step(index)
            seconds[name].append(time.process_time() - start)
            ops[name].append(grads.recomputed_ops)
            if expected is None:
                expected = arrays
            else:
                assert all(np.array_equal(a, b) for a, b in zip(expected, arrays)), name
    return seconds, ops


def recomputed_by_op(strategy: rg.BudgetCheckpointing) -> str:
    """The values the latest plan recomputes, by op: ``name count×bytes ms``."""
    plan = strategy.planner.kept[0]
    trace = plan.trace
    needed = profile(trace, plan.evict, plan.target, views=False)
    by_op: dict = {}
    for position, evicted in enumerate(plan.evict):
        if evicted and needed.last[position] >= 0:
            entry = by_op.setdefault(plan.signatures[position][0], [0, 0, 0.0])
            entry[0] += 1
            entry[1] += trace.sizes[position]
            entry[2] += trace.costs[position]
    ranked = sorted(by_op.items(), key=lambda item: -item[1][2])
    return ", ".join(
        f"{name} {n}x {size / 2**20:.2f} MiB {seconds * 1e3:.1f} ms"
        for name, (n, size, seconds) in ranked
    )


def run(workload, steps: int) -> list:
    plain = workload.make(rg.Autodiff(rg.NumpyBackend()))
    full = plain(0)[0].peak_bytes
    strategies = {f: rg.BudgetCheckpointing(int(f * full)) for f in FRACTIONS}
    runs = {"none": plain}
    for f, strategy in strategies.items():
        runs[f] = workload.make(rg.Autodiff(rg.NumpyBackend(), strategy))
    seconds, ops = steps_in_turn(runs, steps)
    base = seconds["none"][SKIPPED:]
    columns = []
    for f in FRACTIONS:
        ours = seconds[f][SKIPPED:]
        ratios = [a / b for a, b in zip(ours, base)]
        columns += [
            f"{median(ours) / median(base):.3f}",
            f"{min(ratios):.2f}-{max(ratios):.2f}",
            "/".join(str(n) for n in sorted(set(ops[f][SKIPPED:]))),
        ]
    half = strategies[0.5]
    plan = half.planner.kept[0]
    planned = profile(plan.trace, plan.evict, plan.target, views=False).seconds
    fewest = recompute_floor(plan.trace, half.max_bytes)
    step = median(base)
    return [
        workload.name,
        f"{step * 1e3:.1f}",
        *columns,
        f"{planned / step:.3f}",
        f"{fewest / step:.3f}",
        recomputed_by_op(half),
    ]


HEADER = [
    "workload",
    "NoCkpt step CPU ms",
    "evicts nothing: CPU / NoCkpt",
    "paired range",
    "recomputed ops",
    "0.5x: CPU / NoCkpt",
    "paired range",
    "recomputed ops",
    "0.5x planned recompute / step",
    "fewest recompute / step",
    "0.5x recomputes (by op, priced)",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="quarter-size models")
    parser.add_argument("--only", default="mlp,masked,sdpa,nanogpt", help="workloads, commas")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    rows = [run(WORKLOADS[name](scale), args.steps) for name in args.only.split(",")]
    title = "Budget machinery and recomputation, CPU time against NoCheckpointing"
    print(title)
    print(table(rows, HEADER))
    write_results(
        "budget_overhead",
        {title: {"header": HEADER, "rows": rows}},
        command=common.command_line(),
    )


if __name__ == "__main__":
    main()
