"""The log-softmax part of the backend protocol: the forward every backend implements and
its backward, a fused kernel with a default composed of the other primitives.

A language model's head ends in ``log_softmax`` over the vocabulary, the largest tensor of
its step (``[tokens, vocabulary]``); its backward, ``grad - exp(out) * sum(grad)``, composed of
primitives makes three such arrays, where a kernel makes one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SoftmaxProtocol"]


class SoftmaxProtocol:
    """``log_softmax`` and its backward (a mixin of
    :class:`~retrograd.backend.protocol.Backend`)."""

    def log_softmax(self, x: Any, dim: int) -> Any:
        """``x - log(sum(exp(x)))`` along ``dim``, shifted by the maximum for stability."""
        raise NotImplementedError

    def log_softmax_backward(self, grad: Any, out: Any, dim: int) -> Any:
        """``grad - exp(out) * sum(grad, dim)``: the gradient of ``sum(grad *
        log_softmax(x, dim))`` in ``x``, from ``out = log_softmax(x, dim)``. This default
        composes primitives; on the autodiff backend it is recorded, so it differentiates
        again."""
        return self.sub(grad, self.mul(self.exp(out), self.sum_dim(grad, (dim,))))
