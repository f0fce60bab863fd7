"""Run as N ranks: start a context with ``overlap=None`` and write ``OUT/rank{r}.json``: what
the transport counted at start-up (ranks here, cores, other jobs' processes running) and whether
it overlaps the all-reduces with backward and reduces gradients in place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from retrograd import distributed as dist


def main() -> None:
    out = Path(sys.argv[1])
    with dist.DistributedContext.from_launcher(dist.DistributedConfig(timeout=30.0)) as ctx:
        transport = ctx.transport
        report = {
            "rank": ctx.rank,
            "local_ranks": transport.local_ranks,
            "cores": transport.cores,
            "others": transport.others,
            "overlap_pays": transport.capabilities.overlap_pays,
            "donates": transport.capabilities.in_place,
            "overlapping": ctx.server.overlapping,
        }
    (out / f"rank{report['rank']}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
