"""NumPy kernels of the recurrent primitives (:mod:`.protocol_rnn`): the algorithms of
:mod:`.rnn_kernels` on NumPy arrays, each step's products one BLAS call."""

from __future__ import annotations

import numpy as np

from . import rnn_kernels

__all__ = ["NumpyArrays", "NumpyRecurrentKernels"]


class NumpyArrays:
    """The array operations :mod:`.rnn_kernels` is written against, on NumPy."""

    add = staticmethod(np.add)
    negative = staticmethod(np.negative)
    multiply = staticmethod(np.multiply)
    subtract = staticmethod(np.subtract)
    matmul = staticmethod(np.matmul)
    tanh = staticmethod(np.tanh)
    copy = staticmethod(np.copyto)

    @staticmethod
    def empty(shape, like):
        return np.empty(shape, like.dtype)

    @staticmethod
    def one_minus(a, out):
        return np.subtract(1.0, a, out=out)

    @staticmethod
    def sigmoid(a, out):
        """``1 / (1 + exp(-a))``; ``exp`` overflows to ``inf`` for ``a < -88`` (float32),
        which gives the right limit, 0 (the kernels run it in :meth:`quiet`)."""
        np.negative(a, out=out)
        np.exp(out, out=out)
        np.add(out, 1.0, out=out)
        return np.reciprocal(out, out=out)

    @staticmethod
    def sigmoid_of_negated(z, out):
        """``1 / (1 + exp(z))``: the sigmoid of ``-z``, one pass fewer than :meth:`sigmoid`."""
        np.exp(z, out=out)
        np.add(out, 1.0, out=out)
        return np.reciprocal(out, out=out)

    @staticmethod
    def quiet():
        """No warning for the overflow of ``exp`` in :meth:`sigmoid`."""
        return np.errstate(over="ignore")

    @staticmethod
    def relu(a, out):
        return np.maximum(a, 0.0, out=out)

    @staticmethod
    def positive_mask(a, out):
        """``1.0`` where ``a > 0``, else ``0.0``."""
        np.copyto(out, a > 0)
        return out

    @staticmethod
    def row_sum(a):
        """The sum of each row of a matrix, as a matrix-vector product (BLAS)."""
        return np.matmul(a, np.ones(a.shape[1], a.dtype))


class NumpyRecurrentKernels(rnn_kernels.RecurrentKernels):
    """The recurrent primitives of :class:`~retrograd.backend.NumpyBackend`."""

    arrays = NumpyArrays
