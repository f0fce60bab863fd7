"""Checks of the differentiable collectives shared by the thread tests, the MPI scripts and the
torchrun scripts: each function is one device's part, ``devices`` every participant in rank
order, ``rank`` this device's index; results go to a ``Checks`` tally.

Every expected value is computed here by hand from the seeded inputs every rank can rebuild
(``inputs``, ``weights``): the forward as NumPy concatenation, slicing and sums; the gradient
of ``loss_k = sum(out_k * W_k)`` on every rank ``k`` as the dual collective written out.
"""

from __future__ import annotations

import time

import numpy as np

import retrograd as rg
from retrograd import distributed as dist

SUM, MEAN = dist.ReduceOperation.SUM, dist.ReduceOperation.MEAN
SHAPE = (6, 4)  # divisible by 2 and 3 along dim 0, by 2 along dim 1


def inputs(n):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(SHAPE) for _ in range(n)]


def weights(n, shape):
    rng = np.random.default_rng(11 + shape[0])
    return [rng.standard_normal(shape) for _ in range(n)]


def _grad_through(collective, x_value, device, n, rank, out_shape):
    """(output value, gradient of ``sum(out * W_rank)`` at x) for ``collective(x)``."""
    x = rg.tensor(x_value, device=device).require_grad()
    out = collective(x).resolve()
    w = rg.tensor(weights(n, out_shape)[rank], device=device)
    grads = (out * w).sum().backward()
    return out.numpy(), x.grad(grads).numpy()


def forward_and_gradient_checks(devices, rank, checks) -> None:
    """Every collective's value and gradient against the hand-computed ones."""
    n, device = len(devices), devices[rank]
    xs = inputs(n)
    for dim in (0, 1, -1):
        axis = dim % 2
        out_shape = tuple(s * n if a == axis else s for a, s in enumerate(SHAPE))
        ws = weights(n, out_shape)
        value, grad = _grad_through(
            lambda x, d=dim: dist.all_gather(x, devices, dim=d),
            xs[rank],
            device,
            n,
            rank,
            out_shape,
        )
        checks.close(f"all_gather dim={dim}", value, np.concatenate(xs, axis=axis), 1e-12, 0)
        own = np.split(np.sum(ws, axis=0), n, axis=axis)[rank]  # reduce-scatter of the W
        checks.close(f"all_gather dim={dim} gradient", grad, own, 1e-12, 1e-12)
    for op in (SUM, MEAN):
        for dim in (0, 1):
            if SHAPE[dim] % n:
                continue
            out_shape = tuple(s // n if a == dim else s for a, s in enumerate(SHAPE))
            ws = weights(n, out_shape)
            value, grad = _grad_through(
                lambda x, o=op, d=dim: dist.reduce_scatter(x, o, devices, dim=d),
                xs[rank],
                device,
                n,
                rank,
                out_shape,
            )
            total = np.sum(xs, axis=0) / (n if op is MEAN else 1)
            expected = np.split(total, n, axis=dim)[rank]
            checks.close(f"reduce_scatter {op.name} dim={dim}", value, expected, 1e-12, 1e-12)
            gathered = np.concatenate(ws, axis=dim) / (n if op is MEAN else 1)
            checks.close(f"reduce_scatter {op.name} dim={dim} gradient", grad, gathered)
    for src in range(n):
        ws = weights(n, SHAPE)
        value, grad = _grad_through(
            lambda x, s=src: dist.broadcast(x, s, devices), xs[rank], device, n, rank, SHAPE
        )
        checks.true(f"broadcast src={src} bits", np.array_equal(value, xs[src]))
        expected = np.sum(ws, axis=0) if rank == src else np.zeros(SHAPE)
        checks.close(f"broadcast src={src} gradient", grad, expected, 1e-12, 1e-12)
    for op in (SUM, MEAN):
        ws = weights(n, SHAPE)
        value, grad = _grad_through(
            lambda x, o=op: dist.all_reduce(x, o, devices), xs[rank], device, n, rank, SHAPE
        )
        scale = 1.0 / n if op is MEAN else 1.0
        checks.close(f"all_reduce {op.name}", value, np.sum(xs, axis=0) * scale, 1e-12, 1e-12)
        checks.close(f"all_reduce {op.name} gradient", grad, np.sum(ws, axis=0) * scale)


def composition_checks(devices, rank, checks) -> None:
    """All-gather then reduce-scatter (SUM) is ``n * x`` with gradient ``n * W``; second-order
    gradients through a gather (``create_graph``); a gathered activation inside a model whose
    weight is synced (MEAN) gives the full-batch gradient of the loss every rank computes."""
    n, device = len(devices), devices[rank]
    xs = inputs(n)
    ws = weights(n, SHAPE)
    x = rg.tensor(xs[rank], device=device).require_grad()
    gathered = dist.all_gather(x, devices, dim=0).resolve()
    back = dist.reduce_scatter(gathered, SUM, devices, dim=0).resolve()
    grads = (back * rg.tensor(ws[rank], device=device)).sum().backward()
    checks.close("gather then scatter", back.numpy(), n * xs[rank], 1e-12, 1e-12)
    checks.close("gather then scatter gradient", x.grad(grads).numpy(), n * ws[rank])

    # d/dx of sum(gather(x)^3) is 3 n x^2 (every rank's loss holds x); its own gradient
    # (second order, through the recorded dual) 6 n x
    x = rg.tensor(xs[rank], device=device).require_grad()
    cube = dist.all_gather(x, devices, dim=1).resolve()
    first = x.grad(cube.powf_scalar(3.0).sum().backward(create_graph=True))
    checks.close("gather first order", first.numpy(), 3 * n * xs[rank] ** 2)
    second = x.grad(first.sum().backward())
    checks.close("gather second order", second.numpy(), 6 * n * xs[rank])

    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((4, 3))
    c = rng.standard_normal((SHAPE[0] * n, 3))
    w = rg.tensor(w0, device=device).set_distributed("gathered-model w")
    h = dist.all_gather(rg.tensor(xs[rank], device=device) @ w, devices, dim=0).resolve()
    grads = (h.tanh() * rg.tensor(c, device=device)).sum().backward()
    full = np.concatenate(xs, axis=0)
    expected = full.T @ (c * (1.0 - np.tanh(full @ w0) ** 2))
    checks.close("collective inside a synced model", w.grad(grads).numpy(), expected)


def _raises(checks, name, kind, run, text=None):
    """``run()`` raises ``kind`` (with ``text`` in its message); returns the message."""
    try:
        run()
    except kind as error:
        checks.true(f"{name}: message {error}", text is None or text in str(error))
        return str(error)
    except Exception as error:  # the wrong kind
        checks.true(f"{name}: raised {type(error).__name__}: {error}", False)
        return None
    checks.true(f"{name}: nothing raised", False)
    return None


def error_checks(devices, rank, checks, timeout) -> None:
    """Bad calls fail every rank at once (well inside ``timeout``) with a clear error, and the
    context keeps working after each."""
    n, device = len(devices), devices[rank]
    started = time.monotonic()
    odd = rg.tensor(np.ones((n + 1, 2)), device=device)
    _raises(
        checks,
        "not divisible",
        rg.ShapeError,
        lambda: dist.reduce_scatter(odd, SUM, devices).resolve(),
        "not divisible",
    )
    one = rg.tensor(np.ones(3), device=device)
    _raises(
        checks,
        "src out of range",
        IndexError,
        lambda: dist.broadcast(one, n, devices).resolve(),
        f"src {n}",
    )
    _raises(
        checks,
        "dim out of range",
        rg.ShapeError,
        lambda: dist.all_gather(one, devices, dim=1).resolve(),
        "dim out of range",
    )
    mine = rg.tensor(np.ones(3 + (rank == 1)), device=device)
    for name, call in (
        ("all_reduce", lambda: dist.all_reduce(mine, SUM, devices).resolve()),
        ("all_gather", lambda: dist.all_gather(mine, devices).resolve()),
        ("broadcast", lambda: dist.broadcast(mine, 0, devices).resolve()),
    ):
        _raises(checks, f"{name} shapes differ", rg.DistributedError, call, "differ in shape")
    # rank 1 alone holds a tensor it cannot scatter: it says why, the others that it refused
    shape = (n + 1, 2) if rank == 1 else (n, 2)
    ragged = rg.tensor(np.ones(shape), device=device)
    _raises(
        checks,
        "one rank rejects",
        rg.ShapeError if rank == 1 else rg.DistributedError,
        lambda: dist.reduce_scatter(ragged, SUM, devices).resolve(),
        "not divisible" if rank == 1 else "rejected the call",
    )
    _raises(
        checks,
        "different sources",
        rg.DistributedError,
        lambda: dist.broadcast(one, rank % 2, devices).resolve(),
        "different collectives",
    )
    checks.true(
        f"errors took {time.monotonic() - started:.1f} s", time.monotonic() - started < timeout
    )
    after = dist.all_gather(one * rank, devices).resolve().numpy()
    checks.close("works after the errors", after, np.repeat(np.arange(n), 3))
