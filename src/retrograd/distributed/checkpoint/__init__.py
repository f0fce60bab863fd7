"""torch's ``torch.distributed.checkpoint`` (DCP) for one process: :func:`save` writes a
state dict (nested dicts and lists of tensors, NumPy arrays and plain values; objects with
``state_dict``/``load_state_dict`` -- torch's ``Stateful`` -- by their state) into a folder, and
:func:`load` reads it back *in place* into the tensors of the state dict it is given, as
torch's does::

    import retrograd.distributed.checkpoint as dcp
    from retrograd.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id="ckpt/step_100")
    ...
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id="ckpt/step_100")
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)

The folder holds ``.metadata`` (JSON: each flattened key's kind, dtype and shape, and the plain
values) and ``__0_0.distcp`` (the arrays, NumPy's ``.npz``), written as a set, whole or not at
all (:class:`retrograd.files.FileSet`), each holding one token of the save (files of two saves
are refused); no pickle is read or written. It is retrograd's own
layout: torch's DCP folders (pickled metadata, torch's byte layout) are not read. Sharded
saving across ranks (FSDP, DTensor) does not exist here: each rank of retrograd's data
parallel holds the whole model, so rank 0 saving is enough.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import secrets
import tokenize
import zipfile
import zlib
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from ...autodiff import no_grad
from ...errors import DTypeError, InvalidArgumentError, KeyMismatchError, ShapeError
from ...files import FileSet
from ...tensor import Tensor, from_numpy

__all__ = [
    "FileSystemReader",
    "FileSystemWriter",
    "async_save",
    "load",
    "load_state_dict",
    "save",
    "save_state_dict",
    "state_dict",
    "stateful",
]

_METADATA = ".metadata"
#: What NumPy and zipfile raise reading a damaged or truncated ``.npz`` (a flipped header
#: bit claims a compression or zip version; NumPy parses a damaged array header with
#: ``ast``; a damaged shape asks for memory no machine holds).
_ARCHIVE_DAMAGE = (ValueError, OSError, EOFError, KeyError, IndexError, TypeError,
                   OverflowError, MemoryError, SyntaxError, NotImplementedError, RuntimeError,
                   tokenize.TokenError, zipfile.BadZipFile, zlib.error)  # fmt: skip
_DATA = "__0_0.distcp"
#: The entry of the data file holding the token its metadata holds (one save wrote both).
_PAIRING = "pairing"


class FileSystemWriter:
    """Where :func:`save` writes: the folder ``path`` (made when missing)."""

    def __init__(self, path: str | os.PathLike, single_file_per_rank: bool = True,
                 sync_files: bool = True, thread_count: int = 1,
                 per_thread_copy_ahead: int = 10_000_000, cache_staged_state_dict: bool = False,
                 overwrite: bool = True) -> None:  # fmt: skip
        self.path = Path(path)
        self.overwrite = overwrite


class FileSystemReader:
    """Where :func:`load` reads: the folder ``path`` :func:`save` wrote."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)


def _is_stateful(value: Any) -> bool:
    return (
        not isinstance(value, Tensor | np.ndarray | Mapping | list | tuple)
        and callable(getattr(value, "state_dict", None))
        and callable(getattr(value, "load_state_dict", None))
    )


def _key(prefix: str, part: Any) -> str:
    return f"{prefix}.{part}" if prefix else str(part)


def _flatten(value: Any, prefix: str, tensors: dict, plain: dict) -> None:
    """``tensors``: key -> array; ``plain``: key -> a JSON value (tuples marked)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str | int):
                raise DTypeError(
                    f"save: state dict keys must be str or int, got {k!r} at {prefix!r}"
                )
            _flatten(v, _key(prefix, k), tensors, plain)
        if not value:
            plain[prefix] = {"__empty__": "dict"}
    elif isinstance(value, list) and any(
        isinstance(v, Tensor | np.ndarray | Mapping | list) for v in value
    ):
        for i, v in enumerate(value):
            _flatten(v, _key(prefix, i), tensors, plain)
    elif prefix in tensors or prefix in plain:
        # ("a.b" and {"a": {"b": ...}} flatten to one key: one would silently replace the other)
        raise InvalidArgumentError(
            f"save: two entries of the state dict flatten to the key {prefix!r} (a key "
            "holding '.' beside a nested dict or list of the same path): rename one"
        )
    elif isinstance(value, Tensor):
        tensors[prefix] = (_array(value), str(value.dtype).removeprefix("retrograd."))
    elif isinstance(value, np.ndarray):
        if value.dtype.hasobject:  # NumPy would pickle it, and load (allow_pickle=False) fail
            raise DTypeError(
                f"save: {prefix!r} is a NumPy array of Python objects; a checkpoint holds "
                "arrays of numbers and strings (no pickle is written)"
            )
        tensors[prefix] = (np.asarray(value, order="C"), None)
    elif isinstance(value, np.generic):
        plain[prefix] = value.item()
    else:
        plain[prefix] = _plain(value, prefix)


def _array(t: Tensor) -> np.ndarray:
    t = t.detach()
    if "bfloat16" in str(t.dtype):  # NumPy has no bfloat16: kept as float32, cast back
        t = t.float()
    # (order="C", not ascontiguousarray, which makes a 0-d value, an optimizer's step, 1-d)
    return np.asarray(t.cpu().numpy(), order="C")


def _plain(value: Any, key: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_plain(v, key) for v in value]}
    if isinstance(value, list):
        return [_plain(v, key) for v in value]
    raise DTypeError(
        f"save: {key!r} holds a {type(value).__name__}; a checkpoint holds tensors, arrays, "
        "numbers, strings, None and lists/tuples/dicts of them (no pickle is written)"
    )


def _unplain(value: Any) -> Any:
    if isinstance(value, dict) and "__tuple__" in value:
        if not isinstance(value["__tuple__"], list):
            raise InvalidArgumentError(
                f"load: a tuple of the checkpoint's {_METADATA} is damaged (its items are "
                f"{value['__tuple__']!r}, not a list)"
            )
        return tuple(_unplain(v) for v in value["__tuple__"])
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    return value


def _states(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(state_dict, Mapping):
        raise DTypeError(
            f"save/load: expected a dict as state_dict, got {type(state_dict).__name__}"
        )
    return {k: (v.state_dict() if _is_stateful(v) else v) for k, v in state_dict.items()}


def _folder(checkpoint_id: Any, storage: Any, op: str) -> Path:
    if checkpoint_id is None and storage is None:
        raise InvalidArgumentError(f"{op}: give checkpoint_id (a folder) or a storage object")
    place = storage.path if checkpoint_id is None else checkpoint_id
    if not isinstance(place, str | os.PathLike):
        raise DTypeError(
            f"{op}: checkpoint_id must be a folder's path (a str or a Path), got {place!r}"
        )
    if checkpoint_id is not None and storage is not None:
        storage.path = Path(checkpoint_id)  # torch's storage.reset(checkpoint_id): it wins
    folder = Path(place)
    if folder.exists() and not folder.is_dir():
        # (open() below it said "Not a directory" of ".metadata", or mkdir "File exists")
        raise InvalidArgumentError(
            f"{op}: checkpoint_id {str(folder)!r} is a file, not a checkpoint's folder"
        )
    return folder


def _refuse_planner(planner: Any, op: str) -> None:
    if planner is not None:
        raise InvalidArgumentError(
            f"{op}: planners (how shards map to ranks) are not supported: one process holds "
            "the whole state dict here"
        )


def save(
    state_dict: Mapping[str, Any],
    *,
    checkpoint_id: str | os.PathLike | None = None,
    storage_writer: FileSystemWriter | None = None,
    planner: Any = None,
    process_group: Any = None,
    no_dist: bool = False,
) -> dict[str, Any]:
    """Write ``state_dict`` into the folder ``checkpoint_id`` (or the writer's), replacing a
    checkpoint there as a whole; returns the metadata written."""
    _refuse_planner(planner, "save")
    folder = _folder(checkpoint_id, storage_writer, "save")
    tensors: dict[str, tuple[np.ndarray, str | None]] = {}
    plain: dict[str, Any] = {}
    _flatten(_states(state_dict), "", tensors, plain)
    metadata = {
        "version": 1,
        "tensors": {
            k: {"dtype": dtype or str(a.dtype), "numpy": dtype is None, "shape": list(a.shape)}
            for k, (a, dtype) in tensors.items()
        },
        "plain": plain,
    }
    made = _missing_folders(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # one token in both files: a save killed between their two renames leaves one new, one
    # old, and load finds them unpaired (the old list of keys would name the new arrays)
    pairing = secrets.token_hex(8)
    try:
        with FileSet(folder) as files:
            with files.open(_DATA) as file:
                arrays = {f"t{i}": a for i, (a, _) in enumerate(tensors.values())}
                np.savez(file, **arrays, **{_PAIRING: np.array(pairing)})
            with files.open(_METADATA, "w") as file:
                json.dump({**metadata, "order": list(tensors), "pairing": pairing}, file)
    except BaseException:
        # a failed save (a full disk, an interrupt) leaves no empty folder behind it, which a
        # later load would take for a checkpoint that lost its files
        for made_folder in made:
            with contextlib.suppress(OSError):
                made_folder.rmdir()
        raise
    return metadata


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, deepest first."""
    missing: list[Path] = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _read(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    try:
        with open(folder / _METADATA, encoding="utf-8") as file:
            metadata = json.load(file)
    except FileNotFoundError as error:
        raise InvalidArgumentError(
            f"load: {folder} holds no checkpoint ({_METADATA} is missing)"
        ) from error
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidArgumentError(
            f"load: {folder}'s {_METADATA} is damaged, not the JSON save writes ({error})"
        ) from None
    if not (
        isinstance(metadata, dict)
        and isinstance(metadata.get("order"), list)
        and isinstance(metadata.get("plain"), dict)
    ):
        raise InvalidArgumentError(
            f"load: {folder}'s {_METADATA} is damaged or not a checkpoint's (no list of "
            "tensors and dict of plain values)"
        )
    try:
        with np.load(folder / _DATA, allow_pickle=False) as data:
            arrays = {str(k): np.array(data[f"t{i}"]) for i, k in enumerate(metadata["order"])}
            pairing = str(data[_PAIRING]) if _PAIRING in data.files else None
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"load: {folder} holds a partial checkpoint: {_METADATA} without {_DATA}"
        ) from None
    except _ARCHIVE_DAMAGE as error:  # a truncated or damaged .npz, or an entry missing
        raise InvalidArgumentError(
            f"load: {folder}'s {_DATA} is damaged, truncated or not the checkpoint's "
            f"{_METADATA} describes ({type(error).__name__}: {error})"
        ) from None
    if "pairing" in metadata and pairing != metadata["pairing"]:
        raise InvalidArgumentError(
            f"load: {folder} holds the {_METADATA} of one save and the {_DATA} of another (a "
            "save interrupted between writing the two, or files copied from two checkpoints)"
        )
    return metadata, arrays


def _load_into(container: Any, key: Any, value: Any, prefix: str, metadata: dict,
               arrays: dict, copies: list[Callable[[], None]]) -> None:  # fmt: skip
    """Check that the checkpoint holds ``value`` at ``prefix`` in a shape it takes, and add to
    ``copies`` the copy that loads it: nothing is copied until every key has been checked, so
    a load that fails (a missing key, a shape that differs) leaves the state dict as it was."""
    if isinstance(value, Mapping):
        if not value and prefix in metadata["plain"]:
            return
        for k in list(value):
            _load_into(value, k, value[k], _key(prefix, k), metadata, arrays, copies)
        return
    if isinstance(value, list) and any(
        isinstance(v, Tensor | np.ndarray | Mapping | list) for v in value
    ):
        for i, v in enumerate(value):
            _load_into(value, i, v, _key(prefix, i), metadata, arrays, copies)
        return
    if prefix in arrays:
        saved = arrays[prefix]
        if isinstance(value, Tensor | np.ndarray):
            if tuple(value.shape) != saved.shape:
                raise ShapeError(
                    f"load: {prefix!r} has shape {list(saved.shape)} in the checkpoint, "
                    f"{list(value.shape)} in the state dict"
                )
            copies.append(functools.partial(_copy_into, value, saved))
            return
        # a plain value in the state dict, an array saved
        copies.append(functools.partial(container.__setitem__, key, saved.copy()))
        return
    if prefix in metadata["plain"]:
        copies.append(
            functools.partial(container.__setitem__, key, _unplain(metadata["plain"][prefix]))
        )
        return
    raise KeyMismatchError(f"load: Missing key in checkpoint state_dict: {prefix}.")


def _copy_into(value: Tensor | np.ndarray, saved: np.ndarray) -> None:
    if isinstance(value, Tensor):
        with no_grad():
            value.copy_(from_numpy(saved))
    elif callable(getattr(value, "copy_", None)):
        value.copy_(saved)  # a module's state value: written through to the module
    else:
        np.copyto(value, saved, casting="unsafe")


def load(
    state_dict: MutableMapping[str, Any],
    *,
    checkpoint_id: str | os.PathLike | None = None,
    storage_reader: FileSystemReader | None = None,
    planner: Any = None,
    process_group: Any = None,
    no_dist: bool = False,
) -> None:
    """Read the checkpoint into ``state_dict`` in place: each tensor (and NumPy array) gets
    the saved values copied into it (shapes must agree), plain values are replaced, a
    ``Stateful`` value gets ``load_state_dict`` of its loaded state. Keys the state dict
    does not ask for are left in the checkpoint; a key it asks for that the checkpoint lacks
    raises ``KeyMismatchError``, and a shape that differs ``ShapeError``, before anything is
    copied."""
    _refuse_planner(planner, "load")
    folder = _folder(checkpoint_id, storage_reader, "load")
    metadata, arrays = _read(folder)
    states = _states(state_dict)
    copies: list[Callable[[], None]] = []
    for key, value in states.items():
        _load_into(states, key, value, str(key), metadata, arrays, copies)
    for copy in copies:
        copy()
    for key, value in state_dict.items():
        if _is_stateful(value):
            value.load_state_dict(states[key])
        else:
            state_dict[key] = states[key]


def async_save(state_dict: Mapping[str, Any], **kwargs: Any) -> Any:
    """torch's ``async_save``: here the save runs now; the ``concurrent.futures.Future``
    returned (torch's type) is done."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    try:
        future.set_result(save(state_dict, **kwargs))
    except BaseException as error:
        future.set_exception(error)
    return future


def save_state_dict(state_dict: Mapping[str, Any], storage_writer: FileSystemWriter,
                    **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    """torch's older name of :func:`save`."""
    return save(state_dict, storage_writer=storage_writer, **kwargs)


def load_state_dict(state_dict: MutableMapping[str, Any], storage_reader: FileSystemReader,
                    **kwargs: Any) -> None:  # fmt: skip
    """torch's older name of :func:`load`."""
    load(state_dict, storage_reader=storage_reader, **kwargs)


from . import state_dict, stateful  # noqa: E402 (submodules, as torch's package has them)
