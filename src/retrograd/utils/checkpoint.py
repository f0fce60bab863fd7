"""``checkpoint(function, *args)``: torch's activation checkpointing call.

Here the values and gradients are those of ``function(*args)`` (as torch's), and the memory
saving is the backend's business: the checkpointing strategy of ``rg.Autodiff``
(``rg.BalancedCheckpointing``, ``rg.BudgetCheckpointing``) decides what is kept and what is
recomputed for the whole graph, so this call runs ``function`` as it is.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from ..autodiff.grad_mode import no_grad
from ..errors import InvalidArgumentError, check_callable, check_count, check_iterable
from ..tensor._dispatch import TensorBase

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: Any = None,
               preserve_rng_state: bool = True, **kwargs: Any) -> Any:  # fmt: skip
    """``function(*args, **kwargs)`` (see the module: the strategy recomputes).

    torch's reentrant form (``use_reentrant=True``, still its default when not given) takes
    positional arguments only, and when none of them requires grad its output does not either
    (it warns: the parameters inside get no gradient); so here too."""
    check_callable("checkpoint", function, "function")  # (the call's own errors pass unchanged)
    kwargs.pop("context_fn", None)
    kwargs.pop("determinism_check", None)
    kwargs.pop("debug", None)
    kwargs.pop("early_stop", None)  # (torch's recomputation flags, not the function's)
    if use_reentrant is None or use_reentrant:
        if kwargs:
            raise InvalidArgumentError(
                f"checkpoint: Unexpected keyword arguments: {','.join(kwargs)} (use_reentrant="
                "True passes positional arguments only; use_reentrant=False takes them)"
            )
        if not any(isinstance(a, TensorBase) and a.requires_grad for a in args):
            warnings.warn(
                "None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2
            )
            with no_grad():
                return function(*args)
    return function(*args, **kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any, **kwargs: Any) -> Any:  # noqa: A002 (torch's name)
    """Run the modules of ``functions`` (a Sequential or a list) one after the other, in
    ``segments`` (a positive int, as torch's splits them; the values do not depend on it)."""
    check_count("checkpoint_sequential", segments, "segments")
    if not hasattr(functions, "children"):
        check_iterable("checkpoint_sequential", functions, "functions")
    modules = list(functions.children()) if hasattr(functions, "children") else list(functions)
    for module in modules:
        input = module(input)  # noqa: A001 (torch's name)
    return input
