"""``DistributedSampler``: each replica's share of the indices, as torch's.

The indices (shuffled by the permutation ``torch.randperm`` draws from a generator seeded
with ``seed + epoch``: the same on every replica, and torch's, so shards match a torch job's)
are padded by repeating from the start to a multiple of ``num_replicas`` (or cut, with
``drop_last``); replica ``rank`` takes every ``num_replicas``-th from ``rank``. Give
``num_replicas`` and ``rank`` (``ctx.world_size``, ``ctx.rank`` of a
``rg.distributed.DistributedContext``), or call ``rg.distributed.init_process_group`` first."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import DTypeError, InvalidArgumentError, check_count, check_sized
from .sampler import Sampler

__all__ = ["DistributedSampler", "torch_randperm"]

#: torch's CPU ``randperm`` draws 32 bits per swap below this ``n``, 64 above
_SMALL_PERMUTATION = (1 << 32) // 20


def torch_randperm(n: int, seed: int) -> list[int]:
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()``: torch's
    CPU generator is the 32-bit Mersenne Twister seeded with ``seed``'s low 32 bits (NumPy's
    ``RandomState`` is the same one), and ``randperm`` swaps position ``i`` with ``i + z %
    (n - i)`` for each draw ``z`` (a Fisher-Yates shuffle).

    >>> torch_randperm(6, 0)
    [2, 5, 3, 0, 1, 4]
    """
    if n <= 1:
        return list(range(n))
    state = np.random.RandomState(seed & 0xFFFFFFFF)
    draws = state.randint(0, 1 << 32, size=(n - 1) * (1 if n < _SMALL_PERMUTATION else 2),
                          dtype=np.uint64).tolist()  # fmt: skip
    if n >= _SMALL_PERMUTATION:  # torch's random64: the first draw the high half
        draws = [(high << 32) | low for high, low in zip(draws[::2], draws[1::2])]
    order = list(range(n))
    for i, z in enumerate(draws):
        j = i + z % (n - i)
        order[i], order[j] = order[j], order[i]
    return order


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
            indices = torch_randperm(n, self.seed + self.epoch)
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
