"""Round 21 of the reliability sweep: the Python protocols of a tensor, autograd misuse,
results no machine holds, and adaptive pools at empty and one-cell sizes.

Each case runs in torch too. Where torch raises, retrograd raises an error of the hierarchy
(API.md section 7) naming the op, or Python's own class where torch's is Python's conversion
error (``int(nan)``); where torch's is a ``TypeError``, retrograd's is one too, so that
Python's fallbacks (``bytes``, ``operator.index`` callers) take the same path. Where torch
gives a value, retrograd gives the same. After each refusal the tensors involved still work.
Defects found are in ``test_reliability_regressions_21.py``."""

from __future__ import annotations

import contextlib
import copy
import math
import operator
import pickle

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812

#: Past any 48-bit address space: a result of [HUGE, HUGE] float32 is refused on every OS.
HUGE = 10**8


def _value(x):
    """A comparable form of a result: arrays for tensors, tuples for sequences."""
    if isinstance(x, torch.Tensor | rg.Tensor):
        values = np.asarray(x.detach().numpy(), np.float64).ravel()
        return ("tensor", tuple(x.shape), tuple(str(v) for v in values))  # NaN equals NaN
    if isinstance(x, tuple | list):
        return tuple(_value(v) for v in x)
    if isinstance(x, float | complex):
        return str(x)  # NaN equals NaN
    return x


def _same(run, name: str) -> None:
    """Run ``run(lib)`` in torch and in retrograd; they agree as the module docstring says."""
    try:
        theirs = ("ok", _value(run(torch)))
    except Exception as error:  # torch's class decides what ours must be
        theirs = ("error", error)
    try:
        ours = ("ok", _value(run(rg)))
    except Exception as error:
        ours = ("error", error)
    if theirs[0] == "ok":
        assert ours == theirs, f"{name}: ours {ours!r}, torch's {theirs!r}"
        return
    assert ours[0] == "error", f"{name}: torch raises {theirs[1]!r}, ours gives {ours[1]!r}"
    error, their_error = ours[1], theirs[1]
    if not isinstance(error, rg.RetrogradError):
        assert type(error) is type(their_error), f"{name}: bare {error!r} (torch {their_error!r})"
    if isinstance(their_error, TypeError):
        assert isinstance(error, TypeError), f"{name}: {error!r} is no TypeError as torch's"


# == the Python protocols of a tensor ============================================================
_TENSORS = {
    "0-d float": lambda lib: lib.tensor(1.5),
    "0-d int": lambda lib: lib.tensor(3),
    "0-d bool": lambda lib: lib.tensor(True),
    "0-d nan": lambda lib: lib.tensor(float("nan")),
    "0-d inf": lambda lib: lib.tensor(float("-inf")),
    "[1] int": lambda lib: lib.tensor([2]),
    "[1, 1] float": lambda lib: lib.tensor([[0.0]]),
    "[2] int": lambda lib: lib.tensor([1, 2]),
    "[2] float": lambda lib: lib.tensor([1.0, 2.0]),
    "[0]": lambda lib: lib.tensor([]),
    "[2, 0]": lambda lib: lib.zeros(2, 0),
    "requires grad": lambda lib: lib.tensor(2.0, requires_grad=True),
}
_PROTOCOLS = {
    "bool": bool,
    "int": int,
    "float": float,
    "complex": complex,
    "index": operator.index,
    "len": len,
    "list": list,
    "reversed": lambda t: list(reversed(t)),
    "bytes": bytes,
    "range": lambda t: list(range(t)),
    "list subscript": lambda t: ["a", "b", "c", "d"][t],
    "format .2f": lambda t: f"{t:.2f}",
    "format empty": lambda t: len(f"{t}") > 0,
    "contains 1": lambda t: 1 in t,
    "hash is id": lambda t: hash(t) == id(t) or hash(t) == hash(id(t)) or isinstance(hash(t), int),
    "abs": abs,
    "neg": operator.neg,
    "invert": operator.invert,
    "round": round,
    "divmod": lambda t: divmod(t, 2),
    "tolist": lambda t: t.tolist(),
    "item": lambda t: t.item(),
    "numpy shape": lambda t: t.detach().numpy().shape,
    "asarray dtype": lambda t: np.asarray(t.detach(), dtype=np.float64).tolist(),
    "deepcopy": lambda t: copy.deepcopy(t),
    "pickle": lambda t: pickle.loads(pickle.dumps(t.detach())),
}


@pytest.mark.parametrize("protocol", list(_PROTOCOLS))
@pytest.mark.parametrize("tensor", list(_TENSORS))
def test_python_protocols_as_torch(tensor, protocol):
    make, use = _TENSORS[tensor], _PROTOCOLS[protocol]
    _same(lambda lib: use(make(lib)), f"{protocol} of {tensor}")


def test_a_tensor_works_after_every_refused_protocol():
    for make in _TENSORS.values():
        t = make(rg)
        for use in _PROTOCOLS.values():
            with contextlib.suppress(Exception):  # refusals are the point; the state is checked
                use(t)
        assert _value(t.detach() * 2) == _value(make(torch).detach() * 2)


# == autograd misuse =============================================================================
def _leaf(lib, values=(1.0, 2.0)):
    return lib.tensor(list(values), requires_grad=True)


def _grad_of(lib, x, result):
    """``x``'s gradient after ``result`` (ours: the Gradients value; torch's: ``x.grad``)."""
    return x.grad(result) if lib is rg else x.grad


def _backward(lib, loss, x, **options):
    return _grad_of(lib, x, loss.backward(**options))


_AUTOGRAD = {
    "twice": lambda lib: [(y := (_leaf(lib) ** 2).sum()).backward(), y.backward()],
    "twice retained": lambda lib: (
        _backward(lib, (y := ((x := _leaf(lib)) ** 2).sum()), x, retain_graph=True)
        and _backward(lib, y, x)
    ),
    "grad of wrong shape": lambda lib: (_leaf(lib) * 2).backward(lib.ones(3)),
    "inputs empty": lambda lib: (_leaf(lib) * 2).sum().backward(inputs=[]),
    "inputs untracked": lambda lib: (_leaf(lib) * lib.ones(2)).sum().backward(inputs=[lib.ones(2)]),
    "inputs a leaf": lambda lib: _backward(
        lib, ((x := _leaf(lib)) * _leaf(lib, (3.0, 4.0))).sum(), x, inputs=[x]
    ),
    "inputs a str": lambda lib: (_leaf(lib) * 2).sum().backward(inputs="x"),
    "inputs an int": lambda lib: (_leaf(lib) * 2).sum().backward(inputs=[1]),
    "under no_grad": lambda lib: _no_grad_loss(lib).backward(),
    "int leaf": lambda lib: lib.tensor([1, 2], requires_grad=True),
    "bool leaf": lambda lib: lib.tensor([True], requires_grad=True),
    "in-place on a leaf": lambda lib: _leaf(lib).add_(1),
    "leaf flag of a result": lambda lib: (_leaf(lib) * 2).requires_grad_(False),
    "grad, no inputs": lambda lib: lib.autograd.grad((_leaf(lib) * 2).sum(), []),
    "grad of an unused": lambda lib: lib.autograd.grad((_leaf(lib) * 2).sum(), [_leaf(lib)]),
    "grad of a result": lambda lib: lib.autograd.grad(((h := _leaf(lib) * 3) * 2).sum(), [h]),
    "grad_outputs count": lambda lib: lib.autograd.grad(
        [(x := _leaf(lib)) * 2, x * 3], [x], grad_outputs=[lib.ones(2)]
    ),
    "grad_outputs shape": lambda lib: lib.autograd.grad(
        (x := _leaf(lib)) * 2, [x], grad_outputs=[lib.ones(3)]
    ),
    "grad of a str": lambda lib: lib.autograd.grad("y", [_leaf(lib)]),
    "grad of untracked": lambda lib: lib.autograd.grad(lib.ones(2).sum(), [_leaf(lib)]),
    "backward, inputs empty": lambda lib: lib.autograd.backward(
        [(_leaf(lib) * 2).sum()], inputs=[]
    ),
    "backward, grad count": lambda lib: lib.autograd.backward(
        [(x := _leaf(lib)) * 2, x * 3], [lib.ones(2)]
    ),
    "double grad": lambda lib: lib.autograd.grad(
        lib.autograd.grad(((x := _leaf(lib)) ** 3).sum(), [x], create_graph=True)[0].sum(), [x]
    ),
    "jacobian of a non-callable": lambda lib: lib.autograd.functional.jacobian(3, lib.ones(2)),
    "jacobian to a list": lambda lib: lib.autograd.functional.jacobian(lambda x: [x], lib.ones(2)),
    "hessian non-scalar": lambda lib: lib.autograd.functional.hessian(lambda x: x * 2, lib.ones(2)),
    "vjp wrong v": lambda lib: lib.autograd.functional.vjp(
        lambda x: x * 2, lib.ones(2), lib.ones(3)
    ),
    "jvp wrong v": lambda lib: lib.autograd.functional.jvp(
        lambda x: x * 2, lib.ones(2), lib.ones(3)
    ),
    "vhp without v": lambda lib: lib.autograd.functional.vhp(lambda x: (x * x).sum(), lib.ones(2)),
    "jacobian of ints": lambda lib: lib.autograd.functional.jacobian(
        lambda x: x * 2, lib.ones(2, dtype=lib.int64)
    ),
}


def _no_grad_loss(lib):
    x = _leaf(lib)
    with lib.no_grad():
        return (x * 2).sum()


@pytest.mark.parametrize("case", list(_AUTOGRAD))
def test_autograd_misuse_as_torch(case):
    _same(_AUTOGRAD[case], case)


def test_a_graph_survives_every_refused_backward():
    x = rg.tensor([1.0, 2.0]).require_grad()
    loss = (x * x * rg.tensor([3.0, 5.0])).sum()
    for bad in (
        {"inputs": []},
        {"inputs": [rg.ones(2)]},
        {"inputs": "x"},
        {"grad": rg.ones(3)},
        {"inputs": [x, 3]},
    ):
        with pytest.raises(rg.RetrogradError):
            loss.backward(**bad)
    assert x.grad(loss.backward()).tolist() == [6.0, 20.0]


# == sizes given as 0-d int tensors ==============================================================
_SIZES = {
    "zeros": lambda lib, n: lib.zeros(n, 2),
    "new_zeros": lambda lib, n: lib.ones(1).new_zeros(n),
    "new_ones of a tuple": lambda lib, n: lib.ones(1).new_ones((n, 1)),
    "reshape": lambda lib, n: lib.ones(6).reshape(n, -1),
    "reshape of a tuple": lambda lib, n: lib.ones(6).reshape((2, n)),
    "view": lambda lib, n: lib.ones(6).view(n, 2),
    "view of one": lambda lib, n: lib.ones(3).view(n),
    "expand": lambda lib, n: lib.ones(1).expand(n),
    "expand of two": lambda lib, n: lib.ones(1, 1).expand(n, n),
    "repeat": lambda lib, n: lib.ones(1).repeat(n),
    "narrow": lambda lib, n: lib.ones(5).narrow(0, 0, n),
    "unflatten": lambda lib, n: lib.ones(6).unflatten(0, (n, 2)),
    "arange": lambda lib, n: lib.arange(n),
    "full": lambda lib, n: lib.full((n,), 1.0),
    "list index": lambda lib, n: ["a", "b", "c", "d"][n],
}


@pytest.mark.parametrize("case", list(_SIZES))
def test_sizes_given_as_int_tensors_as_torch(case):
    # torch takes a 0-d int tensor wherever it takes an int size (its __index__):
    # ``x.view(n, -1)`` with ``n = lengths.max()``
    _same(lambda lib: _SIZES[case](lib, lib.tensor(3)), case)


# == results no machine holds ====================================================================
def _column(lib):
    """[HUGE, 1] ones, a view of one element (nothing allocated)."""
    return lib.ones(1, 1).expand(HUGE, 1)


def _row(lib):
    return lib.ones(1, 1).expand(1, HUGE)


_HUGE_CALLS = {
    "add": lambda lib: _column(lib) + _row(lib),
    "sub of a scalar product": lambda lib: lib.ones(1, 1).mul(2.0).expand(HUGE, 1) - _row(lib),
    "mul": lambda lib: _column(lib) * _row(lib),
    "div": lambda lib: _column(lib) / _row(lib),
    "pow": lambda lib: _column(lib) ** _row(lib),
    "maximum": lambda lib: lib.maximum(_column(lib), _row(lib)),
    "atan2": lambda lib: lib.atan2(_column(lib), _row(lib)),
    "gt": lambda lib: _column(lib) > _row(lib),
    "eq": lambda lib: _column(lib) == _row(lib),
    "where": lambda lib: lib.where((lib.ones(1, 1) > 0).expand(HUGE, 1), _row(lib), 0.0),
    "matmul": lambda lib: _column(lib) @ _row(lib),
    "outer": lambda lib: lib.outer(_column(lib)[:, 0], _row(lib)[0]),
    "exp of a view": lambda lib: lib.ones(1, 1).expand(HUGE, HUGE).exp(),
    "relu of a view": lambda lib: lib.ones(1, 1).expand(HUGE, HUGE).relu(),
    "sigmoid of a view": lambda lib: lib.ones(1, 1).expand(HUGE, HUGE).sigmoid(),
    "cat of views": lambda lib: lib.cat([lib.ones(1, 1).expand(HUGE, HUGE)] * 2),
    "zeros": lambda lib: lib.zeros(HUGE, HUGE),
    "arange": lambda lib: lib.arange(HUGE**2),
    "eye": lambda lib: lib.eye(HUGE),
    "linear": lambda lib: lib.nn.Linear(HUGE, HUGE),
    "embedding": lambda lib: lib.nn.Embedding(HUGE, HUGE),
    "interpolate": lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2), size=(10**7, 10**7)
    ),
    "pad": lambda lib: lib.nn.functional.pad(lib.ones(1, 1, 2, 2), (10**7,) * 4),
}


@pytest.mark.parametrize("case", list(_HUGE_CALLS))
def test_results_no_machine_holds_are_out_of_memory_at_once(case):
    call = _HUGE_CALLS[case]
    with pytest.raises((RuntimeError, MemoryError)):
        call(torch)
    with pytest.raises(rg.OutOfMemoryError) as caught:
        call(rg)
    text = str(caught.value)
    assert text.splitlines()[0] == text and ":" in text, text  # one line, naming the op
    x = rg.ones(2, 1).require_grad()
    assert x.grad((x + rg.ones(1, 2)).sum().backward()).tolist() == [[2.0], [2.0]]


# == adaptive pools at empty and one-cell sizes ==================================================
_POOL_SHAPES = {
    1: [(1, 3, 0), (0, 3, 4), (1, 0, 4), (3, 0), (2, 5)],
    2: [(1, 3, 0, 2), (1, 3, 2, 0), (0, 2, 3, 3), (2, 0, 3), (1, 1, 3, 3)],
    3: [(1, 1, 0, 2, 2), (0, 1, 2, 2, 2), (1, 1, 2, 3, 2)],
}
_POOL_SIZES = {1: [0, 1, 2], 2: [0, 1, 2, (1, 2), (2, 1), (0, 2)], 3: [0, 1, 2]}


def _pool_cases():
    for spatial, shapes in _POOL_SHAPES.items():
        for kind in ("avg", "max"):
            for shape in shapes:
                for size in _POOL_SIZES[spatial]:
                    if kind == "max" and spatial == 1 and shape[1:2] == (0,) and len(shape) == 3:
                        continue  # torch's max pool alone refuses zero channels (ours: empty)
                    yield f"adaptive_{kind}_pool{spatial}d", shape, size


@pytest.mark.parametrize("fn, shape, size", list(_pool_cases()))
def test_adaptive_pools_at_edge_sizes_as_torch(fn, shape, size):
    values = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)

    def run(lib):
        functional = torch.nn.functional if lib is torch else F
        x = lib.tensor(values)
        return getattr(functional, fn)(x, size)

    _same(run, f"{fn}({list(shape)}, {size})")
