"""A GPT training step, retrograd beside PyTorch eager, float32, one CPU thread.

The model is nanoGPT's, written as PyTorch users write it, once for each library from the same
weights: token + position embeddings, blocks of LayerNorm -> causal self-attention through
``F.scaled_dot_product_attention(..., is_causal=True)`` -> residual, LayerNorm -> MLP (4x, exact
GELU) -> residual, a final LayerNorm and a head tied to the token embedding; cross-entropy,
backward, AdamW. The phases (forward, backward, optimizer) are timed separately, in rounds that
alternate the two libraries (retrograd, torch, retrograd, ...) so that load from other jobs on
the machine hits both alike; medians, min-max and the ratio retrograd / torch are reported.

Memory. *Kept for backward*: what forward leaves for backward; retrograd's is
:func:`retrograd.memory.measure_step_memory`'s ``after_forward_bytes`` (tracemalloc sees every
NumPy allocation), torch's the bytes of the distinct storages forward saves for backward
(``saved_tensors_hooks``, parameters excluded). *Peak activation memory* of forward +
backward, parameter gradients excluded: retrograd's from ``measure_step_memory``; for torch,
whose CPU allocator tracemalloc cannot see, from ``torch.profiler``'s allocation events, every
allocation and free replayed in order (:func:`profiled_memory`), the parameter gradients'
allocations left out.

``--inner torch`` runs retrograd over ``rg.TorchBackend("cpu")`` (the same engine on torch
tensors and torch's kernels); its memory is then counted as torch's is, with the profiler
(*kept*: the running sum at the end of forward).

Run: ``PYTHONPATH=src python benchmarks/bench_gpt.py [--size small|medium|both] [--rounds 10]
[--inner numpy|torch]``
"""

from __future__ import annotations

import os
import sys

# One BLAS/OpenMP thread, set before NumPy or torch load their pools (common.py does it too,
# and caps them again with threadpoolctl).
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402
import retrograd as rg  # noqa: E402
import retrograd.nn.functional as F  # noqa: E402, N812  (PyTorch's idiom)
from retrograd import nn  # noqa: E402

SIZES = {
    # name: (n_layer, n_head, n_embd, block_size, batch)
    "small": (4, 4, 128, 128, 16),
    "medium": (6, 6, 384, 256, 8),
}
VOCAB = 65  # a character-level corpus (Shakespeare's)
LR, WEIGHT_DECAY, BETAS = 3e-4, 0.1, (0.9, 0.95)


# -- the model in retrograd, as a PyTorch user writes it -------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.shape  # noqa: N806  (nanoGPT's names)
        q, k, v = self.c_attn(x).split(self.n_embd, 2)
        k = k.reshape((B, T, self.n_head, C // self.n_head)).swap_dims(1, 2)
        q = q.reshape((B, T, self.n_head, C // self.n_head)).swap_dims(1, 2)
        v = v.reshape((B, T, self.n_head, C // self.n_head)).swap_dims(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.swap_dims(1, 2).reshape((B, T, C))
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd: int):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, n_layer: int, n_head: int, n_embd: int, block_size: int):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        # today's module API registers a list of blocks as a Sequential (names h.0, h.1, ...,
        # as torch's ModuleList gives)
        self.h = nn.Sequential(*[Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, idx, targets):
        b, t = idx.shape
        pos = rg.arange(0, t)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)  # the head tied to the token embedding
        return F.cross_entropy(logits.reshape((b * t, VOCAB)), targets.reshape((b * t,)))


# -- the same model in torch -----------------------------------------------------------------------
def torch_gpt(torch, n_layer, n_head, n_embd, block_size):
    tnn, tf = torch.nn, torch.nn.functional

    class TorchAttention(tnn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = tnn.Linear(n_embd, 3 * n_embd)
            self.c_proj = tnn.Linear(n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.size()  # noqa: N806
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            y = tf.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class TorchMLP(tnn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = tnn.Linear(n_embd, 4 * n_embd)
            self.gelu = tnn.GELU()
            self.c_proj = tnn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class TorchBlock(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = tnn.LayerNorm(n_embd)
            self.attn = TorchAttention()
            self.ln_2 = tnn.LayerNorm(n_embd)
            self.mlp = TorchMLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class TorchGPT(tnn.Module):
        def __init__(self):
            super().__init__()
            self.wte = tnn.Embedding(VOCAB, n_embd)
            self.wpe = tnn.Embedding(block_size, n_embd)
            self.h = tnn.ModuleList([TorchBlock() for _ in range(n_layer)])
            self.ln_f = tnn.LayerNorm(n_embd)
            self.lm_head = tnn.Linear(n_embd, VOCAB, bias=False)
            self.wte.weight = self.lm_head.weight  # weight tying

        def forward(self, idx, targets):
            _, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return tf.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return TorchGPT()


def init_weights(torch, model):
    """nanoGPT's initialisation: N(0, 0.02) weights, zero biases (and std 0.02/sqrt(2L) for
    the residual projections)."""
    n_layer = len(model.h)
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("bias"):
                p.zero_()
            elif "ln" in name:
                p.fill_(1.0)
            else:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                p.normal_(0.0, std)


# -- one step, by phase ----------------------------------------------------------------------------
class RetrogradRunner:
    def __init__(self, config, state, idx, targets, checkpointing, inner):
        n_layer, n_head, n_embd, block_size, _ = config
        self.backend = rg.Autodiff(inner, checkpointing=checkpointing)
        with rg.use_backend(self.backend):
            self.model = GPT(n_layer, n_head, n_embd, block_size)
            self.model.load_state_dict(state)
            self.idx, self.targets = rg.tensor(idx), rg.tensor(targets)
        # nanoGPT decays the 2-d parameters only (parameter groups); both libraries here decay
        # every parameter, the same work on each side, as this script's recorded runs did
        self.optimizer = rg.optim.AdamW(self.model, lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
        self.loss = self.grads = None

    def forward(self):
        with rg.use_backend(self.backend):
            self.loss = self.model(self.idx, self.targets)

    def backward(self):
        self.grads = self.loss.backward()

    def optimize(self):
        self.optimizer.step(self.grads)
        self.grads = None

    def loss_value(self):
        return float(self.loss.item())

    def memory(self):
        from retrograd.memory import measure_step_memory

        if isinstance(self.backend.inner, rg.TorchBackend):
            # torch's CPU allocator is invisible to tracemalloc: the profiler's count, as for
            # torch itself (parameter gradients excluded)
            def backward(loss):
                grads = loss.backward()
                found = (p.grad(grads) for p in self.model.parameters())
                return [g.primitive for g in found if g is not None]

            with rg.use_backend(self.backend):
                return profiled_memory(lambda: self.model(self.idx, self.targets), backward)
        with rg.use_backend(self.backend):
            memory = measure_step_memory(
                lambda: self.model(self.idx, self.targets), self.model.parameters()
            )
        return memory.after_forward_bytes, memory.peak_activation_bytes


class TorchRunner:
    def __init__(self, torch, model, idx, targets):
        self.torch, self.model = torch, model
        self.idx, self.targets = torch.from_numpy(idx), torch.from_numpy(targets)
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY, foreach=False
        )
        self.loss = None

    def forward(self):
        self.loss = self.model(self.idx, self.targets)

    def backward(self):
        self.loss.backward()

    def optimize(self):
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def loss_value(self):
        return float(self.loss.item())

    def memory(self):
        """``(saved for backward, peak)``: the bytes of the distinct storages forward saves
        for backward (parameters excluded), and the profiler's peak (see the module
        docstring)."""
        torch = self.torch
        parameters = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        saved = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in parameters:
                saved[storage.data_ptr()] = storage.nbytes()
            return t

        def forward():
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                return self.model(self.idx, self.targets)

        self.optimizer.zero_grad(set_to_none=True)

        def backward(loss):
            loss.backward()
            return [p.grad for p in self.model.parameters() if p.grad is not None]

        peak = profiled_memory(forward, backward)[1]
        self.optimizer.zero_grad(set_to_none=True)
        return sum(saved.values()), peak


def profiled_memory(forward, backward) -> tuple[int, int]:
    """``(kept, peak)`` of ``backward(forward())`` from ``torch.profiler``'s allocation events
    (tracemalloc cannot see torch's CPU allocator): every allocation and free replayed in
    order, so temporaries count as they happen. ``kept`` is the level at the end of forward,
    ``peak`` the highest level, less the parameter gradients from their allocation on
    (``backward`` returns the gradient tensors it made)."""
    from torch.profiler import ProfilerActivity, profile

    events, result = [], None
    for phase in (forward, backward):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            result = phase() if result is None else phase(result)
        phase_events = []
        stack = list(prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            node = stack.pop()
            stack.extend(node.children)
            fields = node.extra_fields
            if type(fields).__name__ == "_ExtraFields_Allocation":
                phase_events.append((node.start_time_ns, fields.alloc_size, fields.ptr))
        events.append(sorted(phase_events))
    # a gradient's allocation is the last one at its address
    last = {
        ptr: (phase, i) for phase, found in enumerate(events) for i, (*_, ptr) in enumerate(found)
    }
    excluded = {last[g.data_ptr()] for g in result if g.data_ptr() in last}
    level = peak = kept = 0
    for phase, found in enumerate(events):
        for i, (_, size, _) in enumerate(found):
            if (phase, i) not in excluded:
                level += size
                peak = max(peak, level)
        if phase == 0:
            kept = level
    return kept, peak


def run(size, rounds, torch, checkpointing, inner):
    config = SIZES[size]
    n_layer, n_head, n_embd, block_size, batch = config
    model = torch_gpt(torch, n_layer, n_head, n_embd, block_size)
    init_weights(torch, model)
    state = {
        name: value.detach().numpy().copy()
        for name, value in model.state_dict().items()
        if name != "lm_head.weight"
    }
    rng = np.random.default_rng(0)
    data = rng.integers(0, VOCAB, (batch, block_size + 1))
    idx, targets = data[:, :-1].copy(), data[:, 1:].copy()
    runners = {
        "retrograd": RetrogradRunner(config, state, idx, targets, checkpointing, inner),
        "torch": TorchRunner(torch, model, idx, targets),
    }
    phases = ("forward", "backward", "optimizer")
    times = {name: {phase: [] for phase in (*phases, "step")} for name in runners}
    losses = {}
    for round_index in range(rounds + 2):  # two warm-up rounds
        for name, runner in runners.items():
            spent = []
            for phase, function in zip(phases, (runner.forward, runner.backward, runner.optimize)):
                start = time.perf_counter()
                function()
                spent.append(time.perf_counter() - start)
                if phase == "forward" and round_index == 0:
                    losses[name] = runner.loss_value()
            if round_index >= 2:
                for phase, seconds in zip(phases, spent):
                    times[name][phase].append(seconds)
                times[name]["step"].append(sum(spent))
    memory = {name: runner.memory() for name, runner in runners.items()}
    return config, times, losses, memory


def describe(size, config, times, losses, memory, rounds, strategy, inner) -> tuple[str, dict]:
    """Print the size's table; return its title and the table, for the results file."""
    n_layer, n_head, n_embd, block_size, batch = config
    title = (
        f"{size}: {n_layer} layers, {n_head} heads, n_embd {n_embd}, block {block_size}, "
        f"batch {batch}, vocab {VOCAB}; retrograd over {inner!r}, {strategy}; "
        f"{rounds} interleaved rounds"
    )
    first = f"first loss: retrograd {losses['retrograd']:.6f}, torch {losses['torch']:.6f}"
    print(f"\n{title}")
    print(first)
    rows = []
    for phase in ("forward", "backward", "optimizer", "step"):
        ours, theirs = times["retrograd"][phase], times["torch"][phase]
        rows.append(
            [
                phase,
                f"{common.median(ours) * 1e3:.1f} ({min(ours) * 1e3:.1f}-{max(ours) * 1e3:.1f})",
                f"{common.median(theirs) * 1e3:.1f} "
                f"({min(theirs) * 1e3:.1f}-{max(theirs) * 1e3:.1f})",
                f"{common.median(ours) / common.median(theirs):.2f}x",
                f"{common.median([a / b for a, b in zip(ours, theirs)]):.2f}x",
            ]
        )
    for label, index in (("kept for backward", 0), ("peak activation memory", 1)):
        ours, theirs = memory["retrograd"][index], memory["torch"][index]
        rows.append(
            [
                label,
                f"{ours / 2**20:.2f} MiB",
                f"{theirs / 2**20:.2f} MiB",
                f"{ours / max(theirs, 1):.3f}x",
                "",
            ]
        )
    header = ["phase", "retrograd ms (min-max)", "torch ms (min-max)", "ratio", "per round"]
    print(common.table(rows, header))
    return title, {"header": header, "rows": rows, "note": first.capitalize() + "."}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=[*SIZES, "both"], default="both")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--balanced", action="store_true", help="BalancedCheckpointing")
    parser.add_argument(
        "--inner",
        choices=("numpy", "torch"),
        default="numpy",
        help="retrograd's inner backend: NumPy, or torch tensors on the CPU (TorchBackend)",
    )
    args = parser.parse_args()
    torch = common.torch_single_thread()
    if torch is None:
        raise SystemExit("bench_gpt compares against torch, which is not installed")
    print(common.machine())
    strategy = "BalancedCheckpointing" if args.balanced else "NoCheckpointing"
    checkpointing = rg.BalancedCheckpointing() if args.balanced else rg.NoCheckpointing()
    inner = rg.TorchBackend("cpu") if args.inner == "torch" else rg.NumpyBackend()
    tables = {}
    for size in SIZES if args.size == "both" else (args.size,):
        config, times, losses, memory = run(size, args.rounds, torch, checkpointing, inner)
        title, table = describe(size, config, times, losses, memory, args.rounds, strategy, inner)
        tables[title] = table
    name = "gpt" + ("-torch" if args.inner == "torch" else "") + ("-balanced" * args.balanced)
    common.write_results(name, tables, command=common.command_line())


if __name__ == "__main__":
    main()
