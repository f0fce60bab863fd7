"""``torch.optim.optimizer``: the module optimizers written as torch's import their base from
(``from torch.optim.optimizer import Optimizer, ParamsT, required``), its global step hooks,
and the helpers that optimizers copied from torch's own sources call
(``_use_grad_for_differentiable`` on ``step``, ``_get_value``, ``_get_scalar_dtype``,
``_default_to_fused_or_foreach``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from ..autodiff.grad_mode import is_grad_enabled, set_grad_enabled
from ..runtime_settings import get_default_dtype
from ..step_hooks import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from ..tensor import Tensor
from ..tensor.dtypes import DTYPE_OBJECTS
from .optimizers import Optimizer, required

__all__ = [
    "Optimizer",
    "ParamsT",
    "StateDict",
    "register_optimizer_step_post_hook",
    "register_optimizer_step_pre_hook",
    "required",
]

#: torch's annotation of an optimizer's ``params``: tensors, parameter groups, or named tensors.
ParamsT: TypeAlias = Iterable[Tensor] | Iterable[dict[str, Any]] | Iterable[tuple[str, Tensor]]

#: torch's annotation of ``state_dict()``'s value.
StateDict: TypeAlias = dict[str, Any]


def _use_grad_for_differentiable(func: Callable[..., Any]) -> Callable[..., Any]:
    """torch's decorator of ``step``: the step runs with gradient recording on only where the
    optimizer was built ``differentiable`` (its defaults say so), and the mode it found is
    restored afterwards, whatever the step raised."""

    @functools.wraps(func)
    def _use_grad(*args: Any, **kwargs: Any) -> Any:
        optimizer = args[0]  # (the decorated step's self, as torch assumes)
        previous = is_grad_enabled()
        try:
            set_grad_enabled(bool(optimizer.defaults.get("differentiable", False)))
            return func(*args, **kwargs)
        finally:
            set_grad_enabled(previous)

    return _use_grad


def _get_value(x: Any) -> Any:
    """torch's: a one-element tensor (a step count kept as a tensor) as its Python number,
    anything else as it is."""
    return x.item() if isinstance(x, Tensor) else x


def _get_scalar_dtype(is_fused: bool | None = None) -> Any:
    """torch's dtype of an optimizer's scalar state (``state['step']``): float64 where the
    default dtype is, float32 otherwise (and for a fused step)."""
    if is_fused:
        return DTYPE_OBJECTS["float32"]
    wide = str(get_default_dtype()) == "float64"
    return DTYPE_OBJECTS["float64" if wide else "float32"]


def _default_to_fused_or_foreach(
    params: list[Tensor], differentiable: bool, use_fused: bool = False
) -> tuple[bool, bool]:
    """torch's choice of implementation, ``(fused, foreach)``: torch takes neither for
    parameters on the CPU (its multi-tensor kernels are its accelerators'), the only device
    here, so the single-tensor path a copied optimizer keeps beside them is the one taken, as
    torch takes it on the CPU."""
    return False, False
