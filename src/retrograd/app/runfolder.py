"""A training run's output folder (``--out``): checked before any work, held while the run
writes, its files replaced whole and as a set.

As Hugging Face's ``Trainer`` refuses an output folder that holds a run unless told
``overwrite_output_dir``, a fresh run into a folder holding another run's files stops with one
line naming ``--overwrite`` (and, for a GPT run, ``--resume``). With ``--overwrite`` the old
run's files stay until the new run first writes; then those the new run does not write go, in
the same step, so a folder never mixes two runs' files (a CNN's ``model.npz`` beside a GPT's
``checkpoint.npz``, which ``retrograd sample`` would read). Every write goes through
:class:`~retrograd.files.FileSet` (a temporary file, ``fsync``, rename, folder ``fsync``): a
full disk or a killed process leaves the previous files as they were.

While a run holds its folder, no other run can write in it: the folder is locked (``flock``,
released by the system when the process ends, however it ends), and a second run into it stops
at once with one line.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..files import FileSet
from ._usage import CommandError

__all__ = ["RUN_FILES", "RunFolder", "output_file", "output_folder"]

#: the files a training run (any model) writes in its folder
RUN_FILES = ("metrics.json", "model.npz", "curves.png", "checkpoint.npz", "sample.txt")


def output_folder(path: str | os.PathLike, flag: str = "--out") -> tuple[Path, bool]:
    """``path`` as a folder that exists and can be written in (made, with its parents, when it
    does not exist); whether this call made it. Raises a one-line :class:`CommandError`."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"{flag} {folder} is a file, not a folder — choose a folder")
    made = False
    if not folder.exists():
        try:
            folder.mkdir(parents=True)
            made = True
        except FileExistsError:  # made meanwhile by another process
            pass
        except OSError as error:
            raise CommandError(
                f"cannot create {flag} {folder}: {error.strerror or error} — choose a folder "
                "you can write in"
            ) from None
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".retrograd-", suffix=".tmp", dir=folder)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        if made:  # as a run that never wrote leaves no folder (RunFolder.close)
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise CommandError(
            f"cannot write in {flag} {folder}: {error.strerror or error} — choose a folder you "
            "can write in"
        ) from None
    return folder, made


def output_file(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a file that can be written (its folder made when missing), checked before
    any work: a folder given, or one that cannot be written in, was found only when the work
    was done and its result was to be saved. Raises a one-line :class:`CommandError`."""
    target = Path(path)
    if target.is_dir():
        raise CommandError(f"{flag} {target} is a folder, not a file — name a file in it")
    output_folder(target.parent, flag)
    return target


class RunFolder:
    """The folder of one run. ``main``: this process writes (rank 0 of a multi-process job;
    the other ranks only check). ``resumable``: the refusal offers ``--resume`` when the folder
    holds a checkpoint (a GPT run's)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        overwrite: bool = False,
        resume: bool = False,
        main: bool = True,
        resumable: bool = False,
    ):
        self.path = Path(path)
        self._lock: int | None = None
        self._made = False
        if main:
            self.path, self._made = output_folder(self.path)
            self._lock = _lock(self.path)
        elif self.path.exists() and not self.path.is_dir():
            raise CommandError(f"--out {self.path} is a file, not a folder — choose a folder")
        present = [name for name in RUN_FILES if (self.path / name).exists()]
        if present and not (overwrite or resume):
            self.close()
            offers = ["--overwrite to replace it"]
            if resumable and "checkpoint.npz" in present:
                offers.append("--resume to continue it")
            raise CommandError(
                f"--out {self.path} holds another run ({', '.join(present)}) — pass "
                f"{', '.join(offers)}, or choose another --out"
            )
        #: files of the run being replaced, removed when this run first writes
        self.stale = present if overwrite and not resume else []

    @contextlib.contextmanager
    def files(self) -> Iterator[FileSet]:
        """Stage files of this run; on leaving the block they replace the old ones together
        (and the replaced run's other files go), or, on an exception, nothing changes."""
        with FileSet(self.path, remove=self.stale) as staged:
            yield staged
        self.stale = []

    def close(self) -> None:
        """Let other runs write here again; a folder this run made and never wrote in goes."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        if self._made:
            self._made = False
            with contextlib.suppress(OSError):  # not empty: the run wrote its files
                self.path.rmdir()


def _lock(folder: Path) -> int | None:
    """An exclusive lock on ``folder`` held by this process (``None`` where the system has no
    ``flock``); another run holding it is a :class:`CommandError`."""
    try:
        import fcntl
    except ImportError:
        return None
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise CommandError(
            f"--out {folder} is in use by another retrograd run — wait for it to finish, or "
            "choose another --out"
        ) from None
    except OSError:  # a file system without locks: nothing to guard with
        os.close(descriptor)
        return None
    return descriptor
