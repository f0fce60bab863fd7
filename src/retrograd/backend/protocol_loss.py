"""The kernels of a classifier's loss in the backend protocol: ``log_softmax`` (which every
backend implements), its backward, and the adjoint of ``gather`` (what cross-entropy and NLL
pick from the log-probabilities), the last two fused kernels with defaults composed of the
other primitives.

A language model's head ends in ``log_softmax`` over the vocabulary, the largest tensor of
its step (``[tokens, vocabulary]``). Composed of primitives, the backward of picking the
targets' log-probabilities makes that tensor twice (zeros, then a copy with the gradient in it)
and log-softmax's backward three times; the kernels make it once each.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LossProtocol"]


class LossProtocol:
    """``log_softmax``, its backward and ``gather``'s (a mixin of
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

    def gather_backward(self, grad: Any, indices: Any, dim: int, shape: tuple[int, ...]) -> Any:
        """The adjoint of ``gather(x, indices, dim)`` for an ``x`` of ``shape``: zeros of
        ``shape`` (``grad``'s dtype) with ``grad`` added at ``indices`` along ``dim``. This
        default scatters into zeros it makes; a kernel makes one array, not two."""
        zeros = self.zeros(shape, self.dtype(grad), self.device(grad))
        return self.scatter_add(zeros, indices, grad, dim)

    def ctc_loss(
        self,
        x: Any,
        targets: Any,
        blank: int,
        in_lengths: tuple[int, ...],
        out_lengths: tuple[int, ...],
    ) -> Any:
        """torch's ``ctc_loss`` before its reduction (the op table's, float32/float64):
        ``[N]``, each sequence's negative log-likelihood for log-probabilities ``x``
        ``[T, N, C]`` and padded ``targets`` ``[N, S]`` (int64), about ``1e30`` where no
        alignment exists. This default composes primitives (backend/protocol_ctc.py)."""
        from .protocol_ctc import ctc_loss

        return ctc_loss(self, x, targets, blank, in_lengths, out_lengths)

    def ctc_loss_backward(
        self,
        grad: Any,
        x: Any,
        targets: Any,
        nll: Any,
        blank: int,
        in_lengths: tuple[int, ...],
        out_lengths: tuple[int, ...],
    ) -> Any:
        """The gradient of :meth:`ctc_loss` in ``x`` from ``x``, the targets and the losses
        ``nll``: the exact one in the log-probabilities (torch's kernel adds ``exp(x)`` times
        the gradient, which the ``log_softmax`` before it removes). This default composes
        primitives, the alphas recomputed beside the betas."""
        from .protocol_ctc import ctc_loss_backward

        return ctc_loss_backward(self, grad, x, targets, nll, blank, in_lengths, out_lengths)
