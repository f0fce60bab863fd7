"""In-place arithmetic written into the tensor's own buffer (``add_``, ``sub_``, ``mul_``,
``div_`` outside the graph; ``clip_grad_norm_``'s scaling): the bits of the out-of-place
update, and taken only where nothing else sees the buffer, so that a value saved for
backward, a kept gradient, a NumPy array or a view never changes under its holder.

Expected values are float32 arithmetic in NumPy (IEEE operations, correctly rounded on both
backends) or torch's own results; the buffer's address says whether the write went in place.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch

BIG = (300, 250)  # 75,000 elements: written in place, the NumPy backend's one-pass loop
SMALL = (4, 3)  # below inplace.IN_BUFFER_MIN_SIZE: new arrays


def _values(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _address(t):
    return t.numpy().__array_interface__["data"][0]


def _leaf(shape=SMALL, seed=0):
    return rg.tensor(_values(shape, seed)).require_grad()


def _f32(x):
    return np.float32(x)


@pytest.mark.parametrize("shape", [SMALL, BIG])
def test_data_add_with_alpha_is_torchs_fused_multiply_add_in_place(shape):
    p0, g0 = _values(shape, 1), _values(shape, 2)
    p = rg.tensor(p0).require_grad()
    grads = (p * rg.tensor(g0)).sum().backward()  # p's gradient: g0
    where = _address(p)
    p.data.add_(p.grad(grads), alpha=-0.1)
    if shape == BIG:
        assert _address(p) == where  # written into p's own memory
    # torch's add_(alpha=) rounds once (its bits: the float32 product exact in float64)
    expected = torch.from_numpy(p0.copy()).add_(torch.from_numpy(g0), alpha=-0.1)
    np.testing.assert_array_equal(p.numpy(), expected.numpy())
    sum_then_round = p0.astype(np.float64) + g0.astype(np.float64) * np.float64(_f32(-0.1))
    np.testing.assert_array_equal(p.numpy(), sum_then_round.astype(np.float32))
    assert p.requires_grad and p.is_leaf
    np.testing.assert_array_equal(p.grad(grads).numpy(), g0)  # the gradient untouched


@pytest.mark.parametrize("shape", [SMALL, BIG])
def test_arithmetic_under_no_grad_matches_out_of_place(shape):
    p0, g0 = _values(shape, 3), _values(shape, 4)
    p, g = rg.tensor(p0).require_grad(), rg.tensor(g0)
    where = _address(p)
    updates = (
        lambda: p.sub_(g, alpha=2),
        lambda: p.mul_(0.5),
        lambda: p.div_(g),
        lambda: p.add_(1.5),
        lambda: p.mul_(g[0]),  # a broadcast row: its own array, a copy of nothing of p's
    )
    for update in updates:
        with rg.no_grad():
            update()
        if shape == BIG:  # (checked after each: a new array could land there)
            assert _address(p) == where
    expected = (p0 - g0 * _f32(2.0)) * _f32(0.5) / g0 + _f32(1.5)
    np.testing.assert_array_equal(p.numpy(), expected * g0[0])


def test_a_value_saved_for_backward_keeps_its_values():
    w0, x0 = _values(BIG, 5), _values(BIG, 6)
    w, x = rg.tensor(w0).require_grad(), rg.tensor(x0).require_grad()
    loss = (w * x).sum()  # saves w for x's gradient
    with rg.no_grad():
        w.add_(rg.tensor(np.ones(BIG, np.float32)), alpha=-0.5)
    w.data.mul_(3.0)
    grads = loss.backward()
    np.testing.assert_array_equal(x.grad(grads).numpy(), w0)  # the old w
    np.testing.assert_array_equal(w.grad(grads).numpy(), x0)
    np.testing.assert_array_equal(w.numpy(), (w0 + _f32(-0.5)) * _f32(3.0))


def test_a_kept_numpy_array_keeps_its_values():
    p0 = _values(BIG, 7)
    p = rg.tensor(p0).require_grad()
    kept = p.numpy()
    with rg.no_grad():
        p.mul_(2.0)
    np.testing.assert_array_equal(kept, p0)
    np.testing.assert_array_equal(p.numpy(), p0 * _f32(2.0))


def test_aliases_follow_as_torchs_do():
    p0 = _values(BIG, 8)
    ours = rg.tensor(p0).require_grad()
    theirs = torch.tensor(p0, requires_grad=True)
    views = (ours.detach(), ours.data, ours[1], ours.t())
    torch_views = (theirs.detach(), theirs.data, theirs[1], theirs.t())
    with rg.no_grad():
        ours.mul_(3.0)
    with torch.no_grad():
        theirs.mul_(3.0)
    for view, torch_view in zip(views, torch_views):
        np.testing.assert_array_equal(view.numpy(), torch_view.detach().numpy())
    ours.data.add_(1.0)  # through .data, with the other aliases alive
    theirs.data.add_(1.0)
    for view, torch_view in zip(views, torch_views):
        np.testing.assert_array_equal(view.numpy(), torch_view.detach().numpy())


def test_a_slice_view_written_in_place_updates_its_base_only_there():
    p0 = _values((6, 4), 9)
    ours, theirs = rg.tensor(p0), torch.tensor(p0)
    ours[2:4].mul_(2.0)
    theirs[2:4].mul_(2.0)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_a_recorded_update_still_raises_and_records():
    w = _leaf()
    with pytest.raises(rg.errors.AutodiffError, match="in-place"):
        w.add_(1.0)
    x = _leaf(seed=1)
    y = x * 2.0
    y.mul_(x)  # recorded: d(2x * x)/dx = 4x
    grads = y.sum().backward()
    np.testing.assert_array_equal(x.grad(grads).numpy(), x.numpy() * _f32(4.0))


def _total_norm(gradients):
    """The total 2-norm as the backend's ``global_norm`` computes it: torch's own
    (``_foreach_norm``, then the norm of the norms, in float32); on NumPy the float64 sum of
    the squares (exact for float32), here correctly rounded (``math.fsum``): the kernel's
    lane-split sum differs from it by about ``n * 2**-53``, below what the float32 factor
    keeps."""
    if on_torch():
        norms = torch._foreach_norm([torch.from_numpy(g) for g in gradients], 2.0)
        return np.float64(torch.linalg.vector_norm(torch.stack(norms)).item())
    return np.float64(
        math.sqrt(math.fsum(math.fsum(g.astype(np.float64).ravel() ** 2) for g in gradients))
    )


def _clip_expected(gradients, max_norm):
    # as torch's: the total in the gradients' float32, the factor computed in float32
    total = np.float32(_total_norm(gradients))
    factor = min(np.float32(max_norm) / (total + np.float32(1e-6)), np.float32(1.0))
    return [g * factor for g in gradients]


def test_clip_grad_norm_scales_each_gradient_once_when_two_share_one():
    # the gradients of a and b of ``a + b`` may be one array: scaled in place, the second
    # would be scaled twice
    a, b = _leaf(BIG, seed=10), _leaf(BIG, seed=11)
    upstream = _values(BIG, 12)
    grads = ((a + b) * rg.tensor(upstream)).sum().backward()
    norm = rg.nn.utils.clip_grad_norm_(grads, [a, b], 0.5)
    (ea, eb) = _clip_expected([upstream, upstream], 0.5)
    np.testing.assert_array_equal(a.grad(grads).numpy(), ea)
    np.testing.assert_array_equal(b.grad(grads).numpy(), eb)
    assert norm == pytest.approx(float(np.sqrt(2 * np.sum(upstream.astype(np.float64) ** 2))))


def test_clip_grad_norm_in_place_leaves_a_kept_gradient_alone():
    w = rg.tensor(_values(BIG, 13)).require_grad()
    g0 = _values(BIG, 14)
    grads = (w * rg.tensor(g0)).sum().backward()
    kept = w.grad(grads)
    rg.nn.utils.clip_grad_norm_(grads, [w], 0.25)
    np.testing.assert_array_equal(kept.numpy(), g0)  # the gradient read before: unchanged
    np.testing.assert_array_equal(w.grad(grads).numpy(), _clip_expected([g0], 0.25)[0])


def test_clip_grad_norm_writes_a_sole_gradient_in_place_with_torchs_values():
    values = [_values(BIG, 15), _values((7,), 16)]
    weights = [_values(BIG, 17), _values((7,), 18)]
    ours = [rg.tensor(v).require_grad() for v in values]
    grads = sum((p * rg.tensor(w)).sum() for p, w in zip(ours, weights)).backward()
    where = _address(ours[0].grad(grads))
    rg.nn.utils.clip_grad_norm_(grads, ours, 0.25)
    assert _address(ours[0].grad(grads)) == where
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    sum((p * torch.tensor(w)).sum() for p, w in zip(theirs, weights)).backward()
    torch.nn.utils.clip_grad_norm_(theirs, 0.25)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad(grads).numpy(), t.grad.numpy(), rtol=1e-6, atol=0)
    np.testing.assert_array_equal(ours[0].grad(grads).numpy(), _clip_expected(weights, 0.25)[0])


def test_clip_grad_norm_with_create_graph_keeps_the_graph():
    w = _leaf(seed=19)
    grads = (w * w * w).sum().backward(create_graph=True)  # 3 w^2, in the graph
    rg.nn.utils.clip_grad_norm_(grads, [w], 0.1)
    clipped = w.grad(grads)
    assert clipped.requires_grad
    second = clipped.sum().backward()  # d/dw of factor * 3 w^2, the factor a constant
    w0 = w.detach().numpy().astype(np.float64)
    factor = 0.1 / (np.sqrt(np.sum((3 * w0**2) ** 2)) + 1e-6)
    np.testing.assert_allclose(w.grad(second).numpy(), factor * 6 * w0, rtol=1e-5)


def test_the_lm_benchmark_update_is_bitwise_the_out_of_place_one():
    rg.seed(0)
    model = rg.nn.Sequential(rg.nn.Embedding(50, 8), rg.nn.Linear(8, 50))
    twin = rg.nn.Sequential(rg.nn.Embedding(50, 8), rg.nn.Linear(8, 50))
    twin.load_state_dict({k: v.numpy().copy() for k, v in model.state_dict().items()})
    tokens = rg.tensor(np.arange(12).reshape(3, 4) % 50)
    for _ in range(3):
        for m, in_place in ((model, True), (twin, False)):
            grads = m(tokens).logsumexp(-1).sum().backward()
            rg.nn.utils.clip_grad_norm_(grads, m.parameters(), 0.25)
            if in_place:
                for p in m.parameters():
                    p.data.add_(p.grad(grads), alpha=-20.0)
            else:  # new arrays: a saved copy of every value is alive
                kept = [p.numpy().copy() for p in m.parameters()]
                for p, old in zip(m.parameters(), kept):
                    # torch's add_(alpha=) is one fused multiply-add: the product of two
                    # float32s is exact in float64, the sum rounded there, then to float32
                    grad = p.grad(grads).numpy().astype(np.float64)
                    wide = old.astype(np.float64) + grad * np.float64(_f32(-20.0))
                    expected = wide.astype(np.float32)
                    with rg.no_grad():
                        p.copy_(rg.tensor(expected))
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert a.numpy().tobytes() == b.numpy().tobytes(), name


@pytest.mark.skipif(not on_torch(), reason="the torch backend's tensors")
def test_torch_inner_tensor_sharing_storage_is_not_written():
    p = _leaf(BIG, 20)
    inner = p.inner().numpy()  # an ndarray over the torch storage
    before = inner.copy()
    with rg.no_grad():
        p.mul_(2.0)
    np.testing.assert_array_equal(inner, before)
