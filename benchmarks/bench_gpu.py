"""Issue 13's table: one training step of each workload, torch eager against retrograd over
``rg.TorchBackend``, on a GPU (``--device cuda``) or, at reduced sizes, on the CPU.

Columns: torch eager autograd; torch with the step captured in a CUDA graph (CUDA only);
retrograd over torch (``rg.Autodiff(rg.TorchBackend(device))``); retrograd with the step
captured by ``rg.capture`` (only where it exists); JAX ``jit`` (only where JAX is installed;
the elementwise chain and the MLPs). Every column starts from the same weights, and the first
step's losses are compared before timing. Steps are timed interleaved (A B C A B C ...) in
one process, with a device synchronisation after each step, so a machine whose speed drifts
affects all columns alike; the table shows medians.

A step is forward, loss, backward and a plain SGD update of every parameter.

    python benchmarks/bench_gpu.py --device cuda              # the issue's sizes
    python benchmarks/bench_gpu.py --device cpu --sizes small # a quick run anywhere
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

# JAX takes 75% of the GPU at its first use unless told otherwise: torch's columns and the peak
# memory rows need it.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import common
import retrograd as rg
from retrograd.nn import functional as F  # noqa: N812

torch = common.optional("torch")
jax = common.optional("jax")

LR = 1e-3

#: workload sizes: the issue's, and small ones that run on a CPU in seconds
SIZES = {
    "full": {
        "chain": (300, 8),
        "mlp": ([784, 1024, 1024, 10], 256),
        "mlp_wide": ([4096] * 5, 4096),
        "cnn": [64, 1024],
        "cnn_channels": (32, 64, 28),
        "gpt": dict(layers=6, d=768, heads=12, seq=1024, batch=8, vocab=50304),
    },
    "small": {
        "chain": (300, 8),
        "mlp": ([784, 128, 128, 10], 32),
        "mlp_wide": ([256] * 5, 256),
        "cnn": [8, 32],
        "cnn_channels": (8, 16, 28),
        "gpt": dict(layers=2, d=64, heads=4, seq=64, batch=2, vocab=256),
    },
}


# -- the workloads, each in torch and in retrograd over the same initial values ------------------
def _init(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


class Workload:
    """Initial parameters (host arrays), a batch, and the loss in each framework."""

    name = ""
    unit = "ms"

    def __init__(self, device: str):
        self.device = device
        self.params: dict[str, np.ndarray] = {}
        self.inputs: dict[str, np.ndarray] = {}

    # torch: parameters as leaf tensors, inputs as tensors
    def torch_loss(self, p: dict[str, Any], x: dict[str, Any]) -> Any:
        raise NotImplementedError

    def rg_loss(self, p: dict[str, Any], x: dict[str, Any]) -> Any:
        raise NotImplementedError

    ops = 1  # the chain reports time per op


class Chain(Workload):
    unit = "µs/op"

    def __init__(self, device, length, side):
        super().__init__(device)
        rng = np.random.default_rng(0)
        self.params = {"w": rng.standard_normal((side, side)).astype(np.float32) * 0.1}
        self.inputs = {}
        self.ops = length
        self.name = f"{length}-op elementwise chain, {side}x{side}, µs per op"

    def _chain(self, w):
        y = w
        for i in range(self.ops):
            y = y * 0.999 if i % 3 == 0 else (y + 0.001 if i % 3 == 1 else y.tanh())
        return y.sum()

    def torch_loss(self, p, x):
        return self._chain(p["w"])

    def rg_loss(self, p, x):
        return self._chain(p["w"])


class MLP(Workload):
    def __init__(self, device, widths, batch):
        super().__init__(device)
        rng = np.random.default_rng(1)
        for i, (a, b) in enumerate(itertools.pairwise(widths)):
            self.params[f"w{i}"] = _init(rng, (b, a), a)
            self.params[f"b{i}"] = np.zeros(b, np.float32)
        self.layers = len(widths) - 1
        self.inputs = {
            "x": rng.standard_normal((batch, widths[0])).astype(np.float32),
            "y": rng.integers(0, widths[-1], batch).astype(np.int64),
        }
        self.name = f"MLP {'-'.join(map(str, widths))}, batch {batch}, ms"

    def torch_loss(self, p, x):
        h = x["x"]
        for i in range(self.layers):
            h = torch.nn.functional.linear(h, p[f"w{i}"], p[f"b{i}"])
            if i < self.layers - 1:
                h = torch.relu(h)
        return torch.nn.functional.cross_entropy(h, x["y"])

    def rg_loss(self, p, x):
        h = x["x"]
        for i in range(self.layers):
            h = F.linear(h, p[f"w{i}"], p[f"b{i}"])
            if i < self.layers - 1:
                h = F.relu(h)
        return F.cross_entropy(h, x["y"])


class CNN(Workload):
    def __init__(self, device, batch, channels):
        super().__init__(device)
        c1, c2, side = channels
        rng = np.random.default_rng(2)
        pooled = side // 2
        self.params = {
            "k1": _init(rng, (c1, 1, 3, 3), 9),
            "c1": np.zeros(c1, np.float32),
            "k2": _init(rng, (c2, c1, 3, 3), 9 * c1),
            "c2": np.zeros(c2, np.float32),
            "w": _init(rng, (10, c2 * pooled * pooled), c2 * pooled * pooled),
            "b": np.zeros(10, np.float32),
        }
        self.inputs = {
            "x": rng.standard_normal((batch, 1, side, side)).astype(np.float32),
            "y": rng.integers(0, 10, batch).astype(np.int64),
        }
        self.name = f"CNN (2 conv {c1}/{c2}, pool, linear), batch {batch}, ms"

    def torch_loss(self, p, x):
        tf = torch.nn.functional
        h = torch.relu(tf.conv2d(x["x"], p["k1"], p["c1"], padding=1))
        h = torch.relu(tf.conv2d(h, p["k2"], p["c2"], padding=1))
        h = tf.max_pool2d(h, 2).flatten(1)
        return tf.cross_entropy(tf.linear(h, p["w"], p["b"]), x["y"])

    def rg_loss(self, p, x):
        h = F.relu(F.conv2d(x["x"], p["k1"], p["c1"], padding=1))
        h = F.relu(F.conv2d(h, p["k2"], p["c2"], padding=1))
        h = F.max_pool2d(h, 2)
        h = h.reshape((h.shape[0], -1))
        return F.cross_entropy(F.linear(h, p["w"], p["b"]), x["y"])


class GPT(Workload):
    """nanoGPT's block: pre-norm attention (causal, by masked softmax) and a GELU MLP."""

    def __init__(self, device, layers, d, heads, seq, batch, vocab):
        super().__init__(device)
        rng = np.random.default_rng(3)
        self.layers, self.d, self.heads, self.seq = layers, d, heads, seq
        p = self.params
        p["wte"] = _init(rng, (vocab, d), 50)
        p["wpe"] = _init(rng, (seq, d), 50)
        for i in range(layers):
            p[f"ln1_{i}"] = np.ones(d, np.float32)
            p[f"ln1b_{i}"] = np.zeros(d, np.float32)
            p[f"qkv_{i}"] = _init(rng, (3 * d, d), d)
            p[f"qkvb_{i}"] = np.zeros(3 * d, np.float32)
            p[f"proj_{i}"] = _init(rng, (d, d), d * 2 * layers)
            p[f"projb_{i}"] = np.zeros(d, np.float32)
            p[f"ln2_{i}"] = np.ones(d, np.float32)
            p[f"ln2b_{i}"] = np.zeros(d, np.float32)
            p[f"fc_{i}"] = _init(rng, (4 * d, d), d)
            p[f"fcb_{i}"] = np.zeros(4 * d, np.float32)
            p[f"out_{i}"] = _init(rng, (d, 4 * d), 4 * d * 2 * layers)
            p[f"outb_{i}"] = np.zeros(d, np.float32)
        p["lnf"] = np.ones(d, np.float32)
        p["lnfb"] = np.zeros(d, np.float32)
        p["head"] = _init(rng, (vocab, d), d)
        tokens = rng.integers(0, vocab, (batch, seq + 1))
        self.inputs = {
            "idx": tokens[:, :-1].astype(np.int64),
            "y": tokens[:, 1:].reshape(-1).astype(np.int64),
            "future": np.triu(np.ones((seq, seq), bool), 1),
        }
        self.name = f"GPT, {layers} layers, d {d}, {heads} heads, seq {seq}, batch {batch}, ms"

    def _forward(self, p, x, lib):
        """One forward in either framework; ``lib`` supplies the few calls that differ."""
        b, t = x["idx"].shape
        d, h = self.d, self.heads
        z = lib.embedding(x["idx"], p["wte"]) + p["wpe"]
        for i in range(self.layers):
            a = lib.layer_norm(z, p[f"ln1_{i}"], p[f"ln1b_{i}"])
            qkv = lib.linear(a, p[f"qkv_{i}"], p[f"qkvb_{i}"])
            q, k, v = (
                qkv.reshape((b, t, 3, h, d // h)).permute((2, 0, 3, 1, 4))[j] for j in range(3)
            )
            scores = (q @ lib.swap(k)) * (1.0 / math.sqrt(d // h))
            att = lib.softmax(lib.mask_fill(scores, x["future"], -math.inf))
            y = (att @ v).permute((0, 2, 1, 3)).reshape((b, t, d))
            z = z + lib.linear(y, p[f"proj_{i}"], p[f"projb_{i}"])
            m = lib.layer_norm(z, p[f"ln2_{i}"], p[f"ln2b_{i}"])
            m = lib.gelu(lib.linear(m, p[f"fc_{i}"], p[f"fcb_{i}"]))
            z = z + lib.linear(m, p[f"out_{i}"], p[f"outb_{i}"])
        z = lib.layer_norm(z, p["lnf"], p["lnfb"])
        logits = lib.linear(z, p["head"], None)
        return lib.cross_entropy(logits.reshape((b * t, -1)), x["y"])

    def torch_loss(self, p, x):
        return self._forward(p, x, _TorchOps(self.d))

    def rg_loss(self, p, x):
        return self._forward(p, x, _RetrogradOps(self.d))


class _TorchOps:
    def __init__(self, d):
        self.d = d
        tf = torch.nn.functional
        self.embedding, self.linear, self.gelu, self.cross_entropy = (
            tf.embedding,
            tf.linear,
            tf.gelu,
            tf.cross_entropy,
        )

    def layer_norm(self, x, w, b):
        return torch.nn.functional.layer_norm(x, (self.d,), w, b)

    def swap(self, k):
        return k.transpose(-2, -1)

    def softmax(self, x):
        return torch.softmax(x, -1)

    def mask_fill(self, x, mask, value):
        return x.masked_fill(mask, value)


class _RetrogradOps:
    def __init__(self, d):
        self.d = d
        self.embedding, self.linear, self.gelu, self.cross_entropy = (
            F.embedding,
            F.linear,
            F.gelu,
            F.cross_entropy,
        )

    def layer_norm(self, x, w, b):
        return F.layer_norm(x, (self.d,), w, b)

    def swap(self, k):
        return k.swap_dims(-2, -1)

    def softmax(self, x):
        return F.softmax(x, -1)

    def mask_fill(self, x, mask, value):
        return x.mask_fill(mask, value)


# -- the columns: a step function per framework ---------------------------------------------------
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def torch_step(work: Workload) -> tuple[Callable[[], Any], Callable[[], float]]:
    """(step, first loss) of torch eager autograd with plain SGD."""
    dev = torch.device(work.device)
    params = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in work.params.items()}
    inputs = {k: torch.tensor(v, device=dev) for k, v in work.inputs.items()}
    optimizer = torch.optim.SGD(list(params.values()), lr=LR)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = work.torch_loss(params, inputs)
        loss.backward()
        optimizer.step()
        return loss

    return step, params, inputs, optimizer


def torch_graph_step(work: Workload) -> Callable[[], Any] | None:
    """torch's step captured in a CUDA graph (warm-up on a side stream), or None off CUDA."""
    if not work.device.startswith("cuda"):
        return None
    step, params, inputs, optimizer = torch_step(work)
    initial = {name: p.detach().clone() for name, p in params.items()}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = work.torch_loss(params, inputs)
        loss.backward()
        optimizer.step()
    # The warm-up steps moved the weights (capture itself runs nothing): back to the start, so
    # the first replay's loss is the other columns' first loss.
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(initial[name])

    def replay():
        graph.replay()
        return loss

    # The graph reads and writes the tensors it was captured with, at their addresses, but
    # holds no reference to them: they must outlive it. (Without this, the first H200 run's
    # replays read the weights and targets after their memory had been reused: a wrong first
    # loss on the chain, and class indices out of range in the MLP's cross-entropy kernel, a
    # device-side assert that lost the process's CUDA context.)
    replay.captured_tensors = (params, inputs, optimizer)
    return replay


def retrograd_step(work: Workload, backend: Any) -> Callable[[], Any]:
    """retrograd's step over ``backend``: forward, backward, SGD on the inner values."""
    params = {k: rg.tensor(v, backend=backend).require_grad() for k, v in work.params.items()}
    inputs = {k: rg.tensor(v, backend=backend) for k, v in work.inputs.items()}

    def step():
        loss = work.rg_loss(params, inputs)
        grads = loss.backward()
        for name, p in params.items():
            fresh = p.inner() - LR * p.grad(grads)
            params[name] = rg.Tensor.from_inner(fresh, backend=backend).require_grad()
        return loss

    return step


def captured_step(work: Workload, backend: Any) -> Callable[[], Any]:
    """The same step as :func:`retrograd_step`, written with a module and ``optim.SGD`` (what
    ``rg.capture`` takes as state), recorded once and then replayed. The first call returns the
    recorded step's own loss, so the column's first loss is comparable with the others'."""
    module = rg.nn.Module()
    slots = {name: name.replace(".", "_") for name in work.params}
    for name, value in work.params.items():
        setattr(module, slots[name], rg.nn.Parameter(rg.tensor(value, backend=backend)))
    optimizer = rg.optim.SGD(module, lr=LR)
    order = sorted(work.inputs)
    inputs = [rg.tensor(work.inputs[k], backend=backend) for k in order]

    def train_step(*values):
        params = {name: getattr(module, slot) for name, slot in slots.items()}
        loss = work.rg_loss(params, dict(zip(order, values)))
        optimizer.step(loss.backward())
        return loss

    captured = rg.capture(train_step, *inputs, state=[optimizer])
    pending = [captured.result]

    def step():
        return pending.pop() if pending else captured(*inputs)

    return step


def jax_step(work: Workload) -> Callable[[], Any] | None:
    """JAX ``jit`` of the same step, for the chain and the MLPs (None elsewhere or without JAX)."""
    if jax is None or not isinstance(work, Chain | MLP):
        return None
    jnp = jax.numpy

    def loss_fn(p, x):
        if isinstance(work, Chain):
            return work._chain(p["w"])
        h = x["x"]
        for i in range(work.layers):
            h = h @ p[f"w{i}"].T + p[f"b{i}"]
            if i < work.layers - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h, -1)
        return -jnp.mean(jnp.take_along_axis(logp, x["y"][:, None], 1))

    if isinstance(work, Chain):  # jnp arrays have no .tanh(): the chain with jnp's

        def loss_fn(p, x):
            y = p["w"]
            for i in range(work.ops):
                y = y * 0.999 if i % 3 == 0 else (y + 0.001 if i % 3 == 1 else jnp.tanh(y))
            return y.sum()

    @jax.jit
    def update(p, x):
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        return loss, jax.tree_util.tree_map(lambda a, b: a - LR * b, p, g)

    state = {"p": {k: jnp.asarray(v) for k, v in work.params.items()}}
    inputs = {k: jnp.asarray(v) for k, v in work.inputs.items()}

    def step():
        loss, state["p"] = update(state["p"], inputs)
        loss.block_until_ready()
        return loss

    return step


def _value(loss: Any) -> float:
    return float(np.asarray(loss.detach().cpu()) if torch.is_tensor(loss) else np.asarray(loss))


def measure(work: Workload, repeats: int) -> dict[str, Any]:
    """Median seconds per step of each available column, and the GPT's peak memory."""
    device = work.device
    backend = rg.Autodiff(rg.TorchBackend(device))
    eager, *_ = torch_step(work)
    columns: dict[str, Callable[[], Any]] = {"torch eager": eager}
    graph = torch_graph_step(work)
    if graph is not None:
        columns["torch + CUDA graph"] = graph
    columns["retrograd over torch"] = retrograd_step(work, backend)
    if hasattr(rg, "capture"):
        columns["retrograd captured"] = captured_step(work, backend)
    try:  # an optional column: a JAX problem must not cost the rest of the table
        jitted = jax_step(work)
        if jitted is not None:
            jitted()
            columns["JAX jit"] = jitted
    except Exception as error:
        print(f"  (JAX column skipped for {work.name}: {error})")
    # The same first loss everywhere: the columns compute one thing.
    first = {name: _value(fn()) for name, fn in columns.items()}
    reference = first["torch eager"]
    for name, value in first.items():
        if not math.isclose(value, reference, rel_tol=2e-3, abs_tol=1e-4):
            raise AssertionError(f"{work.name}: {name} loss {value} != torch eager {reference}")

    def timed(fn):
        def run():
            fn()
            sync(device)

        return run

    times = common.interleaved({n: timed(f) for n, f in columns.items()}, repeats, warmup=2)
    result = {name: common.median(t) / work.ops for name, t in times.items()}
    if isinstance(work, GPT) and device.startswith("cuda"):
        result["peak"] = peak_memory(work, backend)
    return result


def peak_memory(work: Workload, backend: Any) -> dict[str, float]:
    """MiB of CUDA memory at the peak of one step, over what the weights and batch hold."""
    peaks = {}
    for name, make in (
        ("torch eager", lambda: torch_step(work)[0]),
        ("retrograd over torch", lambda: retrograd_step(work, backend)),
    ):
        step = make()
        step()  # optimizer state and the allocator's pools settle
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated() / 2**20
        del step
        torch.cuda.empty_cache()
    return peaks


def workloads(device: str, sizes: str) -> list[Workload]:
    s = SIZES[sizes]
    out: list[Workload] = [Chain(device, *s["chain"]), MLP(device, *s["mlp"])]
    out.append(MLP(device, *s["mlp_wide"]))
    out.extend(CNN(device, batch, s["cnn_channels"]) for batch in s["cnn"])
    out.append(GPT(device, **s["gpt"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch and torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--sizes", choices=tuple(SIZES), default="full")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per column")
    parser.add_argument("--only", nargs="*", help="workload name prefixes (e.g. MLP GPT)")
    options = parser.parse_args(argv)
    if torch is None:
        print("bench_gpu: torch is not installed (pip install 'retrograd[torch]')")
        return 0
    if options.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 as retrograd computes it
        torch.backends.cudnn.allow_tf32 = False
        device_name = torch.cuda.get_device_name(torch.device(options.device))
    else:
        torch.set_num_threads(1)
        device_name = "CPU (1 thread), no GPU"
    repeats = options.repeats or (20 if options.sizes == "small" else 50)
    print(f"bench_gpu: {device_name}; {common.machine()}; sizes {options.sizes}")
    names = ["torch eager", "torch + CUDA graph", "retrograd over torch", "retrograd captured"]
    names.append("JAX jit")
    rows = []
    for work in workloads(options.device, options.sizes):
        if options.only and not any(work.name.startswith(p) for p in options.only):
            continue
        try:  # one workload's failure (a CUDA error, a loss mismatch) must not cost the table
            result = measure(work, repeats)
        except Exception as error:
            print(f"  {work.name}: FAILED: {type(error).__name__}: {error}", flush=True)
            traceback.print_exc()
            rows.append((work.name, [f"failed: {type(error).__name__}"] + ["—"] * (len(names) - 1)))
            continue
        scale = 1e6 if work.unit == "µs/op" else 1e3
        eager = result["torch eager"]
        cells = []
        for name in names:
            if name not in result:
                cells.append("—")
            elif name == "torch eager":
                cells.append(f"{eager * scale:.3g}")
            else:
                cells.append(f"{result[name] * scale:.3g} ({result[name] / eager:.2f}x)")
        rows.append((work.name, cells))
        print(f"  {work.name}: " + ", ".join(f"{n} {c}" for n, c in zip(names, cells)), flush=True)
        if "peak" in result:
            peak = result["peak"]
            base = peak["torch eager"]
            cells = [f"{base:,.0f}", "—", f"{peak['retrograd over torch']:,.0f}", "—", "—"]
            cells[2] += f" ({peak['retrograd over torch'] / base:.2f}x)"
            rows.append(("GPT peak memory, MiB", cells))
    print()
    print("| workload (one training step) | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, cells in rows:
        print(f"| {label} | " + " | ".join(cells) + " |")
    title = f"One training step on {device_name}, sizes {options.sizes}, median of {repeats}"
    table = {"header": ["workload (one training step)", *names], "rows": [[w, *c] for w, c in rows]}
    command = common.command_line(None if argv is None else [__file__, *argv])
    common.write_results("gpu", {title: table}, command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
