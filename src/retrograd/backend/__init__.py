"""Backends: the protocol every tensor backend implements, its NumPy implementation, and the
torch one (``TorchBackend``, imported on first use: torch is an optional dependency)."""

from typing import Any

from .numpy_backend import NumpyBackend
from .protocol import Backend

__all__ = ["Backend", "NumpyBackend", "TorchBackend"]


def __getattr__(name: str) -> Any:
    if name == "TorchBackend":  # torch is imported only when the torch backend is asked for
        from .torch_backend import TorchBackend

        return TorchBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
