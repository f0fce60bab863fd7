"""Random ``torch.func`` programs against torch 2.13 (round 59): what round 41's generators
(tests/test_fuzz41_func.py) do not draw.

- ``vmap`` of op chains in which the mapped value meets a captured tensor on either side
  (``c * a``, ``W @ a``, ``where``, ``cat``, ``einsum``, ``gather``, ``conv1d``), ended by a
  tail that torch refuses or runs: ``.item()``, data-dependent ``if``, ``tolist()``,
  ``nonzero()``, a boolean mask of the batch, an in-place write into a captured or new
  tensor (refused) or into the mapped one or a tensor made like it (allowed), a random op
  under ``randomness="error"``;
- the dtypes of ``jacrev``/``jacfwd``/``hessian``/``vjp``/``jvp`` across float32 and float64
  inputs and outputs, int outputs included, and ``has_aux`` with an aux that holds other
  values than tensors.

Each draw must agree with torch on raising or not (a retrograd error, of the class torch's
maps to: ``RuntimeError`` gives ``rg.AutodiffError`` for vmap's refusals), and otherwise on
values, shapes and dtypes. Draws come from seeded generators: the same on every run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.func as tfunc

import retrograd as rg
from retrograd import func as rfunc

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

FEATURES = 4
CONSTANT = np.random.default_rng(59).uniform(-1.0, 1.0, (FEATURES,))
MATRIX = np.random.default_rng(590).uniform(-0.7, 0.7, (FEATURES, FEATURES))


def lib_of(x):
    return torch if isinstance(x, torch.Tensor) else rg


def const(like, array):
    if isinstance(like, torch.Tensor):
        return torch.tensor(array, dtype=like.dtype)
    return rg.tensor(array, dtype=like.dtype)


# ops of the element ``a`` (shape (FEATURES,)) that keep its shape; the captured constant
# stands first where it can, so that the result is the batch's through its second operand
CHAINS = {
    "captured_times": lambda a: const(a, CONSTANT) * a,
    "captured_plus": lambda a: const(a, CONSTANT) + a,
    "matrix_at": lambda a: const(a, MATRIX) @ a,
    "where": lambda a: lib_of(a).where(const(a, CONSTANT) > 0, const(a, CONSTANT), a),
    "cat_half": lambda a: lib_of(a).cat([const(a, CONSTANT)[:2], a[:2]]),
    "einsum": lambda a: lib_of(a).einsum("ij,j->i", const(a, MATRIX), a),
    "gather": lambda a: const(a, CONSTANT).gather(0, a.argsort()),
    "softmax": lambda a: lib_of(a).nn.functional.softmax(a, dim=0),
    "conv1d": lambda a: (
        lib_of(a)
        .nn.functional.conv1d(
            a.reshape(1, 1, FEATURES), const(a, CONSTANT[:3]).reshape(1, 1, 3), padding=1
        )
        .reshape(FEATURES)
    ),
    "maximum": lambda a: lib_of(a).maximum(const(a, CONSTANT), a),
    "tanh": lambda a: a.tanh(),
}


def _inplace_captured(v):
    target = const(v, CONSTANT).clone()
    target.add_(v)  # the captured tensor is not of the batch: torch refuses
    return target


def _inplace_mapped(v):
    out = v * 1.0
    out.mul_(const(v, CONSTANT))  # the mapped value written with a constant: allowed
    return out


def _branch(v):
    if v.sum() > 0:  # data-dependent control flow: torch refuses
        return v
    return -v


def _setitem_new(v):
    out = lib_of(v).zeros(2, FEATURES, dtype=v.dtype)
    out[1] = v  # a new tensor is not of the batch: torch refuses
    return out


TAILS = {
    "returned": lambda v: v,
    "item": lambda v: v * v.sum().item(),
    "if": _branch,
    "tolist": lambda v: const(v, np.asarray(v.tolist())),
    "nonzero": lambda v: v.nonzero(),
    "mask_of_batch": lambda v: const(v, CONSTANT)[v > 0],
    "mask_constant": lambda v: v[const(v, CONSTANT) > 0],
    "inplace_captured": _inplace_captured,
    "inplace_mapped": _inplace_mapped,
    "random": lambda v: v + lib_of(v).rand_like(v),
    "argwhere": lambda v: (v * 0 + 1).argwhere(),
    "zeros_like_add": lambda v: lib_of(v).zeros_like(v).add_(v),  # of the batch: allowed
    "setitem_new": _setitem_new,
}


def outcome(call):
    try:
        return True, call()
    except Exception as error:  # compared with torch's raising below
        return False, error


def assert_same(ours, theirs, where):
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, rg.Tensor), f"{where}: {type(ours).__name__}"
        assert tuple(ours.shape) == tuple(theirs.shape), f"{where}: {ours.shape} {theirs.shape}"
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1], where
        np.testing.assert_allclose(
            np.asarray(ours.detach().tolist(), dtype=np.float64).reshape(theirs.shape),
            theirs.detach().double().numpy(),
            rtol=1e-6,
            atol=1e-7,
            err_msg=where,
        )
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and set(ours) == set(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, tuple | list):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), where
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{k}]")
    else:
        assert ours == pytest.approx(theirs), where


def agree(ours_call, theirs_call, where):
    ok_theirs, theirs = outcome(theirs_call)
    ok_ours, ours = outcome(ours_call)
    if ok_theirs:
        assert ok_ours, f"{where}: torch returns, retrograd raises {type(ours).__name__}: {ours}"
        assert_same(ours, theirs, where)
    else:
        assert not ok_ours, f"{where}: torch raises {type(theirs).__name__}: {theirs}"
        assert isinstance(ours, rg.RetrogradError), f"{where}: {type(ours).__name__}: {ours}"
        if isinstance(theirs, RuntimeError) and "vmap" in str(theirs):
            assert isinstance(ours, rg.AutodiffError), f"{where}: {type(ours).__name__}: {ours}"


@pytest.mark.parametrize("seed", range(6))
def test_vmap_of_chains_with_captured_operands_and_refused_tails_matches_torch(seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    for draw in range(12):
        names = list(rng.choice(sorted(CHAINS), size=int(rng.integers(1, 4))))
        tail = str(rng.choice(sorted(TAILS)))
        in_dim = int(rng.choice([0, 1, -1]))
        out_dim = int(rng.choice([0, 1, -1]))
        chunk_size = [None, 1, 2][int(rng.integers(3))]
        batch = int(rng.integers(1, 4))
        shape = (batch, FEATURES) if in_dim == 0 else (FEATURES, batch)
        data = rng.uniform(-1.0, 1.0, shape)

        def program(a, names=names, tail=tail):
            for name in names:
                a = CHAINS[name](a)
            return TAILS[tail](a)

        where = f"seed {seed} draw {draw}: {names} then {tail}, in_dims={in_dim}"

        if tail in ("nonzero", "argwhere"):  # each element's count: a shape to compare
            out_dim = 0

        def run(func, x, in_dim=in_dim, out_dim=out_dim, chunk_size=chunk_size):
            return func.vmap(program, in_dims=in_dim, out_dims=out_dim, chunk_size=chunk_size)(x)

        agree(
            lambda run=run, data=data: run(rfunc, rg.tensor(data, dtype=rg.float64)),
            lambda run=run, data=data: run(tfunc, torch.tensor(data)),
            where,
        )


TRANSFORM_FUNCTIONS = {
    "sin_sum": lambda a, out: (a.sin() * 2).to(out).sum(0),
    "softmax": lambda a, out: a.to(out).softmax(-1),
    "square": lambda a, out: (a * a).to(out),
    "sign": lambda a, out: (a > 0).to(out),
}


@pytest.mark.parametrize("seed", range(3))
def test_jacobian_dtypes_and_int_outputs_match_torch(seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(100 + seed)
    for draw in range(8):
        name = str(rng.choice(sorted(TRANSFORM_FUNCTIONS)))
        in_dtype = str(rng.choice(["float32", "float64"]))
        out_dtype = str(rng.choice(["float32", "float64", "int64"]))
        transform = str(rng.choice(["jacrev", "jacfwd", "vjp", "jvp"]))
        data = rng.uniform(-1.0, 1.0, (2, 3))
        f = TRANSFORM_FUNCTIONS[name]
        where = f"seed {seed} draw {draw}: {transform} of {name}, {in_dtype} -> {out_dtype}"

        def run(lib, func, transform=transform, f=f, data=data, in_dtype=in_dtype, to=out_dtype):
            x = lib.tensor(data, dtype=getattr(lib, in_dtype))
            out = getattr(lib, to)
            g = lambda a: f(a, out)  # noqa: E731
            if transform == "vjp":
                value, pull = func.vjp(g, x)
                return value, pull(value * 0 + 1)
            if transform == "jvp":
                return func.jvp(g, (x,), (x * 0 + 1,))
            return getattr(func, transform)(g)(x)

        agree(lambda run=run: run(rg, rfunc), lambda run=run: run(torch, tfunc), where)


AUXES = {
    "tensor": lambda a: a.cos(),
    "dict": lambda a: {"k": a * 2},
    "number": lambda a: 3.0,
    "none": lambda a: None,
    "tuple_with_int": lambda a: (a, 2),
    "list_with_none": lambda a: [a, None],
}


@pytest.mark.parametrize("aux", sorted(AUXES))
def test_has_aux_takes_tensors_only_as_torch(aux):
    data = np.random.default_rng(7).uniform(-1.0, 1.0, (3,))
    make = AUXES[aux]
    calls = {
        "grad": lambda func, x: func.grad(lambda a: (a.sum(), make(a)), has_aux=True)(x),
        "vjp": lambda func, x: func.vjp(lambda a: (a * 2, make(a)), x, has_aux=True)[2],
        "jvp": lambda func, x: func.jvp(lambda a: (a * 2, make(a)), (x,), (x,), has_aux=True),
        "jacrev": lambda func, x: func.jacrev(lambda a: (a * 2, make(a)), has_aux=True)(x),
        "jacfwd": lambda func, x: func.jacfwd(lambda a: (a * 2, make(a)), has_aux=True)(x),
    }
    for name, call in calls.items():
        agree(
            lambda call=call: call(rfunc, rg.tensor(data, dtype=rg.float64)),
            lambda call=call: call(tfunc, torch.tensor(data)),
            f"{name} with aux {aux}",
        )
