"""Models and graphs shared by the distributed tests: in-process (threads) and MPI scripts.

Each gradient helper runs one backward on one device; with ``distributed=True`` the
parameters are marked with ``set_distributed`` (so a running context all-reduces them), with
``False`` they are plain leaves (the independent reference).
"""

from __future__ import annotations

import itertools

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


