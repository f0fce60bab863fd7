"""Functions ``tests/test_multiprocessing.py`` spawns (importable by the new processes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np


def ddp_worker(rank: int, world_size: int, port: int, out: str) -> None:
    """The DDP tutorial's ``main(rank, world_size)``: a process group from ``rank`` and
    ``world_size``, DDP over a linear model on this rank's half of each batch."""
    import retrograd as torch
    import retrograd.distributed as dist
    from retrograd.nn.parallel import DistributedDataParallel
    from retrograd.utils.data import DataLoader, DistributedSampler, TensorDataset

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    rng = np.random.default_rng(0)
    data = TensorDataset(
        torch.tensor(rng.standard_normal((16, 3))), torch.tensor(rng.standard_normal((16, 1)))
    )
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(3, 1).double())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False)):
        optimizer.step(torch.nn.functional.mse_loss(model(x), y).backward())
    params = [p.detach().numpy().tolist() for p in model.parameters()]
    dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps({"rank": rank, "params": params}))


def raises(rank: int) -> None:
    if rank == 1:
        raise ValueError("rank 1 fails on purpose")


def exits(rank: int) -> None:
    if rank == 0:
        os._exit(3)
