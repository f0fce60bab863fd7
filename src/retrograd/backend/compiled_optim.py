"""The SGD and Adam updates as one loop each over a parameter, compiled with Numba.

NumPy makes one pass over memory per operation and one array per result: SGD with momentum and
weight decay is six passes and five arrays of the parameter's size, Adam eleven passes; on a
U-Net's 30 million parameters that is the whole optimizer step, spent moving memory and
faulting in fresh pages. Each loop here reads the gradient, the value and the state once and
writes the new value and state once, in place (an element is read before it is written; a
caller that must not modify its inputs passes copies). Writing into the inputs, rather than
into separate outputs, keeps a loop at four arrays or fewer: with seven (Adam's inputs and
outputs) the compiler no longer proves them disjoint cheaply and leaves the loop scalar,
three times slower.

The arithmetic is torch's single-tensor optimizers', operation for operation: where torch's
line is one fused kernel (``add_(alpha=)``, ``lerp_``, ``addcmul_``: a fused multiply-add,
rounded once), the loop has LLVM's ``fma`` (:func:`.compiled_fma.fma`); every other product
and sum is rounded on its own in the arrays' dtype (Numba contracts nothing without
``fastmath``). So a loop gives torch's bits, and the NumPy operations of
:mod:`.numpy_optim` (:mod:`.numpy_fma`'s emulation) give the same; the tests compare both
with torch. The scalars arrive already in the arrays' dtype, as torch takes a Python number
in a float32 tensor's dtype. Loops take flat contiguous arrays of one dtype.

Each formula is written once, as an element function whose options are arguments; the loops
call it with the options as constants, so that the compiler drops the branches and vectorizes
(one loop with the options as run-time flags measured three times slower). The common cases
have a loop each (SGD with or without momentum and weight decay, Adam, Adam with L2 decay,
AdamW); the rest of SGD (its first step, dampening, Nesterov) share one loop with flags.
"""

from __future__ import annotations

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)
from .compiled_fma import fma

__all__ = [
    "ADAM_LOOPS",
    "ADAM_MOMENT_LOOPS",
    "SGD_LOOPS",
    "adam_apply_loop",
    "sgd_any_loop",
    "sum_of_squares",
]

_jit = numba.njit(error_model="numpy", cache=True, nogil=True)
# Reassociation alone (no contraction, no other fast-math): lets the compiler split a sum
# over vector lanes, the one thing a reduction loop needs to vectorize.
_jit_sum = numba.njit(error_model="numpy", fastmath={"reassoc"}, cache=True, nogil=True)
_inline = numba.njit(inline="always", error_model="numpy", cache=True)


@_inline
def _sgd(v, g, b, lr, momentum, damping, weight_decay, decay, use_momentum, first, dampen,
         nesterov):  # fmt: skip
    """``Backend.sgd_update`` on one element: ``(new value, new buffer)``; ``damping`` is
    ``1 - dampening`` (used when ``dampen``), ``first``: the buffer starts as the direction.
    torch's lines: ``g.add(p, alpha=wd)``, ``b.mul_(momentum).add_(g, alpha=1 - dampening)``,
    ``g.add(b, alpha=momentum)`` (Nesterov), ``p.add_(g, alpha=-lr)``: each ``add`` one
    fused multiply-add."""
    d = fma(v, weight_decay, g) if decay else g
    if use_momentum:
        if first:
            b = d
        elif dampen:
            b = fma(d, damping, b * momentum)
        else:
            b = b * momentum + d
        d = fma(b, momentum, d) if nesterov else b
    return fma(-d, lr, v), b


@_jit
def sgd_any_loop(value, grad, buffer, lr, momentum, damping, weight_decay, decay, use_momentum,
                 first, dampen, nesterov):  # fmt: skip
    for i in range(value.size):
        value[i], buffer[i] = _sgd(value[i], grad[i], buffer[i], lr, momentum, damping,
                                           weight_decay, decay, use_momentum, first, dampen,
                                           nesterov)  # fmt: skip


@_jit
def _sgd_plain(value, grad, lr, weight_decay):
    for i in range(value.size):
        value[i] = _sgd(value[i], grad[i], value[i], lr, lr, lr, weight_decay, False, False,
                            False, False, False)[0]  # fmt: skip


@_jit
def _sgd_decay(value, grad, lr, weight_decay):
    for i in range(value.size):
        value[i] = _sgd(value[i], grad[i], value[i], lr, lr, lr, weight_decay, True, False,
                            False, False, False)[0]  # fmt: skip


@_jit
def _sgd_momentum(value, grad, buffer, lr, momentum, weight_decay):
    for i in range(value.size):
        value[i], buffer[i] = _sgd(value[i], grad[i], buffer[i], lr, momentum, lr,
                                           weight_decay, False, True, False, False,
                                           False)  # fmt: skip


@_jit
def _sgd_momentum_decay(value, grad, buffer, lr, momentum, weight_decay):
    for i in range(value.size):
        value[i], buffer[i] = _sgd(value[i], grad[i], buffer[i], lr, momentum, lr,
                                           weight_decay, True, True, False, False,
                                           False)  # fmt: skip


#: ``(momentum, weight decay) -> loop`` for the later steps without dampening or Nesterov:
#: ``(value, grad, lr, weight_decay)`` without momentum, ``(value, grad, buffer, lr, momentum,
#: weight_decay)`` with.
SGD_LOOPS = {
    (False, False): _sgd_plain,
    (False, True): _sgd_decay,
    (True, False): _sgd_momentum,
    (True, True): _sgd_momentum_decay,
}


@_inline
def _adam(v, g, m, s, shrink, weight_decay, decay, decoupled, keep1, from_grad, keep2, beta2,
          correction2, eps, step_size):  # fmt: skip
    """``Backend.adam_update`` on one element: ``(new value, first, second moment)``;
    ``shrink`` is ``1 - lr weight_decay``, ``keep2`` is ``1 - beta2``, ``correction2`` is
    ``sqrt(1 - beta2^t)``, ``step_size`` is ``lr / (1 - beta1^t)``. torch's lines:
    ``g.add(p, alpha=wd)`` (fused), ``m.lerp_(g, 1 - beta1)`` (``keep1`` is that weight, or
    the weight less 1 with ``from_grad``, torch's lerp from the far end for a weight of 1/2
    or more), ``s.mul_(beta2).addcmul_(g, g, value=1 - beta2)`` (fused), ``p.addcdiv_(m,
    sqrt(s) / correction2 + eps, value=-step_size)``."""
    v, m, s = _adam_moments(v, g, m, s, shrink, weight_decay, decay, decoupled, keep1,
                            from_grad, keep2, beta2)  # fmt: skip
    return _adam_applied(v, m, np.sqrt(s), correction2, eps, step_size), m, s


@_inline
def _adam_moments(v, g, m, s, shrink, weight_decay, decay, decoupled, keep1, from_grad, keep2,
                  beta2):  # fmt: skip
    """:func:`_adam`'s first half: the decayed value (AdamW) and the two moments."""
    if decay:
        if decoupled:
            v = v * shrink
        else:
            g = fma(v, weight_decay, g)
    m = fma(keep1, g - m, g if from_grad else m)
    s = fma(keep2 * g, g, s * beta2)
    return v, m, s


@_inline
def _adam_applied(v, m, root, correction2, eps, step_size):
    """:func:`_adam`'s second half: the value stepped, ``root`` the second moment's root."""
    return v - m * step_size / (root / correction2 + eps)


@_jit
def _adam_plain(value, grad, first, second, shrink, weight_decay, keep1, from_grad, keep2, beta2,
                correction2, eps, step_size):  # fmt: skip
    for i in range(value.size):
        value[i], first[i], second[i] = _adam(
            value[i], grad[i], first[i], second[i], shrink, weight_decay, False, False, keep1,
            from_grad, keep2, beta2, correction2, eps, step_size)  # fmt: skip


@_jit
def _adam_l2(value, grad, first, second, shrink, weight_decay, keep1, from_grad, keep2, beta2,
             correction2, eps, step_size):  # fmt: skip
    for i in range(value.size):
        value[i], first[i], second[i] = _adam(
            value[i], grad[i], first[i], second[i], shrink, weight_decay, True, False, keep1,
            from_grad, keep2, beta2, correction2, eps, step_size)  # fmt: skip


@_jit
def _adamw(value, grad, first, second, shrink, weight_decay, keep1, from_grad, keep2, beta2,
           correction2, eps, step_size):  # fmt: skip
    for i in range(value.size):
        value[i], first[i], second[i] = _adam(
            value[i], grad[i], first[i], second[i], shrink, weight_decay, True, True, keep1,
            from_grad, keep2, beta2, correction2, eps, step_size)  # fmt: skip


#: ``(weight decay, decoupled) -> loop`` ``(value, grad, first, second, shrink, weight_decay,
#: keep1, from_grad, keep2, beta2, correction2, eps, step_size)``.
ADAM_LOOPS = {
    (False, False): _adam_plain,
    (False, True): _adam_plain,
    (True, False): _adam_l2,
    (True, True): _adamw,
}


@_jit
def _adam_moments_plain(value, grad, first, second, shrink, weight_decay, keep1, from_grad, keep2,
                        beta2):  # fmt: skip
    for i in range(value.size):
        value[i], first[i], second[i] = _adam_moments(
            value[i], grad[i], first[i], second[i], shrink, weight_decay, False, False, keep1,
            from_grad, keep2, beta2)  # fmt: skip


@_jit
def _adam_moments_l2(value, grad, first, second, shrink, weight_decay, keep1, from_grad, keep2,
                     beta2):  # fmt: skip
    for i in range(value.size):
        value[i], first[i], second[i] = _adam_moments(
            value[i], grad[i], first[i], second[i], shrink, weight_decay, True, False, keep1,
            from_grad, keep2, beta2)  # fmt: skip


@_jit
def _adamw_moments(value, grad, first, second, shrink, weight_decay, keep1, from_grad, keep2,
                   beta2):  # fmt: skip
    for i in range(value.size):
        value[i], first[i], second[i] = _adam_moments(
            value[i], grad[i], first[i], second[i], shrink, weight_decay, True, True, keep1,
            from_grad, keep2, beta2)  # fmt: skip


#: :data:`ADAM_LOOPS` split at the square root, for a backend whose root is not IEEE's (torch's
#: vectorized ``sqrt`` on some CPUs): ``(weight decay, decoupled) -> loop`` ``(value, grad,
#: first, second, shrink, weight_decay, keep1, from_grad, keep2, beta2)`` writing the decayed
#: value and the moments, then :func:`adam_apply_loop` with the backend's roots of ``second``.
ADAM_MOMENT_LOOPS = {
    (False, False): _adam_moments_plain,
    (False, True): _adam_moments_plain,
    (True, False): _adam_moments_l2,
    (True, True): _adamw_moments,
}


@_jit
def adam_apply_loop(value, first, roots, correction2, eps, step_size):
    """The value stepped from the first moment and ``roots`` (the second moment's)."""
    for i in range(value.size):
        value[i] = _adam_applied(value[i], first[i], roots[i], correction2, eps, step_size)


@_jit_sum
def sum_of_squares(values):
    """The sum of the squares of the flat array ``values`` (float32 or float64), accumulated
    in float64 in one pass: ``Backend.global_norm``'s on NumPy (``clip_grad_norm_``). A
    float32 square is exact in float64 (48 significant bits of 53), so the only rounding is
    the float64 sum's, split by the compiler over vector lanes (reassociation): an order
    fixed by the loop as compiled and the array's length, not by its address, so equal
    arrays give equal bits. About n * 2^-53 relative error at worst; NumPy's float32 square
    and pairwise sum of the same array rounds each square to 2^-24."""
    total = 0.0
    for i in range(values.size):
        v = np.float64(values[i])
        total += v * v
    return total
