"""``checkpoint.npz``, the file a GPT run saves after each evaluation and resumes from.

One ``.npz`` archive (NumPy arrays in a zip file, never pickle): the model's ``state_dict``
under ``model/NAME``, the optimizer's tensors under ``optim/NUMBER/KEY`` (torch's numbering of
parameters across the groups), and ``meta``, a JSON text with the step, the run's settings,
the corpus's name and vocabulary, the batch sampler's state, the history and the optimizer's
scalars and groups.

Reading checks all of it before anything uses it: a file that is truncated, empty, of another
format, that holds pickled objects (which could run code: they are never loaded), or whose
``meta`` lacks an entry or has one of the wrong kind is a :class:`~._usage.CommandError` that
names the file and what is wrong with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import RetrogradError
from ..serialization import ARCHIVE_DAMAGE, foreign_entries, hidden_entries
from ..tensor import Tensor
from ._usage import CommandError

__all__ = ["CHECKPOINT", "Checkpoint", "read_checkpoint", "saved_step", "write_checkpoint"]

CHECKPOINT = "checkpoint.npz"
#: the entries of ``meta`` and their JSON kinds
META = {
    "step": int,
    "config": dict,
    "corpus": str,
    "vocab": str,
    "rng": dict,
    "history": dict,
    "optimizer_scalars": dict,
}


def write_checkpoint(file: IO[bytes], model: Any, optimizer: Any, meta: dict[str, Any]) -> None:
    """Model and optimizer state plus ``meta`` as one archive, into the open ``file``."""
    arrays = {f"model/{k}": np.asarray(v) for k, v in model.state_dict().items()}
    saved = optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for number, state in saved["state"].items():
        for key, value in state.items():
            if isinstance(value, np.ndarray | Tensor):  # (the state's tensors, as torch's)
                arrays[f"optim/{number}/{key}"] = np.asarray(value)
            else:
                scalars.setdefault(str(number), {})[key] = value
    optimizer_scalars = {"state": scalars, "param_groups": saved["param_groups"]}
    arrays["meta"] = np.array(json.dumps(dict(meta, optimizer_scalars=optimizer_scalars)))
    np.savez(file, **arrays)


@dataclass
class Checkpoint:
    """A checkpoint read and checked by :func:`read_checkpoint`."""

    path: Path
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]

    def damaged(self, what: str) -> CommandError:
        return damaged(self.path, what)

    @property
    def model_state(self) -> dict[str, np.ndarray]:
        return {k[len("model/") :]: v for k, v in self.arrays.items() if k.startswith("model/")}

    def load_model(self, model: Any) -> None:
        """Load the model's entries into ``model`` (all checked before any is written)."""
        try:
            model.load_state_dict(self.model_state)
        except (KeyError, RetrogradError) as error:
            raise self.damaged(_text(error)) from None

    def load_optimizer(self, optimizer: Any) -> None:
        """Load the optimizer's state and groups into ``optimizer`` (checked against its
        parameters before anything changes)."""
        scalars = self.meta["optimizer_scalars"]
        try:
            state: dict[int, dict[str, Any]] = {
                int(number): dict(values) for number, values in scalars["state"].items()
            }
            for key, value in self.arrays.items():
                if key.startswith("optim/"):
                    number, _, slot = key[len("optim/") :].rpartition("/")
                    state.setdefault(int(number), {})[slot] = value
            groups = [
                {k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in g.items()}
                for g in scalars["param_groups"]
            ]
            optimizer.load_state_dict({"state": state, "param_groups": groups})
        except (KeyError, TypeError, ValueError, AttributeError, RetrogradError) as error:
            raise self.damaged(f"its optimizer state does not fit: {_text(error)}") from None


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at ``path``, its every entry checked (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise CommandError(
            f"no GPT checkpoint at {path} — train one with retrograd train --model gpt "
            f"--out {path.parent}"
        )
    with open(path, "rb") as file:
        start = file.read(4)
    if start != b"PK\x03\x04":  # every zip archive (an .npz) starts so
        what = "it is empty" if not start else f"it starts with {start!r}, not a zip's bytes"
        raise damaged(path, f"not an .npz archive ({what}): truncated, or not written by retrograd")
    try:
        with open(path, "rb") as source:
            return _checked(path, source)
    except CommandError:  # said above (a RuntimeError, which ARCHIVE_DAMAGE holds)
        raise
    except ValueError as error:
        if "pickle" in str(error):
            raise damaged(
                path,
                "it holds pickled Python objects, which retrograd never loads (they "
                "could run code)",
            ) from None
        raise damaged(path, f"not a readable .npz archive ({error})") from None
    except ARCHIVE_DAMAGE as error:  # a flipped bit in a zip header, a truncated entry
        raise damaged(
            path,
            f"not a readable .npz archive ({_text(error)}): truncated, or not written by retrograd",
        ) from None


def _checked(path: Path, source: IO[bytes]) -> Checkpoint:
    """:func:`read_checkpoint`'s reading and checks, of the open file ``source``."""
    archive = np.load(source, allow_pickle=False)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise damaged(path, "it is a single NumPy array, not an .npz archive")
    with archive:
        hidden = hidden_entries(source, archive)
        if hidden:  # a damaged directory: the entries after the damage are missing
            raise damaged(path, f"its zip directory is damaged ({hidden})")
        foreign = foreign_entries(archive)
        if foreign:  # NumPy would hand each out as its raw bytes, not an array
            raise damaged(
                path, f"it holds entries that are not NumPy arrays ({', '.join(foreign[:4])})"
            )
        arrays = {name: archive[name] for name in archive.files}
    if "meta" not in arrays:
        raise damaged(path, "it has no 'meta' entry (not a retrograd GPT checkpoint)")
    try:
        meta = json.loads(str(arrays.pop("meta")))
    except json.JSONDecodeError as error:
        raise damaged(path, f"its 'meta' entry is not JSON ({error})") from None
    if not isinstance(meta, dict):
        raise damaged(path, f"its 'meta' entry is a JSON {type(meta).__name__}, not an object")
    for key, kind in META.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            found = "missing" if key not in meta else f"a {type(meta[key]).__name__}"
            raise damaged(path, f"its meta entry {key!r} is {found}, not a {kind.__name__}")
    if not meta["vocab"]:
        raise damaged(path, "its vocabulary is empty")
    return Checkpoint(path, meta, arrays)


def saved_step(path: str | Path) -> int | None:
    """The step of the checkpoint at ``path``, read from its ``meta`` entry alone (quick, for
    a line said while interrupted); ``None`` when there is none, or it does not read."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            step = json.loads(str(archive["meta"]))["step"]
    except (*ARCHIVE_DAMAGE, json.JSONDecodeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def damaged(path: Path, what: str) -> CommandError:
    return CommandError(
        f"{path} is damaged or not a GPT checkpoint: {what} — restore it, or train afresh "
        "(--overwrite)"
    )


def _text(error: BaseException) -> str:
    """An exception's message on one line (a ``KeyError``'s without its quotes)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else error
    return " ".join(str(text).split())
