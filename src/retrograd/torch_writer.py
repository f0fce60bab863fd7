"""``rg.save``'s writer: the file ``torch.save`` writes (its zip format, torch 1.6 on), made
without torch, so that ``torch.load`` reads what retrograd saved.

The saved object is pickled as torch pickles it: each tensor as a call of
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`` over
a persistent reference ``("storage", torch.FloatStorage, key, location, numel)`` to a
storage whose bytes are the zip's ``archive/data/<key>`` entry (little-endian, each entry's
bytes at a multiple of 64 from the file's start, as torch aligns them); a parameter as
``torch._utils._rebuild_parameter``, a device as ``torch.device``, a dtype as ``torch.float32``,
a ``Size`` as ``torch.Size``. The names are written into the pickle as torch's, never imported
(:class:`_TorchName`): no torch is needed to save.

Tensors that share memory (views of one tensor: a transpose, a slice, an expanded tensor,
the same tensor saved twice) are views of one storage, as torch saves them: ``torch.load``
gives tensors that share it. The storage holds the span of memory the views reach, not more
(torch's holds the whole allocation). A module's state dict holds copies of its parameters,
so a tied weight (listed under each name) is found by the parameter it was copied from and
saved as one tensor.

NumPy arrays (an optimizer's state, which torch's optimizers hold as tensors) are saved as
tensors, which torch loads under ``weights_only=True``; the ``.data/retrograd_numpy`` entry
(:data:`retrograd.torch_files.NUMPY_RECORD`) lists their storages, so that ``rg.load`` gives
arrays back. A NumPy scalar is pickled as NumPy pickles it, as torch pickles it (a dict key
stays one): torch loads it under ``weights_only=False``, ``rg.load`` by default in a file
retrograd wrote. So is an array of a dtype no torch storage holds (``np.random.get_state()``'s
uint32 key, strings), as torch pickles every array: both load it under ``weights_only=False``
or with NumPy's ``_reconstruct``, ``ndarray`` and ``dtype`` allowed (``safe_globals``). Any
other object (an ``argparse.Namespace``, a whole module) is pickled by its class, as torch
pickles it: torch then loads it only under ``weights_only=False`` or an allow-list, as it does
its own files.
"""

from __future__ import annotations

import io
import itertools
import json
import pickle
import sys
from collections import OrderedDict
from typing import Any, ClassVar

import numpy as np

from . import torch_files
from .device import Device
from .errors import DTypeError, InvalidArgumentError
from .tensor import Tensor
from .tensor.dtypes import Size, dtype

__all__ = ["write"]

#: The folder of every entry (torch names it after the file; any name reads back).
_FOLDER = "archive"
#: torch's storage class of each dtype.
_STORAGE_CLASSES = {
    name: kind for kind, name in torch_files.STORAGE_DTYPES.items() if kind != "UntypedStorage"
}
#: The dtype of the storage each NumPy dtype's values are kept in.
_NUMPY_DTYPES = {
    np.dtype(name): name
    for name in _STORAGE_CLASSES
    if name != "bfloat16"  # (NumPy has none)
}
#: ``nn.Parameter`` by name (``nn`` sits above this layer).
_PARAMETER = ("retrograd.nn.parameter", "Parameter")


_TORCH_NAMES: dict[tuple[str, str], Any] = {}


class _TorchName:
    """A function or class of torch's, written into the pickle by its name
    (``GLOBAL 'torch._utils _rebuild_tensor_v2'``) and never imported; one object a name, so
    that pickle's memo writes each name once."""

    __slots__ = ("module", "name")

    def __new__(cls, module: str, name: str) -> _TorchName:
        made = _TORCH_NAMES.get((module, name))
        if made is None:
            made = object.__new__(cls)
            made.module, made.name = module, name
            _TORCH_NAMES[(module, name)] = made
        return made

    def __call__(self, *args: Any) -> Any:  # (pickle writes only callables' calls)
        raise TypeError(f"{self.module}.{self.name} is torch's, named in a pickle only")


_REBUILD_TENSOR = _TorchName("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = _TorchName("torch._utils", "_rebuild_parameter")
_REBUILD_FROM_TYPE = _TorchName("torch._tensor", "_rebuild_from_type_v2")
_TORCH_DEVICE = _TorchName("torch", "device")
_TORCH_SIZE = _TorchName("torch", "Size")


class _Call:
    """A value pickled as ``func(*args)`` (a parameter, a device, a ``Size``)."""

    __slots__ = ("args", "func")

    def __init__(self, func: Any, args: tuple) -> None:
        self.func, self.args = func, args


class _Storage:
    """One storage of the file: its elements (a contiguous array), its key once the pickle
    names it."""

    __slots__ = ("dtype", "elements", "key", "location")

    def __init__(self, elements: np.ndarray, dtype: str, location: str) -> None:
        self.elements, self.dtype, self.location = elements, dtype, location
        self.key: str | None = None


class _Saved:
    """One tensor (or NumPy value) to save: its values, then (:func:`_plan`) where they lie
    in a storage."""

    __slots__ = (
        "dtype",
        "kind",
        "location",
        "numpy",
        "offset",
        "requires_grad",
        "state",
        "storage",
        "stride",
        "values",
    )  # fmt: skip

    def __init__(self, values: np.ndarray, dtype: str, requires_grad: bool = False,
                 location: str = "cpu", numpy: str | None = None) -> None:  # fmt: skip
        self.values, self.dtype, self.requires_grad = values, dtype, requires_grad
        self.location, self.numpy = location, numpy
        self.storage: _Storage | None = None
        self.offset, self.stride = 0, ()
        self.kind: type | None = None  # a tensor subclass it is saved as (not Parameter)
        self.state: Any = None  # that subclass's attributes


class _Pickler(pickle._Pickler):  # (the Python pickler: its dispatch writes torch's names)
    """torch's pickle of the saved object, each value :class:`_Writer` stands in for written
    as torch writes it."""

    dispatch: ClassVar[dict] = dict(pickle._Pickler.dispatch)

    def __init__(self, file: Any, protocol: int, writer: _Writer, planned: bool) -> None:
        super().__init__(file, protocol=protocol)
        self.writer, self.planned = writer, planned
        self.path: list[Any] = []  # the objects being saved, outermost first
        self.failed_at: list[Any] | None = None

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        self.path.append(obj)
        try:
            super().save(self.writer.stand_in(obj), save_persistent_id)
        except BaseException:
            if self.failed_at is None:
                self.failed_at = list(self.path)
            raise
        finally:
            self.path.pop()

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is not _Storage:
            return None
        if obj.key is None:
            obj.key = str(len(self.writer.named))
            self.writer.named.append(obj)
        kind = _TorchName("torch", _STORAGE_CLASSES[obj.dtype])
        return ("storage", kind, obj.key, obj.location, obj.elements.size)

    def save_torch_name(self, obj: _TorchName) -> None:
        if self.proto >= 4:
            self.save(obj.module)
            self.save(obj.name)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    def save_call(self, obj: _Call) -> None:
        self.save_reduce(obj.func, obj.args, obj=obj)

    def save_tensor(self, obj: _Saved) -> None:
        if obj.storage is None:
            if not self.planned:  # the first pass, which only finds the tensors
                self.write(pickle.NONE)
                return
            _own(obj)  # one the first pass did not meet (made anew by a __reduce__)
        args = (obj.storage, obj.offset, tuple(obj.values.shape), obj.stride,
                obj.requires_grad, OrderedDict())  # fmt: skip
        if obj.kind is None:
            self.save_reduce(_REBUILD_TENSOR, args, obj=obj)
        else:  # torch's form for a tensor subclass: the class named, called on the tensor
            self.save_reduce(_REBUILD_FROM_TYPE, (_REBUILD_TENSOR, obj.kind, args, obj.state),
                             obj=obj)  # fmt: skip

    dispatch[_TorchName] = save_torch_name
    dispatch[_Call] = save_call
    dispatch[_Saved] = save_tensor


class _Writer:
    """What the pickle writes for retrograd's values: the stand-ins, made once per object
    (kept with it, so that pickle's memo, by ``id``, sees one object each time)."""

    def __init__(self) -> None:
        self.made: dict[int, tuple[Any, Any]] = {}
        self.saved: list[_Saved] = []
        self.named: list[_Storage] = []  # the storages in the order the pickle names them
        #: the state values (a module's state dict) saved, by the parameter they copy
        self.copies: dict[int, list[tuple[np.ndarray, Any]]] = {}

    def stand_in(self, obj: Any) -> Any:
        kind = type(obj)
        if kind in _AS_IS:
            return obj
        found = self.made.get(id(obj))
        if found is not None:
            return found[1]
        made = self.make(obj)
        if made is obj:
            return obj
        self.made[id(obj)] = (obj, made)
        return made

    def make(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is dtype:
            return _TorchName("torch", str(obj))
        if isinstance(obj, Tensor):
            return self.tensor(obj)
        if isinstance(obj, np.ndarray) and callable(getattr(obj, "_saved_as_tensor", None)):
            return self.state_value(obj)
        if isinstance(obj, str | bytes):  # NumPy's str_ and bytes_: as the Python ones
            return str(obj) if isinstance(obj, str) else bytes(obj)
        if isinstance(obj, np.ndarray):
            return self.numpy_array(obj)
        if isinstance(obj, Device):
            args = (obj.kind,) if (obj.kind, obj.index) == ("cpu", 0) else (obj.kind, obj.index)
            return _Call(_TORCH_DEVICE, args)
        if kind is Size:
            return _Call(_TORCH_SIZE, (tuple(obj),))
        if isinstance(obj, tuple) and kind.__module__.partition(".")[0] == "retrograd":
            return tuple(obj)  # a named result (max's, IncompatibleKeys): a plain tuple
        if _is_torch_tensor(obj):
            return self.torch_tensor(obj)
        return obj

    def add(self, saved: _Saved) -> _Saved:
        self.saved.append(saved)
        return saved

    def tensor(self, obj: Tensor) -> Any:
        name = str(obj.dtype)
        values = obj.numpy()
        if name == "bfloat16":  # held widened to float32 (exactly): its upper half
            values = _bfloat16_bits(values)
        # (a result of ops on such tensors too: torch's save keeps requires_grad, not leafness)
        saved = _Saved(values, name, bool(obj.requires_grad), _location(obj.device))
        saved_class = (type(obj).__module__, type(obj).__qualname__)
        if type(obj) is Tensor:
            return self.add(saved)
        if saved_class == _PARAMETER:  # torch's Parameter(data, requires_grad)
            saved.requires_grad = False
            requires_grad = bool(obj.is_require_grad())
            return _Call(_REBUILD_PARAMETER, (self.add(saved), requires_grad, OrderedDict()))
        if saved_class[0].partition(".")[0] != "retrograd":  # a class of the user's
            saved.kind = type(obj)
            saved.state = dict(vars(obj)) if hasattr(obj, "__dict__") and vars(obj) else None
        # (retrograd's Buffer and a lazy module's placeholders save as the tensors they hold,
        # as they did before: a lazy state dict loads under weights_only)
        return self.add(saved)

    def state_value(self, value: np.ndarray) -> Any:
        """A module's state value (nn's ``StateValue``, a copy of a parameter or buffer), as
        the tensor it stands for; copies of one parameter that hold the same values (a tied
        weight, which ``state_dict()`` lists under each name) are one tensor, as torch's
        state dict's views of one storage."""
        source = getattr(value, "_source", None)
        if source is not None:
            for earlier, made in self.copies.get(id(source), []):
                if (earlier.dtype, earlier.shape) == (value.dtype, value.shape) and (
                    earlier.tobytes() == value.tobytes()
                ):
                    return made
        made = self.tensor(value._saved_as_tensor())
        if source is not None:
            self.copies.setdefault(id(source), []).append((value, made))
        return made

    def numpy_array(self, array: np.ndarray) -> _Saved:
        """A NumPy array (an optimizer's state, a saved array), as a tensor for torch, listed
        as an array for ``rg.load`` (a NumPy scalar is pickled as NumPy pickles it, as torch
        pickles it: a dict key stays one)."""
        name = _NUMPY_DTYPES.get(array.dtype.newbyteorder("="))
        if name is None:
            # no torch storage holds it (uint32: np.random.get_state()'s key, strings): pickled
            # as NumPy pickles it, as torch.save pickles every array, which torch.load and
            # rg.load read under weights_only=False or with NumPy's classes allowed
            return array
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        return self.add(_Saved(np.asarray(array), name, numpy="array"))

    def torch_tensor(self, obj: Any) -> Any:
        """A torch tensor in the saved object (a script mixing both), saved as torch saves
        it (through its NumPy values: torch is not imported here)."""
        host = obj.detach().cpu()
        name = str(host.dtype).removeprefix("torch.")
        if name not in _STORAGE_CLASSES:
            raise _Unsavable(f"a torch tensor of dtype {host.dtype}, which retrograd has none of")
        values = _bfloat16_bits(host.float().numpy()) if name == "bfloat16" else host.numpy()
        location = str(obj.device)
        if type(obj).__name__ == "Parameter":
            saved = self.add(_Saved(values, name, False, location))
            return _Call(_REBUILD_PARAMETER, (saved, bool(obj.requires_grad), OrderedDict()))
        return self.add(_Saved(values, name, bool(obj.requires_grad), location))


#: Types pickled as they are (checked first: most of a checkpoint's objects).
_AS_IS = frozenset(
    {str, int, float, bool, type(None), bytes, dict, list, OrderedDict, complex, set}
)


class _Unsavable(Exception):  # noqa: N818 (carried to save's DTypeError)
    """A value no torch file holds (a NumPy array of strings)."""


def _is_torch_tensor(obj: Any) -> bool:
    module = type(obj).__module__
    return (module == "torch" or module.startswith("torch.")) and hasattr(obj, "untyped_storage")


def _location(device: Device) -> str:
    """torch's location tag of a storage on ``device``: ``"cpu"``, ``"cuda:0"``."""
    return "cpu" if device.kind == "cpu" else f"{device.kind}:{device.index}"


def _bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 values held as float32 (exactly): their 16 upper bits, bfloat16's."""
    # (np.array, not np.ascontiguousarray: that makes a 0-d tensor's values 1-d, and the
    # file then held a tensor of shape [1])
    widened = np.array(values, dtype=np.float32, order="C")
    # (np.array again: ``>>`` of a 0-d array is a NumPy scalar, whose memory is no array's)
    return np.array(widened.view(np.uint32) >> 16, dtype=np.uint16)


def _contiguous_strides(shape: tuple) -> tuple:
    """torch's strides of a contiguous tensor (a dimension of 0 counts as 1)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class _Memory:
    """Bytes of memory the saved arrays share, as NumPy reads them (its array interface):
    from ``start`` on, ``size`` bytes, kept alive by ``owner`` (an array that reaches them)."""

    def __init__(self, start: int, size: int, owner: np.ndarray) -> None:
        self.__array_interface__ = {
            "data": (start, True), "shape": (size,), "typestr": "|u1", "version": 3,
        }  # fmt: skip
        self.owner = owner


def _plan(saved: list[_Saved]) -> None:
    """Give each saved value its storage, offset and strides: values whose memory overlaps
    (views of one array) are views of one storage over the bytes they reach; any other
    value (a copy, negative strides, no elements) a storage of its own."""
    spans: dict[tuple[str, bool], list[tuple[int, int, _Saved]]] = {}
    for value in saved:
        values, item = value.values, value.values.itemsize
        if values.size == 0 or any(step < 0 or step % item for step in values.strides):
            _own(value)
            continue
        start = values.__array_interface__["data"][0]
        end = start + sum((n - 1) * step for n, step in zip(values.shape, values.strides)) + item
        spans.setdefault((value.dtype, value.numpy is not None), []).append((start, end, value))
    for members in spans.values():
        members.sort(key=lambda member: member[0])
        group, reached = [members[0]], members[0][1]
        for member in members[1:]:
            if member[0] < reached:  # overlapping memory: one allocation
                group.append(member)
            else:
                _share(group)
                group = [member]
            reached = max(reached, member[1]) if len(group) > 1 else member[1]
        _share(group)


def _own(value: _Saved) -> None:
    elements = np.ascontiguousarray(value.values).reshape(-1)
    value.storage = _Storage(elements, value.dtype, value.location)
    value.offset, value.stride = 0, _contiguous_strides(value.values.shape)


def _share(group: list[tuple[int, int, _Saved]]) -> None:
    start = group[0][0]
    end = max(end for _, end, _ in group)
    first = group[0][2].values
    item = first.itemsize
    if len(group) == 1 and first.flags.c_contiguous:
        _own(group[0][2])
        return
    if any((begin - start) % item for begin, _, _ in group):  # views at odd byte offsets
        for _, _, value in group:
            _own(value)
        return
    memory = np.asarray(_Memory(start, end - start, first)).view(first.dtype)
    storage = _Storage(memory, group[0][2].dtype, group[0][2].location)
    for begin, _, value in group:
        value.storage = storage
        value.offset = (begin - start) // item
        value.stride = tuple(step // item for step in value.values.strides)


def _where(path: list[Any]) -> str:
    """Where the object pickle failed on sits in the saved object (``the saved
    object['model'].layers[0]``), from the objects pickle was inside of."""
    text = "the saved object"
    for outer, inner in itertools.pairwise(path):
        if isinstance(outer, dict):
            key = next((k for k, v in outer.items() if v is inner), None)
            text += f"[{key!r}]" if key is not None or inner is None else ""
        elif isinstance(outer, list | tuple) and not isinstance(inner, str):
            index = next((i for i, v in enumerate(outer) if v is inner), None)
            text += f"[{index}]" if index is not None else ""
        elif hasattr(outer, "__dict__") and not isinstance(outer, type):
            name = next((k for k, v in vars(outer).items() if v is inner), None)
            text += f".{name}" if name is not None else ""
    return text


def write(obj: Any, file: Any, protocol: int) -> None:
    """Write ``obj`` to the binary ``file`` in torch's zip format (see the module). The
    pickle is made, and the storages laid out, before a byte is written: an object that
    cannot be saved writes nothing."""
    writer = _Writer()
    for planned in (False, True):
        out = io.BytesIO() if planned else _Discarded()
        pickler = _Pickler(out, protocol, writer, planned)
        try:
            pickler.dump(obj)
        except RecursionError:
            raise InvalidArgumentError(
                "save: the saved object is nested too deeply to store (containers inside "
                "containers beyond Python's recursion limit)"
            ) from None
        except _Unsavable as error:
            where = _where(pickler.failed_at or [])
            raise DTypeError(f"save: cannot store {error} at {where}") from None
        except (pickle.PicklingError, TypeError, AttributeError, ValueError) as error:
            failed = (pickler.failed_at or [obj])[-1]
            raise DTypeError(
                f"save: cannot store an object of type {type(failed).__name__} at "
                f"{_where(pickler.failed_at or [])}: it is not a tensor, array, number, string "
                f"or container of them, and it cannot be pickled ({error})"
            ) from None
        if not planned:
            _plan(writer.saved)
    numpy_values = {
        value.storage.key: value.numpy
        for value in writer.saved
        if value.numpy is not None and value.storage is not None and value.storage.key
    }
    records: list[tuple[str, Any]] = [
        ("data.pkl", out.getvalue()),
        (".format_version", b"1"),
        (".storage_alignment", str(torch_files.STORAGE_ALIGNMENT).encode()),
        ("byteorder", b"little"),
    ]
    records += [
        (f"data/{storage.key}", _little_endian(storage.elements)) for storage in writer.named
    ]
    records += [
        ("version", b"3\n"),
        (torch_files.NUMPY_RECORD, json.dumps(numpy_values, sort_keys=True).encode()),
    ]
    torch_files.write_zip(file, _FOLDER, records)


def _little_endian(elements: np.ndarray) -> np.ndarray:
    if sys.byteorder == "big" and elements.dtype.byteorder in ("=", ">"):
        return elements.astype(elements.dtype.newbyteorder("<"))
    return elements


class _Discarded:
    """The first pass's output, which finds the tensors and is thrown away."""

    def write(self, data: Any) -> int:
        return len(data)
