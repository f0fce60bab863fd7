"""Run every benchmark with its standard arguments, one after the other, then regenerate the
docs from the results files they wrote.

    python benchmarks/run_all.py                  # all of them: the numbers the docs quote
    python benchmarks/run_all.py --only gpt ddp   # the runs of bench_gpt.py and bench_ddp.py
    python benchmarks/run_all.py --quick          # each in its quickest mode, results elsewhere
    python benchmarks/run_all.py --list           # the commands, without running them

Each run writes ``benchmarks/results/<name>.json`` (``common.write_results``); afterwards
``report.py`` rewrites the tables of docs/benchmarks.md and the README's numbers from them.
A ``bench_*.py`` that :func:`runs` does not list runs once with no arguments (its defaults),
unless :data:`NOT_RUN` names it: a tool that needs arguments no standard run can give
(``--list`` prints it with what it needs).
Run from anywhere; the runs start in the repository root. The machine should be quiet: every
number is a time, and other jobs on the cores make it someone else's.

``--quick`` checks the plumbing, not the speed: the results go to a temporary folder (or
``--results DIR``), the docs are rendered from them in memory and left unchanged.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: the environment variable ``common.write_results`` reads (``common`` itself is not imported
#: here: it pins BLAS threads in this process's environment, which ``bench_train`` must not get)
RESULTS_VARIABLE = "RETROGRAD_RESULTS"
#: scripts that cannot run without arguments of the caller's: their command, and why
NOT_RUN = {
    "bench_ddp_checkouts.py": (
        "python benchmarks/bench_ddp_checkouts.py BEFORE AFTER --rounds 5",
        "a before/after of two checkouts of the distributed code: name them",
    ),
}


def gpu_arguments(quick: bool) -> list[str]:
    """bench_gpu's: the issue's sizes on a GPU where torch sees one, else reduced ones on the
    CPU."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    has_gpu = (
        importlib.util.find_spec("torch") is not None
        and subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0
    )
    if has_gpu and not quick:
        return ["--device", "cuda"]
    return ["--device", "cpu", "--sizes", "small", "--repeats", "3" if quick else "15"]


def runs(quick: bool) -> list[tuple[str, list[str]]]:
    """(script, arguments) in the order they run: standard, or the quickest mode of each."""
    if quick:
        return [
            ("bench_overhead.py", ["--repeats", "5"]),
            ("bench_mlp.py", []),
            ("bench_cnn.py", ["--reps", "3"]),
            ("bench_capture.py", ["--repeats", "3"]),
            ("bench_gpt.py", ["--size", "small", "--rounds", "1", "--inner", "numpy"]),
            ("bench_gpt.py", ["--size", "small", "--rounds", "1", "--inner", "torch"]),
            ("bench_checkpointing.py", ["--quick"]),
            ("bench_ddp.py", ["--steps", "5", "--warmup", "1", "--trials", "1"]),
            (
                "bench_ddp.py",
                ["--scaling", "--ranks", "2", "--batches", "128", "--trials", "1"]
                + ["--steps", "5", "--warmup", "1"],
            ),
            ("bench_ddp.py", ["--predict"]),
            ("bench_ddp.py", ["--overhead", "--trials", "1", "--warmup", "1"]),
            ("bench_gpu.py", gpu_arguments(quick)),
            ("bench_train.py", ["--quick"]),
            ("bench_lm.py", ["--rounds", "1"]),
            ("bench_convnets.py", ["--rounds", "1", "--only", "cnn"]),
            ("bench_convs.py", ["--repeats", "1", "--only", "cnn"]),
            ("bench_budget_loops.py", ["--quick"]),
            ("bench_budget_overhead.py", ["--quick", "--steps", "6"]),
            ("bench_budget_plan.py", ["--quick", "--rounds", "1"]),
            ("bench_budget_noise.py", ["--seeds", "2", "--sigmas", "1"]),
            ("bench_budget_zoo.py", ["--only", "llama,mobilenet_v2", "--steps", "4"]),
            ("bench_zero.py", ["--steps", "2", "--trials", "1", "--warmup", "1"]),
        ]
    return [
        ("bench_overhead.py", []),
        ("bench_mlp.py", []),
        ("bench_cnn.py", ["--reps", "30"]),
        ("bench_capture.py", ["--repeats", "15"]),
        ("bench_gpt.py", ["--size", "both", "--rounds", "5", "--inner", "numpy"]),
        ("bench_gpt.py", ["--size", "both", "--rounds", "5", "--inner", "torch"]),
        ("bench_checkpointing.py", ["--repeats", "3"]),
        ("bench_ddp.py", ["--trials", "5"]),
        (
            "bench_ddp.py",
            ["--scaling", "--ranks", "2,8", "--batches", "128,1024"]
            + ["--trials", "4", "--steps", "100"],
        ),
        ("bench_ddp.py", ["--predict"]),
        ("bench_ddp.py", ["--overhead"]),
        ("bench_gpu.py", gpu_arguments(quick)),
        ("bench_train.py", []),
        ("bench_lm.py", ["--rounds", "10"]),
        ("bench_convnets.py", []),
        ("bench_convs.py", ["--repeats", "5"]),
        ("bench_budget_loops.py", []),
        ("bench_budget_overhead.py", []),
        ("bench_budget_plan.py", []),
        ("bench_budget_noise.py", []),
        ("bench_budget_zoo.py", []),
        ("bench_budget_zoo.py", ["--inner", "torch"]),
        ("bench_zero.py", []),
    ]


def plan(quick: bool, only: list[str]) -> list[tuple[str, list[str]]]:
    """:func:`runs`, then every other ``bench_*.py`` but those of :data:`NOT_RUN` with its
    defaults; ``only`` keeps the scripts whose name contains one of its words."""
    listed = runs(quick)
    known = {script for script, _ in listed} | set(NOT_RUN)
    listed += [
        (path.name, []) for path in sorted(HERE.glob("bench_*.py")) if path.name not in known
    ]
    return [
        (script, arguments)
        for script, arguments in listed
        if not only or any(word in script for word in only)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=[], help="words of script names to run")
    parser.add_argument("--quick", action="store_true", help="quickest modes, docs untouched")
    parser.add_argument("--results", help="folder for the results files (--quick: a temporary one)")
    parser.add_argument("--list", action="store_true", help="print the commands and stop")
    options = parser.parse_args(argv)
    todo = plan(options.quick, options.only)
    if options.list:
        for script, arguments in todo:
            print(" ".join(["python", f"benchmarks/{script}", *arguments]))
        for script, (command, why) in NOT_RUN.items():
            if not options.only or any(word in script for word in options.only):
                print(f"# not run: {command}  ({why})")
        return 0
    environment = dict(os.environ)  # the runs import this checkout's retrograd
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "src"), environment.get("PYTHONPATH")])
    )
    results = options.results or (
        tempfile.mkdtemp(prefix="retrograd-results-") if options.quick else None
    )
    if results:
        environment[RESULTS_VARIABLE] = str(Path(results).resolve())
    failed = []
    for script, arguments in todo:
        command = [sys.executable, str(HERE / script), *arguments]
        print(f"\n==> python benchmarks/{script} {' '.join(arguments)}", flush=True)
        started = time.perf_counter()
        returncode = subprocess.run(command, cwd=ROOT, env=environment).returncode
        print(
            f"<== {script}: exit {returncode} after {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        if returncode != 0:
            failed.append(" ".join([script, *arguments]))
    if results:
        stale = report.stale(folder=Path(results))
        print(f"\nresults in {results}; rendered from them, these documents would change:")
        for path in stale:
            print(f"  {path.relative_to(ROOT)}")
    else:
        report.main([])
    for run in failed:
        print(f"failed: {run}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
