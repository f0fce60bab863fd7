"""torch's ``torch.onnx`` names that model code carries.

Model code branches on ``torch.onnx.is_in_onnx_export()`` in its forward (detection heads
return raw outputs while exporting, YOLO's and DETR's among them); here nothing is ever being
exported, so it is ``False`` and the forward runs its eager branch, as torch's does outside
an export. Exporting itself (``export``, ``dynamo_export``) is refused by name: retrograd
writes no ONNX graphs (load the state dict into the torch model and export from torch).

>>> import retrograd as rg
>>> rg.onnx.is_in_onnx_export()
False
"""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import InvalidArgumentError

__all__ = ["dynamo_export", "export", "is_in_onnx_export"]


def is_in_onnx_export() -> bool:
    """``False``: no ONNX export is ever running here."""
    return False


def _refused(name: str) -> NoReturn:
    raise InvalidArgumentError(
        f"onnx.{name}: retrograd writes no ONNX graphs; save the model's state_dict() "
        "(rg.save, or np.savez of its arrays), load it into the torch model and export there"
    )


def export(*args: Any, **kwargs: Any) -> NoReturn:
    """torch's ``onnx.export``: refused (see the module docstring)."""
    _refused("export")


def dynamo_export(*args: Any, **kwargs: Any) -> NoReturn:
    """torch's ``onnx.dynamo_export``: refused (see the module docstring)."""
    _refused("dynamo_export")
