"""torch kernels of the neural-network primitives, one aten call each (cuDNN on a GPU).

Every kernel follows the protocol's conventions (:class:`~retrograd.backend.protocol.Backend`),
which are PyTorch's: ``[N, C, *spatial]`` with 1 to 3 spatial dimensions. torch lacks a few
variants, which are made from the others:

- 1-d pooling and adaptive pooling run the 2-d kernels on ``[N, C, 1, L]`` (``avg_pool1d``
  takes no ``divisor_override``; the 2-d kernel gives the same windows and indices);
- a transposed convolution whose ``output_padding`` torch refuses (``>= max(stride,
  dilation)``, which Burn allows) is computed without padding and cropping, then padded with
  the cells no input reaches, which hold just the bias;
- backward kernels that take the forward's input only for its sizes get one element
  expanded to that size.
"""

from __future__ import annotations

import torch

from .numpy_nn import COMPILED_POOL_MIN_SIZE
from .sizes import conv_transpose_output_size, pool_output_size

__all__ = ["TorchNNKernels"]

aten = torch.ops.aten


def _optional(value: torch.Tensor) -> torch.Tensor | None:
    """A bias or weight, ``None`` for the protocol's empty ``[0]`` tensor that means none."""
    return value if value.numel() else None


def _proxy(reference: torch.Tensor, n: int, c: int, spatial) -> torch.Tensor:
    """An input of ``[n, c, *spatial]`` for a backward kernel that reads only its sizes: one
    element expanded, so that no input-sized buffer is allocated (an allocation that large
    can move the heap's top, and the gradient the kernel allocates next lands on fresh pages)."""
    return reference.new_empty(()).expand(n, c, *spatial)


_AVG_POOL = {2: aten.avg_pool2d, 3: aten.avg_pool3d}
_AVG_POOL_BACKWARD = {2: aten.avg_pool2d_backward, 3: aten.avg_pool3d_backward}
_MAX_POOL = {2: aten.max_pool2d_with_indices, 3: aten.max_pool3d_with_indices}
_MAX_POOL_BACKWARD = {
    2: aten.max_pool2d_with_indices_backward,
    3: aten.max_pool3d_with_indices_backward,
}
_ADAPTIVE = {2: aten._adaptive_avg_pool2d, 3: aten._adaptive_avg_pool3d}
_ADAPTIVE_BACKWARD = {2: aten._adaptive_avg_pool2d_backward, 3: aten._adaptive_avg_pool3d_backward}
_UPSAMPLE = {
    ("nearest", 1): (aten.upsample_nearest1d, aten.upsample_nearest1d_backward),
    ("nearest", 2): (aten.upsample_nearest2d, aten.upsample_nearest2d_backward),
    ("nearest", 3): (aten.upsample_nearest3d, aten.upsample_nearest3d_backward),
    ("linear", 1): (aten.upsample_linear1d, aten.upsample_linear1d_backward),
    ("linear", 2): (aten.upsample_bilinear2d, aten.upsample_bilinear2d_backward),
    ("linear", 3): (aten.upsample_trilinear3d, aten.upsample_trilinear3d_backward),
    ("bicubic", 2): (aten.upsample_bicubic2d, aten.upsample_bicubic2d_backward),
}


def _compiled_max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode):
    """``(values, indices)`` of a 2-d max pool over a contiguous ``[N, C, H, W]`` CPU tensor
    of floats, by :func:`~retrograd.backend.compiled_pool.max_pool2d_planes` (PyTorch's
    values and indices, in a third to a half of the time of its
    ``max_pool2d_with_indices`` on one thread, which on these planes runs a scalar loop
    that branches on every comparison); ``None`` where that kernel does not apply or the
    input holds NaN, whose rule (the last NaN wins) it leaves to torch."""
    if not (
        x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and x.numel() >= COMPILED_POOL_MIN_SIZE
        and x.is_contiguous()
    ):
        return None
    from .compiled_pool import max_pool2d_planes

    n, c, height, width = x.shape
    out_h, out_w = (
        pool_output_size(length, k, s, p, d, ceil_mode)
        for length, k, s, p, d in zip((height, width), kernel_size, stride, padding, dilation)
    )
    values = x.new_empty((n, c, out_h, out_w))
    indices = torch.empty((n, c, out_h, out_w), dtype=torch.int64)
    seen_nan = max_pool2d_planes(
        x.detach().numpy().reshape(n * c, height, width),
        values.numpy().reshape(n * c, out_h, out_w),
        indices.numpy().reshape(n * c, out_h, out_w),
        *kernel_size,
        *stride,
        *padding,
        *dilation,
    )
    return None if seen_nan else (values, indices)


def _heads(t: torch.Tensor) -> torch.Tensor:
    """``[..., L, E]`` as the ``[batch, heads, L, E]`` torch's fused attention takes, its last
    dim of unit stride: the CPU kernel reads rows as contiguous (torch's public
    ``scaled_dot_product_attention`` makes them so first). A query whose last two dims were
    transposed (``linalg.pinv(a).mT``, whose result torch lays out column-major) gave values
    of 1e214, and a Hessian of attention through ``pinv`` 4x off torch's (7 December)."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    return t if t.ndim == 4 else t.reshape(1, -1, *t.shape[-2:])


_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _convolution_backward(
    grad, x, weight, channels, stride, padding, dilation, transposed, output_padding, groups, needs
):
    """``aten.convolution_backward``: ``(dx, dweight, dbias)``, ``None`` where ``needs`` is
    false; ``channels``: the output's (the bias's size)."""
    return aten.convolution_backward(
        grad,
        x,
        weight,
        [channels],
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        list(needs),
    )


def _lift1d(x: torch.Tensor, *params: tuple) -> tuple:
    """A 1-d pooling call as a 2-d one: ``x`` ``[N, C, L]`` -> ``[N, C, 1, L]`` and each tuple
    parameter ``(a,)`` -> ``(fill, a)``; ``params`` are ``(values, fill)`` pairs."""
    return (x.unsqueeze(2), *((fill, *value) for value, fill in params))


#: torch's interpolation and padding codes of grid_sampler (GridSamplerInterpolation/Padding)
_GRID_MODES = ("bilinear", "nearest", "bicubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")


class TorchNNKernels:
    """The neural-network primitives of :class:`~retrograd.backend.TorchBackend`."""

    # -- fused activation, linear, layer norm and attention kernels ----------------------------
    def gelu_backward(self, grad, x):
        return torch.ops.aten.gelu_backward(grad, x)

    def linear(self, x, weight, bias):
        return torch.nn.functional.linear(x, weight, bias if bias.numel() else None)

    def layer_norm(self, x, weight, bias, eps):
        out, mean, rstd = torch.native_layer_norm(
            x,
            x.shape[-1:],
            weight if weight.numel() else None,
            bias if bias.numel() else None,
            eps,
        )
        lead = (1, *x.shape[:-1])
        return out, torch.cat([mean.reshape(lead), rstd.reshape(lead)], 0)

    def layer_norm_backward(self, grad, x, weight, stats, eps):
        lead, width = x.shape[:-1], x.shape[-1:]
        # torch reads the bias only for its dtype and device (and refuses to compute its
        # gradient without one); the protocol's dweight and dbias are always [D]
        dx, dweight, dbias = torch.ops.aten.native_layer_norm_backward(
            grad,
            x,
            width,
            stats[0].reshape(*lead, 1),
            stats[1].reshape(*lead, 1),
            weight if weight.numel() else None,
            grad.new_empty(width),
            (True, bool(weight.numel()), True),
        )
        return dx, grad.new_zeros(width) if dweight is None else dweight, dbias

    def attention(self, q, k, v, mask, drop, scale, causal):
        if not self._flash_attention(q, k, v, mask, drop):
            return super().attention(q, k, v, mask, drop, scale, causal)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            *(_heads(t) for t in (q, k, v)), 0.0, causal, scale=scale
        )
        return out.reshape(*q.shape[:-1], v.shape[-1]), lse.reshape(q.shape[:-1])

    def attention_backward(self, grad, q, k, v, out, lse, mask, drop, scale, causal):
        if not self._flash_attention(q, k, v, mask, drop):
            return super().attention_backward(grad, q, k, v, out, lse, mask, drop, scale, causal)
        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            *(_heads(t) for t in (grad, q, k, v, out)),
            lse.reshape(_heads(q).shape[:-1]),
            0.0,
            causal,
            scale=scale,
        )
        return tuple(g.reshape(t.shape) for g, t in zip(grads, (q, k, v)))

    def _flash_attention(self, q, k, v, mask, drop) -> bool:
        """Whether torch's fused CPU attention (flash: blocks of keys, the probabilities never
        whole) computes this call. Not for masks and dropout, whose conventions (an additive
        mask, a given dropout multiplier) it does not share, nor values of another width than
        the queries (it takes one head size), nor on CUDA, whose fused kernels pad the
        log-sum-exp and have not run here: the composed default serves those."""
        return (
            self.torch_device.type == "cpu"
            and not mask.numel()
            and not drop.numel()
            and q.ndim >= 3
            and q.dtype in _FLASH_DTYPES
            and min(q.shape[-2], k.shape[-2], q.shape[-1]) > 0
            # (its kernel divides by the heads: of none, as an empty 3-d batch gives, the
            # process dies of SIGFPE)
            and q.numel() > 0
            and q.shape[-1] == v.shape[-1]
            and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
        )

    # -- convolution ----------------------------------------------------------------------------
    def conv(self, x, weight, bias, stride, padding, dilation, groups):
        zeros = [0] * len(stride)
        # torch's grouped (depthwise) CPU kernels skip the padded taps, so a non-finite weight
        # that meets the zero padding adds nothing where 0 * inf is NaN (its ungrouped kernels
        # and the NumPy backend give NaN): padded explicitly, every path agrees. The check
        # reads the weight only, which is small.
        if (
            groups > 1
            and any(padding)
            and x.device.type == "cpu"
            and not bool(torch.isfinite(weight).all())
        ):
            x = torch.nn.functional.pad(x, [p for p in reversed(padding) for _ in range(2)])
            padding = zeros
        return aten.convolution(
            x, weight, _optional(bias), stride, padding, dilation, False, zeros, groups
        )

    def conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups):
        if all(o < max(s, d) for o, s, d in zip(output_padding, stride, dilation)):
            return aten.convolution(
                x, weight, _optional(bias), stride, padding, dilation, True, output_padding, groups
            )
        # torch refuses this output_padding: the full, uncropped result, cropped by hand, and
        # the trailing cells past its end (no input reaches them) hold zero, plus the bias.
        zeros = [0] * len(stride)
        full = aten.convolution(x, weight, None, stride, zeros, dilation, True, zeros, groups)
        kernel = weight.shape[2:]
        sizes = [
            conv_transpose_output_size(*args)
            for args in zip(x.shape[2:], kernel, stride, padding, output_padding, dilation)
        ]
        region = tuple(
            slice(p, min(p + n, length)) for p, n, length in zip(padding, sizes, full.shape[2:])
        )
        out = full.new_zeros((*full.shape[:2], *sizes))
        out[(slice(None), slice(None), *(slice(0, r.stop - r.start) for r in region))] = full[
            (slice(None), slice(None), *region)
        ]
        if bias.numel():
            out += bias.reshape((-1,) + (1,) * len(sizes))
        return out

    def conv_weight_grad(self, x, out_grad, kernel_size, stride, padding, dilation, groups):
        c_out, c_in = out_grad.shape[1], x.shape[1]
        weight = x.new_empty((c_out, c_in // groups, *kernel_size))
        zeros = [0] * len(stride)
        _, grad, _ = aten.convolution_backward(
            out_grad,
            x,
            weight,
            None,
            stride,
            padding,
            dilation,
            False,
            zeros,
            groups,
            [False, True, False],
        )
        return grad

    def conv_backward(self, grad, x, weight, stride, padding, dilation, groups, needs):
        zeros = (0,) * len(stride)
        return _convolution_backward(
            grad, x, weight, weight.shape[0], stride, padding, dilation, False, zeros, groups, needs
        )

    def conv_transpose_backward(
        self, grad, x, weight, stride, padding, output_padding, dilation, groups, needs
    ):
        if any(o >= max(s, d) for o, s, d in zip(output_padding, stride, dilation)):
            return super().conv_transpose_backward(
                grad, x, weight, stride, padding, output_padding, dilation, groups, needs
            )
        channels = weight.shape[1] * groups
        return _convolution_backward(
            grad,
            x,
            weight,
            channels,
            stride,
            padding,
            dilation,
            True,
            output_padding,
            groups,
            needs,
        )

    def grid_sample_backward(self, grad, x, grid, mode, padding_mode, align, needs):
        # torch's own kernel (grid_sampler_2d/3d_backward), which reads the input and the grid,
        # for zeros padding: its border and reflection kernels write out of bounds at a NaN
        # grid point (a segmentation fault in torch 2.13's CPU bilinear backward), and finding
        # one would read the grid on the host; the protocol's default takes those
        if padding_mode != "zeros":
            return super().grid_sample_backward(grad, x, grid, mode, padding_mode, align, needs)
        kernel = aten.grid_sampler_2d_backward if x.dim() == 4 else aten.grid_sampler_3d_backward
        g_x, g_grid = kernel(
            grad,
            x,
            grid,
            _GRID_MODES.index(mode),
            _GRID_PADDINGS.index(padding_mode),
            bool(align),
            [bool(needs[0]), bool(needs[1])],
        )
        return (g_x if needs[0] else None), (g_grid if needs[1] else None)

    # -- batch normalization ----------------------------------------------------------------------
    def batch_norm(self, x, weight, bias, eps):
        out, mean, rstd = aten.native_batch_norm(
            x, _optional(weight), _optional(bias), None, None, True, 0.0, eps
        )
        return out, torch.stack([mean, rstd]).to(x.dtype)

    def batch_norm_update(self, running_mean, running_var, stats, momentum, eps, count):
        # the protocol's formula and roundings, in plain torch calls
        variance = stats[1].square().reciprocal_().sub_(eps).mul_(count / (count - 1))
        keep = 1.0 - momentum
        return (
            running_mean.mul(keep) + stats[0].mul(momentum),
            running_var.mul(keep) + variance.mul(momentum),
        )

    def batch_norm_backward(self, grad, x, weight, stats, eps):
        mean, rstd = stats[0], stats[1]
        # Without a weight, a weight of ones (CUDA's kernel refuses an undefined weight: "tensor
        # does not have a device"); its gradient is not asked for: the protocol's is zeros.
        channels = x.shape[1]
        weighted = bool(weight.numel())
        dx, dweight, dbias = aten.native_batch_norm_backward(
            grad,
            x,
            weight if weighted else grad.new_ones((channels,)),
            None,
            None,
            mean,
            rstd,
            True,
            eps,
            [True, weighted, True],
        )
        if dweight is None:  # no weight: the protocol's dweight is still [C]
            dweight = grad.new_zeros((channels,))
        return dx, dweight, dbias

    # -- pooling ----------------------------------------------------------------------------------
    def avg_pool(
        self, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None
    ):
        if len(kernel_size) == 1:
            lifted, k, s, p = _lift1d(x, (kernel_size, 1), (stride, 1), (padding, 0))
            out = aten.avg_pool2d(lifted, k, s, p, ceil_mode, count_include_pad, divisor_override)
            return out.squeeze(2)
        return _AVG_POOL[len(kernel_size)](
            x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
        )

    def avg_pool_backward(
        self,
        grad,
        input_size,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override=None,
    ):
        n, c = grad.shape[:2]
        if len(kernel_size) == 1:
            lifted, k, s, p = _lift1d(grad, (kernel_size, 1), (stride, 1), (padding, 0))
            proxy = _proxy(grad, n, c, (1, *input_size))
            out = aten.avg_pool2d_backward(
                lifted, proxy, k, s, p, ceil_mode, count_include_pad, divisor_override
            )
            return out.squeeze(2)
        return _AVG_POOL_BACKWARD[len(kernel_size)](
            grad,
            _proxy(grad, n, c, input_size),
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
        )

    def max_pool(self, x, kernel_size, stride, padding, dilation, ceil_mode):
        if len(kernel_size) == 1:
            lifted, k, s, p, d = _lift1d(
                x, (kernel_size, 1), (stride, 1), (padding, 0), (dilation, 1)
            )
            values, indices = aten.max_pool2d_with_indices(lifted, k, s, p, d, ceil_mode)
            # Flat over [1, L]: the index along L already.
            return values.squeeze(2), indices.squeeze(2)
        if len(kernel_size) == 2:
            pooled = _compiled_max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)
            if pooled is not None:
                return pooled
        return _MAX_POOL[len(kernel_size)](x, kernel_size, stride, padding, dilation, ceil_mode)

    def max_pool_backward(
        self, grad, indices, input_size, kernel_size, stride, padding, dilation, ceil_mode
    ):
        n, c = grad.shape[:2]
        if len(input_size) == 1:
            lifted, k, s, p, d = _lift1d(
                grad, (kernel_size, 1), (stride, 1), (padding, 0), (dilation, 1)
            )
            proxy = _proxy(grad, n, c, (1, *input_size))
            out = aten.max_pool2d_with_indices_backward(
                lifted, proxy, k, s, p, d, ceil_mode, indices.unsqueeze(2)
            )
            return out.squeeze(2)
        return _MAX_POOL_BACKWARD[len(input_size)](
            grad,
            _proxy(grad, n, c, input_size),
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            indices,
        )

    def adaptive_avg_pool(self, x, output_size):
        if len(output_size) == 1:
            return aten._adaptive_avg_pool2d(x.unsqueeze(2), (1, *output_size)).squeeze(2)
        return _ADAPTIVE[len(output_size)](x, output_size)

    def adaptive_avg_pool_backward(self, grad, input_size):
        n, c = grad.shape[:2]
        if len(input_size) == 1:
            proxy = _proxy(grad, n, c, (1, *input_size))
            return aten._adaptive_avg_pool2d_backward(grad.unsqueeze(2), proxy).squeeze(2)
        return _ADAPTIVE_BACKWARD[len(input_size)](grad, _proxy(grad, n, c, input_size))

    # -- interpolation ----------------------------------------------------------------------------
    def interpolate(self, x, output_size, mode, align_corners, scales):
        if mode == "bicubic" and len(output_size) == 1:  # bicubic over [N, C, 1, L]
            out = self.interpolate(
                x.unsqueeze(2), (1, *output_size), mode, align_corners, (None, *scales)
            )
            return out.squeeze(2)
        forward, _ = _upsample(mode, len(output_size))
        if mode == "nearest":
            return forward(x, output_size, *scales)
        return forward(x, output_size, align_corners, *scales)

    def interpolate_backward(self, grad, input_size, mode, align_corners, scales):
        if mode == "bicubic" and len(input_size) == 1:
            out = self.interpolate_backward(
                grad.unsqueeze(2), (1, *input_size), mode, align_corners, (None, *scales)
            )
            return out.squeeze(2)
        _, backward = _upsample(mode, len(input_size))
        output_size = grad.shape[2:]
        full_input = (*grad.shape[:2], *input_size)
        if mode == "nearest":
            return backward(grad, output_size, full_input, *scales)
        return backward(grad, output_size, full_input, align_corners, *scales)


def _upsample(mode: str, ndim: int):
    try:
        return _UPSAMPLE[(mode, ndim)]
    except KeyError:
        raise NotImplementedError(
            f"interpolate: torch has no {mode} kernel for {ndim} spatial dimensions"
        ) from None
