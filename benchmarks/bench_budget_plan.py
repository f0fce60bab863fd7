"""What a memory budget's plan costs to make: the greedy search over one recorded step.

On the workloads of ``bench_budget_loops.py`` (NumPy backend, float32) at budgets of 0.5x and
0.25x of NoCheckpointing's peak, two steps run under ``BudgetCheckpointing`` and the second
step's trace (what the plan is made from) is kept; then ``plan.plan_evictions`` (the greedy
search: one call of the plan's memory model per trial eviction) is timed on it with the
compiled model (``profile_kernel``) and with the same loops in Python (``profile_loops``, the
kernel's specification), in turn, ``--rounds`` times each. Both must give the same plan.
Columns: the values traced, the values the search profiled (its effort, capped by
``plan.PLAN_EFFORT``), the median milliseconds of each and their ratio. **What bounds it:**
with the model compiled, the rest of the search is Python (ranking the candidates each round,
their recomputation prices); a plan is made once per graph, when the second step starts.

    python benchmarks/bench_budget_plan.py [--rounds 5] [--only mlp,masked] [--quick]

It writes ``benchmarks/results/budget_plan.json``.
"""

from __future__ import annotations

import argparse
import time

import common  # (first: pins BLAS threads before NumPy loads)

# isort: split
import retrograd as rg
from bench_budget_loops import WORKLOADS
from common import median, table, write_results
from retrograd.autodiff.checkpoint.budget import plan
from retrograd.autodiff.checkpoint.budget.plan import PLAN_EFFORT, Effort, plan_evictions
from retrograd.autodiff.checkpoint.budget.profile_kernel import profile_loops

FRACTIONS = (0.5, 0.25)
COMPILED = plan.profile


def in_python(trace, evicted, budget=0, views=True) -> plan.Profile:
    return plan.Profile(*profile_loops(trace, evicted, budget, views))


def recorded_trace(workload, fraction: float) -> tuple[plan.Trace, int]:
    """The trace a plan is made from at ``fraction`` of NoCheckpointing's peak, and the
    budget."""
    full = workload.make(rg.Autodiff(rg.NumpyBackend()))(0)[0].peak_bytes
    strategy = rg.BudgetCheckpointing(int(fraction * full))
    step = workload.make(rg.Autodiff(rg.NumpyBackend(), strategy))
    step(0)
    step(1)
    return strategy.planner.kept[0].trace, strategy.max_bytes


def timed(model, trace: plan.Trace, budget: int) -> tuple[float, list[bool], int]:
    plan.profile = model
    try:
        effort = Effort()
        start = time.perf_counter()
        evicted = plan_evictions(trace, budget, effort)[0]
        return time.perf_counter() - start, evicted, PLAN_EFFORT - effort.left
    finally:
        plan.profile = COMPILED


def run(workload, rounds: int) -> list[list]:
    rows = []
    for fraction in FRACTIONS:
        trace, budget = recorded_trace(workload, fraction)
        timed(COMPILED, trace, budget)  # the kernel loaded (numba's cache) before timing
        seconds: dict = {"compiled": [], "python": []}
        plans = set()
        for index in range(rounds):
            order = [("compiled", COMPILED), ("python", in_python)]
            for name, model in order if index % 2 == 0 else order[::-1]:
                spent, evicted, profiled = timed(model, trace, budget)
                seconds[name].append(spent)
                plans.add(tuple(evicted))
        assert len(plans) == 1, "the compiled model and the Python loops planned differently"
        ours, theirs = median(seconds["compiled"]), median(seconds["python"])
        rows.append(
            [
                workload.name,
                f"{fraction}x",
                len(trace.sizes),
                f"{profiled:,}",
                f"{ours * 1e3:.1f}",
                f"{theirs * 1e3:.1f}",
                f"{theirs / ours:.2f}",
            ]
        )
    return rows


HEADER = [
    "workload",
    "budget",
    "values traced",
    "values profiled",
    "compiled model ms",
    "Python loops ms",
    "Python / compiled",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="quarter-size models")
    parser.add_argument("--only", default="mlp,masked,sdpa,nanogpt", help="workloads, commas")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    rows = []
    for name in args.only.split(","):
        rows.extend(run(WORKLOADS[name](scale), args.rounds))
    title = "A budget's plan: the greedy search on one recorded step, by the model it calls"
    print(title)
    print(table(rows, HEADER))
    write_results(
        "budget_plan",
        {title: {"header": HEADER, "rows": rows}},
        command=common.command_line(),
    )


if __name__ == "__main__":
    main()
