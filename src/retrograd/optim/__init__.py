"""Optimizers, gradient clipping and learning-rate schedules.

Gradients are a value (Burn's style): ``optimizer.step(grads)`` takes the
:class:`~retrograd.Gradients` that ``loss.backward()`` returned and replaces each parameter of
the module with its updated value::

    model = nn.Linear(4, 2)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)   # or the module, or param groups
    grads = loss.backward()
    optim.clip_grad_norm(grads, model, max_norm=1.0)   # optional; = nn.utils.clip_grad_norm_
    optimizer.step(grads)

Parameters are updated in place (the object stays: ``nn.Parameter``), and ``param_groups``,
``state_dict``/``load_state_dict`` are torch's.
"""

import inspect

from ..errors import guard
from . import lr_scheduler, optimizer, swa_utils
from .adaptive import Adadelta, Adagrad, Adamax, NAdam, RAdam, SparseAdam
from .classic import ASGD, Adafactor, Rprop
from .clip import clip_grad_norm
from .composite_schedules import ChainedScheduler, SequentialLR
from .cyclic_schedules import CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR
from .lbfgs import LBFGS
from .muon import Muon
from .optimizers import SGD, Adam, AdamW, Optimizer, RMSprop
from .schedules import (
    ConstantLR,
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    MultiplicativeLR,
    MultiStepLR,
    PolynomialLR,
    ReduceLROnPlateau,
    StepLR,
)

__all__ = [
    "ASGD",
    "LBFGS",
    "SGD",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "ChainedScheduler",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "Muon",
    "NAdam",
    "OneCycleLR",
    "Optimizer",
    "PolynomialLR",
    "RAdam",
    "RMSprop",
    "ReduceLROnPlateau",
    "Rprop",
    "SequentialLR",
    "SparseAdam",
    "StepLR",
    "clip_grad_norm",
    "lr_scheduler",
    "optimizer",
    "swa_utils",
]


_UNGUARDED = ("LambdaLR", "MultiplicativeLR", "Optimizer", "LRScheduler")
#: schedules whose rates come from other schedules (which may run the user's functions)
_RUNS_OTHERS = ("ChainedScheduler", "SequentialLR")
#: the schedules' methods that take an epoch (a str given for it: the hierarchy's error)
_SCHEDULE_METHODS = ("lr_at", "chained_lr", "at")


def _guard_constructors() -> None:
    """Each optimizer's and schedule's constructor answers arguments no check foresaw (a
    float for ``betas``, a str for ``lr``) with an error of the hierarchy naming the class
    (errors.guard), and so do the schedules' closed forms (``lr_at(epoch)``). Schedules that
    call the user's functions are left out: those functions' exceptions pass unchanged."""
    for name in __all__:
        cls = globals().get(name)
        # the bases run inside their subclasses' guards, which name the class the user made
        if not isinstance(cls, type) or name in _UNGUARDED:
            continue
        function = inspect.getattr_static(cls, "__init__", None)
        if getattr(function, "__retrograd_guarded__", False):
            function = function.__wrapped__
        if type(function).__name__ == "function":
            cls.__init__ = guard(name, function, cls, f"{cls.__qualname__}.__init__")
        if name in _RUNS_OTHERS:
            continue
        for method in _SCHEDULE_METHODS:  # a schedule's closed forms, asked at any epoch
            function = inspect.getattr_static(cls, method, None)
            if getattr(function, "__retrograd_guarded__", False):
                function = function.__wrapped__  # a base's: guarded again under this name
            if type(function).__name__ == "function":
                op = f"{name}.{method}"
                setattr(cls, method, guard(op, function, cls, f"{cls.__qualname__}.{method}"))


_guard_constructors()
# torch keeps SWALR in swa_utils only (not in lr_scheduler)
swa_utils.SWALR.__init__ = guard(
    "SWALR", swa_utils.SWALR.__init__, swa_utils.SWALR, "SWALR.__init__"
)
for _method in _SCHEDULE_METHODS:
    _function = vars(swa_utils.SWALR).get(_method)
    if type(_function).__name__ == "function":
        _op = f"SWALR.{_method}"
        setattr(swa_utils.SWALR, _method, guard(_op, _function, swa_utils.SWALR, _op))
