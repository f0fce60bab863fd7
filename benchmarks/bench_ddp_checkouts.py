"""Before and after a change to ``retrograd.distributed``: ``bench_ddp.py`` of two checkouts,
run in alternation (round k runs every case on A then B, round k + 1 on B then A), so that a
machine whose load drifts hits both alike. Each run already pairs ``ddp`` with ``naive`` in
the same ranks (``--ab``), so the ratio ddp / naive is compared, not raw times::

    git worktree add --detach /tmp/ddp-before <commit>
    python benchmarks/bench_ddp_checkouts.py /tmp/ddp-before . --rounds 5

Cases: 2 ranks with the overlap on and off, 8 ranks (ranks outnumber the cores: shared
memory), and what a 1-rank context adds to a step of the deep MLP (CPU ms). Prints, per case
and checkout, the median and range over rounds, and writes
``benchmarks/results/ddp_checkouts.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from common import table, write_results

AB = ["--ab", "--batches", "128", "--steps", "8", "--trials", "6"]
CASES = {
    "2 ranks, overlap on": [*AB, "--ranks", "2", "--overlap", "on"],
    "2 ranks, overlap off": [*AB, "--ranks", "2", "--overlap", "off"],
    "8 ranks, overlap auto": [*AB, "--ranks", "8"],
    "1-rank context, deep MLP": ["--overhead", "--models", "deep", "--bucket-bytes", "0"],
}
#: what an --ab run and an --overhead run print
_AB = re.compile(r"ddp / naive ([\d.]+).*paired difference ([+-][\d.]+) ms")
_OVERHEAD = re.compile(r"([-\d.]+) ms of overhead; CPU [\d.]+ / [\d.]+ ms: ([-\d.]+) ms")


def run(checkout: Path, arguments: list[str]) -> tuple[float, float]:
    """One ``bench_ddp.py`` run of ``checkout``: (ddp / naive, CPU ms ddp - naive) for
    ``--ab``, (CPU ms, wall ms a 1-rank context adds) for ``--overhead``."""
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"))
    command = [sys.executable, str(checkout / "benchmarks" / "bench_ddp.py"), *arguments]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if "--overhead" in arguments:
        found = _OVERHEAD.search(completed.stdout)
        if found:
            return float(found.group(2)), float(found.group(1))
    else:
        found = _AB.search(completed.stdout)
        if found:
            return float(found.group(1)), float(found.group(2))
    raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stdout}\n{completed.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the checkout before the change")
    parser.add_argument("after", type=Path, help="the checkout after it")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    checkouts = {"before": options.before.resolve(), "after": options.after.resolve()}
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {
        (case, name): [] for case in CASES for name in checkouts
    }
    for k in range(options.rounds):
        for case, arguments in CASES.items():
            for name in list(checkouts)[:: 1 if k % 2 == 0 else -1]:
                runs[(case, name)].append(run(checkouts[name], arguments))
                print(f"round {k + 1}: {case}, {name}: {runs[(case, name)][-1]}", flush=True)
    rows = []
    for (case, name), values in runs.items():
        first, second = ([v[i] for v in values] for i in (0, 1))
        rows.append(
            [
                case,
                name,
                f"{statistics.median(first):.3f} ({min(first):.3f}-{max(first):.3f})",
                f"{statistics.median(second):+.2f} ({min(second):+.2f}-{max(second):+.2f})",
            ]
        )
    header = [
        "case",
        "checkout",
        "ddp / naive, or CPU ms a 1-rank context adds (median, range)",
        "CPU ms ddp - naive, or wall ms a 1-rank context adds",
    ]
    print(table(rows, header))
    command = f"python benchmarks/bench_ddp_checkouts.py BEFORE AFTER --rounds {options.rounds}"
    notes = f"before: {checkouts['before']}, after: {checkouts['after']}"
    tables = {"before/after": {"header": header, "rows": rows}}
    write_results("ddp_checkouts", tables, command=command, notes=notes)


if __name__ == "__main__":
    main()
