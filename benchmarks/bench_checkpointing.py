"""Checkpointing: activation memory against step time, per strategy, on three workloads.

Workloads (NumPy backend, float32):

- ``mlp``: 8 residual layers of width 1024, batch 256; each layer
  ``h = layer_norm(h + gelu(h @ W + b))`` with GELU (tanh form) and layer norm written out of
  elementwise ops and ``mean_dim`` reductions. Loss ``mean(h ** 2)``.
- ``transformer``: 4 pre-norm blocks, d 256, 4 heads, sequence 128, batch 8 (attention written
  with matmul and softmax, a GELU MLP of width 1024). Loss ``mean(h ** 2)``.
- ``gpt``: the GPT of ``bench_gpt.py`` as it defines it (fused linear, layer norm, causal
  attention and GELU ops; embeddings, tied head, cross-entropy), its small size: 4 layers,
  4 heads, n_embd 128, block 128, batch 16.

Strategies: NoCheckpointing, BalancedCheckpointing, and BudgetCheckpointing at 0.1x ... 0.9x of
NoCheckpointing's peak. Memory: ``retrograd.memory.measure_step_memory`` (tracemalloc peak over
forward + backward minus live parameter gradients) and the engine's own ``Gradients.peak_bytes``.
Time: median of interleaved steps in one process (A B C A B C ...), so load on a shared machine
affects all alike; wall time, and process CPU time (less disturbed by other jobs). With torch
installed, torch eager and torch per-block ``torch.utils.checkpoint`` are timed too (their
memory: bytes saved for backward at the end of forward, through ``saved_tensors_hooks``;
tracemalloc cannot see torch's allocator).

The chain benchmark: backward time of ``y = sin(y)`` n times (4x4 float64) for n = 1k .. 20k.

    python benchmarks/bench_checkpointing.py [--quick] [--repeats 5] [--plot PATH]

The memory-time curve goes beside the results file (``checkpointing.png``), or to ``--plot``.
"""

from __future__ import annotations

import argparse
import time

import common  # first: pins BLAS threads before NumPy loads

# isort: split
import numpy as np

import retrograd as rg
from common import machine, median, optional, table
from retrograd.memory import measure_step_memory
from retrograd.nn import functional as F  # noqa: N812

FRACTIONS = (0.1, 0.25, 0.5, 0.75, 0.9)


def gelu(x: rg.Tensor) -> rg.Tensor:
    return 0.5 * x * (1.0 + ((x + 0.044715 * x * x * x) * 0.7978845608028654).tanh())


def layer_norm(x: rg.Tensor, gain: rg.Tensor, bias: rg.Tensor) -> rg.Tensor:
    centered = x - x.mean_dim(-1)
    variance = (centered * centered).mean_dim(-1)
    return centered / (variance + 1e-5).sqrt() * gain + bias


class MLP:
    def __init__(self, scale: int = 1, seed: int = 0):
        self.width, self.batch, self.layers = 1024 // scale, 256 // scale, 8
        # the sizes this instance runs (``--quick`` divides them by ``scale``)
        self.name = f"residual GELU MLP ({self.layers} x {self.width}, batch {self.batch})"
        rng = np.random.default_rng(seed)
        w = self.width
        self.arrays = [
            [
                (rng.standard_normal((w, w)) / w**0.5).astype(np.float32),
                np.zeros(w, np.float32),
                np.ones(w, np.float32),
                np.zeros(w, np.float32),
            ]
            for _ in range(self.layers)
        ]
        self.x = rng.standard_normal((self.batch, w)).astype(np.float32)

    def build(self, backend: rg.Autodiff):
        with rg.use_backend(backend):
            params = [[rg.tensor(a).require_grad() for a in layer] for layer in self.arrays]
            x = rg.tensor(self.x)

        def loss() -> rg.Tensor:
            with rg.use_backend(backend):
                h = x
                for weight, bias, gain, shift in params:
                    h = layer_norm(h + gelu(h @ weight + bias), gain, shift)
                return (h * h).mean()

        return loss, [p for layer in params for p in layer]

    def torch_step(self, checkpoint: bool):
        torch = optional("torch")
        from torch.utils.checkpoint import checkpoint as torch_checkpoint

        params = [[torch.tensor(a, requires_grad=True) for a in layer] for layer in self.arrays]
        x = torch.tensor(self.x)

        def tgelu(z):
            return 0.5 * z * (1.0 + torch.tanh((z + 0.044715 * z * z * z) * 0.7978845608028654))

        def block(h, weight, bias, gain, shift):
            h = h + tgelu(h @ weight + bias)
            c = h - h.mean(-1, keepdim=True)
            return c / ((c * c).mean(-1, keepdim=True) + 1e-5).sqrt() * gain + shift

        def loss():
            h = x
            for layer in params:
                if checkpoint:
                    h = torch_checkpoint(block, h, *layer, use_reentrant=False)
                else:
                    h = block(h, *layer)
            return (h * h).mean()

        return loss


class Transformer:
    def __init__(self, scale: int = 1, seed: int = 0):
        self.d, self.heads, self.seq, self.batch, self.layers = 256 // scale, 4, 128, 8, 4
        self.name = (
            f"{self.layers}-layer transformer (d {self.d}, {self.heads} heads, seq {self.seq}, "
            f"batch {self.batch})"
        )
        rng = np.random.default_rng(seed)
        d = self.d

        def weight(n_in, n_out):
            return (rng.standard_normal((n_in, n_out)) / n_in**0.5).astype(np.float32)

        self.arrays = [
            [
                np.ones(d, np.float32),
                np.zeros(d, np.float32),
                weight(d, 3 * d),
                weight(d, d),
                np.ones(d, np.float32),
                np.zeros(d, np.float32),
                weight(d, 4 * d),
                np.zeros(4 * d, np.float32),
                weight(4 * d, d),
                np.zeros(d, np.float32),
            ]
            for _ in range(self.layers)
        ]
        self.x = rng.standard_normal((self.batch, self.seq, d)).astype(np.float32)

    def _block(self, h, params, ops):
        """One pre-norm block, written once for retrograd and torch (``ops`` differ)."""
        g1, b1, w_qkv, w_o, g2, b2, w_1, c_1, w_2, c_2 = params
        batch, seq, d, heads = self.batch, self.seq, self.d, self.heads
        qkv = ops.norm(h, g1, b1) @ w_qkv
        qkv = ops.permute(ops.reshape(qkv, (batch, seq, 3, heads, d // heads)), (2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = ops.softmax((q @ ops.swap(k)) * (1.0 / (d // heads) ** 0.5))
        attention = ops.reshape(ops.permute(scores @ v, (0, 2, 1, 3)), (batch, seq, d))
        h = h + attention @ w_o
        return h + ops.gelu(ops.norm(h, g2, b2) @ w_1 + c_1) @ w_2 + c_2

    def build(self, backend: rg.Autodiff):
        class Ops:
            norm = staticmethod(layer_norm)
            gelu = staticmethod(gelu)
            reshape = staticmethod(lambda t, s: t.reshape(s))
            permute = staticmethod(lambda t, p: t.permute(p))
            swap = staticmethod(lambda t: t.swap_dims(-1, -2))
            softmax = staticmethod(lambda t: F.softmax(t, -1))

        with rg.use_backend(backend):
            params = [[rg.tensor(a).require_grad() for a in layer] for layer in self.arrays]
            x = rg.tensor(self.x)

        def loss() -> rg.Tensor:
            with rg.use_backend(backend):
                h = x
                for layer in params:
                    h = self._block(h, layer, Ops)
                return (h * h).mean()

        return loss, [p for layer in params for p in layer]

    def torch_step(self, checkpoint: bool):
        torch = optional("torch")
        from torch.utils.checkpoint import checkpoint as torch_checkpoint

        class Ops:
            @staticmethod
            def norm(t, g, b):
                c = t - t.mean(-1, keepdim=True)
                return c / ((c * c).mean(-1, keepdim=True) + 1e-5).sqrt() * g + b

            @staticmethod
            def gelu(z):
                return 0.5 * z * (1.0 + torch.tanh((z + 0.044715 * z * z * z) * 0.7978845608))

            reshape = staticmethod(lambda t, s: t.reshape(s))
            permute = staticmethod(lambda t, p: t.permute(p))
            swap = staticmethod(lambda t: t.transpose(-1, -2))
            softmax = staticmethod(lambda t: torch.softmax(t, -1))

        params = [[torch.tensor(a, requires_grad=True) for a in layer] for layer in self.arrays]
        x = torch.tensor(self.x)

        def loss():
            h = x
            for layer in params:
                if checkpoint:
                    h = torch_checkpoint(
                        lambda t, *p: self._block(t, p, Ops), h, *layer, use_reentrant=False
                    )
                else:
                    h = self._block(h, layer, Ops)
            return (h * h).mean()

        return loss


class GPT:
    """The GPT of ``bench_gpt.py`` (nanoGPT's, with fused linear, layer norm, attention and
    GELU ops), its "small" size: 4 layers, 4 heads, n_embd 128, block 128, batch 16."""

    def __init__(self, scale: int = 1, seed: int = 0):
        import bench_gpt

        self.gpt = bench_gpt
        n_layer, n_head, n_embd, block, batch = bench_gpt.SIZES["small"]
        self.config = (n_layer, n_head, n_embd // scale, block, batch)
        self.name = (
            f"GPT of bench_gpt ({n_layer} layers, {n_head} heads, n_embd {n_embd // scale}, "
            f"block {block}, batch {batch})"
        )
        rng = np.random.default_rng(seed)
        data = rng.integers(0, bench_gpt.VOCAB, (batch, block + 1))
        self.idx, self.targets = data[:, :-1].copy(), data[:, 1:].copy()
        # one set of weights for every strategy (and torch): nanoGPT's init (bench_gpt's)
        with rg.use_backend(rg.Autodiff(rg.NumpyBackend())):
            names = self._model().state_dict()
        self.state = {}
        for name, value in names.items():
            if name.endswith("bias"):
                value = np.zeros_like(value)
            elif "ln" in name:
                value = np.ones_like(value)
            else:
                value = (rng.standard_normal(value.shape) * 0.02).astype(value.dtype)
            self.state[name] = value

    def _model(self):
        n_layer, n_head, n_embd, block, _ = self.config
        return self.gpt.GPT(n_layer, n_head, n_embd, block)

    def build(self, backend: rg.Autodiff):
        with rg.use_backend(backend):
            model = self._model()
            model.load_state_dict(self.state)
            idx, targets = rg.tensor(self.idx), rg.tensor(self.targets)

        def loss() -> rg.Tensor:
            with rg.use_backend(backend):
                return model(idx, targets)

        return loss, model.parameters()

    def torch_step(self, checkpoint: bool):
        torch = optional("torch")
        from torch.utils.checkpoint import checkpoint as torch_checkpoint

        n_layer, n_head, n_embd, block, _ = self.config
        model = self.gpt.torch_gpt(torch, n_layer, n_head, n_embd, block)
        state = {name: torch.from_numpy(np.array(value)) for name, value in self.state.items()}
        state["lm_head.weight"] = state["wte.weight"]
        model.load_state_dict(state)
        idx, targets = torch.from_numpy(self.idx), torch.from_numpy(self.targets)
        functional = torch.nn.functional

        def loss():
            x = model.wte(idx) + model.wpe(torch.arange(0, idx.shape[1]))
            for layer in model.h:
                x = torch_checkpoint(layer, x, use_reentrant=False) if checkpoint else layer(x)
            logits = model.lm_head(model.ln_f(x))
            return functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

        return loss


def torch_saved_bytes(loss_fn) -> int:
    """Bytes torch saves for backward by the end of forward (each storage once)."""
    torch = optional("torch")
    seen: dict[int, int] = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn()
    loss.backward()
    return sum(seen.values())


def run_workload(workload, repeats: int) -> list[dict]:
    """Memory and interleaved time of every strategy on ``workload``."""
    strategies: dict[str, rg.CheckpointStrategy] = {
        "NoCheckpointing": rg.NoCheckpointing(),
        "BalancedCheckpointing": rg.BalancedCheckpointing(),
    }
    loss_fn, params = workload.build(rg.Autodiff(rg.NumpyBackend(), rg.NoCheckpointing()))
    loss_fn().backward()
    reference = measure_step_memory(loss_fn, params).peak_activation_bytes
    for fraction in FRACTIONS:
        strategies[f"Budget {fraction:.2f}x"] = rg.BudgetCheckpointing(int(reference * fraction))

    reference_grads = None
    results, steps = [], {}
    for name, strategy in strategies.items():
        loss_fn, params = workload.build(rg.Autodiff(rg.NumpyBackend(), strategy))
        # The first steps of a budget differ from the later ones (the first is eager, then
        # a plan is made and followed): memory is measured on the third step, the engine's
        # count read on the fourth, and gradients compared on the first and the fourth.
        grads = loss_fn().backward()
        first = [p.grad(grads).numpy() for p in params]
        loss_fn().backward()
        memory = measure_step_memory(loss_fn, params)
        grads = loss_fn().backward()
        gradients = [p.grad(grads).numpy() for p in params]
        if reference_grads is None:
            reference_grads = gradients
        for found in (first, gradients):
            assert all(np.array_equal(a, b) for a, b in zip(reference_grads, found)), name
        results.append(
            {
                "name": name,
                "budget": getattr(strategy, "max_bytes", None),  # Budget's alone
                "peak": memory.peak_activation_bytes,
                "engine_peak": grads.peak_bytes,
                "recomputed": memory.recomputed_bytes,
            }
        )
        steps[name] = lambda f=loss_fn: f().backward()
    torch = optional("torch")
    if torch is not None:
        torch.set_num_threads(1)
        for name, flag in (("torch eager", False), ("torch per-block checkpoint", True)):
            step_loss = workload.torch_step(flag)
            results.append(
                {
                    "name": name,
                    "budget": None,
                    "peak": torch_saved_bytes(step_loss),
                    "engine_peak": None,
                    "recomputed": None,
                }
            )
            steps[name] = lambda f=step_loss: f().backward()
    times, cpu = interleaved_with_cpu(steps, repeats=repeats, warmup=1)
    for row in results:
        row["time"] = median(times[row["name"]])
        row["cpu"] = median(cpu[row["name"]])
    return results


def interleaved_with_cpu(
    candidates: dict, repeats: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``common.interleaved``, also timing each call in process CPU seconds: with one BLAS
    thread, CPU time is the step's own work, which other jobs on a shared machine disturb
    far less than wall time (they still share caches and memory bandwidth)."""
    for function in candidates.values():
        for _ in range(warmup):
            function()
    wall: dict[str, list[float]] = {name: [] for name in candidates}
    cpu: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, function in candidates.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            function()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    return wall, cpu


def print_workload(workload, results: list[dict]) -> tuple[str, dict]:
    """Print the workload's table; return its title and the table, for the results file."""
    base = results[0]
    torch_base = next((r for r in results if r["name"] == "torch eager"), None)
    rows = []
    for r in results:
        is_torch = r["name"].startswith("torch")
        ref = torch_base if is_torch else base
        rows.append(
            [
                r["name"],
                "" if r["budget"] is None else f"{r['budget'] / 2**20:.1f}",
                f"{r['peak'] / 2**20:.1f}",
                f"{r['peak'] / ref['peak']:.2f}",
                "" if r["engine_peak"] is None else f"{r['engine_peak'] / 2**20:.1f}",
                "" if r["recomputed"] is None else f"{r['recomputed'] / 2**20:.1f}",
                f"{r['time'] * 1e3:.0f}",
                f"{r['time'] / ref['time']:.2f}",
                f"{r['cpu'] / ref['cpu']:.2f}",
            ]
        )
    header = [
        "strategy",
        "budget MiB",
        "peak MiB (tracemalloc; torch: saved)",
        "peak ratio",
        "engine peak_bytes MiB",
        "recomputed MiB",
        "step ms",
        "time ratio",
        "CPU time ratio",
    ]
    title = f"{workload.name}, float32, gradients bit-identical across strategies"
    print(f"\n### {title}\n")
    print(table(rows, header))
    return title, {"header": header, "rows": rows}


def chain_benchmark(sizes: tuple[int, ...]) -> tuple[str, dict]:
    """Print the chain's table; return its title and the table, for the results file."""
    strategies = {
        "NoCheckpointing": rg.NoCheckpointing,
        "BalancedCheckpointing": rg.BalancedCheckpointing,
        "Budget 64KiB": lambda: rg.BudgetCheckpointing("64KiB"),
    }
    rows = []
    for n in sizes:
        row = [f"{n:,}"]
        base = None
        for make in strategies.values():
            with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), make())):
                x = rg.tensor(np.full((4, 4), 0.5)).require_grad()
                y = x
                for _ in range(n):
                    y = y.sin()
                loss = y.sum()
                start = time.perf_counter()
                grads = loss.backward()
                seconds = time.perf_counter() - start
            base = base or seconds
            row.append(f"{seconds * 1e3:.0f} ({seconds / base:.2f}x, {grads.recomputed_ops} rec.)")
        rows.append(row)
    title = "Backward through y = sin(y), n times (4x4 float64): ms (ratio, ops recomputed)"
    print(f"\n### {title}\n")
    print(table(rows, ["n", *strategies]))
    return title, {"header": ["n", *strategies], "rows": rows}


def plot(all_results: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(all_results), figsize=(6 * len(all_results), 4.5))
    for axis, (title, results) in zip(np.atleast_1d(axes), all_results.items()):
        base = results[0]
        torch_base = next((r for r in results if r["name"] == "torch eager"), None)
        budget = [r for r in results if r["name"].startswith("Budget")]
        axis.plot(
            [r["time"] / base["time"] for r in budget],
            [r["peak"] / base["peak"] for r in budget],
            "o-",
            label="BudgetCheckpointing 0.1x..0.9x (wall time)",
        )
        axis.plot(
            [r["cpu"] / base["cpu"] for r in budget],
            [r["peak"] / base["peak"] for r in budget],
            "o--",
            alpha=0.6,
            label="BudgetCheckpointing 0.1x..0.9x (CPU time)",
        )
        for r in results:
            if r["name"].startswith("Budget"):
                continue
            ref = torch_base if r["name"].startswith("torch") else base
            axis.plot(r["time"] / ref["time"], r["peak"] / ref["peak"], "s", label=r["name"])
        axis.set_xlabel("step time / NoCheckpointing's (torch: / torch eager's)")
        axis.set_ylabel("activation peak / NoCheckpointing's")
        axis.set_title(title, fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="quarter-size models, 3 repeats")
    parser.add_argument("--plot", help="write the memory-time plot (png) here instead")
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    scale, repeats = (4, 3) if options.quick else (1, options.repeats)
    print(machine())
    all_results, tables = {}, {}
    for workload in (MLP(scale), Transformer(scale), GPT(scale)):
        results = run_workload(workload, repeats)
        title, workload_table = print_workload(workload, results)
        tables[title] = workload_table
        all_results[workload.name] = results
    title, chain_table = chain_benchmark(
        (1000, 4000) if options.quick else (1000, 4000, 10_000, 20_000)
    )
    tables[title] = chain_table
    figure = options.plot or str(common.results_folder() / "checkpointing.png")
    if optional("matplotlib") is not None:
        plot(all_results, figure)
        print(f"\nwrote {figure}")
    common.write_results("checkpointing", tables, command=common.command_line())


if __name__ == "__main__":
    main()
