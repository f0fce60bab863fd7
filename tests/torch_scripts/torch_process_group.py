"""Run under ``torchrun --nproc_per_node 2 torch_process_group.py OUT`` (or ``mpiexec -n 2
torch_process_group.py mpi OUT``): a DDP training script
written as PyTorch's DDP tutorial writes it (``init_process_group``, ``DistributedDataParallel``
with no process group, ``DistributedSampler`` with no rank, torch's in-place collectives,
``destroy_process_group``), imports aside. Each rank also trains the same model in one process
on the whole data set, and writes ``OUT/rank{r}.json``: how far the two ended apart and what
each collective returned."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from torch_common import use_suite_backend

import retrograd as torch
import retrograd.distributed as dist
import retrograd.nn.functional as F  # noqa: N812  (torch's idiom)
from retrograd.nn.parallel import DistributedDataParallel as DDP  # noqa: N817
from retrograd.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS, BATCH = 3, 4


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def data():
    rng = np.random.default_rng(3)
    xs = torch.tensor(rng.standard_normal((32, 5)), dtype=torch.float64)
    return TensorDataset(xs, torch.tensor(rng.standard_normal((32, 1)), dtype=torch.float64))


def train(model, loader, sampler=None):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(EPOCHS):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for source, targets in loader:
            loss = F.mse_loss(model(source), targets)
            optimizer.step(loss.backward())
    return {name: p.detach().numpy() for name, p in model.named_parameters()}


def main() -> None:
    use_suite_backend()
    out = Path(sys.argv[-1])
    dist.init_process_group(backend=sys.argv[1] if len(sys.argv) > 2 else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DDP(make_model().double())
    sampler = DistributedSampler(data(), shuffle=False)
    ours = train(model, DataLoader(data(), batch_size=BATCH, sampler=sampler), sampler)

    value = torch.tensor([float(rank + 1)], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([rank, 10 * rank]))
    shared = torch.tensor([float(rank)] * 3)
    dist.broadcast(shared, src=1)
    dist.barrier()
    dist.destroy_process_group()

    # one process: rank r's k-th batch is samples r, r + world, ... of the k-th run of
    # world * BATCH samples, and DDP averages the ranks' mean gradients: that run's mean
    whole = train(make_model().double(), DataLoader(data(), batch_size=world * BATCH))
    out.mkdir(parents=True, exist_ok=True)
    report = json.dumps(
        {
            "rank": rank,
            "world_size": world,
            "max_difference": max(
                float(np.abs(ours["module." + k] - whole[k]).max()) for k in whole
            ),
            "all_reduce": value.tolist(),
            "all_gather": [t.tolist() for t in gathered],
            "broadcast": shared.tolist(),
            "initialized_after_destroy": dist.is_initialized(),
        }
    )
    (out / f"rank{rank}.json").write_text(report)


if __name__ == "__main__":
    main()
