"""Schedules made of schedules: ``SequentialLR`` (one after another, switching at milestones)
and ``ChainedScheduler`` (all at once, their factors multiplied), as torch's."""

from __future__ import annotations

import copy
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import DTypeError, InvalidArgumentError, ShapeError
from .schedules import LRScheduler, ReduceLROnPlateau

__all__ = ["ChainedScheduler", "SequentialLR"]


def _check_members(name: str, optimizer: Any, schedulers: Any) -> list[Any]:
    schedulers = list(schedulers)
    if not schedulers:
        raise InvalidArgumentError(f"{name} expects at least one scheduler, but got none")
    for index, scheduler in enumerate(schedulers):
        if not hasattr(scheduler, "optimizer"):
            raise InvalidArgumentError(
                f"{name}: the scheduler at index {index} has no `optimizer` attribute"
            )
        if isinstance(scheduler, ReduceLROnPlateau):
            raise InvalidArgumentError(
                f"{name} does not support `ReduceLROnPlateau` (its step needs the metric), but "
                f"got one at index {index}"
            )
        if scheduler.optimizer is not optimizer:
            raise InvalidArgumentError(
                f"{name} expects all schedulers to belong to the same optimizer, but the "
                f"{type(scheduler).__name__} at index {index} has another"
            )
    return schedulers


class _Composite(LRScheduler):
    """State saving shared by the composites: their members' states, as torch's."""

    chainable = False
    _schedulers: list[Any]

    #: the entries of torch's state, in its order (the rest is this composite's own
    #: bookkeeping, made again by its constructor)
    saved_keys: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        state = {key: self.__dict__[key] for key in self.saved_keys if key in self.__dict__}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.check_state_dict(state_dict)
        state = dict(state_dict)
        members = state.pop("_schedulers")
        self.__dict__.update(state)
        for scheduler, member in zip(self._schedulers, members):
            scheduler.load_state_dict(member)

    def check_state_dict(self, state_dict: Any) -> None:
        """Its own entries and every member's, checked before any is set: a member refusing
        its state (or a state of another number of members, of which the extra or missing
        ones were passed over) leaves every schedule as it was."""
        name = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict) or not isinstance(state_dict.get("_schedulers"), list):
            got = (
                "a dict without '_schedulers' (a list of its members' states)"
                if isinstance(state_dict, dict)
                else type(state_dict).__name__
            )
            raise DTypeError(f"{name}: expected the dict state_dict() returned, got {got}")
        members = state_dict["_schedulers"]
        if len(members) != len(self._schedulers):
            raise ShapeError(
                f"{name}: the state holds {len(members)} schedulers' states, this "
                f"{type(self).__name__} has {len(self._schedulers)}"
            )
        super().check_state_dict({k: v for k, v in state_dict.items() if k != "_schedulers"})
        for scheduler, member in zip(self._schedulers, members):
            scheduler.check_state_dict(member)

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        raise InvalidArgumentError(
            f"{type(self).__name__} has no closed form to chain; step it with step()"
        )

    @contextmanager
    def _all_or_nothing(self) -> Iterator[None]:
        """A step that raises (a member past its end, such as ``OneCycleLR`` after
        ``total_steps``, or a lambda that raises) leaves the composite, every member and the
        groups' settings as they were before it, as a single scheduler's failed step does.
        torch's leaves the members before the failing one stepped, the failing one's epoch
        advanced and the rate they set (its composite's ``get_last_lr()`` unchanged)."""
        saved = [(s, _own_state(s)) for s in _everyone(self)]
        groups = [
            (group, {key: value for key, value in group.items() if key != "params"})
            for group in self.optimizer.param_groups
        ]
        try:
            yield
        except BaseException:
            for scheduler, state in saved:
                for key in set(scheduler.__dict__) - set(state) - {"optimizer", "_schedulers"}:
                    del scheduler.__dict__[key]  # (set by the failed step)
                scheduler.__dict__.update(state)
            for group, settings in groups:
                for key in set(group) - set(settings) - {"params"}:
                    del group[key]
                group.update(settings)
            raise


def _everyone(scheduler: Any) -> Iterator[Any]:
    """A scheduler and, for a composite, every member's (recursively)."""
    yield scheduler
    for member in getattr(scheduler, "_schedulers", ()):
        yield from _everyone(member)


def _own_state(scheduler: Any) -> dict[str, Any]:
    """A copy of a scheduler's own attributes (not its optimizer, nor its members); lists and
    dicts copied (a step may change them in place), the objects in them kept (a schedule's
    function stays the one it was given)."""
    return {
        key: copy.copy(value) if isinstance(value, list | dict) else value
        for key, value in scheduler.__dict__.items()
        if key not in ("optimizer", "_schedulers")
    }


def _undo_step(scheduler: Any) -> None:
    """Take back the step a scheduler's constructor made (each member's, for a composite)."""
    if hasattr(scheduler, "_schedulers"):
        for member in scheduler._schedulers:
            _undo_step(member)
    elif hasattr(scheduler, "last_epoch"):
        scheduler.last_epoch -= 1


class SequentialLR(_Composite):
    """``schedulers[i]`` from ``milestones[i - 1]`` to ``milestones[i]``, each started from
    its own epoch 0 at its milestone (``torch.optim.lr_scheduler.SequentialLR``: e.g. a
    linear warm-up, then a cosine decay).

    >>> from retrograd import nn, optim
    >>> from retrograd.optim import ConstantLR, ExponentialLR
    >>> sgd = optim.SGD(nn.Linear(1, 1), lr=1.0)
    >>> schedule = SequentialLR(sgd, [ConstantLR(sgd, factor=0.1, total_iters=2),
    ...                                ExponentialLR(sgd, gamma=0.5)], milestones=[2])
    >>> [schedule.step() for _ in range(4)]
    [0.1, 1.0, 0.5, 0.25]
    """

    saved_keys = ("_milestones", "last_epoch", "_last_lr")

    def __init__(self, optimizer: Any, schedulers: Any, milestones: Any,
                 last_epoch: int = -1):  # fmt: skip
        self._schedulers = _check_members("SequentialLR", optimizer, schedulers)
        if len(milestones) != len(self._schedulers) - 1:
            raise InvalidArgumentError(
                "SequentialLR expects one more scheduler than milestones, but got "
                f"{len(self._schedulers)} schedulers and {len(milestones)} milestones"
            )
        self._milestones = list(milestones)
        self.optimizer = optimizer
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        _undo_step(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first.last_epoch = -1
        first._step_count = 0  # torch's: the first member's constructor step made again
        first.step()
        self._record()

    def step(self) -> float:
        """Advance one epoch: the current scheduler steps, or the next starts at its epoch 0."""
        with self._all_or_nothing():
            self.last_epoch += 1
            index = bisect_right(self._milestones, self.last_epoch)
            scheduler = self._schedulers[index]
            if index > 0 and self._milestones[index - 1] == self.last_epoch:
                scheduler.last_epoch = 0
                scheduler._apply(0)
                # torch's _update_lr(0): the rates noted, the step not counted
                scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]
            else:
                scheduler.step()
            return self._record()


class ChainedScheduler(_Composite):
    """Every scheduler steps at each step, each scaling the learning rate the one before it
    set (``torch.optim.lr_scheduler.ChainedScheduler``: torch's recursive forms, so the
    factors of ``ConstantLR``, ``ExponentialLR``, ... multiply; a schedule that sets the rate
    outright, such as ``OneCycleLR``, overrides those before it).

    Made from freshly made schedulers, the learning rates are torch's: each group's
    ``initial_lr`` through every member's epoch-0 factor, which their constructors applied.

    >>> from retrograd import nn, optim
    >>> from retrograd.optim import ConstantLR, ExponentialLR
    >>> sgd = optim.SGD(nn.Linear(1, 1), lr=1.0)
    >>> schedule = ChainedScheduler([ConstantLR(sgd, factor=0.1, total_iters=2),
    ...                              ExponentialLR(sgd, gamma=0.5)])
    >>> [round(schedule.step(), 6) for _ in range(3)]
    [0.05, 0.25, 0.125]
    """

    saved_keys = ("_last_lr",)

    def __init__(self, schedulers: Any, optimizer: Any = None):
        schedulers = list(schedulers)
        if optimizer is None and schedulers:
            optimizer = schedulers[0].optimizer
        self._schedulers = _check_members("ChainedScheduler", optimizer, schedulers)
        self.optimizer = optimizer
        # the rates are the ones the members' constructors left, each having scaled the rate
        # the one before it set (torch's: the chain touches no rate when it is made)
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = 0
        self._record()

    def step(self) -> float:
        """Step every scheduler, in order (all or none: see :meth:`_all_or_nothing`)."""
        with self._all_or_nothing():
            self.last_epoch += 1
            for scheduler in self._schedulers:
                if scheduler.chainable:
                    scheduler.step_chained()
                else:
                    scheduler.step()
            return self._record()
