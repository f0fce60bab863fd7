"""Run under ``torchrun --nproc_per_node N torch_grad_checks.py OUT``: the gradient checks of the
MPI scripts over the torch engine (gloo). Each rank compares its synced gradients with the sum
(or mean) of every rank's unsynced gradients, which it computes itself from the same seeded
data, and writes ``OUT/rank{r}.json`` with how many checks ran and what failed."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from torch_common import rank, use_suite_backend, write_report

import retrograd as rg
from distributed_cases import GRAPHS, Checks, data, gradients, mlp_grads, mlp_params, reduce
from retrograd import distributed as dist

SUM, MEAN = dist.ReduceOperation.SUM, dist.ReduceOperation.MEAN
STRATEGIES = {"none": rg.NoCheckpointing(), "balanced": rg.BalancedCheckpointing()}


def graph_checks(ctx, op, checks: Checks) -> None:
    n, rank, device = ctx.world_size, ctx.rank, ctx.device
    w, v, xs = data(n, seed=n)
    for strategy_name, strategy in STRATEGIES.items():
        backend = rg.Autodiff(rg.default_backend().inner, checkpointing=strategy)
        for graph_name, graph in GRAPHS.items():
            unsynced = [gradients(graph, backend, device, x, w, v, False) for x in xs]
            synced_w, synced_v = gradients(graph, backend, device, xs[rank], w, v, True)
            name = f"{graph_name}/{strategy_name}/{op.name}"
            checks.close(name, synced_w, reduce([g for g, _ in unsynced], op))
            checks.close(f"{name} (v stays local)", synced_v, unsynced[rank][1])


def mlp_bucket_check(ctx, checks: Checks, op) -> None:
    params = mlp_params([6, 8, 8, 8, 3], seed=3)
    rng = np.random.default_rng(4)
    shapes = ((5, 6), (5, 3))
    batches = [
        tuple(rng.standard_normal(shape).astype(np.float32) for shape in shapes)
        for _ in range(ctx.world_size)
    ]
    unsynced = [mlp_grads(ctx.device, x, y, params, False) for x, y in batches]
    synced = mlp_grads(ctx.device, *batches[ctx.rank], params, True)
    for name in params:
        checks.close(f"mlp {name} {op.name}", synced[name], reduce([g[name] for g in unsynced], op))


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
            checks.close(
                f"{name} forward", y.numpy(), inputs.sum(0) if op is SUM else inputs.mean(0)
            )
            total_weight = n + (1 if scale_first else 0)
            expected = weights * total_weight / (n if op is MEAN else 1)
            checks.close(f"{name} backward", x.grad(grads).numpy(), expected)


def no_gradient_check(ctx, checks: Checks) -> None:
    """On rank 1, ``w`` reaches the loss only through an op that passes it no gradient: it
    contributes zeros there, and its reduced gradient comes back as a primitive of the
    running backend (not a stray NumPy array), also when backward records the sync."""
    from retrograd.autodiff.ops import Op

    no_gradient = Op(
        "test_passes_no_gradient",
        ("x",),
        (),
        (None,),
        memory_bound=False,
        forward=lambda backend, x: x,
    )
    w0 = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    for create_graph in (False, True):
        w = rg.tensor(w0, device=ctx.device).set_distributed("w")
        u = rg.tensor(np.ones(2, np.float32), device=ctx.device).set_distributed("u")
        if ctx.rank == 0:
            used = w * 3.0
        else:
            used = rg.Tensor(w.backend.apply(no_gradient, w.primitive), w.backend, ctx.device)
        grads = (used.sum() + u.sum()).backward(create_graph=create_graph)
        grad = w.grad(grads)
        name = f"no gradient on rank 1 (create_graph={create_graph})"
        checks.close(name, grad.numpy(), np.full((2, 2), 3.0, np.float32))
        checks.close(f"{name}: u", u.grad(grads).numpy(), np.full(2, 2.0, np.float32))
        inner = w.backend.inner
        value = grad.primitive.value if create_graph else grad.primitive
        expected = inner.zeros((1,), "float32", None)
        checks.true(
            f"{name}: a {type(value).__name__}, not a {type(expected).__name__}",
            type(value) is type(expected),
        )


def tensor_buffer_checks(ctx, checks: Checks) -> None:
    """Buffers that stay torch tensors (device memory; here CPU tensors handed over as they
    are, and bfloat16, which NumPy cannot hold) are reduced where they live and come back as
    tensors: the path CUDA tensors take to NCCL."""
    import torch

    n, rank = ctx.world_size, ctx.rank
    for dtype in (torch.float32, torch.bfloat16):
        for op in (SUM, MEAN):
            mine = torch.tensor([[1.0 + rank, -2.0], [0.5, 4.0 * rank]], dtype=dtype)
            pending = ctx.start_all_reduce(ctx.device, ctx.devices, mine, op)
            result = ctx.wait_for(pending, "a tensor all-reduce")[0]
            rows = [[[1.0 + k, -2.0], [0.5, 4.0 * k]] for k in range(n)]
            expected = reduce(np.array(rows), op)
            name = f"tensor buffer {dtype} {op.name}"
            checks.true(
                f"{name}: a {type(result).__name__} of {getattr(result, 'dtype', '?')}",
                isinstance(result, torch.Tensor) and result.dtype == dtype,
            )
            checks.close(name, result.float().numpy(), expected, rtol=1e-2)
            checks.true(f"{name}: the input is untouched", mine[0, 0].item() == 1.0 + rank)


def main() -> None:
    use_suite_backend()
    out = Path(sys.argv[1])
    checks = Checks()
    report: dict = {"rank": rank()}
    try:
        # SUM: every parameter its own all-reduce; MEAN: small buckets fusing several
        for op, bucket_bytes in ((SUM, 0), (MEAN, 200)):
            config = dist.DistributedConfig(op, timeout=30.0, bucket_bytes=bucket_bytes)
            with dist.DistributedContext.from_launcher(config, engine="torch") as ctx:
                report["devices"] = [str(d) for d in ctx.devices]
                graph_checks(ctx, op, checks)
                mlp_bucket_check(ctx, checks, op)
                if op is SUM:
                    all_reduce_checks(ctx, checks)
                    no_gradient_check(ctx, checks)
                    tensor_buffer_checks(ctx, checks)
                report.setdefault("buckets", {})[op.name] = ctx.stats.buckets
    except Exception:
        checks.failures.append(traceback.format_exc())
    report.update(checks=checks.count, failures=checks.failures)
    write_report(out, report)


if __name__ == "__main__":
    main()
