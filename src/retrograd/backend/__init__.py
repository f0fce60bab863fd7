"""Backends: the protocol every tensor backend implements, and its NumPy implementation."""

from .numpy_backend import NumpyBackend
from .protocol import Backend

__all__ = ["Backend", "NumpyBackend"]
