"""``torch.optim.optimizer``: the module optimizers written as torch's import their base from
(``from torch.optim.optimizer import Optimizer, required``)."""

from .optimizers import Optimizer, required

__all__ = ["Optimizer", "required"]
