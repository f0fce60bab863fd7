"""What every script run under ``torchrun`` by ``tests/test_distributed_torch.py`` shares: the
inner backend the suite runs on, and where each rank writes its report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
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


@contextlib.contextmanager
def sigterm_held() -> Iterator[None]:
    """Hold torchrun's SIGTERM until the block ends: when one rank fails, torchrun stops the
    others, and a survivor stopped between catching its error and writing its report would
    leave the test nothing (or, mid-write, an empty file) to read. It ends right after."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def all_ranks_started(out: Path, limit: float = 60.0) -> None:
    """Wait (at most ``limit`` seconds) until every rank has got here, each marked by a file in
    ``out``. A script that tests a fault timeout of a few seconds starts its ranks together with
    it: on a loaded machine one rank's start-up (importing torch) lagged the other's by more
    than the 2 s a context's creation may take, and the test saw that instead of its fault."""
    import time

    import torch.distributed  # noqa: F401 - its import is most of a rank's start-up

    out.mkdir(parents=True, exist_ok=True)
    (out / f".started{rank()}").touch()
    world = int(os.environ["WORLD_SIZE"])
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if all((out / f".started{r}").exists() for r in range(world)):
            return
        time.sleep(0.01)


def write_report(out: Path, report: dict) -> None:
    """``OUT/rank{r}.json``, whole or not at all (written aside, then renamed)."""
    with sigterm_held():
        out.mkdir(parents=True, exist_ok=True)
        partial = out / f".rank{rank()}.json.partial"
        partial.write_text(json.dumps(report))
        os.replace(partial, out / f"rank{rank()}.json")
