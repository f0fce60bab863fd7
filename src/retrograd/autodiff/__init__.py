"""The autodiff backend decorator: graph, gradients, ops with backward rules, checkpointing,
and the plan hook that reports what backward will do with each value (:mod:`.explain`)."""

from .backend import Autodiff
from .checkpoint import (
    BalancedCheckpointing,
    BudgetCheckpointing,
    Checkpointer,
    CheckpointerBuilder,
    CheckpointStrategy,
    NoCheckpointing,
)
from .explain import PlannedValue, RecordingAutodiff, StepPlan, step_plan
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
    "PlannedValue",
    "RecordingAutodiff",
    "StepPlan",
    "enable_grad",
    "is_grad_enabled",
    "no_grad",
    "set_grad_enabled",
    "step_plan",
]
