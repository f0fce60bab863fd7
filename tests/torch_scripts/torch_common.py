"""What every script run under ``torchrun`` by ``tests/test_distributed_torch.py`` shares: the
inner backend the suite runs on, and where each rank writes its report."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for distributed_cases

import retrograd as rg


def use_suite_backend() -> None:
    """The inner backend the suite runs on (``RETROGRAD_INNER=torch``: the torch backend, when
    this retrograd has one), so these scripts test the engine on both kinds of primitives."""
    if os.environ.get("RETROGRAD_INNER") == "torch" and hasattr(rg, "TorchBackend"):
        rg.set_default_backend(rg.Autodiff(rg.TorchBackend("cpu")))


def rank() -> int:
    return int(os.environ["RANK"])


def write_report(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank()}.json").write_text(json.dumps(report))
