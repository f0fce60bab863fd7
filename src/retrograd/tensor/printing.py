"""How tensors print: the options ``rg.set_printoptions`` sets (torch's keywords and
profiles), as keyword arguments of :func:`numpy.array2string`.

Until an option is set, a tensor prints as NumPy prints its values.

>>> import retrograd as rg
>>> rg.set_printoptions(precision=2)
>>> rg.tensor([1 / 3])
tensor([0.33], dtype=float32)
>>> rg.set_printoptions(profile="default")
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["array2string_options", "get_printoptions", "set_printoptions"]

_PROFILES = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": 2**63 - 1, "edgeitems": 3, "linewidth": 80},
}
_SET: dict[str, Any] = {}  # the options set so far (none: NumPy's own printing)


def set_printoptions(
    precision: int | None = None,
    threshold: int | None = None,
    edgeitems: int | None = None,
    linewidth: int | None = None,
    profile: str | None = None,
    sci_mode: bool | None = None,
) -> None:
    """torch's ``set_printoptions``: a ``profile`` (``"default"``, ``"short"``, ``"full"``)
    first, then the keywords given; ``sci_mode`` True or False forces or forbids scientific
    notation, None leaves it to the values."""
    if profile is not None:
        if profile not in _PROFILES:
            raise InvalidArgumentError(
                f"set_printoptions: profile must be one of {list(_PROFILES)}, got {profile!r}"
            )
        _SET.clear()
        if profile != "default":
            _SET.update(_PROFILES[profile])
    given = {
        "precision": precision,
        "threshold": threshold,
        "edgeitems": edgeitems,
        "linewidth": linewidth,
    }
    _SET.update({k: v for k, v in given.items() if v is not None})
    if sci_mode is not None or profile is not None:
        _SET["sci_mode"] = sci_mode


def get_printoptions() -> dict[str, Any]:
    """torch's options as they stand (its defaults where none was set)."""
    return {**_PROFILES["default"], "sci_mode": None, **_SET}


def array2string_options() -> dict[str, Any]:
    """The :func:`numpy.array2string` keywords for the options set."""
    if not _SET:
        return {}
    options = {k: v for k, v in _SET.items() if k != "sci_mode"}
    options["max_line_width"] = options.pop("linewidth", None)
    sci_mode = _SET.get("sci_mode")
    if sci_mode is False:
        options["suppress_small"] = True
    elif sci_mode:
        digits = options.get("precision", 4)
        options["formatter"] = {"float_kind": lambda x: f"{x:.{digits}e}"}
    return {k: v for k, v in options.items() if v is not None}
