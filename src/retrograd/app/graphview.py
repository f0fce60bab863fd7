"""The autodiff graph of one training step, as DOT (and SVG through Graphviz's ``dot``).

Each node is one recorded op (or a parameter), labelled with its op and output shape,
coloured by whether the op is compute-bound or memory-bound, and marked with what the chosen
checkpointing strategy does with its output during backward:

- **saved**: kept from forward until backward reads it (solid bold border);
- **recomputed**: dropped after forward and recomputed from its parents when backward reads it
  (dashed red border);
- **evicted** (``budget:SIZE`` only): evicted during forward to stay under the budget, and
  recomputed when backward reads it (dotted purple border);
- **freed**: no backward rule reads it, so it is freed as soon as forward no longer needs it.

The marks are not guessed from op kinds: they are the engine's own plan for the step's
backward, asked for through its public hook (:func:`retrograd.autodiff.explain.step_plan`)
before backward runs. Constants that backward rules read (the input batch a convolution's
weight gradient needs, say) appear as grey ellipses.

Shapes come from a :class:`~retrograd.autodiff.explain.RecordingAutodiff` backend, which
notes each node's output shape as it is recorded; the engine's nodes themselves carry no
shapes, and the ordinary backend pays nothing for this.

>>> step = trace_step("mlp", (1, 8, 8), batch_size=2, checkpointing="balanced")
>>> "layer_norm" in step.to_dot() or "recomputed" in step.to_dot()
True
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import retrograd as rg

from ..autodiff.explain import (
    EVICTED,
    FREED,
    RECOMPUTED,
    SAVED,
    RecordingAutodiff,
    StepPlan,
    step_plan,
)
from ..nn import functional as F  # noqa: N812  (PyTorch's idiom)
from .models import build_model

__all__ = ["GraphNode", "RecordingAutodiff", "StepGraph", "render_svg", "trace_step"]

FILL = {"compute": "#f6bd60", "memory": "#90caf9", "parameter": "#b7e4c7", "constant": "#e9ecef"}
PARAMETER = "parameter"  # the status of parameters: they live on, whatever the strategy
BORDER = {
    SAVED: ("solid,bold", "#222222"),
    RECOMPUTED: ("dashed,bold", "#d00000"),
    EVICTED: ("dotted,bold", "#7b2cbf"),
    FREED: ("solid", "#9e9e9e"),
    PARAMETER: ("solid", "#2d6a4f"),
}


@dataclass
class GraphNode:
    """One node of a :class:`StepGraph`."""

    index: int
    label: str  # the op's name, a parameter's name, or "constant"
    kind: str  # "compute", "memory", "parameter" or "constant"
    shape: tuple[int, ...] | None
    status: str  # SAVED, RECOMPUTED, FREED, or PARAMETER for parameters
    parents: list[int] = field(default_factory=list)
    nbytes: int = 0
    is_loss: bool = False
    #: a missing value's recomputation: (backward step, the op of that step), else ``None``
    recomputed_at: tuple[int, str] | None = None


@dataclass
class StepGraph:
    """The graph of one training step and what checkpointing does with each output."""

    nodes: list[GraphNode]
    strategy: str
    description: str
    recomputed_bytes: int = 0
    #: under a budget: the share of the step's FLOPs its plan recomputes (counted from the
    #: ops' shapes, ``BudgetCheckpointing.recompute_fraction``), else ``None``
    recompute_fraction: float | None = None

    def counts(self) -> Counter:
        return Counter((n.kind, n.status) for n in self.nodes)

    def bytes_by_status(self) -> dict[str, int]:
        """Bytes of op outputs (and saved constants) by status."""
        totals = {SAVED: 0, RECOMPUTED: 0, FREED: 0, EVICTED: 0}
        for node in self.nodes:
            if node.status in totals:
                totals[node.status] += node.nbytes
        return totals

    def to_dot(self) -> str:
        """The graph in Graphviz's DOT language (forward flows top to bottom)."""
        lines = [
            "digraph retrograd_step {",
            f'  label="{_escape(self.description)}";',
            '  labelloc="t"; fontname="Helvetica"; rankdir="TB";',
            '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
            '  edge [color="#555555", arrowsize=0.6];',
        ]
        for node in self.nodes:
            lines.append(f"  {_dot_node(node)}")
        for node in self.nodes:
            for parent in node.parents:
                dotted = self.nodes[parent].kind == "constant"  # read by backward, not an op
                lines.append(f"  n{parent} -> n{node.index}{' [style=dotted]' if dotted else ''};")
        lines += _legend()
        lines.append("}")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        ops = [n for n in self.nodes if n.kind in ("compute", "memory")]
        totals = self.bytes_by_status()
        return "\n".join(
            [
                f"{len(ops)} ops ({sum(n.kind == 'compute' for n in ops)} compute-bound, "
                f"{sum(n.kind == 'memory' for n in ops)} memory-bound), "
                f"{sum(n.kind == 'parameter' for n in self.nodes)} parameters",
                f"outputs under {self.strategy}: "
                f"{sum(n.status == SAVED for n in ops)} saved ({_kib(totals[SAVED])}), "
                f"{sum(n.status == RECOMPUTED for n in ops)} recomputed "
                f"({_kib(totals[RECOMPUTED])}), "
                f"{sum(n.status == EVICTED for n in ops)} evicted "
                f"({_kib(totals[EVICTED])}), "
                f"{sum(n.status == FREED for n in ops)} freed after forward "
                f"({_kib(totals[FREED])})",
                f"backward recomputed {_kib(self.recomputed_bytes)}",
                *(
                    []
                    if self.recompute_fraction is None
                    else [
                        f"the plan recomputes {100 * self.recompute_fraction:.1f}% of the "
                        "step's FLOPs (counted from the ops' shapes, not timed)"
                    ]
                ),
            ]
        )


def _kib(count: int) -> str:
    return f"{count / 1024:.1f} KiB"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot_node(node: GraphNode) -> str:
    shape = "" if node.shape is None else "[" + ", ".join(map(str, node.shape)) + "]"
    kind_text = {"compute": "compute-bound", "memory": "memory-bound"}.get(node.kind, node.kind)
    status = "" if node.status == PARAMETER else node.status
    where = ""
    if node.recomputed_at is not None:
        step, op = node.recomputed_at
        where = f"recomputed at backward step {step} ({op})"
    label = "\\n".join(filter(None, [_escape(node.label), shape, status, where]))
    style, border = BORDER[node.status]
    attributes = {
        "label": label,
        "fillcolor": FILL[node.kind],
        "style": f"filled,{style}" + (",rounded" if node.kind != "constant" else ""),
        "color": border,
        "class": " ".join(filter(None, [kind_text, status, "loss" if node.is_loss else ""])),
        "tooltip": f"{node.label} {shape}: {kind_text}, {node.status}",
    }
    if node.kind == "constant":
        attributes["shape"] = "ellipse"
    if node.is_loss:
        attributes["peripheries"] = "2"
    body = ", ".join(f'{key}="{value}"' for key, value in attributes.items())
    return f"n{node.index} [{body}];"


def _legend() -> list[str]:
    entries = [
        ("compute", SAVED, "compute-bound op\\nsaved"),
        ("memory", RECOMPUTED, "memory-bound op\\nrecomputed"),
        ("memory", FREED, "memory-bound op\\nfreed after forward"),
        ("memory", EVICTED, "evicted under\\nthe budget"),
        ("parameter", PARAMETER, "parameter"),
    ]
    lines = ["  subgraph cluster_legend {", '    label="legend"; fontsize=10; color="#bbbbbb";']
    for number, (kind, status, text) in enumerate(entries):
        style, border = BORDER[status]
        attributes = (
            f'label="{text}", fillcolor="{FILL[kind]}", '
            f'style="filled,rounded,{style}", color="{border}", class="legend"'
        )
        lines.append(f"    legend{number} [{attributes}];")
    lines.append("  }")
    return lines


def trace_step(
    model: str = "cnn",
    image_shape: tuple[int, int, int] = (1, 8, 8),
    batch_size: int = 4,
    checkpointing: str = "balanced",
    seed: int = 0,
    classes: int = 10,
) -> StepGraph:
    """Record one training step (forward and loss of ``model`` on a batch of random images)
    and return its graph with the checkpointing plan of ``checkpointing``
    (``"none"``, ``"balanced"`` or ``"budget:SIZE"``); the step's backward is then run, to
    report the bytes it actually recomputed. Under a budget the step drawn follows the plan
    made from the loop's first steps: what it evicts is the plan's."""
    from .trainer import make_strategy

    strategy = make_strategy(checkpointing)
    backend = RecordingAutodiff(rg.NumpyBackend(), strategy)
    rng = np.random.default_rng(seed)
    with rg.use_backend(backend):
        rg.seed(seed)
        network = build_model(model, image_shape, classes)
        names = {p.primitive.node.id: name for name, p in network.named_parameters()}
        images = rg.tensor(rng.random((batch_size, *image_shape), dtype=np.float32))
        labels = rg.tensor(rng.integers(0, classes, batch_size), dtype="int64")
        if isinstance(strategy, rg.BudgetCheckpointing):
            # the eager step the plan comes from (under the plans' floor, the planner's trials
            # too), until a step has followed the plan
            for _ in range(4):
                F.cross_entropy(network(images), labels).backward()
                if strategy.planned_steps:
                    break
        loss = F.cross_entropy(network(images), labels)
    graph = _graph_of(step_plan(backend, loss.primitive), names)
    graph.strategy = type(strategy).__name__
    graph.description = (
        f"one training step: {model}, batch {batch_size}x{'x'.join(map(str, image_shape))}, "
        f"{graph.strategy}"
    )
    graph.recomputed_bytes = loss.backward().recomputed_bytes
    graph.recompute_fraction = getattr(strategy, "recompute_fraction", None)
    return graph


def _graph_of(plan: StepPlan, names: dict[int, str]) -> StepGraph:
    """The drawing of the engine's ``plan``: one node per planned value, parameters named."""
    index = {value.key: i for i, value in enumerate(plan)}
    nodes: list[GraphNode] = []
    for value in plan:
        if value.kind == "leaf":
            label, kind, status = names.get(value.key, "leaf"), "parameter", PARAMETER
        elif value.kind == "constant":
            label, kind, status = "constant", "constant", value.status
        else:
            label, kind, status = value.op, value.kind, value.status
        # a node's edges: from its tracked inputs, then from the constants its rules read
        parents = [index[key] for key in (*value.parents, *value.constants)]
        nodes.append(
            GraphNode(
                index[value.key],
                label,
                kind,
                value.shape,
                status,
                parents,
                value.nbytes or 0,
                value.key == plan.root,
                value.recomputed_at,
            )
        )
    return StepGraph(nodes, "", "")


def render_svg(dot_path: Path, svg_path: Path) -> bool:
    """Run Graphviz's ``dot`` to draw ``dot_path`` as SVG; ``False`` when ``dot`` is not
    installed. A failing ``dot`` raises ``RuntimeError`` with its message."""
    dot = shutil.which("dot")
    if dot is None:
        return False
    completed = subprocess.run(
        [dot, "-Tsvg", str(dot_path), "-o", str(svg_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"dot failed: {completed.stderr.strip()}")
    return True
