"""torch's ``torch.nn.utils.stateless.functional_call`` (also ``rg.func.functional_call``):
run a module with other tensors in place of its parameters and buffers.

The given tensors are put in the module's registries for the one call and the module's own
put back after it (also when the call raises), so what the forward computes is a function of
the given tensors: gradients flow to them (``rg.autograd.grad(loss, params.values())``), not
to the module's parameters.

>>> import retrograd as rg
>>> from retrograd import nn
>>> lin = nn.Linear(2, 1)
>>> weights = {"weight": rg.ones((1, 2)), "bias": rg.zeros(1)}
>>> functional_call(lin, weights, (rg.tensor([[1.0, 2.0]]),)).tolist()
[[3.0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import DTypeError, InvalidArgumentError, KeyMismatchError, MissingMemberError
from ...tensor import Tensor
from ..modules.module import Module

__all__ = ["functional_call"]

_MISSING = object()


def _merged(dicts: Any) -> dict[str, Any]:
    if isinstance(dicts, Mapping):
        return dict(dicts)
    if not isinstance(dicts, Sequence) or not all(isinstance(d, Mapping) for d in dicts):
        raise InvalidArgumentError(
            "functional_call: parameter_and_buffer_dicts must be a dict or a sequence of "
            f"dicts, got {type(dicts).__name__}"
        )
    merged: dict[str, Any] = {}
    for d in dicts:
        for key, value in d.items():
            if key in merged:
                raise InvalidArgumentError(
                    f"functional_call: {key!r} appeared in multiple dictionaries; behavior of "
                    "functional call is ambiguous"
                )
            merged[key] = value
    return merged


def _tied(module: Any, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with each tied name (one tensor registered under several) filled from the
    name given for it, as torch's ``tie_weights=True``."""
    names_of: dict[int, list[str]] = {}
    for kind in ("named_parameters", "named_buffers"):
        for name, value in getattr(module, kind)(remove_duplicate=False):
            if value is not None:
                names_of.setdefault(id(value), []).append(name)
    full = dict(given)
    for names in names_of.values():
        if len(names) < 2:
            continue
        chosen = [n for n in names if n in given]
        for n in chosen[1:]:
            if given[n] is not given[chosen[0]]:
                raise InvalidArgumentError(
                    f"functional_call: {chosen[0]!r} and {n!r} are tied in the module but are "
                    "given different values (pass tie_weights=False to untie them)"
                )
        if chosen:
            for n in names:
                full.setdefault(n, given[chosen[0]])
    return full


def _swap(module: Any, name: str, value: Any) -> tuple[Any, str, str, Any]:
    """Put ``value`` in the place of ``name``; what :func:`_restore` needs to undo it."""
    *path, leaf = name.split(".")
    try:
        owner = module.get_submodule(".".join(path))
    except AttributeError as error:  # torch's AttributeError, which ``except`` clauses expect
        raise MissingMemberError(
            f"functional_call: {name!r} names no parameter or buffer of the module ({error})"
        ) from None
    for kind in ("_parameters", "_buffers"):
        registry = owner.__dict__[kind]
        if leaf in registry:
            old = registry[leaf]
            registry[leaf] = value
            return owner, kind, leaf, old
    if isinstance(getattr(type(owner), leaf, None), property):
        # a parametrized tensor: set through its parametrization (``right_inverse``), as
        # torch's ``setattr``, and set back to the value it had after the call
        old = getattr(owner, leaf)
        setattr(owner, leaf, value)
        return owner, "property", leaf, old.detach() if isinstance(old, Tensor) else old
    old = owner.__dict__.get(leaf, _MISSING)
    object.__setattr__(owner, leaf, value)
    return owner, "__dict__", leaf, old


def _restore(owner: Any, kind: str, leaf: str, old: Any) -> None:
    if kind == "property":
        setattr(owner, leaf, old)
    elif kind != "__dict__":
        owner.__dict__[kind][leaf] = old
    elif old is _MISSING:
        owner.__dict__.pop(leaf, None)
    else:
        owner.__dict__[leaf] = old


def functional_call(
    module: Any,
    parameter_and_buffer_dicts: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """``module(*args, **kwargs)`` with the tensors of ``parameter_and_buffer_dicts`` (dotted
    names, as ``named_parameters``/``named_buffers`` give) in place of its own; ``strict``
    requires exactly the module's names, ``tie_weights`` gives tied names one value."""
    if not isinstance(module, Module):  # (the call runs the user's module: unguarded)
        raise DTypeError(f"functional_call: expected a Module, got {type(module).__name__}")
    given = _merged(parameter_and_buffer_dicts)
    for name, value in given.items():
        if value is not None and not isinstance(value, Tensor):
            raise InvalidArgumentError(
                f"functional_call: {name!r} must be a Tensor, got {type(value).__name__}"
            )
    if tie_weights:
        given = _tied(module, given)
    if strict:
        own = [n for n, _ in module.named_parameters(remove_duplicate=False)]
        own += [n for n, _ in module.named_buffers(remove_duplicate=False)]
        missing = [n for n in own if n not in given]
        unexpected = [n for n in given if n not in own]
        if missing or unexpected:
            raise KeyMismatchError(
                "functional_call (strict=True): "
                f"missing key(s) {missing}, unexpected key(s) {unexpected}"
            )
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    swapped = []
    try:
        for name, value in given.items():
            swapped.append(_swap(module, name, value))
        return module(*args, **(kwargs or {}))
    finally:
        for record in reversed(swapped):
            _restore(*record)
