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
from .gradients import Gradients
from .graph import AutodiffPrimitive, Node, Requirement
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
    "Requirement",
]
