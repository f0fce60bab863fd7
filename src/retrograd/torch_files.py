"""The files ``torch.save`` writes, read without torch: a pretrained model's state dict or a
PyTorch script's checkpoint loads with ``rg.load`` as it does with ``torch.load``.

torch pickles the saved object with every tensor as a call of one of its rebuild functions
(``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)``) over a persistent
reference to the tensor's storage, whose bytes sit beside the pickle: in the zip's
``<archive>/data/<key>`` entries (torch's format since 1.6), or after the pickle (the
legacy format, ``_use_new_zipfile_serialization=False``). This reader unpickles with stand-ins
of its own for torch's functions and classes (:data:`_TORCH_GLOBALS`), so no code of torch
runs and torch need not be installed. As torch's ``weights_only=True`` load (its default), it
rebuilds only torch's allow-list (tensors, parameters, ``OrderedDict``, ``torch.Size``,
dtypes, devices, sets, ``Counter``, complex numbers, bytes) and what the caller's
``find_class`` allows (``add_safe_globals``); under ``weights_only=False`` the caller's
``find_class`` imports any other class the file names (an ``argparse.Namespace``, a NumPy
scalar). torch's own classes beyond the stand-ins are refused by name either way: a whole
module pickled by ``torch.save(model)`` would need torch's ``nn.Module`` internals.

What torch's allow-list holds and retrograd has nothing for -- a dtype it has no tensors of
(``torch.uint16``, the float8 ones), a sparse or quantized tensor, a bare storage -- is refused
by what it is (:class:`Unsupported`), under either ``weights_only``. A ``map_location`` dict or
function is given the location each storage was saved from, as torch's is.

Tensors of the same storage, offset, shape and strides load as one tensor (the tied weights
of a state dict, which torch saves as two views of one storage); other views of a storage
load as views of one tensor of the storage's elements (where the caller gives ``view_of``):
they share memory, with torch's strides and offsets, as torch's loaded views do. (A lazily
conjugated or negated view, and a view of no element, load as copies.)
"""

from __future__ import annotations

import _compat_pickle
import io
import json
import pickle
import pickletools
import struct
import zipfile
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .device import Device
from .errors import DTypeError, InvalidArgumentError
from .tensor.dtypes import DTYPE_OBJECTS, Size

__all__ = [
    "ALLOWED",
    "LEGACY_MAGIC",
    "NUMPY_RECORD",
    "STORAGE_DTYPES",
    "Unsupported",
    "is_torch_zip",
    "object_pickle",
    "read_legacy",
    "read_zip",
    "write_zip",
]

#: The number a legacy torch file pickles first.
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

#: torch's storage classes, by name, and the dtype of their elements.
_STORAGE_DTYPES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
    "UntypedStorage": "uint8",
}
STORAGE_DTYPES = _STORAGE_DTYPES
#: The entry of a file ``rg.save`` wrote that lists the storages of its NumPy arrays (saved
#: as tensors, which torch reads): ``{"<storage key>": "array"}``, JSON. ``rg.load`` gives
#: those back as arrays; torch ignores the entry. (The file's NumPy scalars are pickled as
#: NumPy pickles them, which a ``weights_only`` load refuses, as torch's does.)
NUMPY_RECORD = ".data/retrograd_numpy"
#: NumPy's dtype of each storage dtype's bytes (bfloat16's are read as 16-bit words).
_ELEMENTS = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": np.uint16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
    "complex64": np.complex64,
    "complex128": np.complex128,
}

#: Makes a tensor of the file's values: ``(values, dtype name, requires_grad, location) ->
#: tensor``; ``location`` is where torch saved the storage from (``"cpu"``, ``"cuda:0"``),
#: which torch's ``map_location`` dict and function are given. ``values`` may be a read-only
#: view of the file's bytes (no copy made here): the tensor copies them.
MakeTensor = Callable[[np.ndarray, str, bool, str], Any]
#: Makes a parameter of a tensor: ``(tensor, requires_grad) -> parameter``.
MakeParameter = Callable[[Any, bool], Any]
#: A tensor as an instance of a class of the caller's (a tensor subclass the file names), or
#: ``None`` when that class is none of the caller's: ``(tensor, class) -> tensor``.
MakeSubclass = Callable[[Any, Any], Any]
#: A tensor that is a view of a storage's tensor (``base``, 1-d, every element of the
#: storage), sharing its memory: ``(base, size, stride, offset, requires_grad) -> tensor``.
MakeView = Callable[[Any, tuple, tuple, int, bool], Any]
#: The class or function ``module.name`` the caller lets the file rebuild, or raises
#: ``pickle.UnpicklingError`` saying why not.
FindClass = Callable[[str, str], Any]


class Unsupported(pickle.UnpicklingError):
    """What a file holds that retrograd has nothing for (a sparse tensor, a dtype it has no
    tensors of, a whole ``nn.Module``), refused by what it is whatever ``weights_only`` says;
    ``error_class`` is the error of API.md section 7 that ``load`` raises for it."""

    def __init__(self, what: str, error_class: type[Exception] = InvalidArgumentError):
        super().__init__(what)
        self.error_class = error_class


class _StorageType:
    """A storage class the pickle names (``torch.FloatStorage``): its elements' dtype."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: str):
        self.dtype = dtype


class _Storage:
    """One storage of the file: its elements, read when a tensor first needs them."""

    __slots__ = ("dtype", "key", "location", "read", "values")

    def __init__(self, key: Any, dtype: str, read: Callable[[], np.ndarray], location: Any = "cpu"):
        self.key = key
        self.dtype = dtype
        self.read = read
        # as the file gives it (a damaged one may be no string): whether it names a device
        # is the caller's to check, and only where torch checks it (no ``map_location``)
        self.location = location
        self.values: np.ndarray | None = None

    def elements(self) -> np.ndarray:
        if self.values is None:
            self.values = self.read()
        return self.values


class _Rebuilder:
    """torch's rebuild functions and classes, as the file's pickle calls them."""

    def __init__(self, tensor_of: MakeTensor, parameter_of: MakeParameter,
                 numpy_values: dict[str, str] | None = None,
                 subclass_of: MakeSubclass | None = None,
                 view_of: MakeView | None = None) -> None:  # fmt: skip
        self.tensor_of = tensor_of
        self.parameter_of = parameter_of
        self.numpy_values = numpy_values or {}
        self.subclass_of = subclass_of
        self.view_of = view_of
        self.made: dict[tuple, Any] = {}
        #: each storage's tensor (of all its elements), which the views of it share
        self.bases: dict[tuple, Any] = {}
        self.made_ids: set[int] = set()

    def tensor(self, storage: Any, offset: int, size: Any, stride: Any, requires_grad: Any = False,
               backward_hooks: Any = None, metadata: Any = None) -> Any:  # fmt: skip
        """torch's ``_rebuild_tensor_v2`` (and ``_rebuild_tensor``, which has no more than
        the first four arguments)."""
        if not isinstance(storage, _Storage):
            raise pickle.UnpicklingError(f"a tensor's storage is {type(storage).__name__}")
        size, stride = tuple(size), tuple(stride)
        # torch saves a lazily conjugated or negated view (``z.conj()``, ``z.conj().imag``) as
        # its storage plus the bit in ``metadata``, which its load applies
        bits = metadata if isinstance(metadata, dict) else {}
        conj, neg = bool(bits.get("conj")), bool(bits.get("neg"))
        key = (storage.key, storage.dtype, offset, size, stride, bool(requires_grad), conj, neg)
        made = self.made.get(key)
        if made is None:
            values = _strided(storage, offset, size, stride)
            if conj:
                values = np.conj(values)
            if neg:
                values = np.negative(values)
            if storage.key in self.numpy_values:  # a NumPy array rg.save stored as a tensor
                made = np.array(values, copy=True)
            elif self.view_of is not None and not (conj or neg) and 0 not in size:
                base_key = (storage.key, storage.dtype)
                base = self.bases.get(base_key)
                if base is None:
                    elements = storage.elements()
                    base = self.tensor_of(elements, storage.dtype, False, storage.location)
                    self.bases[base_key] = base
                made = self.view_of(base, size, stride, offset, bool(requires_grad))
            else:
                made = self.tensor_of(values, storage.dtype, bool(requires_grad), storage.location)
            self.made[key] = made
            self.made_ids.add(id(made))
        return made

    def tensor_v3(self, storage: Any, offset: int, size: Any, stride: Any, requires_grad: Any,
                  backward_hooks: Any, dtype: Any, metadata: Any = None) -> Any:  # fmt: skip
        """torch's ``_rebuild_tensor_v3``: the dtype given apart from the storage's."""
        if isinstance(storage, _Storage) and isinstance(dtype, str) and dtype != storage.dtype:
            storage = _Storage(storage.key, dtype, _reinterpreted(storage, dtype), storage.location)
        return self.tensor(storage, offset, size, stride, requires_grad, None, metadata)

    def parameter(self, data: Any, requires_grad: Any, backward_hooks: Any = None,
                  state: Any = None) -> Any:  # fmt: skip
        """torch's ``_rebuild_parameter`` and ``_rebuild_parameter_with_state``."""
        if id(data) not in self.made_ids:
            raise pickle.UnpicklingError(f"a parameter of a {type(data).__name__}")
        try:
            made = self.parameter_of(data, bool(requires_grad))
            self.made_ids.add(id(made))
        except (InvalidArgumentError, DTypeError) as error:  # an integer one requiring grad
            raise pickle.UnpicklingError(f"a parameter that cannot be one ({error})") from None
        _set_state(made, state)
        return made

    def _subclass(self, made: Any, new_type: Any) -> Any:
        if self.subclass_of is None or new_type is _TENSOR_CLASS:
            return None
        return self.subclass_of(made, new_type)

    def from_type(self, func: Any, new_type: Any, args: Any, state: Any) -> Any:
        """torch's ``_rebuild_from_type_v2``: ``func(*args)`` as ``new_type``, with the
        attributes of ``state``."""
        made = func(*args)
        if new_type is _PARAMETER_CLASS:
            made = self.parameter_of(made, True)
            self.made_ids.add(id(made))
        elif (subclass := self._subclass(made, new_type)) is not None:
            made = subclass
            self.made_ids.add(id(made))
        elif new_type is not _TENSOR_CLASS:
            kind = (
                f"{getattr(new_type, '__module__', '?')}.{getattr(new_type, '__qualname__', '?')}"
            )
            raise Unsupported(
                f"a tensor of class {kind} (a subclass of torch.Tensor), which retrograd has "
                "no class for; save it as a plain tensor (t.as_subclass(torch.Tensor))"
            )
        _set_state(made, state)
        return made


class _Skipping(_Rebuilder):
    """A first pass over a legacy file's pickle: no tensor made (no storage is read yet)."""

    def tensor(self, *args: Any) -> None:  # type: ignore[override]
        return None

    tensor_v3 = parameter = from_type = tensor  # type: ignore[assignment]


def _set_state(made: Any, state: Any) -> None:
    if not state:
        return
    if isinstance(state, tuple):  # (__dict__, __slots__ values)
        state = {k: v for part in state if isinstance(part, dict) for k, v in part.items()}
    if not isinstance(state, dict):
        raise pickle.UnpicklingError(f"a tensor's state is {type(state).__name__}")
    for name, value in state.items():
        setattr(made, name, value)


def _strided(storage: _Storage, offset: int, size: tuple, stride: tuple) -> np.ndarray:
    """The tensor's elements, a read-only view of its storage (its maker copies them); a
    view past the storage's end (a damaged file) is refused rather than read."""
    elements = storage.elements()
    if not (
        isinstance(offset, int)
        and len(size) == len(stride)
        and all(isinstance(n, int) and n >= 0 for n in (*size, *stride))
        and offset >= 0
    ):
        raise pickle.UnpicklingError(f"a tensor of size {size}, stride {stride} at offset {offset}")
    if 0 in size:
        return np.empty(size, dtype=elements.dtype)
    last = offset + sum((n - 1) * step for n, step in zip(size, stride))
    if last >= elements.size:
        raise pickle.UnpicklingError(
            f"a tensor of size {size}, stride {stride} at offset {offset} reaches element "
            f"{last} of a storage of {elements.size}"
        )
    count = int(np.prod(size, dtype=object))
    if count > max(elements.size, _MOST_REPEATED):
        # torch's expanded view repeats elements without memory; copied here, a crafted size
        # over a one-element storage would fill all memory
        raise pickle.UnpicklingError(
            f"a tensor of size {size} (stride {stride}) repeating a storage of {elements.size} "
            f"elements, {count} in all: more than retrograd copies out of a file"
        )
    item = elements.itemsize
    view = np.lib.stride_tricks.as_strided(
        elements[offset:], shape=size, strides=[step * item for step in stride], writeable=False
    )
    return view  # (read-only: the makers copy it)


#: The most elements a view that repeats its storage's (an expanded tensor) is copied into.
_MOST_REPEATED = 2**27


def _reinterpreted(storage: _Storage, dtype: str) -> Callable[[], np.ndarray]:
    def read() -> np.ndarray:
        return np.ascontiguousarray(storage.elements()).view(_ELEMENTS[dtype])

    return read


def _encoded(text: Any, encoding: Any) -> bytes:
    """``_codecs.encode``, as pickle protocol 2 writes bytes (``latin1``)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "ascii"):
        raise pickle.UnpicklingError(f"bytes encoded as {encoding!r}")
    return text.encode(encoding)


def _layout(name: Any) -> Any:
    """torch's ``serialization._get_layout``: only strided tensors are rebuilt here."""
    if name != "torch.strided":
        raise Unsupported(f"a tensor of layout {name!r}, which retrograd has no tensors of")
    return name


def _refused(kind: str) -> Callable[..., Any]:
    def refuse(*args: Any) -> Any:
        raise Unsupported(f"a {kind}, which no backend here holds")

    return refuse


def _device(*args: Any) -> Device:
    """``torch.device(...)``; a device string no device has is damage, named as such."""
    try:
        return Device(*args)
    except (InvalidArgumentError, DTypeError, TypeError, ValueError) as error:
        raise pickle.UnpicklingError(f"a device of {args!r} ({error})") from None


def _size(*args: Any) -> Size:
    if len(args) != 1 or not isinstance(args[0], list | tuple):
        raise pickle.UnpicklingError(f"a torch.Size of {args!r}")
    if not all(type(n) is int for n in args[0]):
        raise pickle.UnpicklingError(f"a torch.Size of {args[0]!r}")
    return Size(args[0])


def _bytearray(*args: Any) -> bytearray:
    """``bytearray`` as pickle writes one: of bytes, or of text and its encoding; a count (a
    crafted ``bytearray(2**31)`` would allocate gigabytes) is refused."""
    if not args:
        return bytearray()
    if len(args) == 1 and isinstance(args[0], bytes | bytearray):
        return bytearray(args[0])
    if len(args) == 2 and isinstance(args[0], str):
        return bytearray(_encoded(args[0], args[1]))
    raise pickle.UnpicklingError(f"a bytearray of {tuple(type(a).__name__ for a in args)}")


_TENSOR_CLASS = object()
_PARAMETER_CLASS = object()


class _Refused:
    """A global of torch's allow-list refused as soon as the pickle names it (a dtype is
    named, not called)."""

    def __init__(self, what: str, error_class: type[Exception] = InvalidArgumentError):
        self.what, self.error_class = what, error_class


class _Method(str):
    """A stand-in that is the :class:`_Rebuilder` method of this name."""


#: torch's functions and classes a file names, by (module, name), and their stand-ins.
_TORCH_GLOBALS: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _Method("tensor"),
    ("torch._utils", "_rebuild_tensor"): _Method("tensor"),
    ("torch._utils", "_rebuild_tensor_v3"): _Method("tensor_v3"),
    ("torch._utils", "_rebuild_parameter"): _Method("parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"): _Method("parameter"),
    ("torch._tensor", "_rebuild_from_type_v2"): _Method("from_type"),
    ("torch._utils", "_rebuild_sparse_tensor"): _refused("sparse tensor"),
    ("torch._utils", "_rebuild_qtensor"): _refused("quantized tensor"),
    ("torch._utils", "_rebuild_nested_tensor"): _refused("nested tensor"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _refused("meta tensor (no values)"),
    ("torch._utils", "_rebuild_wrapper_subclass"): _refused("tensor subclass"),
    ("torch.serialization", "_get_layout"): _layout,
    ("torch", "Size"): _size,
    ("torch", "device"): _device,
    ("torch", "Tensor"): _TENSOR_CLASS,
    ("torch._tensor", "Tensor"): _TENSOR_CLASS,
    ("torch.nn.parameter", "Parameter"): _PARAMETER_CLASS,
    **{("torch", name): dtype for name, dtype in DTYPE_OBJECTS.items()},
    **{
        (module, name): _StorageType(dtype)
        for name, dtype in _STORAGE_DTYPES.items()
        for module in ("torch", "torch.cuda", "torch.storage")
    },
}
#: What torch's ``weights_only`` load rebuilds besides its own classes.
_PLAIN_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "Counter"): Counter,
    ("builtins", "set"): set,
    ("builtins", "complex"): complex,
    ("builtins", "bytearray"): _bytearray,
    ("_codecs", "encode"): lambda text, encoding="utf-8": _encoded(text, encoding),
}


#: torch's dtypes that retrograd has no tensors of (its weights_only load allows them).
_LACKING_DTYPES = [
    *(f"uint{bits}" for bits in (1, 2, 3, 4, 5, 6, 7, 16, 32, 64)),
    *(f"int{bits}" for bits in range(1, 8)),
    *(f"bits{kind}" for kind in ("16", "1x8", "2x4", "4x2", "8")),
    *(f"float8_{kind}" for kind in ("e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0fnu")),
    *(f"q{kind}" for kind in ("int32", "int8", "uint2x4", "uint4x2", "uint8")),
    "complex32",
    "float4_e2m1fn_x2",
]
_QSCHEMES = [
    f"per_{kind}"
    for kind in (
        "channel_affine",
        "channel_affine_float_qparams",
        "channel_symmetric",
        "tensor_affine",
        "tensor_symmetric",
    )
]
_TENSOR_TYPES = ["Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte"]
_TENSOR_MODULES = ("torch", "torch.cuda", "torch.sparse", "torch.cuda.sparse")
#: The rest of torch 2.13's ``weights_only`` allow-list: allowed there, refused here by what
#: they are (retrograd has no such dtype, quantized tensor or storage object).
_REFUSED_BY_KIND: dict[tuple[str, str], Any] = {
    **{
        ("torch", name): _Refused(f"torch.{name}, a dtype retrograd has no tensors of", DTypeError)
        for name in _LACKING_DTYPES
    },
    **{
        ("torch", name): _Refused(f"torch.{name}, a scheme of quantized tensors (none here)")
        for name in _QSCHEMES
    },
    **{
        (module, f"{kind}Tensor"): _Refused(f"{module}.{kind}Tensor, a legacy tensor type")
        for kind in _TENSOR_TYPES
        for module in _TENSOR_MODULES
    },
    **{
        (module, "BoolTensor"): _Refused(f"{module}.BoolTensor, a legacy tensor type")
        for module in ("torch", "torch.cuda")
    },
    **{
        ("torch", f"{kind}Storage"): _Refused(f"torch.{kind}Storage, a quantized storage")
        for kind in ("QInt32", "QInt8", "QUInt2x4", "QUInt4x2", "QUInt8")
    },
    ("torch.storage", "TypedStorage"): _Refused("a storage object (torch.storage.TypedStorage)"),
    ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"): _refused("device-only tensor"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy"): _refused("device-only tensor"),
}
_TORCH_GLOBALS.update({k: v for k, v in _REFUSED_BY_KIND.items() if k not in _TORCH_GLOBALS})

#: The ``"module.name"`` of everything a ``weights_only`` load of a torch file rebuilds (or
#: refuses by what it is, as a sparse tensor) without being told: torch 2.13's allow-list.
ALLOWED = {f"{module}.{name}" for module, name in (*_TORCH_GLOBALS, *_PLAIN_GLOBALS)}


class _Unpickler(pickle.Unpickler):
    """The file's pickle, its torch globals as stand-ins and its storages as
    :class:`_Storage`."""

    def __init__(self, file: Any, rebuilder: _Rebuilder, find_class: FindClass,
                 storage_of: Callable[[tuple], Any]) -> None:  # fmt: skip
        super().__init__(file)
        self.rebuilder = rebuilder
        self.find_other = find_class
        self.storage_of = storage_of

    def find_class(self, module: str, name: str) -> Any:
        # protocol 2's Python 2 names (torch writes protocol 2: ``int`` is
        # ``__builtin__.long``), mapped as pickle's own ``find_class`` maps them
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        else:
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        found = _TORCH_GLOBALS.get((module, name))
        if type(found) is _Refused:
            raise Unsupported(found.what, found.error_class)
        if found is not None:
            return getattr(self.rebuilder, found) if type(found) is _Method else found
        found = _PLAIN_GLOBALS.get((module, name))
        if found is not None:
            return found
        if module == "torch" or module.startswith("torch."):
            whole = ".nn.modules." in f".{module}." or module.startswith("torch.optim")
            advice = (
                " (a whole module or optimizer, saved with torch.save(model)), which only torch "
                "rebuilds; in torch, save its state_dict() and load that"
                if whole
                else ", which only torch rebuilds; in torch, save its tensors and plain values"
            )
            raise Unsupported(f"{module}.{name}, a class of torch's own{advice}")
        return self.find_other(module, name)

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid:
            raise pickle.UnpicklingError(f"unknown reference {pid!r}")
        kind = pid[0].decode("ascii") if isinstance(pid[0], bytes) else pid[0]
        if kind == "storage":
            return self.storage_of(pid[1:])
        if kind == "module":
            raise Unsupported(
                "a whole module (saved with torch.save(model)), which only torch rebuilds; in "
                "torch, save its state_dict() and load that"
            )
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


def is_torch_zip(names: list[str]) -> bool:
    """Whether a zip's entries are torch's format (a ``data.pkl`` in one folder, or, its
    ``data.pkl`` lost, torch's other entries: ``<folder>/version``, ``<folder>/data/0``...)."""
    return any(
        name == "data.pkl"
        or name.endswith("/data.pkl")
        or name.rpartition("/")[2] in ("version", ".format_version", "byteorder")
        or (name.rpartition("/")[0].endswith("/data") and name.rpartition("/")[2].isdigit())
        for name in names
    )


def _pickle_entry(names: list[str]) -> str:
    """The ``<folder>/data.pkl`` entry, the folder being the first entry's (torch's reader
    takes the archive's name from its first entry, whose name must then be in a folder, and
    reads every record under it: a ``data.pkl`` at the top level, or in another folder, is
    refused there as here)."""
    if not names:
        raise zipfile.BadZipFile("the archive does not contain any files")
    folder, slash, _ = names[0].partition("/")
    if not slash:
        raise zipfile.BadZipFile(
            f"file in archive is not in a subdirectory: {names[0]!r} (torch's checkpoints "
            "keep every record in one folder, as 'archive/data.pkl')"
        )
    pickled = f"{folder}/data.pkl"
    if pickled not in names:
        raise pickle.UnpicklingError(
            f"no {pickled!r} entry (the pickle of the saved object) in the archive's folder "
            f"{folder!r}"
        )
    return pickled


def read_zip(source: Any, tensor_of: MakeTensor, parameter_of: MakeParameter,
             find_class: FindClass, subclass_of: MakeSubclass | None = None,
             view_of: MakeView | None = None) -> Any:  # fmt: skip
    """The object a torch zip file (``source``, seekable) holds (one ``rg.save`` wrote: its
    NumPy values as NumPy values, :data:`NUMPY_RECORD`)."""
    with zipfile.ZipFile(source) as archive:
        names = archive.namelist()
        pickled = _pickle_entry(names)
        prefix = pickled[: -len("data.pkl")]
        _check_layout(archive, prefix, names)
        _check_zip_version(archive, prefix, names)
        order = _byte_order(archive, prefix, names)
        storages: dict[str, _Storage] = {}

        def storage_of(reference: tuple) -> _Storage:
            if len(reference) != 4:
                raise pickle.UnpicklingError(
                    f"a storage reference of {len(reference) + 1} fields, not 5"
                )
            storage_type, key, location, numel = reference
            dtype = _dtype_of(storage_type)
            key = str(key)  # (the entry's name, as torch's f"data/{key}")
            if key not in storages:
                location = _location(location)

                def read() -> np.ndarray:
                    data = archive.read(f"{prefix}data/{key}")
                    return _elements(data, dtype, numel, order)

                storages[key] = _Storage(key, dtype, read, location)
            return storages[key]

        numpy_values = _numpy_values(archive, f"{prefix}{NUMPY_RECORD}", names)
        rebuilder = _Rebuilder(tensor_of, parameter_of, numpy_values, subclass_of, view_of)
        data = _checked(archive.read(pickled))
        loaded = _Unpickler(io.BytesIO(data), rebuilder, find_class, storage_of).load()
        return _no_bare_storage(loaded, rebuilder.made_ids)


#: An entry's general-purpose flag bits that torch's zip reader (miniz) refuses: encrypted,
#: patched data, strong encryption, a masked local header.
_REFUSED_FLAGS = 0x1 | 0x20 | 0x40 | 0x2000
#: what the refused flags of a zip entry say (APPNOTE 4.4.4)
_FLAG_NAMES = {
    0x1: "encrypted",
    0x20: "compressed patched data",
    0x40: "strong encryption",
    0x2000: "an encrypted central directory",
}


def _check_layout(archive: zipfile.ZipFile, prefix: str, names: list[str]) -> None:
    """Refuse a zip whose directory or records torch's reader refuses, though Python's reads
    what this reader needs of it (a flipped bit in a field nothing here reads, or in a record
    torch reads and this reader would not): one disk, its count of entries theirs, each
    entry stored (or deflated) in one folder, its sizes those of its local record, and the
    small records torch reads (``.format_version``, ``.storage_alignment``,
    ``.data/serialization_id``) readable as torch reads them."""
    archive.fp.seek(0, io.SEEK_END)
    size = archive.fp.tell()
    end = zipfile._EndRecData(archive.fp)  # (the record Python found the directory by)
    if end is None:
        raise zipfile.BadZipFile("no end of central directory record")
    disk, first_disk = end[zipfile._ECD_DISK_NUMBER], end[zipfile._ECD_DISK_START]
    here, total = end[zipfile._ECD_ENTRIES_THIS_DISK], end[zipfile._ECD_ENTRIES_TOTAL]
    if disk or first_disk or here != total or total != len(archive.infolist()):
        raise zipfile.BadZipFile(
            f"its end record says disk {disk} of {first_disk}, {here} entries of {total}, for "
            f"one disk of {len(archive.infolist())} entries"
        )
    _check_zip64_end(archive, size, end)
    # the lengths its entries' headers give (Python reads the names, extras and comments
    # from the directory's bytes alone: one running past them is cut short, not refused)
    archive.fp.seek(archive.start_dir)
    directory = archive.fp.read(end[zipfile._ECD_SIZE])
    listed = 0
    for _ in archive.infolist():
        lengths = struct.unpack("<HHH", directory[listed + 28 : listed + 34].ljust(6, b"\0"))
        listed += 46 + sum(lengths)
    if listed != len(directory):
        raise zipfile.BadZipFile(
            f"its directory's entries take {listed} bytes, its end record says {len(directory)}"
        )
    for info in archive.infolist():
        if not info.flag_bits & 0x800:  # (Python read its name as cp437; torch's, as UTF-8)
            try:
                info.filename.encode("cp437").decode("utf-8")
            except UnicodeError:
                raise zipfile.BadZipFile(f"entry {info.filename!r}'s name is not UTF-8") from None
        if prefix and not info.filename.startswith(prefix):
            raise zipfile.BadZipFile(f"entry {info.filename!r} is outside the folder {prefix!r}")
        # (a folder's entry, by its name or its MS-DOS attribute, is no record torch reads)
        folder = info.filename.endswith("/") or info.external_attr & 0x10
        if info.volume:
            raise zipfile.BadZipFile(f"entry {info.filename!r} is on disk {info.volume}")
        if info.flag_bits & _REFUSED_FLAGS:
            raise zipfile.BadZipFile(
                f"entry {info.filename!r} has flags {info.flag_bits:#x}: "
                + ", ".join(
                    what
                    for bit, what in _FLAG_NAMES.items()
                    if info.flag_bits & bit & _REFUSED_FLAGS
                )
            )
        if folder and info.file_size:
            raise zipfile.BadZipFile(
                f"entry {info.filename!r} is a folder's (attributes {info.external_attr:#x}) "
                f"with {info.file_size} bytes"
            )
        stored = info.compress_type == zipfile.ZIP_STORED
        if not (stored or info.compress_type == zipfile.ZIP_DEFLATED):
            raise zipfile.BadZipFile(
                f"entry {info.filename!r} has compression method {info.compress_type}, which "
                "torch's reader does not read (stored or deflated only)"
            )
        if (
            (stored and info.compress_size != info.file_size)
            or (info.file_size and not info.compress_size)
            or info.header_offset + 30 + info.compress_size > size
        ):
            raise zipfile.BadZipFile(
                f"entry {info.filename!r} claims {info.compress_size} stored bytes for "
                f"{info.file_size} ({'stored' if stored else 'deflated'}) at offset "
                f"{info.header_offset} of a file of {size} bytes"
            )
    for record, read in ((".format_version", bytes), (".storage_alignment", int),
                         (".data/serialization_id", lambda data: data.decode())):  # fmt: skip
        if f"{prefix}{record}" in names:
            data = archive.read(f"{prefix}{record}")
            try:
                read(data)
            except ValueError:  # (UnicodeDecodeError is one)
                raise pickle.UnpicklingError(f"its {record} record is {data[:20]!r}") from None


def _check_zip64_end(archive: zipfile.ZipFile, size: int, end: list) -> None:
    """Refuse zip64's end records (torch writes them) where fields Python's reader passes
    over are damaged as torch's reader finds them: the locator's offset of the zip64 end
    record and its count of disks, that record's size (44 bytes at least) and disk numbers."""
    locator_at = size - len(end[zipfile._ECD_COMMENT]) - 22 - 20
    archive.fp.seek(max(locator_at, 0))
    locator = archive.fp.read(20)
    if locator_at < 56 or locator[:4] != b"PK\x06\x07":
        return  # (no zip64 records)
    _, _, record_at, disks = struct.unpack("<4sIQI", locator)
    archive.fp.seek(locator_at - 56)
    record = struct.unpack("<4sQHHIIQQQQ", archive.fp.read(56))
    if (record_at != locator_at - 56 or disks != 1 or record[0] != b"PK\x06\x06"
            or record[1] < 44 or any(record[4:6])):  # fmt: skip
        raise zipfile.BadZipFile(
            f"its zip64 end record at {locator_at - 56} (of {record[1]} bytes, disks "
            f"{record[4]} and {record[5]}) is not the one its locator names ({record_at} of "
            f"{disks} disks)"
        )


#: The versions of torch's zip format that torch 2.13's reader accepts (its
#: ``kMinSupportedFileFormatVersion`` and ``kMaxSupportedFileFormatVersion``): a higher one
#: is a newer torch's, which may lay out its records otherwise.
ZIP_VERSIONS = range(1, 11)


def _check_zip_version(archive: zipfile.ZipFile, prefix: str, names: list[str]) -> None:
    """Refuse a zip whose version record (``.data/version``, else ``version``, as torch reads
    them) is missing or unreadable (damage) or out of :data:`ZIP_VERSIONS` (a newer torch's
    file), as torch's reader does: read as the format this one knows, a newer layout would
    give wrong tensors without a word."""
    record = next(
        (f"{prefix}{n}" for n in (".data/version", "version") if f"{prefix}{n}" in names), None
    )
    if record is None:
        raise pickle.UnpicklingError("no version entry (the format's version), which torch writes")
    text = archive.read(record).strip()
    try:
        version = int(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise pickle.UnpicklingError(
            f"its version entry is {text[:20]!r}, not a version number"
        ) from None
    if version > ZIP_VERSIONS[-1]:
        raise Unsupported(
            f"format version {version}, newer than the versions {ZIP_VERSIONS[0]} to "
            f"{ZIP_VERSIONS[-1]} that torch 2.13 and this retrograd read: a newer torch wrote "
            "it, in a layout that may differ (use a retrograd that reads it)"
        )
    if version < ZIP_VERSIONS[0]:
        raise pickle.UnpicklingError(
            f"its version entry is {version}, below torch's first version {ZIP_VERSIONS[0]}"
        )


def _byte_order(archive: zipfile.ZipFile, prefix: str, names: list[str]) -> str:
    """The byte order of the storages (NumPy's ``"<"`` or ``">"``): the ``byteorder``
    record's, little-endian where there is none (torch's files before it wrote one); any
    other word than ``little`` or ``big`` is damage, refused as torch refuses it."""
    if f"{prefix}byteorder" not in names:
        return "<"
    word = archive.read(f"{prefix}byteorder").strip()
    if word not in (b"little", b"big"):
        raise pickle.UnpicklingError(
            f"its byteorder entry is {word[:20]!r}, neither b'little' nor b'big'"
        )
    return ">" if word == b"big" else "<"


def _numpy_values(archive: zipfile.ZipFile, name: str, names: list[str]) -> dict[str, str]:
    """The storages of a file's NumPy values (:data:`NUMPY_RECORD`), ``{}`` where the file
    has no such entry (torch's files)."""
    if name not in names:
        return {}
    try:
        listed = json.loads(archive.read(name))
    except ValueError as error:
        raise pickle.UnpicklingError(f"its list of NumPy values is not JSON ({error})") from None
    if not isinstance(listed, dict) or not all(
        isinstance(key, str) and kind == "array" for key, kind in listed.items()
    ):
        raise pickle.UnpicklingError(f"its list of NumPy values is {listed!r}")
    return listed


def object_pickle(source: Any, legacy: bool) -> bytes:
    """The pickle of the object a torch file (``source``, seekable) holds, its storages'
    bytes left out (a legacy file's follow it, and pickle readers stop at its end)."""
    if not legacy:
        with zipfile.ZipFile(source) as archive:
            names = archive.namelist()
            return archive.read(_pickle_entry(names))
    for _ in range(3):  # the magic number, the protocol, the system's sizes
        _PlainOnly(source).load()
    return source.read()


def read_legacy(data: bytes, tensor_of: MakeTensor, parameter_of: MakeParameter,
                find_class: FindClass, view_of: MakeView | None = None) -> Any:  # fmt: skip
    """The object a legacy torch file (its bytes) holds. Its storages' bytes follow the
    object's pickle, so the pickle is read twice: once to find where they start, once to
    rebuild the tensors from them."""
    header = io.BytesIO(data)
    plain = _PlainOnly
    if plain(header).load() != LEGACY_MAGIC:
        raise pickle.UnpicklingError("no torch file's magic number")
    if plain(header).load() != _LEGACY_PROTOCOL:
        raise pickle.UnpicklingError("a legacy protocol other than 1001")
    plain(header).load()  # the saving machine's sizes: torch writes storages little-endian
    order = "<"
    start = header.tell()
    _checked(data[start:])

    # each storage as its first reference gives it (type, element count, location): torch
    # makes the storage there and reads the others' type and location no more
    first: dict[Any, tuple[str, int, Any]] = {}

    def note(reference: tuple) -> _Storage:
        storage_type, key, location, numel, _view = _legacy_reference(reference)
        dtype = _dtype_of(storage_type)
        if key not in first:
            if type(numel) not in (int, bool) or numel < 0:
                raise pickle.UnpicklingError(f"storage {key!r} of {numel!r} elements")
            first[key] = (dtype, int(numel), location)
        return _Storage(key, dtype, lambda: np.empty(0))

    _Unpickler(header, _Skipping(lambda *a: None, lambda *a: None), find_class, note).load()
    keys = plain(header).load()
    if not isinstance(keys, list):
        raise pickle.UnpicklingError("no list of storages after the object")
    values: dict[Any, np.ndarray] = {}
    for key in keys:
        if not _hashable(key) or key not in first:
            raise pickle.UnpicklingError(f"storage {key!r} is listed but never used")
        dtype, numel, _location = first[key]
        count = int.from_bytes(_exactly(header, 8), "little" if order == "<" else "big")
        if count != numel:  # (torch's "storage has wrong byte size")
            raise pickle.UnpicklingError(
                f"storage {key!r} of {numel} elements has {count} in the file"
            )
        item = np.dtype(_ELEMENTS[dtype]).itemsize
        values[key] = _elements(_exactly(header, count * item), dtype, count, order)

    def storage_of(reference: tuple) -> _Storage:
        storage_type, key, _location, _numel, view = _legacy_reference(reference)
        if key not in values:
            raise pickle.UnpicklingError(f"storage {key!r} has no values in the file")
        dtype, _numel, location = first[key]
        if view is not None:  # a storage view of old files: (key, offset, numel)
            dtype = _dtype_of(storage_type)
            view_key, offset, size = view
            whole = values[key]
            if not (type(offset) is int and type(size) is int and 0 <= offset <= offset + size
                    and offset + size <= whole.size):  # fmt: skip
                raise pickle.UnpicklingError(
                    f"a view of {size} elements at {offset} of a storage of {whole.size}"
                )
            return _Storage(
                f"{key}/{view_key}", dtype, lambda: whole[offset : offset + size], location
            )
        return _Storage(str(key), dtype, lambda: values[key], location)

    rebuilder = _Rebuilder(tensor_of, parameter_of, view_of=view_of)
    loaded = _Unpickler(io.BytesIO(data[start:]), rebuilder, find_class, storage_of).load()
    return _no_bare_storage(loaded, rebuilder.made_ids)


def _legacy_reference(reference: tuple) -> tuple:
    """A legacy file's storage reference ``(type, key, location, numel, view)``, its
    location a string where the file gave bytes (as torch decodes them)."""
    if len(reference) != 5:
        raise pickle.UnpicklingError(f"a storage reference of {len(reference) + 1} fields, not 6")
    storage_type, key, location, numel, view = reference
    if not _hashable(key):
        raise pickle.UnpicklingError(f"a storage key {key!r}")
    return storage_type, key, _location(location), numel, view


def _location(location: Any) -> Any:
    """A storage's location as torch reads it: bytes (a Python 2 file's) decoded as ASCII,
    anything else kept for the caller's check (a damaged one may be no string)."""
    if isinstance(location, bytes):
        try:
            return location.decode("ascii")
        except UnicodeDecodeError:
            raise pickle.UnpicklingError(f"a storage location {location!r}") from None
    return location


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _no_bare_storage(loaded: Any, tensors: set[int]) -> Any:
    """``loaded``, unless a storage sits in it bare (``torch.save(t.untyped_storage())``):
    retrograd has no storage objects, and the reader's own would leak out as a value."""
    seen = set(tensors)  # (a tensor's own attributes are the backend's)
    pending = [loaded]
    while pending:
        value = pending.pop()
        if isinstance(value, _Storage):
            raise Unsupported(
                f"a bare {value.dtype} storage (torch.save of a tensor's storage), which "
                "retrograd has no class for; save the tensor itself"
            )
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            pending.extend(value)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            pending.extend(vars(value).values())
    return loaded


def _checked(data: bytes) -> bytes:
    """``data``, once its pickle's opcodes are read through without running any: a damaged
    length field (a byte string of 2**60 bytes) is found here as damage, before the
    unpickler would try to allocate it."""
    for _ in pickletools.genops(data):
        pass
    return data


class _PlainOnly(pickle.Unpickler):
    """The header pickles of a legacy file: numbers, strings and containers only."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} in a legacy file's header")


def _exactly(stream: io.BytesIO, count: int) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise EOFError(f"the file ends {count - len(data)} bytes short of a storage")
    return data


def _dtype_of(storage_type: Any) -> str:
    if not isinstance(storage_type, _StorageType):
        raise pickle.UnpicklingError(f"a storage of type {storage_type!r}")
    return storage_type.dtype


def _elements(data: bytes, dtype: str, numel: Any, order: str) -> np.ndarray:
    """A storage's elements from its bytes, checked against the count the pickle gives."""
    elements = np.frombuffer(data, dtype=np.dtype(_ELEMENTS[dtype]).newbyteorder(order))
    if type(numel) not in (int, bool) or elements.size != numel:
        raise pickle.UnpicklingError(
            f"a storage of {numel} elements holds {len(data)} bytes ({elements.size} elements)"
        )
    if order != "=" and elements.dtype.byteorder not in ("=", "|"):
        elements = elements.astype(elements.dtype.newbyteorder("="))
    if dtype == "bfloat16":  # the upper half of a float32's bits
        elements = (elements.astype(np.uint32) << 16).view(np.float32)
    return elements


def refused(name: str, error: BaseException) -> InvalidArgumentError:
    """The error of a torch file ``load`` cannot rebuild (``error`` says what it holds)."""
    return InvalidArgumentError(f"load: {name} is a torch file holding {error}")


#: Where ``torch.save`` puts each entry's bytes: at a multiple of this many bytes from the
#: file's start (its ``.storage_alignment`` record), padding the local header's extra field
#: (torch maps the storages where they lie when it loads with ``mmap=True``).
STORAGE_ALIGNMENT = 64
#: From this size, offset or count on, an entry or the end record gets zip64's fields (its
#: own fields, 32 and 16 bits, then hold the marker of all ones).
_ZIP64_FROM = 0xFFFFFFFF
_ZIP64_COUNT_FROM = 0xFFFF


def write_zip(file: Any, folder: str, records: list[tuple[str, Any]]) -> None:
    """Write a zip of ``records`` (name, bytes-like) to the binary ``file`` as torch's
    writer (miniz) lays it out: each entry stored, under ``folder/``, its bytes at a multiple
    of :data:`STORAGE_ALIGNMENT` (the local header's extra field padded with a ``"FB"``
    field), zip64 fields where a size, an offset or the count needs them. Only ``write`` is
    called: a write-only stream takes it."""
    position = 0
    directory: list[bytes] = []

    def write(data: Any) -> None:
        nonlocal position
        view = memoryview(data).cast("B")
        written = 0
        while written < len(view):  # an unbuffered file may take part of it per call
            count = file.write(view[written:])
            written += len(view) - written if count is None else count
        position += len(view)

    for name, data in records:
        data = data if isinstance(data, bytes) else memoryview(data).cast("B")
        size, crc, offset = len(data), zlib.crc32(data), position
        encoded = f"{folder}/{name}".encode()
        large, far = size >= _ZIP64_FROM, offset >= _ZIP64_FROM
        local = struct.pack("<HHQQ", 1, 16, size, size) if large else b""
        padding = -(offset + 30 + len(encoded) + len(local) + 4) % STORAGE_ALIGNMENT
        local += b"FB" + struct.pack("<H", padding) + b"Z" * padding
        needed = 45 if large or far else 20
        shown = 0xFFFFFFFF if large else size
        header = (b"PK\x03\x04", needed, 0, 0, 0, 0, crc, shown, shown, len(encoded), len(local))
        write(struct.pack("<4sHHHHHIIIHH", *header) + encoded + local)
        write(data)
        wide = (struct.pack("<QQ", size, size) if large else b"") + (
            struct.pack("<Q", offset) if far else b""
        )
        central = struct.pack("<HH", 1, len(wide)) + wide if wide else b""
        entry = (b"PK\x01\x02", needed, needed, 0, 0, 0, 0, crc, shown, shown, len(encoded),
                 len(central), 0, 0, 0, 0, 0xFFFFFFFF if far else offset)  # fmt: skip
        directory.append(struct.pack("<4sHHHHHHIIIHHHHHII", *entry) + encoded + central)
    start = position
    for entry in directory:
        write(entry)
    size, count = position - start, len(directory)
    if count >= _ZIP64_COUNT_FROM or start >= _ZIP64_FROM or size >= _ZIP64_FROM:
        end64 = position
        record = (b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, start)
        write(struct.pack("<4sQHHIIQQQQ", *record))
        write(struct.pack("<4sIQI", b"PK\x06\x07", 0, end64, 1))
        count, size, start = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF
    write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, size, start, 0))
