"""How a memory budget's steps depend on timing noise: the residual MLP of
``tests/test_budget_repeat.py`` (6 layers, batch 16, width 64, float32, NumPy backend) under
``BudgetCheckpointing`` at a quarter of NoCheckpointing's peak, whose graph allows 4 values
of its 13 (under the plans' floor: the steps follow the floor or a replay of an eager step).

The budget's clock is replaced by a fake one: every read advances it by 1 µs times a
log-normal factor (σ given, seeded), so every op's measured time is jittered, as on a
loaded machine, but reproducibly. Each seed runs ``--steps`` steps; the table counts the
seeds whose steps after the first (every one follows the plan made from it) held more than 4
values, or did not all recompute the same ops.

    python benchmarks/bench_budget_noise.py [--seeds 30] [--steps 6] [--sigmas 0.3,1,2]

Not a timing: nothing here depends on the machine. It writes
``benchmarks/results/budget_noise.json``.
"""

from __future__ import annotations

import argparse
import random
import types

import common  # (first: pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from common import table, write_results
from retrograd.autodiff.checkpoint.budget import strategy, timer

WIDTH, BATCH, LAYERS = 64, 16, 6
VALUE = WIDTH * BATCH * 4  # bytes of one activation
LEAST = 4  # values the graph's least schedule holds (docs/checkpointing.md)


def mlp_step(backend: rg.Autodiff, index: int) -> rg.Gradients:
    rng = np.random.default_rng(0)
    arrays = [
        (rng.standard_normal((WIDTH, WIDTH)) / WIDTH**0.5).astype(np.float32)
        for _ in range(2 * LAYERS)
    ]
    data = np.random.default_rng(index).standard_normal((BATCH, WIDTH)).astype(np.float32)
    with rg.use_backend(backend):
        ws = [rg.tensor(a).require_grad() for a in arrays]
        h = rg.tensor(data)
        for k in range(LAYERS):
            h = h + (h @ ws[2 * k]).tanh() @ ws[2 * k + 1]
        return (h * h).mean().backward()


def run(seed: int, sigma: float, steps: int) -> list[tuple[int, int]]:
    """(values held, ops recomputed) of each step, under a clock jittered by ``sigma``."""
    draw = random.Random(seed)
    now = [0.0]

    def clock() -> float:
        now[0] += 1e-6 * draw.lognormvariate(0.0, sigma)
        return now[0]

    timer.time = types.SimpleNamespace(perf_counter=clock)
    strategy.perf_counter = clock
    peak = mlp_step(rg.Autodiff(rg.NumpyBackend()), 0).peak_bytes
    backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=rg.BudgetCheckpointing(peak // 4))
    held = []
    for i in range(steps):
        grads = mlp_step(backend, i)
        held.append((grads.peak_bytes // VALUE, grads.recomputed_ops))
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--sigmas", default="0.3,1,2")
    args = parser.parse_args()
    header = [
        "σ",
        "seeds",
        "first step held > 4",
        "a step after the first held > 4",
        "steps after the first differ",
    ]
    rows = []
    for sigma in [float(s) for s in args.sigmas.split(",")]:
        first_over = over = unsteady = 0
        for seed in range(args.seeds):
            held = run(seed, sigma, args.steps)
            after = held[1:]
            first_over += held[0][0] > LEAST
            over += any(values > LEAST for values, _ in after)
            unsteady += len({ops for _, ops in after}) > 1
        rows.append([f"{sigma:g}", args.seeds, first_over, over, unsteady])
    print(table(rows, header))
    write_results(
        "budget_noise",
        {"residual MLP at 0.25x, jittered clock": {"header": header, "rows": rows}},
        command=common.command_line(),
    )


if __name__ == "__main__":
    main()
