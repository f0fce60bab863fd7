"""Learning-rate schedules: they set each parameter group's ``"lr"`` each time they are stepped,
from the group's own initial learning rate (``group["initial_lr"]``, as torch's)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["CosineAnnealingLR", "LRScheduler", "StepLR"]


class LRScheduler:
    """Base class. Call :meth:`step` once per epoch (or per step, as you count ``T``), after
    ``optimizer.step``, as in PyTorch; ``last_epoch`` counts the calls."""

    def __init__(self, optimizer: Any):
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        #: each group's initial learning rate
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.base_lr = self.base_lrs[0]
        self.last_epoch = 0
        self._apply(0)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        """The learning rate at ``epoch`` of a group starting at ``base_lr`` (the first
        group's by default)."""
        raise NotImplementedError

    def _apply(self, epoch: int) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(epoch, base)

    def step(self) -> float:
        """Advance one epoch and set every group's learning rate; returns the first's."""
        self.last_epoch += 1
        self._apply(self.last_epoch)
        return self.optimizer.param_groups[0]["lr"]

    def get_last_lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``.

    >>> from retrograd import nn, optim
    >>> schedule = StepLR(optim.SGD(nn.Linear(1, 1), lr=1.0), step_size=2, gamma=0.5)
    >>> [schedule.step() for _ in range(4)]
    [1.0, 0.5, 0.5, 0.25]
    """

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1):
        if step_size < 1:
            raise InvalidArgumentError(f"StepLR: step_size must be positive, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        return base * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2`` (SGDR without
    restarts, as ``torch.optim.lr_scheduler.CosineAnnealingLR``).

    >>> from retrograd import nn, optim
    >>> schedule = CosineAnnealingLR(optim.SGD(nn.Linear(1, 1), lr=1.0), T_max=2)
    >>> [round(schedule.step(), 6) for _ in range(2)]
    [0.5, 0.0]
    """

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0):  # noqa: N803
        if T_max < 1:
            raise InvalidArgumentError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        base = self.base_lr if base_lr is None else base_lr
        cosine = (1.0 + math.cos(math.pi * epoch / self.T_max)) / 2.0
        return self.eta_min + (base - self.eta_min) * cosine
