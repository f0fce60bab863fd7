"""Run as N ranks (``mpiexec -n N python zero.py OUT``): ``ZeroRedundancyOptimizer`` across
processes (``tests/zero_cases.py``: AdamW and SGD with momentum, clipping active, equal to the
wrapped optimizer on the full batch; state per rank; consolidation; resuming, with ZeRO and in
one process). Writes ``OUT/rank{r}.json``."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the cases

from distributed_cases import Checks, write_report
from retrograd import distributed as dist
from zero_cases import OPTIMIZERS, resume_in_one_process_check, zero_training_checks


def main() -> None:
    out = Path(sys.argv[1])
    checks = Checks()
    report: dict = {"state_bytes": {}, "total_bytes": {}}
    try:
        config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=30.0)
        with dist.DistributedContext.from_launcher(config) as ctx:
            report["rank"] = ctx.rank
            for name in OPTIMIZERS:
                outcome = zero_training_checks(ctx.devices, ctx.rank, checks, name)
                report["state_bytes"][name] = outcome["state_bytes"]
                report["total_bytes"][name] = outcome["total_bytes"]
                resume_in_one_process_check(
                    outcome["full"], name, checks, ctx.device, ctx.world_size
                )
    except Exception:
        checks.failures.append(traceback.format_exc())
    write_report(out, report, checks)


if __name__ == "__main__":
    main()
