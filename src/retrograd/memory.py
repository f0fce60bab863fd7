"""Activation memory of one training step, measured with ``tracemalloc``.

The figure: the peak of memory allocated during one forward and backward, minus the parameter
gradients alive at that moment. Parameters and the input batch exist before tracing starts,
so they do not count; parameter gradients are the step's result (the same under every
checkpointing strategy), so they are taken out. What remains is what the step keeps for
backward (saved and recomputed intermediates, graph nodes) and its transient temporaries.

The peak is sampled exactly: a backward hook reads and resets tracemalloc's peak at every
gradient registration, so nothing between two registrations escapes it (the method of
``benchmarks/bench_checkpointing.py``).
"""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .autodiff import runtime

__all__ = ["StepMemory", "measure_step_memory"]


@dataclass(frozen=True)
class StepMemory:
    """What :func:`measure_step_memory` found, in bytes."""

    #: the activation peak (see the module docstring)
    peak_activation_bytes: int
    #: memory still allocated after forward, before backward (what forward kept)
    after_forward_bytes: int
    #: bytes of outputs the checkpointer recomputed during the backward
    recomputed_bytes: int


class _ActivationPeak:
    """A backward hook: traced peak minus live parameter gradients, between registrations."""

    def __init__(self, parameter_ids: set[int]):
        self.parameter_ids = parameter_ids
        self.thread = threading.get_ident()
        self.peak = 0
        self.gradient_bytes = 0

    def sample(self) -> None:
        self.peak = max(self.peak, tracemalloc.get_traced_memory()[1] - self.gradient_bytes)
        tracemalloc.reset_peak()

    def begin(self, tape: Any, grads: Any) -> None:
        if threading.get_ident() != self.thread:  # another thread's backward
            return
        self.sample()

        def on_register(node: Any, gradients: Any) -> None:
            if node.id in self.parameter_ids:
                values = gradients.values
                self.gradient_bytes = sum(
                    getattr(values[i], "nbytes", 0) for i in self.parameter_ids if i in values
                )
            self.sample()

        grads.on_register.append(on_register)

    def end(self, grads: Any) -> None:
        if threading.get_ident() == self.thread:
            self.sample()


def measure_step_memory(loss_fn: Callable[[], Any], parameters: Sequence[Any]) -> StepMemory:
    """Run ``loss_fn()`` (forward) and its ``backward()`` under ``tracemalloc``.

    ``parameters`` are the leaves whose gradients are the step's result. Tracing slows the
    step several times over; measure a step apart from the timed ones.

    >>> import retrograd as rg
    >>> w = rg.ones((64, 64)).require_grad()
    >>> x = rg.ones((8, 64))
    >>> measure_step_memory(lambda: (x @ w).tanh().sum(), [w]).peak_activation_bytes > 0
    True
    """
    parameter_ids = {p.primitive.node.id for p in parameters if p.primitive.node is not None}
    probe = _ActivationPeak(parameter_ids)
    was_tracing = tracemalloc.is_tracing()
    runtime.BACKWARD_HOOKS.append(probe)
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        loss = loss_fn()
        after_forward = tracemalloc.get_traced_memory()[0] - start
        probe.sample()
        grads = loss.backward()
        del loss
    finally:
        if not was_tracing:
            tracemalloc.stop()
        runtime.BACKWARD_HOOKS.remove(probe)
    return StepMemory(max(0, probe.peak - start), after_forward, grads.recomputed_bytes)
