"""torch's ``torch._dynamo`` names that training scripts touch before ``torch.compile``, with
eager meaning: nanoGPT's forks set ``torch._dynamo.config.suppress_errors = True`` or raise
``cache_size_limit``, data loaders mark dimensions dynamic (``mark_dynamic``), library code
asks ``is_compiling()``. retrograd compiles nothing (``rg.compile`` runs its model eagerly, a
module wrapped in torch's :class:`OptimizedModule`), so the settings are kept and change
nothing, the markers return at once and the queries are ``False``; :func:`explain` and
:func:`export`, which need a compiled graph, are refused by name.

>>> import retrograd as rg
>>> rg._dynamo.config.suppress_errors = True
>>> rg._dynamo.config.cache_size_limit, rg._dynamo.is_compiling()
(8, False)
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, NoReturn

from .compiler import (
    CompilerSettings,
    allow_in_graph,
    assume_constant_result,
    disable,
    is_compiling,
    reset,
)
from .errors import InvalidArgumentError
from .nn.modules.module import Module

__all__ = [
    "OptimizedModule",
    "allow_in_graph",
    "assume_constant_result",
    "compile",
    "config",
    "disable",
    "disallow_in_graph",
    "explain",
    "export",
    "graph_break",
    "is_compiling",
    "list_backends",
    "mark_dynamic",
    "mark_static",
    "mark_static_address",
    "maybe_mark_dynamic",
    "optimize",
    "reset",
]

#: torch 2.13's defaults of the settings scripts set or read (``cache_size_limit`` and
#: ``accumulated_cache_size_limit`` are torch's older names of the recompile limits)
config = CompilerSettings(
    "torch._dynamo.config",
    {
        "suppress_errors": False,
        "verbose": False,
        "recompile_limit": 8,
        "accumulated_recompile_limit": 256,
        "optimize_ddp": True,
        "capture_scalar_outputs": False,
        "capture_dynamic_output_shape_ops": False,
        "automatic_dynamic_shapes": True,
        "assume_static_by_default": True,
        "dynamic_shapes": True,
        "specialize_int": False,
        "compiled_autograd": False,
        "inline_inbuilt_nn_modules": True,
        "guard_nn_modules": True,
        "force_parameter_static_shapes": True,
        "error_on_recompile": False,
        "allow_rnn": False,
    },
    {"cache_size_limit": "recompile_limit",
     "accumulated_cache_size_limit": "accumulated_recompile_limit"},
)  # fmt: skip


def optimize(backend: Any = "inductor", *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """torch's older ``torch._dynamo.optimize(backend)``: a decorator that returns its function
    unchanged (it runs eagerly, as ``rg.compile``'s model does)."""
    return disable()


def disallow_in_graph(fn: Any) -> Any:
    """``fn`` itself (there is no graph to keep it out of)."""
    return allow_in_graph(fn)


def graph_break() -> None:
    """Nothing to break: no graph is being traced."""


def mark_dynamic(tensor: Any, index: Any, *args: Any, **kwargs: Any) -> None:
    """Nothing to mark: shapes are never specialized here."""


def maybe_mark_dynamic(tensor: Any, index: Any) -> None:
    """Nothing to mark (see :func:`mark_dynamic`)."""


def mark_static(tensor: Any, index: Any = None) -> None:
    """Nothing to mark (see :func:`mark_dynamic`)."""


def mark_static_address(tensor: Any, guard: bool = True) -> None:
    """Nothing to mark: no CUDA graph records tensor addresses here."""


def list_backends(exclude_tags: Any = ("debug", "experimental")) -> list[str]:
    """The compiler backends ``torch.compile`` may be given: none here (it compiles nothing)."""
    return []


def _refused(name: str) -> NoReturn:
    raise InvalidArgumentError(
        f"_dynamo.{name}: retrograd compiles nothing, so there is no graph to "
        f"{'explain' if name == 'explain' else 'export'}; the model runs eagerly "
        "(rg.capture records a training step's kernels for replay)"
    )


def explain(fn: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused: there are no graphs or graph breaks to report."""
    _refused("explain")


def export(fn: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused: nothing is traced into a graph."""
    _refused("export")


# (assume_constant_result, is_compiling and reset are compiler's, re-exported as torch's are)
_ = (assume_constant_result, is_compiling, reset)


class OptimizedModule(Module):
    """What ``torch.compile(module)`` returns: a module holding the compiled one as the
    sub-module ``_orig_mod`` and running it (eagerly here). As torch's, its state dict's keys
    and parameter names start with ``_orig_mod.`` (the prefix scripts strip from a checkpoint
    saved from a compiled model), and every other attribute is the wrapped module's: read,
    set and deleted there (``compiled.config``, ``compiled.generate(...)``)."""

    #: the attributes that are the wrapper's own (torch's list, less what dynamo needs)
    _own_attributes = frozenset({"_orig_mod", "forward", "_super_module_initialized"})

    def __init__(self, mod: Module) -> None:
        # first: reads of attributes during Module.__init__ go to the wrapped module
        object.__setattr__(self, "_orig_mod", mod)
        object.__setattr__(self, "_super_module_initialized", False)
        super().__init__()
        object.__setattr__(self, "_super_module_initialized", True)
        self._orig_mod = mod  # registered: the "_orig_mod." keys

    @property
    def training(self) -> bool:  # type: ignore[override]
        return self._orig_mod.training

    @training.setter
    def training(self, mode: bool) -> None:
        # Module.__init__ sets the default; afterwards the wrapped module's flag is the one
        if self._super_module_initialized:
            self._orig_mod.training = mode

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod(*args, **kwargs)

    def __len__(self) -> int:
        try:
            return len(self._orig_mod)
        except TypeError:
            raise TypeError(f"{type(self._orig_mod).__name__} does not support len()") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):  # copy's and pickle's probes of a
            # half-built copy: never the wrapped module's (whose own would copy it alone)
            raise AttributeError(f"OptimizedModule has no attribute {name!r}")
        if name == "_orig_mod":
            return self.__dict__["_modules"]["_orig_mod"]
        return getattr(self._orig_mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(type(self), name) or name in self._own_attributes:
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if hasattr(type(self), name) or name in self._own_attributes:
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._orig_mod)) | set(super().__dir__()))


#: ``torch._dynamo.eval_frame``, for the checks ``isinstance(model,
#: torch._dynamo.eval_frame.OptimizedModule)`` (Hugging Face's ``is_compiled_module``)
eval_frame = types.SimpleNamespace(OptimizedModule=OptimizedModule)


def compile(  # noqa: A001 (torch's name)
    model: Any = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: Any = "inductor",
    mode: str | None = None,
    options: dict | None = None,
    disable: bool = False,
) -> Any:
    """``torch.compile``: a module wrapped as torch wraps it (:class:`OptimizedModule`: it runs
    the module eagerly, its state dict's keys start with ``_orig_mod.``), a function unchanged
    (``torch.compile``'s arguments accepted: compiling changes no value in torch either, only
    speed; retrograd's whole-step compiler is :func:`retrograd.capture`, which needs the
    optimizer as well); as a decorator with arguments only (``@rg.compile(mode=...)``), the
    identity decorator."""
    if model is None:
        return lambda fn: fn
    if not callable(model):
        raise InvalidArgumentError(
            f"compile: expected a module or a function, got {type(model).__name__}"
        )
    if isinstance(model, Module) and not disable:
        return OptimizedModule(model)
    return model
