"""einops on retrograd tensors, registered without importing einops.

einops finds the backend of a tensor among the subclasses of ``einops._backends.AbstractBackend``
whose ``framework_name`` is a module in ``sys.modules``; a subclass exists only once the module
defining it has run, and ``import retrograd`` must not import einops (it costs every process its
import, and einops may not be installed). So ``import retrograd`` installs :class:`EinopsWatcher`
on ``sys.meta_path``: when ``einops._backends`` is imported, later, the watcher runs
:mod:`retrograd.einops.backend` right after it, which defines :class:`RetrogradBackend`; when
einops was imported first, :func:`register_with_einops` defines it at once. Then plain
``import einops; einops.rearrange(rg_tensor, "b c h w -> b (c h w)")`` works, with gradients,
as do ``reduce``, ``repeat``, ``einsum``, ``pack``/``unpack``, ``parse_shape`` and ``asnumpy``.

The layers (``Rearrange``, ``Reduce``, ``EinMix``: ``rg.nn`` modules) are
:mod:`retrograd.einops.layers`, also importable as ``einops.layers.retrograd`` (the watcher
serves that name): ``torch`` replaced by ``retrograd``, as every other torch name maps. A port
that keeps ``from einops.layers.torch import Rearrange`` works too where the layer is given to
a Module (an attribute, a ``Sequential`` item): the Module owns retrograd's layer made from it
(:func:`retrograd.einops.layers.from_torch_layer`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

from ..nn.modules.module import Module, register_foreign_modules

#: The einops module after whose execution retrograd's backend is defined.
BACKENDS_MODULE = "einops._backends"
#: The name under which einops' layer modules are looked for (``einops.layers.<framework>``).
LAYERS_ALIAS = "einops.layers.retrograd"


def _define_backend() -> None:
    """Run :mod:`retrograd.einops.backend` (which defines retrograd's einops backend); a
    failure warns, so that neither ``import einops`` nor ``import retrograd`` fails for it."""
    try:
        importlib.import_module("retrograd.einops.backend")
    except Exception as error:  # einops stays usable for its other frameworks
        warnings.warn(
            f"retrograd could not register its einops backend ({type(error).__name__}: "
            f"{error}); einops will not take retrograd tensors",
            RuntimeWarning,
            stacklevel=3,
        )


class _RegisteringLoader:
    """The loader of ``einops._backends``, which after running the module defines retrograd's
    backend; every other attribute is the wrapped loader's (``get_source``, resources...)."""

    def __init__(self, loader: Any):
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _define_backend()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _AliasLoader:
    """Loads ``einops.layers.retrograd`` as the module :mod:`retrograd.einops.layers` itself
    (one module, two names: its classes are the same objects under either)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module("retrograd.einops.layers")

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when it was created."""


class EinopsWatcher:
    """A ``sys.meta_path`` finder that answers only two names: ``einops._backends`` (found by
    the finders after it, its loader wrapped to register retrograd's backend once the module
    has run) and ``einops.layers.retrograd`` (retrograd's layers). It imports nothing until
    einops is imported."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == LAYERS_ALIAS:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader())
        if fullname != BACKENDS_MODULE:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if isinstance(finder, EinopsWatcher) or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


def _from_torch_layer(layer: Any) -> Module | None:
    """:func:`retrograd.einops.layers.from_torch_layer`, imported at its first call (an einops
    layer exists only once einops has been imported whole)."""
    from .layers import from_torch_layer

    return from_torch_layer(layer)


def register_with_einops() -> None:
    """Make einops know retrograd tensors: at once if einops is imported already, else when
    it is (one watcher per process, however often this runs); and make a Module given one of
    einops' torch layers own retrograd's instead."""
    register_foreign_modules("einops.layers.torch", _from_torch_layer)
    if BACKENDS_MODULE in sys.modules:
        _define_backend()
    # a watcher of an earlier import of this module (importlib.reload) counts as one
    if not any(type(finder).__name__ == EinopsWatcher.__name__ for finder in sys.meta_path):
        sys.meta_path.insert(0, EinopsWatcher())
