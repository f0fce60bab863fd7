"""Run under ``torchrun --nproc_per_node N``: the differentiable collectives over gloo
(``tests/collective_cases.py``: values, gradients, composition, bad calls); each rank writes
``OUT/rank{r}.json`` with the checks run and failed."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_common import rank, use_suite_backend, write_report

from collective_cases import composition_checks, error_checks, forward_and_gradient_checks
from distributed_cases import Checks
from retrograd import distributed as dist


def main() -> None:
    use_suite_backend()
    out = Path(sys.argv[1])
    checks = Checks()
    report: dict = {"rank": rank()}
    try:
        config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=30.0)
        with dist.DistributedContext.from_launcher(config, engine="torch") as ctx:
            for cases in (forward_and_gradient_checks, composition_checks):
                cases(ctx.devices, ctx.rank, checks)
            error_checks(ctx.devices, ctx.rank, checks, 10.0)
    except Exception:
        checks.failures.append(traceback.format_exc())
    report.update(checks=checks.count, failures=checks.failures)
    write_report(out, report)


if __name__ == "__main__":
    main()
