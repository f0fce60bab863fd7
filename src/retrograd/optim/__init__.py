"""Optimizers, gradient clipping and learning-rate schedules.

Gradients are a value (Burn's style): ``optimizer.step(grads)`` takes the
:class:`~retrograd.Gradients` that ``loss.backward()`` returned and replaces each parameter of
the module with its updated value::

    model = nn.Linear(4, 2)
    optimizer = optim.Adam(model, lr=1e-3)
    grads = loss.backward()
    optim.clip_grad_norm(grads, model, max_norm=1.0)   # optional
    optimizer.step(grads)
"""

from .clip import clip_grad_norm
from .optimizers import SGD, Adam, AdamW, Optimizer
from .schedules import CosineAnnealingLR, LRScheduler, StepLR

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "CosineAnnealingLR",
    "LRScheduler",
    "Optimizer",
    "StepLR",
    "clip_grad_norm",
]
