"""Modules imported at their first use rather than with retrograd: SciPy's special functions
and linear algebra cost a process about 0.5 s of CPU to import (measured: ``import retrograd``
2.1 -> 1.6 s of CPU without them), and most processes (a command, a data-parallel rank, a
script without special functions) never call them."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["LazyModule", "scipy_linalg", "scipy_special"]


class LazyModule:
    """Stands for the module ``name``: an attribute read imports it (once; Python keeps it in
    ``sys.modules``) and reads the module's attribute.

    >>> LazyModule("math").sqrt(4.0)
    2.0
    """

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def module(self) -> ModuleType:
        return importlib.import_module(self._name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.module(), attribute)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"


scipy_special = LazyModule("scipy.special")
scipy_linalg = LazyModule("scipy.linalg")
