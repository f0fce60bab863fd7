"""Run under ``torchrun --nproc_per_node N``: ``ZeroRedundancyOptimizer`` over gloo
(``tests/zero_cases.py``); each rank writes ``OUT/rank{r}.json`` with the checks run and
failed and its share of the optimizer state."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_common import rank, use_suite_backend, write_report

from distributed_cases import Checks
from retrograd import distributed as dist
from zero_cases import OPTIMIZERS, zero_training_checks


def main() -> None:
    use_suite_backend()
    out = Path(sys.argv[1])
    checks = Checks()
    report: dict = {"rank": rank(), "state_bytes": {}, "total_bytes": {}}
    try:
        config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=30.0)
        with dist.DistributedContext.from_launcher(config, engine="torch") as ctx:
            for name in OPTIMIZERS:
                outcome = zero_training_checks(ctx.devices, ctx.rank, checks, name)
                report["state_bytes"][name] = outcome["state_bytes"]
                report["total_bytes"][name] = outcome["total_bytes"]
    except Exception:
        checks.failures.append(traceback.format_exc())
    report.update(checks=checks.count, failures=checks.failures)
    write_report(out, report)


if __name__ == "__main__":
    main()
