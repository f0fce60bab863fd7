"""Run under ``torchrun --nproc_per_node 2``: the transport's own buffer collectives over gloo,
below the gradient sync (``tests/distributed_cases.py``: ``transport_all_gather_check``);
each rank writes ``OUT/rank{r}.json`` with the checks run and failed."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_common import rank, use_suite_backend, write_report

from distributed_cases import Checks, transport_all_gather_check
from retrograd import distributed as dist


def main() -> None:
    use_suite_backend()
    out = Path(sys.argv[1])
    checks = Checks()
    report: dict = {"rank": rank()}
    try:
        config = dist.DistributedConfig(timeout=30.0)
        with dist.DistributedContext.from_launcher(config, engine="torch") as ctx:
            transport_all_gather_check(ctx, checks)
    except Exception:
        checks.failures.append(traceback.format_exc())
    report.update(checks=checks.count, failures=checks.failures)
    write_report(out, report)


if __name__ == "__main__":
    main()
