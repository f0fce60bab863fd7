"""``torch.optim.optimizer``: the module optimizers written as torch's import their base from
(``from torch.optim.optimizer import Optimizer, required``), and its global step hooks."""

from .optimizers import (
    Optimizer,
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
    required,
)

__all__ = [
    "Optimizer",
    "register_optimizer_step_post_hook",
    "register_optimizer_step_pre_hook",
    "required",
]
