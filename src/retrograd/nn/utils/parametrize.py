"""torch's ``torch.nn.utils.parametrize``: a module's parameter or buffer computed by modules
from the tensors it is stored as.

``register_parametrization(module, "weight", P())`` moves ``module.weight`` to
``module.parametrizations.weight.original`` (or ``original0``, ``original1``, ... when
``P.right_inverse`` returns several tensors) and makes ``module.weight`` a property that
computes ``P()(original)`` each time it is read, so gradients reach the originals; assigning
to ``module.weight`` stores ``right_inverse`` of the value. As in torch, the module's class is
replaced by a subclass holding the property, and state-dict keys are torch's
(``parametrizations.weight.original``, ``parametrizations.weight.0.<P's state>``).
``cached()`` computes each parametrized tensor once per block.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from ...autodiff import no_grad
from ...errors import DTypeError, InvalidArgumentError, MissingMemberError, ShapeError
from ...errors import guard_namespace as _guard_namespace
from ...tensor import Tensor
from ...tensor.inplace import assign
from ..modules.container import ModuleDict, ModuleList
from ..modules.module import Module
from ..parameter import Parameter

__all__ = [
    "ParametrizationList",
    "cached",
    "is_parametrized",
    "register_parametrization",
    "remove_parametrizations",
    "type_before_parametrizations",
]

_cache_depth = 0
_cache: dict[tuple[int, str], Tensor] = {}


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """Inside the block, each parametrized tensor is computed once, at its first read (one
    forward through a layer that reads its weight several times, as torch's)."""
    global _cache_depth
    _cache_depth += 1
    try:
        yield
    finally:
        _cache_depth -= 1
        if not _cache_depth:
            _cache.clear()


def _store(module: Module, name: str, value: Tensor) -> None:
    """Register ``value`` as ``module.<name>``: a parameter if it is one, else a buffer."""
    if isinstance(value, Parameter):
        module.register_parameter(name, value)
    else:
        module.register_buffer(name, value)


def _set_value(original: Tensor, value: Tensor) -> Tensor:
    """``original`` holding ``value`` (the same object where shape and dtype allow, so an
    optimizer made before keeps it)."""
    if original.shape == value.shape and original.dtype == value.dtype:
        assign(original, value.detach(), "parametrize")
        return original
    if isinstance(original, Parameter):
        return Parameter(value.detach(), requires_grad=original.requires_grad)
    return value.detach()


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order to its ``original`` (or to
    ``original0``, ``original1``, ...), as torch's."""

    def __init__(self, modules: Any, original: Tensor, unsafe: bool = False):
        super().__init__(modules)
        self.unsafe = unsafe
        new: Any = original
        with no_grad():
            for module in reversed(list(self)):
                # a right_inverse that raises NotImplementedError is the identity, as in
                # torch (orthogonal without trivialization)
                if hasattr(module, "right_inverse"):
                    with contextlib.suppress(NotImplementedError):
                        new = module.right_inverse(new)
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            _store(self, "original", _set_value(original, new))
        else:
            for i, value in enumerate(new):
                if isinstance(original, Parameter):
                    value = Parameter(value.detach(), requires_grad=original.requires_grad)
                _store(self, f"original{i}", value)
        if not unsafe:
            _check_same(original, self(), "register_parametrization")

    def originals(self) -> list[Tensor]:
        if self.is_tensor:
            return [self.original]
        return [getattr(self, f"original{i}") for i in range(self.ntensors)]

    def right_inverse(self, value: Tensor) -> None:
        """Store ``value`` as the originals: each parametrization's ``right_inverse``, last
        first (assigning to the parametrized tensor)."""
        with no_grad():
            for module in reversed(list(self)):
                if not hasattr(module, "right_inverse"):
                    raise InvalidArgumentError(
                        f"parametrization {type(module).__name__} does not implement "
                        "right_inverse, so the parametrized tensor cannot be assigned"
                    )
                value = module.right_inverse(value)
        if self.is_tensor:
            if not isinstance(value, Tensor):
                raise InvalidArgumentError("right_inverse must return a tensor here")
            self._set_original("original", value)
        else:
            if len(value) != self.ntensors:
                raise InvalidArgumentError(
                    f"right_inverse must return a sequence of {self.ntensors} tensors, got "
                    f"{len(value)}"
                )
            for i, part in enumerate(value):
                self._set_original(f"original{i}", part)

    def _set_original(self, name: str, value: Tensor) -> None:
        current = getattr(self, name)
        fresh = _set_value(current, value)
        if fresh is not current:
            _store(self, name, fresh)

    def forward(self) -> Tensor:
        modules = list(self)
        x = modules[0](*self.originals())
        for module in modules[1:]:
            x = module(x)
        return x


def _check_same(original: Tensor, value: Any, op: str) -> None:
    if not isinstance(value, Tensor):
        raise InvalidArgumentError(f"{op}: a parametrization must return a tensor, got {value!r}")
    if value.dtype != original.dtype:
        raise InvalidArgumentError(
            f"{op}: the parametrization changes the dtype ({original.dtype} -> {value.dtype}); "
            "pass unsafe=True to allow it"
        )
    if value.shape != original.shape:
        raise ShapeError(
            f"{op}: the parametrization changes the shape ({list(original.shape)} -> "
            f"{list(value.shape)}); pass unsafe=True to allow it"
        )


def _parametrized_class(cls: type) -> type:
    """A subclass of ``cls`` whose ``__setattr__`` sends a parametrized name to its property."""

    def __setattr__(self: Any, name: str, value: Any) -> None:  # noqa: N807
        if isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)
        else:
            cls.__setattr__(self, name, value)

    def __getstate__(self: Any) -> Any:  # noqa: N807
        # (the class is made here, so pickle could not find it again: say so as torch does)
        raise InvalidArgumentError(
            "Serialization of parametrized modules is only supported through state_dict(); "
            f"save {type(self).__name__}'s state_dict() and load it into a module "
            "parametrized again"
        )

    def __deepcopy__(self: Any, memo: dict) -> Any:  # noqa: N807
        # torch's default_deepcopy: the replica is of this same class, its __dict__ copied
        # (the copy module would otherwise call __getstate__)
        replica = memo.get(id(self))
        if replica is None:
            replica = cls.__new__(type(self))
            memo[id(self)] = replica
            object.__setattr__(replica, "__dict__", copy.deepcopy(self.__dict__, memo))
        return replica

    methods = {
        "__setattr__": __setattr__,
        "__getstate__": __getstate__,
        "__deepcopy__": __deepcopy__,
    }
    return type(f"Parametrized{cls.__name__}", (cls,), methods)


def _property(tensor_name: str) -> property:
    def get(self: Any) -> Tensor:
        parametrization = self.parametrizations[tensor_name]
        if not _cache_depth:
            return parametrization()
        key = (id(self), tensor_name)
        if key not in _cache:
            _cache[key] = parametrization()
        return _cache[key]

    def set_(self: Any, value: Tensor) -> None:
        self.parametrizations[tensor_name].right_inverse(value)

    return property(get, set_)


def is_parametrized(module: Any, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has parametrizations (on ``tensor_name``, when given)."""
    parametrizations = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else tensor_name in parametrizations


def type_before_parametrizations(module: Any) -> type:
    """The module's class before parametrizations replaced it."""
    return type(module).__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(module: Any, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Any:  # fmt: skip
    """Compute ``module.<tensor_name>`` as ``parametrization(original)`` from now on
    (torch's ``register_parametrization``; a second one on the same name is applied after
    the first). Returns ``module``.

    >>> import retrograd as rg
    >>> from retrograd import nn
    >>> class Symmetric(nn.Module):
    ...     def forward(self, x):
    ...         return x.triu() + x.triu(1).transpose(0, 1)
    >>> layer = register_parametrization(nn.Linear(3, 3), "weight", Symmetric())
    >>> sorted(layer.state_dict())
    ['bias', 'parametrizations.weight.original']
    >>> w = layer.weight
    >>> bool((w == w.transpose(0, 1)).all())
    True
    """
    for what, value in (("module", module), ("parametrization", parametrization)):
        if not isinstance(value, Module):
            raise DTypeError(
                f"register_parametrization: {what} must be an nn.Module, got {type(value).__name__}"
            )
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            current = getattr(module, tensor_name)
            _check_same(current, parametrization(current), "register_parametrization")
        module.parametrizations[tensor_name].append(parametrization)
        module.parametrizations[tensor_name].unsafe |= unsafe
        return module
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise InvalidArgumentError(
            f"register_parametrization: module '{type(module).__name__}' does not have a "
            f"parameter, a buffer, or a parametrized element with name '{tensor_name}'"
        )
    original = getattr(module, tensor_name)
    if original is None:  # torch's AttributeError (None has no shape)
        raise MissingMemberError(
            f"register_parametrization: {type(module).__name__}.{tensor_name} is None"
        )
    parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        module.__class__ = _parametrized_class(type(module))
        module.register_module("parametrizations", ModuleDict())
    setattr(type(module), tensor_name, _property(tensor_name))
    module.parametrizations[tensor_name] = parametrizations
    return module


def remove_parametrizations(module: Any, tensor_name: str, leave_parametrized: bool = True) -> Any:
    """Make ``module.<tensor_name>`` a plain parameter or buffer again: the parametrized value
    (``leave_parametrized``, kept in the same object when the original is one tensor) or the
    original. Returns ``module``."""
    if not is_parametrized(module, tensor_name):
        raise InvalidArgumentError(
            f"remove_parametrizations: module {type(module).__name__} does not have a "
            f"parametrization on {tensor_name}"
        )
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            with no_grad():
                value = getattr(module, tensor_name)
            original = _set_value(original, value)
    elif leave_parametrized:
        value = getattr(module, tensor_name)
        requires = value.requires_grad
        original = Parameter(value.detach(), requires_grad=True) if requires else value.detach()
    else:
        raise InvalidArgumentError(
            "remove_parametrizations: cannot leave unparametrized (`leave_parametrized=False`) "
            "a tensor that is parametrized in terms of a sequence of tensors"
        )
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    _store(module, tensor_name, original)
    if not is_parametrized(module):
        del module._modules["parametrizations"]
        module.__class__ = type(module).__bases__[0]
    return module


# Arguments no check foresaw (a str or None for a tensor, a str for a size) get an error of
# the hierarchy naming the function (errors.guard), as rg.* and nn.functional's do.
# register_parametrization runs the user's parametrization: its exceptions pass unchanged.
_guard_namespace(
    globals(), ["is_parametrized", "remove_parametrizations", "type_before_parametrizations"]
)
