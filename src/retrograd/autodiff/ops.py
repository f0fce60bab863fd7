"""Every differentiable operation, each declared once: forward, backward rule, boundedness.

An entry reads ``unary("exp", lambda B, g, out: B.mul(g, out))``:

- the *forward* is the backend-protocol method of the same name (or ``forward=``), and it is
  also the op's *retro-forward*: the checkpointer recomputes a dropped output by calling it
  again on the parents' outputs (:meth:`Op.run_forward`);
- each *backward rule* (vector-Jacobian product) takes the backend ``B`` it runs on and the
  incoming gradient ``g``, then names what it reads: ``out`` (the output), ``aux`` (a second,
  untracked output such as indices), an input (``x``, ``y``, ...), an input's ``x_shape`` or
  ``x_dtype``, or a parameter. The engine reads those names once, here, and saves exactly
  what the rules of the inputs that need a gradient will read;
- ``memory_bound`` marks ops cheap enough to recompute (elementwise, shape, slicing), as Burn
  marks them; the others (matmul, reductions, cumulative, gather/scatter/select, masks, sort)
  are compute-bound;
- ``broadcast`` ops get their input gradients summed back to the input shapes, once, by the
  engine (:func:`sum_to_shape`); ``broadcast="batch"`` broadcasts only leading (batch) dims;
- a ``joint`` op has one rule for all its differentiable inputs (a fused backward kernel that
  computes them together, as attention's): it is given as the rule of each of them, takes
  ``(B, g, needs, ...)``, ``needs`` saying which inputs want a gradient, and returns one
  gradient (or ``None``) per input. The engine calls it once per node.

Rules are written against the backend protocol only, so running them on the autodiff backend
records them too: that is ``backward(create_graph=True)``.
"""

from __future__ import annotations

import cmath
import inspect
import math
import struct
from collections.abc import Callable
from typing import Any

from ..backend.protocol_products import along, reverse_cumsum
from ..errors import AutodiffError, DerivativeNotImplementedError, InvalidArgumentError

__all__ = ["OPS", "Op", "sum_to_shape", "unpack"]

OPS: dict[str, Op] = {}

_TWO_OVER_SQRT_PI = 1.1283791670955126
_SQRT_TWO_PI = math.sqrt(2.0 * math.pi)
_SQRT_HALF = 0.7071067811865476  # C's M_SQRT1_2


class Plan:
    """What an op saves, and how each rule finds its arguments, for one requires-grad mask.

    The node keeps ``params`` = (op parameters, then the ``meta`` shapes/dtypes, then ``aux``)
    and at backward the engine lays out ``env = (out, *saved inputs, *node.params)``;
    ``arguments[i]`` lists the ``env`` positions the rule of input ``i`` reads.
    """

    __slots__ = ("arguments", "meta", "save_out", "saved_inputs")

    def __init__(self, op: Op, mask: tuple[bool, ...]):
        if op.variadic:  # one rule for every input, reading only the params
            self.saved_inputs, self.save_out, self.meta, self.arguments = (), False, (), ()
            return
        wanted = [op.rule_sources[i] for i, tracked in enumerate(mask) if tracked and op.vjps[i]]
        sources = {source for rule in wanted for source in rule}
        self.saved_inputs = tuple(sorted(i for kind, i in sources if kind == "input"))
        self.save_out = ("out", 0) in sources
        self.meta = tuple(sorted((kind, i) for kind, i in sources if kind in ("shape", "dtype")))
        base_params = 1 + len(self.saved_inputs)
        base_meta = base_params + len(op.params)
        aux_position = base_meta + len(self.meta)

        def position(source: tuple[str, int]) -> int:
            kind, i = source
            if kind == "out":
                return 0
            if kind == "aux":
                return aux_position
            if kind == "input":
                return 1 + self.saved_inputs.index(i)
            if kind == "param":
                return base_params + i
            return base_meta + self.meta.index(source)

        self.arguments = tuple(
            tuple(position(s) for s in op.rule_sources[i]) if tracked and op.vjps[i] else None
            for i, tracked in enumerate(mask)
        )


class Op:
    """A differentiable operation of the autodiff backend. See the module docstring."""

    __slots__ = (
        "_plans",
        "_twins",
        "accumulate",
        "aux",
        "broadcast",
        "complex_vjps",
        "forward",
        "inputs",
        "joint",
        "links",
        "memory_bound",
        "name",
        "on_release",
        "params",
        "recomputable",
        "rule_sources",
        "variadic",
        "vjps",
        "without_gradient",
    )

    def __init__(
        self,
        name: str,
        inputs: tuple[str, ...],
        params: tuple[str, ...],
        vjps: tuple[Callable | None, ...] | None,
        *,
        memory_bound: bool,
        broadcast: bool = False,
        aux: bool = False,
        forward: Callable | None = None,
        variadic: bool = False,
        joint: bool = False,
        recomputable: bool = True,
        accumulate: Callable | None = None,
        without_gradient: Callable | None = None,
        links: dict[int, tuple[tuple[int, str], ...]] | None = None,
    ):
        self.name = name
        self.joint = joint
        self.inputs = inputs
        self.params = params
        self.vjps = vjps
        self.memory_bound = memory_bound
        self.broadcast = broadcast
        self.aux = aux
        self.forward = forward
        self.variadic = variadic
        #: its forward can be rerun to recompute its output (a collective's cannot)
        self.recomputable = recomputable
        #: for a unary op whose rule returns a new array (a slice's zeros with the gradient
        #: in them): ``(B, acc, g, *params)``, the rule's result added into the sum ``acc``
        #: of its input's gradient, which the engine passes when it owns one
        self.accumulate = accumulate
        #: for a variadic op: ``(*params) -> bool``, whether its step runs (its rule given
        #: ``None`` for ``g``) when no gradient reached it though the backward walks it, as
        #: torch's engine runs every node of the graph it walks (a module's backward-hook
        #: boundary then sees ``None`` or zeros where torch's does)
        self.without_gradient = without_gradient
        #: under ``create_graph`` only: ``{i: ((j, kind), ...)}``, the gradient of input ``i``
        #: recorded as a function of input ``j`` too (``gradient_link``), as torch's backward
        #: kernel, which takes ``j``, makes it one: ``kind`` is that derivative, ``"zeros"``
        #: (``j`` only compared or its shape read: max pooling's ``self``), ``"none"`` (torch's
        #: double backward gives ``j`` none: a convolution's bias gradient in its input) or
        #: ``"refused"`` (torch's backward kernel has no derivative). The zeros take the
        #: gradient's shape when ``j == i``, else the saved input ``j``'s (no link where the
        #: rules do not read it). A first-order backward never sees it, and nothing is saved
        #: for it
        self.links = links
        #: ``node -> None``, called before a consuming backward lets go of a node's params
        #: and parents, where something is read from them later: torch's name of the node
        #: (``linear``'s bias, a pool's dims, a custom Function's class), set by the layers
        #: above; a custom Function's context learns its saved tensors are freed
        self.on_release: Callable | None = None
        self.rule_sources = tuple(self._sources(rule) if rule else () for rule in vjps or ())
        self._plans: dict[tuple[bool, ...], Plan] = {}
        #: the rules for complex operands (:func:`complex_rules`), ``None`` where the op
        #: has none: its record with a complex operand is refused
        self.complex_vjps: tuple | None = None
        self._twins: dict[tuple[bool, ...], Op] = {}
        if name in OPS:
            raise ValueError(f"op {name!r} declared twice")
        OPS[name] = self

    @property
    def differentiable(self) -> bool:
        return self.vjps is not None

    def _sources(self, rule: Callable) -> tuple[tuple[str, int], ...]:
        # after (B, g), or (B, g, needs) for a joint rule
        names = list(inspect.signature(rule).parameters)[3 if self.joint else 2 :]
        if self.variadic:
            return ()
        sources = []
        for name in names:
            if name in ("out", "aux"):
                sources.append((name, 0))
            elif name in self.inputs:
                sources.append(("input", self.inputs.index(name)))
            elif name in self.params:
                sources.append(("param", self.params.index(name)))
            elif name.endswith(("_shape", "_dtype")) and name[:-6] in self.inputs:
                sources.append((name[-5:], self.inputs.index(name[:-6])))
            else:
                raise TypeError(f"op {self.name!r}: a backward rule reads unknown {name!r}")
        return tuple(sources)

    def plan(self, mask: tuple[bool, ...]) -> Plan:
        plan = self._plans.get(mask)
        if plan is None:
            plan = self._plans[mask] = Plan(self, mask)
        return plan

    def complex_twin(self, real_inputs: tuple[bool, ...]) -> Op:
        """This op with its complex rules, recorded in its place when an operand is complex
        (``real_inputs`` saying which are real: the gradient of a real input is the real part
        of its rule's, torch's ``handle_r_to_c``). Same name and forward (a checkpointer
        recomputes it alike); not in :data:`OPS`."""
        twin = self._twins.get(real_inputs)
        if twin is None:
            twin = object.__new__(Op)
            for slot in Op.__slots__:
                setattr(twin, slot, getattr(self, slot))
            rules = self.complex_vjps
            twin.vjps = tuple(
                _real_part(rule) if rule is not None and real else rule
                for rule, real in zip(rules, real_inputs + (False,) * len(rules))
            )
            twin.rule_sources = tuple(twin._sources(rule) if rule else () for rule in rules)
            twin._plans, twin._twins = {}, {}
            self._twins[real_inputs] = twin
        return twin

    def run_forward(self, backend: Any, values: list, params: tuple) -> Any:
        """Run the forward on ``backend`` with the input ``values`` and the op's ``params``:
        when the op is recorded, and as its retro-forward when the checkpointer recomputes
        its output."""
        if self.forward is not None:
            if self.variadic:
                return self.forward(backend, values, *params)
            return self.forward(backend, *values, *params)
        return getattr(backend, self.name)(*values, *params)

    def __repr__(self) -> str:
        kind = "memory-bound" if self.memory_bound else "compute-bound"
        return f"Op({self.name!r}, {kind})"


def unary(name, vjp, params=(), *, memory_bound=True, **options):
    return Op(name, ("x",), params, (vjp,), memory_bound=memory_bound, **options)


def binary(name, vjp_x, vjp_y, params=(), *, memory_bound=True, broadcast=True, **options):
    return Op(
        name,
        ("x", "y"),
        params,
        (vjp_x, vjp_y),
        memory_bound=memory_bound,
        broadcast=broadcast,
        **options,
    )


def reduction(name, vjp, params=(), **options):
    return Op(name, ("x",), params, (vjp,), memory_bound=False, **options)


def untracked(name, inputs=("x",), params=()):
    """An op whose output never carries a gradient (comparisons, argmax, ...)."""
    return Op(name, inputs, params, None, memory_bound=True)


# -- helpers the rules share ---------------------------------------------------------------------
def sum_to_shape(B, g, shape):
    """Sum a broadcast gradient back to ``shape`` (the one place broadcasting is undone)."""
    g_shape = B.shape(g)
    if g_shape == shape:
        return g
    lead = len(g_shape) - len(shape)
    dims = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g_shape[lead + i] != 1
    )
    if dims:
        g = B.sum_dim(g, dims)
    return B.reshape(g, shape) if B.shape(g) != shape else g


def zeros_for(B, g, shape):
    """Zeros of ``shape`` in ``g``'s dtype and device."""
    return B.zeros(shape, B.dtype(g), B.device(g))


def _zeros_like_rule(B, g):
    return B.zeros_like(g)


def _prod_vjp(B, g, x, out, x_shape):
    return B.prod_backward(g, x, out, x_shape)


def _prod_dim_vjp(B, g, x, out, dim):
    return B.prod_dim_backward(g, x, out, dim)


def _cumprod_vjp(B, g, x, out, dim):
    return B.cumprod_backward(g, x, out, dim)


def _extreme_vjp(B, g, x, out):
    """max()/min() of all elements: the gradient is shared evenly between ties (PyTorch)."""
    # a NaN result ties with the NaNs of x (torch's evenly_distribute_backward)
    tied = B.logical_or(B.equal(x, out), B.logical_and(B.is_nan(x), B.is_nan(out)))
    hits = B.cast(tied, B.dtype(g))
    return B.mul(hits, B.div(g, B.sum(hits)))


#: The lowest finite number of each float dtype: the log of a zero gradient in
#: :func:`_logcumsumexp_vjp`, as torch's ``numeric_limits<scalar_t>::lowest()``
_LOWEST = {
    "float64": -1.7976931348623157e308,
    "float32": -3.4028234663852886e38,
    "bfloat16": -3.3895313892515355e38,
    "float16": -65504.0,
}


def _logcumsumexp_vjp(B, g, x, out, dim):
    """torch's ``logcumsumexp_backward``, term for term, so that its NaN at infinite inputs
    (``inf - inf`` in ``x_i - out_j``) and its zeros come out alike: the positive and the
    negative parts of ``g`` summed in log space by a reversed :meth:`logcumsumexp`. Written
    with the protocol only, and reading ``x`` and ``out``, it is differentiable again
    (``create_graph``), a size-1 dimension too."""
    if math.prod(B.shape(g)) == 0:
        return g
    lowest = _LOWEST[B.dtype(g)]
    log_magnitude = B.log(B.abs(g))

    def part(sign_kept):
        logs = B.mask_fill(log_magnitude, B.logical_not(sign_kept), lowest)
        shifted = B.flip(B.sub(logs, out), (dim,))
        summed = B.flip(B.logcumsumexp(shifted, dim), (dim,))
        return B.exp(B.add(summed, x))

    return B.sub(part(B.greater_elem(g, 0.0)), part(B.lower_elem(g, 0.0)))


def _cumulative_extreme_vjp(B, g, x_shape, aux, dim):
    return B.scatter_add(zeros_for(B, g, x_shape), aux, g, dim)


def _selected_vjp(B, g, x_shape, aux, dim):
    return B.scatter_assign(zeros_for(B, g, x_shape), aux, g, dim)


def _pow_x_vjp(B, g, x, y):
    grad = B.mul(g, B.mul(y, B.pow(x, B.sub_scalar(y, 1.0))))
    return B.mask_fill(grad, B.equal_elem(y, 0.0), 0.0)


def _pow_y_vjp(B, g, x, y, out):
    # torch: zero where x == 0 and y >= 0; elsewhere out * log(x) (-inf * inf at 0 ** -y)
    zero_grad = B.logical_and(B.equal_elem(x, 0.0), B.greater_equal_elem(y, 0.0))
    grad = B.mul(g, B.mul(out, B.log(B.mask_fill(x, zero_grad, 1.0))))
    return B.mask_fill(grad, zero_grad, 0.0)


def _pow_scalar_vjp(B, g, x, s):
    if s == 0:
        return B.zeros_like(g)
    return B.mul(g, B.mul_scalar(B.pow_scalar(x, s - 1.0), s))


def _square_vjp(B, g, x):
    """``2 g x``. Recorded (``create_graph``), torch's: its ``square`` is ``pow(x, 2)``, whose
    backward ``g * (2 * x.pow(1))`` keeps the gradient's own gradient connected to ``x``
    through ``pow(x, 1)`` (a third derivative is zeros, not "does not require grad"). A
    first-order backward skips that pass: ``x.pow(1)`` is ``x``, and doubling is exact."""
    if B.is_autodiff:
        return _pow_scalar_vjp(B, g, x, 2.0)
    return B.mul(B.mul_scalar(g, 2.0), x)


def _rpow_scalar_vjp(B, g, x, out, s):
    if s > 0:  # torch's pow_backward_exponent: grad * (result * log(base))
        return B.mul(g, B.mul_scalar(out, math.log(s)))
    if s == 0:
        # log(0) = -inf, kept out of where x >= 0 before multiplying by g: the result stays
        # linear in g there (a zero slope, not 0 * inf = NaN, when differentiated again)
        finite = B.greater_equal_elem(x, 0.0)
        slope = B.mul_scalar(B.mask_fill(out, finite, 1.0), -math.inf)
        return B.mul(g, B.mask_fill(slope, finite, 0.0))
    # log of a negative base: NaN, through ``out`` as torch's (a NaN second derivative too)
    return B.mul_scalar(B.mul(g, out), math.nan)


def _floor_quotient(B, x, y):
    """torch's ``div_floor_floating`` (the remainder's gradient is ``-g * (x // y)``): the
    exact multiple ``x - fmod(x, y)`` over ``y``, one less where ``fmod``'s sign is not
    ``y``'s, floored and rounded up where the division left it more than half below, so
    that a quotient ``x / y`` rounding onto an integer is floored as torch floors it. A
    constant (torch's floor division has no derivative: 0, not the 0 / 0 of a division by 0
    under ``create_graph``)."""
    x, y = B.detach(x), B.detach(y)
    mod = B.fmod(x, y)
    div = B.div(B.sub(x, mod), y)
    flip = B.not_equal(B.lower_elem(mod, 0.0), B.lower_elem(y, 0.0))
    div = B.mask_where(div, B.logical_and(B.not_equal_elem(mod, 0.0), flip), B.sub_scalar(div, 1.0))
    floored = B.floor(div)
    up = B.greater_elem(B.sub(div, floored), 0.5)
    floored = B.mask_where(floored, up, B.add_scalar(floored, 1.0))
    quotient = B.div(x, y)
    # a finite x whose quotient overflows (1 / 1e-310): torch's scalar fmod keeps (x - mod)
    # / y infinite; the torch backend's vectorized fmod is NaN there
    overflowed = B.logical_and(
        B.equal_elem(B.abs(quotient), math.inf), B.lower_elem(B.abs(x), math.inf)
    )
    floored = B.mask_where(floored, overflowed, quotient)
    return B.mask_where(floored, B.equal_elem(y, 0.0), quotient)


def _clamp_vjp(B, g, x, lo, hi):
    # torch's rule: the gradient passes where lo <= x <= hi (both bounds included), so
    # nowhere at NaN, nor anywhere when lo > hi
    inside = None if lo is None else B.greater_equal_elem(x, lo)
    if hi is not None:
        below = B.lower_equal_elem(x, hi)
        inside = below if inside is None else B.logical_and(inside, below)
    return g if inside is None else B.mask_fill(g, B.logical_not(inside), 0.0)


def _silu_vjp(B, g, x):
    return B.silu_backward(g, x)


def _inverse_permutation(dims):
    inverse = [0] * len(dims)
    for position, d in enumerate(dims):
        inverse[d] = position
    return tuple(inverse)


def _repeat_dim_vjp(B, g, x_shape, dim, times):
    n = x_shape[dim]
    split = x_shape[:dim] + (times, n) + x_shape[dim + 1 :]
    return B.reshape(B.sum_dim(B.reshape(g, split), (dim,)), x_shape)


#: each float dtype's machine epsilon (torch's ``numeric_limits<scalar_t>::epsilon()``)
_EPSILON = {
    "float64": 2.220446049250313e-16,
    "float32": 1.1920928955078125e-07,
    "float16": 0.0009765625,
    "bfloat16": 0.0078125,
}


def _tiny(B, x):
    """Where torch's ``i1``/``i1e`` backward takes the slope at 0, 1/2: ``|x|`` not above the
    dtype's epsilon (NaN included), where ``i1(x) / x`` loses its digits or underflows; and
    ``x`` with epsilon there (torch's ``safe_self``: no NaN reaches the second derivative)."""
    epsilon = _EPSILON[B.dtype(x)]
    tiny = B.logical_not(B.greater_elem(B.abs(x), epsilon))
    return tiny, B.mask_fill(x, tiny, epsilon)


def _i1_slope(B, x, out):
    """``i1'(x) = i0(x) - i1(x) / x``, 1/2 where ``x`` is tiny (:func:`_tiny`)."""
    tiny, safe = _tiny(B, x)
    slope = B.sub(B.i0(safe), B.mul(out, B.recip(safe)))  # (torch's, to the bit)
    return B.mask_fill(slope, tiny, 0.5)


def _no_derivative(op, argument):
    """The error of a gradient torch does not implement either (torch: "the derivative for
    ... is not implemented"), raised when backward reaches the op, as torch's is."""
    return DerivativeNotImplementedError(  # (torch's NotImplementedError)
        f"{op}: the derivative with respect to {argument} is not implemented (nor in torch); "
        f"detach() that input, or keep the op out of the differentiated path"
    )


def _refuse(op, argument):
    def rule(B, g):
        raise _no_derivative(op, argument)

    return rule


def _over_x(B, x, value):
    """``(x == 0, value / x)``, the quotient finite where ``x`` is 0 (the caller puts the limit
    it knows there)."""
    zero = B.equal_elem(x, 0.0)
    return zero, B.div(value, B.mask_fill(x, zero, 1.0))


def _i1e_slope(B, x, out):
    """torch's ``i1e`` backward: ``i0e(x) - i1e(x) (sign(x) + 1/x)``, 1/2 where ``x`` is
    tiny (:func:`_tiny`)."""
    tiny, safe = _tiny(B, x)
    inverse = B.div(B.ones_like(x), safe)
    slope = B.sub(B.i0e(safe), B.mul(out, B.add(B.sign(safe), inverse)))
    return B.mask_fill(slope, tiny, 0.5)


def _spherical_j0_slope(B, x, out):
    """``(cos x - sin(x)/x) / x``, from its Taylor series ``-x/3 + x^3/30 - x^5/840`` where
    ``|x| < 0.01`` (the difference there cancels: 1e-4 relative at ``x = 1e-4``)."""
    small = B.lower_elem(B.abs(x), 0.01)
    _, slope = _over_x(B, x, B.sub(B.cos(x), out))
    x2 = B.square(x)
    inner = B.add_scalar(B.mul_scalar(x2, -1 / 840), 1 / 30)
    series = B.mul(x, B.add_scalar(B.mul(x2, inner), -1 / 3))
    return B.mask_where(slope, small, series)


def _bessel_slope(B, x, out, kind):
    """The derivative of the Bessel-type function ``kind`` at ``x`` (``out`` its value), from
    the functions of the family (``J1' = J0 - J1/x``, ``K1' = -K0 - K1/x``; the scaled
    ``k0e = exp(x) K0`` gains its own value)."""
    f = lambda name: B.bessel_function(x, name)  # noqa: E731
    if kind in ("bessel_j0", "bessel_y0", "modified_bessel_k0"):
        return B.neg(f(kind[:-1] + "1"))
    if kind == "modified_bessel_i0":
        return f("modified_bessel_i1")
    if kind == "scaled_modified_bessel_k0":
        return B.sub(out, f("scaled_modified_bessel_k1"))
    if kind == "spherical_bessel_j0":
        return _spherical_j0_slope(B, x, out)
    if kind == "airy_ai":  # Ai' has no kernel in torch (nor a derivative: torch's is none)
        raise _no_derivative(kind, "input")
    zero, ratio = _over_x(B, x, out)  # the order-1 functions: f1 / x
    if kind in ("bessel_j1", "bessel_y1", "modified_bessel_i1"):
        slope = B.sub(f(kind[:-1] + "0"), ratio)
        # J1, I1 ~ x/2 at 0 (Y1 is singular there: its value, -inf, rules)
        return B.mask_fill(slope, zero, 0.5) if kind != "bessel_y1" else slope
    if kind == "modified_bessel_k1":
        return B.neg(B.add(f("modified_bessel_k0"), ratio))
    # scaled_modified_bessel_k1: d(exp(x) K1) = k1e - k0e - k1e / x
    return B.sub(B.sub(out, f("scaled_modified_bessel_k0")), ratio)


def _xlog1py_x_vjp(B, g, y, x):
    """torch's: ``xlog1py(g, y)``, 0 where ``x`` is 0 and ``y <= -1``."""
    grad = B.xlog1py(g, y)
    return B.mask_fill(grad, B.logical_and(B.equal_elem(x, 0.0), B.lower_equal_elem(y, -1.0)), 0.0)


def _xlogy_x_vjp(B, g, y, x):
    """torch's: ``xlogy(g, y)`` (0 for a zero ``g``, even where ``log(y)`` is infinite), 0
    where ``x`` is 0 and ``y <= 0``."""
    grad = B.xlogy(g, y)
    return B.mask_fill(grad, B.logical_and(B.equal_elem(x, 0.0), B.lower_equal_elem(y, 0.0)), 0.0)


def _xlogy_y_vjp(B, g, x, y):
    """torch's plain ``g x / y``: NaN where ``x`` and ``y`` are both 0 (0 / 0), as torch's,
    and no mask elsewhere (a mask would cut the derivative in ``x``, ``g / y``, from a
    second derivative that torch's keeps)."""
    return B.div(B.mul(g, x), y)


def _gamma_density(B, a, x):
    """``exp((a - 1) log x - x - lgamma(a))``, torch's gradient of ``gammainc`` in ``x``."""
    return B.exp(B.sub(B.sub(B.mul(B.sub_scalar(a, 1.0), B.log(x)), x), B.lgamma(a)))


def _cholesky_vjp(B, g, out):
    """torch's ``cholesky_backward``: with ``M = tril(L^T g)``, the gradient is
    ``L^-T (M + tril(M, -1)^T) / 2 L^-1`` (symmetric)."""
    n = B.shape(out)[-1]
    positions = B.arange(0, n, 1, "int64", B.device(out))
    rows, cols = B.reshape(positions, (n, 1)), B.reshape(positions, (1, n))
    m = B.mask_fill(B.matmul(_mh(B, out), g), B.lower(rows, cols), 0.0)
    strict = B.mask_fill(m, B.lower_equal(rows, cols), 0.0)
    middle = B.mul_scalar(B.add(m, _mh(B, strict)), 0.5)
    inverse = B.inverse(out)
    return B.matmul(B.matmul(_mh(B, inverse), middle), inverse)


def _slogdet_vjp(B, g, x):
    """``d log|det A| = tr(A^-1 dA)``: the gradient is ``g A^-H``, per matrix."""
    return B.mul(B.reshape(g, B.shape(g) + (1, 1)), _mh(B, B.inverse(x)))


def _matmul_x_vjp(B, g, y):
    return B.matmul(g, B.swap_dims(y, -1, -2))


def _matmul_y_vjp(B, g, x):
    return B.matmul(B.swap_dims(x, -1, -2), g)


# -- elementwise binary ------------------------------------------------------------------------
binary("add", lambda B, g: g, lambda B, g: g)
# torch's write through ``.data`` into a tensor computed in the graph: the written values ``y``
# (untracked), the gradient passing whole to the tensor written into (tensor/views.py)
binary("data_write", lambda B, g: g, None, forward=lambda B, x, y: y, broadcast=False)


def _data_replace_vjp(B, g, x_shape, x_dtype):
    """The gradient reaching a tensor computed in the graph whose ``.data`` was set to values of
    another shape or dtype, passed on to what it was computed from as torch's engine passes it
    (``validate_outputs``): summed to the old shape where that expands to the gradient's, cast
    to the old dtype; a shape it does not expand to is torch's "invalid gradient" error."""
    shape = tuple(B.shape(g))
    if shape != tuple(x_shape):
        lead = len(shape) - len(x_shape)
        if lead < 0 or any(n not in (1, m) for n, m in zip(x_shape, shape[lead:])):
            raise AutodiffError(
                f"backward: invalid gradient at index 0 - got {list(shape)} but expected shape "
                f"compatible with {list(x_shape)} (a tensor whose .data was set to another "
                "shape, as torch refuses it)"
            )
        g = sum_to_shape(B, g, tuple(x_shape))
    return B.cast(g, x_dtype) if B.dtype(g) != x_dtype else g


# torch's ``y.data = t`` with ``t`` of another shape or dtype, on a ``y`` computed in the graph:
# ``y`` takes ``t``'s values and stays in its graph (tensor/core.py)
binary("data_replace", _data_replace_vjp, None, forward=lambda B, x, y: y, broadcast=False)
# the values ``y`` written over ``x``, the gradient passing whole to both: torch's backward of a
# fill through positions that share memory, where a location's last position was not written
# (its copy of the gradient back wins for ``x``, each written position's goes to ``y``)
binary("overwrite_sharing_gradient", lambda B, g: g, lambda B, g: g, forward=lambda B, x, y: y,
       broadcast=False)  # fmt: skip
binary("sub", lambda B, g: g, lambda B, g: B.neg(g))
binary("mul", lambda B, g, y: B.mul(g, y), lambda B, g, x: B.mul(g, x))
# the divisor's rule is torch's ``div_tensor_other_backward``, ``-grad * ((x / y) / y)``, to the
# bit, and holds what torch saves (both operands, not the quotient): the dividend is often held
# anyway (``x / x.norm()``, ``e / e.sum()`` of an ``exp`` output)
binary(
    "div",
    lambda B, g, y: B.div(g, y),
    lambda B, g, x, y: B.neg(B.mul(g, B.div(B.div(x, y), y))),
)
binary("pow", _pow_x_vjp, _pow_y_vjp)
binary("remainder", lambda B, g: g, lambda B, g, x, y: B.neg(B.mul(g, _floor_quotient(B, x, y))))


def _atan2_vjp(B, g, x, y, numerator):
    # torch's atan2_backward: grad * numerator * reciprocal(x * x + y * y), in that order (a
    # quotient instead was an ulp off in a quarter of the elements); zero where the squares
    # are (torch's is NaN at the origin, a 0 * inf)
    squares = B.add(B.mul(x, x), B.mul(y, y))
    grad = B.mul(B.mul(g, numerator), B.recip(squares))
    return B.mask_fill(grad, B.equal_elem(squares, 0.0), 0.0)


binary(
    "atan2",
    lambda B, g, x, y: _atan2_vjp(B, g, x, y, y),
    lambda B, g, x, y: _atan2_vjp(B, g, x, y, B.neg(x)),
)
binary(
    "fmod",
    lambda B, g: g,
    lambda B, g, x, y: B.neg(B.mul(g, B.trunc(B.div(B.detach(x), B.detach(y))))),
)
binary(
    "hypot",
    lambda B, g, x, out: B.div(B.mul(g, x), out),
    lambda B, g, y, out: B.div(B.mul(g, y), out),
)


# torch's fused kernels (``B.lerp``, ``B.add_scaled``, ``B.addcmul``: rounded once where torch's
# fused multiply-add is, so the bits are torch's), with torch's rules, each from the operands
# alone (a composition's masked branch would give 0 * inf = NaN where torch's sums stay
# infinite)
Op(
    "lerp",
    ("x", "end", "weight"),
    (),
    (
        lambda B, g, weight: B.mul(g, B.rsub_scalar(weight, 1.0)),
        lambda B, g, weight: B.mul(g, weight),
        lambda B, g, x, end: B.mul(g, B.sub(end, x)),
    ),
    memory_bound=True,
    broadcast=True,
)
binary(
    "lerp_scalar",
    lambda B, g, weight: B.mul_scalar(g, 1.0 - weight),
    lambda B, g, weight: B.mul_scalar(g, weight),
    ("weight",),
)
binary("add_scaled", lambda B, g: g, lambda B, g, alpha: B.mul_scalar(g, alpha), ("alpha",))
Op(
    "addcmul",
    ("x", "t1", "t2"),
    ("value",),
    (
        lambda B, g: g,
        lambda B, g, t2, value: B.mul(g, B.mul_scalar(t2, value)),
        lambda B, g, t1, value: B.mul(g, B.mul_scalar(t1, value)),
    ),
    memory_bound=True,
    broadcast=True,
)


def _hardswish_vjp(B, g, x):
    # torch's hardswish_backward from x (the backend's kernel, or the protocol's composition)
    return B.hardswish_backward(g, x)


unary("hardswish", _hardswish_vjp)

# torch's: ``g * out / x`` to ``x``, 0 where ``x`` is 0 (so NaN where ``x`` is infinite or NaN,
# inf / inf), zeros to ``y``
binary(
    "copysign",
    lambda B, g, x, out: B.mul(g, B.mask_fill(B.div(out, x), B.equal_elem(x, 0.0), 0.0)),
    _zeros_like_rule,
    forward=lambda B, x, y: B.mask_where(B.abs(x), B.signbit(y), B.neg(B.abs(x))),
)
# torch's: the gradient passes to ``x`` where it steps (0 where ``x`` is ``y`` already), 0 to
# ``y``
binary(
    "nextafter",
    lambda B, g, x, y: B.mask_fill(g, B.equal(x, y), 0.0),
    _zeros_like_rule,
)


# torch's maximum and minimum (the backend's kernels: a tie's value is x, NaN's NaN): at a tie
# half the gradient to each operand, at a NaN the whole of it to both (torch's backward masks
# only by < and >). One op whose rules read x and y: written as ten tensor ops, its masks and
# copies were untracked inputs a budget held as backups (a 0.5x budget held 3x
# NoCheckpointing's peak for one maximum, 7 December).
def _extremum_rule(B, g, x, y, loses):
    tied = B.mask_where(g, B.equal(x, y), B.mul_scalar(g, 0.5))
    return B.mask_fill(tied, loses, 0.0)


binary(
    "maximum",
    lambda B, g, x, y: _extremum_rule(B, g, x, y, B.lower(x, y)),
    lambda B, g, x, y: _extremum_rule(B, g, x, y, B.greater(x, y)),
)
binary(
    "minimum",
    lambda B, g, x, y: _extremum_rule(B, g, x, y, B.greater(x, y)),
    lambda B, g, x, y: _extremum_rule(B, g, x, y, B.lower(x, y)),
)


# torch's logaddexp (scale 1) and logaddexp2 (scale log 2): ``g / (1 + exp(y - x))`` for x
# (``2 ** (y - x)`` for logaddexp2), and alike for y; smooth, so differentiating the rule gives
# torch's second derivatives. One op whose rules read x and y: as a composite it held four
# arrays of x's size (7 December).
def _logaddexp_vjp(B, g, a, b, scale):
    gap = B.sub(b, a)
    grown = B.exp(gap) if scale == 1.0 else B.rpow_scalar(gap, 2.0)
    return B.div(g, B.add_scalar(grown, 1.0))


binary(
    "logaddexp",
    lambda B, g, x, y, scale: _logaddexp_vjp(B, g, x, y, scale),
    lambda B, g, x, y, scale: _logaddexp_vjp(B, g, y, x, scale),
    ("scale",),
)


def _sinc_vjp(B, g, x):
    """torch's ``sinc_backward``, ``g (pi x cos(pi x) - sin(pi x)) / (pi x^2)``, 0 where
    ``pi x^2`` is 0; at 0 itself from the series ``1 - (pi x)^2 / 6``, whose slope
    ``-pi^2 x / 3`` is +0 there and whose derivative, the true second derivative
    ``-pi^2 / 3``, differentiating this rule gives (torch's is NaN, a 0 * inf)."""
    zero = B.equal_elem(B.square(x), 0.0)
    safe = B.mask_fill(x, zero, 1.0)
    pi_x = B.mul_scalar(safe, math.pi)
    numerator = B.sub(B.mul(pi_x, B.cos(pi_x)), B.sin(pi_x))
    grad = B.mul(g, B.div(numerator, B.mul_scalar(B.mul(safe, safe), math.pi)))
    grad = B.mask_fill(grad, zero, 0.0)
    series = B.add_scalar(B.mul(g, B.mul_scalar(x, -(math.pi**2) / 3.0)), 0.0)  # (+0)
    return B.mask_where(grad, B.equal_elem(x, 0.0), series)


# one op whose rule reads x (torch saves x alone): its composite held four arrays of x's size
unary("sinc", _sinc_vjp)
# torch's logit (float32/float64, ``eps`` None or a float) and its logit_backward, reading x as
# torch saves it: as ``log(z) - log1p(-z)`` its rule summed ``1 / z + 1 / (1 - z)``, an ulp off
# torch's ``g / (z (1 - z))`` in a third of the elements
unary("logit", lambda B, g, x, eps: B.logit_backward(g, x, eps), ("eps",))
# torch's erfinv derivative, ``0.5 * sqrt(pi) * exp(erfinv(x)^2) * grad``, from the output
unary(
    "erfinv",
    lambda B, g, out: B.mul(B.mul_scalar(B.exp(B.square(out)), math.sqrt(math.pi) / 2.0), g),
)


def _softsign_vjp(B, g, x):
    """The composition ``x / (|x| + 1)``'s gradient, rule by rule as torch's autograd runs it
    (div's, ``g / d`` and ``-(g * ((x / d) / d))``, then abs's, times the sign: the same
    bits), from x alone: its quotient and denominator are recomputed, not held."""
    denominator = B.add_scalar(B.abs(x), 1.0)
    through_denominator = B.neg(B.mul(g, B.div(B.div(x, denominator), denominator)))
    sign = B.mask_fill(B.sign(x), B.is_nan(x), 0.0)
    return B.add(B.div(g, denominator), B.mul(through_denominator, sign))


# one op whose rule reads x: the composite held x, the denominator and the quotient (3x x's
# bytes; torch's composite saves x and the denominator)
unary("softsign", _softsign_vjp)

# -- with a Python scalar ----------------------------------------------------------------------
unary("add_scalar", lambda B, g: g, ("s",))
unary("sub_scalar", lambda B, g: g, ("s",))
unary("mul_scalar", lambda B, g, s: B.mul_scalar(g, s), ("s",))
unary("div_scalar", lambda B, g, s: B.div_scalar(g, s), ("s",))
unary("pow_scalar", _pow_scalar_vjp, ("s",))
unary("remainder_scalar", lambda B, g: g, ("s",))
unary("rsub_scalar", lambda B, g: B.neg(g), ("s",))
unary("rdiv_scalar", lambda B, g, x, out: B.neg(B.div(B.mul(g, out), x)), ("s",))
unary("rpow_scalar", _rpow_scalar_vjp, ("s",))
unary(
    "rremainder_scalar",
    lambda B, g, x, s: B.neg(B.mul(g, B.floor(B.rdiv_scalar(B.detach(x), s)))),
    ("s",),
)

# -- elementwise unary -------------------------------------------------------------------------
unary("neg", lambda B, g: B.neg(g))
# torch's abs backward is g * sgn(x), and its sgn of NaN is 0 (so g * 0 there)
unary("abs", lambda B, g, x: B.mul(g, B.mask_fill(B.sign(x), B.is_nan(x), 0.0)))
unary("exp", lambda B, g, out: B.mul(g, out))
unary("expm1", lambda B, g, out: B.mul(g, B.add_scalar(out, 1.0)))
unary("log", lambda B, g, x: B.div(g, x))
unary("log1p", lambda B, g, x: B.div(g, B.add_scalar(x, 1.0)))
# torch's derivatives: ``grad / (x * ln 2)``, ``grad / (x * ln 10)`` and ``grad * 2**x * ln 2``,
# with torch's constants (its ln 10, 2.3025850929940456, is a double one ulp below math.log(10))
unary("log2", lambda B, g, x: B.div(g, B.mul_scalar(x, 0.6931471805599453)))
unary("log10", lambda B, g, x: B.div(g, B.mul_scalar(x, 2.3025850929940456)))
unary("exp2", lambda B, g, out: B.mul_scalar(B.mul(g, out), math.log(2.0)))
unary("sqrt", lambda B, g, out: B.div(B.mul_scalar(g, 0.5), out))
# (g * 2 first, as torch's: 2 x overflows at huge x, where a zero g must give 0, not 0 * inf)
unary("square", lambda B, g, x: _square_vjp(B, g, x))
unary("recip", lambda B, g, out: B.neg(B.mul(g, B.square(out))))
# torch's rule: -0.5 * g * out**3 (its pow by 3 is out * out * out)
unary("rsqrt", lambda B, g, out: B.mul(B.mul_scalar(g, -0.5), B.mul(B.square(out), out)))
unary("sin", lambda B, g, x: B.mul(g, B.cos(x)))
unary("cos", lambda B, g, x: B.neg(B.mul(g, B.sin(x))))
unary("tan", lambda B, g, out: B.mul(g, B.add_scalar(B.square(out), 1.0)))
unary("sinh", lambda B, g, x: B.mul(g, B.cosh(x)))
unary("cosh", lambda B, g, x: B.mul(g, B.sinh(x)))
unary("tanh", lambda B, g, out: B.tanh_backward(g, out))
# the inverse functions' rules as torch's derivatives.yaml writes them, to the bit: a reciprocal
# square root times the gradient, not the gradient over a square root
unary("asin", lambda B, g, x: B.mul(g, B.rsqrt(B.rsub_scalar(B.square(x), 1.0))))
unary("acos", lambda B, g, x: B.mul(g, B.neg(B.rsqrt(B.rsub_scalar(B.square(x), 1.0)))))
unary("atan", lambda B, g, x: B.div(g, B.add_scalar(B.square(x), 1.0)))
unary("asinh", lambda B, g, x: B.mul(g, B.rsqrt(B.add_scalar(B.square(x), 1.0))))
unary("acosh", lambda B, g, x: B.mul(g, B.rsqrt(B.sub_scalar(B.square(x), 1.0))))
unary("atanh", lambda B, g, x: B.div(g, B.rsub_scalar(B.square(x), 1.0)))
unary("erf", lambda B, g, x: B.mul(g, B.mul_scalar(B.exp(B.neg(B.square(x))), _TWO_OVER_SQRT_PI)))
unary("erfc", lambda B, g, x: B.mul(g, B.mul_scalar(B.exp(B.neg(B.square(x))), -_TWO_OVER_SQRT_PI)))
unary("lgamma", lambda B, g, x: B.mul(g, B.digamma(x)))
unary("digamma", lambda B, g, x: B.mul(g, B.polygamma(x, 1)))
unary("polygamma", lambda B, g, x, n: B.mul(g, B.polygamma(x, n + 1)), ("n",))
unary("i0", lambda B, g, x: B.mul(g, B.i1(x)))
unary("i1", lambda B, g, x, out: B.mul(g, _i1_slope(B, x, out)))
# torch.special's further functions (retrograd.special), with torch's derivatives
unary("i0e", lambda B, g, x, out: B.mul(g, B.sub(B.i1e(x), B.mul(B.sign(x), out))))
unary("i1e", lambda B, g, x, out: B.mul(g, _i1e_slope(B, x, out)))
unary(
    "erfcx",
    lambda B, g, x, out: B.mul(
        g, B.sub_scalar(B.mul(B.mul_scalar(x, 2.0), out), _TWO_OVER_SQRT_PI)
    ),
)


def _ndtr_vjp(B, g, x):
    """torch's ndtr is ``(1 + erf(x * sqrt(1/2))) * 0.5``, a composite: its gradient is
    those ops' rules in turn (``* 0.5``, erf's ``2 / sqrt(pi) * exp(-t^2) * g``, then
    ``* sqrt(1/2)``), which round otherwise than ``g * phi(x)``."""
    scaled = B.mul_scalar(x, _SQRT_HALF)
    slope = B.mul_scalar(B.exp(B.neg(B.square(scaled))), _TWO_OVER_SQRT_PI)
    return B.mul_scalar(B.mul(slope, B.mul_scalar(g, 0.5)), _SQRT_HALF)


unary("ndtr", _ndtr_vjp)
# torch's derivatives in their order: ``grad / sqrt(2 pi) * exp(-(result + x^2 / 2))`` (phi /
# Phi, finite where Phi underflows) and ``grad * sqrt(2 pi) * exp(result^2 / 2)``
unary(
    "log_ndtr",
    lambda B, g, x, out: B.mul(
        B.div_scalar(g, _SQRT_TWO_PI),
        B.exp(B.neg(B.add(out, B.div_scalar(B.square(x), 2.0)))),
    ),
)
unary(
    "ndtri",
    lambda B, g, out: B.mul(B.mul_scalar(g, _SQRT_TWO_PI), B.exp(B.div_scalar(B.square(out), 2.0))),
)
unary("entr", lambda B, g, x: B.mul(g, B.neg(B.add_scalar(B.log(x), 1.0))))
# torch leaves these untracked (no gradient, silently); here their derivatives are the
# family's own functions, and airy_ai's (which needs Ai', no kernel) raises AutodiffError
unary(
    "bessel_function",
    lambda B, g, x, out, kind: B.mul(g, _bessel_slope(B, x, out, kind)),
    ("kind",),
)
binary(
    "xlog1py",
    _xlog1py_x_vjp,
    lambda B, g, x, y: B.div(B.mul(g, x), B.add_scalar(y, 1.0)),
)
binary("xlogy", _xlogy_x_vjp, _xlogy_y_vjp)
binary(
    "zeta",
    _refuse("zeta", "input (the exponent x)"),
    lambda B, g, x, y: B.mul(g, B.mul(B.neg(x), B.zeta(B.add_scalar(x, 1.0), y))),
)
binary(
    "gammainc",
    _refuse("gammainc", "input (the shape a)"),
    lambda B, g, x, y: B.mul(g, _gamma_density(B, x, y)),
)
binary(
    "gammaincc",
    _refuse("gammaincc", "input (the shape a)"),
    lambda B, g, x, y: B.neg(B.mul(g, _gamma_density(B, x, y))),
)


def _polynomial_refusal(argument):
    def rule(B, g, kind):
        raise _no_derivative(kind, argument)

    return rule


def _refused_second_derivative(B, g, op):
    raise DerivativeNotImplementedError(  # (torch's NotImplementedError)
        f"{op}: the derivative of its backward is not implemented (nor in torch): a second "
        "derivative through it is refused; keep the op out of the twice-differentiated path"
    )


# an op torch differentiates once: its inputs pass through ``second_derivative_gate``, whose
# rule hands the gradient that reached it on through ``first_order_only``, which, recorded
# under create_graph, refuses to be differentiated (torch: "derivative for ... is not
# implemented" when a backward reaches it)
unary("first_order_only", _refused_second_derivative, ("op",), forward=lambda B, x, op: x)
unary(
    "second_derivative_gate",
    lambda B, g, op: B.first_order_only(g, op),
    ("op",),
    forward=lambda B, x, op: x,
    # torch's backward kernel takes the input: the gradient requires grad under create_graph
    # even where it is a constant (multi_margin_loss with p=1), and refuses a derivative
    links={0: ((0, "refused"),)},
)
# the same where torch's backward kernel does not take the input (embedding_bag's weight):
# a gradient that is constant stays one
unary(
    "second_derivative_gate_unread",
    lambda B, g, op: B.first_order_only(g, op),
    ("op",),
    forward=lambda B, x, op: x,
)


def _link_rule(B, g, kind, shape, op):
    if kind == "zeros":
        return zeros_for(B, g, shape)
    if kind == "none":
        return None
    return _refused_second_derivative(B, g, op)


# ``grad`` recorded as a function of ``anchor`` (an input of the op whose backward computed
# ``grad``; see ``Op.links``), under create_graph only: ``grad`` itself, whose derivative in
# ``anchor`` is ``kind``'s (zeros of ``shape``, none, or a refusal naming ``op``). The engine
# records it (runtime._linked); the anchor's value is never read, so none is held
Op(
    "gradient_link",
    ("grad", "anchor"),
    ("kind", "shape", "op"),
    (lambda B, g: g, _link_rule),
    memory_bound=False,
    recomputable=False,
    forward=lambda B, grad, anchor, kind, shape, op: grad,
)
# an input that torch's backward kernel of the composition after it reads: the identity, whose
# gradient is linked under create_graph to the input -- with a zero derivative
# (``kernel_input_gate``: nll_loss's, the reflection and replication pads', adaptive max
# pooling's), or none where torch's double backward gives the input none
# (``kernel_input_gate_undefined``: eval-mode batch_norm's ``native_batch_norm_backward``;
# the gradient requires grad, as torch's, and a second derivative leaves the input's unset)
for _gate, _kind in (("kernel_input_gate", "zeros"), ("kernel_input_gate_undefined", "none")):
    unary(_gate, lambda B, g: g, forward=lambda B, x: x, links={0: ((0, _kind),)})
# a composition's bias where torch computes its gradient in a joint backward kernel with
# other inputs (eval-mode batch_norm's, instance_norm's): the bias itself, whose gradient is
# linked under create_graph to ``other`` (of no derivative), so that it requires grad where
# ``other`` does, as torch's
Op(
    "kernel_bias_gate",
    ("bias", "other"),
    (),
    (lambda B, g: g, None),
    # its output (the bias) is kept, never recomputed: recomputing it would hold ``other``
    memory_bound=False,
    recomputable=False,
    forward=lambda B, bias, other: bias,
    links={0: ((1, "none"),)},
)

# torch has no derivative of the polynomials in either argument (their outputs are untracked)
binary(
    "orthogonal_polynomial",
    _polynomial_refusal("input (x)"),
    _polynomial_refusal("n"),
    ("kind",),
)
# a value drawn outside the graph (y) that torch still records on x, with a backward that
# refuses: bernoulli(p) for a number p ("the derivative for bernoulli is not implemented")
binary(
    "refused_derivative",
    _polynomial_refusal("input"),
    None,
    ("kind",),
    forward=lambda B, x, y, kind: y,
    broadcast=False,
)
# a value computed outside the graph (y) that torch records on x with a derivative that is
# undefined, not refused and not zero: the real slogdet's ``sign`` (torch's backward reads
# only the gradient of ``logabsdet``), which requires grad and whose backward runs, leaving
# x's gradient unset (None). The rule reads nothing, so nothing is held for it
binary(
    "undefined_derivative",
    lambda B, g: None,
    None,
    forward=lambda B, x, y: y,
    broadcast=False,
)
for _name in ("sign", "round", "floor", "ceil", "trunc"):
    unary(_name, _zeros_like_rule)
# torch's sigmoid_backward kernel: (grad * (1 - out)) * out
unary("sigmoid", lambda B, g, out: B.mul(B.mul(g, B.rsub_scalar(out, 1.0)), out))
# torch's log_sigmoid_backward, whose buffer exp(-|x|) is recomputed from x (not held)
unary("log_sigmoid", lambda B, g, x: B.log_sigmoid_backward(g, x))
unary("softplus", lambda B, g, x, beta: B.mul(g, B.sigmoid(B.mul_scalar(x, beta))), ("beta",))
# F.softplus with its threshold (x itself where x * beta is above it): torch's kernels'
# formulas (the backend's softplus_threshold and softplus_backward), reading x alone
unary(
    "softplus_threshold",
    lambda B, g, x, beta, threshold: B.softplus_backward(g, x, beta, threshold),
    ("beta", "threshold"),
)
unary("relu", lambda B, g, out: B.relu_backward(g, out))
unary("leaky_relu", lambda B, g, x, slope: B.leaky_relu_backward(g, x, slope), ("slope",))

# The backward kernels of the piecewise-linear activations, as torch's derivatives.yaml
# declares them (``threshold_backward``, ``leaky_relu_backward``, ``hardtanh_backward``): linear
# in the gradient, and of zero derivative in the value they read (which they only compare), a
# derivative torch computes all the same. So under create_graph the gradient of a ReLU stays
# connected to what it read: a Hessian-vector product of a ReLU network in its input is
# zeros, as torch's, not "an input not used in the graph".
Op(
    "relu_backward",
    ("grad", "result"),
    (),
    (lambda B, g, result: B.relu_backward(g, result), _zeros_like_rule),
    memory_bound=True,
)
Op(
    "leaky_relu_backward",
    ("grad", "x"),
    ("slope",),
    (lambda B, g, x, slope: B.leaky_relu_backward(g, x, slope), _zeros_like_rule),
    memory_bound=True,
)
unary("gelu", lambda B, g, x: B.gelu_backward(g, x))

# F.threshold, F.hardshrink and F.softshrink (float32/float64 with a tracked input) as ops with
# torch's backward kernels (``threshold_backward``, ``hardshrink_backward``,
# ``softshrink_backward``: linear in the gradient, of zero derivative in the value they
# compare). Their compositions held a bool mask (two for softshrink) that a budget could not
# recompute, beside the copies the masked fills read (7 December). The rule reads the output
# where the output decides the gradient (the next layer usually holds it): a threshold whose
# value is at most its threshold (above the threshold exactly where x is), and the shrinks
# (0 exactly where |x| <= lambd, for lambd >= 0); a threshold whose value is above the
# threshold reads x, as torch's.
unary(
    "threshold",
    lambda B, g, out, threshold: B.threshold_backward(g, out, threshold),
    ("threshold", "value"),
)
unary(
    "threshold_of_x",
    lambda B, g, x, threshold: B.threshold_backward(g, x, threshold),
    ("threshold", "value"),
    forward=lambda B, x, threshold, value: B.threshold(x, threshold, value),
)
Op(
    "threshold_backward",
    ("grad", "x"),
    ("threshold",),
    (lambda B, g, x, threshold: B.threshold_backward(g, x, threshold), _zeros_like_rule),
    memory_bound=True,
)
# x * mask for a bool mask (``x * (x > 0)``): the rule reads the bool mask, as torch's mul
# saves it, not its cast to x's dtype, which the promotion made (and held: 4x torch's bytes)
binary(
    "mul_mask",
    lambda B, g, y: B.mul(g, B.cast(y, B.dtype(g))),
    None,
)
unary("hardshrink", lambda B, g, out, lambd: B.shrink_backward(g, out), ("lambd",))
unary("softshrink", lambda B, g, out, lambd: B.shrink_backward(g, out), ("lambd",))
Op(
    "shrink_backward",
    ("grad", "result"),
    (),
    (lambda B, g, result: B.shrink_backward(g, result), _zeros_like_rule),
    memory_bound=True,
)


# PReLU and its two backward kernels, torch's ``_prelu_kernel`` and ``_prelu_kernel_backward``:
# torch's first derivative takes the weight's branch where ``x > 0`` fails (at 0 the gradient
# is the weight), but the derivatives of its backward take the positive branch where
# ``x >= 0`` (at 0: the upstream gradient passes to ``grad`` whole, and nothing reaches
# ``x`` or the weight), so a second derivative at 0 is torch's only through ops of their own
def _at_or_above_zero(B, x):
    return B.greater_equal_elem(x, 0.0)


Op(
    "prelu",
    ("x", "weight"),
    (),
    (
        lambda B, g, x, weight: B.prelu_backward_input(g, x, weight),
        lambda B, g, x: B.prelu_backward_weight(g, x),
    ),
    memory_bound=True,
    broadcast=True,
    # torch's _prelu_kernel_backward takes the weight: the weight's gradient is a function of
    # it (zeros) under create_graph, as torch's
    links={1: ((1, "zeros"),)},
)
Op(
    "prelu_backward_input",
    ("grad", "x", "weight"),
    (),
    (
        lambda B, g, x, weight: B.mask_where(B.mul(g, weight), _at_or_above_zero(B, x), g),
        _zeros_like_rule,  # (piecewise linear in x: torch's zeros)
        lambda B, g, grad, x: B.mask_fill(B.mul(grad, g), _at_or_above_zero(B, x), 0.0),
    ),
    memory_bound=True,
    broadcast=True,
)
Op(
    "prelu_backward_weight",
    ("grad", "x"),
    (),
    (
        lambda B, g, x: B.mask_fill(B.mul(g, x), _at_or_above_zero(B, x), 0.0),
        lambda B, g, grad, x: B.mask_fill(B.mul(grad, g), _at_or_above_zero(B, x), 0.0),
    ),
    memory_bound=True,
    broadcast=True,
)

unary("silu", _silu_vjp)
unary("clamp", _clamp_vjp, ("lo", "hi"))


# torch's hardtanh_backward stops the gradient where x <= lo or x >= hi (on the bounds too,
# where clamp's passes) and lets NaN through. Read from the output, which is exactly lo or hi
# wherever x is at or beyond them (and NaN where x is): the next layer holds it anyway, where
# a rule reading x (or a mask beside the output) holds a copy of its own
unary(  # (the backend's hardtanh: its clamp)
    "hardtanh", lambda B, g, out, lo, hi: B.hardtanh_backward(g, out, lo, hi), ("lo", "hi")
)
Op(
    "hardtanh_backward",
    ("grad", "result"),
    ("lo", "hi"),
    (lambda B, g, result, lo, hi: B.hardtanh_backward(g, result, lo, hi), _zeros_like_rule),
    memory_bound=True,
)


#: torch's binary cross-entropy eps, the float32 nearest 1e-12, in every dtype
BCE_EPS: float = 9.999999960041972e-13


def _bce_x_rule(B, g, x, y):
    # torch's binary_cross_entropy_backward: g (x - y) / max((1 - x) x, eps)
    bound = B.clamp(B.mul(B.rsub_scalar(x, 1.0), x), BCE_EPS, None)
    return B.div(B.mul(g, B.sub(x, y)), bound)


def _bce_y_rule(B, g, x):
    # torch's binary_cross_entropy_target_backward, -logit(x) * g: the logs' difference
    # log(1 - x) - log(x) rounded otherwise in 40-60% of the elements (and was clamped where
    # infinite, x at 0 or 1, where torch's is infinite)
    return B.mul(B.neg(B.logit(x, None)), g)


# F.binary_cross_entropy of float32/float64 probabilities x and targets y (the losses before
# their weight; its reduction, "none" with a weight): one op whose rules read x and y, as
# torch's saves them, the mean's 1 / n after the rule's arithmetic as in torch's kernels. The
# composition held untracked copies of both, the logs, an edge mask and a zero-valued
# correction (6.25 arrays of x's size, 3.1x torch's bytes, 7 December)
Op(
    "binary_cross_entropy",
    ("x", "y"),
    ("reduction",),
    (
        lambda B, g, x, y, reduction: _mean_divided(B, _bce_x_rule(B, g, x, y), x, reduction),
        lambda B, g, x, reduction: _mean_divided(B, _bce_y_rule(B, g, x), x, reduction),
    ),
    memory_bound=True,
    broadcast=False,
    forward=lambda B, x, y, reduction: _reduced(B, B.binary_cross_entropy(x, y), reduction),
)


# torch's smooth_l1_loss and huber_loss of d = x - y (the loss's reduction apart): one op each
# whose rule reads d, torch's smooth_l1_backward / huber_backward (|d| >= beta: the slope's
# sign times g, which is delta times it for huber; elsewhere, NaN too, d g / beta, or d g).
# Their compositions (abs, a mask, the masked difference, its square) held 3.5 arrays of d's
# size, where torch's holds x and y (7 December). Second derivatives come from the rules'
# arithmetic: 1 / beta (1) in the quadratic branch, 0 on and beyond |d| = beta, as torch's.
def _huber_rule(B, g, d, bound, near, slope):  # (x: the difference d)
    inside = B.mask_where(near, B.greater_equal_elem(d, bound), slope)
    return B.mask_where(inside, B.lower_equal_elem(d, -bound), B.neg(slope))


unary(
    "smooth_l1",
    lambda B, g, x, beta: _huber_rule(B, g, x, beta, B.div_scalar(B.mul(x, g), beta), g),
    ("beta",),
)
unary(
    "huber",
    lambda B, g, x, delta: _huber_rule(B, g, x, delta, B.mul(x, g), B.mul_scalar(g, delta)),
    ("delta",),
)


# The same two losses of float32/float64 differences with their reduction, as torch's autograd
# records them, whose rules are torch's kernels' arithmetic with the mean's 1 / n inside:
# ``norm * d * g / beta`` (``norm * d * g`` for huber) in the quadratic branch, ``norm * g``
# (``norm * g * delta``) beyond. Reduced apart, the mean's rule divided g first: an ulp off
# torch's in 20-90% of the elements for a g other than 1 (a weighted sum of losses).
def _loss_norm(B, d, reduction):
    """The mean's ``1 / n`` (NaN for an empty batch, torch's), else 1."""
    n = math.prod(B.shape(d))
    return (1.0 / n if n else math.nan) if reduction == "mean" else 1.0


def _full(B, g, d, reduction):
    return g if reduction == "none" else B.expand(g, B.shape(d))


def _smooth_l1_loss_vjp(B, g, x, beta, reduction):
    norm, g = _loss_norm(B, x, reduction), _full(B, g, x, reduction)
    near = B.div_scalar(B.mul(B.mul_scalar(x, norm), g), beta)
    return _huber_rule(B, g, x, beta, near, B.mul_scalar(g, norm))


def _huber_loss_vjp(B, g, x, delta, reduction):
    norm, g = _loss_norm(B, x, reduction), _full(B, g, x, reduction)
    near = B.mul(B.mul_scalar(x, norm), g)
    return _huber_rule(B, g, x, delta, near, B.mul_scalar(B.mul_scalar(g, norm), delta))


unary(
    "smooth_l1_loss",
    _smooth_l1_loss_vjp,
    ("beta", "reduction"),
    forward=lambda B, x, beta, reduction: _reduced(B, B.smooth_l1(x, beta), reduction),
)
unary(
    "huber_loss",
    _huber_loss_vjp,
    ("delta", "reduction"),
    forward=lambda B, x, delta, reduction: _reduced(B, B.huber(x, delta), reduction),
)

#: 1/6 rounded to float32 (0.1666666716337204), torch's ``1.0f / 6.0f``, by which its
#: hardsigmoid_backward multiplies in every dtype
TORCH_SIXTH: float = struct.unpack("f", struct.pack("f", 1.0 / 6.0))[0]


def _hardsigmoid_vjp(B, g, x):
    # torch's hardsigmoid_backward: g * (1.0f / 6.0f) strictly inside (-3, 3), 0 elsewhere
    # (NaN too). It reads x, as torch's does (a mask beside a copy of the output, with an
    # untracked full-size copy backed up under a budget, was what its composition held)
    return B.hardsigmoid_backward(g, x, TORCH_SIXTH)


def _hardsigmoid_backward_refused(B, g):
    return _refused_second_derivative(B, g, "hardsigmoid")


# torch has no derivative of hardsigmoid_backward: under create_graph the gradient is
# recorded (connected to x, as torch's) and a second derivative through it is refused
Op(
    "hardsigmoid_backward",
    ("grad", "x"),
    ("sixth",),
    (_hardsigmoid_backward_refused, _hardsigmoid_backward_refused),
    memory_bound=True,
)


def _elu_vjp(B, g, x, alpha, scale, rule_input_scale):
    # torch's elu_backward, from x alone (the backend's kernel, or the protocol's composition)
    return B.elu_backward(g, x, alpha, rule_input_scale, scale)


# elu, selu (its scale) and celu (input scale 1 / alpha): torch's elu kernel. The rule's input
# scale is torch's celu derivative's 1 / float(alpha), where the value's is 1 / alpha
unary(
    "elu",
    _elu_vjp,
    ("alpha", "input_scale", "scale", "rule_input_scale"),
)


def _gelu_tanh_vjp(B, g, x):
    # torch's gelu_backward (approximate="tanh"), from x alone: the composition held five
    # arrays (x^2, x^3, tanh's output, the two factors of the product)
    return B.gelu_tanh_backward(g, x)


unary("gelu_tanh", _gelu_tanh_vjp)


def _mish_vjp(B, g, x):
    # torch's mish_backward: it reads x alone (the composition held tanh's output beside it)
    return B.mish_backward(g, x)


unary("mish", _mish_vjp)

unary("hardsigmoid", _hardsigmoid_vjp)


# torch's fake quantization (tensor/fake_quantize.py): the grid's integer q, before its clamp,
# is zero_point + nearbyint(x * inv_scale) (a float zero point: nearbyint(x * inv_scale +
# zero_point), torch's other kernel); the gradient passes where q lies in [quant_min,
# quant_max] (torch's cached mask), and scale and zero point take none
def _fake_quantized_integer(B, x, inv_scale, zero_point, float_zero_point):
    scaled = B.mul(x, inv_scale)
    if float_zero_point:
        return B.round(B.add(scaled, zero_point))
    return B.add(B.round(scaled), zero_point)


def _fake_quantize_forward(B, x, inv_scale, zero_point, scale, quant_min, quant_max, float_zp):
    q = _fake_quantized_integer(B, x, inv_scale, zero_point, float_zp)
    return B.mul(B.sub(B.clamp(q, quant_min, quant_max), zero_point), scale)


def _fake_quantize_vjp(B, g, x, inv_scale, zero_point, quant_min, quant_max, float_zero_point):
    q = _fake_quantized_integer(B, x, inv_scale, zero_point, float_zero_point)
    inside = B.logical_and(B.greater_equal_elem(q, quant_min), B.lower_equal_elem(q, quant_max))
    return B.mask_fill(g, B.logical_not(inside), 0.0)


Op(
    "fake_quantize",
    ("x", "inv_scale", "zero_point", "scale"),
    ("quant_min", "quant_max", "float_zero_point"),
    (_fake_quantize_vjp, None, None, None),
    memory_bound=True,
    forward=_fake_quantize_forward,
)
unary("cast", lambda B, g, x_dtype: B.cast(g, x_dtype), ("dtype",))

# -- selection -----------------------------------------------------------------------------------
Op(
    "mask_where",
    ("x", "mask", "values"),
    (),
    (
        lambda B, g, mask: B.mask_fill(g, mask, 0.0),
        None,
        lambda B, g, mask: B.mask_fill(g, B.logical_not(mask), 0.0),
    ),
    memory_bound=False,
    broadcast=True,
)
Op(
    "mask_fill",
    ("x", "mask"),
    ("value",),
    (lambda B, g, mask: B.mask_fill(g, mask, 0.0), None),
    memory_bound=False,
    broadcast=True,
)
unary(
    # NaN replaced by zero, the gradient multiplied by "not NaN" (torch's nansum and
    # nan_to_num rules: an infinite or NaN incoming gradient gives NaN at a NaN input, where
    # mask_fill's rule gives 0; so nanmean over an all-NaN row has torch's NaN gradient)
    "nan_zeroed",
    lambda B, g, x: B.mask_where(g, B.is_nan(x), B.mul_scalar(g, 0.0)),
    forward=lambda B, x: B.mask_fill(x, B.is_nan(x), 0.0),
)

unary(
    # zeros of x's shape whose gradient is the incoming one: the carrier through which the
    # scatter_reduce amax/amin rule hands each winner its share. x - x.detach() carried it
    # but was NaN at an infinite x, which therefore got no gradient (torch's gets its share)
    "zero_carrier",
    lambda B, g: g,
    forward=lambda B, x: B.zeros_like(x),
)

# -- reductions ----------------------------------------------------------------------------------
reduction("sum", lambda B, g, x_shape: B.expand(g, x_shape))
reduction("sum_dim", lambda B, g, x_shape: B.expand(g, x_shape), ("dims",))


def _norm2_vjp(B, g, x, out):
    # torch's norm_backward for p = 2, op for op: grad * (self / norm), the quotient 0 where
    # the norm is 0 (before the product: NaN where grad is not finite). Its own derivative is
    # then torch's, NaN at a zero vector (the masked quotient's 0 / 0). It reads x and the
    # norm, as torch's: the composition of |x|, squares, a sum and a root held |x| beside x
    ratio = B.mask_fill(B.div(x, out), B.equal_elem(out, 0.0), 0.0)
    return B.mul(g, ratio)


reduction("norm2", _norm2_vjp, ("dims",))


def _vector_norm_vjp(B, g, x, out, order):
    # torch's norm_backward for p other than 0, 2 and the infinities, op for op: sgn(x) g at
    # p = 1; below 1 sgn(x) |x|^(p-1) (0 at a zero entry) * g * norm^(1-p); above 1
    # sgn(x) |x|^(p-1) (x |x|^(p-2) from 2 on) * (g / norm^(p-1), 0 where the norm is 0)
    if order == 1.0:  # (torch's sgn of NaN is 0, as abs's rule has it)
        return B.mul(B.mask_fill(B.sign(x), B.is_nan(x), 0.0), g)
    if order < 1.0:
        scaled = B.mul(B.sign(x), B.pow_scalar(B.abs(x), order - 1.0))
        scaled = B.mask_fill(scaled, B.equal_elem(x, 0.0), 0.0)
        return B.mul(B.mul(scaled, g), B.pow_scalar(out, 1.0 - order))
    if order < 2.0:
        scaled = B.mul(B.sign(x), B.pow_scalar(B.abs(x), order - 1.0))
    else:
        scaled = B.mul(x, B.pow_scalar(B.abs(x), order - 2.0))
    scale = B.mask_fill(B.div(g, B.pow_scalar(out, order - 1.0)), B.equal_elem(out, 0.0), 0.0)
    return B.mul(scaled, scale)


# the order-norm over ``dims`` (kept) for order other than 0, 2 and the infinities: one op on the
# backend's norm kernel (torch's on the torch backend), whose rule reads x and the norm
reduction("vector_norm", _vector_norm_vjp, ("order", "dims"))
reduction("mean", lambda B, g, x_shape: B.expand(B.div_scalar(g, math.prod(x_shape)), x_shape))
reduction(
    "mean_dim",
    lambda B, g, x_shape, dims: B.expand(
        B.div_scalar(g, math.prod(x_shape[d] for d in dims)), x_shape
    ),
    ("dims",),
)


def _variance_vjp(B, g, x, dims, correction):
    # torch's var_backward, 2 / (n - correction) * g * (x - mean), with the mean recomputed
    # from x (its value only counts: the mean's own path, zero in exact arithmetic, would
    # make inf - inf of an infinite element) in the order the composition's rules ran (so
    # its bits): the division's, then square's. It reads x, as torch's; the composition's
    # square read x - mean, an array of x's size beside x (a chain of four var calls with
    # tanh: 1.33x torch's bytes, 7 December). Its second derivative, through the rule's mean,
    # is torch's 2 / (n - c) (I - 1 / n). The mean is over every dim at once, as Tensor.mean's.
    count = math.prod(B.shape(x)[d] for d in dims)
    centered = B.sub(x, B.mean_dim(x, tuple(dims)))
    return B.mul(B.mul_scalar(B.div_scalar(g, count - correction), 2.0), centered)


# var over ``dims`` (kept), dividing by n - correction > 0 (tensor/reduce.py's _variance)
reduction("variance", _variance_vjp, ("dims", "correction"))
reduction("prod", _prod_vjp)
reduction("prod_dim", _prod_dim_vjp, ("dim",))
reduction("max", _extreme_vjp)
reduction("min", _extreme_vjp)
reduction("max_dim", _selected_vjp, ("dim",), aux=True)
reduction("min_dim", _selected_vjp, ("dim",), aux=True)


# amax/amin over ``dims`` (kept), whose gradient torch splits evenly among the elements equal
# to the result: ``(g / count) * tied`` (scale_grad_by_count); with ``nan_ties`` (the infinite
# norms', linalg_vector_norm_backward) a NaN result's ties are the NaNs. One op whose rule
# reads x and the output: as a composite its masks and untracked copy of x were inputs a
# budget held for good (3.45x a 0.5x budget, 7 December).
def _even_extremum_vjp(B, g, x, out, dims, nan_ties):
    mask = B.equal(x, out)
    if nan_ties:
        mask = B.logical_or(mask, B.logical_and(B.is_nan(x), B.is_nan(out)))
    tied = B.cast(mask, B.dtype(g))
    return B.mul(B.expand(B.div(g, B.sum_dim(tied, dims)), B.shape(x)), tied)


def _extremum_over(B, x, dims, kernel):
    for d in dims:
        x = getattr(B, kernel)(x, d)[0]
    return x


for _name, _kernel in (("amax", "max_dim"), ("amin", "min_dim")):
    reduction(
        _name,
        _even_extremum_vjp,
        ("dims", "nan_ties"),
        forward=lambda B, x, dims, nan_ties, kernel=_kernel: _extremum_over(B, x, dims, kernel),
    )
untracked("argmax", params=("dim",))
untracked("bitcast", params=("dtype",))  # (torch's view(dtype) is not differentiable either)
untracked("argmin", params=("dim",))

# -- cumulative, sorting -------------------------------------------------------------------------
# ``x`` and its (untracked) maximum over ``dims``, kept; torch's gradient ``g exp(x - out)``:
# at an infinite result NaN only where ``x`` is that infinity, and each of huge ties whose
# log(count) the result absorbed gets the whole ``g`` (a softmax would halve it)
binary(
    "logsumexp",
    lambda B, g, x, out: B.mul(g, B.exp(B.sub(x, out))),
    None,
    ("dims",),
    memory_bound=False,
    broadcast=False,
    forward=lambda B, x, peak, dims: B.add(B.log(B.sum_dim(B.exp(B.sub(x, peak)), dims)), peak),
)
reduction("cumsum", lambda B, g, dim: reverse_cumsum(B, g, dim), ("dim",))
reduction("cumprod", _cumprod_vjp, ("dim",))
reduction("logcumsumexp", _logcumsumexp_vjp, ("dim",))
reduction("cummax", _cumulative_extreme_vjp, ("dim",), aux=True)
reduction("cummin", _cumulative_extreme_vjp, ("dim",), aux=True)
reduction(
    "sort",
    lambda B, g, x_shape, aux, dim, descending: _selected_vjp(B, g, x_shape, aux, dim),
    ("dim", "descending"),
    aux=True,
)
reduction(
    "topk",
    lambda B, g, x_shape, aux, dim: _selected_vjp(B, g, x_shape, aux, dim),
    ("k", "dim", "largest", "sorted"),
    aux=True,
)

# -- shape ---------------------------------------------------------------------------------------
unary("reshape", lambda B, g, x_shape: B.reshape(g, x_shape), ("shape",))
# torch's clone of a tensor that requires grad: the identity, its value in memory of its own.
# A reshape to the same shape recorded it until round 94, a view of the source's memory, which
# ``Tensor.numpy()`` hands out writable: ``w0 = p.detach().clone()`` took the user's writes
# into ``p.data.numpy()``
unary("clone", lambda B, g: g, forward=lambda B, x: B.copy_value(x))
unary("permute", lambda B, g, dims: B.permute(g, _inverse_permutation(dims)), ("dims",))
unary("swap_dims", lambda B, g, a, b: B.swap_dims(g, a, b), ("a", "b"))
unary("flip", lambda B, g, dims: B.flip(g, dims), ("dims",))
unary("expand", lambda B, g, x_shape: sum_to_shape(B, g, x_shape), ("shape",))
unary(
    "slice",
    lambda B, g, x_shape, slices: B.slice_backward(g, x_shape, slices),
    ("slices",),
    # a split's pieces add their gradients into one buffer, not each into zeros of its own
    accumulate=lambda B, acc, g, slices: B.slice_accumulate(acc, g, slices),
)
Op(
    "slice_assign",
    ("x", "values"),
    ("slices",),
    (
        lambda B, g, values_shape, slices: B.slice_assign(g, zeros_for(B, g, values_shape), slices),
        lambda B, g, values_shape, slices: sum_to_shape(B, B.slice(g, slices), values_shape),
    ),
    memory_bound=True,
)
Op(
    "cat",
    (),
    ("dim", "bounds"),
    (lambda B, g, index, dim, bounds: B.slice(g, along(dim, slice(*bounds[index]))),),
    memory_bound=True,
    variadic=True,
    forward=lambda B, values, dim, bounds: B.cat(values, dim),
)
unary("repeat_dim", _repeat_dim_vjp, ("dim", "times"))
unary(
    "unfold",
    lambda B, g, x_shape, dim, size, step: B.fold(g, dim, size, step, x_shape[dim]),
    ("dim", "size", "step"),
)
unary(
    "fold",
    lambda B, g, dim, size, step, length: B.unfold(g, dim, size, step),
    ("dim", "size", "step", "length"),
)

# -- indexing ------------------------------------------------------------------------------------
Op(
    "gather",
    ("x", "indices"),
    ("dim",),
    (
        lambda B, g, x_shape, indices, dim: B.gather_backward(g, indices, dim, x_shape),
        None,
    ),
    memory_bound=False,
)
Op(
    "scatter_add",
    ("x", "indices", "values"),
    ("dim",),
    (lambda B, g: g, None, lambda B, g, indices, dim: B.gather(g, indices, dim)),
    memory_bound=False,
)
Op(
    "scatter_assign",
    ("x", "indices", "values"),
    ("dim",),
    (
        lambda B, g, indices, values_shape, dim: B.scatter_assign(
            g, indices, zeros_for(B, g, values_shape), dim
        ),
        None,
        lambda B, g, indices, dim: B.gather(g, indices, dim),
    ),
    memory_bound=False,
)
Op(
    "select",
    ("x", "indices"),
    ("dim",),
    (
        lambda B, g, x_shape, indices, dim: B.select_add(zeros_for(B, g, x_shape), indices, g, dim),
        None,
    ),
    memory_bound=False,
)
Op(
    "select_add",
    ("x", "indices", "values"),
    ("dim",),
    (lambda B, g: g, None, lambda B, g, indices, dim: B.select(g, indices, dim)),
    memory_bound=False,
)


def _select_product_x_vjp(B, g, x, indices, values, dim, reduce):
    """torch's ``scatter_reduce`` "prod" gradient in ``x``: ``g * r / x`` with ``x``'s zeros
    read as 1 in both (``r``: the product with them so), exact at a zero ``x``."""
    _product_only(reduce)
    masked = B.mask_fill(x, B.equal_elem(x, 0.0), 1.0)
    return B.div(B.mul(g, B.select_reduce(masked, indices, values, dim, "prod")), masked)


def _select_product_values_vjp(B, g, x, indices, values, out, dim, reduce):
    """torch's "prod" gradient in ``values``: ``g * out / v`` at the place each value went
    (zeros read as 1); a value that is the only zero at its place gets the product of the
    others, computed with it replaced by 1 (``out / v`` would be 0 there)."""
    _product_only(reduce)
    zero = B.equal_elem(values, 0.0)
    counted = B.select_add(zeros_for(B, g, B.shape(x)), indices, B.cast(zero, B.dtype(g)), dim)
    single = B.logical_and(zero, B.equal_elem(B.select(counted, indices, dim), 1.0))
    others = B.select_reduce(x, indices, B.mask_fill(values, single, 1.0), dim, "prod")
    alone = B.select(B.mul(g, others), indices, dim)
    shared = B.div(B.select(B.mul(g, out), indices, dim), B.mask_fill(values, zero, 1.0))
    return B.mask_where(shared, single, alone)


def _product_only(reduce):
    if reduce != "prod":  # amax/amin run on values outside the graph, their routing apart
        raise AutodiffError(f"select_reduce: no gradient rule for reduce={reduce!r}")


Op(
    "select_reduce",
    ("x", "indices", "values"),
    ("dim", "reduce"),
    (_select_product_x_vjp, None, _select_product_values_vjp),
    memory_bound=False,
)
Op(
    "select_assign",
    ("x", "indices", "values"),
    ("dim",),
    (
        lambda B, g, indices, values_shape, dim: B.select_assign(
            g, indices, zeros_for(B, g, values_shape), dim
        ),
        None,
        lambda B, g, indices, dim: B.select(g, indices, dim),
    ),
    memory_bound=False,
)

# -- linear algebra, softmax ---------------------------------------------------------------------
binary("matmul", _matmul_x_vjp, _matmul_y_vjp, memory_bound=False, broadcast="batch")


def _cdist_diff(B, x1, x2):
    """``x1[..., :, None, :] - x2[..., None, :, :]``: the ``[..., P, R, M]`` differences."""
    s1, s2 = B.shape(x1), B.shape(x2)
    return B.sub(B.reshape(x1, s1[:-1] + (1, s1[-1])), B.reshape(x2, s2[:-2] + (1,) + s2[-2:]))


def _cdist_vjp(B, g, needs, x1, x2, out, p):
    """torch's ``_cdist_backward`` (p > 0): the gradient of each difference, from the
    differences recomputed here (torch's kernel makes them row by row; they are never held),
    summed over ``x2``'s rows for ``x1`` and, negated, over ``x1``'s rows for ``x2``. At
    p = inf each of the tied largest finite sizes takes the whole gradient."""
    diff = _cdist_diff(B, x1, x2)
    grad = B.reshape(g, B.shape(g) + (1,))
    dist = B.reshape(out, B.shape(out) + (1,))
    if p == 1.0:
        slope = B.mul(grad, B.mask_fill(B.sign(diff), B.is_nan(diff), 0.0))
    elif p == math.inf:
        size = B.abs(diff)
        tied = B.logical_and(B.equal(size, dist), B.logical_not(B.is_inf(size)))
        slope = B.mul(
            grad, B.mul(B.mask_fill(B.sign(diff), B.is_nan(diff), 0.0), B.cast(tied, B.dtype(g)))
        )
    else:
        zero = B.equal_elem(dist, 0.0)
        safe = B.mask_fill(dist, zero, 1.0)
        if p == 2.0:
            slope = B.mul(grad, B.div(diff, safe))
        else:
            size = B.abs(diff)
            zero_entry = B.equal_elem(size, 0.0)
            ratio = B.div(B.mask_fill(size, zero_entry, 1.0), safe)
            power = B.mask_fill(B.pow_scalar(ratio, p - 1.0), zero_entry, 0.0)
            slope = B.mul(grad, B.mul(B.sign(diff), power))
        slope = B.mask_fill(slope, zero, 0.0)
    n = len(B.shape(slope))
    g1 = g2 = None
    if needs[0]:
        g1 = B.reshape(B.sum_dim(slope, (n - 2,)), B.shape(slope)[:-2] + B.shape(slope)[-1:])
    if needs[1]:
        summed = B.sum_dim(slope, (n - 3,))
        g2 = B.neg(B.reshape(summed, B.shape(summed)[:-3] + B.shape(summed)[-2:]))
    return g1, g2


Op(
    "cdist",
    ("x1", "x2"),
    ("p",),
    (_cdist_vjp,) * 2,
    memory_bound=False,
    broadcast="batch",
    joint=True,
)


# torch's grid_sample (float32/float64, a tracked input or grid): one op whose rule reads the
# input and the grid, as torch's grid_sampler_2d_backward saves them; the corner weights,
# indices and values are recomputed in the backward primitive. As a composite it held each
# corner's values, weights and masks: 7x torch's bytes bilinear, 29x bicubic (7 December).
def _grid_sample_vjp(B, g, needs, x, grid, mode, padding_mode, align):
    return B.grid_sample_backward(g, x, grid, mode, padding_mode, align, needs)


Op(
    "grid_sample",
    ("x", "grid"),
    ("mode", "padding_mode", "align"),
    (_grid_sample_vjp,) * 2,
    memory_bound=False,
    joint=True,
    # torch's grid_sampler_2d_backward: the input's gradient requires grad, of no derivative
    # in the input and zeros in the grid (nearest: what the grid picks is constant)
    links={0: ((0, "none"), (1, "zeros"))},
)


# F.binary_cross_entropy_with_logits with pos_weight (float32/float64): one op whose rules read
# the logits, the targets and pos_weight, as torch's saves them; as a composite its products'
# rules held 1 - y and the weight 1 + (pos_weight - 1) y, two untracked values of the input's
# size (1.49x torch's bytes; 7 December). The rules are the composite's arithmetic.
def _bce_pos_factor(B, y, pos):
    return B.add_scalar(B.mul(B.sub_scalar(pos, 1.0), y), 1.0)


def _bce_pos_forward(B, x, y, pos):
    weighted = B.mul(B.log_sigmoid(x), _bce_pos_factor(B, y, pos))
    return B.sub(B.mul(B.rsub_scalar(y, 1.0), x), weighted)


def _bce_pos_x_rule(B, g, x, y, pos):
    through_log_sigmoid = B.mul(B.mul(B.neg(g), _bce_pos_factor(B, y, pos)), B.sigmoid(B.neg(x)))
    return B.add(B.mul(g, B.rsub_scalar(y, 1.0)), through_log_sigmoid)


def _bce_pos_y_rule(B, g, x, y, pos):
    through_factor = B.mul(B.mul(B.neg(g), B.log_sigmoid(x)), B.sub_scalar(pos, 1.0))
    return B.add(B.neg(B.mul(g, x)), through_factor)


def _bce_pos_weight_rule(B, g, x, y):
    return B.mul(B.mul(B.neg(g), B.log_sigmoid(x)), y)


Op(
    "bce_with_logits_pos_weight",
    ("x", "y", "pos"),
    (),
    (_bce_pos_x_rule, _bce_pos_y_rule, _bce_pos_weight_rule),
    memory_bound=True,
    broadcast=True,
    forward=_bce_pos_forward,
)


# F.binary_cross_entropy_with_logits (no weights) and F.mse_loss of two float tensors of one
# shape, their reduction included, as torch's autograd records each: one function whose
# backward is torch's kernel formula, so that the gradients are torch's to the bit. Reduced
# apart, the mean's rule divided the gradient before the loss's rule multiplied it (and the
# composites' rules summed two terms for the logits: ``(1 - y) g - sigmoid(-x) g``), an ulp
# off torch's in 30-75% of the elements. The forwards are the composites', op for op.
def _reduced(B, losses, reduction):
    if reduction == "mean":
        return B.mean(losses)
    return B.sum(losses) if reduction == "sum" else losses


def _mean_divided(B, grad, x, reduction):
    return B.div_scalar(grad, math.prod(B.shape(x))) if reduction == "mean" else grad


def _bce_logits_forward(B, x, y, reduction):
    return _reduced(B, B.sub(B.mul(B.rsub_scalar(y, 1.0), x), B.log_sigmoid(x)), reduction)


Op(
    "bce_with_logits_loss",
    ("x", "y"),
    ("reduction",),
    (
        # torch's binary_cross_entropy_with_logits_backward: (sigmoid(x) - y) * g, then / n
        lambda B, g, x, y, reduction: _mean_divided(
            B, B.mul(B.sub(B.sigmoid(x), y), g), x, reduction
        ),
        # and its target's: -(x * g), then / n
        lambda B, g, x, reduction: _mean_divided(B, B.neg(B.mul(x, g)), x, reduction),
    ),
    memory_bound=True,
    broadcast=False,
    forward=_bce_logits_forward,
)


def _mse_rule(B, g, x, y, reduction):
    # torch's mse_loss_backward: norm * (x - y) * g, norm = 2 / n for a mean (else 2) taken in
    # the dtype (2 * (1 / n) is 2 / n to the bit); for the target the same, x and y swapped
    return B.mul(B.mul_scalar(B.sub(x, y), 2.0 * _loss_norm(B, x, reduction)), g)


def _soft_margin_rule(B, g, x, y, reduction):
    # torch's soft_margin_loss_backward, in its order: z = exp(-y x); y z * -norm, / (1 + z),
    # * g (the composite's rules, exp's then log1p's, rounded otherwise in a third to half)
    z = B.exp(B.mul(B.neg(y), x))
    scaled = B.mul_scalar(B.mul(y, z), -_loss_norm(B, x, reduction))
    return B.mul(B.div(scaled, B.add_scalar(z, 1.0)), g)


# F.soft_margin_loss of an input and a target of one shape and dtype (float32/float64, the
# target untracked: torch's has no target gradient), its reduction inside as torch records it
Op(
    "soft_margin_loss",
    ("x", "y"),
    ("reduction",),
    (_soft_margin_rule, None),
    memory_bound=True,
    broadcast=False,
    forward=lambda B, x, y, reduction: _reduced(B, B.log1p(B.exp(B.mul(B.neg(y), x))), reduction),
)


Op(
    "mse_loss",
    ("x", "y"),
    ("reduction",),
    (_mse_rule, lambda B, g, x, y, reduction: _mse_rule(B, g, y, x, reduction)),
    memory_bound=True,
    broadcast=False,
    forward=lambda B, x, y, reduction: _reduced(B, B.square(B.sub(x, y)), reduction),
)


# F.nll_loss and F.cross_entropy's class-index loss without class weights or label smoothing
# (float32/float64): one op, the composite's arithmetic in its order (the losses picked by
# ``gather``, negated, 0 where ignored; "mean" divides their sum by the number of targets that
# count, by way of ``mean`` when none is ignored, chosen on the device: knowing which applies
# would read the targets on the host). Its rule is torch's nll_loss_backward: ``-g / count``
# (``-g`` for "sum" and "none"), 0 where ignored, written into zeros at each target's class.
# As a composite it was 9 recorded nodes for one loss (7 December).
def _nll_targets(B, target, dim, ignore_index):
    ignored = B.equal_elem(target, ignore_index)
    shape = B.shape(target)
    index = B.reshape(B.mask_fill(target, ignored, 0), shape[:dim] + (1,) + shape[dim:])
    return ignored, index


def _nll_forward(B, log_probs, target, dim, ignore_index, reduction):
    ignored, index = _nll_targets(B, target, dim, ignore_index)
    picked = B.gather(log_probs, index, dim)
    losses = B.mask_fill(B.neg(B.reshape(picked, B.shape(target))), ignored, 0.0)
    if reduction != "mean":
        return B.sum(losses) if reduction == "sum" else losses
    counted = B.sum(B.logical_not(ignored))
    by_count = B.div(B.sum(losses), B.cast(counted, B.dtype(log_probs)))
    return B.mask_where(by_count, B.equal_elem(counted, math.prod(B.shape(target))), B.mean(losses))


def _nll_rule(B, g, log_probs_shape, target, dim, ignore_index, reduction):
    ignored, index = _nll_targets(B, target, dim, ignore_index)
    shape = B.shape(target)
    if reduction == "mean":
        # (the count as a float is the number of targets itself when none is ignored)
        counted = B.cast(B.sum(B.logical_not(ignored)), B.dtype(g))
        g = B.expand(B.div(g, counted), shape)
    elif reduction == "sum":
        g = B.expand(g, shape)
    per_target = B.reshape(B.mask_fill(B.neg(g), ignored, 0.0), B.shape(index))
    zeros = B.zeros(log_probs_shape, B.dtype(g), B.device(g))
    return B.scatter_assign(zeros, index, per_target, dim)


Op(
    "nll_loss",
    ("log_probs", "target"),
    ("dim", "ignore_index", "reduction"),
    (_nll_rule, None),
    memory_bound=True,
    forward=_nll_forward,
    # torch's nll_loss_backward takes the input: under create_graph the gradient is a
    # function of it, of zero derivative (the composite's ``kernel_input_gate``)
    links={0: ((0, "zeros"),)},
)


# F.affine_grid (float32/float64, a tracked theta): one op whose rule reads the points of each
# axis (``axes``, the linspaces of x, y[, z] end to end, a constant kept on the device) and
# rebuilds the base grid from them, as torch's affine_grid_generator_backward: as a composite
# the matmul's rule held the [1, H * W, 3] base grid, an untracked value 1.5x the grid's size
# (torch holds nothing; 7 December).
def _affine_base(B, axes, size, align):
    """The base grid ``[1, prod(size[2:]), S + 1]``, its last axis (x, y[, z], 1), x varying
    fastest: the arithmetic of ``nn.functional.grid``'s composite."""
    shape = tuple(size[2:])
    columns, start = [], 0
    for k, steps in enumerate(reversed(shape)):
        coords = B.slice(axes, (slice(start, start + steps, 1),))
        start += steps
        if steps > 1 and not align:
            coords = B.div_scalar(B.mul_scalar(coords, float(steps - 1)), float(steps))
        dim = len(shape) - 1 - k
        view = [1] * len(shape)
        view[dim] = shape[dim]
        columns.append(B.expand(B.reshape(coords, tuple(view)), shape))
    columns.append(B.add_scalar(B.mul_scalar(columns[0], 0.0), 1.0))
    base = B.cat([B.reshape(c, (*shape, 1)) for c in columns], len(shape))
    return B.reshape(base, (1, math.prod(shape), len(shape) + 1))


def _affine_grid_forward(B, theta, axes, size, align):
    grid = B.matmul(_affine_base(B, axes, size, align), B.swap_dims(theta, 1, 2))
    return B.reshape(grid, (size[0], *size[2:], len(size) - 2))


def _affine_grid_vjp(B, g, axes, size, align):
    base = _affine_base(B, axes, size, align)
    points = B.reshape(g, (size[0], math.prod(size[2:]), len(size) - 2))
    return B.swap_dims(B.matmul(B.swap_dims(base, -1, -2), points), 1, 2)


Op(
    "affine_grid",
    ("theta", "axes"),
    ("size", "align"),
    (_affine_grid_vjp, None),
    memory_bound=False,
    forward=_affine_grid_forward,
)


# F.pdist (float32/float64, p > 0, a tracked input): one op whose rule reads the input and the
# distances, as torch's _pdist_backward; the pairs' differences are recomputed in the forward
# and the rule (cdist's arithmetic, one row pair at a time), never held. As a composite it
# held the [pairs, M] differences: 23x torch's bytes for 64 rows (7 December).
def _pdist_pairs(B, x):
    """The rows of ``x`` ``[N, M]`` paired ``i < j`` in row-major order, each ``[pairs, 1, M]``
    (cdist's batch of one row each), and the pairs' indices."""
    import numpy as np

    n, m = B.shape(x)
    rows, cols = (
        B.from_data(i.astype(np.int64), "int64", B.device(x)) for i in np.triu_indices(n, 1)
    )
    pairs = n * (n - 1) // 2
    left, right = (B.reshape(B.select(x, i, 0), (pairs, 1, m)) for i in (rows, cols))
    return left, right, rows, cols


def _pdist_forward(B, x, p):
    left, right, _, _ = _pdist_pairs(B, x)
    out = B.cdist(left, right, p)
    return B.reshape(out, B.shape(out)[:1])


def _pdist_vjp(B, g, x, out, p):
    left, right, rows, cols = _pdist_pairs(B, x)
    pairs, m = B.shape(left)[0], B.shape(x)[1]
    g_left, g_right = _cdist_vjp(
        B, B.reshape(g, (pairs, 1, 1)), (True, True), left, right, B.reshape(out, (pairs, 1, 1)), p
    )
    zeros = B.zeros(B.shape(x), B.dtype(g), B.device(g))
    # each row's gradient as torch's kernel sums it: its pairs with the rows before it, then
    # with the rows after it
    total = B.select_add(zeros, cols, B.reshape(g_right, (pairs, m)), 0)
    return B.select_add(total, rows, B.reshape(g_left, (pairs, m)), 0)


Op("pdist", ("x",), ("p",), (_pdist_vjp,), memory_bound=False, forward=_pdist_forward)


# Tensor.renorm (a tracked real float input): the input times its slices' scale factors (an
# untracked [1, .., C, .., 1] value, 1 where a slice's norm is within maxnorm), one op whose
# rule reads the input alone and recomputes the norms, as torch's renorm_backward: as a
# composite of a differentiable norm, a division and a product it held the masked input and
# the factor's quotient beside it, 2.04x torch's bytes (7 December). The rule is torch's
# arithmetic in its accumulation dtype (float64 for float32, as torch's CPU kernel).
_RENORM_ACCUMULATE = {"float32": "float64", "float64": "float64"}


def _renorm_norm(B, x, p, dims):
    """The ``p``-norm (``p > 0``) of ``x`` over ``dims``, kept as size-1 dims."""
    if p == 2:
        return B.norm2(x, dims)
    magnitude = B.abs(x)
    if p == 1:
        return B.sum_dim(magnitude, dims)
    if p == math.inf:
        return _extremum_over(B, magnitude, dims, "max_dim")
    return B.pow_scalar(B.sum_dim(B.pow_scalar(magnitude, float(p)), dims), 1.0 / p)


def _renorm_norm_backward(B, g, x, p, norm, dims):
    """torch's norm_backward (``p > 0``): the gradient in ``x`` of its ``p``-norm ``norm``
    over ``dims``, for the incoming ``g`` of the norm (both kept as size-1 dims)."""
    at_zero = B.equal_elem(norm, 0.0)
    if p == 1:
        return B.mul(B.sign(x), g)
    if p == 2:
        return B.mul(g, B.mask_fill(B.div(x, norm), at_zero, 0.0))
    if p == math.inf:
        # the gradient split among the entries at the norm
        at_norm = B.cast(B.equal(B.abs(x), norm), B.dtype(x))
        count = B.sum_dim(at_norm, dims)
        return B.mul(B.mul(B.sign(x), at_norm), B.div(g, count))
    magnitude = B.abs(x)
    scale = B.mask_fill(B.div(g, B.pow_scalar(norm, p - 1.0)), at_zero, 0.0)
    if p < 1:
        scaled = B.mask_fill(
            B.mul(B.sign(x), B.pow_scalar(magnitude, p - 1.0)), B.equal_elem(x, 0.0), 0.0
        )
        return B.mul(B.mul(scaled, g), B.pow_scalar(norm, 1.0 - p))
    if p < 2:
        return B.mul(B.mul(B.sign(x), B.pow_scalar(magnitude, p - 1.0)), scale)
    return B.mul(B.mul(x, B.pow_scalar(magnitude, p - 2.0)), scale)


def _renorm_vjp(B, g, x, p, dims, maxnorm):
    # torch's renorm_backward: where the norm exceeds maxnorm,
    # maxnorm / (norm + 1e-7) * (g - nb / (norm + 1e-7)), nb the norm's gradient for the
    # incoming sum(x * g); elsewhere g
    given = B.dtype(g)
    wide = _RENORM_ACCUMULATE.get(given, "float32")
    xw, gw = B.cast(x, wide), B.cast(g, wide)
    norm = _renorm_norm(B, xw, p, dims)
    through_norm = _renorm_norm_backward(B, B.sum_dim(B.mul(xw, gw), dims), xw, p, norm, dims)
    inverse = B.recip(B.add_scalar(norm, 1e-7))
    scaled = B.mul(B.mul_scalar(inverse, maxnorm), B.sub(gw, B.mul(inverse, through_norm)))
    exceeds = B.expand(B.greater_elem(norm, maxnorm), B.shape(g))
    return B.mask_where(g, exceeds, B.cast(scaled, given))


Op(
    "renorm",
    ("x", "factor"),
    ("p", "dims", "maxnorm"),
    (_renorm_vjp, None),
    memory_bound=False,
    forward=lambda B, x, factor, p, dims, maxnorm: B.mul(x, factor),
)


# F.bilinear (float32/float64, something tracked; the bias added apart): one op whose rule
# reads the two inputs and the weight, as torch's _trilinear saves them; the product of the
# first input and the weight is recomputed in the rule. As a composite (a matmul, a product,
# a sum) its rules held the weight's permuted copy and that product, 2.35x torch's bytes for
# 32 pairs of 20 and 24 features into 16 (7 December). Forward and rules are the composite's
# arithmetic, op for op, so its values and gradients are the composite's bits.
def _bilinear_parts(B, x1, x2, weight):
    """The composite's operands: ``x1`` ``[n, in1]``, the weight ``[in1, out * in2]`` and
    ``x2`` ``[n, 1, in2]``."""
    out_features, in1, in2 = B.shape(weight)
    n = math.prod(B.shape(x1)[:-1])
    w = B.reshape(B.permute(weight, (1, 0, 2)), (in1, out_features * in2))
    return B.reshape(x1, (n, in1)), w, B.reshape(x2, (n, 1, in2))


def _bilinear_forward(B, x1, x2, weight):
    out_features, _, in2 = B.shape(weight)
    left, w, right = _bilinear_parts(B, x1, x2, weight)
    n = B.shape(left)[0]
    pairs = B.mul(B.reshape(B.matmul(left, w), (n, out_features, in2)), right)
    return B.reshape(B.sum_dim(pairs, (2,)), (*B.shape(x1)[:-1], out_features))


def _bilinear_vjp(B, g, needs, x1, x2, weight):
    out_features, in1, in2 = B.shape(weight)
    left, w, right = _bilinear_parts(B, x1, x2, weight)
    n = B.shape(left)[0]
    # the sum's rule, then the product's, then the matmul's, as the composite's ran
    spread = B.expand(B.reshape(g, (n, out_features, 1)), (n, out_features, in2))
    g_x1 = g_x2 = g_weight = None
    if needs[0] or needs[2]:
        g_left = B.reshape(B.mul(spread, right), (n, out_features * in2))
        if needs[0]:
            g_x1 = B.reshape(_matmul_x_vjp(B, g_left, w), B.shape(x1))
        if needs[2]:
            g_w = B.reshape(_matmul_y_vjp(B, g_left, left), (in1, out_features, in2))
            g_weight = B.permute(g_w, (1, 0, 2))
    if needs[1]:
        product = B.reshape(B.matmul(left, w), (n, out_features, in2))
        g_x2 = B.reshape(B.sum_dim(B.mul(spread, product), (1,)), B.shape(x2))
    return g_x1, g_x2, g_weight


Op(
    "bilinear",
    ("x1", "x2", "weight"),
    (),
    (_bilinear_vjp,) * 3,
    memory_bound=False,
    joint=True,
    forward=_bilinear_forward,
)


# F.embedding_bag, modes sum and mean (a tracked float32/float64 weight, no per-sample weights
# nor frequency scaling): the bags' sums, one op whose rule reads the entries' indices and
# where each bag ends, as torch's _embedding_bag saves its indices and offsets. The forward
# sums the padded [bags, longest] rows (the composite's arithmetic, so its bits), and the
# rule adds each entry's bag gradient into its row, entry by entry as the composite's rule
# did; as a composite its rules held the padded indices and the mask's scale (1.77x torch's
# bytes for 40 entries in 5 bags; 7 December).
def _embedding_bag_sum_forward(B, weight, padded, keep, flat, ends, padding):
    bags, longest = B.shape(padded)
    rows = B.select(weight, B.reshape(padded, (bags * longest,)), 0)
    rows = B.reshape(rows, (bags, longest, B.shape(weight)[1]))
    scale = B.reshape(B.cast(keep, B.dtype(weight)), (bags, longest, 1))
    return B.reshape(B.sum_dim(B.mul(rows, scale), (1,)), (bags, B.shape(weight)[1]))


def _embedding_bag_sum_vjp(B, g, weight_shape, flat, ends, padding):
    entries = B.shape(flat)[0]
    # each entry's bag (torch's offset2bag): a count of the bag ends at or before it
    marks = B.zeros((entries + 1,), "int64", B.device(flat))
    marks = B.select_add(marks, ends, B.ones(B.shape(ends), "int64", B.device(flat)), 0)
    bag_of = B.slice(B.cumsum(marks, 0), (slice(0, entries, 1),))
    per_entry = B.select(g, bag_of, 0)
    if padding >= 0:  # (entries at padding_idx give their row nothing)
        skipped = B.reshape(B.equal_elem(flat, padding), (entries, 1))
        per_entry = B.mask_fill(per_entry, skipped, 0.0)
    return B.select_add(zeros_for(B, g, weight_shape), flat, per_entry, 0)


Op(
    "embedding_bag_sum",
    ("weight", "padded", "keep", "flat", "ends"),
    ("padding",),
    (_embedding_bag_sum_vjp, None, None, None, None),
    memory_bound=False,
    forward=_embedding_bag_sum_forward,
)


# F.ctc_loss (float32/float64 log-probabilities): each sequence's negative log-likelihood, one
# op (the protocol's ctc_loss) whose rule reads the log-probabilities and the padded targets
# and reruns the alpha recursion beside the beta recursion (backend/protocol_ctc.py). As a
# composite of tensor ops its rules held each time step's candidates, shifted alphas and
# masks, 4.1x torch's bytes for 30 steps of 4 sequences of up to 8 labels (torch's _ctc_loss
# holds its alphas; 7 December). The forward is the composite's arithmetic, op for op.
def _ctc_vjp(B, g, x, targets, out, blank, in_lengths, out_lengths):
    # (torch's _ctc_loss_backward has no derivative: recorded, the gradient refuses one; a
    # gate before the op would hold the log-probabilities a second time)
    grad = B.ctc_loss_backward(g, x, targets, out, blank, in_lengths, out_lengths)
    return B.first_order_only(grad, "ctc_loss")


Op(
    "ctc_loss",
    ("x", "targets"),
    ("blank", "in_lengths", "out_lengths"),
    (_ctc_vjp, None),
    memory_bound=False,
)


def _sparse_coo_mm_values_vjp(B, g, rows, cols, dense):
    """The gradient of each stored value: the dot product of its output row of ``g`` with
    the row of ``dense`` it multiplied (torch's, a repeated index's values each getting it)."""
    picked = B.mul(B.select(g, rows, 0), B.select(dense, cols, 0))
    return B.reshape(B.sum_dim(picked, (1,)), (-1,))


Op(
    "sparse_coo_mm",
    ("rows", "cols", "values", "dense"),
    ("num_rows",),
    (
        None,
        None,
        _sparse_coo_mm_values_vjp,
        # the transposed sparse matrix times g: the same kernel, rows and columns swapped
        lambda B, g, rows, cols, values, dense_shape: B.sparse_coo_mm(
            cols, rows, values, g, dense_shape[0]
        ),
    ),
    memory_bound=False,
)
binary(
    "cross",
    lambda B, g, y, dim: B.cross(y, g, dim),
    lambda B, g, x, dim: B.cross(g, x, dim),
    ("dim",),
)


def _inverse_vjp(B, g, out):
    """``d(A^-1) = -A^-1 dA A^-1``, so the gradient is ``-out^H g out^H``."""
    out_t = _mh(B, out)
    return B.neg(B.matmul(B.matmul(out_t, g), out_t))


def _pinv_vjp(B, g, x, out, atol, rtol):
    """torch's ``pinv_backward`` (Golub and Pereyra's derivative, valid where the rank is
    locally constant), real case, arranged so the products are of the smaller side."""
    m, n = B.shape(x)[-2:]
    mm, t = B.matmul, (lambda a: _mh(B, a))
    out_t, g_t = t(out), t(g)
    if m <= n:
        k = mm(g_t, out)
        k_out_t = mm(k, out_t)
        terms = B.sub(B.neg(t(mm(out, k))), B.sub(mm(mm(x, out), k_out_t), k_out_t))
        return B.add(terms, mm(mm(out_t, out), B.sub(g_t, mm(k, x))))
    k = mm(out, g_t)
    out_t_k = mm(out_t, k)
    terms = B.add(B.neg(t(mm(k, out))), mm(mm(B.sub(g_t, mm(x, k)), out), out_t))
    return B.sub(B.add(terms, out_t_k), mm(mm(out_t_k, out), x))


def _mh(B, a):
    """The conjugate transpose of each matrix of ``a`` (the transpose of a real one)."""
    swapped = B.swap_dims(a, -1, -2)
    return B.conj(swapped) if _is_complex(B, a) else swapped


def _last(B, x, start, stop):
    """``x[..., start:stop]``."""
    return B.slice(x, (slice(None),) * (len(B.shape(x)) - 1) + (slice(start, stop),))


def unpack(B, packed, shapes):
    """The factors a decomposition kernel packed side by side along the last dim (see
    ``linalg_svd`` of the backend protocol): one array of each matrix shape in ``shapes``
    (``(k,)`` for a vector), with the leading dims of ``packed``."""
    batch, start, parts = B.shape(packed)[:-1], 0, []
    for shape in shapes:
        size = math.prod(shape)
        parts.append(B.reshape(_last(B, packed, start, start + size), batch + tuple(shape)))
        start += size
    return parts


def _diag_embed(B, v):
    """``[..., k]`` to ``[..., k, k]`` with ``v`` on the diagonal."""
    k = B.shape(v)[-1]
    return B.mul(B.reshape(v, B.shape(v) + (1,)), B.eye(k, k, B.dtype(v), B.device(v)))


def _spectral_gaps(B, values):
    """``E[i, j] = values[j] - values[i]`` with ones on the diagonal (torch's ``E``)."""
    shape = B.shape(values)
    k = shape[-1]
    rows = B.reshape(values, shape[:-1] + (1, k))
    cols = B.reshape(values, shape[:-1] + (k, 1))
    return B.add(B.sub(rows, cols), B.eye(k, k, B.dtype(values), B.device(values)))


def _over_gaps(B, numerator, gaps):
    """``numerator / gaps``, zero where both are (0 / 0): the gradient reaching no
    eigen/singular vector (``eigvalsh``, ``svdvals``, or ``eigh`` used for its values only) is
    then exact for repeated values too, as torch's (which leaves that gradient undefined);
    where a vector's gradient meets a repeated value the result is infinite, as torch's. The
    mask looks at the gaps too, not at the numerator alone: a numerator zero in value but
    recorded (the zero output gradients of torch's double-backward trick, which
    ``autograd.functional.hvp`` differentiates) keeps its derivative."""
    if B.shape(gaps) != B.shape(numerator):
        gaps = B.expand(gaps, B.shape(numerator))
    undefined = B.logical_and(B.equal_elem(numerator, 0.0), B.equal_elem(gaps, 0.0))
    return B.mask_fill(B.div(numerator, B.mask_fill(gaps, undefined, 1.0)), undefined, 0.0)


def _eigh_vjp(B, g, out, upper):
    """torch's ``linalg_eig_backward`` for a symmetric (Hermitian) input: ``V (skew(V^H gV) /
    E + diag(gL)) V^H`` with ``skew(X) = (X - X^H) / 2``; a complex one's loss must not
    depend on the eigenvectors' phase."""
    n = B.shape(out)[-1] - 1
    vectors, values = _last(B, out, 0, n), B.reshape(_last(B, out, n, n + 1), B.shape(out)[:-1])
    g_vectors, g_values = _last(B, g, 0, n), B.reshape(_last(B, g, n, n + 1), B.shape(g)[:-1])
    vhgv = B.matmul(_mh(B, vectors), g_vectors)
    if _is_complex(B, vhgv):
        _check_phase_invariant(B, B.imag(_diagonal(B, vhgv)), "linalg.eigh", "eigenvectors")
    skew = B.mul_scalar(B.sub(vhgv, _mh(B, vhgv)), 0.5)
    inner = B.add(_over_gaps(B, skew, _spectral_gaps(B, values)), _diag_embed(B, g_values))
    return B.matmul(vectors, B.matmul(inner, _mh(B, vectors)))


def _is_complex(B, a):
    return B.dtype(a) in ("complex64", "complex128")


def _imaginary(B, a):
    """The imaginary parts of the diagonal of each matrix of complex ``a``, in its dtype."""
    return B.cast(B.imag(_diagonal(B, a)), B.dtype(a))


def _diagonal(B, a):
    """``[..., k, k]`` to its diagonal ``[..., k]``."""
    shape = B.shape(a)
    summed = B.sum_dim(
        B.mul(a, B.eye(shape[-1], shape[-1], B.dtype(a), B.device(a))), (len(shape) - 1,)
    )
    return B.reshape(summed, shape[:-1])


def _check_phase_invariant(B, imaginary_diagonal, op, vectors):
    """torch's check that a loss does not depend on the phase of complex eigen/singular
    vectors (``v -> v e^{i phi}``): the imaginary part of ``diag(V^H gV)`` must vanish."""
    largest = max((abs(float(v)) for v in B.to_numpy(imaginary_diagonal).reshape(-1)), default=0)
    if largest > 1e-2:  # torch's tolerance (allclose with rtol = atol = 1e-2)
        raise AutodiffError(
            f"{op}: the {vectors} in the complex case are specified up to multiplication by "
            "e^{i phi}; the loss depends on this phase, so its gradient is ill-defined (as "
            "torch's)"
        )


def _eig_vjp(B, g, out):
    """torch's ``linalg_eig_backward``: ``gA = V^-H (diag(gL) + (V^H gV - V^H V
    diag(re(diag(V^H gV)))) / conj(E)) V^H`` with ``E[i, j] = L[j] - L[i]`` (the projection
    onto the tangent space of unit eigenvectors), refusing a loss that depends on the
    eigenvectors' phase."""
    n = B.shape(out)[-1] - 1
    vectors, values = _last(B, out, 0, n), B.reshape(_last(B, out, n, n + 1), B.shape(out)[:-1])
    g_vectors, g_values = _last(B, g, 0, n), B.reshape(_last(B, g, n, n + 1), B.shape(g)[:-1])
    vh = _mh(B, vectors)
    vhgv = B.matmul(vh, g_vectors)
    diagonal = _diagonal(B, vhgv)
    _check_phase_invariant(B, B.imag(diagonal), "linalg.eig", "eigenvectors")
    real_diagonal = B.cast(B.real(diagonal), B.dtype(vectors))
    shape = B.shape(real_diagonal)
    scaled = B.mul(vectors, B.reshape(real_diagonal, shape[:-1] + (1, shape[-1])))
    vhgv = B.sub(vhgv, B.matmul(vh, scaled))
    inner = B.add(_over_gaps(B, vhgv, _spectral_gaps(B, B.conj(values))), _diag_embed(B, g_values))
    return B.solve(vh, B.matmul(inner, vh))


def _svd_shapes(m, n, full_matrices):
    k = min(m, n)
    return ((m, m if full_matrices else k), (k,), (n if full_matrices else k, n))


def _svd_vjp(B, g, x_shape, out, full_matrices):
    """torch's ``svd_backward``, valid for distinct non-zero singular values: with
    ``full_matrices`` the columns of ``U`` and rows of ``Vh`` past ``k = min(m, n)`` get no
    gradient (torch's docs: they are arbitrary bases). For complex ``A``: conjugate
    transposes, torch's check that the loss does not depend on the singular vectors' phase,
    and its term of ``U``'s phase on the diagonal."""
    m, n = x_shape[-2:]
    k = min(m, n)
    shapes = _svd_shapes(m, n, full_matrices)
    u, s, vh = unpack(B, out, shapes)
    gu, gs, gvh = unpack(B, g, shapes)
    if full_matrices:
        u, gu = _last(B, u, 0, k), _last(B, gu, 0, k)
        vh, gvh = _mh(B, _last(B, _mh(B, vh), 0, k)), _mh(B, _last(B, _mh(B, gvh), 0, k))
    uhgu = B.matmul(_mh(B, u), gu)
    uhgu = B.sub(uhgu, _mh(B, uhgu))
    vhgv = B.matmul(vh, _mh(B, gvh))
    vhgv = B.sub(vhgv, _mh(B, vhgv))
    rows, cols = B.reshape(s, B.shape(s)[:-1] + (1, k)), B.reshape(s, B.shape(s)[:-1] + (k, 1))
    numerator = B.add(B.mul(uhgu, rows), B.mul(cols, vhgv))
    inner = B.add(_over_gaps(B, numerator, _spectral_gaps(B, B.square(s))), _diag_embed(B, gs))
    if _is_complex(B, uhgu):
        _check_phase_invariant(
            B,
            B.add(B.imag(_diagonal(B, uhgu)), B.imag(_diagonal(B, vhgv))),
            "linalg.svd",
            "singular vectors",
        )
        # the phase the loss sees through U's diagonal: i Im(diag(U^H gU)) / S
        extra = _over_gaps(B, B.mul_scalar(_imaginary(B, uhgu), 0.5j), s)
        inner = B.add(inner, _diag_embed(B, extra))
    if m > n:
        gu_sinv = _over_gaps(B, gu, rows)
        left = B.add(B.matmul(u, inner), gu_sinv)
        left = B.sub(left, B.matmul(u, B.matmul(_mh(B, u), gu_sinv)))
        return B.matmul(left, vh)
    if m < n:
        sinv_gvh = _over_gaps(B, gvh, cols)
        right = B.add(B.matmul(inner, vh), sinv_gvh)
        right = B.sub(right, B.matmul(B.matmul(sinv_gvh, _mh(B, vh)), vh))
        return B.matmul(u, right)
    return B.matmul(u, B.matmul(inner, vh))


def _qr_shapes(m, n, mode):
    k = m if mode == "complete" else min(m, n)
    return ((m, 0 if mode == "r" else k), (k, n))


def _qr_vjp(B, g, x_shape, out, mode):
    """torch's ``linalg_qr_backward``: with ``M = gR R^H - Q^H gQ``, for ``m >= n`` ``gA =
    (gQ + Q copyltu(M)) R^-H`` (``copyltu`` mirrors the upper triangle of ``M`` down, its
    diagonal real: torch's ``syminvadj``); for ``m < n`` ``gA = [Q tril(M^H - M) R1^-H, 0]
    + Q gR`` with ``R1`` the leading ``m x m`` block of ``R`` (the imaginary diagonal
    halved: torch's ``trilImInvAdjSkew``)."""
    m, n = x_shape[-2:]
    if mode == "r":
        raise InvalidArgumentError(
            "linalg.qr: the derivative of linalg.qr depends on Q, which is not computed when "
            "mode='r'; use mode='reduced' to differentiate through it"
        )
    if mode == "complete" and m > n:
        raise InvalidArgumentError(
            f"linalg.qr: the QR decomposition of {m} by {n} matrices is not differentiable "
            "when mode='complete' and nrows > ncols"
        )
    q, r = unpack(B, out, _qr_shapes(m, n, mode))
    gq, gr = unpack(B, g, _qr_shapes(m, n, mode))
    k = min(m, n)
    positions = B.arange(0, k, 1, "int64", B.device(out))
    rows, cols = B.reshape(positions, (k, 1)), B.reshape(positions, (1, k))
    big_m = B.sub(B.matmul(gr, _mh(B, r)), B.matmul(_mh(B, q), gq))
    if m >= n:
        upper = B.mask_fill(big_m, B.greater(rows, cols), 0.0)  # triu(M)
        strict = B.mask_fill(big_m, B.greater_equal(rows, cols), 0.0)  # triu(M, 1)
        mirrored = B.add(upper, _mh(B, strict))
        if _is_complex(B, mirrored):  # torch's syminvadj: the diagonal's real part
            mirrored = B.sub(mirrored, _diag_embed(B, B.mul_scalar(_imaginary(B, mirrored), 1j)))
        b = B.add(B.matmul(q, mirrored), gq)
        return _mh(B, _solve_upper_transposed(B, r, _mh(B, b)))
    lower = B.mask_fill(B.sub(_mh(B, big_m), big_m), B.lower(rows, cols), 0.0)
    if _is_complex(B, lower):  # torch's trilImInvAdjSkew: half the imaginary diagonal
        lower = B.sub(lower, _diag_embed(B, B.mul_scalar(_imaginary(B, lower), 0.5j)))
    b = B.matmul(q, lower)
    r1 = _last(B, r, 0, m)
    head = _mh(B, _solve_upper_transposed(B, r1, _mh(B, b)))
    tail = B.zeros(B.shape(head)[:-1] + (n - m,), B.dtype(head), B.device(head))
    return B.add(B.cat([head, tail], len(B.shape(head)) - 1), B.matmul(q, gr))


def _solve_upper_transposed(B, r, rhs):
    """``X`` with ``R X = rhs`` for upper-triangular ``R``: ``(b R^-T)^T = R^-1 b^T``. A
    singular ``R`` (a rank-deficient input) is solved by back-substitution, dividing by its
    zero pivots as torch's triangular solve does: inf and NaN, not an error."""
    try:
        return B.solve(r, rhs)
    except InvalidArgumentError:
        return _back_substitute(B, r, rhs)


def _back_substitute(B, r, rhs):
    """``R X = rhs`` for upper-triangular ``R``, one row of ``X`` at a time from the last."""
    k = B.shape(r)[-1]
    lead = (slice(None),) * (len(B.shape(r)) - 2)
    rows: list = []  # the rows of X solved so far, i + 1 ... k - 1
    for i in reversed(range(k)):
        acc = B.slice(rhs, lead + (slice(i, i + 1), slice(None)))
        if rows:
            known = B.cat(rows, len(B.shape(r)) - 2)
            acc = B.sub(acc, B.matmul(B.slice(r, lead + (slice(i, i + 1), slice(i + 1, k))), known))
        rows.insert(0, B.div(acc, B.slice(r, lead + (slice(i, i + 1), slice(i, i + 1)))))
    return B.cat(rows, len(B.shape(r)) - 2)


def _matrix_exp_vjp(B, g, x):
    """The gradient of ``exp(A)`` is the top-right block of ``exp([[A^T, g], [0, A^T]])``
    (Mathias' block-triangular identity, as torch's ``linalg_matrix_exp_differential``)."""
    n = B.shape(x)[-1]
    xt = _mh(B, x)
    top = B.cat([xt, g], len(B.shape(x)) - 1)
    bottom = B.cat([B.zeros_like(xt), xt], len(B.shape(x)) - 1)
    block = B.matrix_exp(B.cat([top, bottom], len(B.shape(x)) - 2))
    return B.slice(block, (slice(None),) * (len(B.shape(x)) - 2) + (slice(0, n), slice(n, None)))


unary("inverse", _inverse_vjp, memory_bound=False)
unary("pinv", _pinv_vjp, ("atol", "rtol"), memory_bound=False)
reduction("slogdet", _slogdet_vjp, aux=True)


def _det(B, x):
    """``det A`` of real matrices, ``sign * exp(log|det A|)`` (from ``slogdet``)."""
    logabsdet, sign = B.slogdet(x)
    return B.mul(sign, B.exp(logabsdet))


#: each float dtype's machine epsilon: torch's double-differentiable ``det`` backward takes
#: ``|det A| < 100 eps`` for singular
_EPSILON = {
    "float64": 2.220446049250313e-16,
    "float32": 1.1920928955078125e-07,
    "bfloat16": 0.0078125,
    "float16": 0.0009765625,
}


def _adjugate_t(B, x, scale):
    """``scale * adj(A)^T`` (``scale`` of shape ``batch + (1, 1)``), through the SVD, which
    is defined at singular matrices: with ``A = U S V^T``, ``adj(A)^T = det(U) det(V) U
    diag(prod_{j != i} s_j) V^T``."""
    shape = B.shape(x)
    n = shape[-1]
    u, s, vh = unpack(B, B.linalg_svd(x, False), _svd_shapes(n, n, False))
    sign = B.reshape(B.mul(B.slogdet(u)[1], B.slogdet(vh)[1]), shape[:-2] + (1, 1))
    eye = B.eye(n, n, B.dtype(x), B.device(x))
    # row i holds s with s_i replaced by 1, so its product is prod_{j != i} s_j
    rows = B.add(B.mul(B.reshape(s, shape[:-2] + (1, n)), B.sub_scalar(B.neg(eye), -1.0)), eye)
    others = B.reshape(B.prod_dim(rows, len(shape) - 1), shape[:-2] + (1, n))
    return B.mul(B.mul(scale, sign), B.matmul(B.mul(u, others), vh))


def _cofactors(B, x):
    """The cofactor matrix ``adj(A)^T`` of ``n x n`` matrices with ``n <= 3``, entry by entry
    (1 for ``n = 1``; ``C_ij = A_{i+1,j+1} A_{i+2,j+2} - A_{i+1,j+2} A_{i+2,j+1}``, indices
    mod 3, for ``n = 3``): a polynomial in the entries, so recorded under ``create_graph``
    every derivative is exact, at singular matrices too (the SVD's is not: it has none where
    singular values repeat, the zero matrix's, and its third derivative was off at rank n-1)."""
    shape = B.shape(x)
    n, lead = shape[-1], (slice(None),) * (len(shape) - 2)
    if n == 1:
        return B.ones(shape, B.dtype(x), B.device(x))

    def entry(i, j):
        return B.slice(x, lead + (slice(i % n, i % n + 1, 1), slice(j % n, j % n + 1, 1)))

    def cofactor(i, j):
        if n == 2:
            value = entry(i + 1, j + 1)
            return value if (i + j) % 2 == 0 else B.neg(value)
        crossed = B.mul(entry(i + 1, j + 2), entry(i + 2, j + 1))
        return B.sub(B.mul(entry(i + 1, j + 1), entry(i + 2, j + 2)), crossed)

    rows = [B.cat([cofactor(i, j) for j in range(n)], len(shape) - 1) for i in range(n)]
    return B.cat(rows, len(shape) - 2)


def _recorded_adjugate(B, x, scale, stand_in):
    """``scale * adj(A)^T`` where a recorded ``det`` backward takes ``A`` as singular: the
    cofactors up to 3x3 (exact in every derivative: torch's SVD form, which this followed,
    gave third derivatives off by 0.19 to 1e15 at rank ``n - 1`` and below, NaN at the zero
    matrix), else through the SVD of ``stand_in`` (``x`` with the regular matrices replaced
    by ones of distinct singular values)."""
    if B.shape(x)[-1] <= 3:
        return B.mul(scale, _cofactors(B, x))
    return _adjugate_t(B, stand_in, scale)


def _det_vjp(B, g, x, out):
    """``g det(A) A^-T``, torch's two ways. A first-order backward computes ``g adj(A)^T``
    (no inverse taken), 0 where the determinant is exactly 0, as torch's (which solves with
    ``g det(A)``, 0 there). A recorded one (``create_graph``) is torch's double-differentiable
    form: ``solve(A^T, g det(A) I)`` where ``|det A| >= 100 eps``, the adjugate elsewhere (not
    0 at 0; :func:`_recorded_adjugate`), so that second derivatives are torch's, at matrices
    with repeated singular values (``2 I``) too, whose SVD has no derivative."""
    shape = B.shape(x)
    n = shape[-1]
    if n == 0:
        return B.zeros(shape, B.dtype(x), B.device(x))
    batch = shape[:-2]
    scale = B.reshape(g, B.shape(g) + (1, 1))
    if not B.is_autodiff:
        singular = B.reshape(B.equal_elem(out, 0.0), B.shape(out) + (1, 1))
        return B.mask_fill(_adjugate_t(B, x, scale), singular, 0.0)
    singular = B.lower_elem(B.abs(out), 100.0 * _EPSILON[B.dtype(x)])
    square_mask = B.reshape(singular, batch + (1, 1))
    eye = B.eye(n, n, B.dtype(x), B.device(x))
    any_singular = B.any(singular)
    if not B.any(B.logical_not(singular)):
        return _recorded_adjugate(B, x, scale, x)
    # (each branch sees a stand-in where the other is taken, so that neither's derivatives
    # reach a matrix it cannot differentiate at: a singular one's solve, a regular one's SVD)
    regular = x if not any_singular else B.mask_where(x, square_mask, eye)
    detscale = B.mul(scale, B.reshape(out, batch + (1, 1)))
    grad = B.solve(_mh(B, regular), B.mul(detscale, eye))
    if not any_singular:
        return grad
    distinct = B.reshape(B.arange(1, n + 1, 1, B.dtype(x), B.device(x)), (1, n))
    stand_in = B.mask_where(B.mul(distinct, eye), square_mask, x)
    return B.mask_where(grad, square_mask, _recorded_adjugate(B, x, scale, stand_in))


def _complex_logdet(B, x):
    """``log det A`` of complex matrices, ``log|det A| + i arg det A`` (from ``slogdet``)."""
    logabsdet, sign = B.slogdet(x)
    return B.add(B.cast(logabsdet, B.dtype(x)), B.log(sign))


reduction("det", _det_vjp, forward=_det)
# holomorphic, derivative A^-T: the gradient is g A^-H (det and slogdet of complex matrices)
reduction("complex_logdet", _slogdet_vjp, forward=_complex_logdet)
unary("cholesky", _cholesky_vjp, memory_bound=False)
unary("linalg_eigh", _eigh_vjp, ("upper",), memory_bound=False)
unary("linalg_svd", _svd_vjp, ("full_matrices",), memory_bound=False)
unary("linalg_qr", _qr_vjp, ("mode",), memory_bound=False)
unary("matrix_exp", _matrix_exp_vjp, memory_bound=False)
unary("linalg_eig", _eig_vjp, memory_bound=False)
binary(
    "solve",
    lambda B, g, x, out: B.neg(B.matmul(B.solve(_mh(B, x), g), _mh(B, out))),
    lambda B, g, x: B.solve(_mh(B, x), g),
    memory_bound=False,
    broadcast=False,
)
reduction("softmax", lambda B, g, out, dim: B.softmax_backward(g, out, dim), ("dim",))
reduction("log_softmax", lambda B, g, out, dim: B.log_softmax_backward(g, out, dim), ("dim",))

# -- never differentiable ------------------------------------------------------------------------
for _name in (
    "equal",
    "not_equal",
    "greater",
    "greater_equal",
    "lower",
    "lower_equal",
    "logical_and",
    "logical_or",
    "floor_divide",
    "gcd",
    "lcm",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
):
    untracked(_name, ("x", "y"))
for _name in (
    "equal_elem",
    "not_equal_elem",
    "greater_elem",
    "greater_equal_elem",
    "lower_elem",
    "lower_equal_elem",
):
    untracked(_name, params=("s",))
for _name in ("is_nan", "is_inf", "logical_not", "bitwise_not", "signbit", "frexp_exponent"):
    untracked(_name)


# -- complex operands ----------------------------------------------------------------------------
# torch's convention: the gradient of a real loss with respect to a complex ``z`` is the
# conjugate Wirtinger derivative (``2z`` for ``|z|^2``), so a holomorphic op's rule multiplies
# by the conjugate of its derivative (``mul``: ``g * conj(y)``). An op records its complex
# rules here (:meth:`Op.complex_twin` swaps them in at record time, only when an operand is
# complex); an op without them refuses a complex operand.
def _real_part(rule):
    def real_gradient(B, g, *args):
        grad = rule(B, g, *args)
        return B.real(grad) if B.dtype(grad) in ("complex64", "complex128") else grad

    return real_gradient


def complex_rules(name, *vjps):
    """The rules of op ``name`` for complex operands, one per input (``None``: none)."""
    OPS[name].complex_vjps = vjps


def _conj_times(B, g, factor):
    return B.mul(g, B.conj(factor))


def _complex_sign(B, x):
    """``x / |x|``, 0 at 0: torch's ``sgn``, the derivative of ``|x|``."""
    magnitude = B.abs(x)
    zero = B.equal_elem(magnitude, 0.0)
    unit = B.div(x, B.cast(B.mask_fill(magnitude, zero, 1.0), B.dtype(x)))
    return B.mask_fill(unit, zero, 0.0)


# the linear ops: their rules hold as they are
for _name in (
    "add", "sub", "neg", "add_scalar", "sub_scalar", "rsub_scalar", "data_write",
    "overwrite_sharing_gradient", "cast", "sum",
    "sum_dim", "mean", "mean_dim", "cumsum", "reshape", "clone", "permute", "swap_dims", "flip",
    "expand", "slice", "slice_assign", "cat", "repeat_dim", "unfold", "fold", "gather",
    "scatter_add", "scatter_assign", "select", "select_add", "select_assign", "mask_fill",
    "mask_where",
):  # fmt: skip
    complex_rules(_name, *OPS[_name].vjps)
complex_rules("mul", lambda B, g, y: _conj_times(B, g, y), lambda B, g, x: _conj_times(B, g, x))
complex_rules(
    "div",
    lambda B, g, y: B.div(g, B.conj(y)),
    lambda B, g, x, y: B.neg(_conj_times(B, g, B.div(B.div(x, y), y))),
)
complex_rules("mul_scalar", lambda B, g, s: B.mul_scalar(g, complex(s).conjugate()))
complex_rules("div_scalar", lambda B, g, s: B.div_scalar(g, complex(s).conjugate()))
complex_rules("rdiv_scalar", lambda B, g, x, out: B.neg(B.div(_conj_times(B, g, out), B.conj(x))))
complex_rules(
    "pow_scalar",
    # (x ** 0 is 1: zero gradient, as torch's, not 0 * x ** -1, NaN at x = 0)
    lambda B, g, x, s: (
        B.zeros_like(g) if s == 0 else _conj_times(B, g, B.mul_scalar(B.pow_scalar(x, s - 1.0), s))
    ),
)
complex_rules("abs", lambda B, g, x: B.mul(B.cast(g, B.dtype(x)), _complex_sign(B, x)))
complex_rules("exp", lambda B, g, out: _conj_times(B, g, out))
complex_rules("log", lambda B, g, x: B.div(g, B.conj(x)))
complex_rules("sqrt", lambda B, g, out: B.div(B.mul_scalar(g, 0.5), B.conj(out)))
complex_rules("square", lambda B, g, x: _conj_times(B, g, B.mul_scalar(x, 2.0)))
complex_rules("recip", lambda B, g, out: B.neg(_conj_times(B, g, B.square(out))))
complex_rules("sin", lambda B, g, x: _conj_times(B, g, B.cos(x)))
complex_rules("cos", lambda B, g, x: B.neg(_conj_times(B, g, B.sin(x))))
complex_rules("tanh", lambda B, g, out: _conj_times(B, g, B.rsub_scalar(B.square(out), 1.0)))
complex_rules("sigmoid", lambda B, g, out: _conj_times(B, g, B.mul(out, B.rsub_scalar(out, 1.0))))
complex_rules("tan", lambda B, g, out: _conj_times(B, g, B.add_scalar(B.square(out), 1.0)))
complex_rules("expm1", lambda B, g, out: _conj_times(B, g, B.add_scalar(out, 1.0)))
complex_rules("log1p", lambda B, g, x: B.div(g, B.conj(B.add_scalar(x, 1.0))))
complex_rules("asin", lambda B, g, x: B.div(g, B.conj(B.sqrt(B.rsub_scalar(B.square(x), 1.0)))))
complex_rules(
    "acos", lambda B, g, x: B.neg(B.div(g, B.conj(B.sqrt(B.rsub_scalar(B.square(x), 1.0)))))
)
complex_rules("atan", lambda B, g, x: B.div(g, B.conj(B.add_scalar(B.square(x), 1.0))))
complex_rules("asinh", lambda B, g, x: B.div(g, B.conj(B.sqrt(B.add_scalar(B.square(x), 1.0)))))
# the principal branch's derivative, 1 / (sqrt(x - 1) sqrt(x + 1)), as torch's (not
# 1 / sqrt(x^2 - 1), which differs in sign off the real line)
complex_rules(
    "acosh",
    lambda B, g, x: B.div(
        g, B.conj(B.mul(B.sqrt(B.sub_scalar(x, 1.0)), B.sqrt(B.add_scalar(x, 1.0))))
    ),
)
complex_rules("atanh", lambda B, g, x: B.div(g, B.conj(B.rsub_scalar(B.square(x), 1.0))))


def _complex_pow_x_vjp(B, g, x, y):
    grad = _conj_times(B, g, B.mul(y, B.pow(x, B.sub_scalar(y, 1.0))))
    return B.mask_fill(grad, B.equal_elem(y, 0.0), 0.0)


def _complex_pow_y_vjp(B, g, x, out):
    # torch's: g * conj(out * log(x)), zero where x is 0 (no 0 * -inf)
    zero = B.equal_elem(x, 0.0)
    grad = _conj_times(B, g, B.mul(out, B.log(B.mask_fill(x, zero, 1.0))))
    return B.mask_fill(grad, zero, 0.0)


complex_rules("pow", _complex_pow_x_vjp, _complex_pow_y_vjp)
complex_rules(
    "rpow_scalar",
    lambda B, g, out, s: (
        B.zeros_like(g) if s == 0 else _conj_times(B, g, B.mul_scalar(out, cmath.log(s)))
    ),
)
# the products' backward kernels are linear in g and holomorphic in x (products and
# quotients): conj(kernel(conj(g))) is g times the conjugate derivative
complex_rules(
    "prod", lambda B, g, x, out, x_shape: B.conj(B.prod_backward(B.conj(g), x, out, x_shape))
)
complex_rules(
    "prod_dim", lambda B, g, x, out, dim: B.conj(B.prod_dim_backward(B.conj(g), x, out, dim))
)
complex_rules(
    "cumprod", lambda B, g, x, out, dim: B.conj(B.cumprod_backward(B.conj(g), x, out, dim))
)
complex_rules(
    "cross",
    lambda B, g, y, dim: B.cross(B.conj(y), g, dim),
    lambda B, g, x, dim: B.cross(g, B.conj(x), dim),
)
complex_rules("sinh", lambda B, g, x: _conj_times(B, g, B.cosh(x)))
complex_rules("cosh", lambda B, g, x: _conj_times(B, g, B.sinh(x)))
complex_rules(
    "matmul",
    lambda B, g, y: B.matmul(g, B.conj(B.swap_dims(y, -1, -2))),
    lambda B, g, x: B.matmul(B.conj(B.swap_dims(x, -1, -2)), g),
)
# the parts of a complex number, and the number of two parts
unary("real", lambda B, g: B.cast(g, "complex128" if B.dtype(g) == "float64" else "complex64"))
unary("imag", lambda B, g: B.complex(B.zeros_like(g), g))
unary("conj", lambda B, g: B.conj(g))
binary("complex", lambda B, g: B.real(g), lambda B, g: B.imag(g), broadcast=False)
for _name in ("real", "imag", "conj", "complex"):
    complex_rules(_name, *OPS[_name].vjps)


def _fft_dual(norm):
    return {"backward": "forward", "forward": "backward"}.get(norm, norm)


# the transform is linear, its adjoint the inverse transform under the dual normalization
unary(
    "fftn",
    lambda B, g, dims, inverse, norm: B.fftn(g, dims, not inverse, _fft_dual(norm)),
    ("dims", "inverse", "norm"),
    memory_bound=False,
)
complex_rules("fftn", *OPS["fftn"].vjps)


def _rfftn_vjp(B, g, x_shape, dims, norm):
    """The adjoint of ``rfftn`` (the complex transform of a real input, cut to the
    non-negative frequencies of its last dim): the cut spectrum padded back with zeros, the
    inverse transform under the dual normalization, its real part."""
    last = dims[-1]
    kept = tuple(slice(0, B.shape(g)[i] if i == last else x_shape[i], 1) for i in range(last + 1))
    padded = B.slice_backward(g, tuple(x_shape), kept)
    return B.real(B.fftn(padded, dims, True, _fft_dual(norm)))


unary("rfftn", _rfftn_vjp, ("dims", "norm"), memory_bound=False)
# (its output is complex, so the engine records its complex twin: the same rule)
complex_rules("rfftn", _rfftn_vjp)
complex_rules("linalg_eig", _eig_vjp)
# the real rules with conjugate transposes (``_mh``), as torch's
for _name in (
    "inverse", "pinv", "slogdet", "complex_logdet", "cholesky", "linalg_eigh", "linalg_svd",
    "linalg_qr", "matrix_exp", "solve",
):  # fmt: skip
    complex_rules(_name, *OPS[_name].vjps)
# the recorded values of no derivative: a refusal, or none, is the same for complex operands
# (ldl_factor of a complex matrix requiring grad was refused in its forward, as if complex
# tensors had no such op)
for _name in ("refused_derivative", "undefined_derivative"):
    complex_rules(_name, *OPS[_name].vjps)


def op_kind(name: str) -> str:
    """``"memory-bound"`` or ``"compute-bound"``: how the checkpointing strategies treat it."""
    return "memory-bound" if OPS[name].memory_bound else "compute-bound"
