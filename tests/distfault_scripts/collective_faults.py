"""Faults of user collectives, run as 2 ranks (``collective_faults.py ENGINE MODES TIMEOUT
OUT``; ENGINE ``mpi`` under mpiexec or ``torch`` under torchrun). MODES: one MODE, or several
joined by ``+``, run in turn in one launch, each with a context of its own and its reports in
``OUT/MODE`` (``exit`` ends the launch: it comes last):

- ``raised_before``: rank 1 raises (its own error) instead of calling the first all_reduce;
  once rank 0's has failed, both ranks call two more;
- ``mismatch``: the ranks' all_reduce (then all_gather, reduce_scatter, broadcast) disagree
  on shape, then a matching all_reduce; the same for dtype;
- ``exit``: after one good all_reduce, rank 1 exits before the next.

Every live rank writes ``OUT/MODE/rank{r}.json``: per call, the error (class and message) or
the value, and how long it took; but for ``exit``, once its context closed, whether its group
broke (``broken``: the reason, which ends the process with status 1 at exit, or null).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import retrograd as rg
from retrograd import distributed as dist


def attempt(name, call, report) -> None:
    started = time.monotonic()
    try:
        report[name] = {"value": call().resolve().numpy().tolist()}
    except rg.RetrogradError as error:
        report[name] = {"error": type(error).__name__, "message": str(error)}
    report[name]["elapsed"] = time.monotonic() - started


def mismatched_calls(kind, rank, tensor, devices, report) -> None:
    """Every collective with this rank's tensor differing from the other's in ``kind``."""
    values = [1.0, 2.0, 3.0, 4.0][: 4 - 2 * rank] if kind == "shape" else [1.0, 2.0]
    dtype = (rg.float32 if rank == 0 else rg.float64) if kind == "dtype" else None
    calls = {
        "all_reduce": lambda: dist.all_reduce(
            tensor(values, dtype), dist.ReduceOperation.SUM, devices
        ),
        "all_gather": lambda: dist.all_gather(tensor(values, dtype), devices),
        "reduce_scatter": lambda: dist.reduce_scatter(
            tensor(values, dtype), dist.ReduceOperation.SUM, devices
        ),
        "broadcast": lambda: dist.broadcast(tensor(values, dtype), 0, devices),
    }
    for name, call in calls.items():
        attempt(f"{kind} {name}", call, report)


def main() -> None:
    engine, modes, timeout, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), Path(sys.argv[4])
    for mode in modes.split("+"):
        (out / mode).mkdir(exist_ok=True)
        run(engine, mode, timeout, out / mode)


def run(engine: str, mode: str, timeout: float, out: Path) -> None:
    config = dist.DistributedConfig(dist.ReduceOperation.SUM, timeout=timeout)
    ctx = dist.DistributedContext.from_launcher(config, engine=engine).start()
    rank, devices = ctx.rank, ctx.devices
    report: dict = {"rank": rank}

    def tensor(values, dtype=None):
        return rg.tensor(values, device=ctx.device, dtype=dtype)

    def sum_of(values, dtype=None):
        return lambda: dist.all_reduce(tensor(values, dtype), dist.ReduceOperation.SUM, devices)

    if mode == "exit":
        # one good call first: both ranks are past setting up when rank 1 dies
        attempt("good", sum_of([1.0]), report)
        if rank == 1:
            os._exit(3)
    if mode == "raised_before":
        if rank == 0:
            attempt("first", sum_of([1.0, 2.0]), report)
        else:
            report["first"] = {"error": "own", "elapsed": 0.0}
            # the step failed on this rank: it starts the next once the others' failed too
            time.sleep(timeout + 0.5)
        attempt("second", sum_of([10.0 * (rank + 1)]), report)
        attempt("third", sum_of([1.0 + rank]), report)
    elif mode == "mismatch":
        for kind in ("shape", "dtype"):
            mismatched_calls(kind, rank, tensor, devices, report)
            attempt(f"{kind} after", sum_of([1.0 + rank]), report)
    elif mode == "exit":
        attempt("first", sum_of([1.0]), report)
    if mode == "exit":  # written first: torchrun may stop the survivor at any time now
        (out / f"rank{rank}.json").write_text(json.dumps(report))
        ctx.close()
        return
    if mode == "raised_before" and rank == 0:
        # a broken rank exits with status 1 (below), and torchrun then stops the others at once
        time.sleep(1.5)
    ctx.close()
    # what a launch of this mode alone shows by its exit status, which a mode run after it
    # in the same launch would hide: a process whose group broke ends with status 1 at exit,
    # the membership saying why (null: it did not break)
    report["broken"] = ctx.transport.membership.broken
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
