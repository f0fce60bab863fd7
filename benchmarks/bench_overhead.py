"""Per-op overhead: a 300-op elementwise chain on an (8, 8) float32 tensor, forward + backward.

Each repetition builds the chain ``y = sin(y * w) + x`` (100 times, 300 ops) from two leaves,
sums it and backpropagates to both leaves. Reported in microseconds per op (301 ops with the
sum), side by side with hand-written NumPy gradients (the floor: the same arithmetic with no
graph), PyTorch eager, HIPS autograd and JAX (eager and jitted) when they are installed.

    python benchmarks/bench_overhead.py
    python benchmarks/bench_overhead.py --retrograd-only --repeats 40  # for A/B runs of two trees
"""

from __future__ import annotations

import argparse

import common  # first: pins BLAS threads before NumPy loads

# isort: split
import numpy as np

import retrograd as rg
from common import interleaved, machine, median, optional, table, torch_single_thread

LINKS = 100  # three ops each
OPS = 3 * LINKS + 1
SHAPE = (8, 8)


def retrograd_chain(x0: np.ndarray, w0: np.ndarray):
    x = rg.tensor(x0).require_grad()
    w = rg.tensor(w0).require_grad()
    y = x
    for _ in range(LINKS):
        y = (y * w).sin() + x
    grads = y.sum().backward()
    return x.grad(grads), w.grad(grads)


def numpy_chain(x: np.ndarray, w: np.ndarray):
    """The floor: forward keeping what backward needs, then the hand-derived backward."""
    saved = []
    y = x
    for _ in range(LINKS):
        product = y * w
        saved.append((y, product))
        y = np.sin(product) + x
    g = np.ones_like(y)
    grad_x = np.zeros_like(x)
    grad_w = np.zeros_like(w)
    for y_in, product in reversed(saved):
        grad_x += g
        g_product = g * np.cos(product)
        grad_w += g_product * y_in
        g = g_product * w
    return grad_x + g, grad_w


def chain_loss(xp, x, w):
    """The chain's loss written against a NumPy-like module ``xp`` (autograd's, JAX's)."""
    y = x
    for _ in range(LINKS):
        y = xp.sin(y * w) + x
    return xp.sum(y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40, help="timed runs of each (default 40)")
    parser.add_argument(
        "--retrograd-only",
        action="store_true",
        help="time retrograd alone (for A/B runs of two source trees, alternated)",
    )
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    w0 = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    candidates = {
        "NumPy by hand (floor)": lambda: numpy_chain(x0, w0),
        "retrograd": lambda: retrograd_chain(x0, w0),
    }

    # The gradients must agree before any timing means anything.
    ours = [g.numpy() for g in retrograd_chain(x0, w0)]
    for a, b in zip(ours, numpy_chain(x0, w0)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)

    if args.retrograd_only:
        del candidates["NumPy by hand (floor)"]
    torch = None if args.retrograd_only else torch_single_thread()
    if torch is not None:

        def torch_chain():
            x = torch.tensor(x0, requires_grad=True)
            w = torch.tensor(w0, requires_grad=True)
            y = x
            for _ in range(LINKS):
                y = (y * w).sin() + x
            y.sum().backward()
            return x.grad, w.grad

        candidates["PyTorch eager"] = torch_chain

    autograd = None if args.retrograd_only else optional("autograd")
    if autograd is not None:
        anp = optional("autograd.numpy")
        hips = autograd.grad(lambda x, w: chain_loss(anp, x, w), argnum=(0, 1))
        candidates["HIPS autograd"] = lambda: hips(x0, w0)

    jax = None if args.retrograd_only else optional("jax")
    if jax is not None:
        jnp = optional("jax.numpy")
        eager = jax.grad(lambda x, w: chain_loss(jnp, x, w), argnums=(0, 1))
        jitted = jax.jit(eager)
        xj, wj = jnp.asarray(x0), jnp.asarray(w0)
        candidates["JAX eager"] = lambda: [g.block_until_ready() for g in eager(xj, wj)]
        candidates["JAX jit (whole chain compiled)"] = lambda: [
            g.block_until_ready() for g in jitted(xj, wj)
        ]

    times = interleaved(candidates, repeats=args.repeats)
    reference = median(times["retrograd"])
    rows = [
        [name, f"{median(t) / OPS * 1e6:.2f}", f"{median(t) / reference:.2f}"]
        for name, t in times.items()
    ]
    title = f"Per-op overhead, {OPS}-op chain on {SHAPE} float32, forward + backward"
    header = ["implementation", f"µs/op (median of {args.repeats})", "time / retrograd"]
    print(title)
    print(machine())
    print(table(rows, header))
    if not args.retrograd_only:  # an A/B run of two trees is compared by hand, not quoted
        common.write_results(
            "overhead", {title: {"header": header, "rows": rows}}, command=common.command_line()
        )


if __name__ == "__main__":
    main()
