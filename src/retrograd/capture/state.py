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
from typing import Any

from ..optim import Optimizer
from ..tensor import Tensor
from ..tensor.inplace import assign
from .recording import CaptureError

__all__ = ["State", "write_back"]


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
        self.group_sizes = [self._group_sizes(optimizer) for optimizer in self.optimizers]
        self.modes = self._modes()

    def _add_module(self, module: Any) -> None:
        if not any(module is known for known in self.modules):
            self.modules.append(module)

    @staticmethod
    def _names(module: Any) -> tuple[str, ...]:
        return tuple(name for name, _ in module.named_parameters())

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

    def check_modes(self) -> None:
        modes = self._modes()
        if modes != self.modes:
            changed = [name or "(root)" for (name, a), (_, b) in zip(modes, self.modes) if a != b]
            raise CaptureError(
                "captured step: train()/eval() mode changed since capture (in "
                f"{changed or 'the module tree'}); the step was captured in the modes it had "
                "then: capture it again for the other mode"
            )

    def entries(self) -> list[tuple[Any, str, Tensor]]:
        """``(module or None, name, tensor)`` for every parameter, each tensor once (weight
        tying, a module's parameter also in an optimizer's groups)."""
        out, seen = [], set()
        for module, names in zip(self.modules, self.names):
            parameters = dict(module.named_parameters())
            if tuple(parameters) != names:
                raise CaptureError(
                    f"capture: the parameters of {type(module).__name__} changed since the "
                    f"step was captured: {list(names)} then, {list(parameters)} now"
                )
            for name in names:
                tensor = parameters[name]
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    out.append((module, name, tensor))
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
        return out


def write_back(module: Any, name: str, tensor: Tensor, value: Tensor) -> None:
    """Give a parameter the value a replay computed for it, as the eager step did."""
    if module is not None:
        module.set_parameter(name, value)
    else:
        assign(tensor, value, f"captured step: {name}")
