"""The :class:`Module` base class: parameters, buffers and sub-modules registered by name.

A module keeps three ordered dicts, as PyTorch's does: ``_parameters`` (:class:`Parameter`
slots, or ``None`` for an absent one such as a ``bias=False`` layer's bias), ``_buffers``
(tensors that are state but not trained: batch norm's running statistics) and ``_modules``.
Assigning to an attribute registers: a ``Parameter`` as a parameter, a ``Module`` as a
sub-module; ``register_buffer`` adds a buffer, and assigning a tensor to a buffer's name
replaces it. Every parameter has a dotted name (``"0.weight"``, ``"encoder.fc.bias"``).

Gradients stay a value: ``loss.backward()`` returns them and an optimizer reads them from it,
then replaces each parameter's *value* (the ``Parameter`` object stays; see
:mod:`retrograd.nn.parameter`). Parameters are identified by object: the same ``Parameter``
under two names (weight tying) is listed once, under the first name met in registration order,
by :meth:`Module.named_parameters`; ``state_dict`` has it under every name, as PyTorch's.

>>> import retrograd as rg
>>> from retrograd import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> [name for name, _ in model.named_parameters()]
['0.weight', '0.bias', '2.weight', '2.bias']
>>> model(rg.zeros((3, 4))).shape
retrograd.Size([3, 2])
"""

from __future__ import annotations

import collections
import contextlib
import copy
import io
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from ...backend.protocol import Backend
from ...device import Device
from ...errors import (
    AutodiffError,
    DeviceUnavailableError,
    DTypeError,
    InvalidArgumentError,
    KeyMismatchError,
    MissingMemberError,
    ShapeError,
    SizeMismatchError,
    StateValueTypeError,
    check_bool,
    check_callable,
)
from ...files import atomic_write
from ...serialization import (
    ARCHIVE_DAMAGE,
    foreign_entries,
    hidden_entries,
    saved_by,
)
from ...serialization import load as load_saved
from ...tensor import COMPLEX_DTYPES, DTYPES, GRAD_DTYPES, Tensor, random, tensor
from ...tensor.dtypes import Size, canonical_dtype
from ...tensor.dtypes import canonical_dtype as _canonical_dtype
from ...tensor.dtypes import cast_host as _cast_host
from ...tensor.inplace import assign
from ...tensor.inplace import assign as _assign  # load_state_dict's parameter is torch's name
from ...tensor.internal import lay_out
from ...tensor.kept_gradients import forget_gradient, zero_kept_gradient
from ...tensor.layouts import check_memory_format, preserve_format
from ...tensor.layouts import memory_format as _memory_format
from ..parameter import Buffer, Parameter, is_lazy
from .hooks import (
    RemovableHandle,
    any_global_hooks,
    call_with_hooks,
    register_hook,
    register_state_hook,
    state_hooks,
)
from .state_value import StateValue
from .state_value import host_array as _host_array


class _IncompatibleKeys(
    collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
):
    """What ``load_state_dict`` returns, as torch's ``_IncompatibleKeys`` (its name, so its
    repr: ``_IncompatibleKeys(missing_keys=[...], unexpected_keys=[...])``):
    ``missing, unexpected = model.load_state_dict(state, strict=False)``."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


IncompatibleKeys = _IncompatibleKeys

__all__ = ["Module"]

StateSource = Mapping[str, Any] | str | os.PathLike


def _not_numbers(value: Any) -> str:
    """A state-dict value that holds no numbers, as an error message names it."""
    if value is None or isinstance(value, str | bytes):
        return repr(value)[:40]
    return f"a value of type {type(value).__name__}"


def _missing_by_kind(missing: list[str], own: dict[str, Tensor], parameters: set[int]) -> str:
    """The missing keys of a strict load (torch's ``Missing key(s) in state_dict``) by kind:
    parameters (``parameters`` holds their ids), buffers, and keys a module's own loading
    step added."""
    kinds: dict[str, list[str]] = {"parameters": [], "buffers": [], "keys": []}
    for name in missing:
        value = own.get(name)
        kind = "keys" if value is None else "parameters" if id(value) in parameters else "buffers"
        kinds[kind].append(name)
    listed = [f"missing {kind} {names}" for kind, names in kinds.items() if names]
    return ", ".join(listed) or "missing no keys"


def _run_load_steps(
    walk: list[tuple[str, Module]],
    steps: dict[str, list[Any]],
    state: collections.OrderedDict,
    metadata: Mapping[str, Any],
    assign: bool,
    lists: tuple[list[str], list[str], list[str]],
) -> collections.OrderedDict:
    """torch's ``load`` recursion for the modules that override ``_load_from_state_dict`` or
    have load pre-hooks: each module's step sees (and may edit) its own view of the state,
    the keys under its prefix copied from its parent's view after the parent's step, as
    torch's ``child_state_dict``; ``strict`` is always ``True`` there, as torch passes it.
    Returns the state the checked pass loads: each key as the deepest module whose prefix
    it is under left it (a key a step dropped or renamed is gone, as it is from what that
    module and its children load in torch)."""
    missing, unexpected, errors = lists
    views: dict[str, dict[str, Any]] = {}
    for prefix, module in walk:
        dotted = f"{prefix}." if prefix else ""
        if not prefix:
            view: dict[str, Any] = state
        else:
            parent = views[prefix.rpartition(".")[0]]
            view = {key: value for key, value in parent.items() if key.startswith(dotted)}
        views[prefix] = view
        local_metadata = dict(metadata.get(prefix, {}))
        if assign:
            local_metadata["assign_to_params_buffers"] = assign
        for call in steps[prefix]:
            call(module, view, dotted, local_metadata, True, missing, unexpected, errors)

    def owner(key: str) -> str:
        """The deepest module prefix ``key`` lies under ("" for the root)."""
        found, path = "", ""
        for part in key.split(".")[:-1]:
            path = f"{path}.{part}" if path else part
            if path not in views:
                break
            found = path
        return found

    merged = collections.OrderedDict()
    for prefix, view in views.items():
        for key, value in view.items():
            if owner(key) == prefix:
                merged[key] = value
    found_metadata = getattr(state, "_metadata", None)
    if found_metadata is not None:
        merged._metadata = found_metadata  # type: ignore[attr-defined]
    return merged


def _size_mismatches(
    state: Mapping[str, Any], own: dict[str, Tensor]
) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """The entries of ``state`` whose shape is not their tensor's in ``own``: (name, the
    state's shape, the tensor's), in ``own``'s order; entries that are not arrays of numbers
    are left to the conversion's own error, and a [1] value for a 0-d tensor loads (torch's)."""
    found = []
    for name, current in own.items():
        if name not in state:
            continue
        value = state[name]
        try:  # (a tensor's own shape: no copy to the host)
            shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(_host_array(value))
        except (ValueError, TypeError, RuntimeError, NotImplementedError):
            continue  # (a nested tensor has no shape: the conversion's error says so)
        expected = tuple(current.size())
        if shape != expected and not (shape == (1,) and expected == ()):
            found.append((name, shape, expected))
    return found


def _torch_report(
    module: str,
    missing: list[str],
    unexpected: list[str],
    mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]],
) -> str:
    """torch's message for a failed ``load_state_dict`` (its lines, in its order: missing keys,
    unexpected keys, then each size mismatch), which ported code matches on (``"size mismatch
    for"``, ``"Missing key(s) in state_dict"``); ``mismatched`` holds (name, the state's shape,
    the module's)."""
    lines = []
    if missing:
        names = ", ".join(f'"{k}"' for k in missing)
        lines.append(f"Missing key(s) in state_dict: {names}. ")
    if unexpected:
        names = ", ".join(f'"{k}"' for k in unexpected)
        lines.append(f"Unexpected key(s) in state_dict: {names}. ")
    lines += [
        f"size mismatch for {name}: copying a param with shape {Size(given)} from checkpoint, "
        f"the shape in current model is {Size(current)}."
        for name, given, current in mismatched
    ]
    # (on one line, as every error here: torch's lines follow each other)
    return f"Error(s) in loading state_dict for {module}: " + " ".join(s.strip() for s in lines)


class _CalledWithoutModule:
    """A load pre-hook registered by torch's private ``_register_load_state_dict_pre_hook``
    without ``with_module``: called without the module (an object, not a closure, so that a
    module holding one still pickles, as torch's whole-model ``torch.save`` needs)."""

    def __init__(self, hook: Callable[..., Any]) -> None:
        self.hook = hook

    def __call__(self, module: Any, *state_args: Any) -> Any:
        return self.hook(*state_args)


#: Converters of other libraries' modules into retrograd's, by the module that defines the
#: converted class: a library's glue registers one (``retrograd.einops``: einops' torch layers,
#: which ported code builds unchanged), and a Module given such an object, as an attribute or a
#: container item, owns the converted module instead. Each returns ``None`` for a class it does
#: not know.
_FOREIGN_MODULES: dict[str, Callable[[Any], Module | None]] = {}


def register_foreign_modules(defining_module: str, convert: Callable[[Any], Module | None]) -> None:
    """Convert, from now on, the objects of the classes of ``defining_module`` (exactly: not
    of subclasses defined elsewhere) that a Module is given into what ``convert`` returns."""
    _FOREIGN_MODULES[defining_module] = convert


def adopted(value: Any) -> Any:
    """``value``, or the retrograd module converted from it when its class's module has a
    converter registered (:func:`register_foreign_modules`) that knows it."""
    convert = _FOREIGN_MODULES.get(type(value).__module__)
    if convert is None:
        return value
    converted = convert(value)
    return value if converted is None else converted


class Module:
    """Base class of layers and models.

    Subclasses call ``super().__init__()``, assign parameters (``nn.Parameter``), sub-modules
    and buffers (:meth:`register_buffer`) as attributes, and define :meth:`forward`.
    """

    training: bool
    #: torch's version of the class's state-dict layout, saved in ``state_dict()._metadata``
    #: and given back to ``_load_from_state_dict`` (batch norm's 2 added
    #: ``num_batches_tracked``); a subclass whose layout changes raises it
    _version: int = 1
    #: torch's class attributes that code reads or sets: the type variable of
    #: ``state_dict(destination=...)``'s annotations, whether ``__init__`` passes its
    #: arguments on to the next class of a mixin (torch's default, False: it takes none), and
    #: the legacy flag asking ``torch.save`` to write the class's source (nothing is written)
    T_destination = TypeVar("T_destination", bound=dict[str, Any])
    call_super_init: bool = False
    dump_patches: bool = False

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # -- attributes ---------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        state = self.__dict__
        if "_parameters" not in state:
            # torch's: a plain attribute may be set before ``super().__init__()`` (rosinality's
            # ``ConvLayer(nn.Sequential)`` sets ``self.padding`` first), a registered kind not
            if isinstance(value, Parameter | Buffer | Module):
                raise AttributeError(
                    f"cannot assign {name!r} before Module.__init__() call in "
                    f"{type(self).__name__}.__init__"
                )
            object.__setattr__(self, name, value)
            return
        params, buffers, modules = state["_parameters"], state["_buffers"], state["_modules"]
        if type(value).__module__ in _FOREIGN_MODULES:
            value = adopted(value)
        # A name re-assigned keeps its place in its registry (torch's): ``children()``,
        # ``state_dict()`` and ``Sequential(*list(m.children())[:-1])`` see the old order.
        if isinstance(value, Parameter):
            _check_parameter_name(name)
            value = _registered(_global_parameter_registration_hooks, self, name, value)
            self._forget(name, keep="_parameters")
            params[name] = value
        elif isinstance(value, Buffer):
            plain = Tensor(value.primitive, value.backend, value.device)
            self.register_buffer(name, plain, persistent=value.persistent)
        elif name in params:
            if value is None:
                params[name] = None  # (torch's register_parameter: no hooks for None)
            else:  # a tensor given for a parameter: its values, the Parameter object stays
                self.set_parameter(name, value)
        elif isinstance(value, Module):
            value = _registered(_global_module_registration_hooks, self, name, value)
            self._forget(name, keep="_modules")
            modules[name] = value
        elif name in modules:
            if value is not None:
                raise DTypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} as sub-module "
                    f"{name!r} (a Module or None is expected)"
                )
            modules[name] = _registered(_global_module_registration_hooks, self, name, None)
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise DTypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} as buffer "
                    f"{name!r} (a Tensor or None is expected)"
                )
            buffers[name] = _registered(_global_buffer_registration_hooks, self, name, value)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: parameters, buffers, sub-modules live in dicts.
        state = self.__dict__
        for kind in ("_parameters", "_buffers", "_modules"):
            registered = state.get(kind)
            if registered is not None and name in registered:
                return registered[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        # a plain attribute (``self.cache = None``) is Python's to delete: ``_forget`` would
        # drop it from the instance dict and then report it missing
        if any(name in self.__dict__[kind] for kind in _REGISTRIES):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def _forget(self, name: str, keep: str | None = None) -> bool:
        """Drop ``name`` from every registry but ``keep`` and from the instance dict; whether
        it was registered."""
        found = False
        for kind in ("_parameters", "_buffers", "_modules"):
            if kind != keep and self.__dict__[kind].pop(name, _MISSING) is not _MISSING:
                found = True
        self._non_persistent_buffers.discard(name)
        self.__dict__.pop(name, None)
        return found

    def __dir__(self) -> list[str]:
        names = set(super().__dir__())
        names.update(self._parameters, self._buffers, self._modules)
        return sorted(names)

    def _check_name(self, op: str, name: Any, kind: str) -> None:
        """``name`` a non-empty str without '.', and no attribute of the module but one of
        ``kind`` (``"_parameters"``, ``"_buffers"``, ``"_modules"``), which it replaces
        (torch's KeyError "attribute already exists": registering ``forward`` or ``training``
        hid the method, or removed the flag every layer reads; ``add_module("weight", ...)``
        on a ``Linear`` dropped its weight, and ``register_parameter`` over a buffer made
        BatchNorm's running mean a trained parameter)."""
        if not isinstance(name, str) or not name or "." in name:
            # torch's KeyError for a str (KeyMismatchError is one), its TypeError otherwise
            error = KeyMismatchError if isinstance(name, str) else DTypeError
            raise error(f"{op}: invalid name {name!r} (a non-empty str without '.')")
        for other, label in _REGISTRIES.items():
            if other != kind and name in self.__dict__[other]:
                raise KeyMismatchError(
                    f"{op}: {name!r} is already a {label} of {type(self).__name__}"
                )
        if name not in self.__dict__[kind] and hasattr(self, name):
            raise KeyMismatchError(
                f"{op}: attribute {name!r} already exists in {type(self).__name__}; choose "
                "another name"
            )

    def register_parameter(self, name: str, param: Any) -> Parameter | None:
        """Own ``param`` (torch's keyword name) as the parameter ``name``; returns it.

        ``param`` is a :class:`Parameter` (registered as it is, so it may be shared) or
        ``None`` (an absent parameter, as a ``bias=False`` layer's ``bias``). A plain tensor
        is refused, as torch refuses it (wrap it: ``nn.Parameter(t)``; ``self.w = t`` keeps it
        as a plain attribute).
        """
        value = param
        self._check_name("register_parameter", name, "_parameters")
        if value is not None and not isinstance(value, Parameter):
            raise DTypeError(
                f"register_parameter: cannot assign {_describe(value)} to parameter {name!r} "
                "(nn.Parameter or None required)"
            )
        if value is not None:  # (torch's: an absent parameter is registered without them)
            value = _registered(_global_parameter_registration_hooks, self, name, value)
        self._forget(name, keep="_parameters")
        self._parameters[name] = value
        return value

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Keep ``tensor`` (or ``None``) as state that is not trained: it is listed by
        :meth:`named_buffers`, saved by :meth:`state_dict` unless ``persistent=False``, cast by
        :meth:`to`, and read back as ``self.<name>``. A tracked value is cut from its graph."""
        value = tensor
        self._check_name("register_buffer", name, "_buffers")
        if value is not None and not isinstance(value, Tensor):
            raise DTypeError(
                f"register_buffer: {name!r} must be a Tensor or None, got {_describe(value)}"
            )
        value = _registered(_global_buffer_registration_hooks, self, name, value)
        if value is not None:
            if not isinstance(value, Tensor):
                raise DTypeError(
                    f"register_buffer: {name!r} must be a Tensor or None, got {_describe(value)}"
                )
            value = _untracked(value)
        self._forget(name, keep="_buffers")
        self._buffers[name] = value
        if not persistent:
            self._non_persistent_buffers.add(name)

    def register_module(self, name: str, module: Module | None) -> None:
        """Own ``module`` as the sub-module ``name`` (as assigning it does)."""
        self._check_name("register_module", name, "_modules")
        module = adopted(module)
        if module is not None and not isinstance(module, Module):
            raise DTypeError(f"register_module: {name!r} is not a Module: {_describe(module)}")
        module = _registered(_global_module_registration_hooks, self, name, module)
        self._forget(name, keep="_modules")
        self._modules[name] = module

    add_module = register_module

    # -- traversal ----------------------------------------------------------------------------
    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """This module (name ``prefix``) and every sub-module, depth first, with dotted names;
        a module reachable twice is listed once (unless ``remove_duplicate=False``)."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(
                    memo, f"{prefix}.{name}" if prefix else name, remove_duplicate
                )

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def _named_members(
        self, kind: str, prefix: str, recurse: bool, remove_duplicate: bool
    ) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for module_prefix, module in modules:
            for name, value in getattr(module, kind).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` for every parameter, in registration order; a
        parameter reachable under two names is listed once, under the first.

        >>> from retrograd import nn
        >>> next(nn.Linear(2, 3).named_parameters())[0]
        'weight'
        """
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter, in the order of :meth:`named_parameters` (each object once), as
        an iterator, as torch's (``next(model.parameters())``; ``list(...)`` to index)."""
        for _, value in self.named_parameters(recurse=recurse):
            yield value

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, tensor)`` for every buffer, in registration order."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer, as an iterator (torch's)."""
        for _, value in self.named_buffers(recurse=recurse):
            yield value

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _owner(self, name: str, kind: str = "_parameters") -> tuple[Module, str]:
        op = "get_parameter" if kind == "_parameters" else "get_buffer"
        _check_name(op, name)
        *path, leaf = name.split(".")
        module = self
        for part in path:
            child = module._modules.get(part)
            if child is None:
                raise MissingMemberError(
                    f"{op}: {type(self).__name__} has no sub-module {part!r} (in {name!r})"
                )
            module = child
        if leaf not in getattr(module, kind):
            what = "parameter" if kind == "_parameters" else "buffer"
            raise MissingMemberError(f"{op}: {type(self).__name__} has no {what} {name!r}")
        return module, leaf

    def get_parameter(self, target: str) -> Parameter:
        """The parameter with dotted name ``target``."""
        name = target
        module, leaf = self._owner(name)
        parameter = module._parameters[leaf]
        if parameter is None:  # torch's: a name registered as None is no nn.Parameter
            raise MissingMemberError(f"get_parameter: {name!r} is None, not a Parameter")
        return parameter

    def get_buffer(self, target: str) -> Tensor:
        """The buffer with dotted name ``target``."""
        name = target
        module, leaf = self._owner(name, "_buffers")
        return module._buffers[leaf]

    def _get_name(self) -> str:
        """The class's name, as torch's ``__repr__`` and custom reprs print it."""
        return type(self).__name__

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """torch's: put ``module`` at the dotted ``target`` (its parent must exist; with
        ``strict``, a sub-module must already be there)."""
        _check_name("set_submodule", target)
        if not target:
            raise InvalidArgumentError("set_submodule: cannot set the module itself ('')")
        if not isinstance(module, Module):
            raise DTypeError(f"set_submodule: {_describe(module)} is not a Module")
        parent_name, _, leaf = target.rpartition(".")
        parent = self.get_submodule(parent_name)
        if strict and not isinstance(parent._modules.get(leaf), Module):
            raise AttributeError(f"{type(parent).__name__} has no sub-module {leaf!r}")
        setattr(parent, leaf, module)

    def get_submodule(self, target: str) -> Module:
        _check_name("get_submodule", target)
        module = self
        for part in target.split(".") if target else ():
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no sub-module {part!r}")
            module = child
        return module

    def set_parameter(self, name: str, value: Tensor) -> Parameter:
        """Give the parameter with dotted ``name`` the values of ``value``; returns it.

        The :class:`Parameter` object stays (every name it is tied to, and every reference,
        sees the new values); ``value`` must have its shape (a ``ShapeError`` otherwise) and
        is cast to its dtype and cut from any graph. The parameter stays a leaf that requires
        grad, with its distributed mark.
        """
        module, leaf = self._owner(name)
        parameter = module._parameters[leaf]
        if not isinstance(value, Tensor):
            raise DTypeError(f"set_parameter: {name!r} must be a Tensor, got {_describe(value)}")
        if parameter is None:
            module._parameters[leaf] = Parameter(value)
            return module._parameters[leaf]
        if value.shape != parameter.shape:
            raise ShapeError(
                f"set_parameter: {name!r} has shape {list(parameter.shape)}, got "
                f"{list(value.shape)}; a parameter keeps its shape (assign a new "
                f"nn.Parameter to the attribute to change it)"
            )
        return assign(parameter, value, f"set_parameter {name!r}")

    # -- modes, functions, dtypes -------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout active, batch norm on batch statistics) for this module and
        its sub-modules; returns self. As torch's, each child's own ``train`` is called, so a
        module that overrides it (LoRA's merging of its weights on ``eval()``) sees the switch.
        """
        if not isinstance(mode, bool):
            raise InvalidArgumentError(
                f"{type(self).__name__}.train: training mode is expected to be boolean, got "
                f"{mode!r}"
            )
        object.__setattr__(self, "training", mode)
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode (dropout is the identity, batch norm uses its running statistics)."""
        return self.train(False)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every sub-module (children first, as PyTorch) and on self; returns
        self. The idiom of custom initialization: ``model.apply(self._init_weights)``."""
        check_callable("apply", fn, "fn")  # here, not after the children were visited
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(
        self,
        *args: Any,
        dtype: Any = None,
        device: Any = None,
        non_blocking: bool = False,
        memory_format: Any = None,
    ) -> Module:
        """Cast floating parameters and buffers to ``dtype`` (``"float32"``/``"float64"``)
        and/or move everything to ``device``, in place; returns self.

        As ``torch.nn.Module.to``: ``to("float64")``, ``to(rg.float64)``, ``to(dtype=...)``,
        ``to("cpu")``, ``to(rg.device("cpu", 1))``, ``to(tensor)`` (its dtype and device).
        Tied parameters stay one object; int buffers (batch norm's ``num_batches_tracked``)
        keep their dtype. ``memory_format`` (``rg.channels_last``...) gives every 4-d and 5-d
        parameter and buffer torch's strides of that format, in place (``stride()``,
        ``is_contiguous(memory_format=)``: :mod:`retrograd.tensor.layouts`); the values stay.
        """
        if memory_format is not None and not isinstance(memory_format, _memory_format):
            raise InvalidArgumentError(
                f"Module.to: memory_format must be an rg.memory_format, got {memory_format!r}"
            )
        for arg in args:
            if isinstance(arg, Tensor):
                dtype, device = arg.dtype, arg.device
            elif isinstance(arg, str) and arg in DTYPES:
                dtype = arg
            elif isinstance(arg, Device | str):
                device = arg
            elif type(arg).__name__ == "dtype" or isinstance(arg, type):
                dtype = canonical_dtype("Module.to", arg)
            elif isinstance(getattr(arg, "type", None), str):  # a torch.device
                device = Device(arg.type, arg.index)
            elif not isinstance(arg, bool):
                raise InvalidArgumentError(f"Module.to: expected a dtype or a device, got {arg!r}")
        if dtype is not None and dtype not in GRAD_DTYPES:
            raise DTypeError(
                f"Module.to: only floating point or complex dtypes are accepted, but got "
                f"dtype={dtype}"
            )
        if dtype in COMPLEX_DTYPES:  # torch's warning: most layers are written for reals
            warnings.warn(
                f"Module.to({dtype}): complex modules are new in torch too, and some layers "
                "may not work as expected with complex parameters or buffers",
                UserWarning,
                stacklevel=2,
            )
        target = Device(device) if device is not None else None
        if memory_format is not None:  # torch converts 4-d and 5-d tensors, checking the rank
            for value in (*self.parameters(), *self.buffers()):
                if value.ndim in (4, 5):
                    check_memory_format("Module.to", memory_format, value.ndim)
        for parameter in self.parameters():
            _convert(parameter, dtype, target, "Module.to")
            _lay_out(parameter, memory_format)
        for module in self.modules():
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    module._buffers[name] = _converted(buffer, dtype, target)
                    _lay_out(module._buffers[name], memory_format)
        return self

    def float(self) -> Module:
        """Floating point parameters and buffers to float32; returns self. Complex ones stay
        complex, as torch's (``Module.to`` casts them)."""
        return self._to_real("float32")

    def half(self) -> Module:
        """Floating point parameters and buffers to float16 (complex ones stay); returns self."""
        return self._to_real("float16")

    def bfloat16(self) -> Module:
        """Floating point parameters and buffers to bfloat16 (complex ones stay); returns self."""
        return self._to_real("bfloat16")

    def cpu(self) -> Module:
        """Everything on ``cpu:0``; returns self."""
        return self.to("cpu")

    def cuda(self, device: Any = None) -> Module:
        """Everything on a GPU (the parameters' backend must compute on one); returns self."""
        index = (
            0 if device is None else (device if isinstance(device, int) else Device(device).index)
        )
        parameters = list(self.parameters())
        if parameters:
            parameters[0].cuda(index)  # the backend's check, with its message
        return self.to(Device("cuda", index))

    def xpu(self, device: Any = None) -> Module:
        """torch's ``xpu``: everything on an Intel GPU; refused, as torch's build without one
        refuses it, unless the parameters' backend computes there (:meth:`_to_accelerator`)."""
        return self._to_accelerator("xpu", device)

    def mtia(self, device: Any = None) -> Module:
        """torch's ``mtia``: everything on an MTIA device, refused as :meth:`xpu` is."""
        return self._to_accelerator("mtia", device)

    def ipu(self, device: Any = None) -> Module:
        """torch's ``ipu``: everything on an IPU, refused as :meth:`xpu` is."""
        return self._to_accelerator("ipu", device)

    def _to_accelerator(self, kind: str, device: Any) -> Module:
        """The device moves torch names after an accelerator that retrograd has no backend
        for: torch without one raises (``Torch not compiled with XPU enabled``), and a move
        here would only label CPU data with that device, so the move is refused unless the
        parameters' backend computes on ``kind`` (the empty module has nothing to move)."""
        values = [*self.parameters(), *(b for b in self.buffers() if b is not None)]
        home = values[0].backend.default_device.kind if values else kind
        if home != kind:
            raise DeviceUnavailableError(
                f"Module.{kind}: Torch not compiled with {kind.upper()} enabled: the "
                f"parameters' backend computes on {home!r}, not on an {kind.upper()}; keep the "
                f"module on {home!r}"
            )
        if device is None or isinstance(device, int):
            index = device or 0
        else:
            index = Device(device).index
        return self.to(Device(kind, index))

    def _to_real(self, dtype: str) -> Module:
        """``float()``, ``double()``, ``half()``, ``bfloat16()``: torch's casts of the floating
        point parameters and buffers only (``t.float() if t.is_floating_point() else t``)."""
        for parameter in self.parameters():
            if parameter.dtype not in COMPLEX_DTYPES:
                _convert(parameter, dtype, None, f"Module.{_REAL_CASTS[dtype]}")
        for module in self.modules():
            for name, buffer in module._buffers.items():
                if buffer is not None and buffer.dtype not in COMPLEX_DTYPES:
                    module._buffers[name] = _converted(buffer, dtype, None)
        return self

    def type(self, dst_type: Any) -> Module:
        """Every parameter and buffer cast to ``dst_type``, as torch's (integer buffers such
        as batch norm's ``num_batches_tracked`` too, unlike :meth:`to`); returns self. A
        parameter that requires grad cannot become an integer one (torch's refusal too)."""
        from ...tensor.dtypes import legacy_type_dtype

        dtype = legacy_type_dtype(dst_type)
        if dtype not in GRAD_DTYPES:
            trained = [name for name, p in self.named_parameters() if p.requires_grad]
            if trained:
                raise DTypeError(
                    f"Module.type: parameters that require grad must be floating point or "
                    f"complex, so {trained[0]!r} cannot become {dtype} (freeze it with "
                    "requires_grad_(False) first)"
                )
        for parameter in self.parameters():
            if parameter.dtype != dtype:
                assign(parameter, parameter.detach().cast(dtype), "Module.type", keep_dtype=False)
        for module in self.modules():
            for name, buffer in module._buffers.items():
                if buffer is not None and buffer.dtype != dtype:
                    module._buffers[name] = _untracked(buffer).cast(dtype)
        return self

    def share_memory(self) -> Module:
        """torch's ``share_memory``: every parameter and buffer marked shared
        (``Tensor.share_memory_``); returns self. Threads of this process share the module
        as it is; handing it to another process is refused there (the process would train a
        copy the others never see: a Hogwild loop would train nothing)."""
        for value in (*self.parameters(), *self.buffers()):
            value.share_memory_()
        return self

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """torch's in-place ``torch.compile`` of the module's ``__call__`` (no wrapper, so the
        state dict keeps its keys): nothing to do, as retrograd runs modules eagerly (a step is
        made fast by ``rg.capture``)."""

    def to_empty(self, *, device: Any = None, recurse: bool = True) -> Module:
        """Parameters and buffers moved to ``device`` with unspecified values (here their
        current ones, as nothing is saved by dropping them); returns self."""
        return self.to(device=device) if device is not None else self

    def double(self) -> Module:
        """Floating point parameters and buffers to float64; returns self. Complex ones stay
        complex, as torch's (``Module.to`` casts them)."""
        return self._to_real("float64")

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Make every parameter a leaf that requires grad, or an untracked value (frozen:
        backward computes no gradient for it, an optimizer skips it); returns self."""
        check_bool("Module.requires_grad_", requires_grad, "requires_grad")
        for parameter in self.parameters():
            _set_requires_grad(parameter, requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's ``model.zero_grad``: gradients are the value ``backward()`` returns, not
        module state, so there is nothing to clear; but where torch's would show, this does
        what ``optimizer.zero_grad`` does to the parameters' kept gradients
        (``tensor.kept_gradients``): ``set_to_none=False`` leaves a parameter that had a
        gradient a zero one, which a later step without a gradient for it still steps with
        (momentum, weight decay), and the default drops it."""
        clear = forget_gradient if set_to_none else zero_kept_gradient
        for parameter in self.parameters():
            clear(parameter)

    # -- distributed --------------------------------------------------------------------------
    def set_distributed(self) -> Module:
        """Mark every parameter that requires a gradient for all-reduce, its dotted name as
        the param id.

        Every replica (device or process) names its parameters alike, so the ids agree; a tied
        parameter is one parameter, marked once under its first name. A frozen parameter
        (``requires_grad`` False) stays frozen, as torch's ``DistributedDataParallel`` leaves
        it out of its reducer: marking it would give it a gradient the optimizer steps.
        """
        for name, value in list(self.named_parameters()):
            if value.requires_grad:
                value.set_distributed(name)
        return self

    # -- state ----------------------------------------------------------------------------------
    def _state_items(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """PyTorch's ``state_dict`` walk: own parameters, own persistent buffers, then each
        child's; a tied parameter (or shared module) under every name it has."""
        yield from self._own_state_items(prefix)
        for name, child in self._modules.items():
            if child is not None:
                yield from child._state_items(f"{prefix}{name}.")

    def _own_state_items(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """This module's own tensors of the state (what :meth:`_save_to_state_dict` saves)."""
        for name, value in self._parameters.items():
            if value is not None:
                yield prefix + name, value
        for name, value in self._buffers.items():
            if value is not None and name not in self._non_persistent_buffers:
                yield prefix + name, value

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        """torch's per-module saving step, for subclasses to override (calling ``super()``
        and adding entries of their own): this module's parameters and persistent buffers,
        then its ``_extra_state`` where the class defines :meth:`get_extra_state`."""
        for name, value in self._own_state_items(prefix):
            # (a lazy module's uninitialized placeholder is the entry itself, as torch's)
            kept = keep_vars or is_lazy(value)
            destination[name] = value if kept else StateValue(value.numpy(), value)
        if type(self).get_extra_state is not Module.get_extra_state:
            destination[prefix + _EXTRA_STATE] = self.get_extra_state()

    def get_extra_state(self) -> Any:
        """torch's: what a module keeps beyond parameters and buffers (a vocabulary, a
        counter), saved under ``<prefix>_extra_state`` by ``state_dict`` where a subclass
        defines it, and given back to :meth:`set_extra_state` on load."""
        raise NotImplementedError(
            f"{type(self).__name__}.get_extra_state: define it (and set_extra_state) to save "
            "state beyond parameters and buffers"
        )

    def set_extra_state(self, state: Any) -> None:
        """torch's: take back what :meth:`get_extra_state` gave (on ``load_state_dict``)."""
        raise NotImplementedError(
            f"{type(self).__name__}.set_extra_state: define it to load what get_extra_state saved"
        )

    def _takes_extra_state(self) -> bool:
        return type(self).set_extra_state is not Module.set_extra_state

    def _fill_state(self, out: Any, prefix: str, keep_vars: bool) -> Any:
        """torch's ``state_dict`` recursion: this module's pre-hooks, its own entries
        (:meth:`_save_to_state_dict`), its children's, then its post-hooks (a child's hook that
        returns a new dict replaces nothing above it, as in torch)."""
        local_metadata = {"version": self._version}
        metadata = getattr(out, "_metadata", None)
        if metadata is not None:  # (torch's key: the prefix without its final dot)
            metadata[prefix[:-1]] = local_metadata
        for hook, _ in state_hooks(self, "state_dict_pre"):
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(out, prefix, keep_vars)
        for name, child in self._modules.items():
            if child is not None:
                child._fill_state(out, f"{prefix}{name}.", keep_vars)
        for hook, public in state_hooks(self, "state_dict"):
            result = hook(self, out, prefix, local_metadata)
            if result is not None:
                if public:
                    raise InvalidArgumentError(
                        "state_dict: a hook registered with register_state_dict_post_hook "
                        f"returned {type(result).__name__}; it must return None (change the "
                        "state dict in place)"
                    )
                out = result
        return out

    def _incompatible(
        self, state: Mapping[str, Any], prefix: str, keys: IncompatibleKeys, hooks: bool
    ) -> None:
        """torch's ``load`` recursion over the keys: this module's missing and unexpected
        keys added to ``keys``' lists, then its children's (each given the keys under its
        prefix); then, with ``hooks``, its load post-hooks called with ``keys`` (which they
        may change in place)."""
        own = [name for name, _ in self._own_state_items(prefix)]  # (in torch's order)
        if self._takes_extra_state():
            own.append(prefix + _EXTRA_STATE)
        keys.missing_keys.extend(name for name in own if name not in state)
        local = {name[len(prefix) :] for name in own}
        below: dict[str, dict[str, Any]] = {}  # each child's keys (one pass over the keys)
        for key, value in state.items():
            # torch's rule: a dotted name must start with a child's, another must be one of
            # this module's own entries
            first, dot, _ = key[len(prefix) :].partition(".")
            if dot and first in self._modules:
                below.setdefault(first, {})[key] = value
            elif (first not in self._modules) if dot else (first not in local):
                keys.unexpected_keys.append(key)
        for name, child in self._modules.items():
            if child is not None:
                child._incompatible(below.get(name, {}), f"{prefix}{name}.", keys, hooks)
        if hooks:
            for hook, _ in state_hooks(self, "load_state_dict_post"):
                if hook(self, keys) is not None:
                    raise InvalidArgumentError(
                        "load_state_dict: a hook registered with "
                        "register_load_state_dict_post_hook must return None (change "
                        "missing_keys and unexpected_keys in place)"
                    )

    def state_dict(
        self,
        *args: Any,
        destination: dict | None = None,
        prefix: str = "",
        keep_vars: bool = False,
    ) -> dict[str, Any]:
        """Parameters and persistent buffers by dotted name, PyTorch's keys (a tied parameter
        under each of its names, batch norm's ``num_batches_tracked``), as NumPy copies that
        answer torch's tensor idioms and write back in place (:class:`~.state_value.StateValue`;
        ``keep_vars``: the tensors themselves). torch's ``prefix`` goes before every key and
        ``destination`` is the dict filled (and returned).

        As torch's, a new state dict is an ``OrderedDict`` whose ``_metadata`` holds each
        module's ``{"version": cls._version}`` by prefix (``""`` the root, ``"0"`` its first
        child), which :meth:`load_state_dict` hands to :meth:`_load_from_state_dict`; the
        deprecated positional form ``state_dict(destination, prefix, keep_vars)`` warns as
        torch's does.

        ``torch_model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``
        loads it into the same model written for PyTorch.
        """
        if args:
            if len(args) > 3:
                raise DTypeError(
                    f"state_dict: takes at most 3 positional arguments (destination, prefix, "
                    f"keep_vars), got {len(args)}"
                )
            warnings.warn(
                "state_dict: positional arguments are deprecated (as in torch); pass "
                "destination=, prefix=, keep_vars= by keyword",
                FutureWarning,
                stacklevel=2,
            )
            # torch's rule: a positional value fills only what the keywords left at default
            if destination is None:
                destination = args[0]
            if len(args) > 1 and prefix == "":
                prefix = args[1]
            if len(args) > 2 and keep_vars is False:
                keep_vars = args[2]
        if not isinstance(prefix, str):
            raise DTypeError(f"state_dict: prefix must be a str, got {_describe(prefix)}")
        if destination is not None and not isinstance(destination, collections.abc.MutableMapping):
            raise DTypeError(
                f"state_dict: destination must be a dict to fill, got {_describe(destination)}"
            )
        if destination is None:
            destination = collections.OrderedDict()
            destination._metadata = collections.OrderedDict()  # type: ignore[attr-defined]
        return self._fill_state(destination, prefix, keep_vars)

    def register_state_dict_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, prefix, keep_vars)`` before this module's entries are added
        to a state dict (torch's). Returns a handle whose ``remove()`` unregisters it."""
        return register_state_hook(self, "state_dict_pre", hook, "register_state_dict_pre_hook")

    def register_state_dict_post_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, state_dict, prefix, local_metadata)`` after this module's
        entries (its children's too) are in a state dict; it changes the dict in place and
        returns None (torch's). Returns a handle whose ``remove()`` unregisters it."""
        return register_state_hook(self, "state_dict", hook, "register_state_dict_post_hook")

    def _register_state_dict_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """torch's private form of :meth:`register_state_dict_post_hook`: a result that is
        not None replaces the state dict (of the call made on this module)."""
        return register_state_hook(
            self, "state_dict", hook, "_register_state_dict_hook", public=False
        )

    def register_load_state_dict_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` before this module's entries are loaded (torch's); it
        may edit the state dict (a copy of the one given) and the lists."""
        return register_state_hook(
            self, "load_state_dict_pre", hook, "register_load_state_dict_pre_hook"
        )

    def _register_load_state_dict_pre_hook(
        self, hook: Callable[..., Any], with_module: bool = False
    ) -> RemovableHandle:
        """torch's private form of :meth:`register_load_state_dict_pre_hook` (the one its
        ``SpectralNorm`` and ``WeightNorm`` hooks use): ``hook`` is called without the module
        unless ``with_module``."""
        check_callable("_register_load_state_dict_pre_hook", hook, "hook")
        call = hook if with_module else _CalledWithoutModule(hook)
        return register_state_hook(
            self, "load_state_dict_pre", call, "_register_load_state_dict_pre_hook", public=False
        )

    def register_load_state_dict_post_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, incompatible_keys)`` after this module and its children are
        loaded, with the missing and unexpected keys found so far (torch's); it may change
        those lists in place (emptied, a strict load succeeds) and returns None. With such a
        hook, the values are written before the strict check (torch's order), so a strict
        load whose keys still mismatch after the hooks raises with the values written."""
        return register_state_hook(
            self, "load_state_dict_post", hook, "register_load_state_dict_post_hook"
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`state_dict` to an ``.npz`` file (``.npz`` is appended to a name
        without it, as ``np.savez`` does), whole or not at all: a failed or interrupted write
        leaves the previous file as it was (:func:`retrograd.files.atomic_write`)."""
        if not isinstance(path, str | os.PathLike):
            raise DTypeError(f"save: expected a path (str or os.PathLike), got {_describe(path)}")
        path = os.fspath(path)
        if not str(path).endswith(".npz"):
            path = f"{path}.npz"
        state = self.state_dict()
        with atomic_write(path) as file:
            np.savez(file, **state)

    def load_state_dict(
        self, state_dict: StateSource, strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Set parameters and buffers from a mapping (NumPy arrays, retrograd or PyTorch
        tensors), an ``.npz`` file or a file ``rg.save`` wrote of one; returns torch's named
        tuple of the ``missing_keys`` and ``unexpected_keys`` (both empty under ``strict``).
        ``assign=True`` keeps the state's dtypes, as torch's (which keeps the state's tensors;
        each ``Parameter`` here stays the same object, holding the state's values and dtype).

        Each value is written into the existing object (a ``Parameter`` stays the same object,
        so ties hold), cast to its dtype. ``strict`` (the default) requires exactly this
        module's keys (:meth:`state_dict`'s). Every entry is checked and converted before any
        is written: when one is wrong (a missing key, a shape, a dtype that is not a number)
        nothing changes and the error names the key, what it expects and what it found. A
        file is read without pickle: object arrays are refused, never run.
        """
        state = state_dict  # (torch's keyword name)
        if not isinstance(state, Mapping):
            if not isinstance(state, str | bytes | os.PathLike) and not hasattr(state, "read"):
                raise DTypeError(
                    "load_state_dict: expected a mapping of names to arrays or tensors, or "
                    f"the path of an .npz file, got {type(state).__name__}"
                )
            state = _read_archive(state)
        # torch's per-module step, for the classes that override it (torchvision's
        # FrozenBatchNorm2d drops ``num_batches_tracked``; others rename old keys): each edits
        # a copy of the state, as torch's does, before the one checked pass below loads it
        # torch's state dicts carry each module's version (``_metadata``, keyed by prefix);
        # a plain mapping has none, as torch reads it
        metadata = getattr(state, "_metadata", None)
        state = collections.OrderedDict(state)  # (a copy the per-module steps may edit)
        if metadata is not None:  # (as torch's copy, which its steps may read)
            state._metadata = metadata  # type: ignore[attr-defined]
        metadata = metadata or {}
        keys = [key for key in state if not isinstance(key, str)]
        if keys:  # an int key failed deep inside as "'int' object is not subscriptable"
            raise DTypeError(
                f"load_state_dict: the state's keys must be dotted names (str), got {keys[0]!r} "
                f"({type(keys[0]).__name__})"
            )
        added_missing: list[str] = []
        added_unexpected: list[str] = []
        errors: list[str] = []
        post_hooks = False
        # (a module reachable under several names is loaded under each, as torch's is)
        walk = list(self.named_modules(remove_duplicate=False))
        steps = {}
        for prefix, module in walk:
            post_hooks = post_hooks or bool(state_hooks(module, "load_state_dict_post"))
            step = [hook for hook, _ in state_hooks(module, "load_state_dict_pre")]
            if type(module)._load_from_state_dict is not Module._load_from_state_dict:
                step.append(type(module)._load_from_state_dict)
            steps[prefix] = step
        if any(steps.values()):
            lists = (added_missing, added_unexpected, errors)
            state = _run_load_steps(walk, steps, state, metadata, assign, lists)
        if errors:
            raise KeyMismatchError(f"load_state_dict: {'; '.join(map(str, errors))}")
        for prefix, module in list(self.named_modules()):  # lazy layers take the state's sizes
            if hasattr(module, "_lazy_load"):
                module._lazy_load(state, f"{prefix}." if prefix else "")
        own = dict(self._state_items())

        def incompatible(hooks: bool) -> IncompatibleKeys:
            keys = IncompatibleKeys([], [])
            self._incompatible(state, "", keys, hooks)
            for found, added in zip(keys, (added_missing, added_unexpected)):
                found += [name for name in added if name not in found]
            return keys

        def check_strict(keys: IncompatibleKeys, sizes: bool = False) -> None:
            if strict and (keys.missing_keys or keys.unexpected_keys):
                parameters = {id(p) for p in self.parameters()}
                mismatched = _size_mismatches(state, own) if sizes else []
                said = _torch_report(
                    type(self).__name__, keys.missing_keys, keys.unexpected_keys, mismatched
                )
                raise KeyMismatchError(
                    "load_state_dict: "
                    f"{_missing_by_kind(keys.missing_keys, own, parameters)}, "
                    f"unexpected {keys.unexpected_keys}. {said}"
                )

        keys = incompatible(hooks=False)
        if not post_hooks:  # (with them, the check waits for what the hooks leave)
            # torch's one error lists the size mismatches beside the missing keys
            check_strict(keys, sizes=True)
        fresh = {}
        for name, current in own.items():  # convert everything before changing anything
            if name not in state:
                continue
            unread = ""
            value = state[name]
            if isinstance(value, list | tuple | int | float | complex):
                # torch's refusal: nested lists or a number are no tensor
                raise StateValueTypeError(
                    f"load_state_dict: {name!r} is {current.dtype}, the state has "
                    f"{_not_numbers(value)}. Error(s) in loading "
                    f'state_dict for {type(self).__name__}: While copying the parameter named "'
                    f'{name}", expected torch.Tensor or Tensor-like object from checkpoint but '
                    f"received {type(value)}"
                )
            try:
                array = _host_array(state[name])
            except (ValueError, TypeError):  # ragged nested lists
                array = None
            except (RuntimeError, NotImplementedError) as error:
                # a torch tensor without values here (meta: "Cannot copy out of meta
                # tensor"; nested), which escaped as torch's own bare error
                array, unread = None, f" that cannot be read ({' '.join(str(error).split())})"
            if array is None or array.dtype.kind not in "biufc":  # checked before the shape:
                # None or a str is a 0-d array, and "the state has []" would say nothing
                found = f"{array.dtype} values" if array is not None and array.ndim else None
                # torch's words where torch's check is the same: no tensor at all
                value = state[name]
                tensor_like = isinstance(value, Tensor) or callable(getattr(value, "detach", None))
                said = (
                    ""
                    if tensor_like
                    else f". Error(s) in loading state_dict for {type(self).__name__}: While "
                    f'copying the parameter named "{name}", expected torch.Tensor or '
                    f"Tensor-like object from checkpoint but received {type(state[name])}"
                )
                raise StateValueTypeError(  # (a RuntimeError too, as torch's)
                    f"load_state_dict: {name!r} is {current.dtype}, the state has "
                    f"{found or _not_numbers(state[name])}{unread}{said}"
                )
            if tuple(array.shape) == (1,) and tuple(current.size()) == ():
                # torch's allowance: a scalar saved with shape [1] (torch before 0.4 had no
                # 0-d tensors, and such checkpoints still load there) loads into a 0-d one
                array = array.reshape(())
            if tuple(array.shape) != current.size():  # (a lazy placeholder's: [0])
                # every mismatch, as torch's message lists them (after this first one)
                mismatched = [(name, tuple(array.shape), tuple(current.size()))]
                mismatched += [m for m in _size_mismatches(state, own) if m[0] != name]
                # torch's one error lists, under strict, the keys missing and unexpected
                # beside the sizes: those its post hooks leave (none here without hooks: the
                # strict check above has raised for them)
                keys = (
                    incompatible(hooks=True) if strict and post_hooks else IncompatibleKeys([], [])
                )
                said = _torch_report(
                    type(self).__name__, keys.missing_keys, keys.unexpected_keys, mismatched
                )
                raise SizeMismatchError(
                    f"load_state_dict: {name!r} has shape {list(current.size())}, "
                    f"the state has {list(array.shape)}. {said}"
                )
            dtype = _state_dtype(state[name], current.dtype) if assign else current.dtype
            if (
                assign
                and isinstance(current, Parameter)
                and current.requires_grad
                and dtype not in GRAD_DTYPES
            ):  # torch's refusal: the assigned tensor would be a Parameter requiring grad
                raise StateValueTypeError(
                    f"load_state_dict(assign=True): {name!r} is a Parameter that requires grad, "
                    f"the state has {dtype} values. Error(s) in loading state_dict for "
                    f'{type(self).__name__}: While copying the parameter named "{name}", '
                    f"whose dimensions in the model are {Size(current.size())} and whose "
                    f"dimensions in the checkpoint are {Size(array.shape)}, an exception "
                    "occurred : ('Only Tensors of floating point and complex dtype can require "
                    "gradients',)."
                )
            device = current.device
            if assign and device.kind == "meta":
                device = _materialized_device(state[name], current)
            fresh[name] = tensor(
                _cast_host(array, dtype), dtype=dtype, backend=current.backend, device=device
            )
        for name, value in fresh.items():
            _assign(
                own[name],
                value,
                f"load_state_dict {name!r}",
                keep_dtype=not assign,
                device=value.device,
            )
        for prefix, module in self.named_modules():  # after the tensors, as torch's order
            key = f"{prefix}.{_EXTRA_STATE}" if prefix else _EXTRA_STATE
            if module._takes_extra_state() and key in state:
                module.set_extra_state(state[key])
        if post_hooks:
            keys = incompatible(hooks=True)
            check_strict(keys)
        return keys

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """torch's per-module loading step, for subclasses to override: an override may edit
        ``state_dict`` (the keys under ``prefix`` are this module's), add to the key lists and
        ``error_msgs``, and call ``super()._load_from_state_dict(...)``. Here the base does
        nothing: :meth:`load_state_dict` loads every module's own entries in one checked pass
        after the overrides have run, so a wrong entry still changes nothing."""

    def replicate(self, backend: Any = None, device: Any = None) -> Module:
        """A copy of this module whose parameters and buffers are new tensors (same values) on
        ``backend`` and ``device`` (this module's when ``None``); nothing is shared with the
        original, and ties within it are kept.

        Data-parallel training makes one replica per device this way; a replica on a backend
        without autodiff (``rg.NumpyBackend()``) evaluates without recording any graph.
        """
        if backend is not None and not isinstance(backend, Backend):
            raise DTypeError(
                f"replicate: backend must be a backend (rg.NumpyBackend(), rg.Autodiff(...)), "
                f"got {_describe(backend)}"
            )
        memo: dict[int, Any] = {}
        for value in self.parameters():
            fresh = tensor(  # dtype given again: bfloat16 reads back as float32 (NumPy's)
                np.array(value.numpy(), copy=True),
                dtype=value.dtype,
                backend=backend if backend is not None else value.backend,
                device=device if device is not None else value.device,
            )
            memo[id(value)] = Parameter(
                fresh, requires_grad=value.is_require_grad() or not value.backend.is_autodiff
            )
        for value in self.buffers():
            memo[id(value)] = tensor(
                np.array(value.numpy(), copy=True),
                dtype=value.dtype,
                backend=backend if backend is not None else value.backend,
                device=device if device is not None else value.device,
            )
        return copy.deepcopy(self, memo)

    # -- calling ------------------------------------------------------------------------------
    def forward(self, *input: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hooks = self.__dict__.get("_call_hooks")
        if hooks is None and not any_global_hooks():
            return self.forward(*args, **kwargs)
        return call_with_hooks(self, hooks, args, kwargs)

    def _hook_table(self, kind: str) -> dict[int, Callable[..., Any]]:
        hooks = self.__dict__.get("_call_hooks")
        return {} if hooks is None else {key: hook for key, (hook, _) in hooks[kind].items()}

    @property
    def _forward_pre_hooks(self) -> dict[int, Callable[..., Any]]:
        """torch's table of forward pre-hooks, read-only here: each registered hook by its
        handle's id, in call order (pruning code looks its methods up in it)."""
        return self._hook_table("pre")

    @property
    def _forward_hooks(self) -> dict[int, Callable[..., Any]]:
        """torch's table of forward hooks, read-only here (code tests ``len()`` of it)."""
        return self._hook_table("post")

    @property
    def _backward_hooks(self) -> dict[int, Callable[..., Any]]:
        """torch's table of backward hooks (the full ones, or those of
        ``register_backward_hook``), read-only here."""
        return self._hook_table("backward") | self._hook_table("legacy")

    @property
    def _backward_pre_hooks(self) -> dict[int, Callable[..., Any]]:
        """torch's table of full backward pre-hooks, read-only here."""
        return self._hook_table("backward_pre")

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Call ``hook(module, args)`` before each forward (``with_kwargs``:
        ``hook(module, args, kwargs)``); a non-``None`` result replaces the arguments (a
        tuple, or a single value; with kwargs, an ``(args, kwargs)`` pair). Returns a handle
        whose ``remove()`` unregisters it."""
        return register_hook(self, "pre", hook, prepend, with_kwargs)

    def register_forward_hook(
        self,
        hook: Callable[..., Any],
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after each forward (``with_kwargs``:
        ``hook(module, args, kwargs, output)``); a non-``None`` result replaces the output.
        ``always_call``: the hook runs also when the forward (or a hook) raises, with the
        output so far (``None``), before the error goes on. Returns a handle whose
        ``remove()`` unregisters it."""
        return register_hook(self, "post", hook, prepend, with_kwargs, always_call)

    def register_full_backward_hook(
        self, hook: Callable[..., Any], prepend: bool = False
    ) -> RemovableHandle:
        """Call ``hook(module, grad_input, grad_output)`` when backward passes through this
        module (tuples of gradients, ``None`` for an input that needs none); a non-``None``
        result replaces ``grad_input``. One gradient per positional argument of the call and
        per output (each element of a returned tuple), as torch's (see :mod:`.hooks`)."""
        hooks = self.__dict__.get("_call_hooks")
        if hooks is not None and hooks["legacy"]:
            raise AutodiffError(_BOTH_KINDS)
        return register_hook(self, "backward", hook, prepend, False)

    def register_backward_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """torch's deprecated backward hook: ``hook(module, grad_input, grad_output)`` is
        called with the gradients of the op that made the module's output (the first tensor
        of it): ``grad_input`` that op's inputs' (in torch's order for the op; a module whose
        forward is more than one op gets torch's FutureWarning, and the last op's inputs, not
        the module's), ``grad_output`` its output's; a non-``None`` result replaces
        ``grad_input``. Use :meth:`register_full_backward_hook` for the module's own."""
        check_callable("register_backward_hook", hook, "hook")
        hooks = self.__dict__.get("_call_hooks")
        if hooks is not None and hooks["backward"]:
            raise AutodiffError(_BOTH_KINDS)
        return register_hook(self, "legacy", hook, False, False)

    def register_full_backward_pre_hook(
        self, hook: Callable[..., Any], prepend: bool = False
    ) -> RemovableHandle:
        """Call ``hook(module, grad_output)`` before the module's own backward; a non-``None``
        result replaces ``grad_output``."""
        return register_hook(self, "backward_pre", hook, prepend, False)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        # torch's layout: a one-line extra_repr of a leaf inline, else one item per line (the
        # extra_repr's lines first, then the children's)
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            f"({name}): " + _addindent(repr(child), 2) for name, child in self._modules.items()
        ]
        head = f"{type(self).__name__}("
        if len(extra_lines) == 1 and not child_lines:
            return head + extra_lines[0] + ")"
        lines = extra_lines + child_lines
        return head + ("\n  " + "\n  ".join(lines) + "\n)" if lines else ")")


def _addindent(text: str, spaces: int) -> str:
    """``text`` with every line after the first indented by ``spaces``, blank lines left
    empty: torch's helper of ``__repr__``, which custom modules' reprs call too.

    >>> print(_addindent("Block(\\n(fc): Linear()\\n\\n)", 2))
    Block(
      (fc): Linear()
    <BLANKLINE>
      )
    """
    first, *rest = text.split("\n")
    return "\n".join([first, *((" " * spaces + line) if line.strip() else "" for line in rest)])


def register_module_forward_pre_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """torch's global forward pre-hook: ``hook(module, args)`` before every module's forward
    (before the module's own pre-hooks); a non-``None`` result replaces the arguments.
    Returns a handle whose ``remove()`` unregisters it."""
    return register_hook(None, "pre", hook, False, False)


def register_module_forward_hook(
    hook: Callable[..., Any], *, with_kwargs: bool = False, always_call: bool = False
) -> RemovableHandle:
    """torch's global forward hook: ``hook(module, args, output)`` (``with_kwargs``:
    ``hook(module, args, kwargs, output)``) after every module's forward, before the module's
    own hooks; a non-``None`` result replaces the output; ``always_call`` as
    :meth:`Module.register_forward_hook`'s. Returns a handle whose ``remove()`` unregisters
    it."""
    return register_hook(None, "post", hook, False, with_kwargs, always_call)


def register_module_full_backward_pre_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """torch's global backward pre-hook: ``hook(module, grad_output)`` when backward reaches
    any module's output (before the module's own pre-hooks); a non-``None`` result replaces
    ``grad_output``. For modules called with one tensor and returning one, as
    :meth:`Module.register_full_backward_pre_hook`. Returns a handle whose ``remove()``
    unregisters it."""
    return register_hook(None, "backward_pre", hook, False, False)


def register_module_full_backward_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """torch's global backward hook: ``hook(module, grad_input, grad_output)`` when backward
    passes through any module (before the module's own hooks); a non-``None`` result replaces
    ``grad_input``. For modules called with one tensor and returning one, as
    :meth:`Module.register_full_backward_hook`. Returns a handle whose ``remove()``
    unregisters it."""
    return register_hook(None, "backward", hook, False, False)


#: torch's global registration hooks (``nn.modules.module``'s names): ``hook(module, name,
#: value)`` runs whenever a module registers a buffer, a sub-module or a parameter, by its
#: ``register_*`` method or by assignment, and a non-``None`` result is registered instead
_global_buffer_registration_hooks: dict[int, Callable[..., Any]] = {}
_global_module_registration_hooks: dict[int, Callable[..., Any]] = {}
_global_parameter_registration_hooks: dict[int, Callable[..., Any]] = {}


def _add_registration_hook(
    table: dict[int, Callable[..., Any]], hook: Callable[..., Any], op: str
) -> RemovableHandle:
    check_callable(op, hook, "hook")
    handle = RemovableHandle(table)
    table[handle.id] = hook
    return handle


def register_module_buffer_registration_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """torch's global buffer registration hook: ``hook(module, name, buffer)`` each time a
    module registers a buffer (``register_buffer``, or assigning to a buffer's name); a
    non-``None`` result is registered instead. Returns a handle whose ``remove()``
    unregisters it."""
    return _add_registration_hook(
        _global_buffer_registration_hooks, hook, "register_module_buffer_registration_hook"
    )


def register_module_module_registration_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """torch's global module registration hook: ``hook(module, name, submodule)`` each time
    a module registers a sub-module (``add_module``/``register_module``, or assignment); a
    non-``None`` result is registered instead."""
    return _add_registration_hook(
        _global_module_registration_hooks, hook, "register_module_module_registration_hook"
    )


def register_module_parameter_registration_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """torch's global parameter registration hook: ``hook(module, name, param)`` each time a
    module registers a parameter (``register_parameter``, or assigning a ``Parameter`` or
    ``None`` to a parameter's name); a non-``None`` result is registered instead."""
    return _add_registration_hook(
        _global_parameter_registration_hooks,
        hook,
        "register_module_parameter_registration_hook",
    )


def _registered(hooks: dict[int, Callable[..., Any]], module: Module, name: str, value: Any) -> Any:
    """``value`` as the global registration ``hooks`` leave it, each seeing the one before's
    result (torch's loop)."""
    for hook in list(hooks.values()):
        output = hook(module, name, value)
        if output is not None:
            value = output
    return value


_MISSING = object()
#: torch's refusal of both kinds of backward hooks on one module
_BOTH_KINDS = (
    "Cannot use both regular backward hooks and full backward hooks on a single Module. "
    "Please use only one of them."
)
#: the state-dict entry of a module's :meth:`Module.get_extra_state` (torch's name)
_EXTRA_STATE = "_extra_state"


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return type(value).__name__


def _untracked(value: Tensor) -> Tensor:
    """``value``'s values as a tensor without graph on its backend."""
    backend = value.backend
    if not backend.is_autodiff or not value.requires_grad:
        return value
    return Tensor.from_inner(value.inner(), backend=backend)


def _read_archive(path: StateSource) -> Mapping[str, Any]:
    """The arrays of an ``.npz`` file, read without pickle; a file that is not one (truncated,
    damaged, another format, pickled objects) is an ``InvalidArgumentError`` naming it. A
    file ``rg.save`` wrote (``rg.save(model.state_dict(), path)``) is the state dict it holds,
    read by ``rg.load`` (its own arrays are that dict's pieces, not its keys)."""
    name = "the file object" if hasattr(path, "read") else os.fspath(path)
    if hasattr(path, "read") and not _seekable(path):
        # a stream (a pipe, a socket, a response body), read whole as rg.load reads it: NumPy
        # seeks in the archive, and "no attribute 'seek'" was reported as a damaged file
        path = io.BytesIO(path.read())
    if saved_by(path) is not None:  # rg.save's or torch.save's: the object it holds
        saved = load_saved(path)
        if not isinstance(saved, Mapping):
            raise InvalidArgumentError(
                f"load_state_dict: {name} holds a {type(saved).__name__} rg.save wrote, not a "
                "state dict (a dict of names to tensors)"
            )
        return saved
    try:
        # The file is opened here, not by NumPy: ``np.load`` leaves its own handle open when
        # the archive's directory is unreadable (a truncated file), for as long as the error
        # (whose traceback holds it) is kept
        with contextlib.ExitStack() as stack:
            source = path if hasattr(path, "read") else stack.enter_context(open(path, "rb"))
            archive = np.load(source, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError("a single array, not an .npz archive")
            with archive:
                hidden = hidden_entries(source, archive)
                if hidden:  # a damaged directory: the entries after the damage are missing
                    raise ValueError(f"damaged: {hidden}")
                foreign = foreign_entries(archive)
                if foreign:  # NumPy would hand each out as its raw bytes
                    raise ValueError(f"entries that are not NumPy arrays: {', '.join(foreign[:4])}")
                return {entry: archive[entry] for entry in archive.files}
    except FileNotFoundError:
        raise
    except ARCHIVE_DAMAGE as error:
        # NumPy reads bytes it does not know as a pickle and advises allow_pickle, which
        # would run whatever the file holds: said as what it is instead (as text: a local
        # holding the error would make a cycle with its traceback, keeping this frame)
        text = str(error)
        reason = "pickled objects, or not an array file" if "allow_pickle" in text else text
        raise InvalidArgumentError(
            f"load_state_dict: {name} is not a readable .npz archive ({reason})"
        ) from None


def _seekable(file: Any) -> bool:
    seekable = getattr(file, "seekable", None)
    if callable(seekable):
        return bool(seekable())
    return callable(getattr(file, "seek", None)) and callable(getattr(file, "tell", None))


#: the method of :meth:`Module._to_real` for each dtype (its error messages name it)
_REAL_CASTS = {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16"}


def _converted(value: Tensor, dtype: str | None, device: Device | None) -> Tensor:
    """A buffer cast to ``dtype`` (floating and complex ones only, as torch's: a float
    becomes complex, a complex one real) and moved to ``device``."""
    if dtype is not None and value.dtype in GRAD_DTYPES and value.dtype != dtype:
        value = _untracked(value).cast(dtype)
    if device is not None and value.device != device:
        value = value.to(device)
    return value


def _lay_out(value: Tensor, memory_format: Any) -> None:
    """Give a 4-d or 5-d ``value`` the strides of ``memory_format``, in place (torch's
    ``Module.to(memory_format=)`` replaces each such tensor's data by one laid out so)."""
    if memory_format is None or memory_format is preserve_format or value.ndim not in (4, 5):
        return
    lay_out(value, memory_format)


def _convert(parameter: Parameter, dtype: str | None, device: Device | None, op: str) -> None:
    """Cast / move a parameter in place: the object stays, its value is replaced."""
    value = _converted(parameter, dtype, None)
    if value is not parameter or (device is not None and parameter.device != device):
        assign(parameter, value, op, keep_dtype=dtype is None, device=device)


def _set_requires_grad(parameter: Parameter, requires_grad: bool) -> None:
    backend = parameter.backend
    if not backend.is_autodiff or parameter.is_require_grad() == requires_grad:
        return
    # the tensor's own toggle, which keeps the gradient of a graph recorded before a freeze
    # findable once the parameter is thawed
    parameter.requires_grad = requires_grad


def _uniform(shape: tuple[int, ...], bound: float, backend: Any, device: Any, dtype: str) -> Tensor:
    """U(-bound, bound) from the generator :func:`retrograd.seed` seeds; an untracked tensor."""
    values = random(shape, "uniform", dtype=dtype, backend=backend, device=device).numpy()
    return tensor((values * 2.0 - 1.0) * bound, dtype=dtype, backend=backend, device=device)


def _redraw(parameter: Tensor | None, make: Callable[[tuple[int, ...], Any, str], Tensor]) -> None:
    """Give ``parameter`` (if any) new values ``make(shape, device, dtype)``, in place (a
    layer's ``reset_parameters``: the object stays, ties and optimizer state hold)."""
    if parameter is None:
        return
    value = make(tuple(parameter.shape), parameter.device, parameter.dtype)
    assign(parameter, value, "reset_parameters")


def _redraw_uniform(parameter: Tensor | None, bound: float) -> None:
    """``parameter`` drawn again from U(-bound, bound), as the constructor drew it."""
    _redraw(parameter, lambda shape, device, dtype: _uniform(shape, bound, None, device, dtype))


def _refill(parameter: Tensor | None, value: float) -> None:
    """``parameter`` (if any) filled with ``value``, in place."""
    _redraw(
        parameter,
        lambda shape, device, dtype: tensor(np.full(shape, value), dtype=dtype, device=device),
    )


def _reset_affine(module: Module) -> None:
    """A normalization's affine parameters (those it has) back to weight ones and bias
    zeros, in place (its ``reset_parameters``)."""
    _refill(getattr(module, "weight", None), 1.0)
    _refill(getattr(module, "bias", None), 0.0)


def _redraw_fan_in(module: Module) -> None:
    """A layer's weight and bias (if any) drawn again from U(-k, k), k = 1/sqrt(the weight's
    second dimension), as Linear and Bilinear draw them (torch's ``kaiming_uniform_(a=
    sqrt(5))``), in place."""
    bound = _fan_in_bound(module.weight.shape[1])
    _redraw_uniform(module.weight, bound)
    _redraw_uniform(module.bias, bound)


def _fan_in_bound(fan_in: int) -> float:
    """PyTorch's default bound for layers' weights and biases: ``1 / sqrt(fan_in)``."""
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


#: a module's registries and what their entries are called
_REGISTRIES = {"_parameters": "parameter", "_buffers": "buffer", "_modules": "sub-module"}


def _check_parameter_name(name: str) -> None:
    """torch's register_parameter rule, which its ``__setattr__`` of a Parameter applies:
    ``setattr(m, "", p)`` or ``setattr(m, "a.b", p)`` named a parameter no state dict key can
    reach."""
    if not name or "." in name:
        raise KeyMismatchError(
            f"cannot assign a Parameter as {name!r}: a parameter name must be a non-empty str "
            "without '.'"
        )


def _check_name(op: str, name: Any) -> None:
    """A dotted name (``"encoder.0.weight"``) must be a str: anything else failed with an
    ``AttributeError`` about ``split``."""
    if not isinstance(name, str):
        raise DTypeError(f"{op}: expected a dotted name (a str), got {_describe(name)}")


def _materialized_device(value: Any, current: Tensor) -> Device:
    """Where ``load_state_dict(assign=True)`` puts the state's value for a parameter or buffer
    of a meta skeleton: torch's assign keeps the state's tensor, so the value's own device
    (a retrograd tensor's, when it holds data), else the backend's default device; never
    meta, which holds no values."""
    device = getattr(value, "device", None)
    if isinstance(value, Tensor) and device.kind != "meta" and value.backend is current.backend:
        return device
    return current.backend.default_device


def _state_dtype(value: Any, current: str) -> str:
    """The dtype of a state-dict entry (a tensor's, a NumPy array's), which
    ``load_state_dict(assign=True)`` keeps; ``current`` for one retrograd holds no tensors of
    (an int32 array, a Python list)."""
    found = getattr(value, "dtype", None)
    if found is None:
        return current
    try:
        return _canonical_dtype("load_state_dict", found)
    except DTypeError:
        return current
