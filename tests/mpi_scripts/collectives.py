"""Run as N ranks (``mpiexec -n N python collectives.py MODE OUT``): the differentiable
collectives across processes (``tests/collective_cases.py``). MODE ``checks``: forward values,
gradients, composition and bad calls; MODE ``missing``: rank 1 never joins an all-gather, the
others must fail within the timeout. Writes ``OUT/rank{r}.json``."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the cases

import retrograd as rg
from collective_cases import composition_checks, error_checks, forward_and_gradient_checks
from distributed_cases import Checks, write_report
from retrograd import distributed as dist

MISSING_TIMEOUT = 3.0


def missing(ctx, report) -> None:
    """Rank 1 sits the gather out (then closes); the others time out naming it."""
    if ctx.rank == 1:
        time.sleep(MISSING_TIMEOUT + 1.0)
        return
    started = time.monotonic()
    try:
        dist.all_gather(rg.tensor([1.0], device=ctx.device), ctx.devices).resolve()
        report["error"] = None
    except rg.DistributedError as error:
        report["error"] = str(error)
    report["elapsed"] = time.monotonic() - started


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    checks = Checks()
    report: dict = {}
    try:
        timeout = 30.0 if mode == "checks" else MISSING_TIMEOUT
        config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=timeout)
        with dist.DistributedContext.from_launcher(config) as ctx:
            report["rank"] = ctx.rank
            if mode == "checks":
                for cases in (forward_and_gradient_checks, composition_checks):
                    cases(ctx.devices, ctx.rank, checks)
                error_checks(ctx.devices, ctx.rank, checks, 10.0)
            else:
                missing(ctx, report)
    except Exception:
        checks.failures.append(traceback.format_exc())
    write_report(out, report, checks)


if __name__ == "__main__":
    main()
