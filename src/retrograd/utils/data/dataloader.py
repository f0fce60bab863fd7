"""``DataLoader``: batches of a dataset, as torch's, and ``default_collate``.

Batches are read in this process, in the sampler's order; ``num_workers`` is accepted and
the batches are the same as torch's worker processes would give (each batch is read and
collated in order), only not in parallel. With ``num_workers = n > 0`` the ``n`` workers are
emulated in this process, as torch's would behave: each has its own (shallow) copy of the
dataset, ``worker_init_fn(worker_id)`` is called once for each when an epoch's first batch
is read (once for all epochs with ``persistent_workers``), batch ``k`` of a map-style dataset
is fetched and collated by worker ``k % n``, an ``IterableDataset`` is iterated by each
worker in turn (a batch from each, round robin, as torch's interleaves them: a stream that
does not shard itself by ``get_worker_info()`` is read ``n`` times, as in torch), and
``get_worker_info()`` gives, inside the worker's code, that worker's :class:`WorkerInfo`
(``None`` elsewhere). ``pin_memory`` and ``prefetch_factor`` concern worker processes and
are accepted and ignored (``persistent_workers`` refused with ``num_workers=0``, as torch).
``timeout`` is torch's: with ``num_workers > 0`` a batch not ready after ``timeout`` seconds
raises ``RuntimeError`` (each such batch is read in a thread of its own, so a dataset, a
``collate_fn`` or a ``worker_init_fn`` that hangs cannot hang the loop), and the next
``next()`` waits for that same batch again; with ``num_workers=0`` a positive ``timeout``
is refused when iterating, as torch's single-process iterator refuses it.
"""

from __future__ import annotations

import collections.abc
import contextvars
import copy
import itertools
import math
import multiprocessing
import numbers
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...errors import (
    DTypeError,
    InvalidArgumentError,
    KeyMismatchError,
    RetrogradError,
    SizeMismatchError,
    check_callable,
    check_iterable,
    shape_text,
)
from ...tensor import Tensor, as_tensor, stack, tensor
from ...tensor.internal import checked_generator
from .dataset import IterableDataset, sample_at
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = [
    "DataLoader",
    "WorkerInfo",
    "collate",
    "default_collate",
    "default_collate_fn_map",
    "default_convert",
    "get_worker_info",
]


CollateFnMap = dict[type | tuple[type, ...], Callable[..., Any]]


def collate_tensor_fn(batch: list[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Tensors stacked along a new first dimension (each sample a tensor of one shape)."""
    _check_samples_are(batch, Tensor, "Tensor")
    shapes = {tuple(b.shape) for b in batch if isinstance(b, Tensor)}
    if len(shapes) > 1:  # a RuntimeError too, as torch.stack's
        raise SizeMismatchError(
            f"default_collate: stack expects each tensor to be equal size, got "
            f"{', '.join(shape_text(s) for s in sorted(shapes))}"
        )
    return stack(batch, 0)


def collate_numpy_array_fn(batch: list[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """NumPy arrays as one tensor (their dtype kept); string and object arrays refused."""
    elem = batch[0]
    if elem.dtype.kind in "SUO":  # a TypeError, as torch's (DTypeError is one)
        raise DTypeError(
            f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
            f"lists; found array of dtype {elem.dtype}"
        )
    return collate_tensor_fn([as_tensor(b) for b in batch])


def collate_numpy_scalar_fn(batch: list[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """NumPy scalars as a tensor of their dtype."""
    for i, sample in enumerate(batch):
        if np.ndim(sample):  # a TypeError, as torch's ("only 0-dimensional arrays ...")
            raise DTypeError(
                f"default_collate: the samples of a batch differ: the first is a NumPy scalar "
                f"({type(batch[0]).__name__}), sample {i} is a {type(sample).__name__} of shape "
                f"{shape_text(np.shape(sample))}"
            )
    return tensor(np.asarray(batch))


#: what a batch of Python numbers may hold besides (torch's ``tensor`` reads NumPy's too)
_NUMBERS = (numbers.Number, np.bool_)


def collate_float_fn(batch: list[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Python floats as float64, as torch's."""
    _check_samples_are(batch, _NUMBERS, "number")
    return tensor(batch, dtype="float64")


def collate_int_fn(batch: list[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Python ints and bools as ``tensor(batch)`` reads them: int64, bool, or the default
    float dtype if a later sample is a float (not truncated ints), as torch's."""
    _check_samples_are(batch, _NUMBERS, "number")
    return tensor(batch)


def collate_str_fn(batch: list[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Strings (and bytes) kept: the batch's list."""
    return batch


# torch's registry of what default_collate does per sample type (exact type first, then the
# first key the sample is an instance of, in this order): a program extends it, or collates
# with a copy holding its own types, through collate(batch, collate_fn_map=...)
default_collate_fn_map: CollateFnMap = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,  # not NumPy's strings
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def collate(batch: list[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """torch's general ``collate``: the first sample's type picks a function of
    ``collate_fn_map`` (its exact type, else the first key it is an instance of), called as
    ``fn(batch, collate_fn_map=collate_fn_map)``; dicts, named tuples and sequences are
    collated field by field through this same map (a tuple gives a list, as torch's); any
    other sample is refused."""
    elem = batch[0]
    if collate_fn_map is not None:
        if type(elem) in collate_fn_map:
            return collate_fn_map[type(elem)](batch, collate_fn_map=collate_fn_map)
        for kind in collate_fn_map:
            if isinstance(elem, kind):
                return collate_fn_map[kind](batch, collate_fn_map=collate_fn_map)

    def fields(samples: Any) -> Any:
        return collate(list(samples), collate_fn_map=collate_fn_map)

    if isinstance(elem, collections.abc.Mapping):
        for sample in batch:  # one sample without a key of the first: name both
            mapping = isinstance(sample, collections.abc.Mapping)
            if not mapping or any(key not in sample for key in elem):
                other = f"has keys {list(sample)}" if mapping else f"is a {type(sample).__name__}"
                raise KeyMismatchError(
                    f"default_collate: the samples of a batch differ: the first has keys "
                    f"{list(elem)}, another {other}"
                )
        collated = {key: fields(d[key] for d in batch) for key in elem}
        return type(elem)(collated) if isinstance(elem, dict) else collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a namedtuple
        # each field's samples as the tuple zip makes (torch's): strings stay a tuple
        return type(elem)(
            *(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch))
        )
    if isinstance(elem, collections.abc.Sequence):
        _check_samples_are(batch, collections.abc.Sequence, "sequence")
        size = len(elem)
        if any(len(e) != size for e in batch):  # a RuntimeError too, as torch's
            raise SizeMismatchError(
                "default_collate: each element in list of batch should be of equal size"
            )
        # each field's samples as the tuple zip makes (torch's): strings stay a tuple
        transposed = [collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return transposed
        try:
            return type(elem)(transposed)
        except TypeError:
            return transposed
    raise DTypeError(  # a TypeError, as torch's
        f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        f"found {type(elem).__name__}"
    )


def default_collate(batch: list[Any]) -> Any:
    """torch's ``default_collate``: :func:`collate` with :data:`default_collate_fn_map` —
    tensors stacked along a new first dimension; NumPy arrays and scalars as tensors (their
    dtype kept); Python floats as float64, ints and bools as ``tensor(batch)`` reads them
    (int64, bool, or the default float dtype if a later sample is a float, as torch's);
    strings kept as they come (the batch's list, a field's tuple); dicts, named tuples and
    sequences collated field by field (a tuple gives a list, as torch's)."""
    return collate(batch, collate_fn_map=default_collate_fn_map)


def _check_samples_are(batch: list[Any], kind: type | tuple[type, ...], name: str) -> None:
    """Refuse a batch whose first sample is a ``kind`` and a later one is not (torch's
    "expected Tensor as element 1 in argument 0, but got int")."""
    for i, sample in enumerate(batch):
        if not isinstance(sample, kind):
            raise DTypeError(
                f"default_collate: the samples of a batch differ: the first is a "
                f"{type(batch[0]).__name__}, sample {i} is a {type(sample).__name__} (expected "
                f"a {name})"
            )


def default_convert(data: Any) -> Any:
    """torch's ``default_convert``, what unbatched samples (``batch_size=None``) go through:
    NumPy arrays and scalars as tensors (string and object arrays kept), inside dicts, named
    tuples and sequences too (a tuple gives a list, as torch's); the rest as it is.

    >>> default_convert({"x": np.zeros(2), "name": "a"})["x"].shape
    retrograd.Size([2])
    """
    if isinstance(data, np.ndarray | np.generic) and not isinstance(data, np.str_ | np.bytes_):
        if isinstance(data, np.ndarray) and data.dtype.kind in "SUO":
            return data
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        converted = {key: default_convert(data[key]) for key in data}
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, str | bytes):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def _check_multiprocessing_context(context: Any, num_workers: int) -> None:
    """torch's checks of ``multiprocessing_context``: only with workers, and a start method
    this machine has (by name) or a context of one (a typo would otherwise be found on some
    other machine, or never)."""
    if context is None:
        return
    if num_workers == 0:
        raise InvalidArgumentError(
            "DataLoader: multiprocessing_context can only be used with multi-process loading "
            "(num_workers > 0), but got num_workers=0"
        )
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise InvalidArgumentError(
                f"DataLoader: multiprocessing_context option should specify a valid start "
                f"method in {methods!r}, but got multiprocessing_context={context!r}"
            )
    elif not isinstance(context, multiprocessing.context.BaseContext):
        raise DTypeError(
            f"DataLoader: multiprocessing_context option should be a valid context object or "
            f"a string specifying the start method, but got {context!r}"
        )


class WorkerInfo:
    """torch's ``WorkerInfo``: the ``id`` of the worker running, ``num_workers``, its
    ``seed`` and its copy of the ``dataset``; read-only once made, as torch's."""

    __initialized = False

    def __init__(self, **kwargs: Any) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)
        self.__keys = tuple(kwargs)
        self.__initialized = True

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__initialized:
            raise AttributeError(f"Cannot assign attributes to {type(self).__name__} objects")
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__keys)
        return f"{type(self).__name__}({fields})"


#: The worker whose code runs now (its dataset reads, its collate, its ``worker_init_fn``)
_WORKER: contextvars.ContextVar[WorkerInfo | None] = contextvars.ContextVar(
    "retrograd_dataloader_worker", default=None
)


def get_worker_info() -> WorkerInfo | None:
    """The :class:`WorkerInfo` of the emulated worker whose code runs now (a dataset's
    ``__getitem__``/``__iter__``, a ``collate_fn``, a ``worker_init_fn`` called by a
    ``DataLoader`` with ``num_workers > 0``); ``None`` in the main process, as torch's."""
    return _WORKER.get()


class _Worker:
    """One emulated worker: its :class:`WorkerInfo` (whose dataset is its own shallow copy:
    what ``worker_init_fn`` or the dataset sets on it stays its own, as in a process) and
    :meth:`run`, which calls a function as that worker.

    An exception of the worker's code comes out as torch's worker process re-raises it in
    the main process: of the same type, its message ``Caught ValueError in DataLoader worker
    process 1.`` followed by the original traceback (a ``RuntimeError`` with that message
    where the type cannot be made from one); ``StopIteration`` (a stream's end) and
    ``KeyboardInterrupt`` pass as they are. A failed ``worker_init_fn`` is raised, so, from
    that worker's first batch, as torch's worker sends it in place of that batch."""

    def __init__(self, dataset: Any, worker_id: int, num_workers: int, seed: int) -> None:
        self.info = WorkerInfo(
            id=worker_id, num_workers=num_workers, seed=seed, dataset=_own_copy(dataset)
        )
        self.init_error: BaseException | None = None

    def initialize(self, worker_init_fn: Callable[[int], Any]) -> None:
        try:
            self.run(worker_init_fn, self.info.id)
        except StopIteration as error:  # (not a stream's end here: the init's own error)
            self.init_error = self._as_torch_raises(error)
        except Exception as error:
            self.init_error = error

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        if self.init_error is not None:
            error, self.init_error = self.init_error, None
            raise error
        token = _WORKER.set(self.info)
        try:
            return function(*args)
        except StopIteration:
            raise
        except Exception as error:
            raise self._as_torch_raises(error) from None
        finally:
            _WORKER.reset(token)

    def _as_torch_raises(self, error: BaseException) -> BaseException:
        """``error`` as torch's ``ExceptionWrapper.reraise`` gives it in the main process."""
        kind = type(error)
        original = "".join(traceback.format_exception(kind, error, error.__traceback__))
        message = (
            f"Caught {kind.__name__} in DataLoader worker process {self.info.id}.\n"
            f"Original {original}"
        )
        if issubclass(kind, KeyError):  # KeyError's str() would quote the lines
            message = _KeyErrorMessage(message)
        try:
            return kind(message)
        except Exception:
            return RuntimeError(message)


class _KeyErrorMessage(str):
    """torch's ``KeyErrorMessage``: a message whose ``repr`` is itself, so that a
    ``KeyError`` made from it shows its lines rather than their quoted escape."""

    def __repr__(self) -> str:
        return str(self)


def _own_copy(dataset: Any) -> Any:
    """A worker's copy of ``dataset``: a shallow copy of an object of a class of its own (the
    attributes a worker sets stay its own, as in torch's worker processes); a tensor, an
    array or a builtin container is shared (nothing sets attributes on them), as is an
    object that refuses to be copied."""
    if isinstance(dataset, Tensor | np.ndarray) or not hasattr(dataset, "__dict__"):
        return dataset
    try:
        return copy.copy(dataset)
    except Exception:  # (a class that forbids copies: its one object serves every worker)
        return dataset


class DataLoader:
    """torch's ``DataLoader(dataset, batch_size=1, shuffle=None, sampler=None,
    batch_sampler=None, num_workers=0, collate_fn=None, pin_memory=False, drop_last=False,
    ...)``: iterate it for batches; ``len()`` is the number of batches."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], Any] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if isinstance(num_workers, np.integer):  # torch takes NumPy's (a config's count)
            num_workers = int(num_workers)
        if not isinstance(num_workers, int) or num_workers < 0:
            raise InvalidArgumentError(
                f"DataLoader: num_workers option should be a non-negative int, got "
                f"{num_workers!r}; use num_workers=0 to disable multiprocessing"
            )
        if not (hasattr(dataset, "__getitem__") or hasattr(dataset, "__iter__")):
            raise DTypeError(
                f"DataLoader: dataset must be indexable (a Dataset, a list) or iterable, got "
                f"{type(dataset).__name__}"
            )
        if collate_fn is not None and not callable(collate_fn):
            raise DTypeError(
                f"DataLoader: collate_fn must be callable, got {type(collate_fn).__name__}"
            )
        if worker_init_fn is not None:
            check_callable("DataLoader", worker_init_fn, "worker_init_fn")
        for name, value in (("sampler", sampler), ("batch_sampler", batch_sampler)):
            if value is not None:
                check_iterable("DataLoader", value, name)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
            raise InvalidArgumentError(
                f"DataLoader: timeout option should be non-negative, got {timeout!r}"
            )
        if num_workers == 0 and prefetch_factor is not None:
            raise InvalidArgumentError(
                "DataLoader: prefetch_factor option could only be specified in multiprocessing; "
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor "
                "to None"
            )
        _check_multiprocessing_context(multiprocessing_context, num_workers)
        if persistent_workers and num_workers == 0:
            raise InvalidArgumentError(
                "DataLoader: persistent_workers option needs num_workers > 0, got num_workers=0"
            )
        if prefetch_factor is not None and (
            isinstance(prefetch_factor, bool)
            or not isinstance(prefetch_factor, int)
            or prefetch_factor < 1
        ):
            raise InvalidArgumentError(
                f"DataLoader: prefetch_factor should be a positive integer, got {prefetch_factor!r}"
            )
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.persistent_workers = persistent_workers
        self._persistent: list[_Worker] | None = None
        self.generator = checked_generator("DataLoader", generator)
        # kept as torch keeps them, for code that makes a loader like another one
        # (DataLoader(dl.dataset, ..., prefetch_factor=dl.prefetch_factor, ...))
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = 2 if num_workers and prefetch_factor is None else prefetch_factor
        self.pin_memory_device = pin_memory_device
        self.in_order = in_order
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (None, False):
                raise InvalidArgumentError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}"
                )
            if sampler is not None or batch_sampler is not None:
                raise InvalidArgumentError(
                    "DataLoader with IterableDataset: expected unspecified sampler and "
                    "batch_sampler options"
                )
        if sampler is not None and shuffle:
            raise InvalidArgumentError(
                "DataLoader: sampler option is mutually exclusive with shuffle"
            )
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise InvalidArgumentError(
                    "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                    "shuffle, "
                    "sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise InvalidArgumentError(
                "DataLoader: batch_size=None option disables auto-batching and is mutually "
                "exclusive "
                "with drop_last"
            )
        if sampler is None and not self._iterable:
            sampler = (
                RandomSampler(dataset, generator=generator)
                if shuffle
                else SequentialSampler(dataset)
            )
        if batch_size is not None and (
            not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0
        ):
            raise InvalidArgumentError(
                f"DataLoader: batch_size should be a positive integer value, but got "
                f"batch_size={batch_size!r}"
            )
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        if collate_fn is None:
            collate_fn = (
                default_collate if batch_size is not None or batch_sampler else (default_convert)
            )
        self.collate_fn = collate_fn
        self._initialized = True

    # what the batches were made from: torch refuses to change these afterwards (a new
    # batch_size or sampler would be silently ignored: the batch sampler is already made)
    _FIXED_AFTER_INIT = (
        "batch_size",
        "batch_sampler",
        "sampler",
        "drop_last",
        "dataset",
        "persistent_workers",
    )

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._FIXED_AFTER_INIT and getattr(self, "_initialized", False):
            raise InvalidArgumentError(
                f"DataLoader: {name} attribute should not be set after DataLoader is "
                f"initialized; make a new DataLoader with {name}={value!r}"
            )
        super().__setattr__(name, value)

    def __iter__(self) -> Iterator[Any]:
        """The batches, one per ``next()``. As torch's iterator, an error reading or collating
        one batch (a dataset's ``__getitem__``, the ``collate_fn``) is raised from that call
        alone: the next call goes on with the following batch (a generator would end the
        epoch there, silently short for a loop that skips a bad batch)."""
        timeout = self.timeout
        if timeout and not self.num_workers:
            raise InvalidArgumentError(
                f"DataLoader: timeout={timeout!r} needs num_workers > 0 (torch's "
                f"single-process iterator requires timeout == 0)"
            )
        started: list[list[_Worker]] = []

        def workers() -> list[_Worker]:
            # made, and their worker_init_fn run, by the first batch's read: inside the wait
            # of a timeout, so that a worker_init_fn that hangs times out as torch's does
            if not started:
                started.append(self._workers())
            return started[0]

        collate = self.collate_fn
        if self._iterable:
            if not self.num_workers:
                draw = self._stream_draw(iter(self.dataset))
                return _Batches(lambda: collate(draw()), timeout)
            return _Batches(self._interleaved(workers), timeout)
        length = self.__len__
        if self.batch_sampler is not None:
            batches = iter(self.batch_sampler)

            def take() -> Any:
                indices = next(batches)
                if not isinstance(indices, collections.abc.Iterable):
                    raise DTypeError(
                        f"DataLoader: batch_sampler yielded {indices!r}, not a batch of "
                        f"indices (a list of ints; a sampler of single indices is sampler=)"
                    )
                return indices

            def fetch(dataset: Any, indices: Any) -> Any:
                getitems = getattr(dataset, "__getitems__", None)
                samples = (
                    getitems(indices) if getitems else [self._sample(dataset, i) for i in indices]
                )
                return collate(samples)
        else:
            single = iter(self.sampler)

            def take() -> Any:
                return next(single)

            def fetch(dataset: Any, index: Any) -> Any:
                return collate(self._sample(dataset, index))

        if not self.num_workers:
            return _Batches(lambda: fetch(self.dataset, take()), timeout, length)
        turn = itertools.count()

        def read() -> Any:
            # the sampler is drawn in the main process, the batch fetched and collated by
            # worker k % n, as torch's
            index = take()
            pool = workers()
            worker = pool[next(turn) % len(pool)]
            return worker.run(fetch, worker.info.dataset, index)

        return _Batches(read, timeout, length)

    def _workers(self) -> list[_Worker]:
        """This epoch's emulated workers, each made and initialized (``worker_init_fn``) as
        torch starts its processes: afresh for each iterator, or once with
        ``persistent_workers``; none with ``num_workers=0``."""
        if not self.num_workers:
            return []
        if self._persistent is not None:
            return self._persistent
        base = _base_seed(self.generator)
        workers = [
            _Worker(self.dataset, i, self.num_workers, base + i) for i in range(self.num_workers)
        ]
        if self.worker_init_fn is not None:
            for worker in workers:
                worker.initialize(self.worker_init_fn)
        if self.persistent_workers:
            self._persistent = workers
        return workers

    def _interleaved(self, workers: Callable[[], list[_Worker]]) -> Callable[[], Any]:
        """What an ``IterableDataset`` gives through ``workers``: each iterates its own copy
        (its iterator made as that worker), one batch from each in turn; a worker whose
        stream has ended is passed over, as torch's."""
        draws: list[Callable[[], Any] | None] = [None] * self.num_workers
        active = list(range(self.num_workers))
        cursor = [0]  # the place in ``active`` of the worker whose turn it is
        collate = self.collate_fn

        def one_batch(k: int) -> Any:
            if draws[k] is None:
                draws[k] = self._stream_draw(iter(workers()[k].info.dataset))
            return collate(draws[k]())

        def read() -> Any:
            while active:
                place = cursor[0] % len(active)
                k = active[place]
                try:
                    batch = workers()[k].run(one_batch, k)
                except StopIteration:
                    del active[place]  # (the next worker moves into its place)
                    cursor[0] = place
                    continue
                cursor[0] = place + 1
                return batch
            raise StopIteration

        return read

    @staticmethod
    def _sample(dataset: Any, index: Any) -> Any:
        return sample_at(dataset, index, "DataLoader: the sampler drew")

    def _stream_draw(self, samples: Iterator[Any]) -> Callable[[], Any]:
        """What one batch of an iterable dataset collates: a sample (``batch_size=None``), or
        the next ``batch_size`` samples (the last fewer, unless ``drop_last``)."""
        if self.batch_size is None:
            return lambda: next(samples)
        size, drop_last, ended = self.batch_size, self.drop_last, []

        def draw() -> list[Any]:
            batch: list[Any] = []
            while not ended and len(batch) < size:
                try:
                    batch.append(next(samples))
                except StopIteration:
                    ended.append(True)
            if not batch or (ended and drop_last and len(batch) < size):
                raise StopIteration
            return batch

        return draw

    def __len__(self) -> int:
        if self._iterable:
            if not hasattr(self.dataset, "__len__"):
                raise DTypeError(
                    f"DataLoader: len() of a DataLoader over an IterableDataset needs the "
                    f"dataset's __len__, which {type(self.dataset).__name__} lacks"
                )
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        sampler = self.batch_sampler if self.batch_sampler is not None else self.sampler
        try:
            return len(sampler)
        except TypeError as error:  # a sampler given as an iterator: len()'s bare TypeError
            raise DTypeError(
                f"DataLoader: len() needs a sampler with a length (a Sampler, a list): {error}"
            ) from None


def _base_seed(generator: Any) -> int:
    """The seed worker ``i`` is given ``base + i`` of: the loader's generator's seed, or the
    default stream's (no draw: iterating leaves the random streams where they were)."""
    if generator is not None:
        return int(generator.initial_seed())
    from ...tensor.generator import initial_seed

    return int(initial_seed())


class DataLoaderTimeoutError(RetrogradError, RuntimeError):
    """A batch not ready within the ``DataLoader``'s ``timeout`` (torch's ``RuntimeError``)."""


class _Batches:
    """A :class:`DataLoader`'s iterator: ``read()`` (a collated batch) per ``next()``, where
    ``read`` raises ``StopIteration`` at the end; an error of one batch leaves the rest to
    come. With a ``timeout``, each batch is read in a daemon thread (in the caller's context
    variables) and waited for that long; one not ready stays pending for the next
    ``next()``. Its ``len`` is its loader's, as torch's iterator's is (``length``; ``None``
    over an iterable dataset, whose iterator torch gives no length)."""

    def __init__(
        self,
        read: Callable[[], Any],
        timeout: float = 0,
        length: Callable[[], int] | None = None,
    ) -> None:
        self._read, self._timeout = read, timeout
        self._length = length
        self._pending: _Reading | None = None

    def __iter__(self) -> _Batches:
        return self

    def __len__(self) -> int:
        if self._length is None:
            raise DTypeError(
                "len() of a DataLoader's iterator over an IterableDataset: its batches are "
                "not counted in advance (torch's iterator has no len() there either)"
            )
        return self._length()

    def __next__(self) -> Any:
        if not self._timeout:
            return self._read()
        if self._pending is None:
            self._pending = _Reading(self._read)
        reading = self._pending
        if not reading.done.wait(self._timeout):
            raise DataLoaderTimeoutError(f"DataLoader timed out after {self._timeout} seconds")
        self._pending = None
        return reading.outcome()


class _Reading:
    """``read()`` run in a daemon thread of its own; ``done`` is set when it has returned or
    raised, and :meth:`outcome` gives its value or raises its exception."""

    def __init__(self, read: Callable[[], Any]) -> None:
        self.done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()

        def run() -> None:
            try:
                self._value = context.run(read)
            except BaseException as error:  # raised again in the caller, by outcome()
                self._error = error
            finally:
                self.done.set()

        threading.Thread(target=run, name="DataLoader batch", daemon=True).start()

    def outcome(self) -> Any:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value
