"""The state a captured step trains: the parameters of the modules and optimizers it lists.

A replay reads every parameter's current value at its start (so it trains the model as it is
now, also after eager steps or ``load_state_dict``) and writes back, afterwards, a parameter
the step replaced itself. Parameters are tensor objects whose values an optimizer step or
``set_parameter`` replaces in place, so a parameter is found again by the object: a module's by
its dotted name (the tree may be checked for changes), an optimizer's by its position in the
optimizer's ``param_groups`` (torch's groups: an optimizer over a list of parameters, or over
two groups as nanoGPT's ``configure_optimizers`` makes, needs no module at all).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter, is_
from typing import Any

from ..optim import Optimizer
from ..tensor import Tensor
from ..tensor.inplace import assign
from .recording import CaptureError

__all__ = ["State", "inner_value", "write_back"]

_training = attrgetter("training")


def inner_value(tensor: Tensor) -> Any:
    """The inner backend's value of ``tensor`` (what the recorded calls took)."""
    backend = tensor.backend
    return backend.inner_value(tensor.primitive) if backend.is_autodiff else tensor.primitive


class State:
    """The parameters of the modules and optimizers in ``state``, each tensor once.

    :meth:`entries` lists ``(module or None, name, tensor)``: a module's parameters by dotted
    name, then the optimizers' parameters no listed module holds, named by group and position.
    """

    def __init__(self, items: Iterable[Any]):
        self.modules: list[Any] = []
        self.optimizers: list[Any] = []
        for item in items:
            if isinstance(item, Optimizer):
                if not any(item is known for known in self.optimizers):
                    self.optimizers.append(item)
                module = getattr(item, "module", None)
                if module is not None and hasattr(module, "named_parameters"):
                    self._add_module(module)
            elif hasattr(item, "named_parameters"):
                self._add_module(item)
            else:
                raise CaptureError(
                    "capture: state must list modules and optimizers (rg.optim optimizers, "
                    f"over a module, a list of parameters or parameter groups), got "
                    f"{type(item).__name__}"
                )
        self.names = [self._names(module) for module in self.modules]
        self.buffer_names = [self._buffer_names(module) for module in self.modules]
        self.group_sizes = [self._group_sizes(optimizer) for optimizer in self.optimizers]
        self.modes = self._modes()
        #: the modules the step called and their ``training`` flags then (see :meth:`calls`)
        self.called_modules: list[Any] = []
        self.called_modes: list[Any] = []
        self.unlisted: list[tuple[Any, list[Any]]] = []
        #: the buffers of the unlisted modules the step calls, and their inner values then:
        #: constants of the program (see :meth:`calls`)
        self.unlisted_buffers: list[tuple[Any, str, Tensor, Any]] = []
        #: the tensors made before the step that it reads as constants, as weak references,
        #: with their inner values at capture (see :meth:`constant_change`)
        self.closed_over: list[tuple[Any, Any]] = []
        #: each entry's ``requires_grad`` at capture (see :meth:`freeze_change`)
        self.trained: list[tuple[str, Tensor, bool]] = []
        self._walked: tuple | None = None  # (what the walk read, its entries): see checked

    def _add_module(self, module: Any) -> None:
        if not any(module is known for known in self.modules):
            self.modules.append(module)

    @staticmethod
    def _names(module: Any) -> tuple[str, ...]:
        return tuple(name for name, _ in module.named_parameters())

    @staticmethod
    def _buffer_names(module: Any) -> tuple[str, ...]:
        return tuple(name for name, value in _buffers(module))

    @staticmethod
    def _group_sizes(optimizer: Any) -> tuple[int, ...]:
        return tuple(len(group["params"]) for group in optimizer.param_groups)

    def _modes(self) -> tuple:
        """Each sub-module's ``training`` flag: dropout and normalisation branch on it in
        Python, so the captured program is specialised to the modes at capture."""
        return tuple(
            (name, getattr(sub, "training", None))
            for module in self.modules
            for name, sub in module.named_modules()
        )

    def calls(self, called: list[tuple[Any, Any]]) -> None:
        """Note the ``(module, training)`` pairs of the modules the step called, listed or not
        (their modes are checked at each replay too)."""
        self.called_modules = [module for module, _ in called]
        self.called_modes = [training for _, training in called]
        # the called modules outside the listed trees (whose parameters :meth:`entries`
        # reads by name) and their own parameters then: a replay reads the objects recorded
        listed = {id(sub) for module in self.modules for _, sub in module.named_modules()}
        self.unlisted = [
            (module, _own_parameters(module))
            for module in self.called_modules
            if id(module) not in listed
        ]
        self.unlisted_buffers = [
            (module, name, tensor, inner_value(tensor))
            for module, _ in self.unlisted
            for name, tensor in _own_buffers(module)
        ]

    def note_trained(self, entries: list[tuple[Any, str, Tensor]]) -> None:
        """Note whether each entry requires grad at capture: the program computes the
        gradients of those that did and trains them, an eager step only those that do now."""
        self.trained = [(name, tensor, tensor.requires_grad) for _, name, tensor in entries]

    def freeze_change(self) -> str | None:
        """Where a parameter was frozen (``requires_grad_(False)``) or unfrozen since capture:
        the program would still train it, or still leave it alone."""
        for name, tensor, flag in self.trained:
            if tensor.requires_grad is not flag:
                now = "requires" if tensor.requires_grad else "does not require"
                return f"parameter {name!r} {now} grad now, unlike at capture"
        return None

    def constant_change(self) -> str | None:
        """Where a tensor the step closed over was written in place since capture: the
        program reads the value it had then, an eager step the new one."""
        for tensor_ref, value in self.closed_over:
            tensor = tensor_ref()
            if tensor is not None and inner_value(tensor) is not value:
                return (
                    f"a tensor of shape {list(tensor.shape)} made before the step, which it "
                    "reads as a constant, was written in place since capture"
                )
        return None

    def buffer_change(self) -> str | None:
        """Where a buffer of a module the step calls, not listed in ``state``, holds another
        value than at capture (``bn.running_mean.fill_(0)``, ``load_state_dict``): the program
        reads it as a constant, so it is captured again rather than replayed stale."""
        for module, name, tensor, value in self.unlisted_buffers:
            current = getattr(module, "_buffers", {}).get(name)
            if current is not tensor or inner_value(tensor) is not value:
                return (
                    f"buffer {name!r} of a {type(module).__name__} the step calls (in no module "
                    "listed in state) changed since capture"
                )
        return None

    def parameter_change(self) -> str | None:
        """Where a module the step calls, not listed in ``state``, holds another parameter
        object than at capture (``model.fc.weight = nn.Parameter(...)`` with ``state=[opt]``
        over a list of parameters): a replay would read the old one, an eager step the new."""
        for module, kept in self.unlisted:
            if not _same(kept, _own_parameters(module)):
                names = list(getattr(module, "_parameters", {}))
                return (
                    f"a parameter of a {type(module).__name__} the step calls (of {names}, in "
                    "no module listed in state) was replaced since capture"
                )
        return None

    def _tree_mode_change(self) -> str | None:
        modes = self._modes()
        if modes == self.modes:
            return None
        changed = [name or "(root)" for (name, a), (_, b) in zip(modes, self.modes) if a != b]
        return f"train()/eval() mode changed since capture (in {changed or 'the module tree'})"

    def check_modes(self) -> None:
        change = self._tree_mode_change()
        if change is not None:
            raise CaptureError(
                f"captured step: {change}; the step was captured in the modes it had then: "
                "capture it again for the other mode"
            )

    def mode_change(self) -> str | None:
        """Where a module the step calls, listed in ``state`` or not, switched between
        ``train()`` and ``eval()`` since capture; ``None`` if none did."""
        if self.called_modes != list(map(_training, self.called_modules)):
            for module, training in zip(self.called_modules, self.called_modes):
                if _training(module) is training:
                    continue
                named = self._tree_mode_change()  # names the sub-module where it can
                return (
                    named
                    or f"train()/eval() mode changed since capture (in a {type(module).__name__})"
                )
        walked = self._walked
        if walked is not None and _unchanged(walked[0]):
            return None  # the listed trees' modes are among what the last walk read
        return self._tree_mode_change()

    def checked(self) -> list[tuple[Any, str, Tensor]]:
        """:meth:`check_modes`, then :meth:`entries`; when nothing those walks read changed
        since the last call -- every module's parameter and sub-module dicts (keys and value
        objects), its mode, every optimizer's groups and their parameter lists -- the entries
        that call found, after a check of object identities rather than a walk of the trees.
        The list returned is shared: read it, do not change it."""
        walked = self._walked
        if walked is not None and _unchanged(walked[0]):
            return walked[1]
        self.check_modes()
        entries = self.entries()
        self._walked = (self._read(), entries)
        return entries

    def _read(self) -> tuple:
        """What :meth:`checked` compares: per module of the trees, its parameter and
        sub-module dicts and mode; per optimizer, its groups and their parameter lists."""
        modules = []
        for module in self.modules:
            for _, sub in module.named_modules():
                params = getattr(sub, "_parameters", None)
                children = getattr(sub, "_modules", None)
                buffers = getattr(sub, "_buffers", None)
                if (
                    type(params) is not dict
                    or type(children) is not dict
                    or type(buffers) is not dict
                    or not _plain(sub)
                ):
                    return ()  # walks of its own: no identities to compare, walk each time
                modules.append(
                    (
                        sub,
                        sub.training,
                        *_dict_read(params),
                        *_dict_read(children),
                        *_dict_read(buffers),
                    )
                )
        optimizers = []
        for optimizer in self.optimizers:
            groups = optimizer.param_groups
            lists = [group["params"] for group in groups]
            optimizers.append((optimizer, groups, list(groups), lists, [list(x) for x in lists]))
        return (modules, optimizers)

    def buffers(self) -> list[Tensor]:
        """The listed modules' tensor buffers (running statistics...), each once: entries of
        the state that a replay reads and writes back, but no optimizer updates."""
        return [tensor for module in self.modules for _, tensor in _buffers(module)]

    def entries(self) -> list[tuple[Any, str, Tensor]]:
        """``(module or None, name, tensor)`` for every parameter, each tensor once (weight
        tying, a module's parameter also in an optimizer's groups)."""
        out, seen = [], set()
        for module, names in zip(self.modules, self.names):
            parameters = _same_names(module, "parameters", names, module.named_parameters())
            for name in names:
                tensor = parameters[name]
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    out.append((module, name, tensor))
        tail = []  # the listed modules' buffers, after every parameter
        for module, names in zip(self.modules, self.buffer_names):
            buffers = _same_names(module, "buffers", names, _buffers(module))
            for name in names:
                tensor = buffers[name]
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    tail.append((None, f"buffer {name!r} of {type(module).__name__}", tensor))
        for optimizer, sizes in zip(self.optimizers, self.group_sizes):
            if self._group_sizes(optimizer) != sizes:
                raise CaptureError(
                    f"capture: the parameter groups of {type(optimizer).__name__} changed since "
                    f"the step was captured: {list(sizes)} parameters then, "
                    f"{list(self._group_sizes(optimizer))} now"
                )
            for number, group in enumerate(optimizer.param_groups):
                for index, tensor in enumerate(group["params"]):
                    if id(tensor) not in seen:
                        seen.add(id(tensor))
                        name = f"{type(optimizer).__name__}.param_groups[{number}][{index}]"
                        out.append((None, name, tensor))
        return out + tail


#: The walks of a module tree whose answers follow from the parameter and sub-module dicts.
_WALKS = ("named_parameters", "named_modules", "named_children", "_named_members")


def _plain(module: Any) -> bool:
    """Whether ``module`` walks its tree with the walks of the class that defines them (a
    subclass overriding one may answer from something else than its dicts)."""
    cls = type(module)
    base = next((k for k in cls.__mro__ if "_named_members" in vars(k)), None)
    return base is not None and all(getattr(cls, n) is getattr(base, n) for n in _WALKS)


def _own_parameters(module: Any) -> list[Any]:
    """The parameter objects a module holds itself (not its sub-modules'), in order."""
    params = getattr(module, "_parameters", None)
    return list(params.values()) if type(params) is dict else []


def _own_buffers(module: Any) -> list[tuple[str, Any]]:
    """The tensor buffers a module holds itself, by name (``None`` slots left out)."""
    buffers = getattr(module, "_buffers", None)
    if type(buffers) is not dict:
        return []
    return [(name, value) for name, value in buffers.items() if isinstance(value, Tensor)]


def _same_names(module: Any, kind: str, names: tuple, named: Any) -> dict:
    """``module``'s named ``kind`` (parameters or buffers) as a dict, refused where their
    names are not those captured."""
    current = dict(named)
    if tuple(current) != names:
        raise CaptureError(
            f"capture: the {kind} of {type(module).__name__} changed since the step was "
            f"captured: {list(names)} then, {list(current)} now"
        )
    return current


def _buffers(module: Any) -> list[tuple[str, Any]]:
    """A module tree's tensor buffers by dotted name (each object once)."""
    named = getattr(module, "named_buffers", None)
    if named is None:
        return []
    return [(name, value) for name, value in named() if isinstance(value, Tensor)]


def _dict_read(mapping: dict) -> tuple:
    return mapping, list(mapping), list(mapping.values())


def _same(a: list, b: list) -> bool:
    """Two lists of the same objects, in order (by identity: tensors compare by value)."""
    return len(a) == len(b) and all(map(is_, a, b))


def _dict_same(mapping: dict, keys: list, values: list) -> bool:
    return (
        len(mapping) == len(keys)
        and list(mapping) == keys
        and _same(values, list(mapping.values()))
    )


def _unchanged(read: tuple) -> bool:
    """Whether what :meth:`State._read` read is as it was (an empty read: never)."""
    if not read:
        return False
    modules, optimizers = read
    for (
        sub,
        training,
        params,
        names,
        values,
        children,
        child_names,
        child_values,
        buffers,
        buffer_names,
        buffer_values,
    ) in modules:
        if sub.training is not training or sub._parameters is not params:
            return False
        if sub._buffers is not buffers or not _dict_same(buffers, buffer_names, buffer_values):
            return False
        if sub._modules is not children or not _dict_same(params, names, values):
            return False
        if not _dict_same(children, child_names, child_values):
            return False
    for optimizer, groups, group_list, lists, members in optimizers:
        if optimizer.param_groups is not groups or not _same(groups, group_list):
            return False
        for group, kept, items in zip(groups, lists, members):
            if group["params"] is not kept or not _same(kept, items):
                return False
    return True


def write_back(module: Any, name: str, tensor: Tensor, value: Tensor) -> None:
    """Give a parameter the value a replay computed for it, as the eager step did."""
    if module is not None:
        module.set_parameter(name, value)
    else:
        assign(tensor, value, f"captured step: {name}")
