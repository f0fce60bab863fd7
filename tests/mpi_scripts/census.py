"""Run as N ranks: start a context with ``overlap=None`` and write ``OUT/rank{r}.json``: what
the engine counted at start-up (ranks here, cores, other jobs' processes running) and whether
it overlaps the all-reduces with backward and reduces gradients in place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from retrograd import distributed as dist


def main() -> None:
    out = Path(sys.argv[1])
    with dist.DistributedContext.from_launcher(dist.DistributedConfig(timeout=30.0)) as ctx:
        engine = ctx.engine
        report = {
            "rank": ctx.rank,
            "local_ranks": engine.local_ranks,
            "cores": engine.cores,
            "others": engine.others,
            "overlap_pays": engine.overlap_pays,
            "donates": engine.donates,
            "overlapping": engine.overlapping,
        }
    (out / f"rank{report['rank']}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
