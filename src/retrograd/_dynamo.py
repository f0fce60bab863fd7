"""torch's ``torch._dynamo`` names that training scripts touch before ``torch.compile``, with
eager meaning: nanoGPT's forks set ``torch._dynamo.config.suppress_errors = True`` or raise
``cache_size_limit``, data loaders mark dimensions dynamic (``mark_dynamic``), library code
asks ``is_compiling()``. retrograd compiles nothing, so the settings are kept and change
nothing, the markers return at once and the queries are ``False``; :func:`explain` and
:func:`export`, which need a compiled graph, are refused by name.

``rg.compile(model)`` (:func:`compile`) wraps a module as torch's does, in an
:class:`OptimizedModule` (torch's ``torch._dynamo.eval_frame.OptimizedModule``) that runs the
model eagerly: ``compiled._orig_mod`` is the model, the state dict's keys carry the
``_orig_mod.`` prefix, and attributes, ``train``/``eval`` and the parameters are the model's,
so code written for ``torch.compile`` (nanoGPT's checkpoints, their prefix stripped when
loaded) runs unchanged. A function compiled stays that function.

>>> import retrograd as rg
>>> rg._dynamo.config.suppress_errors = True
>>> rg._dynamo.config.cache_size_limit, rg._dynamo.is_compiling()
(8, False)
"""

from __future__ import annotations

import functools
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


class OptimizedModule(Module):
    """torch's ``torch.compile(module)`` result: the module ``_orig_mod`` (its only child, so
    the state dict's keys read ``_orig_mod.<name>`` as torch's), called eagerly through its own
    ``__call__`` (its hooks run). Attributes not of this class are the model's (read, set and
    deleted there, as torch's ``__getattr__``/``__setattr__`` forward them), and ``training``
    is the model's flag."""

    #: the attributes held by the wrapper itself (torch's ``_opt_mod_attributes``); any other
    #: is the model's
    _OWN_ATTRIBUTES = frozenset({"_orig_mod", "compile_options"})

    def __init__(self, mod: Module, compile_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._modules["_orig_mod"] = mod
        object.__setattr__(self, "compile_options", dict(compile_options or {}))

    @property  # type: ignore[override]
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, value: bool) -> None:
        # Module.__init__ sets the default before the model is registered: the model's own
        # flag stands
        modules = self.__dict__.get("_modules")
        if modules is not None and "_orig_mod" in modules:
            modules["_orig_mod"].training = value

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        modules = self.__dict__.get("_modules")
        if modules is None or "_orig_mod" not in modules:  # unpickling, copying: not set yet
            raise AttributeError(f"OptimizedModule has no attribute {name!r}")
        if name == "_orig_mod":
            return modules["_orig_mod"]
        return getattr(modules["_orig_mod"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(type(self), name) or name in self._OWN_ATTRIBUTES:
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if hasattr(type(self), name) or name in self._OWN_ATTRIBUTES:
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __len__(self) -> int:
        model = self._orig_mod
        if not hasattr(type(model), "__len__"):
            raise TypeError(f"{type(model).__name__} does not support len()")
        return len(model)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._orig_mod)) | set(super().__dir__()))


def _compile_one(model: Any, options: dict[str, Any]) -> Any:
    if not callable(model):
        raise InvalidArgumentError(
            f"compile: expected a module or a function, got {type(model).__name__}"
        )
    if options.get("disable"):  # torch's ``disable=True`` hands the model back as it is
        return model
    if isinstance(model, Module):
        return OptimizedModule(model, options)
    return model


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
    """``torch.compile``: a module wrapped in an :class:`OptimizedModule` (run eagerly), a
    function returned as it is; with arguments only (``@rg.compile(mode=...)``), the decorator
    that does so. ``disable=True`` returns ``model`` itself, as torch's."""
    settings = {
        "fullgraph": fullgraph,
        "dynamic": dynamic,
        "backend": backend,
        "mode": mode,
        "options": options,
        "disable": disable,
    }
    if model is None:
        return functools.partial(_compile_one, options=settings)
    return _compile_one(model, settings)


def optimize(backend: Any = "inductor", *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """torch's older ``torch._dynamo.optimize(backend)``: a decorator that wraps a module as
    :func:`compile` does and returns a function unchanged (it runs eagerly)."""
    return functools.partial(_compile_one, options={"backend": backend, **kwargs})


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
