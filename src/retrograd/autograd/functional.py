"""torch's ``torch.autograd.functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``vhp``
and ``hvp`` of a function of tensors, with torch's arguments and return structures.

Each runs the function on fresh leaves made from the inputs (so the inputs need not require
grad, and a tensor the function closes over is not mistaken for one of them) and reads the
gradients of those leaves from ``backward``. Forward-mode products (``jvp``, ``hvp``) use the
double-backward trick, as torch's do: the gradient ``J^T u`` is linear in a dummy ``u``, and
its gradient with respect to ``u`` weighted by ``v`` is ``J v``. This works because every
backward rule is made of differentiable ops. ``create_graph=True`` records the results'
own graph, connected to inputs that require grad (a gradient penalty, a third derivative).

>>> import retrograd as rg
>>> from retrograd.autograd.functional import jacobian
>>> jacobian(lambda x: x * x, rg.tensor([1.0, 2.0])).tolist()
[[2.0, 0.0], [0.0, 4.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..autodiff import enable_grad
from ..errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    ShapeError,
    check_callable,
    shape_text,
)
from ..tensor import Tensor, stack, zeros, zeros_like
from .differentiate import grad

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


# -- the pieces every transform shares (rg.func uses them too) ------------------------------------
def _as_tuple(value: Any, what: str, fn: str) -> tuple[bool, tuple[Tensor, ...]]:
    """Whether ``value`` was a tuple, and it as a tuple of tensors (torch's ``_as_tuple``:
    a tuple is a tuple, anything else one value; each must be a tensor)."""
    is_tuple = isinstance(value, tuple)
    values = value if is_tuple else (value,)
    for i, el in enumerate(values):
        if not isinstance(el, Tensor):
            where = f"the value at index {i}" if is_tuple else f"the given {what}"
            raise DTypeError(
                f"{fn}: the {what} must be either a Tensor or a tuple of Tensors, but "
                f"{where} has type {type(el).__name__}"
            )
    return is_tuple, values


def _unpack(res: Any, to_unpack: bool | tuple[bool, bool]) -> Any:
    """torch's ``_tuple_postprocess``: undo :func:`_as_tuple` on a (nested) result."""
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _fresh(x: Tensor, create_graph: bool, fn: str = "autograd.functional") -> Tensor:
    """A new tensor to differentiate with respect to, holding ``x``'s values: a copy still
    connected to ``x`` when ``create_graph`` and ``x`` requires grad (the results then stay
    differentiable with respect to ``x``: higher order, nested transforms), else a new leaf.
    Always a new tensor, so that ``x`` itself, if the function also closes over it, is not
    taken for the argument."""
    if not (x.is_float() or x.is_complex()):
        raise DTypeError(
            f"{fn}: only float tensors (and complex ones) can be differentiated, got a "
            f"{shape_text(x.shape)} {x.dtype} tensor"
        )
    if create_graph and x.requires_grad:
        copy = x.view_as(x)
        copy.retain_grad()
        return copy
    leaf = x.detach()
    if not leaf.is_require_grad():
        leaf.require_grad()
    return leaf


def _fresh_inputs(fn: str, inputs: Any, create_graph: bool) -> tuple[bool, tuple[Tensor, ...]]:
    """Whether ``inputs`` was a tuple, and a fresh leaf (:func:`_fresh`) for each input."""
    is_tuple, inputs = _as_tuple(inputs, "inputs", fn)
    return is_tuple, tuple(_fresh(x, create_graph, fn) for x in inputs)


def _plain(x: Any) -> Any:
    """``x`` cut from the graph and not requiring grad (a detached leaf that required grad
    keeps requiring it, Burn's rule: not wanted in a result)."""
    if not isinstance(x, Tensor):
        return x
    out = x.detach()
    if out.is_require_grad():
        out.requires_grad = False
    return out


def _gradients(
    outputs: Sequence[Tensor | None],
    inputs: Sequence[Tensor],
    weights: Sequence[Tensor | None] | None,
    create_graph: bool,
) -> tuple[Tensor | None, ...]:
    """:func:`retrograd.autograd.grad` of the outputs that require grad (torch's
    ``_autograd_grad``: ``None`` outputs and constant ones left out), ``None`` for an input
    they do not depend on. The graph is retained: the function may close over tensors of the
    caller's."""
    if weights is None:
        weights = [None] * len(outputs)
    pairs = [(o, w) for o, w in zip(outputs, weights) if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    outs, ws = zip(*pairs)
    return grad(
        list(outs), list(inputs), list(ws), retain_graph=True, create_graph=create_graph,
        allow_unused=True,
    )  # fmt: skip


def _check_v(fn: str, v: tuple[Tensor, ...], refs: tuple[Tensor, ...], is_tuple: bool,
             against: str) -> None:  # fmt: skip
    if len(v) != len(refs):
        if is_tuple:
            raise ShapeError(
                f"{fn}: v is a tuple of {len(v)} tensors, expected {len(refs)} (one per {against})"
            )
        raise ShapeError(f"{fn}: v should be a single tensor (the {against} is), got {len(v)}")
    for i, (el, ref) in enumerate(zip(v, refs)):
        if tuple(el.shape) != tuple(ref.shape):
            entry = f"entry {i} of v" if is_tuple else "v"
            raise ShapeError(
                f"{fn}: {entry} has shape {shape_text(el.shape)}, expected "
                f"{shape_text(ref.shape)} (the {against}'s)"
            )


def _v_for(fn: str, v: Any, refs: tuple[Tensor, ...], is_tuple: bool, against: str,
           create_graph: bool) -> tuple[Tensor, ...] | None:  # fmt: skip
    """``v`` as a tuple checked against ``refs`` (the outputs or the inputs), detached unless
    ``create_graph``; ``None`` only for a single one-element reference, as torch allows."""
    if v is None:
        if len(refs) != 1 or refs[0].numel() != 1:
            shapes = ", ".join(shape_text(r.shape) for r in refs)
            raise ShapeError(
                f"{fn}: v can only be None when the {against} is a single tensor with a single "
                f"element, got shapes {shapes}"
            )
        return None
    _, vs = _as_tuple(v, "v", fn)
    _check_v(fn, vs, refs, is_tuple, against)
    return tuple(el if create_graph else el.detach() for el in vs)


def _check_outputs(fn: str, outputs: tuple[Tensor, ...], strict: bool) -> None:
    if not strict:
        return
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise AutodiffError(
                f"{fn}: output {i} ({shape_text(out.shape)}) of the user-provided function does "
                "not require gradients; in strict mode the outputs must be computed in a "
                "differentiable manner from the inputs"
            )


def _filled(fn: str, grads: tuple[Tensor | None, ...], refs: tuple[Tensor, ...], strict: bool,
            create_graph: bool, independent: str) -> tuple[Tensor, ...]:  # fmt: skip
    """``grads`` with zeros (of ``refs``' shapes) for ``None``; in strict mode a ``None`` (or,
    with ``create_graph``, a gradient that does not require grad) raises, ``independent``
    saying of what."""
    res = []
    for i, (g, ref) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise AutodiffError(
                    f"{fn}: {independent} {i} ({shape_text(ref.shape)}); not allowed in strict mode"
                )
            g = zeros_like(ref)
        elif strict and create_graph and not g.requires_grad:
            raise AutodiffError(
                f"{fn}: the result for input {i} ({shape_text(ref.shape)}) is independent of the "
                "inputs; not allowed in strict mode when create_graph=True"
            )
        res.append(g)
    return tuple(res)


def _post(values: tuple[Any, ...], create_graph: bool) -> tuple[Any, ...]:
    """The results, cut from the graph unless ``create_graph`` (torch's ``_grad_postprocess``)."""
    if create_graph:
        return values
    return tuple(tuple(_plain(x) for x in v) if isinstance(v, tuple) else _plain(v) for v in values)


def _run(fn: str, func: Callable[..., Any], inputs: tuple[Tensor, ...]) -> tuple[bool, tuple]:
    check_callable(fn, func)
    result = func(*inputs)
    return _as_tuple(result, "outputs of the user-provided function", fn)


# -- torch.autograd.functional ---------------------------------------------------------------------
def vjp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """The function's output and the vector-Jacobian product ``v^T J`` at ``inputs`` (a tensor
    or a tuple of tensors; the product has the inputs' structure, ``v`` the outputs'). ``v``
    may be omitted for a single one-element output. An input the outputs do not depend on gets
    zeros, or raises with ``strict``.

    >>> import retrograd as rg
    >>> out, g = rg.autograd.functional.vjp(lambda x: x * x, rg.tensor([1.0, 2.0]),
    ...                                     rg.tensor([1.0, 10.0]))
    >>> out.tolist(), g.tolist()
    ([1.0, 4.0], [2.0, 40.0])
    """
    fn = "autograd.functional.vjp"
    with enable_grad():
        is_inputs_tuple, inputs = _fresh_inputs(fn, inputs, create_graph)
        is_outputs_tuple, outputs = _run(fn, func, inputs)
        _check_outputs(fn, outputs, strict)
        vs = _v_for(fn, v, outputs, is_outputs_tuple, "output", create_graph)
        grads = _gradients(outputs, inputs, vs, create_graph)
    result = _filled(
        fn, grads, inputs, strict, create_graph, "the output of the user-provided function is "
        "independent of input",
    )  # fmt: skip
    outputs, result = _post(outputs, create_graph), _post(result, create_graph)
    return _unpack(outputs, is_outputs_tuple), _unpack(result, is_inputs_tuple)


def jvp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """The function's output and the Jacobian-vector product ``J v`` at ``inputs`` (``v`` has
    the inputs' structure, the product the outputs'), by the double-backward trick as torch's.
    ``v`` may be omitted for a single one-element input.

    >>> import retrograd as rg
    >>> out, jv = rg.autograd.functional.jvp(lambda x: x * x, rg.tensor([1.0, 2.0]),
    ...                                      rg.tensor([1.0, 10.0]))
    >>> jv.tolist()
    [2.0, 40.0]
    """
    fn = "autograd.functional.jvp"
    with enable_grad():
        is_inputs_tuple, inputs = _fresh_inputs(fn, inputs, create_graph)
        vs = _v_for(fn, v, inputs, is_inputs_tuple, "input", create_graph)
        is_outputs_tuple, outputs = _run(fn, func, inputs)
        _check_outputs(fn, outputs, strict)
        grad_inputs = _double_backward_trick(fn, outputs, inputs, strict)
        dummies, grad_inputs = grad_inputs
        grads = _gradients(grad_inputs, dummies, vs, create_graph)
    result = _filled(
        fn, grads, outputs, strict, create_graph, "the gradient with respect to the input is "
        "independent of the dummy gradient of output",
    )  # fmt: skip
    outputs, result = _post(outputs, create_graph), _post(result, create_graph)
    return _unpack(outputs, is_outputs_tuple), _unpack(result, is_outputs_tuple)


def _double_backward_trick(
    fn: str, outputs: tuple[Tensor, ...], inputs: tuple[Tensor, ...], strict: bool
) -> tuple[tuple[Tensor, ...], tuple[Tensor | None, ...]]:
    """Dummy output gradients ``u`` (zeros that require grad: the backward is linear in them,
    so their value does not matter) and ``J^T u``, recorded, for each input."""
    dummies = []
    for out in outputs:
        dummy = zeros_like(out) if out.is_float() else zeros_like(out).float()
        dummies.append(dummy.require_grad())
    grad_inputs = _gradients(outputs, inputs, dummies, create_graph=True)
    if strict:
        for i, (g, x) in enumerate(zip(grad_inputs, inputs)):
            if g is None or not g.requires_grad:
                raise AutodiffError(
                    f"{fn}: the output of the user-provided function is independent of input {i} "
                    f"({shape_text(x.shape)}); not allowed in strict mode"
                )
    return tuple(dummies), grad_inputs


def jacobian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """The Jacobian of ``func`` at ``inputs``: for output ``i`` and input ``j`` a tensor of
    shape ``output_i.shape + input_j.shape``; a single tensor for one input and one output, a
    tuple when either is a tuple, a tuple of tuples (``[i][j]``) when both are. Computed in
    reverse mode, one backward per output element; ``vectorize`` (a speed option in torch) and
    ``strategy="forward-mode"`` give the same values.

    >>> import retrograd as rg
    >>> J = rg.autograd.functional.jacobian(lambda x, y: x * y,
    ...                                     (rg.tensor([1.0, 2.0]), rg.tensor([3.0, 4.0])))
    >>> [j.tolist() for j in J]
    [[[3.0, 0.0], [0.0, 4.0]], [[1.0, 0.0], [0.0, 2.0]]]
    """
    fn = "autograd.functional.jacobian"
    if strategy not in ("forward-mode", "reverse-mode"):
        raise InvalidArgumentError(
            f'{fn}: strategy must be "forward-mode" or "reverse-mode", got {strategy!r}'
        )
    # the combinations torch's jacobian refuses, in its order (forward mode's before func
    # runs, reverse mode's after)
    if strategy == "forward-mode":
        if create_graph:
            raise AutodiffError(
                f'{fn}: create_graph=True and strategy="forward-mode" are not supported '
                'together (as in torch); set create_graph=False or strategy="reverse-mode"'
            )
        if strict:
            raise AutodiffError(
                f'{fn}: strict=True and strategy="forward-mode" are not supported together '
                '(as in torch); set strict=False or strategy="reverse-mode"'
            )
        if not vectorize:
            raise AutodiffError(
                f"{fn}: the Jacobian by forward-mode AD (or a forward-over-reverse Hessian) "
                "is only implemented for vectorize=True, as in torch"
            )
    with enable_grad():
        is_inputs_tuple, inputs = _fresh_inputs(fn, inputs, create_graph)
        is_outputs_tuple, outputs = _run(fn, func, inputs)
        if vectorize and strict:
            raise AutodiffError(
                f"{fn}: strict=True and vectorize=True are not supported together (as in "
                "torch); set strict=False or vectorize=False"
            )
        _check_outputs(fn, outputs, strict)
        jac = tuple(
            _jacobian_rows(fn, i, out, inputs, create_graph, strict)
            for i, out in enumerate(outputs)
        )
    return _unpack(_post(jac, create_graph), (is_outputs_tuple, is_inputs_tuple))


def _jacobian_rows(fn: str, i: int, out: Tensor, inputs: tuple[Tensor, ...],
                   create_graph: bool, strict: bool) -> tuple[Tensor, ...]:  # fmt: skip
    """The Jacobians of output ``i`` with respect to each input, one backward per element."""
    rows: list[list[Tensor]] = [[] for _ in inputs]
    flat = out.reshape(-1)
    for k in range(out.numel()):
        grads = _gradients((flat[k],), inputs, None, create_graph)
        for j, (g, x) in enumerate(zip(grads, inputs)):
            if g is None:
                if strict:
                    raise AutodiffError(
                        f"{fn}: output {i} ({shape_text(out.shape)}) of the user-provided "
                        f"function is independent of input {j} ({shape_text(x.shape)}); not "
                        "allowed in strict mode"
                    )
                g = zeros_like(x)
            elif strict and create_graph and not g.requires_grad:
                raise AutodiffError(
                    f"{fn}: the jacobian of output {i} is independent of input {j} "
                    f"({shape_text(x.shape)}); not allowed in strict mode when create_graph=True"
                )
            rows[j].append(g)
    if out.numel() == 0:
        return tuple(
            zeros(tuple(out.shape) + tuple(x.shape), dtype=x.dtype, backend=x.backend,
                  device=x.device)
            for x in inputs
        )  # fmt: skip
    return tuple(
        stack(r, dim=0).reshape(tuple(out.shape) + tuple(x.shape)) for r, x in zip(rows, inputs)
    )


def hessian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
) -> Any:
    """The Hessian of a function with a single-element output: for one input a tensor of
    shape ``input.shape + input.shape``, for a tuple a tuple of tuples, ``[i][j]`` of shape
    ``input_i.shape + input_j.shape``. The Jacobian of the (recorded) Jacobian, as torch's.

    >>> import retrograd as rg
    >>> rg.autograd.functional.hessian(lambda x: (x ** 3).sum(), rg.tensor([1.0, 2.0])).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    fn = "autograd.functional.hessian"
    check_callable(fn, func)
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", fn)
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise InvalidArgumentError(
            f'{fn}: outer_jacobian_strategy must be "forward-mode" or "reverse-mode", got '
            f"{outer_jacobian_strategy!r}"
        )

    def single_output(*inp: Tensor) -> Tensor:
        out = func(*inp)
        _, outs = _as_tuple(out, "outputs of the user-provided function", fn)
        _check_outputs(fn, outs, strict)
        _single(fn, out)
        return out.squeeze()

    def jac_func(*inp: Tensor) -> Any:
        jac = jacobian(single_output, inp, create_graph=True)
        if strict:
            for i, j in enumerate(jac):
                if not j.requires_grad:
                    raise AutodiffError(
                        f"{fn}: the jacobian of the user-provided function with respect to "
                        f"input {i} ({shape_text(j.shape)}) is independent of the input; not "
                        "allowed in strict mode (a linear function, for example)"
                    )
        return jac

    res = jacobian(
        jac_func,
        inputs,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return _unpack(res, (is_inputs_tuple, is_inputs_tuple))


def _single(fn: str, out: Any) -> None:
    if isinstance(out, tuple):
        raise DTypeError(f"{fn}: the user-provided function should return a single tensor")
    if out.numel() != 1:
        raise ShapeError(
            f"{fn}: the tensor returned by the user-provided function should have a single "
            f"element, got shape {shape_text(out.shape)}"
        )


def vhp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """The output of a function with a single-element output and the vector-Hessian product
    ``v^T H`` at ``inputs`` (``v`` and the product have the inputs' structure).

    >>> import retrograd as rg
    >>> out, p = rg.autograd.functional.vhp(lambda x: (x ** 3).sum(), rg.tensor([1.0, 2.0]),
    ...                                     rg.tensor([1.0, 1.0]))
    >>> out.item(), p.tolist()
    (9.0, [6.0, 12.0])
    """
    return _hessian_product("autograd.functional.vhp", func, inputs, v, create_graph, strict)


def hvp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """The output of a function with a single-element output and the Hessian-vector product
    ``H v`` at ``inputs``, by the double-backward trick as torch's (equal to :func:`vhp` for a
    twice continuously differentiable function, whose Hessian is symmetric).

    >>> import retrograd as rg
    >>> f = lambda x, y: (x * x * y).sum()
    >>> out, (px, py) = rg.autograd.functional.hvp(f, (rg.tensor([1.0]), rg.tensor([2.0])),
    ...                                            (rg.tensor([1.0]), rg.tensor([0.0])))
    >>> px.tolist(), py.tolist()
    ([4.0], [2.0])
    """
    return _hessian_product("autograd.functional.hvp", func, inputs, v, create_graph, strict)


def _hessian_product(fn: str, func: Callable[..., Any], inputs: Any, v: Any,
                     create_graph: bool, strict: bool) -> tuple[Any, Any]:  # fmt: skip
    with enable_grad():
        is_inputs_tuple, inputs = _fresh_inputs(fn, inputs, create_graph)
        vs = _v_for(fn, v, inputs, is_inputs_tuple, "input", create_graph)
        is_outputs_tuple, outputs = _run(fn, func, inputs)
        _check_outputs(fn, outputs, strict)
        if is_outputs_tuple:
            raise DTypeError(f"{fn}: the user-provided function should return a single tensor")
        _single(fn, outputs[0])
        jac = _gradients(outputs, inputs, None, create_graph=True)
        if strict:
            for i, (g, x) in enumerate(zip(jac, inputs)):
                if g is None or not g.requires_grad:
                    raise AutodiffError(
                        f"{fn}: the jacobian of the user-provided function with respect to "
                        f"input {i} ({shape_text(x.shape)}) is independent of the input; not "
                        "allowed in strict mode"
                    )
        if fn.endswith("vhp"):
            grads = _gradients(jac, inputs, vs, create_graph)
        else:
            dummies = tuple(zeros_like(x).require_grad() for x in inputs)
            double_back = _gradients(jac, inputs, dummies, create_graph=True)
            grads = _gradients(double_back, dummies, vs, create_graph)
    result = _filled(
        fn, grads, inputs, strict, create_graph, "the hessian of the user-provided function is "
        "independent of input",
    )  # fmt: skip
    outputs, result = _post(outputs, create_graph), _post(result, create_graph)
    return _unpack(outputs, is_outputs_tuple), _unpack(result, is_inputs_tuple)
