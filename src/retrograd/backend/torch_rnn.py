"""torch kernels of the recurrent primitives (:mod:`.protocol_rnn`): the algorithms of
:mod:`.rnn_kernels` on torch tensors (CPU or CUDA). torch's autograd is not involved: every
tensor here is made without ``requires_grad``.
"""

from __future__ import annotations

import contextlib

import torch

from . import rnn_kernels

__all__ = ["TorchArrays", "TorchRecurrentKernels"]


class TorchArrays:
    """The array operations :mod:`.rnn_kernels` is written against, on torch."""

    @staticmethod
    def empty(shape, like):
        return torch.empty(shape, dtype=like.dtype, device=like.device)

    @staticmethod
    def matmul(a, b, out=None):
        return torch.matmul(a, b) if out is None else torch.matmul(a, b, out=out)

    @staticmethod
    def add(a, b, out):
        return torch.add(a, b, out=out)

    @staticmethod
    def multiply(a, b, out):
        return torch.mul(a, b, out=out)

    @staticmethod
    def subtract(a, b, out):
        return torch.sub(a, b, out=out)

    @staticmethod
    def one_minus(a, out):
        torch.neg(a, out=out)
        return out.add_(1.0)

    @staticmethod
    def tanh(a, out):
        return torch.tanh(a, out=out)

    @staticmethod
    def sigmoid(a, out):
        return torch.sigmoid(a, out=out)

    @staticmethod
    def sigmoid_of_negated(z, out):
        torch.neg(z, out=out)
        return torch.sigmoid(out, out=out)

    @staticmethod
    def negative(a, out):
        return torch.neg(a, out=out)

    @staticmethod
    def quiet():
        return contextlib.nullcontext()

    @staticmethod
    def relu(a, out):
        return torch.clamp_min(a, 0.0, out=out)

    @staticmethod
    def positive_mask(a, out):
        return out.copy_(a > 0)

    @staticmethod
    def copy(out, a):
        return out.copy_(a)

    @staticmethod
    def row_sum(a):
        return a.sum(1)


class TorchRecurrentKernels(rnn_kernels.RecurrentKernels):
    """The recurrent primitives of :class:`~retrograd.backend.TorchBackend`."""

    arrays = TorchArrays
