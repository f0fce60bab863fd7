"""NumPy kernels of the optimizers' updates: SGD and Adam (:class:`NumpyOptimizerKernels`).

With ``inplace`` the new value and state are written into the arrays given; without, into
copies. Parameters of :data:`COMPILED_MIN_SIZE` elements or more (float32 or float64,
contiguous, of one dtype) run the compiled loops of :mod:`.compiled_optim`: one pass over
memory; SGD's and Adam's smaller ones too once the loops are loaded (a loop then beats Adam's
eleven NumPy operations from the smallest parameter on: 4 against 6 us at 128 elements, 13
against 59 us at 48K; SGD with momentum's four: 4 against 7 us at 200, 25 against 56 us at
40K). Before that, smaller ones take NumPy operations writing into the same arrays (one
temporary), and anything else (another dtype, a strided gradient) the protocol's composed
formula: all three give the same bits, the formula's. Numba loads on the first large update
(seconds, once per process: a small model never pays it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["COMPILED_MIN_SIZE", "NumpyOptimizerKernels"]

#: Parameters from this many elements (256 KiB of float32) on take the compiled loops.
COMPILED_MIN_SIZE = 1 << 16

_LOOPS: Any = None

#: ``Backend.write_into``'s kernels: the backend's own ufuncs (``NumpyBackend.add``...).
_INTO = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "add_scalar": np.add,
    "sub_scalar": np.subtract,
    "mul_scalar": np.multiply,
    "div_scalar": np.true_divide,
}


def _loops() -> Any:
    global _LOOPS
    if _LOOPS is None:
        from . import compiled_optim

        _LOOPS = compiled_optim
    return _LOOPS


def _compilable(*arrays: np.ndarray) -> bool:
    """Arrays a compiled loop takes: float32 or float64, one dtype, C-contiguous."""
    dtype = arrays[0].dtype
    if dtype != np.float32 and dtype != np.float64:
        return False
    return all(a.dtype == dtype and a.flags.c_contiguous for a in arrays)


def _one_element(count: int) -> Any:
    """A kernel whose first ``count`` operands, when 0-d, run as 1-element arrays over the same
    memory (the results made 0-d again). NumPy's operations on 0-d arrays return scalars, which
    take no ``out=`` and no in-place write, and a 0-d tensor's value is often such a scalar
    (``ones(()) * 2.0``): the updates failed on a 0-d parameter (CLIP's ``logit_scale``), and
    SGD's rebound its local scalar and returned the parameter unchanged."""

    def decorate(kernel: Any) -> Any:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if np.ndim(args[0]) != 0:
                return kernel(self, *args, **kwargs)
            arrays = [
                np.reshape(np.asarray(a), (1,)) if np.ndim(a) == 0 else a for a in args[:count]
            ]
            out = kernel(self, *arrays, *args[count:], **kwargs)
            return tuple(np.reshape(a, ()) if np.shape(a) == (1,) else a for a in out)

        run.__name__, run.__doc__ = kernel.__name__, kernel.__doc__
        return run

    return decorate


class NumpyOptimizerKernels:
    """The optimizer kernels of :class:`~retrograd.backend.NumpyBackend`."""

    def owns_memory(self, x):
        # an array over another's memory keeps that one as its base (a Python reference);
        # one that owns its data is seen by others only through references to it
        return isinstance(x, np.ndarray) and x.base is None and x.flags.writeable

    def write_into(self, kernel, x, y, alpha=None):
        ufunc = _INTO.get(kernel)
        if ufunc is None or not isinstance(x, np.ndarray):
            return None  # (a 0-d value may be a NumPy scalar: no memory to write)
        if alpha is not None:
            if x.dtype.kind == "f":  # torch's fused multiply-add, the backend's add_scaled
                return self.add_scaled_into(x, y, alpha if kernel == "add" else -alpha)
            y = np.multiply(y, alpha)  # integers: exact, as the backend's mul_scalar
        return ufunc(x, y, out=x)  # the ufunc's loop, as the backend's kernel: the same bits

    def global_norm(self, *values):
        # one pass per value, summed in float64 (compiled_optim.sum_of_squares), once the
        # values hold COMPILED_MIN_SIZE elements together; fewer, a float64 copy of each and
        # BLAS's dot product (Numba not loaded for a small model). The path depends on the
        # values alone: equal gradients give equal bits in any process.
        arrays = [np.asarray(x) for x in values]
        if any(x.dtype.kind != "f" for x in arrays):
            return super().global_norm(*values)
        compiled = sum(x.size for x in arrays) >= COMPILED_MIN_SIZE
        total = 0.0
        for x in arrays:
            if compiled and _compilable(x):
                total += _loops().sum_of_squares(x.reshape(-1))
            else:
                wide = x.astype(np.float64).reshape(-1)
                total += float(np.dot(wide, wide))
        return np.float64(math.sqrt(total))

    @_one_element(3)
    def sgd_update(
        self, value, grad, buffer, lr, momentum, dampening, weight_decay, nesterov, inplace
    ):
        first = bool(momentum) and buffer.size == 0 and value.size != 0
        state = value if not momentum or first else buffer
        if not _compilable(value, grad, state) or not value.shape == grad.shape == state.shape:
            return super().sgd_update(
                value, grad, buffer, lr, momentum, dampening, weight_decay, nesterov, inplace
            )
        if not inplace:
            value = value.copy()
            buffer = buffer if first or not momentum else buffer.copy()
        if first:
            buffer = np.empty_like(value)
        if value.size < COMPILED_MIN_SIZE and _LOOPS is None:
            hyper = (lr, momentum, dampening, weight_decay, nesterov, first)
            _sgd_numpy(self, value, grad, buffer, *hyper)
            return value, buffer
        scalar = value.dtype.type
        flat_value, flat_grad = value.reshape(-1), grad.reshape(-1)
        flat_buffer = buffer.reshape(-1) if momentum else flat_value
        loops = _loops()
        # (without momentum there is no buffer, and dampening means nothing, as in torch: the
        # general loop would write the buffer, which is then ``value`` itself, last)
        if momentum and (first or dampening or nesterov):
            loops.sgd_any_loop(
                flat_value,
                flat_grad,
                flat_buffer,
                scalar(lr),
                scalar(momentum),
                scalar(1.0 - dampening),
                scalar(weight_decay),
                bool(weight_decay),
                bool(momentum),
                first,
                bool(dampening),
                bool(nesterov),
            )
        elif momentum:
            loop = loops.SGD_LOOPS[True, bool(weight_decay)]
            loop(
                flat_value,
                flat_grad,
                flat_buffer,
                scalar(lr),
                scalar(momentum),
                scalar(weight_decay),
            )
        else:
            loop = loops.SGD_LOOPS[False, bool(weight_decay)]
            loop(flat_value, flat_grad, scalar(lr), scalar(weight_decay))
        return value, buffer

    @_one_element(5)
    def rmsprop_update(
        self, value, grad, square, average, buffer, lr, alpha, eps, weight_decay, momentum,
        centered, inplace
    ):  # fmt: skip
        states = [square, *([average] if centered else []), *([buffer] if momentum > 0 else [])]
        hyper = (lr, alpha, eps, weight_decay, momentum, centered)
        if not _compilable(value, grad, *states) or any(
            a.shape != value.shape for a in (grad, *states)
        ):
            return super().rmsprop_update(value, grad, square, average, buffer, *hyper, inplace)
        if not inplace:
            value, square = value.copy(), square.copy()
            average = average.copy() if centered else average
            buffer = buffer.copy() if momentum > 0 else buffer
        _rmsprop_numpy(self, value, grad, square, average, buffer, hyper)
        return value, square, average, buffer

    @_one_element(4)
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
        hyper = (step, lr, beta1, beta2, eps, weight_decay, decoupled)
        shapes = value.shape == grad.shape == first.shape == second.shape
        if not (shapes and _compilable(value, grad, first, second)):
            return _adam_composed(value, grad, first, second, *hyper)
        if not inplace:
            value, first, second = value.copy(), first.copy(), second.copy()
        if value.size < COMPILED_MIN_SIZE and _LOOPS is None:
            _adam_numpy(self, value, grad, first, second, *hyper)
            return value, first, second
        scalar = value.dtype.type
        keep1 = scalar(1.0 - beta1)  # torch's lerp weight, in the dtype
        from_grad = not abs(keep1) < 0.5
        _loops().ADAM_LOOPS[bool(weight_decay), bool(decoupled)](
            value.reshape(-1),
            grad.reshape(-1),
            first.reshape(-1),
            second.reshape(-1),
            scalar(1.0 - lr * weight_decay),
            scalar(weight_decay),
            keep1 - scalar(1.0) if from_grad else keep1,
            from_grad,
            scalar(1.0 - beta2),
            scalar(beta2),
            scalar((1.0 - beta2**step) ** 0.5),
            scalar(eps),
            scalar(lr / (1.0 - beta1**step)),
        )
        return value, first, second


def _rmsprop_numpy(fused, value, grad, square, average, buffer, hyper):
    """torch's single-tensor RMSprop, line for line, written into the arrays given: each
    ``add(alpha=)``, ``lerp_`` and ``addcmul_`` one fused multiply-add, the backend's
    (``fused``: :mod:`.compiled_fma`'s loop on a large array or once loaded, else
    :mod:`.numpy_fma`'s emulation)."""
    lr, alpha, eps, weight_decay, momentum, centered = hyper
    if weight_decay:
        grad = fused.add_scaled(grad, value, weight_decay)
    square *= alpha
    np.copyto(square, fused.addcmul(square, grad, grad, 1.0 - alpha))
    if centered:
        np.copyto(average, fused.lerp(average, grad, 1.0 - alpha))
        denominator = np.sqrt(fused.addcmul(square, average, average, -1.0))
    else:
        denominator = np.sqrt(square)
    denominator += eps
    if momentum > 0.0:
        buffer *= momentum
        buffer += np.divide(grad, denominator, out=denominator)
        fused.add_scaled_into(value, buffer, -lr)
    else:
        value += np.divide(np.multiply(grad, -lr), denominator, out=denominator)


def _sgd_numpy(fused, value, grad, buffer, lr, momentum, dampening, weight_decay, nesterov, first):
    """torch's single-tensor SGD, line for line (each ``add(alpha=)`` one fused multiply-add,
    the backend's ``fused``), written into ``value`` and ``buffer`` (which may be the same
    array when there is no momentum)."""
    direction = fused.add_scaled(grad, value, weight_decay) if weight_decay else grad
    if momentum:
        if first:
            np.copyto(buffer, direction)
        else:
            buffer *= momentum
            if dampening:
                np.copyto(buffer, fused.add_scaled(buffer, direction, 1.0 - dampening))
            else:
                buffer += direction
        if nesterov:
            direction = fused.add_scaled(direction, buffer, momentum)
        else:
            direction = buffer
    fused.add_scaled_into(value, direction, -lr)


def _adam_numpy(fused, value, grad, first, second, step, lr, beta1, beta2, eps, weight_decay,
                decoupled):  # fmt: skip
    """torch's single-tensor Adam, line for line (``add(alpha=)``, ``lerp_`` and ``addcmul_``
    each one fused multiply-add, the backend's ``fused``), written into ``value``, ``first``
    and ``second`` (arrays of one float dtype and shape)."""
    if weight_decay:
        if decoupled:
            value *= 1.0 - lr * weight_decay
        else:
            grad = fused.add_scaled(grad, value, weight_decay)
    np.copyto(first, fused.lerp(first, grad, 1.0 - beta1))
    second *= beta2
    np.copyto(second, fused.addcmul(second, grad, grad, 1.0 - beta2))
    denominator = np.sqrt(second)
    denominator /= (1.0 - beta2**step) ** 0.5
    denominator += eps
    update = np.multiply(first, -(lr / (1.0 - beta1**step)))
    update /= denominator
    value += update


def _adam_composed(value, grad, first, second, step, lr, beta1, beta2, eps, weight_decay,
                   decoupled):  # fmt: skip
    """Adam as NumPy operations, each product and sum rounded apart, on new arrays: for what
    the fused forms do not take (buffers of another dtype than the value's, a model cast after
    its optimizer stepped), NumPy's type promotion between them."""
    if weight_decay:
        if decoupled:
            value = np.multiply(value, 1.0 - lr * weight_decay)
        else:
            grad = np.add(grad, np.multiply(value, weight_decay))
    moment = np.subtract(grad, first)
    moment *= 1.0 - beta1
    moment += first
    squares = np.multiply(grad, 1.0 - beta2)
    squares *= grad
    variance = np.multiply(second, beta2)
    variance += squares
    denominator = np.sqrt(variance)
    denominator /= (1.0 - beta2**step) ** 0.5
    denominator += eps
    update = np.multiply(moment, lr / (1.0 - beta1**step))
    update /= denominator
    return np.subtract(value, update), moment, variance
