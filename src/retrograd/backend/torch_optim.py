"""Torch kernels of the optimizers' updates: SGD and Adam (:class:`TorchOptimizerKernels`).

SGD is torch's own fused kernel (``torch._fused_sgd_``: one pass over the parameter, the
gradient and the momentum buffer, with the bits of torch eager's ``torch.optim.SGD``), and so
is Adam/AdamW (``torch._fused_adam_``, ``_fused_adamw_``: the bits of
``torch.optim.Adam(fused=True)``; the same formula as the protocol's, rounded as torch's
kernel rounds it, within a few float32 ulps of the composed order); tensors the fused Adam
does not take keep the protocol's order of operations. RMSprop keeps the protocol's order. With
``inplace`` both write into the buffers given, as ``torch.optim`` does; without, into tensors
made here.
"""

from __future__ import annotations

import math

import torch

__all__ = ["TorchOptimizerKernels"]

#: ``Backend.write_into``'s kernels: torch's in-place methods.
_INTO = {
    "add": "add_",
    "sub": "sub_",
    "mul": "mul_",
    "div": "div_",
    "add_scalar": "add_",
    "sub_scalar": "sub_",
    "mul_scalar": "mul_",
    "div_scalar": "div_",
}


class TorchOptimizerKernels:
    """The optimizer kernels of :class:`~retrograd.backend.TorchBackend`."""

    def owns_memory(self, x):
        # views, detached aliases and NumPy arrays over a tensor (``numpy()``) are tensors of
        # their own over its storage: the storage counts them (and the one ``untyped_storage``
        # makes here)
        if x.requires_grad or x._base is not None:
            return False
        return torch._C._storage_Use_Count(x.untyped_storage()._cdata) <= 2

    def write_into(self, kernel, x, y, alpha=None):
        # the in-place forms of the backend's torch.add/sub/mul/true_divide: the same loops
        # (alpha: the product first, as the backend's mul_scalar; torch's add_ with alpha
        # would round once)
        method = _INTO.get(kernel)
        if method is None:
            return None
        return getattr(x, method)(y if alpha is None else torch.mul(y, alpha))

    def global_norm(self, *values):
        # torch's clip_grad_norm_: each value's norm by _foreach_norm (one pass each, in its
        # dtype), the norm of those; cast to float64 (torch keeps the values' dtype)
        dtype, device = values[0].dtype, values[0].device
        if not dtype.is_floating_point or any(
            v.dtype != dtype or v.device != device for v in values
        ):
            return super().global_norm(*values)
        norms = torch._foreach_norm(list(values), 2.0)
        return torch.linalg.vector_norm(torch.stack(norms), 2.0).to(torch.float64)

    def sgd_update(
        self, value, grad, buffer, lr, momentum, dampening, weight_decay, nesterov, inplace
    ):
        # torch's own fused SGD: torch eager's bits (its add with alpha rounds once), one pass;
        # it reads every tensor as contiguous memory (an expanded gradient would be misread)
        first = bool(momentum) and buffer.numel() == 0
        fits = value.dtype == grad.dtype and value.dtype.is_floating_point
        fits = fits and value.shape == grad.shape and value.device == grad.device
        fits = fits and value.is_contiguous() and (first or not momentum or buffer.is_contiguous())
        if (
            not fits
            or value.numel() == 0
            or (momentum and not first and buffer.shape != value.shape)
        ):
            return super().sgd_update(
                value, grad, buffer, lr, momentum, dampening, weight_decay, nesterov, inplace
            )
        grad = grad.contiguous()
        if not inplace:
            value = value.clone()
            buffer = buffer if first or not momentum else buffer.clone()
        if first:
            buffer = torch.empty_like(value)
        torch._fused_sgd_(
            [value],
            [grad],
            [buffer] if momentum else [],
            weight_decay=weight_decay,
            momentum=momentum,
            lr=lr,
            dampening=dampening,
            nesterov=nesterov,
            maximize=False,
            is_first_step=first,
        )
        return value, buffer

    def adam_update(
        self,
        value,
        grad,
        first,
        second,
        step,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled,
        inplace=False,
    ):
        if _fused_adam_fits(value, grad, first, second):
            # torch's own fused Adam/AdamW: torch.optim.Adam(fused=True)'s bits, one pass over
            # the value, the gradient and the moments (torch's default on CPU, the
            # single-tensor loop, makes seven; the composed order below, thirteen)
            if not inplace:
                value, first, second = value.clone(), first.clone(), second.clone()
            kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
            count = torch.full((), float(step), dtype=torch.float32, device=value.device)
            kernel(
                [value],
                [grad],
                [first],
                [second],
                [],
                [count],
                lr=lr,
                beta1=beta1,
                beta2=beta2,
                weight_decay=weight_decay,
                eps=eps,
                amsgrad=False,
                maximize=False,
            )
            return value, first, second
        # the default's operations in its order: in place on the buffers given with
        # ``inplace``, else on tensors made here
        if weight_decay:
            if decoupled:
                shrink = 1.0 - lr * weight_decay
                value = value.mul_(shrink) if inplace else value * shrink
            else:
                grad = grad + value * weight_decay
        moment = torch.sub(grad, first).mul_(1.0 - beta1)
        moment = first.add_(moment) if inplace else moment.add_(first)
        squares = torch.mul(grad, 1.0 - beta2).mul_(grad)
        variance = second.mul_(beta2) if inplace else torch.mul(second, beta2)
        variance.add_(squares)
        denominator = torch.sqrt(variance, out=squares)
        denominator.div_(math.sqrt(1.0 - beta2**step)).add_(eps)
        update = torch.mul(moment, lr / (1.0 - beta1**step)).div_(denominator)
        value = value.sub_(update) if inplace else torch.sub(value, update, out=update)
        return value, moment, variance

    def rmsprop_update(
        self, value, grad, square, average, buffer, lr, alpha, eps, weight_decay, momentum,
        centered, inplace
    ):  # fmt: skip
        # the protocol's order of operations, in place on the buffers given with ``inplace``
        states = [square, *([average] if centered else []), *([buffer] if momentum > 0 else [])]
        if any(t.shape != value.shape or t.dtype != value.dtype for t in (grad, *states)):
            return super().rmsprop_update(
                value, grad, square, average, buffer, lr, alpha, eps, weight_decay, momentum,
                centered, inplace,
            )  # fmt: skip
        if not inplace:
            value, square = value.clone(), square.clone()
            average = average.clone() if centered else average
            buffer = buffer.clone() if momentum > 0 else buffer
        if weight_decay:
            grad = torch.mul(value, weight_decay).add_(grad)
        squares = torch.mul(grad, 1.0 - alpha).mul_(grad)
        square.mul_(alpha).add_(squares)
        if centered:
            average.add_(torch.sub(grad, average).mul_(1.0 - alpha))
            denominator = torch.mul(average, average, out=squares)
            torch.sub(square, denominator, out=denominator).sqrt_()
        else:
            denominator = torch.sqrt(square, out=squares)
        quotient = torch.div(grad, denominator.add_(eps), out=denominator)
        if momentum > 0.0:
            buffer.mul_(momentum).add_(quotient)
            value.sub_(torch.mul(buffer, lr, out=quotient))
        else:
            value.sub_(quotient.mul_(lr))
        return value, square, average, buffer


def _fused_adam_fits(value, grad, first, second):
    """Tensors torch's fused Adam takes: float32 or float64, one dtype, device and shape,
    contiguous, on the CPU or a CUDA device, not empty."""
    if value.dtype not in (torch.float32, torch.float64) or value.device.type not in (
        "cpu",
        "cuda",
    ):
        return False
    return value.numel() != 0 and all(
        t.dtype == value.dtype
        and t.device == value.device
        and t.shape == value.shape
        and t.is_contiguous()
        for t in (value, grad, first, second)
    )
