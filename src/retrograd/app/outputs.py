"""What a training run shows and leaves behind, for every task of :mod:`.loop`: progress bars,
the summary's shared lines, the output files (``metrics.json``, ``model.npz``, a task's own
text files, ``curves.png``: written together, whole or not at all, into the run's
:class:`~.runfolder.RunFolder`) and the loss curves' common drawing.

>>> format_bytes(512), format_bytes(3 * 1024 ** 2)
('512 B', '3.0 MiB')
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from .. import nn
from ..files import atomic_write
from .runfolder import RunFolder

__all__ = [
    "Report",
    "draw_figure",
    "format_bytes",
    "plot_losses",
    "progress_bar",
    "summary_text",
    "write_outputs",
]

#: files of the run's folder that :func:`write_outputs` writes for every task
METRICS, MODEL, CURVES = "metrics.json", "model.npz", "curves.png"
NO_MATPLOTLIB = (
    'note: matplotlib is not installed, no curves.png (pip install "retrograd[examples]")'
)


@dataclass
class Report:
    """A finished run, as a task reports it: the metrics (``metrics.json``; their
    ``summary`` holds ``train_seconds``, ``total_seconds``, ``peak_activation_bytes`` and
    ``recomputed_bytes``), the summary's task-specific parts and the task's own files."""

    metrics: dict[str, Any]
    #: the summary's first lines (the task's results)
    lines: list[str]
    #: the training speed ("1,234 samples/s")
    throughput: str
    #: what one step's activation peak was measured on
    memory_note: str
    #: what the recomputed bytes add up ("checkpointing balanced, all epochs and workers")
    recompute_note: str
    #: lines after the shared ones (a sample of generated text)
    tail: list[str] = field(default_factory=list)
    #: further text files of the run's folder: name -> text
    texts: dict[str, str] = field(default_factory=dict)
    #: files the run itself wrote in its folder, listed after the model
    kept: list[str] = field(default_factory=list)


def progress_bar(total: int, description: str, enabled: bool | None) -> Any:
    """A tqdm bar when tqdm is installed and enabled (``None``: when stderr is a terminal)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=description, unit="batch", leave=True, dynamic_ncols=True)


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def write_outputs(
    folder: RunFolder | None,
    report: Report,
    model: nn.Module,
    plot: Callable[[dict[str, Any], IO[bytes]], Any],
    say: Callable[..., None],
) -> list[str]:
    """Write the run's files to ``folder`` (nothing when ``None``), all replaced together or
    none; the paths written."""
    if folder is None:
        return []
    out = folder.path
    names = [METRICS, MODEL, *report.kept, *report.texts]
    with folder.files() as staged:
        with staged.open(METRICS, "w") as file:
            file.write(json.dumps(report.metrics, indent=2) + "\n")
        with staged.open(MODEL) as file:
            np.savez(file, **model.state_dict())
        for name, text in report.texts.items():
            with staged.open(name, "w") as file:
                file.write(text)
        try:
            with staged.open(CURVES) as file:
                plot(report.metrics, file)
            names.append(CURVES)
        except ImportError:
            say(NO_MATPLOTLIB)
    return [str(out / name) for name in names]


def summary_text(report: Report, checkpointing: str, world: int, written: Sequence[str]) -> str:
    summary = report.metrics["summary"]
    plan = []
    if "plan_predicted_peak_bytes" in summary:
        plan.append(
            f"  budget plan            predicted peak "
            f"{format_bytes(summary['plan_predicted_peak_bytes'])}, measured "
            f"{format_bytes(summary['plan_measured_peak_bytes'])} (budget "
            f"{format_bytes(summary['budget_bytes'])}; Gradients.peak_bytes of the steps "
            "that followed it)"
        )
        if "plan_recompute_fraction" in summary:
            plan.append(
                f"  budget plan            recomputes "
                f"{100 * summary['plan_recompute_fraction']:.1f}% of a step's FLOPs "
                "(counted from the ops' shapes)"
            )
    lines = [
        "summary",
        *report.lines,
        f"  training time          {summary['train_seconds']:.1f} s "
        f"({report.throughput}, {world} worker(s))",
        f"  peak activation memory {format_bytes(summary['peak_activation_bytes'])} "
        f"({report.memory_note})",
        f"  recomputed in backward {format_bytes(summary['recomputed_bytes'])} "
        f"({report.recompute_note})",
        f"  optimizer state        {format_bytes(summary['optimizer_state_bytes'])} per worker "
        + (
            f"(ZeRO: sharded over {world} workers)"
            if summary.get("optimizer_state_sharded")
            else "(a full copy each)"
        ),
        *plan,
        f"  total time             {summary['total_seconds']:.1f} s",
        *report.tail,
    ]
    if written:
        lines.append("  wrote " + ", ".join(written))
    return "\n".join(lines)


def draw_figure(
    target: str | os.PathLike | IO[bytes], draw: Callable[..., None], **layout: Any
) -> Path | IO[bytes]:
    """A PNG of one matplotlib figure (``plt.subplots(**layout)``) that ``draw(figure, axes)``
    fills, written to ``target``: an open file, or a path (replaced whole)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(**layout)
    try:
        draw(figure, axes)
        figure.tight_layout()
        if hasattr(target, "write"):
            figure.savefig(target, format="png", dpi=100)
            return target
        with atomic_write(target) as file:
            figure.savefig(file, format="png", dpi=100)
        return Path(target)
    finally:
        plt.close(figure)


def plot_losses(
    axes: Any,
    steps: tuple[Sequence[float], Sequence[float]],
    records: tuple[Sequence[float], Sequence[float], Sequence[float]],
    labels: tuple[str, str, str],
) -> None:
    """Every step's loss ``(x, loss)`` thin and light, and the periodic train and held-out
    losses ``(x, train, held_out)`` as marked lines, labelled ``labels`` in that order."""
    axes.plot(*steps, color="#9ecae1", lw=0.8, label=labels[0])
    axes.plot(records[0], records[1], "o-", color="#3182bd", label=labels[1])
    axes.plot(records[0], records[2], "s-", color="#e6550d", label=labels[2])
