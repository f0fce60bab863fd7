"""Models, graphs and checks shared by the distributed tests: in-process (threads), the MPI
scripts and the torchrun scripts.

Each gradient helper runs one backward on one device; with ``distributed=True`` the
parameters are marked with ``set_distributed`` (so a running context all-reduces them), with
``False`` they are plain leaves (the independent reference).
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import time
import weakref

import numpy as np

import retrograd as rg


# -- the graphs a distributed weight is used through ------------------------------------------
def matmul_graph(x, w, v):
    return ((x @ w) @ v).square().mean()


def residual_graph(x, w, v):
    h = (x @ w).tanh() + x  # the residual
    return ((h @ v) * (h @ v)).sum()


def relu_graph(x, w, v):
    return ((x @ w).relu() @ v).sum() + (x @ w).relu().mean()


def diamond_cat_graph(x, w, v):
    h = x @ w  # one value feeds two branches that meet again in cat
    left, right = h.relu(), h.sigmoid() * h
    both = rg.cat([left, right], 1)  # [batch, 8]
    return (both @ rg.cat([v, v * 2.0], 0)).square().sum()


GRAPHS = {
    "matmul": matmul_graph,
    "residual": residual_graph,
    "relu": relu_graph,
    "diamond_cat": diamond_cat_graph,
}


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 4)).astype(np.float32) * 0.5
    v = rng.standard_normal((4, 3)).astype(np.float32) * 0.5
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(n)]
    return w, v, xs


def gradients(graph, backend, device, x, w, v, distributed):
    """(grad w, grad v) of ``graph`` on ``device``; ``w`` distributed iff asked, ``v`` never."""
    w_t = rg.tensor(w, backend=backend, device=device)
    w_t = w_t.set_distributed("w") if distributed else w_t.require_grad()
    v_t = rg.tensor(v, backend=backend, device=device).require_grad()
    loss = graph(rg.tensor(x, backend=backend, device=device), w_t, v_t)
    grads = loss.backward()
    return w_t.grad(grads).numpy(), v_t.grad(grads).numpy()


def mlp_grads(device, xs, ys, params, distributed, backend=None):
    """Gradients of an MLP's squared error; ``params`` by name."""
    tensors = {}
    for name, value in params.items():
        t = rg.tensor(value, backend=backend, device=device)
        tensors[name] = t.set_distributed(name) if distributed else t.require_grad()
    h = rg.tensor(xs, backend=backend, device=device)
    layers = sorted({name[:-2] for name in params})
    for k, layer in enumerate(layers):
        h = h @ tensors[f"{layer}.w"] + tensors[f"{layer}.b"]
        if k < len(layers) - 1:
            h = h.relu()
    loss = (h - rg.tensor(ys, backend=backend, device=device)).square().mean()
    grads = loss.backward()
    return {name: t.grad(grads).numpy() for name, t in tensors.items()}


def mlp_params(sizes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    params = {}
    for k, (a, b) in enumerate(itertools.pairwise(sizes)):
        params[f"l{k}.w"] = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(dtype)
        params[f"l{k}.b"] = (rng.standard_normal(b) * 0.1).astype(dtype)
    return params


# -- what the multi-process scripts share ----------------------------------------------------
class Checks:
    """A tally of checks, the failed ones described (each rank reports it as JSON)."""

    def __init__(self) -> None:
        self.count = 0
        self.failures: list[str] = []

    def close(self, name: str, actual, expected, rtol=1e-5, atol=1e-6) -> None:
        self.count += 1
        if not np.allclose(actual, expected, rtol=rtol, atol=atol):
            self.failures.append(
                f"{name}: got {np.asarray(actual).ravel()[:4]}..., expected "
                f"{np.asarray(expected).ravel()[:4]}..."
            )

    def true(self, name: str, condition: bool) -> None:
        self.count += 1
        if not condition:
            self.failures.append(name)


def write_report(out, report: dict, checks: Checks) -> None:
    """An MPI script's report, with the checks' tally, as ``OUT/rank{r}.json`` (its rank from
    MPI, which a context that failed to start does not give)."""
    from mpi4py import MPI

    report.update(checks=checks.count, failures=checks.failures)
    (out / f"rank{MPI.COMM_WORLD.Get_rank()}.json").write_text(json.dumps(report))


def transport_all_gather_check(ctx, checks: Checks) -> None:
    """The transport's buffer all-gather (what differentiable collectives build on): two
    buffers of one dtype, every rank's stacked in rank order, the inputs untouched."""
    from retrograd.distributed.pending import Pending

    n, rank = ctx.world_size, ctx.rank
    row = np.arange(3, dtype=np.float32) + 10 * rank
    grid = np.full((2, 2), rank, np.float32)
    key = ("op", ctx.devices, "all_gather check")
    outer = Pending(key)
    ctx.server.collective(
        outer, lambda transport: transport.all_gather(ctx.device, [row, grid], key, ctx.devices)
    )
    rows, grids = ctx.wait_for(outer, "all_gather check")
    expected_rows = np.stack([np.arange(3, dtype=np.float32) + 10 * k for k in range(n)])
    checks.close("all_gather rows", np.asarray(rows), expected_rows)
    checks.close("all_gather grids", np.asarray(grids), [np.full((2, 2), k) for k in range(n)])
    checks.true("all_gather shapes", rows.shape == (n, 3) and grids.shape == (n, 2, 2))
    checks.true("all_gather leaves its inputs", row[0] == 10 * rank and grid[0, 0] == rank)


def reduce(arrays, op):
    """What an all-reduce of ``arrays`` (one per rank) with ``op`` gives."""
    total = np.sum(arrays, axis=0)
    return total / len(arrays) if op is rg.distributed.ReduceOperation.MEAN else total


def dying_op():
    """An op whose backward ends the process: a rank that dies in the middle of backward."""
    from retrograd.autodiff.ops import Op

    def die(B, g):  # noqa: N803 - backward rules name the backend B
        time.sleep(0.5)  # a long backward: registration and b's all-reduce are out by now
        os._exit(3)

    return Op(
        "test_dies_in_backward",
        ("x",),
        (),
        (die,),
        memory_bound=False,
        forward=lambda backend, x: x,
    )


def fault_step(device, extra=False, die=False):
    """One step of the fault scripts: ``w`` and ``b`` distributed; ``extra`` registers a
    parameter the other ranks lack; ``die`` ends the process inside backward."""
    w = rg.tensor(np.ones((3, 3), np.float32), device=device).set_distributed("w")
    b = rg.tensor(np.ones((3, 3), np.float32), device=device).set_distributed("b")
    loss = (w * 2.0).sum()
    if die:  # b's gradient is final first (it is used last); w's passes through the op
        w = rg.Tensor(w.backend.apply(dying_op(), w.primitive), w.backend, device)
        loss = (w * 2.0).sum()
    loss = loss + (loss * b).sum()
    if extra:
        extra = rg.tensor(np.ones(2, np.float32), device=device).set_distributed("extra")
        loss = loss + extra.sum()
    return w.grad(loss.backward()).numpy()


def train_mlp_in_shards(ctx, start, steps, lr, shard_size):
    """SGD on an MLP, each rank on its shard of one seeded batch, MEAN-synced by ``ctx``:
    ``(params, xs, ys, outlived)``, ``outlived`` counting gradient buffers that survived into
    the next step (reference counting alone must free them) other than those the next step
    reuses (an engine may keep a bucket's buffer for the next step once nothing views it)."""
    n, rank, device = ctx.world_size, ctx.rank, ctx.device
    rng = np.random.default_rng(12)
    xs = rng.standard_normal((n * shard_size, 6))
    ys = np.tanh(xs[:, :3]) + 0.1 * rng.standard_normal((n * shard_size, 3))
    params = dict(start)
    shard = slice(rank * shard_size, (rank + 1) * shard_size)
    outlived, previous = 0, []
    gc.disable()
    for _ in range(steps):
        grads = mlp_grads(device, xs[shard], ys[shard], params, True)
        params = {k: params[k] - lr * grads[k] for k in params}
        # the buffer a gradient lives in (the reduced bucket, for a view into one)
        current = [g if g.base is None else g.base for g in grads.values()]
        outlived += sum(
            ref() is not None and all(ref() is not b for b in current) for ref in previous
        )
        previous = [weakref.ref(b) for b in current]
        del current
        del grads
    gc.enable()
    return params, xs, ys, outlived


def train_mlp_whole_batch(xs, ys, start, steps, lr):
    """The same training in one process, on the whole batch."""
    params = dict(start)
    for _ in range(steps):
        grads = mlp_grads(rg.Device("cpu", 0), xs, ys, params, False)
        params = {k: params[k] - lr * grads[k] for k in params}
    return params
