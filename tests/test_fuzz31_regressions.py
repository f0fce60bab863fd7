"""Regressions found by round 31 of the differential fuzzer (``tests/test_fuzz31.py``): how
real code calls torch's names. Expected values come from torch 2.13."""

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _same(ours, theirs):
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-7)


def _both(make):
    return make(rg), make(torch)


def test_swapdims_and_swapaxes_take_torchs_keywords():
    for call in (
        lambda lib, x: x.swapdims(dim0=0, dim1=-1),
        lambda lib, x: lib.swapdims(x, -1, dim1=0),
        lambda lib, x: x.swapaxes(axis0=1, axis1=0),
        lambda lib, x: lib.swapaxes(x, 0, axis1=-1),
    ):
        ours, theirs = _both(lambda lib, c=call: c(lib, lib.arange(6).reshape(2, 3)))
        _same(ours, theirs)


def test_tensor_split_takes_torchs_keywords():
    for kwargs in ({"sections": 2}, {"indices": [1]}, {"indices": (1, 2), "dim": -1}):
        ours, theirs = _both(lambda lib, k=kwargs: lib.arange(6).reshape(2, 3).tensor_split(**k))
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            _same(o, t)
    with pytest.raises(rg.RetrogradError, match="tensor_split"):
        rg.arange(4).tensor_split(2, sections=2)


def test_one_hot_takes_input_keyword():
    ours, theirs = _both(
        lambda lib: lib.nn.functional.one_hot(input=lib.tensor([0, 2]), num_classes=3)
    )
    _same(ours, theirs)
    assert rg.nn.functional.one_hot(rg.tensor([1]), 2).tolist() == [[0, 1]]


def test_any_and_all_keepdim_without_dim_keep_every_dim():
    for name in ("any", "all"):
        ours, theirs = _both(lambda lib, n=name: getattr(lib.ones(1, 3, 2), n)(keepdim=True))
        _same(ours, theirs)
        ours, theirs = _both(
            lambda lib, n=name: getattr(lib, n)(lib.tensor([[0.0, 1.0]]), keepdim=True)
        )
        _same(ours, theirs)


def test_topk_of_a_0d_tensor_with_the_default_dim():
    for call in (
        lambda lib: lib.topk(lib.tensor(2.0), 1, largest=False),
        lambda lib: lib.tensor(2.0).topk(1, largest=False),
        lambda lib: lib.topk(lib.tensor(2.0), 1),
    ):
        (ov, oi), (tv, ti) = _both(call)
        _same(ov, tv)
        _same(oi, ti)


@pytest.mark.parametrize("scalar", [np.int64(3), np.int32(2), np.uint8(2), np.float32(0.5)])
def test_numpy_scalars_are_read_as_python_numbers(scalar):
    calls = [
        lambda lib, x: x.remainder(scalar),
        lambda lib, x: x % scalar,
        lambda lib, x: scalar % x,
        lambda lib, x: x.fmod(scalar),
        lambda lib, x: x.floor_divide(scalar),
        lambda lib, x: x // scalar,
        lambda lib, x: x.div(scalar, rounding_mode="trunc"),
        lambda lib, x: x.div(scalar, rounding_mode="floor"),
        lambda lib, x: x.pow(scalar),
        lambda lib, x: scalar**x,
        lambda lib, x: x.add(scalar, alpha=2),
        lambda lib, x: x.sub(scalar, alpha=2),
        lambda lib, x: lib.add(x, 1, alpha=scalar) if isinstance(scalar, np.integer) else x,
        lambda lib, x: x.clamp(min=scalar),
        lambda lib, x: x.clamp(max=scalar),
        lambda lib, x: x.clip(scalar, scalar + 1),
    ]
    for dtype in ("int64", "int32", "float32"):
        for call in calls:
            ours, theirs = _both(
                lambda lib, c=call, d=dtype: c(lib, lib.tensor([1, 2, 3], dtype=getattr(lib, d)))
            )
            _same(ours, theirs)


def test_integer_ranges_refuse_requires_grad():
    with pytest.raises(RuntimeError):
        torch.arange(3, requires_grad=True)
    for call in (
        lambda: rg.arange(3, requires_grad=True),
        lambda: rg.arange(1, 4, dtype=rg.int32, requires_grad=True),
        lambda: rg.randint(0, 3, (2,), requires_grad=True),
    ):
        with pytest.raises(rg.DTypeError):
            call()
    assert rg.arange(0.0, 1.0, 0.5, requires_grad=True).requires_grad


def test_a_whole_index_is_a_view_not_the_tensor_itself():
    for index in (Ellipsis, slice(None)):
        x = rg.tensor([1.0, 2.0], dtype=rg.float64).requires_grad_()
        y = x[index]
        assert y is not x and not y.is_leaf and y.grad_fn is not None
        (g,) = rg.autograd.grad((y * 3).sum(), x)
        assert g.tolist() == [3.0, 3.0]
    x0 = rg.tensor(2.0).requires_grad_()
    assert not x0[...].is_leaf  # (torch: False; a 0-d tensor too)
    z = rg.tensor([1.0, 2.0])
    z[...].add_(1)  # the view writes through to its base, as torch's
    assert z.tolist() == [2.0, 3.0]


def test_mT_and_mH_of_a_0d_tensor_are_the_tensor():  # noqa: N802 (torch's names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for attr in ("mT", "mH"):
            ours, theirs = _both(lambda lib, a=attr: getattr(lib.tensor(2.5), a))
            _same(ours, theirs)
    with pytest.raises(rg.ShapeError):
        rg.tensor([1.0]).mT  # noqa: B018 (1-d is refused, as torch refuses it)


def test_copysign_tracks_a_tracked_sign_with_a_zero_gradient():
    def run(lib):
        x = lib.tensor([2, -3])
        y = lib.tensor([-1.0, 1.0], dtype=lib.float64, requires_grad=True)
        out = x.copysign(y)
        return out, out.requires_grad, lib.autograd.grad(out.sum(), y)[0]

    (o, r, g), (to, tr, tg) = _both(run)
    _same(o, to)
    assert r == tr is True
    _same(g, tg)


def test_round_with_decimals_refuses_integer_tensors():
    with pytest.raises(NotImplementedError):
        torch.tensor([3]).round(decimals=0)
    for call in (
        lambda: rg.tensor([3]).round(decimals=0),
        lambda: rg.round(rg.tensor([3]), decimals=0),
        lambda: rg.tensor([3]).round_(decimals=0),
    ):
        with pytest.raises(rg.DTypeError):
            call()
    assert rg.tensor([3]).round().tolist() == [3]
    assert rg.tensor([3]).round_().tolist() == [3]


def test_scatter_family_on_a_0d_tensor():
    def run(lib):
        x = lib.tensor(2.0, dtype=lib.float64, requires_grad=True)
        i = lib.tensor(0)
        outs = [
            x.scatter(0, i, 3.0),
            x.scatter(-1, i, x * 5),
            x.scatter_add(0, i, x * 4),
            x.scatter_reduce(0, i, x * 4, "sum"),
            x.scatter_reduce(-1, i, x * 4, "amax"),
            x.scatter_reduce(0, i, x * 4, "prod", include_self=False),
            x.scatter_reduce(0, i, x * 3, "mean"),
            x.index_fill(0, i, 1.0),
            x.clone().scatter_(0, i, 2.5),
        ]
        return outs, lib.autograd.grad(sum(o.sum() for o in outs), x)[0]

    (outs, g), (touts, tg) = _both(run)
    for o, t in zip(outs, touts):
        _same(o, t)
    _same(g, tg)
    with pytest.raises(rg.ShapeError):
        rg.tensor(2.0).scatter(1, rg.tensor(0), 3.0)


def test_unfold_takes_torchs_dimension_keyword():
    ours, theirs = _both(
        lambda lib: lib.arange(6.0).reshape(2, 3).unfold(dimension=1, size=2, step=1)
    )
    _same(ours, theirs)
    with pytest.raises(rg.RetrogradError, match="unfold"):
        rg.arange(6.0).unfold(0, 2, 1, dimension=0)
