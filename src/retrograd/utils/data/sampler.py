"""Samplers: which indices a ``DataLoader`` reads, in which order, in which batches.

Random orders come from the generator ``rg.manual_seed`` (``rg.seed``) seeds, so a seeded
run is reproducible (the orders differ from torch's, whose generator is another)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...errors import (
    DivisionByZeroError,
    DTypeError,
    InvalidArgumentError,
    SamplingError,
    ShapeError,
    check_count,
    check_flag,
    check_iterable,
    check_sized,
)
from ...tensor import multinomial, randint, randperm, tensor
from ...tensor.internal import checked_generator

__all__ = [
    "BatchSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
]


class Sampler:
    """Base class: ``__iter__`` yields indices (or lists of them, for a batch sampler)."""

    def __init__(self, data_source: Any = None) -> None:
        pass

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source: Any) -> None:
        check_sized("SequentialSampler", data_source, "data_source")
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation (or ``num_samples`` draws with ``replacement``)."""

    def __init__(self, data_source: Any, replacement: bool = False,
                 num_samples: int | None = None, generator: Any = None) -> None:  # fmt: skip
        self.generator = checked_generator("RandomSampler", generator)
        check_sized("RandomSampler", data_source, "data_source")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        check_flag("RandomSampler", replacement, "replacement", DTypeError)
        check_count("RandomSampler", self.num_samples, "num_samples")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if not n:  # (num_samples given: torch's draws from nothing fail as these)
            where = (
                f"RandomSampler: no index to draw {self.num_samples} samples from (an empty "
                f"data_source)"
            )
            if self.replacement:  # torch's randint(0, 0)'s RuntimeError
                raise SamplingError(where)
            raise DivisionByZeroError(where)  # torch's num_samples // 0
        if self.replacement:
            yield from randint(0, n, (self.num_samples,), generator=self.generator).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from randperm(n, generator=self.generator).tolist()
        yield from randperm(n, generator=self.generator).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices, in a random order."""

    def __init__(self, indices: Sequence[int], generator: Any = None) -> None:
        self.generator = checked_generator("SubsetRandomSampler", generator)
        check_sized("SubsetRandomSampler", indices, "indices")
        self.indices = indices

    def __iter__(self) -> Iterator[int]:
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: Any = None) -> None:  # fmt: skip
        self.generator = checked_generator("WeightedRandomSampler", generator)
        check_iterable("WeightedRandomSampler", weights, "weights")
        self.weights = tensor(list(weights), dtype="float64")
        if self.weights.ndim != 1:  # multinomial would draw one row of indices per row
            raise ShapeError(
                f"WeightedRandomSampler: weights should be a 1d sequence, got shape "
                f"{list(self.weights.shape)}"
            )
        self.num_samples = check_count("WeightedRandomSampler", num_samples, "num_samples")
        check_flag("WeightedRandomSampler", replacement, "replacement")
        self.replacement = replacement

    def __iter__(self) -> Iterator[int]:
        drawn = multinomial(
            self.weights, self.num_samples, self.replacement, generator=self.generator
        )
        yield from drawn.tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last one shorter unless
    ``drop_last``)."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise InvalidArgumentError(
                f"BatchSampler: batch_size should be a positive integer value, but got "
                f"batch_size={batch_size!r}"
            )
        check_flag("BatchSampler", drop_last, "drop_last")
        check_iterable("BatchSampler", sampler, "sampler")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
