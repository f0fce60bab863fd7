"""The autodiff backend decorator: graph, gradients, ops with backward rules, checkpointing."""

from .backend import Autodiff
from .checkpoint import (
    BalancedCheckpointing,
    BudgetCheckpointing,
    Checkpointer,
    CheckpointerBuilder,
    CheckpointStrategy,
    NoCheckpointing,
)
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .gradients import Gradients
from .graph import AutodiffPrimitive, Node
from .ops import OPS, Op

__all__ = [
    "OPS",
    "Autodiff",
    "AutodiffPrimitive",
    "BalancedCheckpointing",
    "BudgetCheckpointing",
    "CheckpointStrategy",
    "Checkpointer",
    "CheckpointerBuilder",
    "Gradients",
    "NoCheckpointing",
    "Node",
    "Op",
    "enable_grad",
    "is_grad_enabled",
    "no_grad",
    "set_grad_enabled",
]
