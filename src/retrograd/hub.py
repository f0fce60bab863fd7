"""``torch.hub``'s names that training scripts import: ``tqdm`` (``from torch.hub import
tqdm``, the progress bar torch re-exports: tqdm's own when it is installed, else a quiet
stand-in that iterates and takes its methods), and the hub directory (``get_dir``/``set_dir``,
``$RETROGRAD_HOME/hub``, by default ``$XDG_CACHE_HOME/retrograd/hub``), and
``load_state_dict_from_url``, which reads a checkpoint from the hub's ``checkpoints`` folder
(a ``.pth`` torch wrote, or a file ``rg.save`` wrote) as torch's reads its cached downloads.
Loading from the network (``load``, ``list``, ``help``, ``download_url_to_file``, a
checkpoint not in the folder) is not something retrograd does: each raises an error that says
so, and where to put the file."""

from __future__ import annotations

import os
from typing import Any, NoReturn
from urllib.parse import urlparse

from .errors import DTypeError, InvalidArgumentError
from .serialization import load as load_file

__all__ = [
    "download_url_to_file",
    "get_dir",
    "help",
    "list",
    "load",
    "load_state_dict_from_url",
    "set_dir",
    "tqdm",
]

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is installed with the dev and examples extras

    class tqdm:  # noqa: N801 (tqdm's name)
        """A quiet stand-in for tqdm's progress bar: iterates over ``iterable`` and accepts
        tqdm's methods (nothing is drawn)."""

        def __init__(self, iterable: Any = None, *args: Any, total: Any = None, **_: Any):
            self.iterable, self.n = iterable, 0
            self.total = total if total is not None or iterable is None else _length(iterable)

        def __iter__(self):
            for item in self.iterable:
                yield item
                self.n += 1

        def __len__(self) -> int:
            return len(self.iterable)

        def __enter__(self) -> tqdm:
            return self

        def __exit__(self, *exc: Any) -> bool:
            return False

        def update(self, n: int = 1) -> None:
            self.n += n

        def set_postfix(self, *args: Any, **kwargs: Any) -> None:
            pass

        def set_description(self, *args: Any, **kwargs: Any) -> None:
            pass

        def close(self) -> None:
            pass

    def _length(iterable: Any) -> Any:
        try:
            return len(iterable)
        except TypeError:
            return None


_hub_dir: str | None = None


def get_dir() -> str:
    """The hub directory: the one :func:`set_dir` gave, else ``$RETROGRAD_HOME/hub``
    (``$RETROGRAD_HOME`` defaulting to ``$XDG_CACHE_HOME/retrograd``, ``~/.cache`` for
    ``$XDG_CACHE_HOME``), as torch's ``$TORCH_HOME/hub``."""
    if _hub_dir is not None:
        return _hub_dir
    cache = os.getenv("XDG_CACHE_HOME", os.path.join("~", ".cache"))
    home = os.getenv("RETROGRAD_HOME", os.path.join(cache, "retrograd"))
    return os.path.join(os.path.expanduser(home), "hub")


def set_dir(d: str | os.PathLike) -> None:
    """Make ``d`` the hub directory."""
    global _hub_dir
    if not isinstance(d, str | os.PathLike):  # os.fspath's bare TypeError otherwise
        raise DTypeError(f"hub.set_dir: expected a path (str or os.PathLike), got {d!r}")
    _hub_dir = os.path.expanduser(os.fspath(d))


def _no_network(fn: str) -> NoReturn:
    raise InvalidArgumentError(
        f"hub.{fn}: retrograd does not download models or code; fetch the file yourself and "
        "read it with rg.load(path) (a file rg.save or torch.save wrote) or NumPy"
    )


def load(*args: Any, **kwargs: Any) -> NoReturn:
    _no_network("load")


def list(*args: Any, **kwargs: Any) -> NoReturn:  # noqa: A001 (torch's name)
    _no_network("list")


def help(*args: Any, **kwargs: Any) -> NoReturn:  # noqa: A001 (torch's name)
    _no_network("help")


def load_state_dict_from_url(
    url: str,
    model_dir: str | None = None,
    map_location: Any = None,
    progress: bool = True,
    check_hash: bool = False,
    file_name: str | None = None,
    weights_only: bool = False,
) -> Any:
    """torch's: the object saved at ``url``, read from ``model_dir`` (the hub's
    ``checkpoints`` folder) under the URL's file name (or ``file_name``), where torch keeps
    its downloads. A file not there is refused, naming the path to fetch it to: retrograd
    downloads nothing (``progress`` and ``check_hash`` concern downloads)."""
    if not isinstance(url, str):
        raise DTypeError(f"hub.load_state_dict_from_url: url must be a str, got {url!r}")
    if model_dir is None:
        model_dir = os.path.join(get_dir(), "checkpoints")
    name = file_name if file_name is not None else os.path.basename(urlparse(url).path)
    cached = os.path.join(model_dir, name)
    if not os.path.isfile(cached):
        raise InvalidArgumentError(
            f"hub.load_state_dict_from_url: {url} is not in the cache ({cached}), and "
            "retrograd does not download models or code; fetch it to that path (curl -L -o "
            f"'{cached}' '{url}') and call again"
        )
    return load_file(cached, map_location=map_location, weights_only=weights_only)


def download_url_to_file(*args: Any, **kwargs: Any) -> NoReturn:
    _no_network("download_url_to_file")
