"""Schedules that cycle: ``OneCycleLR`` and ``CyclicLR`` (which also cycle the momentum, or
Adam's ``beta1``) and ``CosineAnnealingWarmRestarts``, with torch's signatures, defaults and
formulas, operation for operation (so float64 sequences agree with torch's to rounding)."""

from __future__ import annotations

import math
import numbers
import types
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import DTypeError, InvalidArgumentError
from .schedules import LRScheduler

__all__ = ["CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR"]


def per_group(name: str, optimizer: Any, value: Any) -> list[Any]:
    """``value`` for each parameter group: a list or tuple of one per group, or one for all
    (torch's ``_format_param``)."""
    groups = len(optimizer.param_groups)
    if isinstance(value, list | tuple):
        if len(value) != groups:
            raise InvalidArgumentError(
                f"{name} must have the same length as optimizer.param_groups: {name} has "
                f"{len(value)} values, param_groups has {groups}"
            )
        return list(value)
    return [value] * groups


def momentum_key(name: str, optimizer: Any) -> str:
    """``"betas"`` for an optimizer with betas (its ``beta1`` is cycled), else ``"momentum"``;
    an error for an optimizer with neither."""
    defaults = getattr(optimizer, "defaults", {})
    if "betas" in defaults:
        return "betas"
    if "momentum" in defaults:
        return "momentum"
    raise InvalidArgumentError(
        f"{name}: optimizer must support momentum or beta1 with `cycle_momentum` option enabled "
        f"({type(optimizer).__name__} has neither; pass cycle_momentum=False)"
    )


def set_momentum(group: dict, key: str, momentum: float) -> None:
    """Set a group's momentum, or the first of its betas."""
    if key == "betas":
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


def annealing_cos(start: float, end: float, pct: float) -> float:
    """Cosine from ``start`` to ``end`` as ``pct`` goes from 0 to 1.

    >>> annealing_cos(1.0, 0.0, 0.5)
    0.5
    """
    cos_out = math.cos(math.pi * pct) + 1
    return end + (start - end) / 2.0 * cos_out


def annealing_linear(start: float, end: float, pct: float) -> float:
    """Straight line from ``start`` to ``end`` as ``pct`` goes from 0 to 1.

    >>> annealing_linear(1.0, 0.0, 0.25)
    0.75
    """
    return (end - start) * pct + start


def _check_count_type(name: str, value: Any) -> None:
    """OneCycleLR's ``total_steps`` is compared with 0 before its type is asked (torch's
    ``total_steps <= 0 or not isinstance(total_steps, int)``; ``epochs`` and
    ``steps_per_epoch`` the other way round): a value that does not compare with a number (a
    str) is torch's ``TypeError``, a float its ``ValueError``."""
    if not isinstance(value, numbers.Real):
        raise DTypeError(
            f"OneCycleLR: expected positive integer {name}, but got {type(value).__name__} "
            f"{value!r}"
        )


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin), as ``torch.optim.lr_scheduler.OneCycleLR``: the
    learning rate rises from ``max_lr / div_factor`` to ``max_lr`` over ``pct_start`` of the
    ``total_steps`` (or ``epochs * steps_per_epoch``) and falls to ``initial_lr /
    final_div_factor`` (with ``three_phase``, back to the initial rate first), annealed by
    ``"cos"`` or ``"linear"``; the momentum (or ``beta1``) moves the opposite way between
    ``max_momentum`` and ``base_momentum``. Step it after every batch; stepping past
    ``total_steps`` raises, as torch's.

    >>> from retrograd import nn, optim
    >>> sgd = optim.SGD(nn.Linear(1, 1), lr=0.1, momentum=0.9)
    >>> schedule = OneCycleLR(sgd, max_lr=1.0, total_steps=4, anneal_strategy="linear")
    >>> [round(schedule.step(), 6) for _ in range(3)]
    [0.714287, 0.357145, 4e-06]
    """

    def __init__(self, optimizer: Any, max_lr: Any, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: Any = 0.85,
                 max_momentum: Any = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1):  # fmt: skip
        self.total_steps = self._total_steps(total_steps, epochs, steps_per_epoch)
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise InvalidArgumentError(
                f"OneCycleLR: expected float between 0 and 1 pct_start, but got {pct_start}"
            )
        if anneal_strategy not in ("cos", "linear"):
            raise InvalidArgumentError(
                "OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got "
                f"{anneal_strategy!r}"
            )
        up = float(pct_start * self.total_steps) - 1
        if three_phase:
            phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (float(2 * pct_start * self.total_steps) - 2, "max_lr", "initial_lr",
                       "base_momentum", "max_momentum"),
                      (self.total_steps - 1, "initial_lr", "min_lr", "max_momentum",
                       "max_momentum")]  # fmt: skip
        else:
            phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (self.total_steps - 1, "max_lr", "min_lr", "base_momentum",
                       "max_momentum")]  # fmt: skip
        keys = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")
        self._schedule_phases = [dict(zip(keys, phase)) for phase in phases]
        self._anneal_func_type = anneal_strategy
        max_lrs = per_group("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for group, top in zip(optimizer.param_groups, max_lrs):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            key = momentum_key("OneCycleLR", optimizer)
            self.use_beta1 = key == "betas"
            tops = per_group("max_momentum", optimizer, max_momentum)
            bottoms = per_group("base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for group, top, bottom in zip(optimizer.param_groups, tops, bottoms):
                    set_momentum(group, key, top)
                    group["max_momentum"], group["base_momentum"] = top, bottom
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _total_steps(total_steps: Any, epochs: Any, steps_per_epoch: Any) -> int:
        if total_steps is not None:
            _check_count_type("total_steps", total_steps)
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise InvalidArgumentError(
                    f"OneCycleLR: expected positive integer total_steps, but got {total_steps}"
                )
            return total_steps
        if epochs is None or steps_per_epoch is None:
            raise InvalidArgumentError(
                "OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)"
            )
        for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
            if not isinstance(value, int) or value <= 0:
                raise InvalidArgumentError(
                    f"OneCycleLR: expected positive integer {name}, but got {value}"
                )
        return epochs * steps_per_epoch

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return annealing_cos(start, end, pct)
        return annealing_linear(start, end, pct)

    def at(self, step: int, group: dict) -> tuple[float, float | None]:
        """``(lr, momentum)`` of ``group`` after ``step`` steps (momentum ``None`` unless
        cycled)."""
        if step > self.total_steps:
            raise InvalidArgumentError(
                f"OneCycleLR: tried to step {step} times. The specified number of total steps "
                f"is {self.total_steps}"
            )
        start_step = 0.0
        last = len(self._schedule_phases) - 1
        for i, phase in enumerate(self._schedule_phases):
            end_step = phase["end_step"]
            if step <= end_step or i == last:
                pct = (step - start_step) / (end_step - start_step)
                lr = self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                momentum = None
                if self.cycle_momentum:
                    momentum = self._anneal(
                        group[phase["start_momentum"]], group[phase["end_momentum"]], pct
                    )
                return lr, momentum
            start_step = phase["end_step"]
        raise AssertionError("unreachable: the last phase always matches")

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        """The first group's learning rate after ``epoch`` steps (``base_lr`` is not used: the
        cycle is set by the group's ``initial_lr``, ``max_lr`` and ``min_lr``)."""
        return self.at(epoch, self.optimizer.param_groups[0])[0]

    chainable = False

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        return self.at(epoch, self.optimizer.param_groups[index])[0]

    def _apply(self, epoch: int) -> None:
        key = "betas" if getattr(self, "use_beta1", False) else "momentum"
        for group in self.optimizer.param_groups:
            lr, momentum = self.at(epoch, group)
            group["lr"] = lr
            if momentum is not None:
                set_momentum(group, key, momentum)


class CyclicLR(LRScheduler):
    """The cyclical learning rate (Smith), as ``torch.optim.lr_scheduler.CyclicLR``: between
    ``base_lr`` and ``max_lr`` over ``step_size_up`` then ``step_size_down`` steps, the height
    scaled per cycle (``"triangular"``: 1, ``"triangular2"``: halved each cycle,
    ``"exp_range"``: ``gamma ** step``) or by ``scale_fn`` of the cycle or step
    (``scale_mode``); with ``cycle_momentum`` the momentum (or ``beta1``) goes the opposite
    way between ``max_momentum`` and ``base_momentum``. Step it after every batch.

    >>> from retrograd import nn, optim
    >>> sgd = optim.SGD(nn.Linear(1, 1), lr=0.1, momentum=0.9)
    >>> schedule = CyclicLR(sgd, base_lr=0.0, max_lr=1.0, step_size_up=2)
    >>> [schedule.step() for _ in range(4)]
    [0.5, 1.0, 0.5, 0.0]
    """

    def __init__(self, optimizer: Any, base_lr: Any, max_lr: Any, step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True,
                 base_momentum: Any = 0.8, max_momentum: Any = 0.9,
                 last_epoch: int = -1):  # fmt: skip
        base_lrs = per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise InvalidArgumentError(f"CyclicLR: mode {mode!r} is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode
        if scale_fn is None:
            self.scale_mode = "iterations" if mode == "exp_range" else "cycle"
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            key = momentum_key("CyclicLR", optimizer)
            self.use_beta1 = key == "betas"
            self.base_momentums = per_group("base_momentum", optimizer, base_momentum)
            self.max_momentums = per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for group, top, bottom in zip(
                    optimizer.param_groups, self.max_momentums, self.base_momentums
                ):
                    set_momentum(group, key, top)
                    group["max_momentum"], group["base_momentum"] = top, bottom
        # (the constructor's step cycles from the groups' initial_lr, torch's base_lrs until
        # its constructor sets them to the cycle's)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def state_dict(self) -> dict[str, Any]:
        """torch's: ``_scale_fn_custom`` last, ``None`` for a function (which does not save)
        or none, a callable object's attributes otherwise."""
        state = super().state_dict()
        state.pop("_scale_fn_custom", None)
        fn = self._scale_fn_custom
        custom = fn is not None and not isinstance(fn, types.FunctionType)
        state["_scale_fn_custom"] = dict(getattr(fn, "__dict__", {})) if custom else None
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's: the ``scale_fn`` given stays this schedule's, a callable object's
        attributes set from the state's entry."""
        state = dict(state_dict)
        attributes = state.pop("_scale_fn_custom", None)
        if attributes is not None and not (
            isinstance(attributes, Mapping) and hasattr(self._scale_fn_custom, "__dict__")
        ):
            raise DTypeError(
                "CyclicLR.load_state_dict: _scale_fn_custom must be None or the attributes "
                f"(a dict) of this schedule's callable scale_fn object; got {attributes!r}"
            )
        super().load_state_dict(state)
        if attributes is not None:
            self._scale_fn_custom.__dict__.update(attributes)

    def scale_fn(self, x: float) -> float:
        """The height's scale at cycle or step ``x`` (the mode's, or the one given)."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma**x

    def _position(self, epoch: int) -> tuple[int, float]:
        """The cycle (from 1) and the fraction of the way up (or down) of step ``epoch``."""
        cycle = math.floor(1 + epoch / self.total_size)
        x = 1.0 + epoch / self.total_size - cycle
        if x <= self.step_ratio:
            return cycle, x / self.step_ratio
        return cycle, (x - 1) / (self.step_ratio - 1)

    def _scale(self, epoch: int, cycle: int) -> float:
        return self.scale_fn(cycle if self.scale_mode == "cycle" else epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        """The first group's learning rate at step ``epoch`` (``base_lr`` is not used: the
        cycle is set by ``base_lr`` and ``max_lr`` given to the constructor)."""
        return self.chained_lr(epoch, 0, 0.0)

    chainable = False

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        cycle, factor = self._position(epoch)
        base = self.base_lrs[index]
        return base + (self.max_lrs[index] - base) * factor * self._scale(epoch, cycle)

    def _apply(self, epoch: int) -> None:
        self._check_groups(self.max_lrs)
        cycle, factor = self._position(epoch)
        scale = self._scale(epoch, cycle)
        for index, group in enumerate(self.optimizer.param_groups):
            base = self.base_lrs[index]
            group["lr"] = base + (self.max_lrs[index] - base) * factor * scale
        if self.cycle_momentum:
            key = "betas" if self.use_beta1 else "momentum"
            for bottom, top, group in zip(
                self.base_momentums, self.max_momentums, self.optimizer.param_groups
            ):
                set_momentum(group, key, top - (top - bottom) * factor * scale)


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR (Loshchilov & Hutter), as ``torch.optim.lr_scheduler.CosineAnnealingWarmRestarts``:
    a cosine from ``base_lr`` to ``eta_min`` over ``T_i`` epochs, restarted with ``T_i``
    multiplied by ``T_mult`` (``T_0`` first). ``step()`` advances one epoch; ``step(epoch)``
    sets the (possibly fractional) epoch, e.g. ``epoch + i / iters`` each batch.

    >>> from retrograd import nn, optim
    >>> schedule = CosineAnnealingWarmRestarts(optim.SGD(nn.Linear(1, 1), lr=1.0), T_0=2)
    >>> [schedule.step() for _ in range(3)]
    [0.5, 1.0, 0.5]
    >>> schedule.step(0.5)
    0.8535533905932737
    """

    def __init__(self, optimizer: Any, T_0: int, T_mult: int = 1, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1):  # fmt: skip
        if not isinstance(T_0, int) or T_0 <= 0:
            raise InvalidArgumentError(
                f"CosineAnnealingWarmRestarts: expected positive integer T_0, but got {T_0}"
            )
        if not isinstance(T_mult, int) or T_mult < 1:
            raise InvalidArgumentError(
                f"CosineAnnealingWarmRestarts: expected integer T_mult >= 1, but got {T_mult}"
            )
        if not isinstance(eta_min, float | int):
            raise InvalidArgumentError(
                "CosineAnnealingWarmRestarts: expected float or int eta_min, but got "
                f"{eta_min!r} of type {type(eta_min).__name__}"
            )
        self.T_0 = self.T_i = T_0
        self.T_mult, self.eta_min = T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: float, base_lr: float | None = None) -> float:
        """The learning rate at ``T_cur = epoch`` of the current period."""
        base = self.base_lr if base_lr is None else base_lr
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_i)) / 2

    chainable = False
    counts_steps = False  # (torch's step of its own counts none)

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        return self.lr_at(self.T_cur, self.base_lrs[index])

    def step(self, epoch: float | None = None) -> float:  # type: ignore[override]
        """Advance one epoch, or go to ``epoch`` (fractional allowed); returns the first
        group's learning rate."""
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, numbers.Real)):
            raise DTypeError(
                f"CosineAnnealingWarmRestarts.step: epoch must be a number, got {epoch!r}"
            )
        self._check_groups(self.base_lrs)  # (before anything moves)
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise InvalidArgumentError(
                    f"CosineAnnealingWarmRestarts: expected non-negative epoch, but got {epoch}"
                )
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** (n)
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(self.T_cur, base)
        return self._record()
