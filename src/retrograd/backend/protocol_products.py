"""The gradients of products in the backend protocol: the backward of ``prod``, ``prod_dim``
and ``cumprod``, kernels with defaults composed of the other primitives.

Each takes torch's formula (``grad * out / x``) where the input holds no zero and an exact one
where it does: a choice made on the values. Made inside one backend call, the choice belongs
to the kernel: a step captured by ``rg.capture`` records the one call, which makes the choice
again on the values of each replay (a host read made by the step itself is refused there), so
the replay computes what the eager step computes, bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["ProductProtocol", "along", "reverse_cumsum"]


def along(dim: int, index: Any) -> tuple:
    """The index tuple that takes ``index`` along ``dim`` and everything elsewhere."""
    return (slice(None),) * dim + (index,)


def reverse_cumsum(backend: Any, g: Any, dim: int) -> Any:
    """Sums from each position to the end along ``dim`` (cumsum's backward)."""
    return backend.flip(backend.cumsum(backend.flip(g, (dim,)), dim), (dim,))


def _exclusive_prod(backend: Any, x: Any, dim: int) -> Any:
    """Product of the other elements along ``dim``, exact where ``x`` has zeros."""
    shape = backend.shape(x)
    n = shape[dim]
    if n <= 1:  # an empty dimension has no products to take
        return backend.ones_like(x)
    one = backend.ones(shape[:dim] + (1,) + shape[dim + 1 :], backend.dtype(x), backend.device(x))
    head = along(dim, slice(0, n - 1))
    before = backend.cat([one, backend.slice(backend.cumprod(x, dim), head)], dim)
    after = backend.flip(
        backend.cat([one, backend.slice(backend.cumprod(backend.flip(x, (dim,)), dim), head)], dim),
        (dim,),
    )
    return backend.mul(before, after)


class ProductProtocol:
    """The backward of ``prod``, ``prod_dim`` and ``cumprod`` (a mixin of
    :class:`~retrograd.backend.protocol.Backend`). On the autodiff backend (a gradient taken
    with ``create_graph``) the defaults' primitives are recorded, so they differentiate
    again."""

    def prod_backward(self, grad: Any, x: Any, out: Any, shape: tuple[int, ...]) -> Any:
        """The gradient of ``sum(grad * prod(x))`` in ``x`` (of ``shape``), from ``out =
        prod(x)``: torch's ``grad * out / x`` without zeros, inf and NaN as its; with zeros
        the exclusive products (zeros where two zeros meet an infinity or NaN, as torch's)."""
        zeros = self.equal_elem(x, 0.0)
        if not self.any(zeros):
            return self.mul(self.expand(grad, shape), self.div(self.expand(out, shape), x))
        flat = self.reshape(x, (math.prod(shape),))
        if int(self.to_numpy(self.sum(self.cast(zeros, "int64")))) > 1 and self.any(
            self.logical_or(self.is_inf(x), self.is_nan(x))
        ):
            return self.zeros_like(x)  # torch: zeros (no inf * 0)
        # (with two zeros and the rest finite the exclusive products are zeros too, and their
        # derivatives, taken under create_graph, are the second derivatives: nonzero at the
        # zeros)
        return self.mul(
            self.expand(grad, shape), self.reshape(_exclusive_prod(self, flat, 0), shape)
        )

    def prod_dim_backward(self, grad: Any, x: Any, out: Any, dim: int) -> Any:
        """:meth:`prod_backward` for ``out = prod_dim(x, dim)`` (``dim`` kept)."""
        if not self.any(self.equal_elem(x, 0.0)):  # torch's result / input
            return self.mul(grad, self.div(out, x))
        return self.mul(grad, _exclusive_prod(self, x, dim))

    def cumprod_backward(self, grad: Any, x: Any, out: Any, dim: int) -> Any:
        """The gradient of ``sum(grad * cumprod(x, dim))`` in ``x``, from ``out``: torch's
        ``reverse_cumsum(grad * out) / x`` without zeros, exact with them."""
        if math.prod(self.shape(x)) <= 1 or self.shape(x)[dim] == 1:  # torch: the gradient itself
            return grad
        if not self.any(self.equal_elem(x, 0.0)):
            return self.div(reverse_cumsum(self, self.mul(grad, out), dim), x)
        # Exact with zeros: d out_i / d x_k = prod_{j<=i, j!=k} x_j for i >= k. Row k of a
        # (n, n) matrix holds x with positions j <= k replaced by one; its cumprod along j
        # gives prod_{k<j<=i} x_j, and the exclusive prefix product supplies prod_{j<k} x_j.
        last = len(self.shape(x)) - 1
        xs = self.swap_dims(x, dim, last)
        gs = self.swap_dims(grad, dim, last)
        shape = self.shape(xs)
        n = shape[-1]
        positions = self.arange(0, n, 1, "int64", self.device(x))
        strictly_after = self.greater(
            self.reshape(positions, (1, n)), self.reshape(positions, (n, 1))
        )
        rows = self.expand(self.reshape(xs, shape[:-1] + (1, n)), shape[:-1] + (n, n))
        rows = self.mask_where(self.ones_like(rows), strictly_after, rows)
        # The terms j < k are left out (their gradient taken as zero). Under create_graph
        # (recorded on the autodiff backend) torch's O(n^2) form keeps every later term,
        # whose derivatives are the second derivatives. Otherwise torch's O(n) form, whose
        # row of the first zero is all that is kept of this (the rows before and after it are
        # replaced below): past the next zero its factors are ones and its gradients zeros,
        # so the product up to that zero carries on, times zero (NaN where it is infinite).
        zeros = self.cast(self.equal_elem(xs, 0.0), "int64")
        counts = self.cumsum(zeros, last)
        left_out = self.lower(self.reshape(positions, (1, n)), self.reshape(positions, (n, 1)))
        if not self.is_autodiff:
            others = self.sub(
                self.reshape(counts, shape[:-1] + (1, n)), self.reshape(zeros, shape + (1,))
            )
            past_next_zero = self.logical_and(self.greater_elem(others, 0), strictly_after)
            rows = self.mask_where(rows, past_next_zero, self.ones_like(rows))
            left_out = self.logical_or(left_out, past_next_zero)
        partial = self.cumprod(rows, last + 1)
        grads = self.expand(self.reshape(gs, shape[:-1] + (1, n)), shape[:-1] + (n, n))
        weighted = self.mul(partial, self.mask_fill(grads, left_out, 0.0))
        inner = self.reshape(self.sum_dim(weighted, (last + 1,)), shape)
        before = self.cat(
            [
                self.ones(shape[:-1] + (1,), self.dtype(x), self.device(x)),
                self.slice(self.cumprod(xs, last), along(last, slice(0, n - 1))),
            ],
            last,
        )
        grad_x = self.mul(before, inner)
        if not self.is_autodiff:
            # torch's O(n) form: before the first zero its quotient (reverse_cumsum(grad *
            # out) / x over the terms there: inf / inf is NaN, as its), zero past it
            first = self.equal_elem(counts, 0)
            terms = self.mul(gs, self.swap_dims(out, dim, last))
            terms = self.mask_fill(terms, self.logical_not(first), 0.0)
            quotient = self.div(reverse_cumsum(self, terms, last), xs)
            grad_x = self.mask_where(grad_x, first, quotient)
            grad_x = self.mask_fill(grad_x, self.greater_elem(self.sub(counts, zeros), 0), 0.0)
        return self.swap_dims(grad_x, dim, last)
