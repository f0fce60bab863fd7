"""Checkpointing, as Burn does it: which outputs are kept for backward, which are recomputed.

The package is split as Burn's ``burn-autodiff/src/checkpoint`` is:

- :mod:`.strategy`: :class:`CheckpointStrategy`, the interface the engine calls (``save``
  while recording, ``begin_backward`` when a backward starts), and one module per strategy:
  :mod:`.no_checkpointing`, :mod:`.balanced`, :mod:`.budget`;
- :mod:`.builder`: what forward records for each node (:class:`~.builder.Saved`) and how
  backward gathers it (:class:`CheckpointerBuilder`);
- :mod:`.state`: a saved value's :class:`~.state.State` during backward;
- :mod:`.checkpointer`: the :class:`Checkpointer` that hands values out during backward;
- :mod:`.retro_forward`: recomputing a dropped value from its parents, and
  :mod:`.anchored`: √n anchors that keep a long recomputation linear.
"""

from .balanced import BalancedCheckpointing
from .budget import BudgetCheckpointing, parse_bytes
from .builder import CheckpointerBuilder
from .checkpointer import BackwardReport, Checkpointer
from .no_checkpointing import NoCheckpointing
from .state import RECOMPUTE, State
from .strategy import CheckpointStrategy

__all__ = [
    "RECOMPUTE",
    "BackwardReport",
    "BalancedCheckpointing",
    "BudgetCheckpointing",
    "CheckpointStrategy",
    "Checkpointer",
    "CheckpointerBuilder",
    "NoCheckpointing",
    "State",
    "parse_bytes",
]
