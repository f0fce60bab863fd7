"""MLP training step: 784-1024-1024-10, ReLU, softmax cross-entropy, batch 256, SGD, one thread.

Side by side in one run (interleaved repetitions, medians): retrograd, PyTorch eager, JAX (jit,
when installed), the same step written by hand in NumPy, and the NumPy time of the step's 8
matmuls alone (3 forward, 5 backward: the input needs no gradient), the floor of any
implementation.

    python benchmarks/bench_mlp.py
"""

from __future__ import annotations

import common  # first: pins BLAS threads before NumPy loads

# isort: split
import itertools

import numpy as np

import retrograd as rg
from common import interleaved, machine, median, optional, table, torch_single_thread

BATCH, SIZES, LR = 256, (784, 1024, 1024, 10), 0.01


def initial_parameters(rng: np.random.Generator) -> list[np.ndarray]:
    params = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        params.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32))
        params.append(np.zeros(fan_out, np.float32))
    return params


def cross_entropy(logits: rg.Tensor, labels: rg.Tensor) -> rg.Tensor:
    from retrograd.nn import functional

    if hasattr(functional, "cross_entropy"):
        return functional.cross_entropy(logits, labels)
    picked = logits.log_softmax(1).gather(1, labels.unsqueeze_dim(1))
    return -picked.mean()


class RetrogradMLP:
    def __init__(self, params, x, labels):
        self.params = [rg.tensor(p).require_grad() for p in params]
        self.x = rg.tensor(x)
        self.labels = rg.tensor(labels, dtype="int64")

    def step(self) -> float:
        w1, b1, w2, b2, w3, b3 = self.params
        hidden = (self.x @ w1 + b1).relu()
        hidden = (hidden @ w2 + b2).relu()
        loss = cross_entropy(hidden @ w3 + b3, self.labels)
        grads = loss.backward()
        self.params = [(p - LR * p.grad(grads)).detach().require_grad() for p in self.params]
        return loss.item()


class NumpyMLP:
    """The same step by hand: the floor for a whole step."""

    def __init__(self, params, x, labels):
        self.params = [p.copy() for p in params]
        self.x = x
        self.onehot = np.eye(SIZES[-1], dtype=np.float32)[labels]

    def step(self) -> float:
        w1, b1, w2, b2, w3, b3 = self.params
        z1 = self.x @ w1 + b1
        h1 = np.maximum(z1, 0)
        z2 = h1 @ w2 + b2
        h2 = np.maximum(z2, 0)
        logits = h2 @ w3 + b3
        shifted = logits - logits.max(1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
        loss = -(log_probs * self.onehot).sum() / BATCH
        g3 = (np.exp(log_probs) - self.onehot) / BATCH
        gw3, gb3 = h2.T @ g3, g3.sum(0)
        g2 = (g3 @ w3.T) * (z2 > 0)
        gw2, gb2 = h1.T @ g2, g2.sum(0)
        g1 = (g2 @ w2.T) * (z1 > 0)
        gw1, gb1 = self.x.T @ g1, g1.sum(0)
        grads = [gw1, gb1, gw2, gb2, gw3, gb3]
        self.params = [p - LR * g for p, g in zip(self.params, grads)]
        return float(loss)


def matmuls_alone(params, x):
    w1, _, w2, _, w3, _ = params

    def run():
        h1 = x @ w1
        h2 = h1 @ w2
        out = h2 @ w3
        g2 = out @ w3.T
        _ = h2.T @ out
        g1 = g2 @ w2.T
        _ = h1.T @ g2
        _ = x.T @ g1
        return g1

    return run


def main() -> None:
    rng = np.random.default_rng(0)
    params = initial_parameters(rng)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    labels = rng.integers(0, SIZES[-1], BATCH)

    ours, floor = RetrogradMLP(params, x, labels), NumpyMLP(params, x, labels)
    for _ in range(3):  # the two must train identically before timing means anything
        a, b = ours.step(), floor.step()
        assert abs(a - b) < 1e-4 * max(1.0, abs(b)), (a, b)
    candidates = {
        "NumPy: the 8 matmuls alone": matmuls_alone(params, x),
        "NumPy: whole step by hand": floor.step,
        "retrograd": ours.step,
    }

    torch = torch_single_thread()
    if torch is not None:
        tparams = [torch.tensor(p, requires_grad=True) for p in params]
        tx, tlabels = torch.tensor(x), torch.tensor(labels)

        def torch_step():
            w1, b1, w2, b2, w3, b3 = tparams
            hidden = (tx @ w1 + b1).relu()
            hidden = (hidden @ w2 + b2).relu()
            loss = torch.nn.functional.cross_entropy(hidden @ w3 + b3, tlabels)
            loss.backward()
            with torch.no_grad():
                for p in tparams:
                    p -= LR * p.grad
                    p.grad = None
            return loss.item()

        candidates["PyTorch eager"] = torch_step

    jax = optional("jax")
    if jax is not None:
        jnp = optional("jax.numpy")
        jparams = [jnp.asarray(p) for p in params]
        jx, jlabels = jnp.asarray(x), jnp.asarray(labels)

        def jax_loss(ps):
            w1, b1, w2, b2, w3, b3 = ps
            hidden = jax.nn.relu(jx @ w1 + b1)
            hidden = jax.nn.relu(hidden @ w2 + b2)
            logp = jax.nn.log_softmax(hidden @ w3 + b3)
            return -jnp.take_along_axis(logp, jlabels[:, None], 1).mean()

        @jax.jit
        def jax_update(ps):
            grads = jax.grad(jax_loss)(ps)
            return [p - LR * g for p, g in zip(ps, grads)]

        state = {"params": jparams}

        def jax_step():
            state["params"] = jax_update(state["params"])
            state["params"][0].block_until_ready()

        candidates["JAX jit"] = jax_step

    times = interleaved(candidates, repeats=15)
    ours_median = median(times["retrograd"])
    rows = [
        [name, f"{median(t) * 1e3:.2f}", f"{ours_median / median(t):.2f}"]
        for name, t in times.items()
    ]
    title = "MLP step 784-1024-1024-10, ReLU, softmax cross-entropy, batch 256, SGD, float32"
    header = ["implementation", "ms/step (median of 15)", "retrograd / this"]
    print(title)
    print(machine())
    print(table(rows, header))
    common.write_results(
        "mlp", {title: {"header": header, "rows": rows}}, command=common.command_line()
    )


if __name__ == "__main__":
    main()
