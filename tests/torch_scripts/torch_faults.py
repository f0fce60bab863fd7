"""Run under ``torchrun --nproc_per_node 2 torch_faults.py MODE TIMEOUT OUT``, a fault on rank 1:

- ``exit``: rank 1 dies (``os._exit``) after one good step (torchrun then stops rank 0 with
  SIGTERM: rank 0 must still raise ``DistributedError``, not vanish);
- ``die_in_backward``: rank 1 registers step 2, then dies inside its backward (after its first
  gradient was submitted, before its second);
- ``no_backward``: rank 1 stays alive but never calls backward for step 2;
- ``no_context``: rank 1 never creates its distributed context;
- ``mismatch``: rank 1 registers a parameter the others do not have, then every rank runs one
  more, matching step.

Rank 0 writes ``OUT/rank0.json``: the error it got (if any), how long the faulty step took, and
whether the step after it worked; rank 1 writes ``OUT/rank1.json`` where it lives to."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_common import all_ranks_started, rank, sigterm_held, use_suite_backend, write_report

import retrograd as rg
from distributed_cases import fault_step
from retrograd import distributed as dist


def main() -> None:
    use_suite_backend()
    mode, timeout, out = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
    config = dist.DistributedConfig(dist.ReduceOperation.SUM, timeout=timeout, bucket_bytes=0)
    report: dict = {"rank": rank()}
    if mode == "no_context":
        if rank() == 1:  # (nor imports torch: a second of CPU it would not use)
            time.sleep(timeout + 2.0)  # then exits without ever creating the context
            return
        import torch.distributed  # noqa: F401 - imported before the clock starts

        started = time.monotonic()
        try:
            dist.DistributedContext.from_launcher(config, engine="torch")
            report["error"] = None
        except rg.DistributedError as error:
            report["error"] = str(error)
        report["elapsed"] = time.monotonic() - started
        write_report(out, report)
        return
    all_ranks_started(out)
    ctx = dist.DistributedContext.from_launcher(config, engine="torch").start()
    device = ctx.device
    report["first_step"] = fault_step(device).tolist()
    if rank() == 1 and mode == "exit":
        os._exit(3)
    if rank() == 1 and mode == "no_backward":
        time.sleep(timeout + 2.0)
        write_report(out, report)
        return
    started = time.monotonic()
    try:
        fault_step(
            device,
            extra=(mode == "mismatch" and rank() == 1),
            die=(mode == "die_in_backward" and rank() == 1),
        )
        error = None
    except rg.DistributedError as raised:
        error = str(raised)
    with sigterm_held():  # torchrun stops this survivor once it sees rank 1 gone
        report["error"], report["elapsed"] = error, time.monotonic() - started
        if mode != "mismatch":
            write_report(out, report)
    if mode == "mismatch":
        report["next_step"] = fault_step(device).tolist()
        write_report(out, report)
    ctx.close()


if __name__ == "__main__":
    main()
