"""``checkpoint(function, *args)``: torch's activation checkpointing call.

Here the values and gradients are those of ``function(*args)`` (as torch's), and the memory
saving is the backend's business: the checkpointing strategy of ``rg.Autodiff``
(``rg.BalancedCheckpointing``, ``rg.BudgetCheckpointing``) decides what is kept and what is
recomputed for the whole graph, so this call runs ``function`` as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import check_callable, check_count, check_iterable

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: Any = None,
               preserve_rng_state: bool = True, **kwargs: Any) -> Any:  # fmt: skip
    """``function(*args, **kwargs)`` (see the module: the strategy recomputes)."""
    check_callable("checkpoint", function, "function")  # (the call's own errors pass unchanged)
    kwargs.pop("context_fn", None)
    kwargs.pop("determinism_check", None)
    kwargs.pop("debug", None)
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
