"""A tensor of the inner backend (a gradient ``G = p.grad(grads)``, API.md section 3) with a
tensor of its autodiff decorator that requires grad: every op taking several tensors records
its graph on the decorator, the inner tensor a constant, as torch records an op of a gradient
and a parameter, whichever operand comes first. Each op must give what the same program gives
with both operands on the decorator (values and the parameter's gradient), and what torch
gives where torch has the op under the same name.

The op surface is enumerated, not hand-picked: every public ``Tensor`` method and every
public function of ``rg``, ``rg.nn.functional``, ``rg.linalg`` and ``rg.special`` that takes
two float tensors (``f(a, b)``) or a list of them (``f([a, b])``) on the decorator is called
with one operand on the inner backend, in each position. In-place writes into an inner tensor
keep their refusal (its backend holds no graph); writes of an inner value into a tracked
tensor are recorded."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)

_LEFT = np.array([[0.6, 1.1, 0.8], [1.3, 0.7, 1.2], [0.9, 1.4, 0.5]])
_RIGHT = np.array([[1.2, 0.7, 1.3], [0.8, 1.5, 0.6], [1.1, 0.9, 1.4]])

#: names whose call is no op on values (hooks, graph and storage bookkeeping, conversions out
#: of retrograd) or draws random numbers, or that write into an operand
_NOT_OPS = frozenset(
    [
        "backward",
        "register_hook",
        "register_post_accumulate_grad_hook",
        "retain_grad",
        "grad",
        "grad_remove",
        "grad_replace",
        "require_grad",
        "from_inner",
        "set_default_backend",
        "use_backend",
        "save",
        "load",
        "manual_seed",
        "seed",
        "normal",
        "poisson",
        "bernoulli",
        "multinomial",
        "rand_like",
        "randn_like",
        "randint_like",
        "dropout",
        "alpha_dropout",
        "feature_alpha_dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "rrelu",
        "gumbel_softmax",
        "fractional_max_pool2d",
        "fractional_max_pool3d",
        "compile",
        "vmap",
        "svd_lowrank",
        "pca_lowrank",
        "lobpcg",
    ]
)


def _backend():
    backend = rg.current_backend()
    assert backend.is_autodiff
    return backend


def _is_tensor(value):
    return isinstance(value, rg.Tensor)


def _tensors(result):
    if _is_tensor(result):
        return [result]
    if isinstance(result, tuple | list):
        return [t for item in result for t in _tensors(item)]
    return []


def _quiet(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call()


#: the operand shapes tried, in order: matrices, vectors (``dot``, ``outer``), batches of
#: matrices (``bmm``, ``baddbmm``)
_SHAPES = ((3, 3), (3,), (2, 3, 3))


def _operand(k, shape):
    """The ``k``-th operand's values: positive, away from 1 and from each other (``log``,
    ``pow``, ``logit`` and the solves stay finite and well conditioned)."""
    size = int(np.prod(shape))
    values = 0.3 + ((np.arange(size) * 7 + k * 5) % 11) / 20.0
    values = values.reshape(shape)
    if len(shape) >= 2:  # diagonally dominant: the solves and factorizations are defined
        values = values + 2.0 * np.eye(shape[-1])
    return values


def _run(fn, arity, shape, constant_at, on_inner=True):
    """``fn`` of ``arity`` operands of ``shape``, leaves requiring grad but the constant at
    ``constant_at``, on the inner backend where ``on_inner`` (on the decorator otherwise):
    the float results' values, whether they require grad, and the leaves' gradients of
    their sum."""
    backend = _backend()
    operands = []
    for k in range(arity):
        t = rg.tensor(_operand(k, shape), dtype="float64", backend=backend)
        if k != constant_at:
            t = t.require_grad()
        elif on_inner:
            t = t.inner()
            assert t._backend == backend.inner
        operands.append(t)
    rg.manual_seed(0)
    result = _quiet(lambda: fn(*operands))
    outs = [t for t in _tensors(result) if t.dtype in ("float64", "float32")]
    values = [t.detach().numpy() for t in outs]
    tracked = [t for t in outs if t.requires_grad]
    grads = []
    if tracked:
        loss = tracked[0].sum()
        for t in tracked[1:]:
            loss = loss + t.sum()
        gradients = loss.backward()
        for k, t in enumerate(operands):
            if k != constant_at:
                g = t.grad(gradients)
                grads.append(None if g is None else g.numpy())
    return values, [t.requires_grad for t in outs], grads


def _records_each_operand(fn, arity, shape):
    """Whether ``fn`` of ``arity`` float tensors on the decorator records a float result with
    any one of them constant: an op of that many tensor operands (not ``relu(x, inplace)``,
    nor ``expand_as``, which reads its operand's shape alone)."""
    try:
        return all(
            any(_run(fn, arity, shape, constant_at, on_inner=False)[1])
            for constant_at in range(arity)
        )
    except Exception:  # not an op of these operands (other arguments, shapes): not enumerated
        return False


def _first_form(label, forms):
    """The first of ``forms`` (``(suffix, fn)``) that is an op of 2 or 3 tensor operands of
    one of :data:`_SHAPES`, as a case ``(label, fn, arity, shape)``; ``None`` if none is."""
    for arity in (2, 3):
        for shape in _SHAPES:
            for suffix, fn in forms:
                if _records_each_operand(fn, arity, shape):
                    return (f"{label}{suffix}/{arity}x{len(shape)}d", fn, arity, shape)
    return None


def _enumerated():
    cases = []
    for name in sorted(dir(rg.Tensor)):
        if name.startswith("_") or name.endswith("_") or name in _NOT_OPS:
            continue
        if isinstance(inspect.getattr_static(rg.Tensor, name), property | staticmethod):
            continue
        if not callable(getattr(rg.Tensor, name, None)):
            continue

        def method(a, *rest, name=name):
            return getattr(a, name)(*rest)

        case = _first_form(f"Tensor.{name}", [("", method)])
        if case is not None:
            cases.append(case)
    namespaces = (("rg", rg), ("F", F), ("linalg", rg.linalg), ("special", rg.special))
    for prefix, module in namespaces:
        for name in sorted(getattr(module, "__all__", dir(module))):
            value = getattr(module, name, None)
            if (
                name.startswith("_")
                or name.endswith("_")
                or name.startswith(_SETTERS)
                or name in _NOT_OPS
                or not callable(value)
                or isinstance(value, type)
            ):
                continue

            def function(*operands, value=value):
                return value(*operands)

            def listed(*operands, value=value):
                return value(list(operands))

            case = _first_form(f"{prefix}.{name}", [("", function), ("([])", listed)])
            if case is not None:
                cases.append(case)
    return cases


#: Functions that set process-wide state (``set_anomaly_enabled(a, b)`` turned anomaly mode on
#: for every later test of the worker): never called by the enumeration
_SETTERS = ("set_", "use_", "manual_seed", "seed", "enable", "disable", "init")


def _enumerated_leaving_the_process_as_it_was():
    """:func:`_enumerated`, run at collection, with the process-wide settings the calls might
    touch put back after it (a test's fixtures cannot: collection comes before them)."""
    settings = (
        rg.is_anomaly_enabled(),
        rg.is_anomaly_check_nan_enabled(),
        rg.get_printoptions(),
        rg.get_default_dtype(),
        rg.is_grad_enabled(),
        rg.get_rng_state(),
    )
    try:
        return _enumerated()
    finally:
        anomaly, check_nan, printing, dtype, grad, rng = settings
        rg.set_anomaly_enabled(anomaly, check_nan)
        rg.set_printoptions(**printing)
        rg.set_default_dtype(dtype)
        rg.set_grad_enabled(grad)
        rg.set_rng_state(rng)


_CASES = _enumerated_leaving_the_process_as_it_was()


def test_the_enumeration_finds_the_surface():
    names = {label.partition("/")[0] for label, *_ in _CASES}
    for expected in (
        "Tensor.matmul",
        "Tensor.mm",
        "Tensor.bmm",
        "Tensor.dot",
        "Tensor.outer",
        "Tensor.add",
        "Tensor.maximum",
        "Tensor.lerp",
        "Tensor.addmm",
        "rg.cat([])",
        "rg.stack([])",
        "rg.hstack([])",
        "rg.tensordot",
        "rg.baddbmm",
        "F.linear",
        "F.mse_loss",
        "linalg.solve",
    ):
        assert expected in names, expected
    assert len(names) > 150, len(names)


#: names torch computes otherwise on these (not triangular, not symmetric) operands, or
#: whose result has other fields: the mixed program is compared with the decorator's alone
_TORCH_READS_OTHERWISE = frozenset(["cholesky_solve", "triangular_solve", "lstsq"])


def _torch_form(label):
    """The same op in torch (``torch.Tensor.name``, ``torch.name``,
    ``torch.nn.functional.name``...), or ``None`` where torch has none by that name."""
    prefix, _, name = label.partition("/")[0].partition(".")
    listed = name.endswith("([])")
    name = name.removesuffix("([])")
    owner = {
        "Tensor": torch.Tensor,
        "rg": torch,
        "F": torch.nn.functional,
        "linalg": torch.linalg,
        "special": torch.special,
    }[prefix]
    function = getattr(owner, name, None)
    if function is None or name in _TORCH_READS_OTHERWISE:
        return None
    if prefix == "Tensor":
        return lambda a, *rest: getattr(a, name)(*rest)
    return (lambda *operands: function(list(operands))) if listed else function


def _torch_run(fn, arity, shape, constant_at):
    operands = [
        torch.tensor(_operand(k, shape), dtype=torch.float64, requires_grad=k != constant_at)
        for k in range(arity)
    ]
    torch.manual_seed(0)
    result = _quiet(lambda: fn(*operands))
    items = [result] if isinstance(result, torch.Tensor) else list(result)
    outs = [t for t in items if isinstance(t, torch.Tensor) and t.is_floating_point()]
    tracked = [t for t in outs if t.requires_grad]
    grads = []
    if tracked:
        sum(t.sum() for t in tracked).backward()
        grads = [
            None if t.grad is None else t.grad.numpy()
            for k, t in enumerate(operands)
            if k != constant_at
        ]
    return [t.detach().numpy() for t in outs], [t.requires_grad for t in outs], grads


def _assert_same(ours, theirs, **tolerance):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, equal_nan=True, **tolerance)


_POSITIONS = [(label, fn, arity, shape, k) for label, fn, arity, shape in _CASES
              for k in range(arity)]  # fmt: skip


@pytest.mark.parametrize(
    ("label", "fn", "arity", "shape", "constant_at"),
    _POSITIONS,
    ids=[f"{label}-inner{k}" for label, _, _, _, k in _POSITIONS],
)
def test_an_inner_operand_is_a_constant_of_the_recorded_op(label, fn, arity, shape, constant_at):
    # the same program with every operand on the decorator: what the mixed one must give
    expected = _run(fn, arity, shape, constant_at, on_inner=False)
    values, requires, grads = _run(fn, arity, shape, constant_at)
    assert requires == expected[1]
    assert any(requires)
    _assert_same(values, expected[0], rtol=1e-12, atol=1e-12)
    _assert_same(grads, expected[2], rtol=1e-12, atol=1e-12)
    torch_fn = _torch_form(label)
    if torch_fn is None:
        return
    try:
        torch_values, torch_requires, torch_grads = _torch_run(torch_fn, arity, shape, constant_at)
    except Exception:  # torch's form of the name takes other arguments: compared above alone
        return
    if [v.shape for v in torch_values] != [v.shape for v in values]:
        return  # (a name whose torch result has other fields: sort/topk pairs, solutions)
    assert requires == torch_requires
    _assert_same(values, torch_values, rtol=1e-7, atol=1e-9)
    if torch_grads:
        _assert_same(grads, torch_grads, rtol=1e-7, atol=1e-9)


def _pair():
    w = rg.tensor(_LEFT, dtype="float64").require_grad()
    gradient = w.grad((w * w * w).sum().backward())  # a gradient: 3 w², on the inner backend
    assert gradient._backend == _backend().inner
    return w, gradient


def _torch_pair():
    w = torch.tensor(_LEFT, dtype=torch.float64, requires_grad=True)
    return w, (3 * w * w).detach()


# index and assembly ops whose tensor values join a tensor of other shape or dtype
_INDEXED = {
    "index_add": lambda x, g: x.index_add(0, _index(x, [2, 0]), g[:2]),
    "index_copy": lambda x, g: x.index_copy(0, _index(x, [2, 0]), g[:2]),
    "scatter": lambda x, g: x.scatter(1, _index(x, [[0], [2], [1]]), g[:, :1]),
    "scatter_add": lambda x, g: x.scatter_add(1, _index(x, [[0], [2], [1]]), g[:, :1]),
    "masked_scatter": lambda x, g: x.masked_scatter(x > 1.0, g),
    "index_put": lambda x, g: x.index_put((_index(x, [1, 2]),), g[:2]),
    "where": lambda x, g: _lib(x).where(x > 1.0, x, g),
    "where_reversed": lambda x, g: _lib(x).where(x > 1.0, g, x),
    "diagonal_scatter": lambda x, g: _lib(x).diagonal_scatter(x, g[0]),
    "select_scatter": lambda x, g: _lib(x).select_scatter(x, g[1], 0, 2),
    "slice_scatter": lambda x, g: _lib(x).slice_scatter(x, g[:1], 0, 1, 2),
    "lerp": lambda x, g: _lib(x).lerp(x, g, 0.3),
    "addcmul": lambda x, g: _lib(x).addcmul(g, x, g, value=0.5),
    "addmm": lambda x, g: _lib(x).addmm(g, g, x),
    "einsum": lambda x, g: _lib(x).einsum("ij,jk->ik", g, x),
    "bmm": lambda x, g: _lib(x).bmm(g[None], x[None]),
    "vstack": lambda x, g: _lib(x).vstack([g, x]),
    "linear_bias": lambda x, g: _lib(x).nn.functional.linear(g, g, x[0]),
    "conv1d": lambda x, g: _lib(x).nn.functional.conv1d(g[None], x[:, :, None]),
    "conv1d_weight_inner": lambda x, g: _lib(x).nn.functional.conv1d(x[None], g[:, :, None]),
    "cross_entropy_weight": lambda x, g: _lib(x).nn.functional.cross_entropy(
        x, _index(x, [0, 2, 1]), weight=g[0]
    ),
    "binary_cross_entropy_weight": lambda x, g: _lib(x).nn.functional.binary_cross_entropy(
        _lib(x).sigmoid(x), _lib(x).sigmoid(g), weight=g
    ),
    "kl_div_target": lambda x, g: _lib(x).nn.functional.kl_div(
        g.log(), x.softmax(1), reduction="batchmean"
    ),
    "maximum_function": lambda x, g: _lib(x).max(g, x),
    "masked_fill_inner_value": lambda x, g: x.masked_fill(x > 1.0, g[0, 0]),
    # the gradient receives the tracked values (torch's out-of-place ops: a result in the graph)
    "masked_fill_into_gradient": lambda x, g: g.masked_fill(g > 3.0, x[0, 0]),
    "index_fill_into_gradient": lambda x, g: g.index_fill(0, _index(x, [1]), x[0, 0]),
    "index_add_into_gradient": lambda x, g: g.index_add(0, _index(x, [2, 0]), x[:2]),
    "index_copy_into_gradient": lambda x, g: g.index_copy(0, _index(x, [2, 0]), x[:2]),
    "scatter_into_gradient": lambda x, g: g.scatter(1, _index(x, [[0], [2], [1]]), x[:, :1]),
    "scatter_reduce_into_gradient": lambda x, g: g.scatter_reduce(
        1, _index(x, [[0], [2], [1]]), x[:, :1], "amax"
    ),
    "masked_scatter_into_gradient": lambda x, g: g.masked_scatter(g > 3.0, x),
    "index_put_into_gradient": lambda x, g: g.index_put((_index(x, [1, 2]),), x[:2]),
    "put_into_gradient": lambda x, g: g.put(_index(x, [0, 4]), x[0, :2]),
    "diagonal_scatter_into_gradient": lambda x, g: _lib(x).diagonal_scatter(g, x[0]),
    "select_scatter_into_gradient": lambda x, g: _lib(x).select_scatter(g, x[1], 0, 2),
    "where_gradient_first": lambda x, g: g.where(g > 3.0, x),
    "take_along_dim_times": lambda x, g: (
        _lib(x).take_along_dim(g, _index(x, [[0], [2], [1]]), 1) * x
    ),
    "layer_norm": lambda x, g: _lib(x).nn.functional.layer_norm(g, (3,), x[0], x[1]),
    "group_norm": lambda x, g: _lib(x).nn.functional.group_norm(g[None], 3, x[0], x[1]),
    "embedding": lambda x, g: _lib(x).nn.functional.embedding(_index(x, [0, 2]), x) * g[:2],
    "conv2d": lambda x, g: _lib(x).nn.functional.conv2d(g[None, None], x[None, None], padding=1),
    "prelu": lambda x, g: _lib(x).nn.functional.prelu(g - 2.0, x[0, :1]),
}


def _lib(x):
    return torch if isinstance(x, torch.Tensor) else rg


def _index(x, values):
    return _lib(x).tensor(values)


@pytest.mark.parametrize("name", sorted(_INDEXED))
def test_index_and_assembly_ops_record_a_gradient_operand(name):
    op = _INDEXED[name]
    w, gradient = _pair()
    out = op(w, gradient)
    assert out.requires_grad
    grads = (out * out).sum().backward()
    ours = w.grad(grads)
    # the same program with the gradient on the decorator
    v, lifted = _pair()
    lifted = rg.Tensor.from_inner(lifted, backend=_backend())
    same = op(v, lifted)
    np.testing.assert_allclose(out.detach().numpy(), same.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.numpy(), v.grad((same * same).sum().backward()).numpy())
    tw, tg = _torch_pair()
    theirs = op(tw, tg)
    (theirs * theirs).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), theirs.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(ours.numpy(), tw.grad.numpy(), rtol=1e-10)


# writes of an inner value into a tracked tensor: recorded, as torch's
_WRITES_INTO_TRACKED = {
    "setitem": lambda y, g: y.__setitem__(0, g[1]),
    "setitem_mask": lambda y, g: y.__setitem__(y > 2.0, g[y > 2.0]),
    "copy_": lambda y, g: y.copy_(g),
    "add_": lambda y, g: y.add_(g),
    "mul_": lambda y, g: y.mul_(g),
    "index_add_": lambda y, g: y.index_add_(0, _index(y, [2, 0]), g[:2]),
    "masked_scatter_": lambda y, g: y.masked_scatter_(y > 2.0, g),
    "index_put_": lambda y, g: y.index_put_((_index(y, [1]),), g[0]),
    "scatter_": lambda y, g: y.scatter_(1, _index(y, [[0], [2], [1]]), g[:, :1]),
}


@pytest.mark.parametrize("name", sorted(_WRITES_INTO_TRACKED))
def test_an_inner_value_written_into_a_tracked_tensor_is_recorded(name):
    write = _WRITES_INTO_TRACKED[name]
    w, gradient = _pair()
    y = w * 2.0
    write(y, gradient)
    assert y.requires_grad
    grads = (y * w).sum().backward()
    tw, tg = _torch_pair()
    ty = tw * 2.0
    write(ty, tg)
    (ty * tw).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad(grads).numpy(), tw.grad.numpy(), rtol=1e-12)


# writes of a tracked value into an inner tensor: its backend cannot hold the graph (torch
# would make it require grad); refused, the tensor unchanged, as API.md section 3's inner
# tensors record nothing
_WRITES_INTO_INNER = {
    "setitem": lambda g, w: g.__setitem__(0, w[1]),
    "copy_": lambda g, w: g.copy_(w),
    "add_": lambda g, w: g.add_(w),
    "mul_": lambda g, w: g.mul_(w),
    "index_add_": lambda g, w: g.index_add_(0, rg.tensor([2, 0]), w[:2]),
    "masked_scatter_": lambda g, w: g.masked_scatter_(g > 3.0, w),
    "index_put_": lambda g, w: g.index_put_((rg.tensor([1]),), w[0]),
    "scatter_": lambda g, w: g.scatter_(1, rg.tensor([[0], [2], [1]]), w[:, :1]),
    "out": lambda g, w: rg.add(w, w, out=g),
}


@pytest.mark.parametrize("name", sorted(_WRITES_INTO_INNER))
def test_a_tracked_value_written_into_an_inner_tensor_is_refused(name):
    w, gradient = _pair()
    before = gradient.numpy().copy()
    refusal = "out= arguments" if name == "out" else "requires grad.*records no graph"
    with pytest.raises(rg.AutodiffError, match=refusal):
        _WRITES_INTO_INNER[name](gradient, w)
    np.testing.assert_array_equal(gradient.numpy(), before)
    with rg.no_grad():  # nothing to record: the values are written
        _WRITES_INTO_INNER[name](gradient, w)
    assert not gradient.requires_grad


def test_a_module_takes_an_inner_input_and_records_its_parameters():
    rg.manual_seed(0)
    layer = rg.nn.Linear(3, 2).double()
    _, gradient = _pair()
    out = layer(gradient)
    assert out.requires_grad
    grads = out.sum().backward()
    torch_layer = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        torch_layer.weight.copy_(torch.tensor(layer.weight.detach().numpy()))
        torch_layer.bias.copy_(torch.tensor(layer.bias.detach().numpy()))
    _, torch_gradient = _torch_pair()
    torch_layer(torch_gradient).sum().backward()
    np.testing.assert_allclose(
        layer.weight.grad(grads).numpy(), torch_layer.weight.grad.numpy(), rtol=1e-12
    )


def test_without_grad_nothing_is_recorded():
    w, gradient = _pair()
    with rg.no_grad():
        out = gradient @ w
    assert not out.requires_grad
    np.testing.assert_allclose(out.numpy(), (3 * _LEFT**2) @ _LEFT, rtol=1e-12)


def test_a_tensor_of_an_unrelated_backend_is_still_refused():
    w, _ = _pair()
    inner = _backend().inner
    unrelated = rg.TorchBackend() if isinstance(inner, rg.NumpyBackend) else rg.NumpyBackend()
    for call in (
        lambda t: w @ t,
        lambda t: t @ w,
        lambda t: rg.cat([t, w]),
        lambda t: F.linear(t, w),
    ):
        with pytest.raises(rg.RetrogradError, match="cannot combine tensors of"):
            call(rg.tensor(_RIGHT, dtype="float64", backend=unrelated))


def test_inner_running_statistics_are_updated_once_in_place():
    # batch_norm writes its running statistics into the inner tensors given, once, as torch
    w, gradient = _pair()
    mean, var = rg.zeros(3, dtype="float64").inner(), rg.ones(3, dtype="float64").inner()
    out = F.batch_norm(gradient, mean, var, weight=w[0], bias=w[1], training=True)
    assert out.requires_grad
    assert mean._backend == _backend().inner
    grads = (out * out).sum().backward()
    tw, tg = _torch_pair()
    tmean, tvar = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    theirs = torch.nn.functional.batch_norm(tg, tmean, tvar, tw[0], tw[1], training=True)
    (theirs * theirs).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), theirs.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(mean.numpy(), tmean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), tvar.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad(grads).numpy(), tw.grad.numpy(), rtol=1e-8, atol=1e-12)


def test_a_tracked_value_an_op_writes_into_a_lifted_operand_is_refused():
    # an entry that ran again on lifted operands writes back into the inner tensors what it
    # wrote into their copies: values, never a graph the inner backend cannot hold
    from retrograd.errors import guard
    from retrograd.tensor._dispatch import lift

    def scaled_into(buffer, weight, keep_graph):
        weight = lift(buffer, weight, "scaled_into")  # (refused while buffer is inner)
        buffer.copy_(weight * 2.0 if keep_graph else (weight * 2.0).detach())
        return buffer

    entry = guard("scaled_into", scaled_into)
    w, gradient = _pair()
    before = gradient.numpy().copy()
    with pytest.raises(rg.AutodiffError, match="scaled_into: wrote a value that requires grad"):
        entry(gradient, w, True)
    np.testing.assert_array_equal(gradient.numpy(), before)
    entry(gradient, w, False)
    assert gradient._backend == _backend().inner
    np.testing.assert_allclose(gradient.numpy(), 2.0 * _LEFT, rtol=1e-12)
