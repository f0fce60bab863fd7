"""Run under ``torchrun --nproc_per_node 2 torch_train_mlp.py OUT``: 20 SGD steps of a data-parallel
MLP over the torch engine (MEAN gradient sync, each rank an equal half of the batch) and, on
each rank, the same 20 steps trained in one process on the full batch without any distributed
code. Writes ``OUT/rank{r}.json``: how far the two ended apart, and how many of a step's
gradient buffers outlived the step with the garbage collector off."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from torch_common import use_suite_backend, write_report

import retrograd as rg
from distributed_cases import mlp_grads, mlp_params
from retrograd import distributed as dist

STEPS, LR, SHARD = 20, 0.05, 8


def main() -> None:
    use_suite_backend()
    out = Path(sys.argv[1])
    start = mlp_params([6, 16, 16, 3], seed=11, dtype=np.float64)
    for bucket_bytes in (0, 1 << 20):  # every gradient alone; all in few buckets
        config = dist.DistributedConfig(
            dist.ReduceOperation.MEAN, timeout=30.0, bucket_bytes=bucket_bytes
        )
        with dist.DistributedContext.from_launcher(config, engine="torch") as ctx:
            n, rank, device = ctx.world_size, ctx.rank, ctx.device
            rng = np.random.default_rng(12)
            xs = rng.standard_normal((n * SHARD, 6))
            ys = np.tanh(xs[:, :3]) + 0.1 * rng.standard_normal((n * SHARD, 3))
            params = dict(start)
            shard = slice(rank * SHARD, (rank + 1) * SHARD)
            outlived, previous = 0, []
            gc.disable()  # reference counting alone must free each step's gradients
            for _ in range(STEPS):
                grads = mlp_grads(device, xs[shard], ys[shard], params, True)
                params = {k: params[k] - LR * grads[k] for k in params}
                outlived += sum(ref() is not None for ref in previous)
                # the buffer a gradient lives in (the reduced bucket, for a view into one)
                previous = [weakref.ref(g if g.base is None else g.base) for g in grads.values()]
                del grads
            gc.enable()
            stats = ctx.stats.as_dict()
        # the same training in one process, on the whole batch
        reference = dict(start)
        for _ in range(STEPS):
            grads = mlp_grads(rg.Device("cpu", 0), xs, ys, reference, False)
            reference = {k: reference[k] - LR * grads[k] for k in reference}
        write_report(
            out / f"buckets{bucket_bytes}",
            {
                "rank": rank,
                "world_size": n,
                "max_difference": max(float(np.abs(reference[k] - params[k]).max()) for k in start),
                "moved": max(float(np.abs(reference[k] - start[k]).max()) for k in start),
                "steps_synced": stats["steps"],
                "buckets": stats["buckets"],
                "gradient_buffers_outliving_their_step": outlived,
            },
        )


if __name__ == "__main__":
    main()
