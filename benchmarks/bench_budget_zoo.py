"""BudgetCheckpointing on the model zoo of ``tests/test_model_zoo.py``: memory held and work
done per step, against NoCheckpointing.

The issue's loops (``bench_budget_loops.py``) are four workloads of one shape each. This runs
every model of the zoo (torchvision's CNNs, Swin, ViTs, LLaMA, DiT: the builders and the
training options of ``tests/test_model_zoo.py``, at the zoo's tiny sizes) for ``--steps``
training steps, inputs drawn per step, under NoCheckpointing and under budgets of 0.5x and
0.25x of NoCheckpointing's first step's ``Gradients.peak_bytes``, and reports per model and
budget: the peak of the first (eager) step and of the last one against NoCheckpointing's,
whether it is within the budget and a tenth of NoCheckpointing's peak (the issue's bound),
the ops recomputed by the last step, whether every step after the second held and
recomputed the same, the plan's mode, and whether every step's loss and gradients have
NoCheckpointing's bits.

At these sizes the input batch is up to a third of a model's peak and one block up to half
of it (the zoo's models are 2-4 blocks deep), so a budget of 0.25x is often below what any
schedule can hold: the row says so (the mode ``floor``, or an anchored schedule's peak).

    python benchmarks/bench_budget_zoo.py [--steps 7] [--only mobilenet_v2,dit] [--inner torch]

It writes ``benchmarks/results/budget_zoo.json`` (``budget_zoo_torch.json`` with ``--inner torch``;
``benchmarks/common.py: write_results``).
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import sys

import common  # (first: pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from common import table, write_results

TESTS = pathlib.Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

import test_model_zoo as zoo_tests  # noqa: E402  (tests/: the zoo's builders and options)
from retrograd import nn as rnn  # noqa: E402
from retrograd import optim as roptim  # noqa: E402
from retrograd.nn import functional as RF  # noqa: E402, N812

FRACTIONS = (0.5, 0.25)
HEADER = [
    "model",
    "budget",
    "NoCkpt peak KiB",
    "first step / NoCkpt",
    "last step / NoCkpt",
    "within budget + 10%",
    "ops recomputed",
    "same every step from 3",
    "mode",
    "bit-identical",
]


def inner_backend(kind: str) -> rg.Backend:
    return rg.TorchBackend("cpu") if kind == "torch" else rg.NumpyBackend()


def run(name: str, strategy, steps: int, inner: str) -> list[tuple]:
    """Per step: a digest of the loss and every gradient, the peak and the ops recomputed."""
    build, options, _, inputs, loss_fn, kind, dtype = zoo_tests.ZOO[name]
    rows = []
    with rg.use_backend(rg.Autodiff(inner_backend(inner), checkpointing=strategy)):
        rg.seed(1)
        model = build(rg, rnn, RF, **options)
        if dtype == "float64":
            model = model.double()
        optimizer = zoo_tests._optimizer(roptim, kind, model.parameters())
        rng = np.random.default_rng(7)
        for _ in range(steps):
            args, target = inputs(rng)
            out = model(*[zoo_tests._tensor(rg, a) for a in args])
            target = None if target is None else zoo_tests._tensor(rg, target)
            loss = loss_fn(rg, RF, out, target)
            grads = loss.backward()
            digest = hashlib.sha1(loss.numpy().tobytes())
            for parameter in model.parameters():
                found = parameter.grad(grads) if parameter.requires_grad else None
                if found is not None:
                    digest.update(found.numpy().tobytes())
            rows.append((digest.hexdigest(), grads.peak_bytes, grads.recomputed_ops))
            optimizer.step(grads)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--only", default="", help="models, comma-separated")
    parser.add_argument("--inner", choices=("numpy", "torch"), default="numpy")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(zoo_tests.ZOO)
    rows = []
    for name in names:
        plain = run(name, rg.NoCheckpointing(), args.steps, args.inner)
        full = plain[0][1]
        for fraction in FRACTIONS:
            budget = int(fraction * full)
            strategy = rg.BudgetCheckpointing(budget)
            found = run(name, strategy, args.steps, args.inner)
            settled = {(peak, ops) for _, peak, ops in found[2:]}
            last = found[-1]
            rows.append(
                [
                    name,
                    f"{fraction}x",
                    f"{full / 1024:.0f}",
                    f"{found[0][1] / full:.3f}",
                    f"{last[1] / full:.3f}",
                    "yes" if last[1] <= budget + 0.1 * full else "no",
                    str(last[2]),
                    "yes" if len(settled) == 1 else "no",
                    ",".join(plan.mode for plan in strategy.planner.kept[:1]) or "-",
                    "yes" if [d for d, _, _ in found] == [d for d, _, _ in plain] else "NO",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    title = f"BudgetCheckpointing on the model zoo ({args.inner} inner backend, {args.steps} steps)"
    print()
    print(f"**{title}**")
    print(table(rows, HEADER))
    tables = {"zoo": {"header": HEADER, "rows": rows, "title": title}}
    notes = (
        "peaks: Gradients.peak_bytes against NoCheckpointing's first step; within budget + 10%: "
        "the last step's peak against the budget plus a tenth of NoCheckpointing's; "
        "bit-identical: every step's loss and gradients"
    )
    command = common.command_line()
    if args.inner == "torch":
        write_results("budget_zoo_torch", tables, command=command, notes=notes)
    else:
        write_results("budget_zoo", tables, command=command, notes=notes)


if __name__ == "__main__":
    main()
