"""Files written whole or not at all: the one way retrograd writes a file.

SQLite's rule for a write, applied to every file the library and the ``retrograd`` command
write (models, checkpoints, metrics, samples, plots, graphs): each file is written to a
temporary file of a unique name in the same folder, flushed to the disk (``fsync``), then
renamed over the old one, and the folder itself is synced so that the rename survives a power
cut. Whatever fails (a full disk, a killed process, an exception while writing), the previous
file is left as it was, and the temporary file is removed (a killed process cannot remove it:
it stays behind as a hidden ``.NAME.*.tmp`` next to the intact file). Two writers of one name
never share a temporary file; the last rename wins, whole. A device, a pipe or a socket
(``/dev/null``, ``/dev/stdout``, a FIFO) is written in place, as ``open`` writes it: it has no
contents to keep, and a rename would replace the node itself. A file this process may not
write (made read-only) is refused as ``open`` refuses it, though the folder allows the rename.

A :class:`FileSet` stages several files and renames them together at the end, so a run's files
are replaced as a set: when one of them cannot be written, or renamed, none is replaced (each
replaced file's old version is kept under a hidden ``.NAME.*.old`` link until the last rename,
and put back when a rename fails).

>>> import os, pathlib, tempfile
>>> folder = tempfile.mkdtemp()
>>> with atomic_write(os.path.join(folder, "note.txt")) as file:
...     _ = file.write(b"kept whole")
>>> pathlib.Path(folder, "note.txt").read_bytes(), sorted(os.listdir(folder))
(b'kept whole', ['note.txt'])
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

__all__ = ["FileSet", "atomic_write", "sync_folder"]

_umask_lock = threading.Lock()
_umask: int | None = None


def _process_umask() -> int:
    """The process's umask (read once; from /proc where it exists, so that no other thread
    ever sees a changed umask)."""
    global _umask
    with _umask_lock:
        if _umask is None:
            try:
                with open("/proc/self/status", encoding="ascii") as status:
                    line = next(s for s in status if s.startswith("Umask:"))
                _umask = int(line.split()[1], 8)
            except (OSError, StopIteration, ValueError, IndexError):
                _umask = os.umask(0o022)
                os.umask(_umask)
        return _umask


def sync_folder(folder: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename in it) to the disk; a no-op where the system cannot
    open folders (Windows) or sync them."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        descriptor = os.open(folder, flags)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


class FileSet:
    """Files of one folder staged as temporary files and renamed into place together by
    :meth:`commit` (on leaving a ``with`` block without an exception); :meth:`discard` (or an
    exception) removes them and leaves the folder as it was.

    ``remove`` names files of the folder to delete once the new ones are in place (the files
    of a run being replaced that the new run does not write).
    """

    def __init__(self, folder: str | os.PathLike, remove: Iterable[str] = ()):
        self.folder = Path(folder)
        self.remove = list(remove)
        self._staged: list[tuple[Path, Path, bool]] = []  # temporary, final, synced
        self._open: set[Path] = set()
        # made by mkstemp and not staged yet: each temporary's descriptor (see _temporary)
        self._unfinished: dict[str, int] = {}
        # the links keeping the replaced files of a commit whose renames are all done
        self._kept: list[Path] = []

    def _temporary(self, name: str) -> Path:
        """A new temporary file for ``name``, its descriptor kept in :attr:`_unfinished` the
        moment ``mkstemp`` returns it, until it is staged or dropped: an interrupt (Ctrl-C)
        at any line after that leaves :meth:`discard` (or the set's end, ``__del__``) the
        file to remove and the descriptor to close (round 67: interrupted saves left both)."""
        final = self.folder / name
        if final.is_dir():  # refused before a byte is written, not by the rename at the end
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(final))
        if _read_only(final):
            # open(final, "wb") (torch.save's) refuses a file made read-only (chmod 444 on the
            # best checkpoint, to keep it); a rename, which the folder's permission decides,
            # would replace it all the same
            raise PermissionError(
                errno.EACCES,
                f"{os.strerror(errno.EACCES)} (a read-only file; nothing written)",
                str(final),
            )
        prefix, folder = f".{final.name}.", final.parent
        try:  # (one line: no line of Python runs between the file's making and its note)
            self._unfinished.update([tempfile.mkstemp(".tmp", prefix, folder)[::-1]])
        except OSError as error:  # named by the file to write, not the temporary's name
            raise OSError(error.errno, error.strerror or str(error), str(final)) from error
        temporary = Path(next(reversed(self._unfinished)))
        if hasattr(os, "fchmod"):  # mkstemp's 0600 would hide the file from the user's group
            os.fchmod(self._unfinished[str(temporary)], _mode_for(final))
        return temporary

    def _drop(self, temporary: Path) -> None:
        """A temporary file given up: its descriptor closed (if not yet), staged no more,
        removed."""
        if str(temporary) in self._unfinished:
            with contextlib.suppress(OSError):
                os.close(self._unfinished[str(temporary)])
            del self._unfinished[str(temporary)]
        self._staged = [entry for entry in self._staged if entry[0] != temporary]
        _unlink(temporary)

    @contextlib.contextmanager
    def open(self, name: str, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
        """A new file that becomes ``folder/name`` at the commit; written, flushed and synced
        when the block ends, removed when it raises."""
        if "b" not in mode and encoding is None:
            encoding = "utf-8"
        temporary = self._temporary(name)
        try:
            # the descriptor stays the set's to close (closefd=False): closed once, by
            # _stage or _drop, whatever line an interrupt lands at
            descriptor = self._unfinished[str(temporary)]
            with os.fdopen(descriptor, mode, encoding=encoding, closefd=False) as file:
                yield file
                file.flush()
                os.fsync(descriptor)
            self._stage(temporary, name, True)
        except OSError as error:  # named by the file it was to become, not the temporary
            self._drop(temporary)
            raise OSError(
                error.errno, error.strerror or str(error), str(self.folder / name)
            ) from error
        except BaseException:
            self._drop(temporary)
            raise

    def _stage(self, temporary: Path, name: str, synced: bool) -> None:
        """A temporary file written: staged for the commit, its descriptor closed."""
        self._staged.append((temporary, self.folder / name, synced))
        os.close(self._unfinished[str(temporary)])
        del self._unfinished[str(temporary)]

    def path(self, name: str) -> Path:
        """A temporary path for another program to write (``dot -o PATH``); it becomes
        ``folder/name`` at the commit."""
        temporary = self._temporary(name)
        self._stage(temporary, name, False)
        return temporary

    def forget(self, path: Path) -> None:
        """Drop a :meth:`path` whose program failed: nothing becomes of it."""
        self._staged = [entry for entry in self._staged if entry[0] != path]
        _unlink(path)

    def commit(self) -> list[Path]:
        """Rename every staged file into place, remove :attr:`remove`, sync the folder; the
        paths now in place. When a rename fails (a full disk or quota where the folder needs a
        block, an interrupt), the files already renamed are put back as they were: the set is
        replaced whole or not at all, not only each file."""
        replaced: list[tuple[Path, Path | None]] = []  # final, the link keeping its old file
        try:
            for temporary, _, synced in self._staged:
                if not synced:
                    with open(temporary, "rb") as file:
                        os.fsync(file.fileno())
            for temporary, final, _ in self._staged:
                kept = _keep_old(final)
                try:
                    os.replace(temporary, final)
                except BaseException as error:
                    if kept is not None:
                        _unlink(kept)
                    if isinstance(error, OSError):  # named by the file, not the temporary's
                        raise OSError(
                            error.errno, error.strerror or str(error), str(final)
                        ) from error
                    raise
                replaced.append((final, kept))
            # every file in place: the old ones' links are the set's to remove from here on,
            # at its end (__del__) if an interrupt stops the lines below
            self._kept = [kept for _, kept in replaced if kept is not None]
        except BaseException:
            _put_back(replaced)
            self.discard()
            raise
        while self._kept:
            _unlink(self._kept[-1])
            self._kept.pop()
        written = [final for _, final, _ in self._staged]
        self._staged = []
        for name in self.remove:
            if self.folder / name not in written:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.folder / name)
        sync_folder(self.folder)
        return written

    def discard(self) -> None:
        for temporary in [*map(Path, self._unfinished), *(entry[0] for entry in self._staged)]:
            self._drop(temporary)

    def __del__(self) -> None:
        """What an interrupt left (an interrupt as the commit begins, before its renames
        are guarded, or after them, among the removals of the old files' links) removed when
        the set goes: its temporary files and those links."""
        if not any(vars(self).get(name) for name in ("_unfinished", "_staged", "_kept")):
            return  # nothing left, or an interrupt stopped __init__ before anything was made
        with contextlib.suppress(Exception):
            self.discard()
            while self._kept:
                _unlink(self._kept[-1])
                self._kept.pop()

    def __enter__(self) -> FileSet:
        return self

    def __exit__(self, kind: type | None, *rest: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "wb", encoding: str | None = None
) -> Iterator[IO]:
    """Write ``path`` whole or not at all: a file object to write, which replaces ``path``
    when the block ends (``mode`` ``"wb"`` or ``"w"``; text is UTF-8 unless ``encoding``).
    A symbolic link is written through, as ``open`` (and ``torch.save``) would: its target is
    replaced and the link stays (a ``latest.pt`` pointing at a run's checkpoint). A loop of
    links is an ``OSError`` (``ELOOP``), as ``open`` raises, and the links are left alone."""
    text = os.fspath(path)
    if text.endswith((os.sep, os.altsep or os.sep)) or os.path.basename(text) in (".", ".."):
        # a folder's name: ``Path`` drops the separator, and "ckpts/" became a file "ckpts"
        raise IsADirectoryError(
            errno.EISDIR, "a folder's name, not a file's (nothing written)", str(text)
        )
    path = Path(path)
    if _is_special(path):
        with _written_in_place(path, mode, encoding) as file:
            yield file
        return
    if path.is_symlink():
        path = _link_target(path)
    files = FileSet(path.parent)
    with files, files.open(path.name, mode, encoding) as file:
        yield file


def _is_special(path: Path) -> bool:
    """Whether ``path`` (through its links, as ``open`` goes) is a device, a pipe or a socket
    (``/dev/null``, ``/dev/stdout``, a FIFO): no file to replace whole, and renaming a file
    over it would put a regular file in the place of the device node itself."""
    try:
        kind = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(kind) or stat.S_ISDIR(kind))


@contextlib.contextmanager
def _written_in_place(path: Path, mode: str, encoding: str | None) -> Iterator[IO]:
    """``path``, a device or a pipe, opened and written as ``open`` (and ``torch.save``)
    write it; a failed write (``/dev/full``: no space) is an ``OSError`` naming it."""
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    try:
        with open(path, mode, encoding=encoding) as file:
            yield file
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error


def _link_target(link: Path) -> Path:
    """The file the symbolic link ``link`` leads to: its final target, which need not exist
    (``open`` creates it); a loop of links has none."""
    try:
        return Path(os.path.realpath(link, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(link))
    except OSError as error:  # (non-strict realpath would give a link of the loop)
        raise OSError(
            error.errno,
            f"{error.strerror or error} (a loop of symbolic links: nothing written, the links "
            "left as they are)",
            str(link),
        ) from None


def _read_only(final: Path) -> bool:
    """Whether ``final`` is a file this process may not write (as ``open`` decides it: by the
    effective user, so root writes any)."""
    if not final.is_file():
        return False
    effective = os.access in os.supports_effective_ids
    return not os.access(final, os.W_OK, effective_ids=effective)


def _mode_for(final: Path) -> int:
    """The permissions the file written to ``final`` gets: those of the file it replaces (a
    checkpoint kept private with ``chmod 600`` stays private, as ``open`` and ``torch.save``
    keep it), else a new file's (``0666`` less the umask)."""
    try:
        return stat.S_IMODE(os.stat(final).st_mode)
    except OSError:
        return 0o666 & ~_process_umask()


def _keep_old(final: Path) -> Path | None:
    """A second name (a hard link, hidden beside it) for the file ``final`` names now, so
    that a commit that fails later can put it back; ``None`` when there is no such file, or
    the file system makes no hard links (then a failed commit cannot restore this one)."""
    if not os.path.lexists(final):
        return None
    for _ in range(100):
        kept = final.with_name(f".{final.name}.{secrets.token_hex(4)}.old")
        try:
            os.link(final, kept, follow_symlinks=False)
            return kept
        except FileExistsError:
            continue
        except (OSError, NotImplementedError):
            return None
        except BaseException:  # an interrupt once the link is made: not left behind
            _unlink(kept)
            raise
    return None


def _put_back(replaced: list[tuple[Path, Path | None]]) -> None:
    """Undo the renames of a failed commit, last first: each file as it was before (removed
    when there was none). Best effort: the failure that stopped the commit is the error."""
    for final, kept in reversed(replaced):
        with contextlib.suppress(OSError):
            if kept is None:
                os.unlink(final)
            else:
                os.replace(kept, final)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
