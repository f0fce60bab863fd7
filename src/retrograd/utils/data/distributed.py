"""``DistributedSampler``: each replica's share of the indices, as torch's.

The indices (shuffled by a permutation seeded with ``seed + epoch``, the same on every
replica) are padded by repeating from the start to a multiple of ``num_replicas`` (or cut,
with ``drop_last``); replica ``rank`` takes every ``num_replicas``-th from ``rank``. Give
``num_replicas`` and ``rank`` (``ctx.world_size``, ``ctx.rank`` of a
``rg.distributed.DistributedContext``): there is no implicit process group here."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import DTypeError, InvalidArgumentError, check_count, check_sized
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """torch's ``DistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=0,
    drop_last=False)``; call ``set_epoch(epoch)`` each epoch for a new order."""

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:  # fmt: skip
        if num_replicas is None or rank is None:
            from ... import distributed as dist

            if not dist.is_initialized():
                raise InvalidArgumentError(
                    "DistributedSampler: give num_replicas and rank (ctx.world_size and "
                    "ctx.rank of your rg.distributed.DistributedContext), or call "
                    "rg.distributed.init_process_group first"
                )
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        num_replicas = check_count("DistributedSampler", num_replicas, "num_replicas")
        if isinstance(rank, bool) or not hasattr(type(rank), "__index__"):
            raise DTypeError(f"DistributedSampler: rank must be an int, got {rank!r}")
        if rank >= num_replicas or rank < 0:
            raise InvalidArgumentError(
                f"DistributedSampler: invalid rank {rank}, rank should be in the interval "
                f"[0, {num_replicas - 1}]"
            )
        check_sized("DistributedSampler", dataset, "dataset")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[: self.total_size]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        if isinstance(epoch, bool) or not hasattr(type(epoch), "__index__"):
            raise DTypeError(f"DistributedSampler.set_epoch: epoch must be an int, got {epoch!r}")
        self.epoch = epoch
