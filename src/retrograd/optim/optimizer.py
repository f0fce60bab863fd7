"""``torch.optim.optimizer``: the module optimizers written as torch's import their base from
(``from torch.optim.optimizer import Optimizer, required``), and its global step hooks."""

from ..step_hooks import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from .optimizers import Optimizer, required

__all__ = [
    "Optimizer",
    "register_optimizer_step_post_hook",
    "register_optimizer_step_pre_hook",
    "required",
]
