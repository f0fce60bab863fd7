"""Learning-rate schedules: they set each parameter group's ``"lr"`` each time they are stepped,
from the group's own initial learning rate (``group["initial_lr"]``, as torch's); ``step()``
scales the group's current rate as torch's recursive forms do, so that schedules stepped one
after the other over one optimizer multiply."""

from __future__ import annotations

import math
import types
import warnings
from collections import Counter
from collections.abc import Mapping
from numbers import Real
from typing import Any

from ..errors import (
    DivisionByZeroError,
    DTypeError,
    InvalidArgumentError,
    KeyMismatchError,
    OptimizerGroupsError,
    ShapeError,
    check_callable,
)
from ..tensor import Tensor
from .optimizers import is_number

__all__ = [
    "ConstantLR",
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "StepLR",
]


_STEP_BEFORE_OPTIMIZER = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
    "later, you should call them in the opposite order: `optimizer.step()` before "
    "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first "
    "value of the learning rate schedule. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate"
)


def _tracks_steps(optimizer: Any) -> bool:
    """Whether ``optimizer``'s step marks itself taken (``_opt_called``): every optimizer
    deriving from retrograd's base class does, its step wrapped by the step hooks. (torch
    wraps any object's ``step`` when a schedule is made; an object of one's own that is no
    ``Optimizer`` is not watched here, so it is never warned about.)"""
    return getattr(getattr(type(optimizer), "step", None), "__retrograd_step_hooked__", False)


_EPOCH_DEPRECATED = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where "
    "possible. Please use `scheduler.step()` to step the scheduler. During the deprecation, if "
    "epoch is different from None, the closed form is used instead of the new chainable form, "
    "where available."
)


def _check_optimizer(op: str, optimizer: Any) -> None:
    """Refuse what has no ``param_groups`` to schedule (a tensor, a module given for the
    optimizer), as torch's "is not an Optimizer", not as an AttributeError from inside."""
    if not isinstance(getattr(optimizer, "param_groups", None), list):
        raise DTypeError(
            f"{op}: {type(optimizer).__name__} is not an optimizer (a schedule sets the "
            "learning rates of its param_groups)"
        )


def _factor(op: str, fn: Any, epoch: int) -> Any:
    """``fn(epoch)``, the user's factor, refused by name where it is not a number (a str
    returned would fail as "can't multiply sequence" inside the schedule)."""
    factor = fn(epoch)
    if isinstance(factor, str | bytes) or not hasattr(type(factor), "__float__"):
        raise DTypeError(f"{op}: lr_lambda({epoch}) returned {factor!r}, expected a number")
    return factor


def _steps_by_get_lr(schedule: Any) -> bool:
    """Whether ``schedule`` is one of the user's, deriving from :class:`LRScheduler` (or
    torch's older ``_LRScheduler``, or a schedule here) with a ``get_lr`` of its own (the
    schedules here step by their closed or recursive forms; their :meth:`LRScheduler.get_lr`
    answers torch's question from those)."""
    own = getattr(type(schedule), "get_lr", None)
    # (ReduceLROnPlateau's get_lr, which refuses as torch's, is this package's, not the user's)
    defined_here = (getattr(own, "__module__", None) or "").startswith("retrograd.optim")
    return callable(own) and not defined_here


class LRScheduler:
    """Base class. Call :meth:`step` once per epoch (or per step, as you count ``T``), after
    ``optimizer.step``, as in PyTorch; ``last_epoch`` counts the calls."""

    #: True while :meth:`step` asks ``get_lr`` (torch's flag, which schedules of one's own
    #: read to warn when ``get_lr`` is called from outside a step)
    _get_lr_called_within_step: bool = False

    def __init__(self, optimizer: Any, last_epoch: int = -1):
        _check_optimizer(type(self).__name__, optimizer)
        self.optimizer = optimizer
        if _tracks_steps(optimizer) and not vars(optimizer).get("_steps_watched_by_schedule"):
            # torch counts the optimizer's steps from the first schedule made over it
            vars(optimizer).update(_steps_watched_by_schedule=True, _opt_called=False)
        for index, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyMismatchError(  # (torch's KeyError)
                    f"{type(self).__name__}: param_groups[{index}] has no 'initial_lr', which "
                    f"resuming with last_epoch={last_epoch} needs (load the optimizer's state "
                    "first, or leave last_epoch at -1)"
                )
        #: each group's initial learning rate
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        # torch's bookkeeping, kept in the state as torch's: the steps counted, whether the
        # constructor's step is running, whether get_lr is being asked by a step
        self._step_count = 0
        self._is_initial = True
        self._get_lr_called_within_step = False
        try:
            if last_epoch == -1 and self.chainable and not _steps_by_get_lr(self):
                # torch's first step is its recursive form, from each group's current rate: a
                # schedule made over an optimizer restored mid-run (resuming from a
                # checkpoint) keeps the restored rate rather than going back to ``initial_lr``
                self.step_chained()
            elif self.resumed_step is not None and not _steps_by_get_lr(self):
                # resuming with last_epoch: torch's constructor steps by its get_lr, which
                # keeps the restored rates (``keep``) or scales them as at any step
                # (``recursive``: StepLR, MultiStepLR, ConstantLR, whose get_lr reads no
                # ``_is_initial``, scale once more where that epoch is a milestone)
                self.last_epoch += 1
                if self.resumed_step == "recursive":
                    self._apply_recursive(self.last_epoch)
                self._record()
            else:
                # resuming with last_epoch: the closed form at the next epoch (torch's first
                # step keeps a restored rate rather than scaling it once more)
                self._closed_step = True
                try:
                    self.step()
                finally:
                    del self._closed_step
        finally:
            self._is_initial = False

    @property
    def base_lr(self) -> float:
        """The first group's initial learning rate (``base_lrs[0]``), unless set here (a
        schedule of one's own may keep its own ``base_lr``, saved with its state as torch
        saves it)."""
        own = self.__dict__.get("base_lr")
        return self.base_lrs[0] if own is None else own

    @base_lr.setter
    def base_lr(self, value: float) -> None:
        self.__dict__["base_lr"] = value

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        """The learning rate at ``epoch`` of a group starting at ``base_lr`` (the first
        group's by default)."""
        raise NotImplementedError

    def _apply(self, epoch: int) -> None:
        groups = self.optimizer.param_groups
        if _steps_by_get_lr(self):
            # torch's protocol for a schedule of one's own: ``get_lr()`` gives every group's
            # rate at ``last_epoch``, asked once the step is counted (DLRM's reads
            # ``self._step_count``), which :meth:`_record` then notes
            counted = getattr(self, "_step_count", 0)
            self._step_count = counted + 1
            self._get_lr_called_within_step = True
            try:
                rates = list(self.get_lr())
            finally:
                self._step_count = counted
                self._get_lr_called_within_step = False
            if len(rates) != len(groups):
                raise ShapeError(
                    f"{type(self).__name__}.get_lr returned {len(rates)} learning rates for "
                    f"{len(groups)} param_groups"
                )
            for group, rate in zip(groups, rates):
                group["lr"] = rate
            return
        # The closed form, from each group's initial rate: a group added to the optimizer
        # after the schedule was made has none in base_lrs, refused as torch's closed forms
        # (``step(epoch)``, SequentialLR's switch at a milestone) refuse it, by a strict zip
        # of their rates with the groups. (Its recursive step() scales the group's own rate.)
        self._check_groups(self.base_lrs)
        for group, base in zip(groups, self.base_lrs):
            group["lr"] = self.lr_at(epoch, base)

    def step(self, epoch: int | None = None) -> float:
        """Advance one epoch and set every group's learning rate; returns the first's.
        ``step(epoch)``, torch's deprecated form, goes to ``epoch`` (the closed form)."""
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, Real)):
            raise DTypeError(f"{type(self).__name__}.step: epoch must be a number, got {epoch!r}")
        if (
            getattr(self, "_step_count", 0) == 1
            and _tracks_steps(self.optimizer)
            and not vars(self.optimizer).get("_opt_called", False)
        ):
            # the first step after the constructor's, and the optimizer has not stepped
            warnings.warn(_STEP_BEFORE_OPTIMIZER, UserWarning, stacklevel=2)
        groups = self.optimizer.param_groups
        before = self.last_epoch, [group["lr"] for group in groups]
        if epoch is None:
            self.last_epoch += 1
        else:
            warnings.warn(_EPOCH_DEPRECATED, UserWarning, stacklevel=2)
            self.last_epoch = epoch
        try:
            recursive = self.chainable and not getattr(self, "_closed_step", False)
            if epoch is None and recursive and not _steps_by_get_lr(self):
                # torch's step() is its recursive form, scaling each group's current rate:
                # two schedules stepped one after the other over one optimizer (torch's
                # documented chaining) multiply; the closed form made the last one stepped
                # overwrite the other's factor
                self._apply_recursive(self.last_epoch)
            else:
                self._apply(self.last_epoch)
        except BaseException:
            # a schedule that cannot go there leaves the epoch and the rates as they were
            self.last_epoch = before[0]
            for group, lr in zip(groups, before[1]):
                group["lr"] = lr
            raise
        return self._record()

    #: what the constructor's step does when resuming with ``last_epoch`` (torch's get_lr
    #: at that step): ``"keep"`` the rates as they are, scale them by the ``"recursive"``
    #: form as any step does, or (None) set the closed form at the next epoch
    resumed_step: str | None = None

    #: whether torch's step of this schedule counts itself in ``_step_count`` (not one that
    #: replaces the base's step, ``CosineAnnealingWarmRestarts``)
    counts_steps = True

    def _record(self) -> float:
        """Note a step as torch's schedulers do (``_step_count``, ``_last_lr``, which
        :meth:`get_last_lr` returns and checkpoints keep); returns the first group's rate."""
        if self.counts_steps:
            self._step_count = getattr(self, "_step_count", 0) + 1
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        return self._last_lr[0]

    #: whether torch's form of this schedule scales the group's current learning rate (so that
    #: ``ChainedScheduler`` multiplies schedules), rather than setting it from ``base_lr``
    chainable = True

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        """Group ``index``'s learning rate at ``epoch`` when it is ``current`` now (torch's
        recursive ``get_lr``, which ``ChainedScheduler`` composes): ``current`` times this
        schedule's factor from ``epoch - 1`` to ``epoch`` (from ``base_lr`` at epoch 0), left
        as it is where that factor is 0/0; the closed form for schedules that are not
        chainable.

        >>> from retrograd import nn, optim
        >>> schedule = StepLR(optim.SGD(nn.Linear(1, 1), lr=1.0), step_size=2, gamma=0.5)
        >>> schedule.chained_lr(2, 0, 3.0)
        1.5
        """
        base = self._base_of(index)
        if not self.chainable:
            return self.lr_at(epoch, base)
        before = base if epoch == 0 else self.lr_at(epoch - 1, base)
        return current if before == 0 else current * (self.lr_at(epoch, base) / before)

    def _check_groups(self, per_group: list[Any]) -> None:
        """Refuse a step over more groups than ``per_group`` (this schedule's values, one per
        group it was made for) covers: a schedule with nothing to give a group added after it
        was made (a cyclic one's bounds), as torch's ``zip(strict=True)`` refuses it, rather
        than an ``IndexError`` or the group's rate kept for ever."""
        groups = len(self.optimizer.param_groups)
        if groups != len(per_group):
            raise InvalidArgumentError(
                f"{type(self).__name__}.step: the optimizer has {groups} param_groups, the "
                f"schedule was made for {len(per_group)} (a group added after the schedule "
                "was made needs the schedule made again)"
            )

    def _of_group(self, per_group: list[Any], index: int) -> Any:
        """``per_group[index]``, refusing a group beyond those this schedule was made for as
        :meth:`_check_groups` does (where torch's step zips ``per_group`` with the groups
        strictly), rather than an ``IndexError``."""
        if index >= len(per_group):
            self._check_groups(per_group)
        return per_group[index]

    def _base_of(self, index: int) -> float:
        """Group ``index``'s initial rate: ``base_lrs``', or, for a group the optimizer gained
        after the schedule was made, its ``initial_lr`` if it has one, else its current rate
        (torch's recursive steps scale such a group's rate without giving it an
        ``initial_lr``, which its ``param_groups`` must not gain here either; the schedules
        stepped so override :meth:`chained_lr` with torch's own ratio)."""
        if index < len(self.base_lrs):
            return self.base_lrs[index]
        group = self.optimizer.param_groups[index]
        return group.get("initial_lr", group["lr"])

    def _apply_recursive(self, epoch: int) -> None:
        for index, group in enumerate(self.optimizer.param_groups):
            group["lr"] = self.chained_lr(epoch, index, group["lr"])

    def step_chained(self) -> None:
        """Advance one epoch, scaling each group's current learning rate as torch's recursive
        form does (the step ``ChainedScheduler`` takes)."""
        if _steps_by_get_lr(self):  # a schedule of one's own steps by its get_lr, as torch's
            self.step()
            return
        self.last_epoch += 1
        for index, group in enumerate(self.optimizer.param_groups):
            group["lr"] = self.chained_lr(self.last_epoch, index, group["lr"])
        self._record()

    def get_lr(self) -> list[float]:
        """Each group's learning rate at ``last_epoch`` by torch's form of this schedule (the
        recursive one scales the group's current rate: called outside a step, at an epoch
        where the rate changes, it gives the change once more, as torch's). Outside a step it
        warns, as torch's: the rate the last step set is :meth:`get_last_lr`'s (a schedule of
        one's own that overrides ``get_lr`` may call this one through ``super()``)."""
        if not self._get_lr_called_within_step:
            warnings.warn(
                "To get the last learning rate computed by the scheduler, please use "
                "`get_last_lr()`.",
                UserWarning,
                stacklevel=2,
            )
        return [
            self.chained_lr(self.last_epoch, index, group["lr"])
            for index, group in enumerate(self.optimizer.param_groups)
        ]

    def get_last_lr(self) -> list[float]:
        """Each group's learning rate as the last step set it, as a list (torch's)."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer (and functions, which do not save), as torch's."""
        return {
            key: value
            for key, value in self.__dict__.items()
            if key != "optimizer" and not callable(value) and key != "lr_lambdas"
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.check_state_dict(state_dict)
        self.__dict__.update(state_dict)

    def check_state_dict(self, state_dict: Any) -> None:
        """Raise unless :meth:`load_state_dict` can take ``state_dict`` whole."""
        _check_state("load_state_dict", self, state_dict)


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``.

    >>> from retrograd import nn, optim
    >>> schedule = StepLR(optim.SGD(nn.Linear(1, 1), lr=1.0), step_size=2, gamma=0.5)
    >>> [schedule.step() for _ in range(4)]
    [1.0, 0.5, 0.5, 0.25]
    """

    resumed_step = "recursive"

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        # torch takes any step_size: 0 fails at the first step (modulo by zero), a negative
        # one decays at its multiples as its absolute value would (Python's modulo)
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _period(self, epoch: int) -> int:
        """``step_size``, refused where it is 0 (torch's ``ZeroDivisionError`` at ``epoch``)."""
        if self.step_size == 0:
            raise DivisionByZeroError(
                f"step_size is 0, so epoch {epoch} % step_size divides by zero "
                "(torch's ZeroDivisionError); give StepLR a positive step_size"
            )
        return self.step_size

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        if epoch == 0:
            return base
        return base * self.gamma ** (epoch // self._period(epoch))

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        # torch's recursive form to the bit: ``current * gamma`` at each multiple of
        # step_size (the ratio of the closed forms differs by an ulp from gamma)
        return current if epoch == 0 or epoch % self._period(epoch) else current * self.gamma


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2`` (SGDR without
    restarts, as ``torch.optim.lr_scheduler.CosineAnnealingLR``).

    >>> from retrograd import nn, optim
    >>> schedule = CosineAnnealingLR(optim.SGD(nn.Linear(1, 1), lr=1.0), T_max=2)
    >>> [round(schedule.step(), 6) for _ in range(2)]
    [0.5, 0.0]
    """

    resumed_step = "keep"

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if T_max < 1:
            raise InvalidArgumentError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        cosine = (1.0 + math.cos(math.pi * epoch / self.T_max)) / 2.0
        return self.eta_min + (base - self.eta_min) * cosine

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        """torch's recursive form: the distance to ``eta_min`` scaled by the ratio of
        consecutive cosines (a step up by the first cosine step at each restart of the
        period)."""
        if epoch == 0:
            return current
        if (epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            # torch's restart reads base_lrs for every group (a group added after the
            # schedule was made has none there: refused, as torch's strict zip refuses it)
            base = self._of_group(self.base_lrs, index)
            rise = (base - self.eta_min) * (1 - math.cos(math.pi / self.T_max))
            return current + rise / 2
        ratio = (1 + math.cos(math.pi * epoch / self.T_max)) / (
            1 + math.cos(math.pi * (epoch - 1) / self.T_max)
        )
        return ratio * (current - self.eta_min) + self.eta_min


class _WithLambdas(LRScheduler):
    """``lr_lambdas``, one function per group, and their saving: what ``LambdaLR`` and
    ``MultiplicativeLR`` share (each its own class, as torch's)."""

    def __init__(self, optimizer: Any, lr_lambda: Any, last_epoch: int = -1):
        _check_optimizer(type(self).__name__, optimizer)
        groups = len(optimizer.param_groups)
        lambdas = lr_lambda if isinstance(lr_lambda, list | tuple) else [lr_lambda] * groups
        if len(lambdas) != groups:
            raise InvalidArgumentError(
                f"{type(self).__name__}: expected {groups} lr_lambdas, but got {len(lambdas)}"
            )
        for fn in lambdas:  # here, not as Python's "not callable" at the first step
            check_callable(type(self).__name__, fn, "lr_lambda")
        self.lr_lambdas = list(lambdas)
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """torch's: the factors' own attributes where they are callable objects (a function
        has none that saves), ``None`` for the others."""
        state = super().state_dict()
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) else dict(getattr(fn, "__dict__", {}))
            for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's: the functions stay this schedule's, a callable object's attributes are
        set from its entry. (torch's state holds ``lr_lambdas``, a list of ``None``: set as an
        attribute it replaced the functions, and the next step failed as "'NoneType' object is
        not callable".)"""
        self.check_state_dict(state_dict)
        state = dict(state_dict)
        saved = state.pop("lr_lambdas", None) or [None] * len(self.lr_lambdas)
        self.__dict__.update(state)
        for fn, attributes in zip(self.lr_lambdas, saved):
            if attributes is not None:
                fn.__dict__.update(attributes)

    def check_state_dict(self, state_dict: Any) -> None:
        super().check_state_dict(state_dict)
        saved = state_dict.get("lr_lambdas")
        if saved is None:
            return
        if not (
            isinstance(saved, list | tuple)
            # fewer: saved before groups were added to the optimizer; more, None past this
            # schedule's functions: saved after (see _check_state); torch's load takes both
            and all(entry is None for entry in saved[len(self.lr_lambdas) :])
            and all(entry is None or isinstance(entry, Mapping) for entry in saved)
        ):
            raise ShapeError(
                f"{type(self).__name__}.load_state_dict: lr_lambdas must be an entry per "
                f"function ({len(self.lr_lambdas)}), each None or a dict of a callable object's "
                f"attributes (None past them); got {saved!r}"
            )
        for fn, entry in zip(self.lr_lambdas, saved):
            if entry is not None and not hasattr(fn, "__dict__"):
                raise DTypeError(
                    f"{type(self).__name__}.load_state_dict: lr_lambda {fn!r} has no "
                    "attributes to set"
                )


class LambdaLR(_WithLambdas):
    """``lr = base_lr * lr_lambda(epoch)`` (one function, or one per group)."""

    def _apply(self, epoch: int) -> None:
        self._check_groups(self.lr_lambdas)  # one function per group
        self._check_groups(self.base_lrs)  # and one initial rate (torch zips them strictly)
        for group, base, fn in zip(self.optimizer.param_groups, self.base_lrs, self.lr_lambdas):
            group["lr"] = base * _factor(type(self).__name__, fn, epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        return base * _factor(type(self).__name__, self.lr_lambdas[0], epoch)

    chainable = False

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        fn = self._of_group(self.lr_lambdas, index)
        return self._of_group(self.base_lrs, index) * _factor(type(self).__name__, fn, epoch)


class MultiplicativeLR(_WithLambdas):
    """``lr = lr * lr_lambda(epoch)`` at each step after the first."""

    def _apply(self, epoch: int) -> None:
        # torch's get_lr leaves the rates alone in the constructor's step only (resuming
        # with last_epoch); at any other epoch, 0 too (SequentialLR's switch to this
        # schedule at a milestone, step(0)), it scales them by lr_lambda(epoch)
        if getattr(self, "_closed_step", False):
            return
        self._check_groups(self.lr_lambdas)  # one function per group
        for group, fn in zip(self.optimizer.param_groups, self.lr_lambdas):
            group["lr"] = group["lr"] * _factor(type(self).__name__, fn, epoch)

    chainable = True

    def _apply_recursive(self, epoch: int) -> None:
        self._check_groups(self.lr_lambdas)  # one function per group
        super()._apply_recursive(epoch)

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        if epoch == 0:
            return current
        fn = self._of_group(self.lr_lambdas, index)
        return current * _factor(type(self).__name__, fn, epoch)


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= epoch)``."""

    resumed_step = "recursive"

    def __init__(self, optimizer: Any, milestones: Any, gamma: float = 0.1, last_epoch: int = -1):
        #: each milestone with its count, as torch's (a milestone listed twice scales twice)
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        milestones = self.milestones  # (a list, in a state saved before they were counted)
        listed = milestones.elements() if isinstance(milestones, Counter) else milestones
        return base * self.gamma ** sum(1 for m in listed if m <= epoch)

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        """torch's recursive form, to the bit: ``current * gamma ** n`` at a milestone listed
        ``n`` times, the rate left alone elsewhere."""
        milestones = self.milestones
        count = (
            milestones[epoch]
            if isinstance(milestones, Counter)
            else sum(1 for m in milestones if m == epoch)
        )
        return current * self.gamma**count if count else current


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** epoch``."""

    resumed_step = "keep"

    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        return base * self.gamma**epoch

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        return current if epoch == 0 else current * self.gamma  # torch's, to the bit


class LinearLR(LRScheduler):
    """A factor going linearly from ``start_factor`` to ``end_factor`` over ``total_iters``
    epochs, then staying."""

    resumed_step = "keep"

    def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):  # fmt: skip
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise InvalidArgumentError("LinearLR: factors must be in (0, 1] and [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        if self.total_iters == 0:  # torch's steps leave epoch 0's factor in place for good
            return base * self.start_factor
        t = min(epoch, self.total_iters)
        factor = self.start_factor + (self.end_factor - self.start_factor) * t / self.total_iters
        return base * factor

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        """torch's recursive form, to the bit: ``start_factor`` at epoch 0, then each step's
        ratio of consecutive factors, nothing past ``total_iters``."""
        if epoch == 0:
            return current * self.start_factor
        if epoch > self.total_iters:
            return current
        rise = self.end_factor - self.start_factor
        return current * (1.0 + rise / (self.total_iters * self.start_factor + (epoch - 1) * rise))


class ConstantLR(LRScheduler):
    """``lr = base_lr * factor`` for the first ``total_iters`` epochs, then ``base_lr``."""

    resumed_step = "recursive"

    def __init__(self, optimizer: Any, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):  # fmt: skip
        if not isinstance(factor, Real) or not 0.0 <= factor <= 1.0:  # torch's range
            raise InvalidArgumentError(
                f"ConstantLR: factor must be between 0 and 1, got {factor!r}"
            )
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        # (total_iters=0: torch's steps leave epoch 0's factor in place for good)
        return base * (self.factor if epoch < self.total_iters or not self.total_iters else 1.0)

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        """torch's recursive form, to the bit: ``current * factor`` at epoch 0, ``current *
        (1 / factor)`` at ``total_iters``, the rate left alone elsewhere."""
        if epoch == 0:
            return current * self.factor
        if epoch != self.total_iters:
            return current
        if self.factor == 0:
            return current  # (torch divides by zero; the 0/0 of a zero factor keeps the rate)
        return current * (1.0 / self.factor)


class PolynomialLR(LRScheduler):
    """``lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power``."""

    resumed_step = "keep"

    def __init__(self, optimizer: Any, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1):  # fmt: skip
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        if self.total_iters == 0:  # torch's: no decay at all (its steps never change the lr)
            return base
        return base * (1.0 - min(epoch, self.total_iters) / self.total_iters) ** self.power

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        """torch's recursive form, to the bit: each step's ratio of consecutive factors."""
        if epoch == 0 or epoch > self.total_iters:
            return current
        total = self.total_iters
        return current * ((1.0 - epoch / total) / (1.0 - (epoch - 1) / total)) ** self.power


class ReduceLROnPlateau(LRScheduler):
    """Scale each group's learning rate by ``factor`` when the metric given to
    ``step(metric)`` has not improved for ``patience`` epochs (torch's rules: ``mode``,
    ``threshold``/``threshold_mode``, ``cooldown``, ``min_lr``, ``eps``). An
    ``LRScheduler`` as torch 2.13's (``isinstance`` checks of training loops), with its own
    constructor, step and state: it neither calls the base's constructor nor steps by epoch."""

    def __init__(self, optimizer: Any, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: Any = 0, eps: float = 1e-8):  # fmt: skip
        if factor >= 1.0:
            raise InvalidArgumentError("ReduceLROnPlateau: factor should be < 1.0")
        for name, value in (("mode", mode), ("threshold_mode", threshold_mode)):
            # torch's set lookup ("unhashable type"), or its message "mode " + mode + ...
            # ("can only concatenate str"): a TypeError for any value but a str
            if not isinstance(value, str):
                raise DTypeError(
                    f"ReduceLROnPlateau: {name} must be a str, got {type(value).__name__}"
                )
        if mode not in ("min", "max"):
            raise InvalidArgumentError(
                f"ReduceLROnPlateau: mode {mode!r} is unknown (expected 'min' or 'max')"
            )
        if threshold_mode not in ("rel", "abs"):
            raise InvalidArgumentError(
                f"ReduceLROnPlateau: threshold_mode {threshold_mode!r} is unknown (expected "
                "'rel' or 'abs')"
            )
        groups = len(optimizer.param_groups)
        min_lrs = list(min_lr) if isinstance(min_lr, list | tuple) else [min_lr] * groups
        if len(min_lrs) != groups:
            raise InvalidArgumentError(
                f"ReduceLROnPlateau: expected {groups} min_lrs (one per parameter group), got "
                f"{len(min_lrs)}"
            )
        # set in torch's order, which its state keeps
        self.factor = factor
        self.optimizer = optimizer
        #: torch's: the one ``min_lr`` given, for groups added later (None: one per group given)
        self.default_min_lr = None if isinstance(min_lr, list | tuple) else min_lr
        self.min_lrs = min_lrs
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]
        #: torch's: the worst value of the metric, where ``best`` starts
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def get_lr(self) -> list[float]:
        """Refused, as torch's: the rates follow the metrics given to ``step``, not an epoch."""
        raise NotImplementedError(
            "ReduceLROnPlateau.get_lr: the learning rates follow the metrics given to "
            "step(metrics), not a form of the epoch; the rates the last step set are "
            "get_last_lr()'s"
        )

    def _better(self, current: float) -> bool:
        if self.mode == "min":
            bound = (
                self.best * (1 - self.threshold)
                if self.threshold_mode == "rel"
                else (self.best - self.threshold)
            )
            return current < bound
        bound = (
            self.best * (self.threshold + 1)
            if self.threshold_mode == "rel"
            else (self.best + self.threshold)
        )
        return current > bound

    def step(self, metrics: Any, epoch: Any = None) -> None:
        """One epoch's ``metrics``; ``epoch``, torch's deprecated second argument (warmup
        wrappers pass it on), sets ``last_epoch`` to it instead of counting one more."""
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, Real)):
            raise DTypeError(f"ReduceLROnPlateau.step: epoch must be a number, got {epoch!r}")
        # a tensor of several values was refused by ``item``, naming it rather than this step
        if isinstance(metrics, Tensor) and metrics.numel() != 1:
            raise ShapeError(
                f"ReduceLROnPlateau.step: metrics must be one number, got a tensor of shape "
                f"{list(metrics.shape)}"
            )
        value = metrics.item() if hasattr(metrics, "item") else metrics
        if isinstance(value, bool) or not isinstance(value, Real):
            raise DTypeError(
                f"ReduceLROnPlateau.step: metrics must be a number (or a one-element tensor), "
                f"got {type(metrics).__name__}"
            )
        current = float(value)
        if epoch is None:
            self.last_epoch += 1
        else:
            warnings.warn(_EPOCH_DEPRECATED, UserWarning, stacklevel=2)
            self.last_epoch = epoch
        if self._better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            groups = self.optimizer.param_groups
            if len(groups) != len(self.min_lrs):  # a group added after the schedule was made
                if getattr(self, "default_min_lr", None) is None:
                    raise OptimizerGroupsError(  # (torch's RuntimeError)
                        f"ReduceLROnPlateau.step: the optimizer has {len(groups)} param_groups, "
                        f"min_lrs {len(self.min_lrs)} (a group was added after the schedule "
                        "was made; set min_lrs to one per group)"
                    )
                self.min_lrs = [self.default_min_lr] * len(groups)
            for group, low in zip(groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, low)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.check_state_dict(state_dict)
        self.__dict__.update(state_dict)


#: the state's entries holding one value per parameter group (torch's names)
_PER_GROUP = frozenset(
    {"base_lrs", "_last_lr", "min_lrs", "max_lrs", "_cycle_base_lrs", "base_momentums",
     "max_momentums"}
)  # fmt: skip


def _check_state(op: str, schedule: Any, state_dict: Any) -> None:
    """A schedule's state is a dict of its attributes (what ``state_dict`` gave), checked
    before any is set: the per-group lists hold one number per parameter group of this
    schedule's optimizer, and what is a number here stays one. A state saved over an optimizer
    of another number of groups set only the groups its lists reached (the others' rates
    never moved again), and ``last_epoch`` set to a str failed at the next step as a bare
    TypeError. Entries this schedule does not have (torch's own bookkeeping) are kept as
    torch keeps them."""
    name = f"{type(schedule).__name__}.{op}"
    if not isinstance(state_dict, Mapping) or not all(isinstance(k, str) for k in state_dict):
        raise DTypeError(
            f"{name}: expected the dict state_dict() returned, got {type(state_dict).__name__}"
        )
    groups = len(schedule.optimizer.param_groups)
    for key, value in state_dict.items():
        current = schedule.__dict__.get(key)
        if key in _PER_GROUP and isinstance(current, list):
            # fewer values than groups: a schedule made before groups were added to its
            # optimizer (a backbone unfrozen mid-run), resumed; its step treats the added
            # groups as it did before the save. More: a schedule saved after groups were
            # added, loaded before the resumed run adds them again. torch's load takes both.
            if not isinstance(value, list | tuple):
                raise ShapeError(
                    f"{name}: {key} must hold one value per param_group (the optimizer has "
                    f"{groups}), got {value!r}"
                )
            if not all(is_number(v) or (v is None and c is None) for v, c in zip(value, current)):
                raise DTypeError(f"{name}: {key} must hold numbers, got {list(value)!r}")
        elif isinstance(current, bool) and not isinstance(value, bool):
            # (OneCycleLR's use_beta1: a str read as true looked for 'betas' in SGD's groups
            # and failed at the next step with a bare KeyError)
            raise DTypeError(f"{name}: {key} must be a bool, got {value!r}")
        elif is_number(current) and not is_number(value):
            raise DTypeError(f"{name}: {key} must be a number, got {value!r}")
        elif isinstance(value, float) and (
            math.isnan(value) or (isinstance(current, int) and math.isinf(value))
        ):  # a count (last_epoch, CyclicLR's total_size) NaN or infinite failed bare in int()
            # at the next step; no schedule keeps a NaN (an infinite best is a fresh one's)
            raise InvalidArgumentError(f"{name}: {key} must be a finite number, got {value!r}")
        elif (
            isinstance(current, list)
            and current
            and all(isinstance(c, Mapping) for c in current)
            and not (
                isinstance(value, list | tuple)
                and value
                and all(isinstance(v, Mapping) for v in value)
            )
        ):  # OneCycleLR's phases: none left failed the next step with an AssertionError
            raise DTypeError(f"{name}: {key} must be a non-empty list of dicts, got {value!r}")
