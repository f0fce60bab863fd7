"""torch's ``torch.__future__``: the flags that choose how ``Module.to()`` (and ``float()``,
``bfloat16()``, ``to_empty()``...) and ``load_state_dict`` replace parameters.

retrograd always updates a module's parameters in place: each ``Parameter`` stays the same
object (an optimizer holding it sees the new values) whatever the flags say, which is what
torch's swap path (``set_swap_module_params_on_conversion(True)``) gives. The swap flag is kept
for code that sets and reads it; overwriting with new objects (torch's
``set_overwrite_module_params_on_conversion(True)``) would break that guarantee and is refused.
"""

from __future__ import annotations

from .errors import DTypeError, InvalidArgumentError

__all__ = [
    "get_overwrite_module_params_on_conversion",
    "get_swap_module_params_on_conversion",
    "set_overwrite_module_params_on_conversion",
    "set_swap_module_params_on_conversion",
]

#: the swap flag as last set (process-wide, as torch's)
_SWAP = {"on": False}


def _flag(op: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise DTypeError(f"{op}: expected a bool, got {type(value).__name__}")
    return value


def set_swap_module_params_on_conversion(value: bool) -> None:
    """Accepted and remembered: retrograd's conversions keep every parameter object, as
    torch's swap path does."""
    _SWAP["on"] = _flag("set_swap_module_params_on_conversion", value)


def get_swap_module_params_on_conversion() -> bool:
    return _SWAP["on"]


def set_overwrite_module_params_on_conversion(value: bool) -> None:
    """``False`` (torch's default) is accepted; ``True`` is refused: retrograd's modules keep
    their parameter objects through every conversion."""
    if _flag("set_overwrite_module_params_on_conversion", value):
        raise InvalidArgumentError(
            "set_overwrite_module_params_on_conversion(True): retrograd updates parameters in "
            "place on conversion (each Parameter stays the same object, so optimizers keep "
            "seeing it) and cannot make new parameter objects instead"
        )


def get_overwrite_module_params_on_conversion() -> bool:
    return False
