"""Checkpointing: activation memory and step time of NoCheckpointing vs BalancedCheckpointing.

The model: 8 residual layers of width 1024, batch 256, float32; each layer is
``h = layer_norm(h + gelu(h @ W + b))`` with GELU (tanh form) and layer norm (with gain and
bias) written out of elementwise ops and ``mean_dim`` reductions, so most of the graph is
memory-bound. Loss: ``mean(h ** 2)``.

Activation memory is measured with ``tracemalloc``: parameters are allocated before tracing
starts, and the figure is the peak, over forward and backward, of traced memory minus the
parameter gradients alive at that moment (the gradients are the step's result, the same under
both strategies, and they alone would dominate a plain "peak minus final gradients" figure).
The peak is sampled exactly: tracemalloc's peak is read and reset at every gradient
registration, so nothing between two registrations escapes it.

    python benchmarks/bench_checkpointing.py
"""

from __future__ import annotations

import tracemalloc

import common  # noqa: F401  (pins BLAS threads before NumPy loads)

# isort: split
import numpy as np

import retrograd as rg
from common import interleaved, machine, median, table
from retrograd.autodiff import runtime

WIDTH, BATCH, LAYERS = 1024, 256, 8


def gelu(x: rg.Tensor) -> rg.Tensor:
    return 0.5 * x * (1.0 + ((x + 0.044715 * x * x * x) * 0.7978845608028654).tanh())


def layer_norm(x: rg.Tensor, gain: rg.Tensor, bias: rg.Tensor) -> rg.Tensor:
    centered = x - x.mean_dim(1)
    variance = (centered * centered).mean_dim(1)
    return centered / (variance + 1e-5).sqrt() * gain + bias


class Model:
    def __init__(self, strategy: rg.CheckpointStrategy, seed: int = 0):
        self.backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=strategy)
        rng = np.random.default_rng(seed)
        with rg.use_backend(self.backend):
            self.layers = [
                [
                    rg.tensor((rng.standard_normal((WIDTH, WIDTH)) / 32).astype(np.float32)),
                    rg.tensor(np.zeros(WIDTH, np.float32)),
                    rg.tensor(np.ones(WIDTH, np.float32)),
                    rg.tensor(np.zeros(WIDTH, np.float32)),
                ]
                for _ in range(LAYERS)
            ]
            for layer in self.layers:
                for p in layer:
                    p.require_grad()
            self.x = rg.tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32))

    @property
    def parameters(self) -> list[rg.Tensor]:
        return [p for layer in self.layers for p in layer]

    def loss(self) -> rg.Tensor:
        with rg.use_backend(self.backend):
            h = self.x
            for weight, bias, gain, shift in self.layers:
                h = layer_norm(h + gelu(h @ weight + bias), gain, shift)
            return (h * h).mean()

    def step(self) -> rg.Gradients:
        return self.loss().backward()


class ActivationPeak:
    """A backward hook: traced-memory peak minus live parameter gradients, between every two
    gradient registrations."""

    def __init__(self, model: Model):
        self.peak = 0
        self.leaf_bytes = 0
        self.parameter_ids = {p.primitive.node.id for p in model.parameters}

    def sample(self, leaf_bytes: int) -> None:
        self.peak = max(self.peak, tracemalloc.get_traced_memory()[1] - leaf_bytes)
        tracemalloc.reset_peak()

    def begin(self, tape, grads) -> None:
        self.sample(0)

        def on_register(node, gradients):
            if node.id in self.parameter_ids:
                self.leaf_bytes = sum(
                    gradients.values[i].nbytes for i in self.parameter_ids if i in gradients.values
                )
            self.sample(self.leaf_bytes)

        grads.on_register.append(on_register)

    def end(self, grads) -> None:
        self.sample(self.leaf_bytes)


def measure_memory(strategy: rg.CheckpointStrategy) -> tuple[int, int, int, list[np.ndarray]]:
    model = Model(strategy)
    model.step()  # warm up plans and allocator
    probe = ActivationPeak(model)
    runtime.BACKWARD_HOOKS.append(probe)
    tracemalloc.start()
    try:
        loss = model.loss()
        after_forward = tracemalloc.get_traced_memory()[0]
        probe.sample(0)
        grads = loss.backward()
        recomputed = getattr(grads, "recomputed_bytes", 0)
    finally:
        tracemalloc.stop()
        runtime.BACKWARD_HOOKS.remove(probe)
    gradients = [p.grad(grads).numpy() for p in model.parameters]
    return after_forward, probe.peak, recomputed, gradients


def main() -> None:
    strategies = {
        "NoCheckpointing": rg.NoCheckpointing(),
        "BalancedCheckpointing": rg.BalancedCheckpointing(),
    }
    memory = {name: measure_memory(s) for name, s in strategies.items()}
    reference = memory["NoCheckpointing"][3]
    for gradient, other in zip(reference, memory["BalancedCheckpointing"][3]):
        assert np.array_equal(gradient, other), "strategies must give identical gradients"

    models = {name: Model(s) for name, s in strategies.items()}
    times = interleaved({name: m.step for name, m in models.items()}, repeats=7)

    base_memory, base_time = memory["NoCheckpointing"][1], median(times["NoCheckpointing"])
    rows = []
    for name in strategies:
        after_forward, peak, recomputed, _ = memory[name]
        rows.append(
            [
                name,
                f"{after_forward / 2**20:.1f}",
                f"{peak / 2**20:.1f}",
                f"{peak / base_memory:.2f}",
                f"{recomputed / 2**20:.1f}",
                f"{median(times[name]) * 1e3:.0f}",
                f"{median(times[name]) / base_time:.2f}",
            ]
        )
    print(
        f"{LAYERS}-layer residual MLP, width {WIDTH}, batch {BATCH}, float32 (gradients identical)"
    )
    print(machine())
    header = [
        "strategy",
        "kept after forward (MiB)",
        "activation peak (MiB)",
        "peak ratio",
        "recomputed (MiB)",
        "step ms (median of 7)",
        "time ratio",
    ]
    print(table(rows, header))


if __name__ == "__main__":
    main()
