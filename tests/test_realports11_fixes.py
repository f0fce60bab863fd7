"""Regression tests of the defects the real ports of round 11 (``tests/test_real_ports_54.py``,
``tests/test_real_ports_55.py``) found, each against torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import AutodiffError, DTypeError, InvalidArgumentError, ShapeError


def _binarize(x):
    return 0 if x < 0.5 else 1


@pytest.mark.parametrize(
    "values, dtype, f",
    [
        ([[0.2, 0.7], [0.9, -1.0]], "float32", _binarize),
        ([1, 2, 3, -7], "int64", lambda x: x / 2),  # truncated into the int tensor, as torch's
        ([True, False], "bool", lambda x: not x),
        ([[0.5, 2.0]], "float64", lambda x: x**3 - 1),
        (1.25, "float32", lambda x: x * 4),
    ],
)
def test_apply_is_torchs(values, dtype, f):
    theirs = torch.tensor(values, dtype=getattr(torch, dtype))
    ours = rg.tensor(values, dtype=getattr(rg, dtype))
    assert ours.apply_(f) is ours
    theirs.apply_(f)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_apply_writes_through_a_view_and_map_broadcasts():
    for lib in (torch, rg):
        a = lib.tensor([[1.0, 2.0], [3.0, 4.0]])
        a[0].apply_(lambda x: -x)
        a.map_(lib.tensor([10.0, 20.0]), lambda x, y: x * y + 1)
        if lib is torch:
            theirs = a.numpy()
        else:
            np.testing.assert_array_equal(a.numpy(), theirs)


def test_apply_refuses_what_torch_refuses():
    with pytest.raises(AutodiffError, match=r"apply_.*requires grad"):
        rg.ones(2, requires_grad=True).apply_(abs)
    with pytest.raises(AutodiffError, match=r"map_.*requires grad"):
        rg.ones(2).map_(rg.ones(2, requires_grad=True), max)
    with pytest.raises(DTypeError, match="apply_: the callable must return a number"):
        rg.ones(2).apply_(lambda x: "a")
    with pytest.raises(DTypeError, match="apply_: expected a callable"):
        rg.ones(2).apply_(3)


_LEGACY = [
    dict(size_average=False),
    dict(reduce=False),
    dict(size_average=True, reduce=True),
    dict(size_average=False, reduction="none"),  # the legacy arguments win, as torch's
    dict(size_average=0, reduce=1),
]


@pytest.mark.parametrize("legacy", _LEGACY)
@pytest.mark.parametrize(
    "name, args",
    [
        ("MSELoss", ()),
        ("L1Loss", ()),
        ("KLDivLoss", ()),
        ("BCEWithLogitsLoss", ()),
        ("SmoothL1Loss", ()),
        ("CrossEntropyLoss", ()),
        ("NLLLoss", ()),
        ("MarginRankingLoss", ()),
        ("MultiMarginLoss", ()),
        ("PoissonNLLLoss", ()),
    ],
)
def test_legacy_reduction_arguments_are_read_into_reduction(name, args, legacy):
    """torch's ``_Loss`` reads ``size_average``/``reduce`` once, into ``reduction``: the
    attribute says what the module computes, and setting it afterwards is what counts (a
    module made with ``size_average=False`` and then given ``reduction = 'none'`` returns the
    elementwise losses)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3))
    y = rng.uniform(size=(4, 3))
    inputs = {
        "CrossEntropyLoss": (x, np.array([0, 2, 1, 1])),
        "NLLLoss": (x, np.array([0, 2, 1, 1])),
        "MarginRankingLoss": (x[:, 0], x[:, 1], np.sign(x[:, 2])),
        "MultiMarginLoss": (x, np.array([0, 2, 1, 1])),
    }.get(name, (x, y))
    results = []
    for lib in (torch, rg):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = getattr(lib.nn, name)(*args, **legacy)
        tensors = [lib.tensor(a) for a in inputs]
        reduction = module.reduction
        first = module(*tensors)
        module.reduction = "none"
        second = module(*tensors)
        results.append((reduction, first.detach().numpy(), second.detach().numpy()))
    (theirs_r, theirs_1, theirs_2), (ours_r, ours_1, ours_2) = results
    assert ours_r == theirs_r
    np.testing.assert_allclose(ours_1, theirs_1, rtol=1e-12)
    np.testing.assert_allclose(ours_2, theirs_2, rtol=1e-12)


_SCALE_FIRST = [
    ("add", lambda t, a, b: t.add(-0.5, a)),
    ("add_", lambda t, a, b: t.clone().add_(-0.5, a)),
    ("sub", lambda t, a, b: t.sub(2, a)),
    ("sub_", lambda t, a, b: t.clone().sub_(2, a)),
    ("addcmul", lambda t, a, b: t.addcmul(0.3, a, b)),
    ("addcmul_", lambda t, a, b: t.clone().addcmul_(0.3, a, b)),
    ("addcdiv", lambda t, a, b: t.addcdiv(-0.7, a, b)),
    ("addcdiv_", lambda t, a, b: t.clone().addcdiv_(-0.7, a, b)),
    ("torch.add", lambda t, a, b: _lib(t).add(t, 3, a)),
    ("torch.addcmul", lambda t, a, b: _lib(t).addcmul(t, 0.3, a, b)),
    ("torch.addcdiv", lambda t, a, b: _lib(t).addcdiv(t, 0.3, a, b)),
    ("number other", lambda t, a, b: t.add(2, 3)),
]


def _lib(t):
    return torch if isinstance(t, torch.Tensor) else rg


@pytest.mark.parametrize("name, f", _SCALE_FIRST, ids=[n for n, _ in _SCALE_FIRST])
def test_deprecated_scale_first_overloads_are_torchs(name, f):
    """torch 2 still takes ``add(alpha, other)``, ``sub(alpha, other)``, ``addcmul(value,
    tensor1, tensor2)`` and ``addcdiv(value, tensor1, tensor2)`` (with a warning), as pre-1.5
    optimizers call them (``p.data.add_(-group['lr'], d_p)``); values and gradients."""
    rng = np.random.default_rng(4)
    t, a, b = rng.standard_normal((3, 2, 3))
    b = np.abs(b) + 0.5
    results = []
    for lib in (torch, rg):
        xs = [lib.tensor(v, requires_grad=True) for v in (t, a, b)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = f(xs[0] * 1, xs[1] * 1, xs[2] * 1)
        if lib is rg:  # (torch warns once a process)
            assert any("deprecated" in str(w.message) for w in caught)
        if lib is torch:
            out.sum().backward()
            grads = [x.grad for x in xs]
        else:
            got = out.sum().backward()
            grads = [x.grad(got) for x in xs]
        results.append((out.detach().numpy(), [None if g is None else g.numpy() for g in grads]))
    (theirs, their_grads), (ours, our_grads) = results
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    for mine, reference in zip(our_grads, their_grads):
        assert (mine is None) == (reference is None)
        if reference is not None:
            np.testing.assert_allclose(mine, reference, rtol=1e-12)


def test_deprecated_overloads_refuse_what_torch_refuses():
    a = rg.ones(2)
    with pytest.raises(DTypeError, match=r"add: invalid arguments \(Tensor, int\)"):
        a.add(a, 2)
    with pytest.raises(DTypeError, match="alpha given twice"):
        a.add(2, a, alpha=3)
    with pytest.raises(DTypeError, match="addcmul: invalid arguments"):
        a.addcmul(a, a, a)


def test_optim_optimizer_module_and_required():
    """``from torch.optim.optimizer import Optimizer, required`` (the import of optimizers
    written as torch's, RAdam's among them) failed: there was no ``optim.optimizer`` module.
    A ``required`` default must be given by each group, as torch checks."""
    from importlib import import_module

    results = []
    for lib in (torch, rg):
        module = import_module(f"{lib.__name__}.optim.optimizer")
        assert module.Optimizer is lib.optim.Optimizer

        class MySGD(module.Optimizer):
            def __init__(self, params, lr=module.required, momentum=0):
                super().__init__(params, dict(lr=lr, momentum=momentum))

        w, v = lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(2))
        with pytest.raises(ValueError, match="required optimization parameter lr"):
            MySGD([w])
        with pytest.raises(ValueError, match="required optimization parameter lr"):
            MySGD([{"params": [w], "lr": 0.1}, {"params": [v]}])
        grouped = MySGD([{"params": [w], "lr": 0.1}, {"params": [v], "lr": 0.3}])
        results.append(([g["lr"] for g in grouped.param_groups], MySGD([w], lr=0.2).defaults))
        assert repr(module.required) == "<required parameter>"
    assert results[0] == results[1]


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((0, 4), {}),
        ((1, 2, 0.25), {}),
        ((5, 1, -2), {}),
        ((0, 1, 0.3), {}),
        ((0, 4), {"dtype": "int64"}),
        ((-1.5, 2), {"dtype": "float64"}),
    ],
)
def test_range_is_torchs_deprecated_inclusive_range(args, kwargs):
    """``torch.range`` (deprecated, still in torch 2: ``end`` included, float by default) did
    not exist."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.range(*args, **{k: getattr(torch, v) for k, v in kwargs.items()})
        with pytest.warns(UserWarning, match="torch.range is deprecated"):
            ours = rg.range(*args, **{k: getattr(rg, v) for k, v in kwargs.items()})
    assert ours.dtype == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_range_refuses_what_torch_refuses():
    with pytest.raises(ShapeError, match="range: step must not be zero"):
        rg.range(0, 1, 0)
    with pytest.raises(InvalidArgumentError, match="inconsistent with the sign of step"):
        rg.range(0, 1, -1)


@pytest.mark.parametrize(
    "shape, new",
    [((2, 3), (3, 2)), ((2, 3), (4,)), ((2, 3), (2, 1)), ((6,), (6,)), ((2, 2), (0,))],
)
def test_resize_keeps_the_flat_elements_as_torchs(shape, new):
    """``resize_``/``resize_as_`` did not exist (old code's ``x.resize_as_(y)``)."""
    results = []
    for lib in (torch, rg):
        a = lib.arange(float(np.prod(shape))).reshape(shape).clone()
        assert a.resize_(*new) is a
        b = lib.arange(3.0)
        b.resize_as_(lib.zeros(new))
        results.append((tuple(a.shape), a.numpy().copy(), tuple(b.shape), b.numpy().ravel()[:3]))
    (ts, ta, tbs, tb), (os_, oa, obs, ob) = results
    assert (os_, obs) == (ts, tbs)
    np.testing.assert_array_equal(oa, ta)
    np.testing.assert_array_equal(ob[: min(3, ob.size)], tb[: min(3, tb.size)])


def test_resize_grows_with_the_old_elements_first_and_refuses_what_it_cannot():
    a = rg.tensor([1.0, 2.0, 3.0])
    a.resize_(2, 3)
    np.testing.assert_array_equal(a.numpy()[0], [1.0, 2.0, 3.0])  # torch's: the rest unset
    with pytest.raises(AutodiffError, match="resize_: cannot resize tensors that require grad"):
        rg.ones(2, requires_grad=True).resize_(3)
    base = rg.zeros(2, 3)
    with pytest.raises(InvalidArgumentError, match=r"resize_: .* is a view or has views"):
        base[0].resize_(5)
    with pytest.raises(ShapeError, match="resize_: negative dimension"):
        rg.zeros(2).resize_(-1)


_SCALES_FIRST = [
    ("addmm", lambda lib, m, a, v, b: m.addmm(0.5, a, a)),
    ("addmm beta alpha", lambda lib, m, a, v, b: m.addmm(0.5, 2, a, a)),
    ("addmm_", lambda lib, m, a, v, b: m.clone().addmm_(-0.5, 3, a, a)),
    ("addmv", lambda lib, m, a, v, b: v.addmv(0.5, a, v)),
    ("addr", lambda lib, m, a, v, b: m.addr(0.5, 3, v, v)),
    ("baddbmm", lambda lib, m, a, v, b: b.baddbmm(0.5, b, b)),
    ("addbmm", lambda lib, m, a, v, b: m.addbmm(0.5, 2, b, b)),
]


@pytest.mark.parametrize("name, f", _SCALES_FIRST, ids=[n for n, _ in _SCALES_FIRST])
def test_deprecated_scales_first_products_are_torchs(name, f):
    """torch 2 still takes ``addmm(beta, [alpha,] mat1, mat2)`` and the like (with a
    warning); values and gradients against torch."""
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s) for s in ((2, 2), (2, 2), (2,), (1, 2, 2))]
    results = []
    for lib in (torch, rg):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = f(lib, *[x * 1 for x in xs])
        if lib is torch:
            out.sum().backward()
            grads = [x.grad for x in xs]
        else:
            got = out.sum().backward()
            grads = [x.grad(got) for x in xs]
        results.append((out.detach().numpy(), [g is None or g.numpy() for g in grads]))
    (theirs, their_grads), (ours, our_grads) = results
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    for mine, reference in zip(our_grads, their_grads):
        np.testing.assert_allclose(mine, reference, rtol=1e-12)
    with pytest.raises(DTypeError, match="beta or alpha given twice"):
        rg.ones(2, 2).addmm(0.5, rg.ones(2, 2), rg.ones(2, 2), beta=2)


def test_a_buffer_written_into_optimizer_state_is_taken():
    """Lookahead's ``optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p.data)`` put a
    tensor of the parameter's (autodiff) backend where the step keeps inner-backend buffers:
    the next step failed with an AttributeError far from the line. It is taken (its values)."""
    results = []
    for lib in (torch, rg):
        w = lib.nn.Parameter(lib.tensor([1.0, -2.0, 3.0]))
        optimizer = lib.optim.SGD([w], lr=0.1, momentum=0.9)
        for step in range(3):
            optimizer.zero_grad()
            loss = (w * w).sum()
            if lib is torch:
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
            if step == 1:
                optimizer.state[w]["momentum_buffer"] = lib.full_like(w.data, 0.5)
        results.append((w.detach().numpy().copy(), optimizer.state[w]["momentum_buffer"].numpy()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)
