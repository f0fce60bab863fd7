"""``retrograd train`` end to end: the commands a user types, timed as they run for a user.

Each run is a fresh ``python -m retrograd train ...`` process (Python start-up and data loading
in its wall time, BLAS threads left at NumPy's default, as the command has them), writing into
a temporary folder; what the table reports comes from that run's ``metrics.json``:

- the CNN on scikit-learn's digits with the defaults (``retrograd train``), under
  ``--checkpointing balanced`` and with ``--workers 2``: time, test accuracy, one step's peak
  activation memory, bytes recomputed, and how far each run's per-step losses are from the
  default run's (balanced must be identical; two workers differ by float32 rounding);
- the character GPT on the standard library's source (``retrograd train --model gpt``): time,
  characters per second, and its learning curve against the unigram baseline.

    python benchmarks/bench_train.py            # the defaults (about a minute on 2 cores)
    python benchmarks/bench_train.py --quick    # 1 epoch and 40 GPT steps: checks the plumbing
"""

from __future__ import annotations

import os

#: the environment before ``common`` pins BLAS to one thread: the runs get the user's
USER_ENVIRONMENT = dict(os.environ)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import common  # noqa: E402

SOURCE = Path(__file__).resolve().parents[1] / "src"

#: (label, the arguments after ``retrograd train``)
CNN_RUNS = [
    ("CNN, digits", []),
    ("CNN, digits, BalancedCheckpointing", ["--checkpointing", "balanced"]),
    ("CNN, digits, 2 workers (threads)", ["--workers", "2"]),
]
GPT_RUN = ("GPT, the standard library's source", ["--model", "gpt"])
QUICK = {"cnn": ["--epochs", "1"], "gpt": ["--steps", "40", "--eval-interval", "20"]}


def train(arguments: list[str], out: Path) -> tuple[float, dict]:
    """Run ``retrograd train arguments --out out``; (wall seconds, its metrics.json)."""
    environment = dict(USER_ENVIRONMENT)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SOURCE), USER_ENVIRONMENT.get("PYTHONPATH")])
    )
    command = [sys.executable, "-m", "retrograd", "train", *arguments, "--out", str(out)]
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=environment)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stdout}\n{completed.stderr}")
    return wall, json.loads((out / "metrics.json").read_text())


def loss_difference(losses: list[float], reference: list[float]) -> str:
    """How far one run's per-step losses are from the reference run's."""
    if losses == reference:
        return "identical"
    worst = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, reference))
    return f"max relative difference {worst:.1e}"


def mib(count: float) -> str:
    return f"{count / 2**20:.1f} MiB"


def row(
    label: str,
    arguments: list[str],
    wall: float,
    summary: dict,
    throughput: str,
    result: str,
    difference: str,
) -> list[str]:
    """A run's row of the table (printed as it is made)."""
    cells = [label, " ".join(["retrograd train", *arguments]), f"{wall:.1f}"]
    cells += [f"{summary['train_seconds']:.1f}", throughput, result]
    cells += [mib(summary["peak_activation_bytes"]), mib(summary["recomputed_bytes"]), difference]
    print(" | ".join(cells), flush=True)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 CNN epoch, 40 GPT steps")
    options = parser.parse_args()
    header = ["run", "command", "wall s", "training s", "throughput", "result"]
    header += ["peak activation memory", "recomputed", "per-step losses vs the first run"]
    rows = []
    reference = None
    with tempfile.TemporaryDirectory() as folder:
        for index, (label, arguments) in enumerate(CNN_RUNS):
            arguments = arguments + (QUICK["cnn"] if options.quick else [])
            wall, metrics = train(arguments, Path(folder) / f"cnn{index}")
            summary, losses = metrics["summary"], metrics["step_losses"]
            reference = losses if reference is None else reference
            throughput = f"{summary['samples_per_second']:,.0f} samples/s"
            accuracy = f"{100 * summary['test_accuracy']:.2f}% test accuracy"
            difference = "" if losses is reference else loss_difference(losses, reference)
            rows.append(row(label, arguments, wall, summary, throughput, accuracy, difference))
        label, arguments = GPT_RUN
        arguments = arguments + (QUICK["gpt"] if options.quick else [])
        wall, metrics = train(arguments, Path(folder) / "gpt")
    summary, losses = metrics["summary"], metrics["step_losses"]
    throughput = f"{summary['tokens_per_second']:,.0f} characters/s"
    loss = f"validation loss {summary['val_loss']:.2f} nats/char"
    rows.append(row(label, arguments, wall, summary, throughput, loss, ""))
    baseline = summary["unigram_baseline"]
    below = next((i + 1 for i, loss in enumerate(losses) if loss < baseline), None)
    vocabulary = metrics["corpus"]["vocab_size"]
    curve = [
        ["vocabulary, characters", str(vocabulary)],
        ["uniform guess, nats/char", f"{math.log(vocabulary):.2f}"],
        ["loss at the first step, nats/char", f"{summary['first_loss']:.2f}"],
        ["unigram baseline, nats/char", f"{baseline:.2f}"],
        ["first step below the unigram baseline", "none" if below is None else str(below)],
        ["train loss at the end, nats/char", f"{summary['train_loss']:.2f}"],
        ["validation loss at the end, nats/char", f"{summary['val_loss']:.2f}"],
        ["steps", str(summary["step"])],
        ["parameters", f"{summary['parameters']:,}"],
    ]
    tables = {
        "Runs (wall time: the whole command, Python start-up and data loading included)": {
            "header": header,
            "rows": rows,
        },
        "The GPT's learning curve (`retrograd train --model gpt`)": {
            "header": ["measure", "value"],
            "rows": curve,
        },
    }
    for measure, value in curve:
        print(f"{measure}: {value}")
    machine = common.machine_info()
    machine["blas_threads"] = "NumPy's default"
    common.write_results("train", tables, command=common.command_line(), machine=machine)


if __name__ == "__main__":
    main()
