"""torch's ``torch.fft``: every transform there returns complex values, and retrograd has no
complex tensors, so each raises an error that says so (:mod:`retrograd.unsupported`)."""

from __future__ import annotations

from typing import Any, NoReturn

from .unsupported import no_complex

__all__ = ["fft", "fft2"]


def fft(*args: Any, **kwargs: Any) -> NoReturn:
    """Refused: the result would be complex (torch: ``fft(input, n, dim, norm)``)."""
    no_complex("fft.fft")


def fft2(*args: Any, **kwargs: Any) -> NoReturn:
    """Refused: the result would be complex (torch: ``fft2(input, s, dim, norm)``)."""
    no_complex("fft.fft2")
