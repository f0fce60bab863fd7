"""Run as N ranks (``mpiexec -n N python transport_checks.py OUT``): the transport's own buffer
collectives, below the gradient sync (``tests/distributed_cases.py``:
``transport_all_gather_check``); writes ``OUT/rank{r}.json`` with the checks run and failed."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for distributed_cases

from distributed_cases import Checks, transport_all_gather_check, write_report
from retrograd import distributed as dist


def main() -> None:
    out = Path(sys.argv[1])
    checks = Checks()
    report: dict = {}
    try:
        with dist.DistributedContext.from_launcher(dist.DistributedConfig(timeout=30.0)) as ctx:
            report["rank"] = ctx.rank
            transport_all_gather_check(ctx, checks)
    except Exception:
        checks.failures.append(traceback.format_exc())
    write_report(out, report, checks)


if __name__ == "__main__":
    main()
