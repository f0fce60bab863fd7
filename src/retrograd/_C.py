# ruff: noqa: N999  (torch's module name)
"""torch's ``torch._C`` names that library code calls outside of any computation: torchaudio's
and torchvision's modules log their construction with ``torch._C._log_api_usage_once(name)``
in ``__init__`` (torch's usage telemetry, off unless a logger is installed). Here it records
nothing; the compiled extension itself has no counterpart.

>>> import retrograd as rg
>>> rg._C._log_api_usage_once("torchaudio.transforms.Spectrogram")
"""

from __future__ import annotations

from .errors import DTypeError

__all__ = ["_log_api_usage_once"]


def _log_api_usage_once(event: str) -> None:
    """Nothing: torch logs ``event`` only to a usage logger an application installs."""
    if not isinstance(event, str):
        raise DTypeError(
            f"_C._log_api_usage_once: expected the event's name as a str, got "
            f"{type(event).__name__}"
        )
