"""Run as N ranks with a fault on rank 1 (``faults.py MODE TIMEOUT OVERLAP OUT``; OVERLAP is
``on``, ``off`` or ``auto``, ``DistributedConfig.overlap`` True, False or None):

- ``exit``: rank 1 dies (``os._exit``) after one good step;
- ``no_backward``: rank 1 never calls backward for step 2, then closes its context and exits;
- ``die_in_backward``: rank 1 registers step 2, then dies inside its backward (after its
  first gradient was submitted, before its second);
- ``mismatch``: rank 1 registers a parameter the others do not have, then every rank runs
  one more, matching step.

Every rank that is still alive writes ``OUT/rank{r}.json``: the error it got on step 2 (if
any), how long step 2 took, and whether the step after it worked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import retrograd as rg
from retrograd import distributed as dist


def dying_op():
    """An op whose backward ends the process: a rank that dies in the middle of backward."""
    from retrograd.autodiff.ops import Op

    def die(B, g):  # noqa: N803 - backward rules name the backend B
        time.sleep(0.5)  # a long backward: registration and b's all-reduce are out by now
        os._exit(3)

    return Op(
        "test_dies_in_backward",
        ("x",),
        (),
        (die,),
        memory_bound=False,
        forward=lambda backend, x: x,
    )


def step(device, extra=False, die=False):
    w = rg.tensor(np.ones((3, 3), np.float32), device=device).set_distributed("w")
    b = rg.tensor(np.ones((3, 3), np.float32), device=device).set_distributed("b")
    loss = (w * 2.0).sum()
    if die:  # b's gradient is final first (it is used last); w's passes through the op
        w = rg.Tensor(w.backend.apply(dying_op(), w.primitive), w.backend, device)
        loss = (w * 2.0).sum()
    loss = loss + (loss * b).sum()
    if extra:
        extra = rg.tensor(np.ones(2, np.float32), device=device).set_distributed("extra")
        loss = loss + extra.sum()
    return w.grad(loss.backward()).numpy()


def main() -> None:
    mode, timeout, out = sys.argv[1], float(sys.argv[2]), Path(sys.argv[4])
    overlap = {"on": True, "off": False, "auto": None}[sys.argv[3]]
    config = dist.DistributedConfig(
        dist.ReduceOperation.SUM, timeout=timeout, bucket_bytes=0, overlap=overlap
    )
    ctx = dist.DistributedContext.from_launcher(config).start()
    rank, device = ctx.rank, ctx.device
    report = {"rank": rank, "first_step": step(device).tolist()}
    report["overlapping"] = ctx.server.config.overlap is not False
    if rank == 1 and mode == "exit":
        os._exit(3)
    if rank == 1 and mode == "no_backward":
        time.sleep(timeout + 1.0)
        report["closing"] = True
        (out / f"rank{rank}.json").write_text(json.dumps(report))
        ctx.close()
        return
    started = time.monotonic()
    try:
        step(
            device,
            extra=(mode == "mismatch" and rank == 1),
            die=(mode == "die_in_backward" and rank == 1),
        )
        report["error"] = None
    except rg.DistributedError as error:
        report["error"] = str(error)
    report["elapsed"] = time.monotonic() - started
    if mode == "mismatch":
        report["next_step"] = step(device).tolist()
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    ctx.close()


if __name__ == "__main__":
    main()
