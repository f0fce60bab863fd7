"""Run as N ranks (``mpiexec -n N python grad_checks.py OUT``): the gradient checks of the
thread tests across processes. Each rank compares its synced gradients with the sum (or mean)
of every rank's unsynced gradients (each computed by its own rank from the seeded data and
gathered outside retrograd: ``mpi_oracle.every_ranks``), and writes ``OUT/rank{r}.json`` with
how many checks ran and what failed."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for distributed_cases
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for mpi_oracle

import numpy as np
from mpi_oracle import every_ranks

import retrograd as rg
from distributed_cases import (
    GRAPHS,
    Checks,
    data,
    gradients,
    mlp_grads,
    mlp_params,
    reduce,
    write_report,
)
from retrograd import distributed as dist

SUM, MEAN = dist.ReduceOperation.SUM, dist.ReduceOperation.MEAN
STRATEGIES = {"none": rg.NoCheckpointing(), "balanced": rg.BalancedCheckpointing()}


def graph_checks(ctx, op: dist.ReduceOperation, checks: Checks) -> None:
    n, rank, device = ctx.world_size, ctx.rank, ctx.device
    w, v, xs = data(n, seed=n)
    for strategy_name, strategy in STRATEGIES.items():
        backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=strategy)
        for graph_name, graph in GRAPHS.items():
            own_w, own_v = gradients(graph, backend, device, xs[rank], w, v, False)
            synced_w, synced_v = gradients(graph, backend, device, xs[rank], w, v, True)
            name = f"{graph_name}/{strategy_name}/{op.name}"
            checks.close(name, synced_w, reduce(every_ranks(own_w), op))
            checks.close(f"{name} (v stays local)", synced_v, own_v)


def uneven_use_check(ctx, checks: Checks) -> None:
    """The same parameter used rank+1 times on each rank (SUM context)."""
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], dtype=np.float32)

    def run(k, distributed):
        w = rg.tensor(w0, device=ctx.device)
        w = w.set_distributed("w") if distributed else w.require_grad()
        h = rg.tensor(np.full((2, 2), k + 1.0, np.float32), device=ctx.device)
        for _ in range(k + 1):
            h = (h @ w).tanh()
        return w.grad(h.sum().backward()).numpy()

    expected = np.sum(every_ranks(run(ctx.rank, False)), axis=0)
    checks.close("uneven use", run(ctx.rank, True), expected)


def all_reduce_checks(ctx, checks: Checks) -> None:
    """Burn's all_reduce tests: sum, mean, and rank 0 scaling its output by 2."""
    n, rank = ctx.world_size, ctx.rank
    inputs = np.array([[1.0 + k, -2.0 * k, 0.5] for k in range(n)], dtype=np.float32)
    weights = np.array([1.0, 2.0, 3.0])
    for op in (SUM, MEAN):
        for scale_first in (False, True):
            x = rg.tensor(inputs[rank], device=ctx.device).require_grad()
            y = dist.all_reduce(x, op, ctx.devices).resolve()
            out = y * 2.0 if (scale_first and rank == 0) else y
            grads = (out * rg.tensor(weights, device=ctx.device)).sum().backward()
            name = f"all_reduce {op.name} scale_first={scale_first}"
            expected_y = inputs.sum(0) if op is SUM else inputs.mean(0)
            checks.close(f"{name} forward", y.numpy(), expected_y)
            total_weight = n + (1 if scale_first else 0)
            expected_grad = weights * total_weight / (n if op is MEAN else 1)
            checks.close(f"{name} backward", x.grad(grads).numpy(), expected_grad)


def mlp_bucket_check(ctx, checks: Checks, op) -> None:
    params = mlp_params([6, 8, 8, 8, 3], seed=3)
    rng = np.random.default_rng(4)
    shapes = ((5, 6), (5, 3))
    batches = [
        tuple(rng.standard_normal(shape).astype(np.float32) for shape in shapes)
        for _ in range(ctx.world_size)
    ]
    own = mlp_grads(ctx.device, *batches[ctx.rank], params, False)
    synced = mlp_grads(ctx.device, *batches[ctx.rank], params, True)
    for name in params:
        expected = reduce(every_ranks(own[name]), op)
        checks.close(f"mlp {name} {op.name}", synced[name], expected)


def main() -> None:
    out = Path(sys.argv[1])
    checks = Checks()
    report: dict = {}
    try:
        # SUM, every parameter its own all-reduce; MEAN, small buckets fusing several (both
        # reduced during backward, whatever the machine); then the fallback the engine picks
        # when ranks outnumber cores: every gradient in one all-reduce after backward
        runs = (
            ("SUM", SUM, 0, True),
            ("MEAN", MEAN, 200, True),
            ("MEAN, no overlap", MEAN, 200, False),
        )
        for name, op, bucket_bytes, overlap in runs:
            config = dist.DistributedConfig(
                op, timeout=30.0, bucket_bytes=bucket_bytes, overlap=overlap
            )
            with dist.DistributedContext.from_launcher(config) as ctx:
                report["rank"], report["devices"] = ctx.rank, [str(d) for d in ctx.devices]
                graph_checks(ctx, op, checks)
                mlp_bucket_check(ctx, checks, op)
                if op is SUM:
                    uneven_use_check(ctx, checks)
                    all_reduce_checks(ctx, checks)
                report.setdefault("buckets", {})[name] = ctx.stats.buckets
                report.setdefault("steps", {})[name] = ctx.stats.steps
                report.setdefault("exchanges", {})[name] = ctx.stats.exchanges
                report.setdefault("overlap_pays", ctx.transport.capabilities.overlap_pays)
    except Exception:
        checks.failures.append(traceback.format_exc())
    write_report(out, report, checks)


if __name__ == "__main__":
    main()
