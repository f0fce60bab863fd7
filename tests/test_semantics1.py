"""Three places where retrograd differed silently from torch, compared with torch 2.13:
a custom ``Function`` whose ``backward`` returns ``None`` (the gradient stays absent and the
optimizers skip the parameter), writes through a detached tensor of a value that requires
grad, and the gradients of ``nanmean`` over an all-NaN row and of ``var``/``std`` without
degrees of freedom."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import distributed as dist


def gated(lib):
    """``v * w`` whose ``backward`` gives ``v`` its gradient and ``w`` none (``None``)."""

    class Gate(lib.autograd.Function):
        @staticmethod
        def forward(ctx, v, w):
            ctx.save_for_backward(w)
            return v * w

        @staticmethod
        def backward(ctx, grad):
            (w,) = ctx.saved_tensors
            return grad * w, None

    return Gate


V0 = np.array([0.5, -1.0, 2.0], np.float64)
W0 = np.array([1.5, 0.25, -0.75], np.float64)


def test_function_none_gradient_is_absent():
    v = rg.tensor(V0).require_grad()
    w = rg.tensor(W0).require_grad()
    grads = (gated(rg).apply(v, w) ** 2).sum().backward()
    assert w.grad(grads) is None
    tv = torch.tensor(V0, requires_grad=True)
    tw = torch.tensor(W0, requires_grad=True)
    (gated(torch).apply(tv, tw) ** 2).sum().backward()
    assert tw.grad is None
    np.testing.assert_allclose(v.grad(grads).numpy(), tv.grad.numpy(), rtol=1e-12)


def test_function_none_gradient_adds_to_another_path():
    """``w`` also used elsewhere: its gradient is that path's alone."""
    v = rg.tensor(V0).require_grad()
    w = rg.tensor(W0).require_grad()
    grads = ((gated(rg).apply(v, w) ** 2).sum() + (w * 3.0).sum()).backward()
    tv = torch.tensor(V0, requires_grad=True)
    tw = torch.tensor(W0, requires_grad=True)
    ((gated(torch).apply(tv, tw) ** 2).sum() + (tw * 3.0).sum()).backward()
    np.testing.assert_allclose(w.grad(grads).numpy(), tw.grad.numpy(), rtol=1e-12)


def split(lib):
    """Two outputs, ``v * w`` and ``w * 2``; ``backward`` gives ``w`` a gradient only from the
    second (``None`` when that one's gradient is ``None``)."""

    class Split(lib.autograd.Function):
        @staticmethod
        def forward(ctx, v, w):
            ctx.save_for_backward(w)
            ctx.set_materialize_grads(False)
            return v * w, w * 2.0

        @staticmethod
        def backward(ctx, ga, gb):
            (w,) = ctx.saved_tensors
            gv = None if ga is None else ga * w
            gw = None if gb is None else gb * 2.0
            return gv, gw

    return Split


@pytest.mark.parametrize("use", ["first", "second", "both"])
def test_function_none_gradient_of_several_outputs(use):
    results = []
    for lib in (rg, torch):
        if lib is rg:
            v, w = rg.tensor(V0).require_grad(), rg.tensor(W0).require_grad()
        else:
            v, w = torch.tensor(V0, requires_grad=True), torch.tensor(W0, requires_grad=True)
        a, b = split(lib).apply(v, w)
        loss = {"first": a.sum(), "second": (b * b).sum(), "both": a.sum() + (b * b).sum()}[use]
        if lib is rg:
            grads = loss.backward()
            got = [v.grad(grads), w.grad(grads)]
            results.append([None if g is None else g.numpy() for g in got])
        else:
            loss.backward()
            results.append([None if g is None else g.numpy() for g in (v.grad, w.grad)])
    for mine, theirs in zip(*results):
        if theirs is None:
            assert mine is None
        else:
            np.testing.assert_allclose(mine, theirs, rtol=1e-12)


def test_function_none_gradient_in_autograd_grad_and_clipping():
    """torch.autograd.grad: the input is "not used" (an error unless allow_unused: None, or
    zeros with materialize_grads); clip_grad_norm_ leaves it out of the norm."""
    v = rg.tensor(V0).require_grad()
    w = rg.tensor(W0).require_grad()
    loss = (gated(rg).apply(v, w) ** 2).sum()
    tv = torch.tensor(V0, requires_grad=True)
    tw = torch.tensor(W0, requires_grad=True)
    tloss = (gated(torch).apply(tv, tw) ** 2).sum()
    with pytest.raises(RuntimeError, match="not have been used"):
        torch.autograd.grad(tloss, [tv, tw], retain_graph=True)
    with pytest.raises(rg.AutodiffError, match="not have been used"):
        rg.autograd.grad(loss, [v, w], retain_graph=True)
    gv, gw = rg.autograd.grad(loss, [v, w], allow_unused=True, retain_graph=True)
    np.testing.assert_allclose(gv.numpy(), 2 * V0 * W0**2, rtol=1e-12)
    assert gw is None
    _, gw = rg.autograd.grad(loss, [v, w], allow_unused=True, materialize_grads=True,
                             retain_graph=True)  # fmt: skip
    np.testing.assert_array_equal(gw.numpy(), np.zeros(3))
    grads = loss.backward()
    norm = rg.nn.utils.clip_grad_norm_(grads, [v, w], 1.0)
    tloss.backward()
    tnorm = torch.nn.utils.clip_grad_norm_([tv, tw], 1.0)
    np.testing.assert_allclose(float(norm), float(tnorm), rtol=1e-12)
    np.testing.assert_allclose(v.grad(grads).numpy(), tv.grad.numpy(), rtol=1e-12)
    assert w.grad(grads) is None and tw.grad is None


OPTIMIZERS = {
    "sgd": ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1}),
    "adamw": ("AdamW", {"lr": 0.05, "weight_decay": 0.1}),
    "adam": ("Adam", {"lr": 0.05, "weight_decay": 0.1}),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizers_skip_a_parameter_without_gradient(name):
    """Several steps: ``w`` gets a gradient in the first one (momentum state), then only
    ``None`` from the custom function: torch leaves it untouched from then on (no momentum,
    no weight decay)."""
    cls, kwargs = OPTIMIZERS[name]
    v = rg.nn.Parameter(rg.tensor(V0))
    w = rg.nn.Parameter(rg.tensor(W0))
    opt = getattr(rg.optim, cls)([v, w], **kwargs)
    tv = torch.nn.Parameter(torch.tensor(V0))
    tw = torch.nn.Parameter(torch.tensor(W0))
    topt = getattr(torch.optim, cls)([tv, tw], **kwargs)
    for step in range(4):
        if step == 0:  # both have a gradient: the optimizer has state for w
            loss = (v * w).sum()
            tloss = (tv * tw).sum()
        else:
            loss = (gated(rg).apply(v, w) ** 2).sum()
            tloss = (gated(torch).apply(tv, tw) ** 2).sum()
        grads = loss.backward()
        opt.step(grads)
        topt.zero_grad(set_to_none=True)
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(np.asarray(v), tv.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(w), tw.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_distributed_none_gradient_does_not_hang():
    """A distributed parameter whose every contribution is ``None`` completes its bucket
    (zeros); the others are reduced as usual. Threads joined with a timeout."""
    devices = [rg.Device("cpu", i) for i in range(2)]
    results: list = [None, None]

    def work(i, device):
        try:
            v = rg.tensor(V0 * (i + 1), device=device).set_distributed("v")
            w = rg.tensor(W0, device=device).set_distributed("w")
            grads = (gated(rg).apply(v, w) ** 2).sum().backward()
            results[i] = (v.grad(grads).numpy(), w.grad(grads))
        except BaseException as error:
            results[i] = error

    config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.SUM, timeout=10.0)
    with dist.DistributedContext(devices, config):
        threads = [threading.Thread(target=work, args=(i, d), daemon=True) for i, d in
                   enumerate(devices)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20.0)
            assert not thread.is_alive(), "a device thread hung"
    expected = sum(2 * (V0 * (i + 1)) * W0**2 for i in range(2))
    for result in results:
        if isinstance(result, BaseException):
            raise result
        np.testing.assert_allclose(result[0], expected, rtol=1e-12)
        assert result[1] is None or not np.any(np.asarray(result[1]))


# -- nanmean, var and std at their degenerate sizes ------------------------------------------
NAN = float("nan")


def compare_reduction(fn, data, torch_fn=None):
    """Forward and backward of ``fn`` (one for both libraries, or ``torch_fn`` for torch)
    against torch, NaN and inf patterns included (float64)."""
    x = rg.tensor(np.array(data, np.float64)).require_grad()
    tx = torch.tensor(np.array(data, np.float64), requires_grad=True)
    out, tout = fn(x), (torch_fn or fn)(tx)
    weight = np.linspace(0.5, 1.5, max(int(np.prod(tout.shape)), 1)).reshape(tout.shape)
    grads = (out * rg.tensor(weight)).sum().backward()
    (tout * torch.tensor(weight)).sum().backward()
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(tout.detach().numpy()))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    g = x.grad(grads).numpy()
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-12, atol=0)


NANMEAN_CASES = {
    "row all nan": ([[NAN, NAN], [1.0, NAN]], lambda t: t.nanmean(1)),
    "row all nan keepdim": ([[NAN, NAN, NAN], [1.0, NAN, 4.0]], lambda t: t.nanmean(-1, True)),
    "column all nan": ([[NAN, 2.0], [NAN, NAN]], lambda t: t.nanmean(0)),
    "all": ([[NAN, NAN], [1.0, NAN]], lambda t: t.nanmean()),
    "every element nan": ([[NAN, NAN]], lambda t: t.nanmean()),
    "nansum of inf gradient": ([[NAN, 2.0]], lambda t: t.nansum(1) / 0.0),
}


@pytest.mark.parametrize("case", list(NANMEAN_CASES))
def test_nanmean_all_nan_gradient_is_nan(case):
    data, fn = NANMEAN_CASES[case]
    compare_reduction(fn, data)


VAR_CASES = {
    "correction 1": ([[1.0, 2.0], [3.0, 5.0]], {"dim": 1}),
    "correction 0": ([[1.0, 2.0], [3.0, 5.0]], {"dim": 1, "correction": 0}),
    "correction = n": ([[1.0, 2.0], [3.0, 5.0]], {"dim": 1, "correction": 2}),
    "correction > n": ([[1.0, 2.0], [3.0, 5.0]], {"dim": 1, "correction": 3}),
    "one element": ([[1.0], [3.0]], {"dim": 1}),
    "constant, correction = n": ([[1.0, 1.0], [3.0, 3.0]], {"dim": 1, "correction": 2}),
    "constant": ([[1.0, 1.0], [3.0, 3.0]], {"dim": 1}),
    "0-d": (2.0, {}),
    "empty dim": (np.zeros((2, 0)), {"dim": 1}),
    "all dims, correction = n": ([[1.0, 2.0], [3.0, 5.0]], {"dim": (0, 1), "correction": 4}),
    "all dims, correction > n": ([[1.0, 2.0], [3.0, 5.0]], {"dim": (0, 1), "correction": 6}),
}


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("case", list(VAR_CASES))
def test_var_std_without_degrees_of_freedom(op, case):
    data, kwargs = VAR_CASES[case]
    compare_reduction(lambda t: getattr(t, op)(**kwargs), data)


ALL_DIMS = {
    "dim None, correction = n": ({"correction": 4}, {"dim": (0, 1), "correction": 4}),
    "dim None, correction > n": ({"correction": 5}, {"dim": (0, 1), "correction": 5}),
    "dim ()": ({"dim": ()}, {"dim": (0, 1)}),
    "dim (), correction 0": ({"dim": (), "correction": 0}, {"dim": (0, 1), "correction": 0}),
}


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("case", list(ALL_DIMS))
def test_var_std_over_every_dim_as_torch_over_the_listed_dims(op, case):
    """Kept out of the comparison, torch being inconsistent with itself: ``dim=()`` reduces
    every dim in torch's forward, but its backward divides by ``1 - correction`` (the
    gradient of a reduction over no dim: +-inf for correction 1); ``dim=None`` with no degrees
    of freedom gives +inf everywhere (even where the formula is finite, correction > n). Both
    are compared with torch's result over the dims listed, whose forward is the same."""
    rg_kwargs, torch_kwargs = ALL_DIMS[case]
    data = [[1.0, 2.0], [3.0, 5.0]]
    compare_reduction(
        lambda t: getattr(t, op)(**rg_kwargs), data, lambda t: getattr(t, op)(**torch_kwargs)
    )


# -- writes through detach() and .data ------------------------------------------------------------
def detached_copy(x, y):
    d = x.detach()
    d.copy_(y)
    return (d * d).sum()


def detached_mul_twice(x, y):
    d = x.detach()
    d.mul_(y)
    d.mul_(y)
    return (d * d).sum() + x.sum()


def detached_views(x, y):
    d = x.detach().reshape(2, 2)
    d[0].mul_(y[:2])
    v = d[1]
    d[1] = y[2:] * 3.0
    return (d * d).sum() + (v * y[:2]).sum()


def detached_of_intermediate(x, y):
    z = x * 2.0
    d = z.detach()
    d.add_(y)
    return (z * d).sum()


def through_data(x, y):
    x.data.copy_(y)
    return (x * x).sum()


def through_data_then_use(x, y):
    data = x.data
    data.mul_(y)
    return (data * y).sum() + x.sum()


DETACHED_WRITES = {
    "copy_": detached_copy,
    "mul_ twice": detached_mul_twice,
    "views of the detached tensor": detached_views,
    "detached intermediate": detached_of_intermediate,
    ".data copy_": through_data,
    ".data mul_": through_data_then_use,
}


@pytest.mark.parametrize("case", list(DETACHED_WRITES))
def test_write_through_detach_records_as_torch(case):
    """``d = x.detach(); d.copy_(y)`` with ``y`` requiring grad: torch records the write
    (``d`` requires grad, ``y`` gets its gradient), ``x`` takes the values and keeps its own
    graph. Values, both inputs' gradients (``None`` where torch's is) and ``x``'s values."""
    body = DETACHED_WRITES[case]
    x0 = np.array([1.0, 2.0, -3.0, 0.5])
    y0 = np.array([4.0, -5.0, 6.0, 1.5])
    x = rg.tensor(x0).require_grad()
    y = rg.tensor(y0).require_grad()
    loss = body(x, y)
    grads = loss.backward()
    tx = torch.tensor(x0, requires_grad=True)
    ty = torch.tensor(y0, requires_grad=True)
    tloss = body(tx, ty)
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(x.numpy(), tx.detach().numpy(), rtol=1e-12)
    for mine, theirs in ((x.grad(grads), tx.grad), (y.grad(grads), ty.grad)):
        if theirs is None:
            assert mine is None or not np.any(mine.numpy())
        else:
            np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-12)
    assert x.is_leaf and x.requires_grad


def test_write_through_detach_under_no_grad_records_nothing():
    x = rg.tensor([1.0, 2.0]).require_grad()
    y = rg.tensor([3.0, 4.0]).require_grad()
    d = x.detach()
    with rg.no_grad():
        d.copy_(y * 2.0)
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    td = tx.detach()
    with torch.no_grad():
        td.copy_(torch.tensor([3.0, 4.0], requires_grad=True) * 2.0)
    assert td.grad_fn is None and not td.requires_grad
    assert d.grad_fn is None  # Burn's detach keeps a leaf's requirement; no graph recorded
    np.testing.assert_allclose(x.numpy(), tx.detach().numpy())
    grads = (d * y).sum().backward()
    np.testing.assert_allclose(y.grad(grads).numpy(), [6.0, 8.0])
