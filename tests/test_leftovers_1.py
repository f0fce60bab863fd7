"""Differences from torch 2.13 that earlier rounds found and left, closed: a composite
scheduler's failed step, ``load_state_dict`` naming a missing buffer, pools and
``interpolate`` on integer tensors, ..."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from retrograd import errors

# ---- a composite scheduler's failed step changes nothing --------------------------------


def _chain(lib, kind):
    S = lib.optim.lr_scheduler  # noqa: N806
    p = lib.nn.Parameter(lib.ones(1))
    opt = lib.optim.SGD([p], lr=0.1, momentum=0.9)
    if kind == "chained":
        members = [S.ExponentialLR(opt, 0.5), S.OneCycleLR(opt, max_lr=1.0, total_steps=3)]
        return opt, S.ChainedScheduler(members), members
    members = [S.ConstantLR(opt, factor=0.5, total_iters=1)]
    members.append(S.OneCycleLR(opt, max_lr=1.0, total_steps=2))
    return opt, S.SequentialLR(opt, members, milestones=[1]), members


@pytest.mark.parametrize("kind", ["chained", "sequential"])
def test_composite_scheduler_failed_step_changes_nothing(kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "scheduler before optimizer step"
        topt, tchain, _ = _chain(torch, kind)
        torch_rates = []
        with pytest.raises(ValueError, match="Tried to step"):
            for _ in range(5):
                tchain.step()
                torch_rates.append(topt.param_groups[0]["lr"])
    opt, chain, members = _chain(rg, kind)
    rates = []
    for _ in torch_rates:
        chain.step()
        rates.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(rates, torch_rates, rtol=1e-12)

    def state():
        groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
        return chain.state_dict(), [m.last_epoch for m in members], groups

    before = state()
    for _ in range(2):  # the step torch fails, failing the same way again, changing nothing
        with pytest.raises(errors.InvalidArgumentError, match="tried to step"):
            chain.step()
        assert state() == before
    # torch's composite keeps the rate of its last good step (get_last_lr); here the rate,
    # the momentum OneCycleLR cycles and every epoch are those of that step too
    np.testing.assert_allclose(chain.get_last_lr(), tchain.get_last_lr(), rtol=1e-12)
    assert chain.last_epoch == len(torch_rates)
    assert opt.param_groups[0]["lr"] == pytest.approx(tchain.get_last_lr()[0], rel=1e-12)


def test_chained_scheduler_failing_lambda_leaves_the_chain_as_it_was():
    def fn(lib):
        S = lib.optim.lr_scheduler  # noqa: N806
        opt = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=0.1)
        members = [
            S.ExponentialLR(opt, 0.5),
            S.MultiplicativeLR(opt, lambda e: 0.9 if e < 3 else 1 / 0),
        ]
        return opt, S.ChainedScheduler(members), members

    topt, tchain, _ = fn(torch)
    tchain.step()
    tchain.step()
    opt, chain, members = fn(rg)
    chain.step()
    chain.step()
    with pytest.raises(ZeroDivisionError):
        chain.step()
    assert [m.last_epoch for m in members] == [2, 2]
    assert chain.last_epoch == 2
    np.testing.assert_allclose(opt.param_groups[0]["lr"], topt.param_groups[0]["lr"], 1e-12)


# ---- load_state_dict names a missing buffer as a buffer ----------------------------------


def test_load_state_dict_names_missing_buffers_as_buffers():
    torch_bn = torch.nn.BatchNorm1d(3)
    state = {k: v for k, v in torch_bn.state_dict().items() if k != "running_mean"}
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "running_mean"'):
        torch_bn.load_state_dict(state)
    bn = rg.nn.BatchNorm1d(3)
    state = {k: v for k, v in bn.state_dict().items() if k != "running_mean"}
    with pytest.raises(errors.KeyMismatchError) as caught:
        bn.load_state_dict(state)
    message = str(caught.value)
    assert "missing buffers ['running_mean']" in message
    assert "parameter" not in message
    del state["weight"]
    with pytest.raises(errors.KeyMismatchError) as caught:
        bn.load_state_dict(state)
    message = str(caught.value)
    assert "missing parameters ['weight']" in message
    assert "missing buffers ['running_mean']" in message
    # non-strict: torch's missing_keys, both kinds in state_dict order
    torch_keys = torch_bn.load_state_dict(
        {k: v for k, v in torch_bn.state_dict().items() if k not in ("running_mean", "weight")},
        strict=False,
    )
    assert bn.load_state_dict(state, strict=False).missing_keys == torch_keys.missing_keys


# ---- pools of integer tensors: exactly the ones torch computes on the CPU -----------------

_INTS = np.random.default_rng(0).integers(-9, 10, (2, 3, 5, 6))
_INTS[0, 0, :2, :2] = 9  # tied maxima: the first one's index, as torch's
_INTS[1, 1, 0, :2] = [2**62, 2**62 - 1]  # apart by less than a float64 can tell


def _spatial(nd):
    return {1: _INTS[..., 0], 2: _INTS, 3: np.repeat(_INTS[:, :, None], 3, 2)}[nd]


@pytest.mark.parametrize(
    "name, nd, kwargs",
    [
        ("max_pool2d", 2, dict(kernel_size=2, stride=1, padding=1)),
        (
            "max_pool2d",
            2,
            dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True, return_indices=True),
        ),
        ("max_pool1d", 1, dict(kernel_size=2, return_indices=True)),
        ("max_pool3d", 3, dict(kernel_size=2, padding=1, return_indices=True)),
        ("avg_pool2d", 2, dict(kernel_size=2, padding=1, count_include_pad=False)),
        ("avg_pool2d", 2, dict(kernel_size=3, stride=2, ceil_mode=True)),
        ("avg_pool2d", 2, dict(kernel_size=2, divisor_override=-3)),
        ("avg_pool1d", 1, dict(kernel_size=3, stride=2, padding=1)),
        ("avg_pool3d", 3, dict(kernel_size=2, stride=(1, 2, 2), padding=1)),
    ],
)
def test_integer_pools_match_torch(name, nd, kwargs):
    x = _spatial(nd)
    if name.startswith("avg"):  # sums that fit (torch's overflow wraps)
        x = np.where(np.abs(x) > 100, -7, x)
    want = getattr(TF, name)(torch.tensor(x), **kwargs)
    got = getattr(F, name)(rg.tensor(x), **kwargs)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for w, g in zip(want, got):
        assert g.dtype == "int64" and w.dtype == torch.int64
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("norm", [2, 1.5])
@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_lp_pool_of_integers_matches_torch(norm, dtype):
    x = _spatial(2) % 5 if dtype == "int64" else _spatial(2) > 0
    for name, value in (("lp_pool2d", x), ("lp_pool1d", x[..., 0]), ("lp_pool3d", x[:, :, None])):
        kernel = (1, 2, 2) if name == "lp_pool3d" else 2
        want = getattr(TF, name)(torch.tensor(value), norm, kernel, 1)
        got = getattr(F, name)(rg.tensor(value), norm, kernel, 1)
        assert got.dtype == "float32" and want.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "name, nd, dtype, call",
    [
        ("max_pool1d", 1, "int64", lambda f, x: f.max_pool1d(x, 2)),
        ("max_pool2d", 2, "bool", lambda f, x: f.max_pool2d(x, 2)),
        ("avg_pool3d", 3, "bool", lambda f, x: f.avg_pool3d(x, 2)),
        ("avg_pool2d", 2, "bool", lambda f, x: f.avg_pool2d(x, 2)),
        ("adaptive_max_pool2d", 2, "int64", lambda f, x: f.adaptive_max_pool2d(x, 2)),
        ("adaptive_avg_pool1d", 1, "int64", lambda f, x: f.adaptive_avg_pool1d(x, 2)),
        ("adaptive_avg_pool3d", 3, "int64", lambda f, x: f.adaptive_avg_pool3d(x, 2)),
        ("interpolate", 2, "int64", lambda f, x: f.interpolate(x, scale_factor=2)),
        ("interpolate", 2, "bool", lambda f, x: f.interpolate(x, scale_factor=2)),
        ("interpolate", 1, "int64", lambda f, x: f.interpolate(x, size=3, mode="linear")),
    ],
)
def test_integer_pools_torch_refuses_are_refused(name, nd, dtype, call):
    x = _spatial(nd) if dtype == "int64" else _spatial(nd) > 0
    with pytest.raises((RuntimeError, NotImplementedError)):
        call(TF, torch.tensor(x))
    with pytest.raises(errors.DTypeError, match=f"{name}: .*{dtype}"):
        call(F, rg.tensor(x))


# ---- in-place writes to unbind/split/chunk outputs: refused as torch refuses them ----------

X0 = np.arange(12.0).reshape(3, 4) / 7 - 0.5
W0 = np.linspace(-1.0, 2.0, 4)


def _parts(b, kind, multi):
    """``unbind``/``split``/``chunk`` (several views at once, what torch refuses to write
    through) or the same views taken one at a time (``select``/``narrow``: torch writes)."""
    if kind == "unbind":
        return b.unbind(0) if multi else [b.select(0, i) for i in range(3)]
    if kind == "split":
        return b.split([1, 2], 0) if multi else [b.narrow(0, 0, 1), b.narrow(0, 1, 2)]
    return b.chunk(3, 0) if multi else [b.narrow(0, i, 1) for i in range(3)]


def _written_through_parts(lib, kind, read_before):
    x = lib.tensor(X0).require_grad() if lib is rg else torch.tensor(X0, requires_grad=True)
    w = lib.tensor(W0).require_grad() if lib is rg else torch.tensor(W0, requires_grad=True)
    b = x * 1.5
    parts = _parts(b, kind, multi=False)
    # read before the writes: retrograd keeps the value read (API.md section 10); torch's
    # program takes a copy, which its version check would otherwise refuse
    first = parts[0] if lib is rg else parts[0].clone()
    early = (first * parts[1].sum()).sum() if read_before else 0.0
    parts[0].mul_(w)
    parts[-1].add_(w * 2)
    loss = (b**2).sum() + (parts[0] * parts[1].sum()).sum() + early
    return x, w, loss


@pytest.mark.parametrize("read_before", [False, True])
@pytest.mark.parametrize("kind", ["unbind", "split", "chunk"])
def test_writes_through_multi_output_views_are_refused_single_views_written(kind, read_before):
    with pytest.raises(RuntimeError, match="returns multiple views"):
        _parts(torch.tensor(X0, requires_grad=True) * 1.5, kind, multi=True)[0].mul_(2.0)
    x = rg.tensor(X0).require_grad()
    b = x * 1.5
    with pytest.raises(errors.AutodiffError, match="returns multiple views"):
        _parts(b, kind, multi=True)[0].mul_(2.0)
    np.testing.assert_array_equal(b.detach().numpy(), X0 * 1.5)  # nothing written
    np.testing.assert_array_equal(x.grad(b.sum().backward()).numpy(), 1.5)  # still usable
    tx, tw, tloss = _written_through_parts(torch, kind, read_before)
    tloss.backward()
    x, w, loss = _written_through_parts(rg, kind, read_before)
    grads = loss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad(grads).numpy(), tw.grad.numpy(), rtol=1e-12)


def test_writes_through_multi_output_views_of_a_leaf_are_refused():
    x = rg.tensor(X0).require_grad()
    with pytest.raises(errors.AutodiffError, match="returns multiple views"):
        x.unbind(0)[0].mul_(2.0)


# ---- interpolate(antialias=True): torch's filter, forward and gradient --------------------


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(size=(5, 4)),
        dict(scale_factor=0.3),
        dict(scale_factor=(0.5, 1.7)),  # down one way, up the other
        dict(size=(20, 3), align_corners=True),
        dict(size=(1, 1)),
        dict(scale_factor=0.45, recompute_scale_factor=True),
    ],
)
def test_interpolate_antialias_matches_torch(mode, kwargs):
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((2, 3, 13, 11))
    tx = torch.tensor(x0, requires_grad=True)
    want = TF.interpolate(tx, mode=mode, antialias=True, **kwargs)
    seed = rng.standard_normal(want.shape)
    (want * torch.tensor(seed)).sum().backward()
    x = rg.tensor(x0).require_grad()
    got = F.interpolate(x, mode=mode, antialias=True, **kwargs)
    grads = (got * rg.tensor(seed)).sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-13)
    # float32 stays float32 (torch computes its weights in float32: close, not equal)
    got32 = F.interpolate(rg.tensor(x0.astype(np.float32)), mode=mode, antialias=True, **kwargs)
    assert got32.dtype == "float32"
    np.testing.assert_allclose(got32.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "mode, shape", [("nearest", (1, 2, 4, 4)), ("linear", (1, 2, 4)), ("bilinear", (2, 4, 4))]
)
def test_interpolate_antialias_refused_where_torch_refuses(mode, shape):
    x0 = np.ones(shape)
    with pytest.raises((RuntimeError, ValueError)):
        TF.interpolate(torch.tensor(x0), size=2, mode=mode, antialias=True)
    with pytest.raises(errors.InvalidArgumentError, match="interpolate: antialias"):
        F.interpolate(rg.tensor(x0), size=2, mode=mode, antialias=True)


# ---- grid_sample: 5-d input (trilinear, nearest) and bicubic ------------------------------


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode, nd", [("bilinear", 3), ("nearest", 3), ("bicubic", 2)])
def test_grid_sample_volumetric_and_bicubic_match_torch(mode, nd, padding_mode, align_corners):
    rng = np.random.default_rng(2)
    shape, points = ((2, 3, 5, 6), (2, 4, 3, 2)) if nd == 2 else ((2, 3, 4, 5, 6), (2, 3, 4, 2, 3))
    x0 = rng.standard_normal(shape)
    g0 = rng.uniform(-1.3, 1.3, points)  # some points outside the image
    kwargs = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    tx, tg = torch.tensor(x0, requires_grad=True), torch.tensor(g0, requires_grad=True)
    want = TF.grid_sample(tx, tg, **kwargs)
    seed = rng.standard_normal(want.shape)
    (want * torch.tensor(seed)).sum().backward()
    x, g = rg.tensor(x0).require_grad(), rg.tensor(g0).require_grad()
    got = F.grid_sample(x, g, **kwargs)
    grads = (got * rg.tensor(seed)).sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.grad(grads).numpy(), tg.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_nearest_non_finite_points_and_grid_gradient_match_torch(padding_mode):
    # a NaN point read an index out of range (an error); the grid's gradient was absent
    # where torch's is zeros. (torch's bilinear and bicubic kernels crash on such points, so
    # only nearest is compared.)
    x0 = np.random.default_rng(3).standard_normal((1, 2, 3, 3))
    g0 = np.array([[[[0.1, np.nan], [np.inf, -0.4]], [[np.nan, 0.3], [-np.inf, 0.5]]]])
    kwargs = dict(mode="nearest", padding_mode=padding_mode, align_corners=False)
    tx, tg = torch.tensor(x0, requires_grad=True), torch.tensor(g0, requires_grad=True)
    want = TF.grid_sample(tx, tg, **kwargs)
    want.sum().backward()
    x, g = rg.tensor(x0).require_grad(), rg.tensor(g0).require_grad()
    got = F.grid_sample(x, g, **kwargs)
    grads = got.sum().backward()
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_array_equal(x.grad(grads).numpy(), tx.grad.numpy())
    assert g.grad(grads) is not None
    np.testing.assert_array_equal(g.grad(grads).numpy(), tg.grad.numpy())
