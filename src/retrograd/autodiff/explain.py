"""What backward will do with each value of a recorded step: the engine's public plan hook.

:func:`step_plan` reports, for every node the backward from a root would walk, and every
untracked value its rules read, what the backend's checkpointing strategy does with it:
held from forward until backward reads it (*saved*), dropped and recomputed (*recomputed*, or
*evicted* by a memory budget during forward), or read by no rule and freed as soon as forward
is done with it (*freed*). It asks the strategy for the states its checkpointer would start
from, so the report is the engine's own plan, not a guess from op kinds; it runs no backward
and changes nothing.

Shapes: a value the plan holds has its shape; for the others the backend must have noted them
as it recorded: :class:`RecordingAutodiff` does (the plain :class:`~.backend.Autodiff` keeps
no shapes, so that it pays nothing for this).

>>> import retrograd as rg
>>> B = RecordingAutodiff(rg.NumpyBackend(), rg.BalancedCheckpointing())
>>> with rg.use_backend(B):
...     x = rg.tensor([1.0, 2.0]).require_grad()
...     loss = (x.exp() * x).sum()
>>> [(v.op, v.status, v.shape) for v in step_plan(B, loss.primitive)]
... # doctest: +NORMALIZE_WHITESPACE
[(None, 'leaf', (2,)), ('exp', 'recomputed', (2,)), ('mul', 'freed', (2,)),
 ('sum', 'freed', ())]
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..backend.protocol import ITEMSIZE
from ..errors import AutodiffError
from .backend import Autodiff
from .checkpoint.state import EVICTED, FREED, LEAF, RECOMPUTED, SAVED, nbytes_of
from .graph import AutodiffPrimitive
from .runtime import Tape

__all__ = [
    "EVICTED",
    "FREED",
    "LEAF",
    "RECOMPUTED",
    "SAVED",
    "PlannedValue",
    "RecordingAutodiff",
    "StepPlan",
    "step_plan",
]

#: the kinds of value a plan reports
COMPUTE, MEMORY, LEAF_KIND, CONSTANT = "compute", "memory", "leaf", "constant"


@dataclass(frozen=True)
class PlannedValue:
    """One value of a :class:`StepPlan`."""

    #: its node's id, or the key of an untracked value a rule reads
    key: int
    #: the op that makes it; ``None`` for a leaf or an untracked value
    op: str | None
    #: ``"compute"`` or ``"memory"`` (the op's boundedness), ``"leaf"`` (a leaf that requires
    #: grad) or ``"constant"`` (an untracked value a rule reads)
    kind: str
    #: ``"saved"``, ``"recomputed"``, ``"evicted"``, ``"freed"``, or ``"leaf"``
    #: (:mod:`.checkpoint.state`)
    status: str
    #: keys of the tracked inputs it is computed from
    parents: tuple[int, ...]
    #: keys of the untracked values its rules read (``kind == "constant"`` entries)
    constants: tuple[int, ...]
    #: its shape and dtype, ``None`` where unknown (see the module docstring)
    shape: tuple[int, ...] | None
    dtype: str | None
    #: the bytes it holds, ``None`` where unknown
    nbytes: int | None
    #: for a value missing when backward starts (recomputed, evicted): where backward first
    #: needs it, so recomputes it: ``(step, op)``, the position of that backward step in the
    #: order backward runs them and the op whose step it is; else ``None``
    recomputed_at: tuple[int, str] | None = None


@dataclass(frozen=True)
class StepPlan:
    """The plan of one step: its values, nodes by id (the order they were recorded in), then
    the untracked values rules read; ``root``: the key backward starts from."""

    strategy: str
    root: int
    values: tuple[PlannedValue, ...]

    def __iter__(self) -> Iterator[PlannedValue]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


class RecordingAutodiff(Autodiff):
    """An :class:`~.backend.Autodiff` backend that also notes the output shape and dtype of
    every node it records (``shapes[node.id]``) through the recording hook of
    :meth:`Autodiff._record <retrograd.autodiff.backend.Autodiff._record>`, so that
    :func:`step_plan` knows every value's shape."""

    def __init__(self, inner: Any = None, checkpointing: Any = None):
        super().__init__(inner, checkpointing)
        self.shapes: dict[int, tuple[tuple[int, ...], str]] = {}

    def _on_record(self, node: Any, out: Any) -> None:
        self.shapes[node.id] = (tuple(self.inner.shape(out)), self.inner.dtype(out))

    def require_grad(self, x: Any) -> Any:
        x = super().require_grad(x)
        self._on_record(x.node, x.value)  # leaves are not recorded ops, but are planned too
        return x


def step_plan(backend: Autodiff, root: AutodiffPrimitive) -> StepPlan:
    """What ``backend``'s checkpointing strategy does with each value a backward from
    ``root`` (a tracked autodiff primitive: ``loss.primitive``) would walk; see the module
    docstring. Consumes nothing: a backward may follow."""
    root_node = root.node
    if root_node is None:
        raise AutodiffError(
            "step_plan: this tensor does not require grad and is not computed from anything "
            "that does: there is no graph to plan"
        )
    tape = Tape(root_node)
    strategy = backend.checkpointing
    states = strategy.planned_states(tape)
    first_needs = _first_needs(tape, strategy.tree_of(tape), states)
    inner = backend.inner
    noted = backend.shapes if isinstance(backend, RecordingAutodiff) else {}

    def described(key: int, value: Any) -> tuple:
        shape, dtype = noted.get(key, (None, None))
        if shape is None and value is not None:
            shape, dtype = tuple(inner.shape(value)), inner.dtype(value)
        if shape is not None:
            return shape, dtype, math.prod(shape) * ITEMSIZE[dtype]
        return None, None, None if value is None else nbytes_of(value)

    values: list[PlannedValue] = []
    constants: list[PlannedValue] = []
    for node in sorted(tape.nodes.values(), key=lambda node: node.id):
        state = states.get(node.id)
        held = state.value if state is not None and state.computed else None
        shape, dtype, nbytes = described(node.id, held)
        parents = tuple(parent.id for parent in node.parents if parent is not None)
        if node.op is None:
            kind, status = LEAF_KIND, LEAF
        else:
            kind = MEMORY if node.op.memory_bound else COMPUTE
            if state is None:
                status = FREED
            else:
                status = SAVED if state.computed else strategy.recomputed_status
        recomputed_at = None
        if state is not None and not state.computed and node.id in first_needs:
            step = first_needs[node.id]
            recomputed_at = (step, tape.steps[step].op.name)
        own = []
        for key in node.saved.keys:
            if key in tape.nodes or key not in states or key in own:
                continue
            own.append(key)
            value = states[key].value
            c_shape, c_dtype, c_nbytes = described(key, value)
            constants.append(
                PlannedValue(key, None, CONSTANT, SAVED, (), (), c_shape, c_dtype, c_nbytes)
            )
        values.append(
            PlannedValue(
                node.id,
                None if node.op is None else node.op.name,
                kind,
                status,
                parents,
                tuple(own),
                shape,
                dtype,
                nbytes,
                recomputed_at,
            )
        )
    return StepPlan(repr(strategy), root_node.id, tuple(values + constants))


def _first_needs(tape: Tape, tree: dict, states: dict) -> dict[int, int]:
    """key -> the first backward step (its position in ``tape.steps``) that needs the value:
    a step whose rules read it, or the recomputation of a missing descendant (which reads
    its parents)."""
    first: dict[int, int] = {}
    for position, node in enumerate(tape.steps):
        if node.op is None:
            continue
        stack = list(node.saved.keys)
        while stack:
            key = stack.pop()
            if key in first:
                continue
            first[key] = position
            state = states.get(key)
            if state is not None and not state.computed and key in tree:
                stack.extend(parent.id for parent in tree[key].parents if parent is not None)
    return first
