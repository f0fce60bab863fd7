"""Run as 2 ranks: 20 SGD steps of a data-parallel MLP (MEAN gradient sync, parameters named
by strings) and, on each rank, the same 20 steps trained in one process on the full batch,
without any distributed code. Writes ``OUT/rank{r}.json``: how far the two ended apart, the
string ids' ParamId values and Python hashes (ranks run with different PYTHONHASHSEED), and how
many of a step's gradient buffers outlived the step with the garbage collector off."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for distributed_cases

import numpy as np

from distributed_cases import mlp_params, train_mlp_in_shards, train_mlp_whole_batch
from retrograd import distributed as dist

STEPS, LR, SHARD = 20, 0.05, 8


def main() -> None:
    out = Path(sys.argv[1])
    start = mlp_params([6, 16, 16, 3], seed=11, dtype=np.float64)
    config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=30.0, bucket_bytes=0)
    with dist.DistributedContext.from_launcher(config) as ctx:
        rank = ctx.rank
        params, xs, ys, outlived = train_mlp_in_shards(ctx, start, STEPS, LR, SHARD)
        stats = ctx.stats.as_dict()
    reference = train_mlp_whole_batch(xs, ys, start, STEPS, LR)
    moved = max(float(np.abs(reference[k] - start[k]).max()) for k in start)
    apart = max(float(np.abs(reference[k] - params[k]).max()) for k in start)
    report = {
        "rank": rank,
        "max_difference": apart,
        "moved": moved,
        "steps_synced": stats["steps"],
        "gradient_buffers_outliving_their_step": outlived,
        "param_ids": {k: dist.ParamId(k).value for k in sorted(start)},
        "python_hashes": {k: hash(k) for k in sorted(start)},
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
