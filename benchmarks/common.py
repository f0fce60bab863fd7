"""Shared benchmark plumbing: one BLAS thread, interleaved timing, machine description, tables.

Import this module before NumPy anywhere in a benchmark script: it pins every BLAS and OpenMP
pool to one thread through the environment (and through threadpoolctl where installed).
"""

from __future__ import annotations

import os

for _variable in (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    os.environ[_variable] = "1"
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import importlib  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

try:  # where installed, also cap pools that ignore the environment
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
except ImportError:  # pragma: no cover - optional
    pass


def optional(module: str):
    """The module if it is installed, else ``None`` (comparisons skip it)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def torch_single_thread():
    torch = optional("torch")
    if torch is not None:
        torch.set_num_threads(1)
    return torch


def interleaved(
    candidates: dict[str, Callable[[], object]], repeats: int, warmup: int = 2, loop: int = 1
) -> dict[str, list[float]]:
    """Time each candidate ``repeats`` times, taking turns (A B C A B C ...), so that a
    machine whose speed drifts affects all of them alike; returns seconds per call.

    ``loop``: each turn times that many consecutive calls (seconds per call: their mean), as
    a training loop makes them; with one, each call follows another candidate's and starts
    with caches that one left."""
    for function in candidates.values():
        for _ in range(warmup * loop):
            function()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, function in candidates.items():
            start = time.perf_counter()
            for _ in range(loop):
                function()
            times[name].append((time.perf_counter() - start) / loop)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def machine() -> str:
    versions = [f"Python {platform.python_version()}", f"NumPy {np.__version__}"]
    for name in ("torch", "jax", "autograd"):
        module = optional(name)
        if module is not None:
            versions.append(f"{name} {getattr(module, '__version__', '?')}")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, one BLAS thread; " + ", ".join(versions)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, rule, *body])


def machine_info() -> dict[str, object]:
    """The machine and library versions a result was measured with, as data."""
    info: dict[str, object] = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "blas_threads": 1,
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as meminfo:
            info["memory_gib"] = round(int(meminfo.readline().split()[1]) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        pass
    controller = optional("threadpoolctl")
    if controller is not None:  # NumPy's BLAS: the library, its version and kernels
        pools = [pool for pool in controller.threadpool_info() if pool.get("user_api") == "blas"]
        numpy_pools = [pool for pool in pools if "numpy" in pool.get("filepath", "")]
        for pool in (numpy_pools or pools)[:1]:
            kernels = f", {pool['architecture']} kernels" if pool.get("architecture") else ""
            # OpenBLAS takes its kernels from OPENBLAS_CORETYPE when set (this workplace's
            # machines set Haswell: AVX2 kernels even on CPUs with AVX-512, where torch's
            # MKL and oneDNN use AVX-512): say so beside the numbers it bounds
            pinned = os.environ.get("OPENBLAS_CORETYPE")
            if pinned:
                kernels += f" (OPENBLAS_CORETYPE={pinned})"
            info["blas"] = f"{pool['internal_api']} {pool.get('version')}{kernels}"
    flags = _cpu_flags()
    if flags:
        info["avx512"] = "avx512f" in flags
    for name in ("scipy", "torch", "jax", "mpi4py", "numba", "numexpr"):
        module = optional(name)
        if module is not None:
            info[name] = getattr(module, "__version__", "?")
    return info


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def command_line(argv: list[str] | None = None) -> str:
    """How this benchmark was started, as the command a reader reruns from the repository root
    (``python benchmarks/bench_mlp.py --flag value``): the ``command`` of its results file."""
    import shlex
    import sys

    argv = sys.argv if argv is None else argv
    return shlex.join(["python", f"benchmarks/{os.path.basename(argv[0])}", *argv[1:]])


#: the environment variable naming another folder for the results files
RESULTS_VARIABLE = "RETROGRAD_RESULTS"


def results_folder():
    """Where results files go: ``benchmarks/results``, or ``$RETROGRAD_RESULTS``; created."""
    import pathlib

    default = pathlib.Path(__file__).resolve().parent / "results"
    folder = pathlib.Path(os.environ.get(RESULTS_VARIABLE) or default)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def source_commit() -> str:
    """The commit of the checkout the benchmark ran from (``+ changes`` when its code, ``src/``
    or ``benchmarks/``, differs from it), or ``""`` outside a git checkout."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ["--", "src", "benchmarks", ":(exclude)benchmarks/results"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", *code],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return ""
    return f"{commit} + changes" if commit and changed else commit


def write_results(
    name: str,
    tables: dict[str, dict[str, object]],
    *,
    command: str,
    notes: str = "",
    machine: dict[str, object] | None = None,
) -> str:
    """Write ``<results_folder()>/<name>.json``: what was run (``command``), from which commit,
    when (UTC), on what machine and versions (``machine``, default :func:`machine_info`), and
    each table as ``{"header": [...], "rows": [[...], ...]}`` (extra keys, such as ``"note"``,
    are kept). The docs quote these files, never a number typed by hand;
    ``python benchmarks/report.py`` renders them. ``$RETROGRAD_RESULTS`` names another folder
    (``run_all.py --quick`` writes there, leaving the quoted files alone)."""
    import datetime
    import json

    folder = results_folder()
    record = {
        "benchmark": name,
        "command": command,
        "commit": source_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info() if machine is None else machine,
        "notes": notes,
        "tables": tables,
    }
    path = folder / f"{name}.json"
    temporary = path.with_suffix(f".json.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(record, indent=1, default=str) + "\n")
    os.replace(temporary, path)
    print(f"results: {path}")
    return str(path)
