"""``retrograd bench``: run the repository's benchmark scripts and collect their tables.

The scripts live in ``benchmarks/`` of the source checkout, not in the package: each is a
standalone program that prints a markdown table (retrograd beside the NumPy floor, and
PyTorch and JAX when they are installed). This module finds the folder from the package's
location in an editable install (``src/retrograd`` -> ``benchmarks``), runs the scripts one
after the other with this Python, echoes their output and returns it as one markdown text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._usage import CommandError

__all__ = [
    "BenchResult",
    "BenchmarksNotFoundError",
    "as_markdown",
    "find_benchmarks",
    "list_scripts",
    "run_benchmarks",
]

#: the order the scripts run in (others found in the folder follow, sorted)
PREFERRED_ORDER = ("bench_overhead", "bench_mlp", "bench_cnn", "bench_checkpointing", "bench_ddp")
#: scripts that need arguments no default can give (two checkouts to compare): run by hand
NOT_STANDALONE = ("bench_ddp_checkouts",)


class BenchmarksNotFoundError(FileNotFoundError):
    """The benchmark scripts are not where an editable install would have them."""


def find_benchmarks(directory: str | os.PathLike | None = None) -> Path:
    """The folder holding ``bench_*.py``: ``directory`` if given, else the ``benchmarks``
    folder of the source checkout this package was imported from."""
    if directory is not None:
        candidate = Path(directory)
    else:
        candidate = Path(__file__).resolve().parents[3] / "benchmarks"
    if not candidate.is_dir() or not any(candidate.glob("bench_*.py")):
        raise BenchmarksNotFoundError(
            f"no benchmark scripts (bench_*.py) in {candidate}: retrograd bench runs the "
            "scripts in the repository's benchmarks/ folder, which an installed package does "
            "not include. Clone the repository and install it editable "
            '(pip install -e ".[all]"), or pass --dir PATH/TO/benchmarks.'
        )
    return candidate


def list_scripts(directory: Path) -> list[Path]:
    """The scripts that run without arguments, in :data:`PREFERRED_ORDER` then by name."""
    scripts = [p for p in directory.glob("bench_*.py") if p.stem not in NOT_STANDALONE]
    rank = {name: i for i, name in enumerate(PREFERRED_ORDER)}
    return sorted(scripts, key=lambda p: (rank.get(p.stem, len(rank)), p.name))


@dataclass
class BenchResult:
    script: str
    returncode: int
    seconds: float
    output: str


def run_benchmarks(
    directory: Path,
    only: Sequence[str] = (),
    echo: Callable[[str], None] = print,
    timeout: float | None = None,
) -> list[BenchResult]:
    """Run the scripts (those named in ``only``, with or without ``bench_`` and ``.py``, or
    all), echoing each one's output as it finishes."""
    scripts = list_scripts(directory)
    if only:
        wanted = {name.removesuffix(".py").removeprefix("bench_") for name in only}
        unknown = wanted - {p.stem.removeprefix("bench_") for p in scripts}
        by_hand = sorted(n for n in unknown if f"bench_{n}" in NOT_STANDALONE)
        if by_hand:
            raise CommandError(
                f"benchmark {by_hand[0]} needs arguments (two checkouts to compare) — run it "
                f"by hand: python benchmarks/bench_{by_hand[0]}.py --help"
            )
        if unknown:
            known = ", ".join(p.stem.removeprefix("bench_") for p in scripts)
            raise CommandError(
                f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {known} — name one "
                "of those"
            )
        scripts = [p for p in scripts if p.stem.removeprefix("bench_") in wanted]
    env = dict(os.environ)
    source = str(Path(__file__).resolve().parents[2])  # the folder holding the retrograd package
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    results = []
    for script in scripts:
        echo(f"## {script.name}\n")
        started = time.perf_counter()
        try:
            completed = subprocess.run(
                [sys.executable, str(script)],
                cwd=directory.parent,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            code, output = completed.returncode, completed.stdout
            if code != 0:
                output += f"\n(failed with exit code {code})\n{completed.stderr}"
        except subprocess.TimeoutExpired as expired:
            code, output = -1, f"{expired.stdout or ''}\n(timed out after {timeout} s)"
        seconds = time.perf_counter() - started
        echo(output.rstrip() + "\n")
        results.append(BenchResult(script.name, code, seconds, output))
    return results


def as_markdown(results: Sequence[BenchResult]) -> str:
    """Every script's output under a heading of its own, with the command that reruns it."""
    parts = ["# retrograd benchmarks\n"]
    for result in results:
        status = "" if result.returncode == 0 else f" (failed: exit {result.returncode})"
        parts.append(
            f"## {result.script}{status}\n\n    python benchmarks/{result.script}\n\n"
            f"{result.output.rstrip()}\n"
        )
    return "\n".join(parts)
