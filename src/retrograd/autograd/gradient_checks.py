"""torch's ``torch.autograd.gradcheck`` and ``gradgradcheck``: our backward against central
finite differences, with torch's signatures and tolerances, returning ``True`` or raising
:class:`GradcheckError` (``raise_exception=False``: returning ``False``).

Each Jacobian is compared whole: the numerical one column by column (one input element moved
by ``+-eps``), the analytical one row by row (one backward per output element, on one
recorded forward). ``fast_mode`` (torch's random projection) is accepted and runs the full
check, which is stricter. ``check_forward_ad`` compares forward mode (:mod:`.forward_ad`) with
the finite differences too; batched checks are not available here and raise.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import AutodiffError, check_callable
from ..tensor import Tensor, tensor

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(AutodiffError):
    """A gradient disagrees with finite differences (torch's ``GradcheckError``, also a
    ``RuntimeError``)."""


def _as_tuple(value: Any) -> tuple:
    return (value,) if isinstance(value, Tensor) else tuple(value)


def _float_outputs(func: Callable, args: Sequence[Any]) -> list[Tensor]:
    outputs = _as_tuple(func(*args))
    return [o for o in outputs if isinstance(o, Tensor) and o.dtype.startswith("float")]


def _copy(x: Tensor, values: np.ndarray, requires_grad: bool) -> Tensor:
    fresh = tensor(np.asarray(values, dtype=x.dtype), backend=x.backend, device=x.device)
    return fresh.require_grad() if requires_grad else fresh


def _numerical(func: Callable, inputs: tuple, index: int, eps: float) -> list[np.ndarray]:
    """d outputs / d inputs[index], one ``[out.numel(), in.numel()]`` matrix per output."""
    x = inputs[index]
    base = np.array(x.numpy(), dtype=np.float64)
    columns: list[list[np.ndarray]] = []
    # Run as the caller's code runs (recording: a function that differentiates inside, as
    # gradgradcheck's does, needs its inputs to require grad).
    for position in range(base.size):
        values = []
        for step in (eps, -eps):
            moved = base.copy().reshape(-1)
            moved[position] += step
            args = [
                _copy(a, a.numpy(), True) if isinstance(a, Tensor) and a.requires_grad else a
                for a in inputs
            ]
            args[index] = _copy(x, moved.reshape(base.shape), x.requires_grad)
            values.append([np.array(o.numpy(), dtype=np.float64).reshape(-1)
                           for o in _float_outputs(func, args)])  # fmt: skip
        columns.append([(p - m) / (2 * eps) for p, m in zip(*values)])
    if not columns:
        outputs = _float_outputs(func, inputs)
        return [np.zeros((o.numel(), 0)) for o in outputs]
    return [np.stack([col[k] for col in columns], 1) for k in range(len(columns[0]))]


def _analytical(func: Callable, inputs: tuple, wrt: list[int]) -> list[list[np.ndarray]]:
    """``[output][input]`` Jacobians from backward, one output element at a time."""
    leaves = [_copy(x, x.numpy(), True) if i in wrt else x for i, x in enumerate(inputs)]
    outputs = _float_outputs(func, leaves)
    result = []
    for out in outputs:
        rows = {i: np.zeros((out.numel(), inputs[i].numel())) for i in wrt}
        for m in range(out.numel() if out.requires_grad else 0):
            onehot = np.zeros(out.numel())
            onehot[m] = 1.0
            seed = tensor(onehot.reshape(out.shape).astype(out.dtype), backend=out.backend,
                          device=out.device)  # fmt: skip
            grads = (out * seed).sum().backward(retain_graph=True)
            for i in wrt:
                g = leaves[i].grad(grads)
                if g is not None:
                    rows[i][m] = np.array(g.numpy(), dtype=np.float64).reshape(-1)
        result.append([rows[i] for i in wrt])
    return result


def _forward(func: Callable, inputs: tuple, wrt: list[int]) -> list[list[np.ndarray]]:
    """``[output][input]`` Jacobians from forward mode (:mod:`.forward_ad`), one input
    element's unit tangent at a time."""
    from .forward_ad import dual_level, make_dual, unpack_dual

    columns: dict[int, list[list[np.ndarray]]] = {i: [] for i in wrt}
    for i in wrt:
        for position in range(inputs[i].numel()):
            with dual_level():
                args = list(inputs)
                for j in wrt:
                    unit = np.zeros(inputs[j].numel())
                    if j == i:
                        unit[position] = 1.0
                    tangent = _copy(inputs[j], unit.reshape(inputs[j].shape), False)
                    args[j] = make_dual(inputs[j].detach(), tangent)
                outputs = _float_outputs(func, args)
                columns[i].append([
                    np.zeros(o.numel()) if (t := unpack_dual(o).tangent) is None
                    else np.array(t.numpy(), dtype=np.float64).reshape(-1)
                    for o in outputs
                ])  # fmt: skip
    outputs = _float_outputs(func, inputs)
    return [
        [np.stack([col[k] for col in columns[i]], 1) if columns[i]
         else np.zeros((out.numel(), 0)) for i in wrt]
        for k, out in enumerate(outputs)
    ]  # fmt: skip


def _unsupported(**flags: bool) -> None:
    for name, value in flags.items():
        if value:
            raise AutodiffError(
                f"gradcheck: {name}=True is not available in retrograd (no batched gradients "
                "or forward-over-reverse checks); leave it False"
            )


def gradcheck(func: Callable, inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
              check_batched_grad: bool = False, check_batched_forward_grad: bool = False,
              check_forward_ad: bool = False, check_backward_ad: bool = True,
              fast_mode: bool = False, masked: bool | None = None) -> bool:  # fmt: skip
    """Whether the gradients of ``func`` with respect to the ``inputs`` that require grad
    match central finite differences: ``|analytical - numerical| <= atol + rtol *
    |numerical|`` everywhere (torch's test). Inputs should be float64, as torch warns.

    >>> import retrograd as rg
    >>> x = rg.tensor([0.5, -1.0, 2.0], dtype="float64").require_grad()
    >>> gradcheck(lambda t: (t * t.sin()).sum(), (x,))
    True
    """
    check_callable("gradcheck", func)
    _unsupported(check_batched_grad=check_batched_grad,
                 check_batched_forward_grad=check_batched_forward_grad)  # fmt: skip
    inputs = _as_tuple(inputs)
    wrt = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not wrt:
        raise AutodiffError("gradcheck expects at least one input tensor to require gradient")
    for i in wrt:
        if inputs[i].dtype != "float64":
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point. "
                "This check will likely fail if all the inputs are not of double precision "
                "floating point.",
                UserWarning,
                stacklevel=2,
            )
    checks = [("", _analytical)] if check_backward_ad else []
    if check_forward_ad:
        checks.append((" (forward AD)", _forward))
    for mode, jacobians in checks:
        analytical = jacobians(func, inputs, wrt)
        for column, i in enumerate(wrt):
            numerical = _numerical(func, inputs, i, eps)
            for k, (n, a) in enumerate(zip(numerical, (rows[column] for rows in analytical))):
                if not np.all(np.abs(a - n) <= atol + rtol * np.abs(n)):
                    if not raise_exception:
                        return False
                    raise GradcheckError(
                        f"Jacobian mismatch for output {k} with respect to input {i}{mode},\n"
                        f"numerical:{n}\nanalytical:{a}\n"
                    )
    return True


def gradgradcheck(func: Callable, inputs: Any, grad_outputs: Any = None, *, eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, gen_non_contig_grad_outputs: bool = False,
                  raise_exception: bool = True, nondet_tol: float = 0.0,
                  check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
                  check_batched_grad: bool = False, check_fwd_over_rev: bool = False,
                  check_rev_over_rev: bool = True, fast_mode: bool = False,
                  masked: bool = False) -> bool:  # fmt: skip
    """:func:`gradcheck` of the gradients of ``func`` (weighted by ``grad_outputs``, random
    ones from ``rg.seed`` when ``None``), with respect to the inputs and the weights: the
    second derivatives against finite differences of the first.

    >>> import retrograd as rg
    >>> x = rg.tensor([0.5, -1.0], dtype="float64").require_grad()
    >>> gradgradcheck(lambda t: t.exp() * t, (x,))
    True
    """
    check_callable("gradgradcheck", func)
    from ..tensor import random

    _unsupported(check_batched_grad=check_batched_grad, check_forward_ad=check_fwd_over_rev)
    inputs = _as_tuple(inputs)
    wrt = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    outputs = _float_outputs(func, inputs)
    if grad_outputs is None:
        grad_outputs = tuple(
            (random(o.shape, "uniform", dtype=o.dtype, backend=o.backend, device=o.device) * 2
             - 1).detach().require_grad()
            for o in outputs
        )  # fmt: skip
    grad_outputs = _as_tuple(grad_outputs)
    count = len(inputs)

    def first_derivatives(*args: Any) -> tuple:
        # The weights stay in the graph (autograd.grad detaches them): the second
        # derivatives with respect to them are checked too, as torch's.
        outs = _float_outputs(func, args[:count])
        total = sum((o * w).sum() for o, w in zip(outs, args[count:]))
        grads = total.backward(retain_graph=True, create_graph=True)
        firsts = []
        for i in wrt:
            g = args[i].grad(grads)
            if g is not None and g.backend is not args[i].backend:
                g = Tensor.from_inner(g, backend=args[i].backend)
            if g is not None:
                firsts.append(g)
        return tuple(firsts)

    if not check_rev_over_rev:
        return True
    return gradcheck(first_derivatives, (*inputs, *grad_outputs), eps=eps, atol=atol,
                     rtol=rtol, raise_exception=raise_exception)  # fmt: skip
