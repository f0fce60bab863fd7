"""Run under ``torchrun --nproc_per_node 2 torch_train_mlp.py OUT``: 20 SGD steps of a data-parallel
MLP over the torch engine (MEAN gradient sync, each rank an equal half of the batch) and, on
each rank, the same 20 steps trained in one process on the full batch without any distributed
code. Writes ``OUT/rank{r}.json``: how far the two ended apart, and how many of a step's
gradient buffers outlived the step with the garbage collector off."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from torch_common import use_suite_backend, write_report

from distributed_cases import mlp_params, train_mlp_in_shards, train_mlp_whole_batch
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
            n, rank = ctx.world_size, ctx.rank
            params, xs, ys, outlived = train_mlp_in_shards(ctx, start, STEPS, LR, SHARD)
            stats = ctx.stats.as_dict()
        reference = train_mlp_whole_batch(xs, ys, start, STEPS, LR)
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
