"""torch's ``torch.nn.utils``: gradient clipping by global norm, on the ``Gradients`` value
(``clip_grad_norm_``, PyTorch's name; ``rg.optim.clip_grad_norm`` is the same function) and by
value (``clip_grad_value_``), parameters as one vector, and :mod:`.rnn` (``pad_sequence``);
``get_total_norm`` and ``clip_grads_with_norm_`` (the two halves of the clipping); weight and
spectral normalization (:mod:`.norm_hooks`, :mod:`.parametrize`, :mod:`.parametrizations`),
pruning (:mod:`.prune`),
conv/linear + batch-norm fusion (:mod:`.fusion`) and ``skip_init``.

The norm and the scale factor stay tensors on the gradients' backend, as in torch's foreach
implementation: the clipping itself makes no host round trip, so on a device backend it only
queues work. The default return value, a Python float, costs the one read of the norm;
``as_tensor=True`` returns the 0-d tensor instead and reads nothing, and so does the default
inside a step being recorded by ``rg.capture`` (where a host read is refused).
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import AutodiffError, InvalidArgumentError, NonFiniteError
from ...errors import guard_namespace as _guard_namespace
from ...tensor import Tensor, full, stack, zeros
from ...tensor.inplace import foreach_mul_
from ...tensor.internal import apply
from ...tensor.kept_gradients import kept_zero_gradient
from . import parametrizations, parametrize, prune, rnn, stateless
from .fusion import (
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)
from .init import skip_init

# (after the submodules' imports: the package's ``spectral_norm`` and ``weight_norm`` are the
# functions, as torch's are)
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm

__all__ = [
    "clip_grad_norm",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
    "get_total_norm",
    "parameters_to_vector",
    "parametrizations",
    "parametrize",
    "prune",
    "remove_spectral_norm",
    "remove_weight_norm",
    "rnn",
    "skip_init",
    "spectral_norm",
    "stateless",
    "vector_to_parameters",
    "weight_norm",
]


def clip_grad_norm_(
    grads: Any,
    parameters: Any = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    eps: float = 1e-6,
    as_tensor: bool = True,
) -> Tensor | float:
    """Scale the gradients of ``parameters`` in ``grads`` so their global ``norm_type`` norm
    is at most ``max_norm``; return the norm before clipping.

    ``parameters`` is a module, a tensor or an iterable of tensors (each object counted once:
    a tied parameter is one parameter). As ``torch.nn.utils.clip_grad_norm_``: the scale is
    ``max_norm / (norm + eps)`` clamped to at most 1, and the gradients in ``grads`` are
    replaced by the scaled ones; ``norm_type`` may be ``float("inf")``, or 0 or negative
    (then torch's norm of the per-gradient norms). The 2-norm is one backend kernel
    (``Backend.global_norm``: on NumPy the squares summed in float64 in one pass over each
    gradient, on torch torch's own ``_foreach_norm``); other orders are accumulated in
    float64 whatever the gradients' dtype. The norm comes back as torch's does, a 0-d tensor
    in the gradients' dtype (float32 for float32 gradients, float64 when any is float64; the
    float64 sum rounded once) on the gradients' backend, so a step reads nothing back from a
    device (``norm.item()`` reads it where the caller wants it); ``as_tensor=False`` returns a
    Python float instead (one host read). ``error_if_nonfinite`` raises
    :class:`~retrograd.errors.NonFiniteError` (a ``RuntimeError``, as torch's) for a NaN or
    infinite norm (a host read), leaving the gradients as they were. ``foreach`` (torch's
    choice of its multi-tensor kernels, the same result) is accepted and changes nothing.

    >>> import retrograd as rg
    >>> w = rg.tensor([3.0, 4.0]).require_grad()
    >>> grads = (w * w).sum().backward()          # gradient [6, 8], norm 10
    >>> clip_grad_norm_(grads, [w], max_norm=1.0).item()
    10.0
    >>> [round(v, 3) for v in w.grad(grads).tolist()]
    [0.6, 0.8]
    """
    _require_gradients("clip_grad_norm_", grads, parameters, max_norm, "max_norm")
    norm_type = float(norm_type)
    if math.isnan(norm_type):
        raise InvalidArgumentError(f"clip_grad_norm_: norm_type must be a number, got {norm_type}")
    present = _with_gradients(grads, parameters)
    if not present:
        return zeros(()) if as_tensor else 0.0  # torch's tensor(0.0): the default dtype
    # Without reading a norm on the host: one backend kernel for the 2-norm of untracked
    # gradients; else one running float64 sum (or max), added in parameter order.
    if norm_type == 2.0 and not any(grad.requires_grad for _, grad in present):
        total = _global_norm([grad for _, grad in present])
    elif norm_type <= 0.0:
        # torch's total is the norm of the per-gradient norms: for these orders (a count of
        # non-zeros, a minimum, negative powers) not the norm of all the entries at once
        norms = [_magnitude(grad).cast("float64").norm(norm_type) for _, grad in present]
        total = stack(norms).norm(norm_type)
    elif math.isinf(norm_type):
        total = stack([grad.abs().max().cast("float64") for _, grad in present]).max()
    else:
        total = None
        for _, grad in present:
            magnitude = (
                _magnitude(grad).square() if norm_type == 2.0 else grad.abs().powf_scalar(norm_type)
            )
            part = magnitude.sum().cast("float64")
            total = part if total is None else total + part
        total = total.sqrt() if norm_type == 2.0 else total.powf_scalar(1.0 / norm_type)
    # torch's total is in the gradients' (promoted) dtype, and so is the clipping factor
    dtypes = {_REAL_PARTS.get(grad.dtype, grad.dtype) for _, grad in present}
    total_dtype = (
        "float64" if "float64" in dtypes else dtypes.pop() if len(dtypes) == 1 else "float32"
    )
    if total.dtype != total_dtype:
        total = total.cast(total_dtype)
    if error_if_nonfinite and not math.isfinite(float(total.item())):
        raise NonFiniteError(
            f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is "
            f"{float(total.item())}; set error_if_nonfinite=False to clip anyway"
        )
    # A factor of 1 leaves a gradient bit for bit as it is, so every gradient is multiplied
    # and no host-side "scale < 1" test is needed. Detached: with create_graph the gradients
    # are tracked, and the factor is a constant of the clipping, as a Python float was.
    factor = (float(max_norm) / (total + eps)).clamp(max=1.0).detach()
    _scale(grads, present, factor)
    return total if as_tensor else float(total.item())


#: the real dtype of a complex gradient's norm
_REAL_PARTS = {"complex64": "float32", "complex128": "float64"}


def _magnitude(grad: Tensor) -> Tensor:
    """``|grad|`` for a complex gradient (its norm is of the magnitudes), else ``grad``."""
    return grad.abs() if grad.is_complex() else grad


def _global_norm(grads: list[Tensor]) -> Tensor:
    """The 2-norm of the untracked ``grads`` together, a 0-d float64 tensor on their backend:
    one ``Backend.global_norm`` call on their values (one pass over each gradient, no array of
    squares)."""
    first = grads[0]
    if first.backend.is_autodiff:
        total = apply("global_norm", [grad.inner() for grad in grads])
        return Tensor.from_inner(total, first.backend)
    return apply("global_norm", grads)


#: The name ``rg.optim`` has always had.
clip_grad_norm = clip_grad_norm_


def get_total_norm(
    tensors: Any,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """The ``norm_type`` norm of the norms of ``tensors`` (typically ``[p.grad(grads) for p in
    params]``; ``None`` entries skipped), a 0-d tensor in their dtype, as torch's
    ``get_total_norm`` (each norm in the tensor's own dtype, then the norm of those).

    >>> import retrograd as rg
    >>> get_total_norm([rg.tensor([3.0]), rg.tensor([4.0])]).item()
    5.0
    """
    tensors = [tensors] if isinstance(tensors, Tensor) else [t for t in tensors if t is not None]
    norm_type = float(norm_type)
    if not tensors:
        return zeros(())
    norms = [t.norm(norm_type) for t in tensors]
    dtypes = {n.dtype for n in norms}
    if len(dtypes) > 1:
        norms = [n.cast(norms[0].dtype) for n in norms]
    total = stack(norms).norm(norm_type)
    if error_if_nonfinite and not math.isfinite(float(total.item())):
        raise NonFiniteError(
            f"get_total_norm: the total norm of order {norm_type} for gradients from "
            f"`parameters` is non-finite ({float(total.item())}), so it cannot be clipped; set "
            "error_if_nonfinite=False to compute it anyway"
        )
    return total


def clip_grads_with_norm_(
    grads: Any, parameters: Any, max_norm: float, total_norm: Any, foreach: bool | None = None
) -> None:
    """Scale the gradients of ``parameters`` in ``grads`` by ``max_norm / (total_norm +
    1e-6)`` clamped to at most 1 (torch's ``clip_grads_with_norm_``, given the ``Gradients``
    value first as :func:`clip_grad_norm_` is; ``total_norm`` from :func:`get_total_norm`).

    >>> import retrograd as rg
    >>> w = rg.tensor([3.0, 4.0]).require_grad()
    >>> grads = (w * w).sum().backward()
    >>> total = get_total_norm([w.grad(grads)])
    >>> clip_grads_with_norm_(grads, [w], 1.0, total)
    >>> [round(v, 3) for v in w.grad(grads).tolist()]
    [0.6, 0.8]
    """
    _require_gradients("clip_grads_with_norm_", grads, parameters, max_norm, "max_norm")
    present = _with_gradients(grads, parameters)
    if not present:
        return
    if not isinstance(total_norm, Tensor):
        first = present[0][1]
        total_norm = full(
            (), float(total_norm), first.dtype, backend=first.backend, device=first.device
        )
    factor = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0).detach()
    _scale(grads, present, factor)


def _scale(grads: Any, present: list[tuple[Tensor, Tensor]], factor: Tensor) -> None:
    """Multiply each gradient of ``present`` in ``grads`` by ``factor`` (cast to its dtype).
    ``mul_`` of a gradient read from ``grads`` writes the product back there, into the
    gradient's own buffer where nothing else references it (torch's ``_foreach_mul_``, one
    call for the gradients of each dtype; a gradient someone kept keeps its values); a
    gradient in a graph (``create_graph``) gets its product recorded, as a new value."""
    by_dtype: dict[str, list[Tensor]] = {}
    for parameter, grad in present:
        if grad.requires_grad:
            parameter.grad_replace(grads, grad * factor.cast(grad.dtype))
        else:
            by_dtype.setdefault(grad.dtype, []).append(grad)
    for dtype, tensors in by_dtype.items():
        foreach_mul_(tensors, factor.cast(dtype))


def clip_grad_value_(
    grads: Any,
    parameters: Any = None,
    clip_value: float | None = None,
    foreach: bool | None = None,
) -> None:
    """Clamp each gradient in ``grads`` to ``[-clip_value, clip_value]`` (torch's
    ``clip_grad_value_``, on the ``Gradients`` value; ``foreach``, torch's kernel choice, is
    accepted and changes nothing)."""
    _require_gradients("clip_grad_value_", grads, parameters, clip_value, "clip_value")
    bound = float(clip_value)
    for p, g in _with_gradients(grads, parameters):
        p.grad_replace(grads, g.clamp(-bound, bound))


def _require_gradients(fn: str, grads: Any, parameters: Any, bound: Any, bound_name: str) -> None:
    """torch's form, ``fn(parameters, max_norm)`` (gradients kept on the parameters), gets an
    error that says what to write instead; so does a missing argument."""
    from ...autodiff import Gradients

    if not isinstance(grads, Gradients):
        raise AutodiffError(
            f"{fn}: gradients are a value here, not fields on the parameters; write "
            f"grads = loss.backward(); {fn}(grads, model.parameters(), {bound_name}) with the "
            f"Gradients that backward() returned (got {type(grads).__name__} first)"
        )
    if parameters is None or bound is None:
        missing = "parameters" if parameters is None else bound_name
        raise InvalidArgumentError(f"{fn}: missing argument {missing!r}")


def _with_gradients(grads: Any, parameters: Any) -> list[tuple[Tensor, Tensor]]:
    """``(parameter, gradient)`` for each parameter (a module's, an iterable, one tensor)
    that has a gradient in ``grads``, each object once, in order. A parameter whose gradient
    torch keeps as a zero (``optimizer.zero_grad(set_to_none=False)``) and that got none in
    ``grads`` has that zero put there, as torch's ``p.grad`` is clipped with the others."""
    if hasattr(parameters, "parameters"):
        parameters = parameters.parameters()
    elif isinstance(parameters, Tensor):
        parameters = [parameters]
    seen: set[int] = set()
    present = []
    for p in parameters:
        if id(p) in seen:
            continue
        seen.add(id(p))
        g = p.grad(grads)
        if g is None:
            g = kept_zero_gradient(p, grads)
        if g is not None:
            present.append((p, g))
    return present


def parameters_to_vector(parameters: Any) -> Tensor:
    """The parameters flattened and joined into one 1-d tensor."""
    from ...tensor import cat

    return cat([p.reshape(-1) for p in parameters], 0)


def vector_to_parameters(vec: Tensor, parameters: Any) -> None:
    """Give the parameters, in order, the values of consecutive slices of ``vec``. A vector
    too short for them is refused before any parameter changes (torch's fails at the first
    parameter it cannot fill, the ones before it already written)."""
    from ...tensor.inplace import assign

    parameters = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    needed = sum(p.numel() for p in parameters)
    if isinstance(vec, Tensor) and vec.ndim == 1 and vec.shape[0] < needed:
        raise InvalidArgumentError(
            f"vector_to_parameters: the vector has {vec.shape[0]} elements, the "
            f"{len(parameters)} parameters need {needed}"
        )
    start = 0
    for p in parameters:
        n = p.numel()
        assign(p, vec.narrow(0, start, n).reshape(p.shape), "vector_to_parameters")
        start += n


# Arguments no check foresaw (a str or None for a tensor, a str for a size) get an error of
# the hierarchy naming the function (errors.guard), as rg.* and nn.functional's do.
# skip_init constructs the user's module class: its exceptions pass unchanged.
_guard_namespace(
    globals(), [name for name in __all__ if name not in ("skip_init", "clip_grad_norm")]
)
clip_grad_norm = clip_grad_norm_  # the alias is the guarded function itself
