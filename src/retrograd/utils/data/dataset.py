"""Datasets: the map-style :class:`Dataset` (``__getitem__``, ``__len__``), the
:class:`IterableDataset`, and torch's ready-made ones (:class:`TensorDataset`,
:class:`ConcatDataset`, :class:`Subset`, :func:`random_split`)."""

from __future__ import annotations

import bisect
import math
import numbers
import warnings
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any

from ...errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    RetrogradError,
    ShapeError,
    check_iterable,
    check_sized,
)
from ...tensor import randperm
from ...tensor.internal import checked_generator

__all__ = [
    "ChainDataset",
    "ConcatDataset",
    "Dataset",
    "IterableDataset",
    "StackDataset",
    "Subset",
    "TensorDataset",
    "random_split",
]


class Dataset:
    """A map-style dataset: subclasses give ``__getitem__(index)`` and ``__len__``."""

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read as a stream: subclasses give ``__iter__``."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __add__(self, other: Dataset) -> ChainDataset:  # type: ignore[override] (torch's)
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other, chained as they are iterated (each
    ``IterableDataset``; ``len`` sums theirs)."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        self.datasets = datasets

    def _check(self, d: Any) -> None:
        if not isinstance(d, IterableDataset):
            raise InvalidArgumentError(
                f"ChainDataset only supports IterableDataset, got {type(d).__name__}"
            )

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            self._check(d)
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            self._check(d)
            if not hasattr(d, "__len__"):  # a TypeError, as len()'s in torch's
                raise DTypeError(
                    f"ChainDataset: len() needs the length of each dataset, and "
                    f"{type(d).__name__} has no __len__"
                )
            total += len(d)
        return total


class StackDataset(Dataset):
    """Datasets of one length read side by side: sample ``i`` is the tuple of their ``i``-th
    samples (``StackDataset(a, b)``) or the dict of them (``StackDataset(x=a, y=b)``)."""

    def __init__(self, *args: Dataset, **kwargs: Dataset) -> None:
        if args and kwargs:
            raise InvalidArgumentError(
                "StackDataset: supported either tuple- (via args) or dict- (via kwargs) like "
                "input/output, but both types are given"
            )
        if not args and not kwargs:
            raise InvalidArgumentError("StackDataset: at least one dataset should be passed")
        named = dict(enumerate(args)) if args else kwargs
        lengths = {
            key: check_sized("StackDataset", d, f"dataset {key!r}") for key, d in named.items()
        }
        if len(set(lengths.values())) != 1:
            raise ShapeError(f"StackDataset: size mismatch between datasets {lengths}")
        self._length = next(iter(lengths.values()))
        self.datasets: tuple[Dataset, ...] | dict[str, Dataset] = args if args else kwargs

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, numbers.Integral) and not -self._length <= index < self._length:
            raise IndexOutOfRangeError(
                f"StackDataset: index {index} is out of range for {self._length} samples"
            )
        if isinstance(self.datasets, dict):
            return {key: d[index] for key, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [self[i] for i in indices]

    def __len__(self) -> int:
        return self._length


class TensorDataset(Dataset):
    """Samples are the ``index``-th rows of each tensor (which share their first size)."""

    def __init__(self, *tensors: Any) -> None:
        for t in tensors:
            shape = getattr(t, "shape", None)
            if not isinstance(shape, tuple):
                raise DTypeError(
                    f"TensorDataset: expected tensors or arrays, got {type(t).__name__}"
                )
            if not shape:
                raise ShapeError(
                    "TensorDataset: a 0-d tensor has no samples to index (each tensor's "
                    "first dimension numbers the samples)"
                )
        if tensors and any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            sizes = [t.shape[0] for t in tensors]
            raise ShapeError(f"TensorDataset: size mismatch between tensors ({sizes})")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        if not self.tensors:  # torch's bare "tuple index out of range": an IndexError too
            raise IndexOutOfRangeError(
                "TensorDataset: holds no tensors, so it has no length (no first tensor to read "
                "it from)"
            )
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after the other."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        check_iterable("ConcatDataset", datasets, "datasets")
        self.datasets = list(datasets)
        if not self.datasets:
            raise InvalidArgumentError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes = []
        total = 0
        for i, d in enumerate(self.datasets):
            if isinstance(d, IterableDataset):
                raise InvalidArgumentError("ConcatDataset does not support IterableDataset")
            total += check_sized("ConcatDataset", d, f"datasets[{i}]")
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    @staticmethod
    def cumsum(sequence: Sequence[Any]) -> list[int]:
        """The running totals of the datasets' lengths (torch's: subclasses that change
        ``datasets`` recompute ``cumulative_sizes`` with it)."""
        if not isinstance(sequence, Iterable):
            raise DTypeError(
                f"ConcatDataset.cumsum: expected a sequence of datasets, got "
                f"{type(sequence).__name__}"
            )
        totals, total = [], 0
        for dataset in sequence:
            if not isinstance(dataset, Sized):
                raise DTypeError(
                    f"ConcatDataset.cumsum: a dataset of the sequence has no len(): "
                    f"{type(dataset).__name__}"
                )
            total += len(dataset)
            totals.append(total)
        return totals

    @property
    def cummulative_sizes(self) -> list[int]:
        """torch's misspelt, deprecated name of :attr:`cumulative_sizes`."""
        warnings.warn(
            "`cummulative_sizes` attribute is renamed to `cumulative_sizes`",
            FutureWarning,
            stacklevel=2,
        )
        return self.cumulative_sizes

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, bool) or not hasattr(type(index), "__index__"):
            raise DTypeError(f"ConcatDataset: an index must be an int, got {index!r}")
        index = index.__index__()
        if index < -len(self):  # torch's ValueError (past the end is its IndexError)
            raise InvalidArgumentError(
                f"ConcatDataset: absolute value of index should not exceed dataset length: "
                f"index {index} for {len(self)} samples"
            )
        if index >= len(self):
            raise IndexOutOfRangeError(
                f"ConcatDataset: index {index} is out of range for {len(self)} samples"
            )
        if index < 0:
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


def sample_at(dataset: Any, index: Any, where: str) -> Any:
    """``dataset[index]``; an int index past a sized dataset's end is named (``where``: who
    chose it) where a list dataset's own "list index out of range" names neither; so is an
    index a list or tuple dataset cannot take (a float)."""
    try:
        return dataset[index]
    except TypeError as e:
        if isinstance(dataset, list | tuple) and not isinstance(e, RetrogradError):
            raise DTypeError(
                f"{where} index {index!r} ({type(index).__name__}), which a "
                f"{type(dataset).__name__} dataset cannot take: expected an int"
            ) from e
        raise
    except IndexError as e:
        if isinstance(e, IndexOutOfRangeError) or not hasattr(dataset, "__len__"):
            raise
        n = len(dataset)
        if isinstance(index, numbers.Integral) and not -n <= index < n:
            raise IndexOutOfRangeError(
                f"{where} index {index}, out of range for the dataset of {n} samples"
            ) from e
        raise


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return self.dataset[[self._index(i) for i in index]]
        return sample_at(self.dataset, self._index(index), "Subset: its indices hold")

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        """A batch's samples, as torch's: through the dataset's own ``__getitems__`` (its
        batched reading) where it has one."""
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            return getitems([self._index(i) for i in indices])
        return [self[i] for i in indices]

    def _index(self, index: Any) -> Any:
        """The dataset's index at ``index`` of this subset; past the end, named."""
        n = len(self.indices)
        if isinstance(index, numbers.Integral) and not -n <= index < n:
            raise IndexOutOfRangeError(f"Subset: index {index} is out of range for {n} samples")
        return self.indices[index]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Dataset, lengths: Sequence[Any], generator: Any = None) -> list[Subset]:
    """Split ``dataset`` into random non-overlapping subsets of ``lengths`` (counts, or
    fractions summing to 1: the remainder spread one by one from the first, as torch does),
    the permutation drawn from ``generator`` (an ``rg.Generator``) or the stream
    ``rg.manual_seed`` seeds."""
    checked_generator("random_split", generator)
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise InvalidArgumentError(
                    f"random_split: fraction at index {i} is {frac}, not between 0 and 1 "
                    f"(lengths {lengths})"
                )
        counts = [math.floor(n * frac) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(not isinstance(k, numbers.Integral) or k < 0 for k in lengths) or sum(lengths) != n:
        raise InvalidArgumentError(
            f"random_split: sum of input lengths {lengths} does not equal the length of the "
            f"input dataset ({n})"
        )
    order = randperm(n, generator=generator).tolist()
    subsets, start = [], 0
    for k in lengths:
        subsets.append(Subset(dataset, order[start : start + k]))
        start += k
    return subsets
