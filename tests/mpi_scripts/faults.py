"""Run as N ranks with a fault on rank 1 (``faults.py MODE TIMEOUT OVERLAP OUT``; OVERLAP is
``on``, ``off`` or ``auto``, ``DistributedConfig.overlap`` True, False or None):

- ``exit``: rank 1 dies (``os._exit``) after one good step;
- ``no_backward``: rank 1 never calls backward for step 2, then closes its context and exits;
- ``die_in_backward``: rank 1 registers step 2, then dies inside its backward (after its
  first gradient was submitted, before its second);
- ``mismatch``: rank 1 registers a parameter the others do not have, then every rank runs
  one more, matching step;
- ``skew``: rank 1 counts one backward step more than the others before step 2 (as if it had
  run a backward they did not), so its step number disagrees with theirs.

Every rank that is still alive writes ``OUT/rank{r}.json``: the error it got on step 2 (if
any), how long step 2 took, and whether the step after it worked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for distributed_cases

import retrograd as rg
from distributed_cases import fault_step
from retrograd import distributed as dist


def main() -> None:
    mode, timeout, out = sys.argv[1], float(sys.argv[2]), Path(sys.argv[4])
    overlap = {"on": True, "off": False, "auto": None}[sys.argv[3]]
    config = dist.DistributedConfig(
        dist.ReduceOperation.SUM, timeout=timeout, bucket_bytes=0, overlap=overlap
    )
    ctx = dist.DistributedContext.from_launcher(config).start()
    rank, device = ctx.rank, ctx.device
    report = {"rank": rank, "first_step": fault_step(device).tolist()}
    report["overlapping"] = ctx.server.config.overlap is not False
    if rank == 1 and mode == "exit":
        os._exit(3)
    if rank == 1 and mode == "no_backward":
        time.sleep(timeout + 1.0)
        report["closing"] = True
        (out / f"rank{rank}.json").write_text(json.dumps(report))
        ctx.close()
        return
    if rank == 1 and mode == "skew":  # (the server numbers a round by its devices' counts)
        ctx.server._begun[device] = ctx.server._begun.get(device, 0) + 1
    started = time.monotonic()
    try:
        fault_step(
            device,
            extra=(mode == "mismatch" and rank == 1),
            die=(mode == "die_in_backward" and rank == 1),
        )
        report["error"] = None
    except rg.DistributedError as error:
        report["error"] = str(error)
    report["elapsed"] = time.monotonic() - started
    if mode == "mismatch":
        report["next_step"] = fault_step(device).tolist()
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    ctx.close()


if __name__ == "__main__":
    main()
