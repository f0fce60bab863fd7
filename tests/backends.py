"""Which inner backend the suite runs on: NumPy, or torch with ``RETROGRAD_INNER=torch``
(``torch:cuda`` on a GPU) or ``pytest --inner torch``, as ``../shared/conformance`` chooses.

Tests build their autodiff backends on :func:`inner_backend` rather than on
``rg.NumpyBackend()``, and the conftest makes ``Autodiff(inner_backend())`` the process
default, so one switch runs every semantics test on either backend.
"""

from __future__ import annotations

import os

import retrograd as rg

#: ``"numpy"``, ``"torch"`` or ``"torch:<device>"``; set from the environment, or by the
#: conftest from ``--inner``.
INNER = os.environ.get("RETROGRAD_INNER", "numpy")


#: The checkpointing strategy of the default backend: ``none`` (the default), ``balanced`` or
#: ``budget:BYTES``, from ``RETROGRAD_CHECKPOINTING``: the real-program ports run under a budget
#: in CI (.ci/run), so that a budget holds in loops nobody wrote for it.
CHECKPOINTING = os.environ.get("RETROGRAD_CHECKPOINTING", "none")


def checkpointing() -> rg.CheckpointStrategy:
    """A fresh instance of the chosen strategy."""
    kind, _, size = CHECKPOINTING.partition(":")
    if kind == "none":
        return rg.NoCheckpointing()
    if kind == "balanced":
        return rg.BalancedCheckpointing()
    if kind == "budget" and size:
        return rg.BudgetCheckpointing(size)
    raise ValueError(
        f"RETROGRAD_CHECKPOINTING: none, balanced or budget:BYTES, not {CHECKPOINTING!r}"
    )


def select(choice: str) -> None:
    global INNER
    INNER = choice


def on_torch() -> bool:
    return INNER.startswith("torch")


def inner_backend() -> rg.Backend:
    """A fresh instance of the chosen inner backend."""
    if on_torch():
        return rg.TorchBackend(INNER.partition(":")[2] or "cpu")
    return rg.NumpyBackend()
