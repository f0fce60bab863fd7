"""Torch kernels of the optimizers' updates: SGD and Adam (:class:`TorchOptimizerKernels`).

SGD is torch's own fused kernel (``torch._fused_sgd_``: one pass over the parameter, the
gradient and the momentum buffer, with the bits of torch eager's ``torch.optim.SGD``) for
float32 and float64, and torch eager's single-tensor loop for float16 and bfloat16 (which the
CPU's fused kernel steps only in part), and so
Adam/AdamW is torch eager's default ``torch.optim.Adam`` on the CPU, its single-tensor loop
operation for operation (``lerp_``, ``addcmul_``, ``addcdiv_``: torch's bits, as the
protocol's formula rounds them), and so is RMSprop. With ``inplace`` they write into the
buffers given, as ``torch.optim`` does; without, into tensors made here.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import numpy_optim

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
        # (alpha: torch's add_/sub_ with alpha, one fused multiply-add, as add_scaled)
        method = _INTO.get(kernel)
        if method is None:
            return None
        if alpha is None:
            return getattr(x, method)(y)
        return getattr(x, method)(y, alpha=alpha)

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
        alike = value.dtype == grad.dtype and value.shape == grad.shape
        alike = alike and (first or not momentum or buffer.shape == value.shape)
        if alike and value.dtype in (torch.float16, torch.bfloat16):
            # torch's CPU kernel leaves a float16 or bfloat16 value's vectorized part (its
            # first 16-element chunks) unwritten and steps only the tail: torch eager's loop
            return _eager_sgd(
                value, grad, buffer, first, lr, momentum, dampening, weight_decay, nesterov,
                inplace,
            )  # fmt: skip
        fits = alike and value.dtype in (torch.float32, torch.float64)
        fits = fits and value.device == grad.device and value.numel() > 0
        fits = fits and value.is_contiguous() and (first or not momentum or buffer.is_contiguous())
        if not fits:
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
        # in place on the buffers given with ``inplace``, else on tensors made here
        if not (value.dtype == grad.dtype == first.dtype == second.dtype):
            return _composed_adam(
                value, grad, first, second, step, lr, beta1, beta2, eps, weight_decay,
                decoupled, inplace,
            )  # fmt: skip
        # torch.optim.Adam's default on the CPU (its single-tensor loop), operation for
        # operation: torch eager's bits, seven passes (the protocol's composed order is
        # thirteen, with three new tensors)
        if not inplace:
            value, first, second = value.clone(), first.clone(), second.clone()
        # (not where the backend stands in for a device, deferring its index checks as CUDA
        # does: the loops read the tensors through NumPy, a host read there)
        if not self.deferred_index_checks and _loops_take(value, grad, first, second):
            return _adam_split(
                value, grad, first, second, step, lr, beta1, beta2, eps, weight_decay, decoupled
            )
        if weight_decay:
            if decoupled:
                value.mul_(1.0 - lr * weight_decay)
            else:
                grad = grad.add(value, alpha=weight_decay)
        first.lerp_(grad, 1.0 - beta1)
        second.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denominator = (second.sqrt() / math.sqrt(1.0 - beta2**step)).add_(eps)
        value.addcdiv_(first, denominator, value=-(lr / (1.0 - beta1**step)))
        return value, first, second

    def rmsprop_update(
        self, value, grad, square, average, buffer, lr, alpha, eps, weight_decay, momentum,
        centered, inplace
    ):  # fmt: skip
        # torch's single-tensor RMSprop, line for line (torch eager's bits), in place on the
        # buffers given with ``inplace``
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
            grad = grad.add(value, alpha=weight_decay)
        square.mul_(alpha).addcmul_(grad, grad, value=1.0 - alpha)
        if centered:
            average.lerp_(grad, 1.0 - alpha)
            denominator = square.addcmul(average, average, value=-1).sqrt_()
        else:
            denominator = square.sqrt()
        denominator.add_(eps)
        if momentum > 0.0:
            buffer.mul_(momentum).addcdiv_(grad, denominator)
            value.add_(buffer, alpha=-lr)
        else:
            value.addcdiv_(grad, denominator, value=-lr)
        return value, square, average, buffer


def _loops_take(value, *others) -> bool:
    """Whether :func:`_adam_split` steps these tensors: float32 or float64 CPU tensors of one
    dtype and shape, contiguous, and the compiled loops loaded or the value large enough to
    load them (the NumPy backend's rule, :data:`.numpy_optim.COMPILED_MIN_SIZE`: a small
    model never loads Numba)."""
    dtype = value.dtype
    if dtype != torch.float32 and dtype != torch.float64:
        return False
    if value.device.type != "cpu" or not value.is_contiguous() or value.numel() == 0:
        return False
    for other in others:
        if other.dtype != dtype or other.shape != value.shape or not other.is_contiguous():
            return False
        if other.device.type != "cpu" or other.requires_grad:
            return False
    if value.requires_grad:
        return False
    return numpy_optim._LOOPS is not None or value.numel() >= numpy_optim.COMPILED_MIN_SIZE


def _adam_split(value, grad, first, second, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    """torch's single-tensor Adam in two compiled passes around torch's own square root
    (:data:`.compiled_optim.ADAM_MOMENT_LOOPS`, then ``torch.sqrt``, then
    :func:`.compiled_optim.adam_apply_loop`), in place on the tensors' memory: the loops are
    torch's other lines rounded as torch rounds them (the NumPy backend's, which give torch's
    bits), and the root is torch's, which is not IEEE's on every CPU. Three passes and one
    new tensor where the eight operations make eight passes and two, and a fraction of their
    dispatch: on a small model that dispatch was most of the optimizer's step."""
    loops = numpy_optim._loops()
    scalar = np.float32 if value.dtype == torch.float32 else np.float64
    v, g, m, s = (t.numpy().reshape(-1) for t in (value, grad, first, second))
    keep1 = scalar(1.0 - beta1)  # torch's lerp weight, in the dtype
    from_grad = not abs(keep1) < 0.5
    loops.ADAM_MOMENT_LOOPS[bool(weight_decay), bool(decoupled)](
        v,
        g,
        m,
        s,
        scalar(1.0 - lr * weight_decay),
        scalar(weight_decay),
        keep1 - scalar(1.0) if from_grad else keep1,
        from_grad,
        scalar(1.0 - beta2),
        scalar(beta2),
    )
    roots = torch.sqrt(second)
    loops.adam_apply_loop(
        v,
        m,
        roots.numpy().reshape(-1),
        scalar(math.sqrt(1.0 - beta2**step)),
        scalar(eps),
        scalar(lr / (1.0 - beta1**step)),
    )
    return value, first, second


def _composed_adam(
    value, grad, first, second, step, lr, beta1, beta2, eps, weight_decay, decoupled, inplace
):
    """The protocol's Adam in its order of operations, torch's type promotion between them:
    for state buffers of another dtype than the value's (a model cast after its optimizer
    stepped), which torch's in-place Adam operations refuse."""
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


def _eager_sgd(
    value, grad, buffer, first, lr, momentum, dampening, weight_decay, nesterov, inplace
):
    """torch.optim.SGD's single-tensor loop (its default on the CPU), operation for operation:
    torch eager's bits for the float16 and bfloat16 parameters the fused kernel misses."""
    if not inplace:
        value = value.clone()
        buffer = buffer if first or not momentum else buffer.clone()
    if weight_decay:
        grad = grad.add(value, alpha=weight_decay)
    if momentum:
        if first:
            buffer = grad.clone()
        else:
            buffer.mul_(momentum).add_(grad, alpha=1.0 - dampening)
        grad = grad.add(buffer, alpha=momentum) if nesterov else buffer
    value.add_(grad, alpha=-lr)
    return value, buffer
