"""What a training loop does on an accelerator besides arithmetic: host round trips per step
(``torch.cuda.set_sync_debug_mode``), device memory over the steps (flat, or growing), and the
gradients of a few programs on the device against float64 on the CPU.

    python benchmarks/gpu_checks.py --device cuda
    python benchmarks/gpu_checks.py --device cpu     # the same loops, no sync or memory rows

Each model trains with ``optim.Adam`` (and the CNN with batch norm) through the public API
over ``rg.Autodiff(rg.TorchBackend(device))``. A step is ``loss.backward()`` and
``optimizer.step(grads)``; reading the loss (``.item()``) is left out of the step, as a
training loop that logs every N steps does.
"""

from __future__ import annotations

import argparse
import traceback
import warnings

import numpy as np
import torch

import retrograd as rg
from retrograd import nn, optim
from retrograd.nn import functional as F  # noqa: N812


def mlp(device_batch: int) -> tuple[nn.Module, tuple[rg.Tensor, rg.Tensor]]:
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))
    x = rg.randn(device_batch, 784)
    y = rg.randint(0, 10, (device_batch,))
    return model, (x, y)


def cnn(device_batch: int) -> tuple[nn.Module, tuple[rg.Tensor, rg.Tensor]]:
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    x = rg.randn(device_batch, 3, 32, 32)
    y = rg.randint(0, 10, (device_batch,))
    return model, (x, y)


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 96, d: int = 128, heads: int = 4, seq: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(rg.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(d, vocab)
        self.mask = nn.Transformer.generate_square_subsequent_mask(seq)

    def forward(self, idx):
        z = self.embed(idx) + self.pos
        return self.head(self.blocks(z, mask=self.mask, is_causal=True))


def gpt(device_batch: int) -> tuple[nn.Module, tuple[rg.Tensor, rg.Tensor]]:
    model = TinyGPT()
    idx = rg.randint(0, 96, (device_batch, 64))
    return model, (idx, rg.randint(0, 96, (device_batch, 64)))


def loss_of(model: nn.Module, batch: tuple[rg.Tensor, rg.Tensor]) -> rg.Tensor:
    x, y = batch
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def sync_and_memory(name: str, build, device: str, steps: int = 12) -> None:
    model, batch = build(64)
    model = model.to(device)
    batch = tuple(t.to(device) for t in batch)
    optimizer = optim.Adam(model, lr=1e-3)
    cuda = device.startswith("cuda")

    def step():
        optimizer.step(loss_of(model, batch).backward())

    for _ in range(3):
        step()
    first_loss = float(loss_of(model, batch).item())
    if not cuda:
        print(f"{name}: {steps} steps ran; loss {first_loss:.4f} (no sync or memory rows off CUDA)")
        return
    torch.cuda.synchronize()
    # Where the first host round trip of a step is (the error names the call).
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        where = "none"
    except RuntimeError:
        frames = [f for f in traceback.extract_tb(__import__("sys").exc_info()[2])]
        where = " <- ".join(f"{f.name}:{f.lineno}" for f in reversed(frames[-4:]))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    # How many per step.
    torch.cuda.set_sync_debug_mode("warn")
    host_arrays = []  # host data copied in during a step (a mask drawn on the CPU, say)
    from_numpy = torch.from_numpy
    torch.from_numpy = lambda array: host_arrays.append(array.nbytes) or from_numpy(array)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(3):
                step()
    finally:
        torch.from_numpy = from_numpy
        torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message) for w in seen) / 3
    sites = sorted({f"{w.filename.rsplit('/', 3)[-1]}:{w.lineno}" for w in seen})[:8]
    torch.cuda.synchronize()
    memory = []
    for _ in range(steps):
        step()
        torch.cuda.synchronize()
        memory.append(torch.cuda.memory_allocated() / 2**20)
    grow = memory[-1] - memory[2]
    print(
        f"{name}: host syncs per step {syncs:.1f}, first at {where}; sites {sites}; "
        f"host arrays copied in per step {len(host_arrays) / 3:.1f} "
        f"({sum(host_arrays) / 3 / 2**10:.1f} KiB); "
        f"memory after steps 3..{steps}: {memory[2]:.1f} -> {memory[-1]:.1f} MiB "
        f"({'flat' if abs(grow) < 0.5 else f'GROWS {grow:+.1f} MiB'}); loss {first_loss:.4f}"
    )


def gradients_against_cpu(device: str) -> None:
    """A few programs' gradients on the device (float32) against float64 on the CPU."""
    rng = np.random.default_rng(0)
    programs = {
        "matmul-softmax": lambda a, b: F.softmax(a @ b.T, -1).log().mean(),
        "conv-bn-pool": lambda a, b: (
            F.max_pool2d(
                F.batch_norm(
                    F.conv2d(a.reshape(2, 3, 8, 8), b.reshape(8, 3, 4, 4)[:4, :, :3, :3]),
                    None,
                    None,
                    training=True,
                ),
                2,
            )
            .tanh()
            .sum()
        ),
        "layernorm-gelu": lambda a, b: F.gelu(F.layer_norm(a, (a.shape[-1],)) * b[0]).pow(2).sum(),
        "gather-scatter": lambda a, b: (
            a.gather(1, (b.abs() * 7).long() % a.shape[1]).cumsum(1).logsumexp(1).sum()
        ),
        "sort-topk-norm": lambda a, b: (
            a.sort(1)[0][:, :3].sum() + a.topk(2, 1)[0].sum() + (a - b).norm()
        ),
    }
    a0 = rng.standard_normal((6, 64))
    b0 = rng.standard_normal((6, 64))
    worst = []
    for name, fn in programs.items():
        results = {}
        for where, dtype in (("cpu", np.float64), (device, np.float32)):
            backend = rg.Autodiff(rg.TorchBackend(where))
            with rg.use_backend(backend):
                a = rg.tensor(a0.astype(dtype)).require_grad()
                b = rg.tensor(b0.astype(dtype)).require_grad()
                grads = fn(a, b).backward()
                results[where] = [
                    np.asarray(g.numpy(), np.float64) if g is not None else None
                    for g in (a.grad(grads), b.grad(grads))
                ]
        errors = []
        for ref, got in zip(results["cpu"], results[device]):
            if ref is None or got is None:
                errors.append(0.0 if ref is got else float("inf"))
                continue
            errors.append(float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)))
        worst.append((name, max(errors)))
    print(
        "gradients on "
        + device
        + " vs float64 CPU (relative error): "
        + ", ".join(f"{n} {e:.1e}{' FAIL' if not e < 1e-4 else ''}" for n, e in worst)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    options = parser.parse_args()
    rg.manual_seed(0)
    with rg.use_backend(rg.Autodiff(rg.TorchBackend(options.device))):
        for name, build in (("MLP", mlp), ("CNN+BN", cnn), ("GPT-2 layer", gpt)):
            try:
                sync_and_memory(name, build, options.device)
            except Exception:  # one model's failure must not cost the other rows
                print(f"{name}: FAILED\n{traceback.format_exc()}")
    try:
        gradients_against_cpu(options.device)
    except Exception:
        print(f"gradients: FAILED\n{traceback.format_exc()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
