"""torch's ``torch.func`` (JAX-style function transforms): ``grad``, ``grad_and_value``,
``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian`` and ``vmap``, with ``functional_call``
and ``stack_module_state`` (model ensembling: one module's code over stacked copies of
several modules' weights).

A transform takes a function of tensors and returns a function. Its arguments are plain
tensors (or tuples, lists and dicts of them, torch's pytrees); it differentiates with respect to
fresh leaves holding their values, and returns results cut from the graph. When an argument
itself requires grad (the function runs inside another transform, or under ``backward``),
differentiated or not, the results are recorded instead, differentiable with respect to it: so
transforms nest, ``grad(grad(f))`` being the second derivative, and a physics-informed loss
built from ``vmap(grad(f), in_dims=(0, None))(x, params)`` trains ``params``. ``jacfwd`` and
``jvp`` compute with reverse mode (``jvp`` by the double-backward trick): the values are
forward mode's. ``vmap`` is ``rg.vmap``. A tensor that requires grad and that the function
closes over (a module's parameters in ``vmap(jacrev(model))(x)``) makes every transform
record its results too, as torch's levels keep its graph.

>>> import retrograd as rg
>>> from retrograd.func import grad
>>> x = rg.tensor(2.0)
>>> grad(lambda x: x ** 3)(x).item(), grad(grad(lambda x: x ** 3))(x).item()
(12.0, 12.0)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from .autodiff import enable_grad, no_grad
from .autograd import _RANDOM_IN_VMAP, vmap
from .autograd.functional import _fresh, _gradients, _plain
from .backend.protocol import random_allowed, random_refused
from .errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    ShapeError,
    check_callable,
    check_iterable,
    shape_text,
)
from .nn.modules.module import Module
from .nn.utils.stateless import functional_call
from .tensor import Tensor, ones_like, stack, zeros, zeros_like

__all__ = [
    "functional_call",
    "grad",
    "grad_and_value",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "linearize",
    "replace_all_batch_norm_modules_",
    "stack_module_state",
    "vjp",
    "vmap",
]


# -- pytrees: tuples, lists and dicts of tensors ---------------------------------------------------
def _flatten(tree: Any) -> tuple[list[Any], Any]:
    """The leaves of ``tree`` in order, and its structure (for :func:`_unflatten`)."""
    if isinstance(tree, tuple | list):
        leaves: list[Any] = []
        specs = []
        for item in tree:
            sub, spec = _flatten(item)
            leaves.extend(sub)
            specs.append(spec)
        return leaves, (type(tree), None, specs)
    if isinstance(tree, dict):
        leaves, specs = [], []
        for key in tree:
            sub, spec = _flatten(tree[key])
            leaves.extend(sub)
            specs.append(spec)
        return leaves, (dict, list(tree), specs)
    return [tree], None


def _unflatten(leaves: Any, spec: Any) -> Any:
    return _build(iter(leaves), spec)


def _build(it: Any, spec: Any) -> Any:
    """The tree of ``spec`` with its leaves drawn from ``it`` in order. A module function,
    not a closure over ``it``: a closure that calls itself is a reference cycle, which held
    the leaves (a transform's outputs and their graph) until the garbage collector ran."""
    if spec is None:
        return next(it)
    kind, keys, specs = spec
    items = [_build(it, s) for s in specs]
    if kind is dict:
        return dict(zip(keys, items))
    if kind is list:
        return items
    if kind is tuple:
        return tuple(items)
    return kind(*items)  # a namedtuple


def _tensors(fn: str, what: str, tree: Any) -> tuple[list[Tensor], Any]:
    leaves, spec = _flatten(tree)
    for leaf in leaves:
        if not isinstance(leaf, Tensor):
            raise DTypeError(
                f"{fn}: {what} must be tensors (or tuples, lists and dicts of them), got "
                f"{type(leaf).__name__}"
            )
    return leaves, spec


def _differentiable_outputs(fn: str, outputs: list[Tensor]) -> None:
    """torch's refusal of a reverse-mode transform (``vjp``, ``jacrev``) of an output that is
    not float or complex: an int or bool output has no cotangent."""
    for o in outputs:
        if not (o.is_floating_point() or o.is_complex()):
            raise DTypeError(
                f"{fn}: all outputs of the function must be floating-point or complex tensors, "
                f"got a {shape_text(o.shape)} tensor of dtype {o.dtype}"
            )


def _records(tensors: list[Any]) -> bool:
    """Whether the transform records its results: some argument requires grad (an outer
    transform's leaf, or a tensor of the caller's graph), differentiated or not (the
    parameters of ``functional_call(model, params, (x,))`` passed alongside ``x``)."""
    return any(isinstance(t, Tensor) and t.requires_grad for t in tensors)


def _split_aux(fn: str, out: Any, has_aux: bool) -> tuple[Any, Any]:
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise DTypeError(
            f"{fn}: with has_aux=True the function must return a tuple (output, aux), got "
            f"{type(out).__name__}"
        )
    # torch's refusal of an aux that holds anything but tensors (a number, None, a str)
    _tensors(fn, "the auxiliary outputs (aux)", out[1])
    return out


def _finished(tree: Any, records: bool) -> Any:
    if records:
        return tree
    leaves, spec = _flatten(tree)
    return _unflatten([_plain(x) for x in leaves], spec)


def _filled(grads: tuple[Tensor | None, ...], refs: list[Tensor]) -> list[Tensor]:
    return [zeros_like(x) if g is None else g for g, x in zip(grads, refs)]


def _argnums(fn: str, argnums: Any, n: int) -> tuple[int, ...]:
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    if not nums:
        raise InvalidArgumentError(f"{fn}: argnums must be non-empty")
    for a in nums:
        if not isinstance(a, int) or isinstance(a, bool):
            raise InvalidArgumentError(
                f"{fn}: argnums must be an int or a tuple of ints, got {argnums!r}"
            )
        if not -n <= a < n:
            raise InvalidArgumentError(
                f"{fn}: argnums {a} is out of range for a function called with {n} positional "
                "arguments"
            )
    normalized = tuple(a % n for a in nums)
    if len(set(normalized)) != len(normalized):
        # each would get a fresh leaf of its own and the function sees the last one only:
        # the others' gradients would come back as zeros
        raise InvalidArgumentError(f"{fn}: argnums elements must be unique, got {normalized!r}")
    return normalized


def _closes_over(outputs: Sequence[Tensor], leaves: list[Tensor]) -> bool:
    """Whether ``outputs`` depend on a tensor that requires grad other than the fresh
    ``leaves``: one the function closes over (a module's parameters in
    ``vmap(jacrev(model))(x)``), found by a walk of their graph (torch's levels keep that
    tensor's graph, so the transform records its results)."""
    tracked = [o for o in outputs if o.requires_grad]
    if not tracked:
        return False
    backend = tracked[0]._backend
    return backend.reaches_other_leaves([o._prim for o in tracked], [x._prim for x in leaves])


class _Prepared:
    """A call of a transformed function: the arguments differentiated (``argnums``) replaced
    by fresh tensors, ``leaves`` (flat), ``spec`` rebuilding them in ``argnums``' form."""

    def __init__(self, fn: str, argnums: Any, args: tuple, kwargs: dict) -> None:
        nums = _argnums(fn, argnums, len(args))
        chosen = args[nums[0]] if isinstance(argnums, int) else tuple(args[i] for i in nums)
        flat, self.spec = _tensors(fn, "the arguments to differentiate", chosen)
        # (an argument not differentiated here may be an outer transform's: jacfwd(jacrev(f,
        # argnums=1), argnums=0) differentiates the gradient in argument 1 in argument 0)
        self.records = _records(_flatten((args, kwargs))[0])
        self.leaves = [_fresh(x, self.records, fn) for x in flat]
        fresh = _unflatten(self.leaves, self.spec)
        new_args = list(args)
        if isinstance(argnums, int):
            new_args[nums[0]] = fresh
        else:
            for i, value in zip(nums, fresh):
                new_args[i] = value
        self.args = tuple(new_args)

    def check(self, outputs: Sequence[Tensor]) -> None:
        """Record the results from now on if ``outputs`` also depend on a tensor that requires
        grad and that the function closes over (:func:`_closes_over`)."""
        if not self.records and _closes_over(outputs, self.leaves):
            self.records = True

    def gradient_tree(self, grads: tuple[Tensor | None, ...]) -> Any:
        return _unflatten(_finished(_filled(grads, self.leaves), self.records), self.spec)


# -- the transforms --------------------------------------------------------------------------------
def grad_and_value(
    func: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False
) -> Callable[..., Any]:
    """``func`` transformed to return ``(gradient, value)``: the gradient of its scalar
    (0-dim) output with respect to argument ``argnums`` (a tuple of ints: a tuple of
    gradients), in that argument's structure. With ``has_aux``, ``func`` returns
    ``(output, aux)`` and the result is ``(gradient, (value, aux))``.

    >>> import retrograd as rg
    >>> g, value = rg.func.grad_and_value(lambda x: (x * x).sum())(rg.tensor([1.0, 2.0]))
    >>> g.tolist(), value.item()
    ([2.0, 4.0], 5.0)
    """
    fn = "func.grad_and_value"
    check_callable(fn, func)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with enable_grad():
            call = _Prepared(fn, argnums, args, kwargs)
            out, aux = _split_aux(fn, func(*call.args, **kwargs), has_aux)
            if not isinstance(out, Tensor):
                raise DTypeError(
                    f"{fn}: expected the function to return a tensor, got {type(out).__name__}"
                )
            if out.ndim != 0:
                raise ShapeError(
                    f"{fn}: expected the function to return a scalar (0-dim) tensor, got shape "
                    f"{shape_text(out.shape)}; use vjp or jacrev for other outputs"
                )
            call.check([out])
            grads = _gradients([out], call.leaves, None, call.records)
        value = _finished(out, call.records)
        gradient = call.gradient_tree(grads)
        if has_aux:
            return gradient, (value, _finished(aux, call.records))
        return gradient, value

    return wrapper


def grad(
    func: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False
) -> Callable[..., Any]:
    """``func`` transformed to return the gradient of its scalar (0-dim) output with respect to
    argument ``argnums`` (a tuple of ints: a tuple of gradients); with ``has_aux`` ``func``
    returns ``(output, aux)`` and the result is ``(gradient, aux)``. Nests: ``grad(grad(f))``.

    >>> import retrograd as rg
    >>> f = lambda x, y: (x * y).sum()
    >>> gx, gy = rg.func.grad(f, argnums=(0, 1))(rg.tensor([1.0, 2.0]), rg.tensor([3.0, 4.0]))
    >>> gx.tolist(), gy.tolist()
    ([3.0, 4.0], [1.0, 2.0])
    """
    transformed = grad_and_value(func, argnums, has_aux)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        gradient, value = transformed(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient

    return wrapper


def vjp(func: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """``(output, vjp_fn)`` (with ``has_aux``, ``(output, vjp_fn, aux)``): ``func``'s output at
    ``primals`` and a function of cotangents (the output's structure) returning the
    vector-Jacobian products, a tuple with one entry per primal. ``vjp_fn`` may be called
    more than once (the graph is always kept: its ``retain_graph`` is accepted for torch's
    sake); its ``create_graph=True`` records the products.

    >>> import retrograd as rg
    >>> out, vjp_fn = rg.func.vjp(lambda x: x.sin(), rg.tensor([0.0, 1.0]))
    >>> (g,) = vjp_fn(rg.tensor([2.0, 0.0]))
    >>> g.tolist()
    [2.0, 0.0]
    """
    fn = "func.vjp"
    check_callable(fn, func)
    with enable_grad():
        flat, spec = _tensors(fn, "primals", primals)
        records = _records(flat)
        leaves = [_fresh(x, records, fn) for x in flat]
        out, aux = _split_aux(fn, func(*_unflatten(leaves, spec)), has_aux)
        outputs, out_spec = _tensors(fn, "the outputs of the function", out)
        _differentiable_outputs(fn, outputs)
        records = records or _closes_over(outputs, leaves)

    def vjp_fn(
        cotangents: Any, *, retain_graph: bool = True, create_graph: bool | None = None
    ) -> Any:
        cots, cot_spec = _tensors(fn, "the cotangents", cotangents)
        if cot_spec != out_spec or len(cots) != len(outputs):
            raise ShapeError(
                f"{fn}: the cotangents must have the structure of the function's outputs "
                f"({len(outputs)} tensors), got {len(cots)} in another structure"
            )
        for i, (c, o) in enumerate(zip(cots, outputs)):
            if tuple(c.shape) != tuple(o.shape):
                raise ShapeError(
                    f"{fn}: cotangent {i} has shape {shape_text(c.shape)}, expected "
                    f"{shape_text(o.shape)} (the output's)"
                )
        keep = records or bool(create_graph) or _records(cots)
        with enable_grad():
            weights = cots if keep else [c.detach() for c in cots]
            grads = _gradients(outputs, leaves, weights, keep)
        return _unflatten(_finished(_filled(grads, leaves), keep), spec)

    result = (_finished(out, records), vjp_fn)
    return (*result, _finished(aux, records)) if has_aux else result


def jvp(
    func: Callable[..., Any],
    primals: Any,
    tangents: Any,
    *,
    strict: bool = False,
    has_aux: bool = False,
) -> tuple[Any, ...]:
    """``(output, jvp_out)`` (with ``has_aux``, ``(output, jvp_out, aux)``): ``func``'s output
    at ``primals`` (a tuple: ``func(*primals)``) and the Jacobian-vector product with
    ``tangents`` (the primals' structure), in the output's structure. Computed by the
    double-backward trick (reverse mode twice): the values of forward mode. ``strict``:
    an output independent of the primals raises (else its tangent is zeros).

    >>> import retrograd as rg
    >>> out, t = rg.func.jvp(lambda x: x * x, (rg.tensor([1.0, 2.0]),), (rg.tensor([1.0, 1.0]),))
    >>> t.tolist()
    [2.0, 4.0]
    """
    fn = "func.jvp"
    check_callable(fn, func)
    for name, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, tuple):  # (a list too: torch's pytrees tell them apart)
            raise DTypeError(
                f"{fn}: expected {name} to be a tuple (func is called as func(*primals)), got "
                f"{type(value).__name__}"
            )
    if not primals:
        raise InvalidArgumentError(f"{fn}: expected primals to contain at least one tensor")
    flat, spec = _tensors(fn, "primals", tuple(primals))
    tans, tan_spec = _tensors(fn, "tangents", tuple(tangents))
    if tan_spec != spec:
        raise ShapeError(f"{fn}: the tangents must have the structure of the primals")
    for i, (t, p) in enumerate(zip(tans, flat)):
        if tuple(t.shape) != tuple(p.shape):
            raise ShapeError(
                f"{fn}: tangent {i} has shape {shape_text(t.shape)}, expected "
                f"{shape_text(p.shape)} (the primal's)"
            )
    records = _records(flat + tans)
    with enable_grad():
        leaves = [_fresh(x, records, fn) for x in flat]
        out, aux = _split_aux(fn, func(*_unflatten(leaves, spec)), has_aux)
        outputs, out_spec = _tensors(fn, "the outputs of the function", out)
        records = records or _closes_over(outputs, leaves)
        # J^T u for dummy u (the backward is linear in u), whose gradient with respect to u,
        # weighted by the tangents, is J t; u is ones, not zeros, as forward mode has values
        # where a backward written in log space (logcumsumexp's, log|u|) has no derivative
        dummies = [
            (
                ones_like(o) if o.is_float() or o.is_complex() else ones_like(o).float()
            ).require_grad()
            for o in outputs
        ]
        grad_inputs = _gradients(outputs, leaves, dummies, create_graph=True)
        weights = tans if records else [t.detach() for t in tans]
        grads = _gradients(grad_inputs, dummies, weights, records)
    if strict:
        for i, (g, o) in enumerate(zip(grads, outputs)):
            if g is None:
                raise AutodiffError(
                    f"{fn}: output {i} ({shape_text(o.shape)}) of the function is independent of "
                    "the inputs; not allowed with strict=True"
                )
    tangents_out = _finished(_filled(grads, outputs), records)
    result = (_finished(out, records), _unflatten(tangents_out, out_spec))
    return (*result, _finished(aux, records)) if has_aux else result


def linearize(func: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
    """``(output, jvp_fn)``: ``func(*primals)`` and the function ``jvp_fn(*tangents)`` that
    gives its Jacobian-vector products at ``primals`` (torch's ``func.linearize``; each call
    is a :func:`jvp` at the same point)."""
    check_callable("func.linearize", func)
    _tensors("func.linearize", "primals", primals)  # before zeros_like meets a non-tensor
    output = jvp(func, primals, tuple(zeros_like(p) for p in primals))[0]

    def jvp_fn(*tangents: Any) -> Any:
        return jvp(func, primals, tangents)[1]

    return output, jvp_fn


def replace_all_batch_norm_modules_(root: Module) -> Module:
    """Make every batch-norm module of ``root`` keep no running statistics, in place (torch's
    ``func.replace_all_batch_norm_modules_``, for ``vmap`` over models with batch norm):
    ``running_mean``, ``running_var`` and ``num_batches_tracked`` become ``None`` and
    ``track_running_stats`` False, so each always normalizes with its batch's statistics."""
    from .nn.modules.norm import _BatchNorm

    if not isinstance(root, Module):
        raise DTypeError(
            f"func.replace_all_batch_norm_modules_: expected an nn.Module, got "
            f"{type(root).__name__}"
        )
    for module in root.modules():
        if isinstance(module, _BatchNorm) and module.track_running_stats:
            module.running_mean = None
            module.running_var = None
            module.num_batches_tracked = None
            module.track_running_stats = False
    return root


def jacrev(
    func: Callable[..., Any],
    argnums: int | tuple[int, ...] = 0,
    *,
    has_aux: bool = False,
    chunk_size: int | None = None,
) -> Callable[..., Any]:
    """``func`` transformed to return its Jacobian with respect to argument ``argnums``: for
    each output tensor (in the output's structure) a tensor of shape ``output.shape +
    argument.shape`` (for a tuple ``argnums``, or an argument that is a tuple, list or dict, one
    such per tensor in that structure). Reverse mode, one backward per output element
    (``chunk_size`` is accepted; the values do not depend on it). With ``has_aux``,
    ``(jacobian, aux)``.

    >>> import retrograd as rg
    >>> rg.func.jacrev(lambda x: x * x)(rg.tensor([1.0, 2.0])).tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    if chunk_size is not None and (
        not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size <= 0
    ):
        raise InvalidArgumentError(
            f"func.jacrev: chunk_size should be None or an int greater than 0, got {chunk_size!r}"
        )
    return _jacobian("func.jacrev", func, argnums, has_aux)


def jacfwd(
    func: Callable[..., Any],
    argnums: int | tuple[int, ...] = 0,
    has_aux: bool = False,
    *,
    randomness: str = "error",
) -> Callable[..., Any]:
    """torch's forward-mode Jacobian: the same values, structure and dtypes as
    :func:`jacrev` (here computed in reverse mode: one backward per output element, where
    torch pushes one tangent per input element through the function under ``vmap``).
    ``randomness`` is that of :func:`vmap`, whose rule ``func`` runs under: by default
    (``"error"``) a random draw in ``func`` (``rand``, dropout) raises torch's RuntimeError,
    so :func:`hessian` refuses one too; ``"same"`` and ``"different"`` allow it: with
    ``"same"`` every column of the Jacobian (one per input element) sees one draw, with
    ``"different"`` each column its own (``func`` called once per column here; ``aux``
    from the first call, as torch takes the first of its batch).

    >>> import retrograd as rg
    >>> rg.func.jacfwd(lambda x: x.sum(0))(rg.tensor([[1.0], [2.0]])).tolist()
    [[[1.0], [1.0]]]
    """
    if randomness not in ("error", "different", "same"):
        raise InvalidArgumentError(
            f'func.jacfwd: randomness must be "error", "different" or "same", got {randomness!r}'
        )
    return _jacobian("func.jacfwd", func, argnums, has_aux, randomness)


def _jacobian(
    fn: str, func: Callable[..., Any], argnums: Any, has_aux: bool, randomness: str | None = None
) -> Callable:
    """``randomness``: the :func:`vmap` rule ``func`` runs under (``None``: none, jacrev's
    call being outside torch's ``vmap``)."""
    check_callable(fn, func)
    if randomness == "error":  # torch's words, the transform named first

        def rule() -> Any:
            return random_refused(f"{fn}(randomness='error'): {_RANDOM_IN_VMAP}")

    else:
        rule = random_allowed if randomness else contextlib.nullcontext

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with enable_grad():
            call = _Prepared(fn, argnums, args, kwargs)
            for index, leaf in enumerate(call.leaves):
                if leaf.is_complex():  # torch's refusal: a Jacobian of real variables only
                    raise DTypeError(
                        f"{fn}: expected all inputs to be real but received a complex tensor "
                        f"at flattened input index {index} (as torch)"
                    )
            # torch's jacfwd runs ``func`` under vmap, one tangent per input element: with
            # randomness="different" each column of the Jacobian sees its own draw, so each is
            # taken from a call of its own here ("same": one call, every column alike)
            columns = sum(x.numel() for x in call.leaves)
            calls = columns if fn == "func.jacfwd" and randomness == "different" else 1
            runs = []
            for _ in range(max(calls, 1)):
                with rule():
                    result = func(*call.args, **kwargs)
                out, aux = _split_aux(fn, result, has_aux)
                outputs, out_spec = _tensors(fn, "the outputs of the function", out)
                if fn == "func.jacrev":
                    _differentiable_outputs(fn, outputs)
                call.check(outputs)
                runs.append((_jacobians(fn, outputs, call), aux))
            jacobians, aux = runs[0]
            if calls > 1:  # column c of each Jacobian from the c-th call
                jacobians = [
                    [_columns_of(runs, i, j, sum(x.numel() for x in call.leaves[:j]), x.numel())
                     for j, x in enumerate(call.leaves)]
                    for i in range(len(jacobians))
                ]  # fmt: skip
            per_output = [
                _unflatten(_finished(jacs, call.records), call.spec) for jacs in jacobians
            ]
        jacobian = _unflatten(per_output, out_spec)
        return (jacobian, _finished(aux, call.records)) if has_aux else jacobian

    return wrapper


def _jacobians(fn: str, outputs: list[Tensor], call: _Prepared) -> list[list[Tensor]]:
    """The Jacobian of each output with respect to each of ``call``'s leaves (one backward
    per output element), of shape ``output.shape + leaf.shape``."""
    per_output = []
    for o in outputs:
        rows: list[list[Tensor]] = [[] for _ in call.leaves]
        flat = o.reshape(-1)
        for k in range(o.numel()):
            grads = _gradients([flat[k]], call.leaves, None, call.records)
            for j, g in enumerate(_filled(grads, call.leaves)):
                rows[j].append(g)
        jacs = [
            stack(r, dim=0).reshape(tuple(o.shape) + tuple(x.shape))
            if r
            else zeros(
                tuple(o.shape) + tuple(x.shape),
                dtype=x.dtype,
                backend=x.backend,
                device=x.device,
            )
            for r, x in zip(rows, call.leaves)
        ]
        if fn == "func.jacfwd":  # forward mode's tangents are of the output's dtype
            jacs = [j if j.dtype == o.dtype else j.to(o.dtype) for j in jacs]
        per_output.append(jacs)
    return per_output


def _columns_of(runs: list, i: int, j: int, first: int, n: int) -> Tensor:
    """Output ``i``'s Jacobian in leaf ``j`` (of ``n`` elements), its column ``e`` taken from
    the Jacobian of call ``first + e`` (``first``: the leaf's first column overall)."""
    whole = runs[0][0][i][j]
    if n == 0:
        return whole
    cols = [runs[first + e][0][i][j].reshape(-1, n)[:, e] for e in range(n)]
    return stack(cols, dim=1).reshape(tuple(whole.shape))


def hessian(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0) -> Callable[..., Any]:
    """``func`` transformed to return its Hessian with respect to argument ``argnums``:
    ``jacfwd(jacrev(func, argnums), argnums)``, of shape ``output.shape + argument.shape +
    argument.shape``.

    >>> import retrograd as rg
    >>> rg.func.hessian(lambda x: (x ** 3).sum())(rg.tensor([1.0, 2.0])).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacfwd(jacrev(func, argnums), argnums)


# -- model ensembling ------------------------------------------------------------------------------
def stack_module_state(models: Any) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """torch's ``stack_module_state``: the parameters and the buffers of ``models`` (modules of
    one class, all in training or all in eval mode), each name's tensors stacked along a new
    first dimension, for ``vmap`` over ``functional_call``. Stacked parameters are new leaves
    that require grad (when the models' do), as torch's.

    >>> import retrograd as rg
    >>> params, buffers = stack_module_state([rg.nn.Linear(2, 3) for _ in range(4)])
    >>> params["weight"].shape, params["weight"].requires_grad, buffers
    (retrograd.Size([4, 3, 2]), True, {})
    """
    check_iterable("stack_module_state", models, "models")
    models = list(models)
    if not models:
        raise InvalidArgumentError("stack_module_state: Expected at least one model, got 0.")
    wrong = next((m for m in models if not isinstance(m, Module)), None)
    if wrong is not None:
        raise DTypeError(f"stack_module_state: expected modules, got {type(wrong).__name__}")
    if len({bool(m.training) for m in models}) != 1:
        raise InvalidArgumentError(
            "stack_module_state: Expected all models to have the same training/eval mode."
        )
    if len({type(m) for m in models}) != 1:
        raise InvalidArgumentError(
            "stack_module_state: Expected all models to be of the same class."
        )

    def stacked(tensors: tuple[Tensor, ...], name: str) -> Tensor:
        flags = {bool(t.requires_grad) for t in tensors}
        if len(flags) != 1:
            raise InvalidArgumentError(
                f"Expected {name} from each model to have the same .requires_grad"
            )
        with no_grad():  # stacked outside the graph: a new leaf (detach keeps requires_grad)
            result = stack(list(tensors))
        return result.requires_grad_() if flags == {True} else result

    all_params = [dict(m.named_parameters()) for m in models]
    all_buffers = [dict(m.named_buffers()) for m in models]
    params = {k: stacked(tuple(p[k] for p in all_params), k) for k in all_params[0]}
    buffers = {k: stacked(tuple(b[k] for b in all_buffers), k) for k in all_buffers[0]}
    return params, buffers
