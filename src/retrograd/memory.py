"""Activation memory of one training step, measured with ``tracemalloc``.

The figure: the peak of memory allocated during one forward and backward, minus the parameter
gradients alive at that moment. Parameters and the input batch exist before tracing starts,
so they do not count; parameter gradients are the step's result (the same under every
checkpointing strategy), so they are taken out. What remains is what the step keeps for
backward (saved and recomputed intermediates, graph nodes) and its transient temporaries.

The peak is sampled exactly: a backward hook reads and resets tracemalloc's peak at every
gradient registration, so nothing between two registrations escapes it (the method of
``benchmarks/bench_checkpointing.py``).

Where the tensors live in device memory (``TorchBackend("cuda")``), tracemalloc sees nothing:
the backend's allocator counters (``Backend.memory_allocated``: torch's
``memory_allocated``/``max_memory_allocated``, reset with ``reset_peak_memory_stats``) take
its place, read and reset the same way. This module asks the backend, never torch.
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
    #: what counted the bytes: ``"tracemalloc"`` (host memory) or ``"device allocator"``
    #: (``Backend.memory_allocated``: the values live in a device's memory)
    meter: str = "tracemalloc"


class _HostMeter:
    """Host memory, as tracemalloc traces it (NumPy arrays, graph nodes)."""

    def __init__(self) -> None:
        self.was_tracing = tracemalloc.is_tracing()

    def start(self) -> None:
        if not self.was_tracing:
            tracemalloc.start()

    def stop(self) -> None:
        if not self.was_tracing:
            tracemalloc.stop()

    def read(self) -> tuple[int, int]:
        return tracemalloc.get_traced_memory()

    def reset_peak(self) -> None:
        tracemalloc.reset_peak()


class _DeviceMeter:
    """Device memory, as the backend's allocator counts it (torch's on CUDA)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def read(self) -> tuple[int, int]:
        return self.backend.memory_allocated()

    def reset_peak(self) -> None:
        self.backend.reset_peak_memory()


class _ActivationPeak:
    """A backward hook: traced peak minus live parameter gradients, between registrations."""

    def __init__(self, parameter_ids: set[int], meter: Any):
        self.parameter_ids = parameter_ids
        self.meter = meter
        self.thread = threading.get_ident()
        self.peak = 0
        self.gradient_bytes = 0

    def sample(self) -> None:
        self.peak = max(self.peak, self.meter.read()[1] - self.gradient_bytes)
        self.meter.reset_peak()

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
    step several times over; measure a step apart from the timed ones. Measure a step that
    has run before: the first one in a process also allocates what stays for the run
    (compiled kernels, modules imported on first use), which this counts as the step's.

    >>> import retrograd as rg
    >>> w = rg.ones((64, 64)).require_grad()
    >>> x = rg.ones((8, 64))
    >>> measure_step_memory(lambda: (x @ w).tanh().sum(), [w]).peak_activation_bytes > 0
    True
    """
    parameters = list(parameters)
    parameter_ids = {p.primitive.node.id for p in parameters if p.primitive.node is not None}
    backend = parameters[0].backend if parameters else None
    on_device = backend is not None and backend.memory_allocated() is not None
    meter = _DeviceMeter(backend) if on_device else _HostMeter()
    probe = _ActivationPeak(parameter_ids, meter)
    runtime.BACKWARD_HOOKS.append(probe)
    meter.start()
    try:
        meter.reset_peak()
        start = meter.read()[0]
        loss = loss_fn()
        after_forward = meter.read()[0] - start
        probe.sample()
        grads = loss.backward()
        del loss
    finally:
        meter.stop()
        runtime.BACKWARD_HOOKS.remove(probe)
    return StepMemory(
        max(0, probe.peak - start),
        after_forward,
        grads.recomputed_bytes,
        "device allocator" if on_device else "tracemalloc",
    )
