"""The backend protocol's neural-network kernels: convolution, batch normalization, pooling and
interpolation, a part of :class:`~retrograd.backend.protocol.Backend` kept in a file of its own.

Each is one library call on a GPU backend (torch: ``convolution`` for conv and
conv_transpose, ``convolution_backward`` for their joint backward and, with only the weight,
for conv_weight_grad, ``native_batch_norm`` and its backward, ``avg_pool*d`` and
``avg_pool*d_backward``, ``max_pool*d_with_indices`` and a ``scatter_add`` for its backward,
``adaptive_avg_pool*d`` and its backward, ``upsample_*`` and their backwards). Layout is
``[N, C, *spatial]`` with 1 to 3 spatial dimensions; ``stride``, ``padding``, ``dilation``,
``kernel_size``... are tuples with one int per spatial dimension, already validated;
``padding`` is symmetric zero padding. Each forward and its backward are adjoint linear maps
(in each argument), so the autodiff ops differentiate them with one another, to any order.
``bias`` is ``[C_out]``, or an empty ``[0]`` primitive for none (a primitive either way, so
that the autodiff backend can track it).

The joint backward kernels (``conv_backward``, ``conv_transpose_backward``,
``batch_norm_backward``), ``batch_norm`` and ``batch_norm_update`` have defaults here composed
of the other primitives, as the fused transformer kernels do: correct on every backend and,
run on the autodiff backend (``backward(create_graph=True)``), recorded, so that they
differentiate again. A backend overrides them with its fused kernels.
"""

from __future__ import annotations

import math
from typing import Any

from .sizes import conv_output_size, conv_transpose_output_padding

__all__ = ["NNProtocol"]


class NNProtocol:
    """The neural-network methods of the backend protocol (a base of
    :class:`~retrograd.backend.protocol.Backend`, which documents the conventions)."""

    # -- convolution ------------------------------------------------------------------------------
    def conv(
        self,
        x: Any,
        weight: Any,
        bias: Any,
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        dilation: tuple[int, ...],
        groups: int,
    ) -> Any:
        """Cross-correlation plus ``bias`` per output channel, PyTorch's ``conv*d``.

        ``x`` is ``[N, C_in, *size]``, ``weight`` ``[C_out, C_in / groups, *kernel]``; output
        length ``(size + 2*padding - dilation*(kernel-1) - 1) // stride + 1`` per dimension.
        """
        raise NotImplementedError

    def conv_transpose(
        self,
        x: Any,
        weight: Any,
        bias: Any,
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        output_padding: tuple[int, ...],
        dilation: tuple[int, ...],
        groups: int,
    ) -> Any:
        """Transposed convolution plus ``bias``, PyTorch's ``conv_transpose*d``; without bias,
        the adjoint of ``conv(., weight, ...)`` with respect to its input.

        ``x`` is ``[N, C_in, *size]``, ``weight`` ``[C_in, C_out / groups, *kernel]``; output
        length ``(size-1)*stride - 2*padding + dilation*(kernel-1) + output_padding + 1``.
        ``output_padding`` may exceed ``stride`` (as Burn allows): the extra trailing cells,
        which no input reaches, hold just the bias (torch refuses an ``output_padding`` of
        ``max(stride, dilation)`` or more: a torch backend computes the reachable part and
        pads it).
        """
        raise NotImplementedError

    def conv_weight_grad(
        self,
        x: Any,
        out_grad: Any,
        kernel_size: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        dilation: tuple[int, ...],
        groups: int,
    ) -> Any:
        """The gradient of ``sum(out_grad * conv(x, weight, ...))`` with respect to
        ``weight``: ``[C_out, C_in / groups, *kernel_size]``, ``C_out`` = ``out_grad``'s
        channels. ``out_grad``'s spatial size is ``conv``'s output size for ``x``."""
        raise NotImplementedError

    def conv_backward(
        self,
        grad: Any,
        x: Any,
        weight: Any,
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        dilation: tuple[int, ...],
        groups: int,
        needs: tuple[bool, bool, bool],
    ) -> tuple[Any, Any, Any]:
        """The gradients of ``sum(grad * conv(x, weight, bias, ...))``: ``(dx, dweight,
        dbias)``, each ``None`` unless ``needs`` asks for it, PyTorch's
        ``convolution_backward``. This default computes each from its adjoint: a transposed
        convolution of ``grad`` for ``dx``, :meth:`conv_weight_grad` for ``dweight``, the
        channel sum of ``grad`` for ``dbias``."""
        dx = dweight = dbias = None
        if needs[0]:
            x_size = self.shape(x)[2:]
            kernel = self.shape(weight)[2:]
            output_padding = conv_transpose_output_padding(
                x_size, self.shape(grad)[2:], kernel, stride, padding, dilation
            )
            dx = self.conv_transpose(
                grad,
                weight,
                _no_bias(self, grad),
                stride,
                padding,
                output_padding,
                dilation,
                groups,
            )
        if needs[1]:
            kernel = self.shape(weight)[2:]
            dweight = self.conv_weight_grad(x, grad, kernel, stride, padding, dilation, groups)
        if needs[2]:
            dbias = _channel_sum(self, grad)
        return dx, dweight, dbias

    def conv_transpose_backward(
        self,
        grad: Any,
        x: Any,
        weight: Any,
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        output_padding: tuple[int, ...],
        dilation: tuple[int, ...],
        groups: int,
        needs: tuple[bool, bool, bool],
    ) -> tuple[Any, Any, Any]:
        """The gradients of ``sum(grad * conv_transpose(x, weight, bias, ...))``: ``(dx,
        dweight, dbias)``, each ``None`` unless ``needs`` asks for it. This default: a
        convolution of ``grad`` for ``dx`` (``conv_transpose`` is the adjoint of ``conv``),
        for ``dweight`` the weight gradient of that convolution with ``x`` as its output
        gradient, the channel sum of ``grad`` for ``dbias``."""
        kernel = self.shape(weight)[2:]
        x_size = self.shape(x)[2:]
        # an output_padding of stride or more (as Burn allows) leaves trailing cells no input
        # reaches: the convolution mapping grad back has outputs past x's end
        extra = tuple(
            conv_output_size(n, k, s, p, d) - m
            for n, m, k, s, p, d in zip(
                self.shape(grad)[2:], x_size, kernel, stride, padding, dilation
            )
        )
        dx = dweight = dbias = None
        if needs[0]:
            dx = self.conv(grad, weight, _no_bias(self, grad), stride, padding, dilation, groups)
            if any(extra):  # those outputs read only the unreachable cells
                dx = self.slice(dx, (slice(None), slice(None), *(slice(0, n) for n in x_size)))
        if needs[1]:
            # <g, conv_t(x, w)> = <conv(g, w), x>: the weight gradient of a convolution of grad
            # whose output gradient is x, zeros for its outputs past x's end
            for axis, count in enumerate(extra, start=2):
                if count:
                    shape = list(self.shape(x))
                    shape[axis] = count
                    zeros = self.zeros(tuple(shape), self.dtype(x), self.device(x))
                    x = self.cat([x, zeros], axis)
            dweight = self.conv_weight_grad(grad, x, kernel, stride, padding, dilation, groups)
        if needs[2]:
            dbias = _channel_sum(self, grad)
        return dx, dweight, dbias

    # -- batch normalization ----------------------------------------------------------------------
    def batch_norm(self, x: Any, weight: Any, bias: Any, eps: float) -> tuple[Any, Any]:
        """Batch normalization with the batch's statistics (training mode): ``x`` ``[N, C,
        *spatial]`` normalized per channel over the batch and spatial dims (biased variance),
        then ``* weight + bias`` (both ``[C]``, or empty): ``(out, stats)``, ``stats`` =
        ``[2, C]`` holding each channel's mean and ``1 / sqrt(var + eps)``, what
        :meth:`batch_norm_backward` reads (PyTorch's ``save_mean`` and ``save_invstd``)."""
        mean, centered, rstd = _batch_statistics(self, x, eps)
        out = self.mul(centered, rstd)
        channels = self.shape(x)[1]
        column = (1, channels) + (1,) * (len(self.shape(x)) - 2)
        if self.shape(weight)[0]:
            out = self.mul(out, self.reshape(weight, column))
        if self.shape(bias)[0]:
            out = self.add(out, self.reshape(bias, column))
        stats = self.cat([self.reshape(mean, (1, channels)), self.reshape(rstd, (1, channels))], 0)
        return out, stats

    def batch_norm_backward(
        self, grad: Any, x: Any, weight: Any, stats: Any, eps: float
    ) -> tuple[Any, Any, Any]:
        """The gradients of ``sum(grad * batch_norm(x, weight, bias, eps)[0])``: ``(dx,
        dweight, dbias)`` (``dweight``/``dbias`` ``[C]``, meaningless for an empty weight).
        ``stats`` is what :meth:`batch_norm` returned; this default recomputes it from ``x``
        instead, so that, recorded, it is differentiable in ``x``."""
        shape = self.shape(x)
        channels = shape[1]
        dims = (0, *range(2, len(shape)))
        column = (1, channels) + (1,) * (len(shape) - 2)
        _, centered, rstd = _batch_statistics(self, x, eps)
        normalized = self.mul(centered, rstd)
        dbias = self.reshape(self.sum_dim(grad, dims), (channels,))
        dweight = self.reshape(self.sum_dim(self.mul(grad, normalized), dims), (channels,))
        scaled = self.mul(grad, self.reshape(weight, column)) if self.shape(weight)[0] else grad
        projection = self.mean_dim(self.mul(scaled, normalized), dims)
        dx = self.sub(
            self.sub(scaled, self.mean_dim(scaled, dims)), self.mul(normalized, projection)
        )
        return self.mul(dx, rstd), dweight, dbias

    # -- group normalization ----------------------------------------------------------------------
    def group_norm(
        self, x: Any, weight: Any, bias: Any, groups: int, eps: float
    ) -> tuple[Any, Any]:
        """Group normalization: ``x`` ``[N, C, *spatial]`` normalized over each of ``groups``
        groups of channels with the spatial dims (biased variance), then ``* weight + bias``
        (both ``[C]``, or empty): ``(out, stats)``, ``stats`` = ``[2, N, groups]`` holding each
        group's mean and ``1 / sqrt(var + eps)`` (torch's ``native_group_norm``'s). This
        default composes primitives, the arithmetic of ``nn.functional.group_norm``'s
        composite."""
        shape = self.shape(x)
        mean, centered, rstd = _group_statistics(self, x, groups, eps)
        out = self.reshape(self.mul(centered, rstd), shape)
        column = (1, shape[1]) + (1,) * (len(shape) - 2)
        if self.shape(weight)[0]:
            out = self.mul(out, self.reshape(weight, column))
        if self.shape(bias)[0]:
            out = self.add(out, self.reshape(bias, column))
        lead = (1, shape[0], groups)
        return out, self.cat([self.reshape(mean, lead), self.reshape(rstd, lead)], 0)

    def group_norm_backward(
        self, grad: Any, x: Any, weight: Any, stats: Any, groups: int, eps: float
    ) -> tuple[Any, Any, Any]:
        """The gradients of ``sum(grad * group_norm(x, weight, bias, groups, eps)[0])``:
        ``(dx, dweight, dbias)`` (``dweight``/``dbias`` ``[C]``, meaningless for an empty
        weight), as torch's ``native_group_norm_backward``. ``stats`` is what
        :meth:`group_norm` returned; this default recomputes it from ``x`` instead, so that,
        recorded, it is differentiable in ``x``."""
        shape = self.shape(x)
        channels = shape[1]
        dims = (0, *range(2, len(shape)))
        column = (1, channels) + (1,) * (len(shape) - 2)
        _, centered, rstd = _group_statistics(self, x, groups, eps)
        grouped = self.shape(centered)
        normalized = self.mul(centered, rstd)
        flat = self.reshape(normalized, shape)
        dbias = self.reshape(self.sum_dim(grad, dims), (channels,))
        dweight = self.reshape(self.sum_dim(self.mul(grad, flat), dims), (channels,))
        scaled = self.mul(grad, self.reshape(weight, column)) if self.shape(weight)[0] else grad
        scaled = self.reshape(scaled, grouped)
        projection = self.mean_dim(self.mul(scaled, normalized), (2,))
        dx = self.sub(
            self.sub(scaled, self.mean_dim(scaled, (2,))), self.mul(normalized, projection)
        )
        return self.reshape(self.mul(dx, rstd), shape), dweight, dbias

    def batch_norm_update(
        self,
        running_mean: Any,
        running_var: Any,
        stats: Any,
        momentum: float,
        eps: float,
        count: int,
    ) -> tuple[Any, Any]:
        """The running statistics after a training step: ``(1 - momentum) * running +
        momentum * batch``, each ``[C]``, the batch's variance unbiased (``* count / (count -
        1)``, ``count`` values per channel), as PyTorch's ``native_batch_norm`` updates them.
        ``stats`` is what :meth:`batch_norm` returned: the variance is recovered from its ``1 /
        sqrt(var + eps)``."""
        channels = self.shape(running_mean)[0]
        mean = self.reshape(self.slice(stats, (slice(0, 1),)), (channels,))
        rstd = self.reshape(self.slice(stats, (slice(1, 2),)), (channels,))
        variance = self.sub_scalar(self.recip(self.square(rstd)), eps)
        variance = self.mul_scalar(variance, count / (count - 1))
        return tuple(
            self.add(self.mul_scalar(old, 1.0 - momentum), self.mul_scalar(new, momentum))
            for old, new in ((running_mean, mean), (running_var, variance))
        )

    # -- pooling ----------------------------------------------------------------------------------
    def avg_pool(
        self,
        x: Any,
        kernel_size: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        ceil_mode: bool,
        count_include_pad: bool,
        divisor_override: int | None = None,
    ) -> Any:
        """Average pooling, PyTorch's ``avg_pool*d`` (its output size and divisor rules).

        Each window's sum is divided by ``divisor_override`` when it is an int (nonzero,
        validated), else by the number of cells the window covers: padding cells included
        with ``count_include_pad``, the cells past the input that ``ceil_mode`` adds never.
        The backend computes these divisors itself, as torch's ``avg_pool*d``, which take the
        same arguments, do.
        """
        raise NotImplementedError

    def avg_pool_backward(
        self,
        grad: Any,
        input_size: tuple[int, ...],
        kernel_size: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        ceil_mode: bool,
        count_include_pad: bool,
        divisor_override: int | None = None,
    ) -> Any:
        """The adjoint of :meth:`avg_pool` for an input of spatial ``input_size``: ``grad``
        divided by the same divisors, spread over each window's cells."""
        raise NotImplementedError

    def max_pool(
        self,
        x: Any,
        kernel_size: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        dilation: tuple[int, ...],
        ceil_mode: bool,
    ) -> tuple[Any, Any]:
        """Max pooling, PyTorch's ``max_pool*d_with_indices``: ``(values, indices)``, the
        int64 indices flat over the input's spatial dimensions; ties go to the first cell in
        row-major order, NaN propagates."""
        raise NotImplementedError

    def max_pool_backward(
        self,
        grad: Any,
        indices: Any,
        input_size: tuple[int, ...],
        kernel_size: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[int, ...],
        dilation: tuple[int, ...],
        ceil_mode: bool,
    ) -> Any:
        """Sums ``grad`` into zeros of spatial ``input_size`` at the flat ``indices`` of
        :meth:`max_pool` (per batch element and channel). The indices alone define the
        result; the window arguments (those :meth:`max_pool` made ``indices`` with) are for
        a backend whose own pooling backward kernel takes them (torch's)."""
        raise NotImplementedError

    def adaptive_avg_pool(self, x: Any, output_size: tuple[int, ...]) -> Any:
        """PyTorch's ``adaptive_avg_pool*d``: window ``i`` of an axis of length ``L`` averages
        ``[floor(i*L/out), ceil((i+1)*L/out))``."""
        raise NotImplementedError

    def adaptive_avg_pool_backward(self, grad: Any, input_size: tuple[int, ...]) -> Any:
        """The adjoint of :meth:`adaptive_avg_pool` for an input of spatial ``input_size``."""
        raise NotImplementedError

    def interpolate(
        self,
        x: Any,
        output_size: tuple[int, ...],
        mode: str,
        align_corners: bool,
        scales: tuple[float | None, ...],
    ) -> Any:
        """Resampling with PyTorch's ``upsample_*`` conventions, separable per axis.

        ``mode`` is ``"nearest"`` (PyTorch's legacy floor rule), ``"linear"`` (bilinear and
        trilinear are linear along each axis) or ``"bicubic"`` (A = -0.75, clamped taps).
        ``scales[i]``, when not ``None``, is the user's scale factor, which PyTorch uses
        (as ``1 / scale``) to map output to input coordinates instead of ``in / out``.
        """
        raise NotImplementedError

    def interpolate_backward(
        self,
        grad: Any,
        input_size: tuple[int, ...],
        mode: str,
        align_corners: bool,
        scales: tuple[float | None, ...],
    ) -> Any:
        """The adjoint of :meth:`interpolate` for an input of spatial ``input_size``."""
        raise NotImplementedError


def _no_bias(backend: Any, like: Any) -> Any:
    """The empty bias primitive that tells ``conv``/``conv_transpose`` to add none."""
    return backend.zeros((0,), backend.dtype(like), backend.device(like))


def _channel_sum(backend: Any, g: Any) -> Any:
    """The gradient of a per-channel bias: ``g`` summed over batch and spatial dims."""
    dims = (0, *range(2, len(backend.shape(g))))
    return backend.reshape(backend.sum_dim(g, dims), (backend.shape(g)[1],))


def _group_statistics(backend: Any, x: Any, groups: int, eps: float) -> tuple[Any, Any, Any]:
    """``x`` ``[N, C, *]`` as ``[N, groups, C / groups * prod(*)]``: each group's mean, the
    values less it, and ``1 / sqrt(var + eps)`` (biased variance)."""
    shape = backend.shape(x)
    per_group = shape[1] // groups * math.prod(shape[2:])
    grouped = backend.reshape(x, (shape[0], groups, per_group))
    mean = backend.mean_dim(grouped, (2,))
    centered = backend.sub(grouped, mean)
    variance = backend.mean_dim(backend.square(centered), (2,))
    return mean, centered, backend.recip(backend.sqrt(backend.add_scalar(variance, eps)))


def _batch_statistics(backend: Any, x: Any, eps: float) -> tuple[Any, Any, Any]:
    """``(mean, x - mean, 1 / sqrt(var + eps))`` per channel of ``x`` ``[N, C, *]``, the
    statistics kept with size-1 dims: what batch norm's defaults share."""
    dims = (0, *range(2, len(backend.shape(x))))
    mean = backend.mean_dim(x, dims)
    centered = backend.sub(x, mean)
    variance = backend.mean_dim(backend.square(centered), dims)
    rstd = backend.recip(backend.sqrt(backend.add_scalar(variance, eps)))
    return mean, centered, rstd
