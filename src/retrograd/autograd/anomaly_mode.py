"""torch's anomaly mode (``torch.autograd.detect_anomaly``, ``set_detect_anomaly``,
``is_anomaly_enabled``), as it can hold here.

torch's anomaly mode records each forward op's traceback and checks every backward function's
output for NaN. retrograd's does the check: while the mode is on, every backward
(``loss.backward()``, ``rg.autograd.backward``, ``rg.autograd.grad``) checks each gradient a
step gives before adding it, and the first one holding NaN stops the backward with an
``AutodiffError`` (a ``RuntimeError``) in torch's words, naming the node and the forward op:
"Function 'LogBackward0' returned nan values in its 0th output (...)". As torch's, it records
the traceback of each op's forward call while it is on, and warns with the one of the node
whose gradient holds NaN ("Error detected in LogBackward0. Traceback of forward call that
caused the error: ..."); the error names that call's file and line too.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from ..autodiff.runtime import ANOMALY
from ..errors import AutodiffError
from ..tensor.selection import torch_node_name

__all__ = [
    "check_nan_gradients",
    "detect_anomaly",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "set_anomaly_enabled",
    "set_detect_anomaly",
]

#: the flags the backward reads (it checks every step's gradients while they are on)
_MODE = ANOMALY
ANOMALY["name"] = torch_node_name


def is_anomaly_enabled() -> bool:
    """Whether anomaly mode is on."""
    return _MODE["enabled"]


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly mode checks gradients for NaN."""
    return _MODE["check_nan"]


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Anomaly mode on or off from now on (torch's ``torch.set_anomaly_enabled``)."""
    _MODE.update(enabled=bool(enabled), check_nan=bool(check_nan))


class set_detect_anomaly:  # noqa: N801 (torch's name)
    """Anomaly mode on or off (``mode``), at once and until the end of the ``with`` block
    when used as one (torch's ``set_detect_anomaly``)."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self._previous = {"enabled": _MODE["enabled"], "check_nan": _MODE["check_nan"]}
        _MODE.update(enabled=bool(mode), check_nan=bool(check_nan))

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        _MODE.update(self._previous)


class detect_anomaly:  # noqa: N801 (torch's name)
    """Anomaly mode for the block: every backward step's gradients are checked for NaN (see
    the module's notes for what differs from torch's). Warns, as torch's does, that it is for
    debugging.

    >>> import retrograd as rg
    >>> x = rg.tensor([0.0]).require_grad()
    >>> with detect_anomaly():  # doctest: +SKIP
    ...     (x * x.log()).sum().backward()
    Traceback (most recent call last):
    retrograd.errors.AutodiffError: backward: anomaly detected: Function 'LogBackward0' ...
    """

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan
        warnings.warn(
            "Anomaly Detection has been enabled. This mode will increase the runtime and should "
            "only be enabled for debugging.",
            UserWarning,
            stacklevel=2,
        )

    def __enter__(self) -> None:
        self._previous = {"enabled": _MODE["enabled"], "check_nan": _MODE["check_nan"]}
        _MODE.update(enabled=True, check_nan=self.check_nan)

    def __exit__(self, *exc: Any) -> None:
        _MODE.update(self._previous)


def check_nan_gradients(op: str, gradients: Iterable[tuple[Any, Any]]) -> None:
    """In anomaly mode, raise for the first gradient holding NaN; ``gradients`` yields
    ``(what, tensor or None)``."""
    if not (_MODE["enabled"] and _MODE["check_nan"]):
        return
    for what, g in gradients:
        if g is not None and g.numel() and bool(g.isnan().any().item()):
            raise AutodiffError(f"{op}: anomaly detected: the gradient of {what} has nan values")
