"""``rg.save`` and ``rg.load``: torch's checkpoint functions, and torch's file.

:func:`save` writes the file ``torch.save`` writes (its zip format: ``archive/data.pkl``, the
pickle of the saved object, whose tensors are calls of torch's rebuild function over
references to storages; ``archive/data/0``... the storages' bytes, little-endian, aligned as
torch aligns them; ``archive/version``, ``archive/byteorder``), made without torch by
:mod:`retrograd.torch_writer`: ``torch.load`` reads what retrograd saved, under its default
``weights_only=True`` for tensors, parameters, containers, numbers, strings, devices, dtypes
and ``Size``s. Tensors that share memory share a storage (a tied weight, a view), as torch's
do. NumPy arrays (an optimizer's state) are saved as tensors (torch reads them), listed in an
entry of retrograd's own so that :func:`load` gives them back as arrays; NumPy scalars are
pickled as torch pickles them, and read as torch reads them: under ``weights_only=False``, or
once allowed (``add_safe_globals``); a default load refuses them with torch's
``pickle.UnpicklingError`` (:class:`WeightsOnlyError`).

Anything else -- a whole module (``torch.save(model, path)``), an ``argparse.Namespace`` --
is pickled by its class, as torch pickles it, and read back under torch's rule: a default
(``weights_only=True``) load refuses it, naming it, unless its classes were allowed
(``add_safe_globals``, ``safe_globals``); ``load(f, weights_only=False)`` unpickles it, for
files whose source is trusted. torch loads such a file the same way (a retrograd module
pickled whole needs retrograd to load, as a torch module needs torch).

:func:`load` reads the files :func:`save` writes, those ``torch.save`` writes (zip and legacy:
:mod:`retrograd.torch_files`), and the files earlier versions of :func:`save` wrote: an
``.npz`` archive of the arrays with the structure around them as JSON (its reader is kept, for
the files on users' disks).

>>> import io, retrograd as rg
>>> buffer = io.BytesIO()
>>> rg.save({"w": rg.tensor([1.0, 2.0]), "step": 3}, buffer)
>>> _ = buffer.seek(0)
>>> checkpoint = rg.load(buffer)
>>> checkpoint["w"].tolist(), checkpoint["step"]
([1.0, 2.0], 3)
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import pickle
import pickletools
import re
import tokenize
import zipfile
import zlib
from collections import OrderedDict
from typing import Any

import numpy as np

from . import torch_files, torch_writer
from .backend.accelerators import cuda_device_count
from .context import current_backend, thread_device
from .device import Device
from .errors import DTypeError, InvalidArgumentError, RetrogradError
from .files import atomic_write
from .tensor import Tensor, tensor
from .tensor.dtypes import DTYPE_OBJECTS, dtype

DTYPE_CLASSES = (dtype,)

__all__ = [
    "UnreadableFileError",
    "WeightsOnlyError",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "get_unsafe_globals_in_checkpoint",
    "load",
    "safe_globals",
    "save",
]


class UnreadableFileError(InvalidArgumentError, RuntimeError, pickle.UnpicklingError):
    """A file :func:`load` cannot read (damaged, truncated, or of another format than the
    ones :func:`save` and ``torch.save`` write), naming it: the :class:`InvalidArgumentError`
    of the hierarchy, the ``RuntimeError`` torch's zip reader raises there ("PytorchStreamReader
    failed reading zip archive", "Invalid magic number; corrupt file?"), and the
    ``pickle.UnpicklingError`` of its unpickler, which a training script's ``except`` around a
    checkpoint's load catches."""


class WeightsOnlyError(InvalidArgumentError, pickle.UnpicklingError):
    """A ``weights_only`` load (:func:`load`'s default, as torch's) of a file that names a
    class or function not allowed (a NumPy array or scalar pickled by NumPy, a whole module):
    torch's ``pickle.UnpicklingError`` ("Weights only load failed"), and the
    :class:`~retrograd.errors.InvalidArgumentError` retrograd raised for it before."""


_STRUCTURE = "__retrograd_structure__"
#: ``nn.Parameter`` by name (``nn`` sits above this layer): saved tensors of this class load
#: as one, rebuilt as ``Parameter(tensor, requires_grad)``
_PARAMETER = ("retrograd.nn.parameter", "Parameter")
#: The format a file :func:`save` writes names in its structure entry: ``<name>/<version>``;
#: a later version of the library that changes what it writes raises the version, and this
#: one refuses a file of a higher one as written by a newer retrograd, not as damaged
_FORMAT_NAME = "retrograd-save"
_FORMAT_VERSION = 1
_FORMAT = f"{_FORMAT_NAME}/{_FORMAT_VERSION}"


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: Any = 2,
         _use_new_zipfile_serialization: bool = True) -> None:  # fmt: skip
    """Write ``obj`` (tensors, arrays, numbers, strings, containers of them, or any object
    pickle takes) to ``f``, a path or a binary file object, as ``torch.save`` writes it: a
    file ``torch.load`` reads (see the module). A path is written whole or not at all."""
    if pickle_module is not None and pickle_module is not pickle:
        raise InvalidArgumentError(
            f"save: pickle_module={getattr(pickle_module, '__name__', pickle_module)!r} is not "
            "supported: rg.save writes torch's pickle with Python's own pickle module"
        )
    if not _use_new_zipfile_serialization:
        raise InvalidArgumentError(
            "save: _use_new_zipfile_serialization=False (torch's legacy format) is not "
            "written here; rg.save writes torch's zip format, which every torch since 1.6 reads"
        )
    protocol = _pickle_protocol(pickle_protocol)
    if not isinstance(f, str | os.PathLike) and not callable(getattr(f, "write", None)):
        raise DTypeError(f"save: f must be a path or a binary file object, got {type(f).__name__}")
    if isinstance(f, io.TextIOBase):
        raise DTypeError("save: the file object was opened in text mode; open it with 'wb'")
    if isinstance(f, str | os.PathLike):
        _check_path("save", f)
    archive = _Prepared()
    torch_writer.write(obj, archive, protocol)  # whole before a byte reaches the file
    if isinstance(f, str | os.PathLike):
        # Whole or not at all: a full disk or a crash midway leaves the previous file as it was.
        with atomic_write(f) as handle:
            archive.copy_to(handle)
    else:
        archive.copy_to(f)


def _pickle_protocol(protocol: Any) -> int:
    """``pickle_protocol`` checked: torch's references to storages need a binary protocol
    (1 on), and torch writes 2."""
    if protocol is None:
        return 2
    if isinstance(protocol, bool) or not isinstance(protocol, int):
        raise DTypeError(f"save: pickle_protocol must be an int, got {type(protocol).__name__}")
    if not 1 <= protocol <= pickle.HIGHEST_PROTOCOL:
        raise InvalidArgumentError(
            f"save: pickle_protocol={protocol} is not one torch's file can use: 1 to "
            f"{pickle.HIGHEST_PROTOCOL} (protocol 0 writes no references to storages; "
            "torch's default is 2)"
        )
    return protocol


class _Prepared:
    """The file's pieces, in order, as the writer gives them: written out at once when all
    are made (a save that fails midway writes nothing), without copying the storages."""

    def __init__(self) -> None:
        self.pieces: list[Any] = []

    def write(self, data: Any) -> int:
        self.pieces.append(data)
        return len(data)

    def copy_to(self, file: Any) -> None:
        for piece in self.pieces:
            view, written = memoryview(piece), 0
            while written < len(view):  # an unbuffered file may take part of it per call
                count = file.write(view[written:])
                written += len(view) - written if count is None else count


class _Reader:
    def __init__(self, archive: Any, device: Any, weights_only: bool) -> None:
        self.archive = archive
        self.device = device
        self.weights_only = weights_only
        self.made: dict[Any, Any] = {}  # by entry name (by name and class: a subclass)

    def decode(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if "class" in node:
            return self.tensor_of_class(node)
        if "complex" in node:
            return complex(*(float(part) for part in node["complex"]))
        if "tensor" in node:
            name = node["tensor"]
            if name not in self.made:
                values = self.archive[name]
                if values.dtype.kind not in "biufc":  # a damaged header: not numbers
                    raise ValueError(f"entry {name} holds {values.dtype} values, not numbers")
                self.made[name] = self.make(values, node.get("dtype"), node.get("requires_grad"))
            return self.made[name]
        if "ndarray" in node:
            name = node["ndarray"]
            if name not in self.made:
                self.made[name] = np.array(self.archive[name])
            return self.made[name]
        if "npscalar" in node:
            return np.asarray(self.archive[node["npscalar"]]).astype(node["kind"])[()]
        if "float" in node:
            return float(node["float"])
        if "pickle" in node:
            return self.unpickle(node)
        if "device" in node:
            return Device(node["device"])
        if "dtype_name" in node:
            return DTYPE_OBJECTS[node["dtype_name"]]
        if "dict" in node:
            pairs = [(self.key(k), self.decode(v)) for k, v in node["dict"]]
            if not node.get("ordered"):
                return dict(pairs)
            ordered = OrderedDict(pairs)
            if "metadata" in node:
                ordered._metadata = self.decode(node["metadata"])  # type: ignore[attr-defined]
            return ordered
        if "list" in node:
            return [self.decode(v) for v in node["list"]]
        if "tuple" in node:
            return tuple(self.decode(v) for v in node["tuple"])
        if "set" in node:
            return {self.decode(v) for v in node["set"]}
        if "frozenset" in node:
            return frozenset(self.decode(v) for v in node["frozenset"])
        raise InvalidArgumentError(f"load: unknown entry {sorted(node)} in the file")

    def make(self, values: np.ndarray, dtype: str | None, requires_grad: Any,
             location: str = "cpu") -> Tensor:  # fmt: skip
        """A tensor of the file's ``values``, where ``map_location`` puts it (a function
        ``map_location`` is given the ``location`` torch saved it from)."""
        try:
            made = tensor(
                values, dtype=dtype, device=None if callable(self.device) else self.device
            )
        except DTypeError as error:  # a half-precision tensor on the NumPy backend
            raise DTypeError(
                f"load: cannot make the file's {dtype or values.dtype} tensors here: {error}"
            ) from None
        out = _relocated(self.device, made, location) if callable(self.device) else made
        if requires_grad:
            out.require_grad()
        return out

    def tensor_of_class(self, node: dict[str, Any]) -> Any:
        """The tensor of ``node`` as the class it was saved as (``Parameter(tensor,
        requires_grad)``), once per saved object: a parameter saved under two names loads
        as one."""
        module, name = node["class"]
        made_as = (node["tensor"], module, name)
        if made_as not in self.made:
            if self.weights_only:
                try:
                    kind = _allowed_global(module, name)
                except pickle.UnpicklingError as error:
                    raise WeightsOnlyError(
                        f"load: Weights only load failed: the file holds a tensor of class "
                        f"{module}.{name}, and weights_only=True (the default, as in torch) "
                        f"rebuilds only allowed classes ({error}); if you trust the file's "
                        "source, load it with weights_only=False, or allow its class with "
                        "rg.serialization.add_safe_globals([...])"
                    ) from None
            else:
                kind = _global(module, name)
            plain = self.decode({key: value for key, value in node.items() if key != "class"})
            self.made[made_as] = kind(plain, bool(node.get("requires_grad")))
        return self.made[made_as]

    def unpickle(self, node: dict[str, Any]) -> Any:
        data = self.archive[node["pickle"]].tobytes()
        if not self.weights_only:
            return _TensorUnpickler(io.BytesIO(data), self).load()
        try:
            return _AllowedOnly(io.BytesIO(data), self).load()
        except pickle.UnpicklingError as error:
            raise WeightsOnlyError(
                f"load: Weights only load failed: the file holds a pickled {node['type']} at "
                f"{node['at']}, and "
                f"weights_only=True (the default, as in torch) rebuilds only allowed classes "
                f"({error}); if you trust the file's source, load it with "
                "weights_only=False, or allow its classes with "
                "rg.serialization.add_safe_globals([...])"
            ) from None

    def key(self, node: Any) -> Any:
        if "key" in node:
            return node["key"]
        if "npkey" in node:
            return np.dtype(node["kind"]).type(node["npkey"])
        return tuple(self.key(k) for k in node["tuple"])


def _one_target(mapping: dict) -> Any:
    """The device a dict ``map_location`` sends tensors to (torch's DDP idiom
    ``{"cuda:0": f"cuda:{rank}"}``): tensors load on one device here, whatever device they
    were saved from, so the dict must name one target (CPU devices are one: the CPU)."""
    targets = {Device(v) if isinstance(v, str | Device) else v for v in mapping.values()}
    kinds = {getattr(t, "kind", getattr(t, "type", None)) for t in targets}
    if not targets:
        return None
    if kinds == {"cpu"}:
        return "cpu"
    if len(targets) > 1:
        raise InvalidArgumentError(
            f"load: map_location {mapping!r} names several target devices; tensors load on "
            "one device here (name one, e.g. map_location=f'cuda:{rank}')"
        )
    return targets.pop()


def _check_computes_on(device: Device, map_location: Any) -> None:
    """Refuse a target device whose kind no backend here computes on (torch's ``"meta"``
    tensors hold no data, its ``"mps"`` and ``"xpu"`` need their hardware); CUDA is checked
    where the tensors are made, against the backend."""
    if device.kind == "cuda":
        return
    backend = current_backend()
    computes_on = (thread_device.get() or getattr(backend, "default_device", None) or device).kind
    if device.kind != computes_on:
        raise InvalidArgumentError(
            f"load: map_location={map_location!r} names a {device.kind} device, which "
            f"{backend!r} does not compute on (it computes on {computes_on}); load on "
            "map_location='cpu'"
        )


class _FromMapLocation(Exception):  # noqa: N818 (a carrier, never seen outside)
    """An error of the user's ``map_location`` function, carried past the archive reader's
    handler of damaged files (which would report it as damage) to be raised as it is."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def _relocated(map_location: Any, out: Tensor, location: str = "cpu") -> Tensor:
    """``out`` where the function ``map_location(storage, location)`` puts it (torch's
    protocol; ``None`` keeps it where it is)."""
    try:
        moved = map_location(out, location)
    except Exception as error:
        raise _FromMapLocation(error) from None
    if moved is None:  # torch then restores it where it was saved from
        _check_saved_location(location)
        return out
    if not isinstance(moved, Tensor):
        raise DTypeError(
            f"load: map_location returned {type(moved).__name__}; a function map_location "
            "must return the storage (tensor) it was given, moved, or None"
        )
    return moved


#: The device kinds torch's load knows besides the CPU and CUDA (its ``_package_registry``):
#: a storage saved from one of them loads only where that device is, and none is a device
#: retrograd loads onto.
_OTHER_DEVICE_KINDS = ("mps", "meta", "xpu", "hpu", "mtia", "privateuseone")


def _check_saved_location(location: Any) -> None:
    """Refuse a storage's saved location where torch's load (``default_restore_location``,
    run when no ``map_location`` says where the storage goes) refuses it: a location that
    names no device is damage (a flipped bit of ``"cpu"``); a CUDA device this machine lacks,
    or a device kind retrograd does not load onto, asks for a ``map_location``."""
    if type(location) is str and location == "cpu":
        return
    if type(location) is not str:
        raise pickle.UnpicklingError(f"a storage whose saved location is {location!r}, no device")
    cuda = re.fullmatch(r"cuda(?::(0|[1-9][0-9]*))?", location)
    if cuda:
        index, count = int(cuda.group(1) or 0), cuda_device_count()
        if index < count:
            return
        present = f"{count} CUDA device(s)" if count else "no CUDA device"
        raise InvalidArgumentError(
            f"load: its tensors were saved from {location}, and this machine has {present} "
            "(as torch's load, this asks where they go): load it with map_location='cpu' (or "
            "a device that is here)"
        )
    kind = re.match(r"[a-z]+", location)
    if kind and kind.group() in _OTHER_DEVICE_KINDS:
        raise InvalidArgumentError(
            f"load: its tensors were saved from a {kind.group()} device ({location!r}), which "
            "retrograd does not load onto: load it with map_location='cpu'"
        )
    raise pickle.UnpicklingError(
        f"a storage whose saved location is {location!r}, which names no device"
    )


def load(f: Any, map_location: Any = None, pickle_module: Any = None, *,
         weights_only: Any = None, mmap: Any = None, **pickle_load_args: Any) -> Any:  # fmt: skip
    """Read what :func:`save` wrote (``f``: a path or a binary file object). Tensors are made
    on the current backend, on ``map_location`` when it names a device (``"cpu"``,
    ``rg.device(...)``, a torch device, or a dict whose values name one device, as DDP
    scripts' ``{"cuda:0": f"cuda:{rank}"}``), or where a function ``map_location(storage,
    location)`` puts them, as torch's: it is given each tensor (on the CPU, location
    ``"cpu"``) and returns it, moved (``storage.cuda(rank)``), or ``None`` to keep it. A
    device no backend here computes on (``"meta"``, ``"mps"``...) is refused. As torch's,
    a file saved from a CUDA device this machine lacks needs a ``map_location`` (it is
    refused without one), and a storage whose saved location names no device (damage) is
    refused where no ``map_location`` replaces it.
    A file ``torch.save`` wrote loads as torch loads it; an ``.npz`` of arrays
    (``Module.save``) as a dict of arrays; a bare pickle is refused with an error that says so."""
    device, unmapped = None, map_location is None
    # a dict moves only the storages saved from one of its keys (torch's), in a torch file
    by_location = dict(map_location) if isinstance(map_location, dict) else None
    if callable(map_location) and not isinstance(map_location, Device):
        device = map_location  # (the reader calls it with each tensor)
    elif map_location is not None:
        given = map_location
        try:
            if isinstance(map_location, dict):
                map_location = _one_target(map_location)
            kind = getattr(map_location, "type", None)
            device = (
                Device(kind, getattr(map_location, "index", None) or 0)
                if isinstance(kind, str) and not isinstance(map_location, Device)
                else Device(map_location)
            )
        except (InvalidArgumentError, TypeError) as error:  # the device parser's: say whose
            if str(error).startswith("load: "):
                raise
            raise InvalidArgumentError(
                f"load: map_location={given!r} is none of torch's forms (a device, a device "
                f"string such as 'cpu' or 'cuda:0', a dict of them, or a function): {error}"
            ) from None
        if device.kind == "cpu":
            device = None
        else:
            _check_computes_on(device, map_location)
    if not hasattr(f, "read") and not isinstance(f, str | bytes | os.PathLike):
        raise DTypeError(f"load: f must be a path or a binary file object, got {type(f).__name__}")
    if isinstance(f, str | bytes | os.PathLike):
        _check_path("load", f)
    name = repr(os.fspath(f)) if isinstance(f, str | bytes | os.PathLike) else "the file object"
    if hasattr(f, "read"):
        start = _position(f)
        data = b"" if isinstance(f, io.TextIOBase) else f.read()  # text: decoding would fail
        if isinstance(f, io.TextIOBase) or not isinstance(data, bytes):
            raise DTypeError(f"load: {name} was opened in text mode; open it with 'rb'")
        data = _first_archive(data)
        if start is not None:  # after what was read, as a pickle's load leaves its file
            f.seek(start + len(data))
        legacy = _check_magic(name, data[:16])
        return _load_archive(
            io.BytesIO(data), name, device, weights_only is not False, legacy, by_location, unmapped
        )
    with open(f, "rb") as handle:  # a missing file stays FileNotFoundError, as in torch
        legacy = _check_magic(name, handle.read(16))
        handle.seek(0)
        return _load_archive(
            handle, name, device, weights_only is not False, legacy, by_location, unmapped
        )


def _check_path(op: str, f: str | bytes | os.PathLike) -> None:
    """Refuse a path no file can have, before ``open`` does it in its own words: an empty
    one to save (it said "Is a directory: '.'"), one with a NUL byte ("embedded null byte",
    naming nothing: an ``InvalidArgumentError`` is the ``ValueError`` it was), and bytes
    that are a file's contents rather than its name."""
    path = os.fspath(f)
    if isinstance(path, bytes) and path.startswith((b"PK\x03\x04", b"\x80", b"\x93NUMPY")):
        raise DTypeError(
            f"{op}: f is bytes holding a file's contents ({path[:8]!r}...), not a path; pass "
            "io.BytesIO(data) to read them"
        )
    if not path and op == "save":  # (load's stays FileNotFoundError, as torch's)
        raise InvalidArgumentError(f"{op}: f is an empty path; give the file's name")
    if ("\0" if isinstance(path, str) else b"\0") in path:
        raise InvalidArgumentError(
            f"{op}: the path {path!r} holds a NUL byte, which no file name can hold"
        )


def _load_archive(source: Any, name: str, device: Any, weights_only: bool, legacy: bool,
                  by_location: dict | None = None, unmapped: bool = False) -> Any:  # fmt: skip
    if legacy or _is_torch_zip(source):
        return _load_torch_file(source, name, device, weights_only, legacy, by_location, unmapped)
    try:
        archive = np.load(source, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):  # a single .npy array
            return np.array(archive)
        with archive:
            _check_entries(source, archive, name)
            return _read(archive, name, device, weights_only)
    except _FromMapLocation as carried:
        raise carried.error from None
    except RetrogradError:
        raise
    except ARCHIVE_DAMAGE as error:
        raise UnreadableFileError(
            f"load: {name} is damaged, truncated or not a file rg.save wrote ({_text(error)})"
        ) from None


def _is_torch_zip(source: Any) -> bool:
    """Whether ``source`` (seekable, at its start) is a zip of torch's format; a damaged zip
    is left to the archive reader's errors."""
    try:
        with zipfile.ZipFile(source) as archive:
            return torch_files.is_torch_zip(archive.namelist())
    except ARCHIVE_DAMAGE:
        return False
    finally:
        source.seek(0)


def saved_by(path: Any) -> str | None:
    """Which ``save`` wrote ``path`` (a path or a seekable binary file, left where it was):
    ``"torch"`` (torch's format: ``torch.save``'s, and :func:`save`'s since it writes
    torch's), ``"retrograd"`` (the ``.npz`` format earlier versions of :func:`save` wrote), or
    ``None`` for anything else (an ``.npz`` of arrays, a damaged or foreign file)."""
    try:
        with contextlib.ExitStack() as stack:
            if hasattr(path, "read"):
                start = path.tell()
                stack.callback(path.seek, start)
                source = path
            else:
                start = 0
                source = stack.enter_context(open(path, "rb"))
            head = source.read(len(_LEGACY_START))
            if head == _LEGACY_START:
                return "torch"
            if not head.startswith(b"PK\x03\x04"):
                return None
            source.seek(start)
            with zipfile.ZipFile(source) as archive:  # reads the directory only
                names = archive.namelist()
    except ARCHIVE_DAMAGE:
        return None
    if torch_files.is_torch_zip(names):
        return "torch"
    return "retrograd" if f"{_STRUCTURE}.npy" in names else None


def _load_torch_file(source: Any, name: str, device: Any, weights_only: bool, legacy: bool,
                     by_location: dict | None = None, unmapped: bool = False) -> Any:  # fmt: skip
    """What a file ``torch.save`` wrote holds (see :mod:`retrograd.torch_files`); a dict
    ``map_location`` (``by_location``) moves the storages saved from its keys' locations,
    and leaves the others where tensors load by default, as torch's does. ``unmapped``: no
    ``map_location`` was given (each storage's saved location must then name a device)."""
    moved, unmoved = _Reader(None, device, weights_only), _Reader(None, None, weights_only)

    def make(values: np.ndarray, dtype: str, requires_grad: bool, location: Any) -> Tensor:
        # torch checks the saved location only where no map_location replaces it: none given,
        # a dict without it, or a function that returns None (``_relocated``)
        mapped = by_location is not None and type(location) is str and location in by_location
        if (by_location is not None and not mapped) or (by_location is None and unmapped):
            _check_saved_location(location)
        reader = unmoved if by_location is not None and not mapped else moved
        return reader.make(values, dtype, requires_grad, location)

    def parameter_of(made: Any, requires_grad: bool) -> Any:
        return _global(*_PARAMETER)(made, requires_grad)

    def view_of(base: Tensor, size: tuple, stride: tuple, offset: int,
                requires_grad: bool) -> Tensor:  # fmt: skip
        """A view of a storage's tensor, sharing its memory (torch's loaded views do), with
        the strides and offset torch saved: a leaf, as torch's loaded tensors are."""
        made = base.as_strided(size, stride, offset).detach()
        if requires_grad:
            made.require_grad()
        return made

    def subclass_of(made: Tensor, kind: Any) -> Any:
        """A tensor of a user's ``Tensor`` subclass (rg.save names its class)."""
        if isinstance(kind, type) and issubclass(kind, Tensor):
            return made.as_subclass(kind)
        return None

    find_class = _allowed_global if weights_only else _importable_global
    try:
        if legacy:
            return torch_files.read_legacy(source.read(), make, parameter_of, find_class, view_of)
        with zipfile.ZipFile(source) as archive:
            shortfall = hidden_entries(source, archive)
        if shortfall:  # a damaged directory: the entries after the damage are missing
            raise zipfile.BadZipFile(shortfall)
        source.seek(0)
        return torch_files.read_zip(source, make, parameter_of, find_class, subclass_of, view_of)
    except _FromMapLocation as carried:
        raise carried.error from None
    except RetrogradError as error:
        # (a tensor this backend cannot hold: the error says which, this says where)
        said = str(error).removeprefix("load: ")
        raise type(error)(f"load: {name} (a torch file): {said}") from None
    except torch_files.Unsupported as error:  # refused by what it is, whatever weights_only
        raise error.error_class(f"load: {name} is a torch file holding {error}") from None
    except _NotAllowed as error:
        raise WeightsOnlyError(
            f"load: Weights only load failed: {name} is a torch file whose pickle names a "
            f"class not allowed ({error}): "
            "weights_only=True (the "
            "default, as in torch) rebuilds only tensors, containers and allowed classes; if "
            "you trust the file's source, load it with weights_only=False, or allow its "
            "classes with rg.serialization.add_safe_globals([...])"
        ) from None
    except pickle.UnpicklingError as error:  # (the pickle's damage, or an import that fails)
        raise UnreadableFileError(
            f"load: {name} is a torch file, damaged or not readable here ({error})"
        ) from None
    except ARCHIVE_DAMAGE as error:
        raise UnreadableFileError(
            f"load: {name} is a torch file, damaged or truncated ({_text(error)})"
        ) from None


def _importable_global(module: str, name: str) -> Any:
    """``weights_only=False``: any class or function the file names, imported."""
    try:
        return _global(module, name)
    except (ImportError, AttributeError) as error:
        raise pickle.UnpicklingError(
            f"{module}.{name}, which cannot be imported ({error})"
        ) from None


#: What NumPy, zipfile and json raise on a damaged archive (read lazily, entry by entry):
#: zipfile's NotImplementedError and RuntimeError come from a flipped bit in a header that
#: then claims a compression method, an encryption or a zip version; NumPy's header parser
#: raises tokenize's and ast's errors on a damaged header, MemoryError on a shape damaged
#: into a size no machine holds. Every reader of ``.npz`` files catches these
#: (``Module.load_state_dict``, the command line's checkpoints).
ARCHIVE_DAMAGE = (
    ValueError,
    OSError,
    EOFError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    OverflowError,
    MemoryError,
    SyntaxError,
    NotImplementedError,
    RuntimeError,
    tokenize.TokenError,
    zipfile.BadZipFile,
    zlib.error,
    pickle.UnpicklingError,
)


def _check_entries(source: Any, archive: Any, name: str) -> None:
    """Refuse an archive whose directory hides entries (:func:`hidden_entries`)."""
    shortfall = hidden_entries(source, archive)
    if shortfall:
        raise UnreadableFileError(
            f"load: {name} is damaged, truncated or not a file rg.save wrote ({shortfall})"
        )


def hidden_entries(source: Any, archive: Any) -> str | None:
    """What is wrong when an opened archive's directory lists fewer entries than its end
    record counts (``None`` when they agree): zipfile reads a damaged entry's comment length
    as is, and a comment that runs to the end of the directory swallows the entries after it
    without an error (a dict with keys missing would be loaded). ``source``: the archive's
    seekable binary file."""
    source.seek(0, os.SEEK_END)
    if source.tell() < _END_RECORD:
        return None
    source.seek(-_END_RECORD, os.SEEK_END)
    end = source.read(_END_RECORD)
    if end[:4] != b"PK\x05\x06":  # an archive comment of its own: nothing to compare
        return None
    entries = getattr(archive, "zip", archive).infolist()  # (an .npz's zip, or a zip)
    counted, listed = int.from_bytes(end[10:12], "little"), len(entries)
    if counted == 0xFFFF and source.tell() >= _END_RECORD + _ZIP64_LOCATOR:
        # zip64's count, in its own end record, which the locator before this one finds
        source.seek(-_END_RECORD - _ZIP64_LOCATOR, os.SEEK_END)
        locator = source.read(_ZIP64_LOCATOR)
        if locator[:4] == b"PK\x06\x07":
            source.seek(int.from_bytes(locator[8:16], "little") + 32)
            counted = int.from_bytes(source.read(8), "little")
    if counted == listed:
        return None
    return f"its directory lists {listed} entries, its end record counts {counted}"


def _position(f: Any) -> int | None:
    """Where the file object ``f`` is, when it can seek (``None``: a pipe, a socket)."""
    try:
        return f.tell() if f.seekable() else None
    except (AttributeError, OSError, ValueError):
        return None


def _first_archive(data: bytes) -> bytes:
    """The first zip archive of ``data`` (read from a file object's position to its end),
    without what follows it: two ``save`` calls into one stream hold two archives, and a zip
    reader, which finds the directory from the end, would load the last one where the first
    was asked for. The first archive ends at the first end record whose directory (offset
    plus size, from the archive's start) ends just before it; ``data`` as it is when none
    does (zip64, a damaged or foreign file: left to the readers' errors)."""
    if not data.startswith(b"PK\x03\x04"):
        return data
    at = data.find(b"PK\x05\x06")
    while at != -1 and at + _END_RECORD <= len(data):
        size = int.from_bytes(data[at + 12 : at + 16], "little")
        offset = int.from_bytes(data[at + 16 : at + 20], "little")
        directory_end = at
        locator = at - _ZIP64_LOCATOR
        if locator >= 0 and data[locator : locator + 4] == b"PK\x06\x07":
            # zip64 (torch writes it): the directory ends at zip64's own end record, which
            # the locator points to, and that record holds the directory's size and offset
            directory_end = int.from_bytes(data[locator + 8 : locator + 16], "little")
            record = data[directory_end : directory_end + 56]
            if len(record) == 56 and record[:4] == b"PK\x06\x06":
                size = int.from_bytes(record[40:48], "little")
                offset = int.from_bytes(record[48:56], "little")
        end = at + _END_RECORD + int.from_bytes(data[at + 20 : at + 22], "little")
        if offset + size == directory_end and end <= len(data):
            return data[:end]
        at = data.find(b"PK\x05\x06", at + 1)
    return data


#: The size of a zip's end-of-central-directory record without an archive comment.
_END_RECORD = 22
#: The size of zip64's locator of its end record (just before the end record).
_ZIP64_LOCATOR = 20


def _text(error: BaseException) -> str:
    """An error's message, or its class where it has none (zlib's and the zip reader's
    ``EOFError()`` of a file cut short while it was read: "damaged or truncated ()")."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    if text:
        return text
    return "EOFError: the data ended early" if isinstance(error, EOFError) else type(error).__name__


def _check_magic(name: str, data: bytes) -> bool:
    """An error naming what ``data`` is, unless it starts as an ``.npz`` (a zip), an ``.npy``
    or a legacy torch file (``True``: torch's pickled magic number)."""
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")):
        return False
    if data.startswith(_LEGACY_START):
        return True
    if not data:
        what = "it is empty"
    elif data[:1] == b"\x80":
        what = "it is a pickle, not a torch file's (no torch magic number), never read here"
    else:
        what = f"it starts with {data[:8]!r}, not an .npz archive's bytes"
    raise UnreadableFileError(
        f"load: {name} is neither a file rg.save wrote nor one torch.save wrote ({what}); "
        "truncated, or another format"
    )


#: How a legacy torch file starts: pickle protocol 2, then its magic number as a long.
_LEGACY_START = b"\x80\x02\x8a\x0a" + torch_files.LEGACY_MAGIC.to_bytes(10, "little")


def foreign_entries(archive: Any) -> list[str]:
    """The entries of an opened ``.npz`` archive that are not NumPy arrays: NumPy hands such
    an entry out as its raw bytes, where an array was expected (a zip of other files; torch's
    own format, whose ``data.pkl`` is a pickle)."""
    return [entry for entry in archive.zip.namelist() if not entry.endswith(".npy")]


def _read(archive: Any, name: str, device: Any, weights_only: bool) -> Any:
    if _STRUCTURE not in archive.files:
        if foreign_entries(archive):
            raise UnreadableFileError(
                f"load: {name} is not a file rg.save or torch.save wrote (a zip of other "
                "entries than NumPy arrays, and not torch's format)"
            )
        return {entry: np.array(archive[entry]) for entry in archive.files}
    structure = json.loads(str(archive[_STRUCTURE]))
    if not isinstance(structure, dict):
        raise InvalidArgumentError(f"load: {name} has no saved object in its structure entry")
    _check_format(structure, name)  # (first: a newer format may lay out the rest otherwise)
    if "object" not in structure:
        raise InvalidArgumentError(f"load: {name} has no saved object in its structure entry")
    return _Reader(archive, device, weights_only).decode(structure["object"])


def _check_format(structure: Any, name: str) -> None:
    """Refuse a structure entry of another format than :data:`_FORMAT`: one of a higher
    version as written by a newer retrograd (saying both versions), anything else as an
    unknown format."""
    given = structure.get("format")
    if given == _FORMAT:
        return
    prefix, _, version = given.partition("/") if isinstance(given, str) else ("", "", "")
    if prefix == _FORMAT_NAME and version.isdigit() and int(version) > _FORMAT_VERSION:
        raise InvalidArgumentError(
            f"load: {name} was written by a newer retrograd than this one (its format "
            f"{int(version)} > {_FORMAT_VERSION}, the newest this version reads); load it "
            "with that version of retrograd or a later one"
        )
    raise InvalidArgumentError(
        f"load: {name} has an unknown format {given!r}, and this retrograd reads "
        f"{_FORMAT!r}: a file of another version of retrograd (load it there and save its "
        "tensors again), or a damaged one"
    )


#: Classes and functions a ``weights_only`` load may rebuild from a pickled entry.
_SAFE_GLOBALS: list[Any] = []


#: What torch's ``weights_only`` load allows without being told (its ``torch.nn.Parameter``,
#: ``OrderedDict``, ``Counter``, devices and dtypes): retrograd's, by name (``nn`` sits above
#: this layer).
_ALLOWED_BY_DEFAULT = {
    _PARAMETER,
    ("collections", "OrderedDict"),
    ("collections", "Counter"),  # (MultiStepLR's milestones, as torch keeps them)
    ("retrograd.device", "Device"),
    ("retrograd.tensor.dtypes", "dtype"),
}


class _TensorUnpickler(pickle.Unpickler):
    """``pickle`` reading :class:`_TensorPickler`'s references back as the file's tensors."""

    def __init__(self, file: Any, reader: _Reader) -> None:
        super().__init__(file)
        self.reader = reader

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "tensor"):
            raise pickle.UnpicklingError(f"unknown reference {pid!r} in a pickled entry")
        _, name, dtype_name, requires_grad = pid
        return self.reader.decode(
            {"tensor": name, "dtype": dtype_name, "requires_grad": requires_grad}
        )


class _AllowedOnly(_TensorUnpickler):
    """An unpickler that rebuilds only the allowed classes (torch's ``weights_only``)."""

    def find_class(self, module: str, name: str) -> Any:
        return _allowed_global(module, name)


def _allowed_global(module: str, name: str) -> Any:
    """The class or function ``module.name`` if a ``weights_only`` load may rebuild it."""
    for allowed in _SAFE_GLOBALS:
        if _safe_name(allowed) == f"{module}.{name}":
            return allowed[0] if isinstance(allowed, tuple) else allowed
    if (module, name) in _ALLOWED_BY_DEFAULT:
        return _global(module, name)
    raise _NotAllowed(f"{module}.{name} is not allowed")


class _NotAllowed(pickle.UnpicklingError):
    """A global a ``weights_only`` load does not rebuild (not a damaged pickle's error)."""


def _safe_name(allowed: Any) -> str:
    """The ``"module.name"`` an entry of the allow-list allows: an object's own, or the name
    given with it (torch's ``(obj, "module.name")`` form, for an object pickled by another
    name than its own)."""
    if isinstance(allowed, tuple):
        return allowed[1]
    return f"{allowed.__module__}.{allowed.__qualname__}"


def _global(module: str, qualname: str) -> Any:
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


class safe_globals:  # noqa: N801 (torch's name)
    """torch's allow-list, for a block: the classes a ``weights_only`` load may rebuild
    from a file's pickled entries."""

    def __init__(self, safe_globals: list[Any]):
        self.safe_globals = list(safe_globals)

    def __enter__(self) -> None:
        self.before = list(_SAFE_GLOBALS)
        add_safe_globals(self.safe_globals)

    def __exit__(self, *exc: Any) -> None:
        _SAFE_GLOBALS[:] = self.before


def add_safe_globals(safe_globals: list[Any]) -> None:
    """Allow these classes and functions in ``weights_only`` loads (torch's)."""
    if not isinstance(safe_globals, list | tuple):
        raise DTypeError(
            f"add_safe_globals: expected a list of classes and functions, got "
            f"{type(safe_globals).__name__}"
        )
    for entry in safe_globals:
        named = len(entry) == 2 and isinstance(entry[1], str) if isinstance(entry, tuple) else True
        if not named or not (isinstance(entry, tuple) or hasattr(entry, "__qualname__")):
            raise DTypeError(
                "add_safe_globals: each entry is a class or function, or a pair (object, "
                f"'module.name') of one and the name it is pickled by; got {entry!r}"
            )
    _SAFE_GLOBALS.extend(g for g in safe_globals if g not in _SAFE_GLOBALS)


def get_safe_globals() -> list[Any]:
    return list(_SAFE_GLOBALS)


def clear_safe_globals() -> None:
    """Forget every class and function :func:`add_safe_globals` allowed (torch's)."""
    _SAFE_GLOBALS.clear()


def get_unsafe_globals_in_checkpoint(f: Any) -> list[str]:
    """torch's list of the classes and functions (``"module.name"``) a checkpoint's pickled
    entries would have :func:`load` rebuild beyond the allowed ones: ``[]`` for a file of
    tensors, arrays and containers. A file :func:`load` refuses is refused the same way."""
    if not hasattr(f, "read") and not isinstance(f, str | bytes | os.PathLike):
        raise DTypeError(  # open(an int) would read that file descriptor
            "get_unsafe_globals_in_checkpoint: f must be a path or a binary file object, "
            f"got {type(f).__name__}"
        )
    if hasattr(f, "read"):
        data = f.read()
    else:
        with open(f, "rb") as handle:
            data = handle.read()
    allowed = {_safe_name(g) for g in _SAFE_GLOBALS}
    allowed |= {f"{module}.{name}" for module, name in _ALLOWED_BY_DEFAULT}
    names: list[str] = []
    legacy = data.startswith(_LEGACY_START)
    if legacy or _is_torch_zip(io.BytesIO(data)):  # torch's file: what its pickle names
        try:
            pickled = torch_files.object_pickle(io.BytesIO(data), legacy)
            found = _globals_in(pickled)
        except ARCHIVE_DAMAGE as error:
            raise UnreadableFileError(
                f"get_unsafe_globals_in_checkpoint: a torch file, damaged or truncated "
                f"({_text(error)})"
            ) from None
        allowed |= torch_files.ALLOWED
        for name in found:
            name = name.replace("__builtin__.", "builtins.", 1)
            if name not in allowed and name not in names:
                names.append(name)
        return names
    load(io.BytesIO(data), weights_only=False)  # load's errors for what is not ours
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        structure = json.loads(str(archive[_STRUCTURE])) if _STRUCTURE in archive.files else {}
        for entry, tensor_class in _pickled_entries(structure.get("object")):
            found = [tensor_class] if entry is None else _globals_in(archive[entry].tobytes())
            for name in found:
                if name not in allowed and name not in names:
                    names.append(name)
    return names


def _pickled_entries(node: Any) -> list[tuple[str | None, str]]:
    """The pickled entries under ``node`` (``(entry, "")``) and the classes of its tensors
    saved as a subclass (``(None, "module.name")``)."""
    if isinstance(node, dict):
        if "pickle" in node:
            return [(node["pickle"], "")]
        if "class" in node and "tensor" in node:
            return [(None, ".".join(node["class"]))]
        return [e for value in node.values() for e in _pickled_entries(value)]
    if isinstance(node, list):
        return [e for value in node for e in _pickled_entries(value)]
    return []


def _globals_in(data: bytes) -> list[str]:
    """The ``"module.name"`` of every class or function a pickle refers to, read from its
    opcodes without running it."""
    found: list[str] = []
    strings: list[str] = []
    memo: dict[int, Any] = {}
    last: Any = None
    for opcode, arg, _ in pickletools.genops(data):
        pushed = None
        if opcode.name == "GLOBAL":
            found.append(arg.replace(" ", "."))
        elif opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            pushed = arg
        elif opcode.name == "MEMOIZE":
            memo[len(memo)] = last
        elif opcode.name in ("BINGET", "LONG_BINGET", "GET"):
            pushed = memo.get(arg)
        elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.append(f"{strings[-2]}.{strings[-1]}")
        if isinstance(pushed, str):
            strings.append(pushed)
        last = pushed if opcode.name != "MEMOIZE" else last
    return found
