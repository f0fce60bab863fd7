"""In-place forms under autodiff (API.md section 10): the tensor object keeps its identity and
takes the new value, recorded as a functional update, with torch's aliasing between views and
their bases; checked against torch (values and gradients) and, where torch refuses to
differentiate (a value saved for backward modified later), against the out-of-place program."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn
from surface_testing import same_gradients

RNG = np.random.default_rng(5)


def _a(*shape: int) -> np.ndarray:
    return RNG.uniform(-1.0, 1.0, size=shape)


# -- the same program in both libraries, gradients compared ------------------------------------
def arithmetic(lib, x, w):
    h = x * w
    h.add_(1.0)
    h.mul_(w)
    h.sub_(x, alpha=0.5)
    h.div_(w.abs() + 1.0)
    h.pow_(2)
    h.clamp_(max=0.8)
    h.addcmul_(x, w, value=0.3)
    h += x
    h *= 2.0
    h -= w
    h /= 3.0
    return h.tanh_()


def item_assignment(lib, x, w):
    y = x.clone()
    y[0] = w[1] * 2.0
    y[:, 1] = 0.0
    y[1:, 2:] = w[1:, :2].exp()
    y[y > 0.5] = -1.0
    y[[0, 2], 1] = w[0, 0]
    y[lib.tensor([1, 2]), lib.tensor([0, 3])] = w[2, 1:3]
    y[..., -1] += x[:, 0]
    return y


def views_write_to_their_base(lib, x, w):
    y = x * 1.0
    row = y[1]
    row.mul_(w[0])  # y's row 1 changes
    y.view(-1)[:3].add_(w[2, :3])  # a reshape's slice: y changes
    y.t()[2].fill_(0.25)  # a transpose's row is y's column 2
    column = y[:, 0]
    y.add_(1.0)  # the base changes: the live view sees it
    y.narrow(1, 1, 2).mul_(w[:, :1])
    part = y.narrow(0, 0, 1)
    part.sub_(x[0])
    y.unsqueeze(0).squeeze(0)[2].neg_()
    return y + row.sum() + column.sum()


def masked_and_indexed_updates(lib, x, w):
    y = x * w
    y.masked_fill_(x > 0.3, 0.5)
    y.index_add_(0, lib.tensor([0, 2, 0]), w, alpha=0.5)
    y.scatter_(1, lib.tensor([[0], [1], [3]]), w[:, :1])
    z = y.clone()
    z.copy_(w[0])  # broadcast: the gradient goes to w, not to what z held
    z.zero_()
    z.fill_(w[1, 1])  # a 0-d tensor: differentiable in it
    return y * 2.0 + z


def nested_views(lib, x, w):
    y = x.clone()
    v = y.view(2, 6)
    u = v[1]
    t = u.view(3, 2)
    t[0].mul_(w[0, :2])
    u.add_(w.view(-1)[:6])
    v.t().mul_(2.0)
    return y * t.sum() + v.sum(0).sum()


PROGRAMS = [arithmetic, item_assignment, views_write_to_their_base, masked_and_indexed_updates,
            nested_views]  # fmt: skip


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_in_place_programs_match_torch(program, dtype):
    same_gradients(program, [_a(3, 4), _a(3, 4)], dtype)


def test_a_value_saved_for_backward_is_never_changed_by_a_later_in_place_op():
    """torch refuses this program ("modified by an inplace operation"); here it means the
    same as its out-of-place form, whose gradients torch gives."""

    def in_place(lib, x):
        a = x * 2.0
        b = a * a  # saves a
        a.add_(1.0)  # a later in-place op on a
        c = a.exp()
        a.mul_(3.0)
        return b + c + a

    def out_of_place(lib, x):
        a = x * 2.0
        b = a * a
        a1 = a + 1.0
        c = a1.exp()
        return b + c + a1 * 3.0

    arrays = [_a(5)]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        x = torch.tensor(arrays[0], requires_grad=True)
        in_place(torch, x).sum().backward()
    from nn_testing import compare_with_torch

    compare_with_torch(
        lambda x: in_place(rg, x), lambda x: out_of_place(torch, x), arrays, "float64"
    )


def test_every_name_bound_to_the_object_sees_the_new_value():
    a = rg.tensor([1.0, 2.0]) * 1.0
    b = a
    a += 1.0
    assert b is a and b.tolist() == [2.0, 3.0]
    c = a
    c[0] = 10.0
    assert a.tolist() == [10.0, 3.0]
    d = a.clone()
    d.zero_()
    assert a.tolist() == [10.0, 3.0]  # a clone aliases nothing


# -- torch's refusals ------------------------------------------------------------------------------
def test_in_place_on_a_leaf_that_requires_grad_is_refused_outside_no_grad():
    w = rg.tensor([1.0, 2.0]).require_grad()
    with pytest.raises(rg.AutodiffError, match="leaf tensor that requires grad"):
        w.add_(1.0)
    with pytest.raises(rg.AutodiffError, match="a view of a leaf"):
        w[0] = 3.0
    with pytest.raises(rg.AutodiffError):
        w += 1.0
    assert w.tolist() == [1.0, 2.0] and w.is_require_grad()
    with rg.no_grad():
        w.mul_(2.0)
        w[1] = 7.0
    assert w.tolist() == [2.0, 7.0] and w.is_require_grad() and w.is_leaf
    grads = (w * w).sum().backward()
    assert w.grad(grads).tolist() == [4.0, 14.0]


def test_dtype_and_shape_rules_of_in_place_ops_are_torch_s():
    i = rg.tensor([1, 2, 3])
    with pytest.raises(rg.DTypeError, match="can't be cast"):
        i.add_(1.5)
    with pytest.raises(rg.DTypeError, match="can't be cast"):
        i.div_(2)
    i.mul_(2)
    assert i.tolist() == [2, 4, 6] and i.dtype == rg.long
    f = rg.tensor([1.0, 2.0])
    f.add_(rg.tensor([0.5, 0.25], dtype=rg.float64))
    assert f.dtype == rg.float32 and f.tolist() == [1.5, 2.25]
    with pytest.raises(rg.ShapeError, match="doesn't match the broadcast shape"):
        f.add_(rg.ones(3, 2))
    b = rg.tensor([True, False])
    with pytest.raises(rg.DTypeError):
        b.add_(1)
    t = torch.tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="can't be cast"):
        t.add_(1.5)


def test_writing_into_an_expanded_view_is_refused_as_in_torch():
    x = rg.tensor([1.0, 2.0]) * 1.0
    with pytest.raises(rg.ShapeError, match="single memory location"):
        x.expand(3, 2).add_(1.0)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.tensor([1.0, 2.0]).expand(3, 2).add_(1.0)
    assert x.tolist() == [1.0, 2.0]


def test_contiguous_and_reshape_of_a_transpose_copy_as_torch_s_do():
    for lib in (rg, torch):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) * 1.0
        copy = x.t().contiguous()
        copy.add_(100.0)
        reshaped = x.t().reshape(-1)
        reshaped.add_(10.0)
        assert x.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
        assert not x.t().is_contiguous() and x.is_contiguous() and x.t().t().is_contiguous()
        assert x.contiguous() is x
        assert tuple(x.t().stride()) == (1, 3)
        with pytest.raises(RuntimeError, match=r"view"):  # rg.ShapeError is a ValueError
            try:
                x.t().view(-1)
            except rg.ShapeError as error:
                raise RuntimeError(str(error)) from None


def test_strides_follow_torch_s():
    x = rg.zeros(2, 3, 4)
    t = torch.zeros(2, 3, 4)
    for view in (
        lambda v: v.transpose(0, 2),
        lambda v: v[:, ::2],
        lambda v: v[1, :, 1:3],
        lambda v: v.permute(1, 2, 0).reshape(3, 8),
        lambda v: v.unsqueeze(1),
        lambda v: v.expand(5, 2, 3, 4)[:, 0],
        lambda v: v.narrow(2, 1, 2).unfold(2, 2, 1),
        lambda v: v[..., None, 0],
    ):
        ours, theirs = view(x), view(t)
        assert tuple(ours.stride()) == tuple(theirs.stride())
        assert ours.is_contiguous() == theirs.is_contiguous()


# -- .data: values outside the graph -------------------------------------------------------------
def test_manual_sgd_on_data_matches_torch():
    a = _a(3, 2)
    ours, theirs = nn.Linear(2, 3).double(), torch.nn.Linear(2, 3).double()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = _a(4, 2)
    for _ in range(3):
        grads = ours(rg.tensor(x)).square().sum().backward()
        for p in ours.parameters():
            p.data.add_(p.grad(grads), alpha=-0.1)
        theirs.zero_grad()
        theirs(torch.tensor(x)).square().sum().backward()
        for p in theirs.parameters():
            p.data.add_(p.grad, alpha=-0.1)
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name], value.numpy(), rtol=1e-12)
    assert all(p.is_require_grad() for p in ours.parameters())
    del a


def test_data_writes_reach_the_parameter_and_record_nothing():
    p = nn.Parameter(rg.zeros(2, 3))
    before = p
    p.data.normal_(0.0, 0.02)
    assert p is before and p.is_require_grad() and float(p.abs().sum()) > 0
    p.data.fill_(0.5)
    p.data[0].zero_()
    assert p.tolist() == [[0.0] * 3, [0.5] * 3]
    p.data = rg.ones(4)  # torch: .data may change shape and dtype
    assert p.shape == (4,) and p.is_require_grad()
    values = p.data
    assert not values.requires_grad and values.tolist() == [1.0] * 4


def test_a_data_write_into_a_computed_tensor_keeps_it_in_its_graph_as_torch_does():
    """torch lets ``.data`` (and ``detach()``) write into a tensor computed in the graph: the
    values change and later uses still send their gradient back through it (TCN initializes
    its weight-normed convolutions so: ``conv.weight.data.normal_(0, 0.01)``)."""
    results = []
    for lib in (torch, rg):
        leaf = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        hidden = leaf * 2.0
        hidden.data.add_(1.0)
        hidden.detach()[0] = 10.0
        hidden.data[2] = float("inf")  # an infinite value, then overwritten: no NaN left
        hidden.data.clamp_(max=100.0)
        loss = (hidden * hidden).sum()
        grad = lib.autograd.grad(loss, leaf)[0]
        results.append((hidden.tolist(), grad.tolist()))
    assert results[1] == results[0] == ([10.0, -3.0, 100.0], [40.0, -12.0, 400.0])


def test_the_pieces_of_split_and_unbind_alias_their_source():
    """torch refuses to modify these views in place under autograd (outputs of a function
    returning several views) and aliases them otherwise; here they alias always."""
    for lib in (rg, torch):
        x = lib.arange(6.0).reshape(2, 3)
        with lib.no_grad():
            first, _ = x.split([1, 1], 0)
            first.mul_(10.0)
            x.unbind(1)[2].fill_(-1.0)
            x.chunk(3, 1)[1].add_(0.5)
        assert x.tolist() == [[0.0, 10.5, -1.0], [3.0, 4.5, -1.0]]


def test_detach_aliases_its_source_as_torch_s_does():
    for lib in (rg, torch):
        x = lib.tensor([1.0, 2.0])
        d = x.detach()
        d.mul_(3.0)
        assert x.tolist() == [3.0, 6.0]


def test_detach_in_place_and_clone_of_a_leaf():
    w = rg.tensor([1.0, 2.0]).require_grad()
    c = w.clone()
    assert not c.is_leaf and c.requires_grad
    c.add_(1.0)  # not a leaf: allowed, as in torch
    grads = (c * c).sum().backward()
    assert w.grad(grads).tolist() == [4.0, 6.0]
    h = w * 2.0
    h.detach_()
    assert not h.requires_grad and h.is_leaf
    with pytest.raises(rg.AutodiffError, match="can't detach views"):
        (w * 1.0)[0].detach_()


def test_random_fills_have_torch_s_ranges_and_dtypes():
    rg.manual_seed(3)
    x = rg.empty(2000, dtype=rg.float64)
    assert x.uniform_(-2.0, 3.0).min() >= -2.0 and x.max() < 3.0
    x.normal_(1.0, 0.1)
    assert abs(float(x.mean()) - 1.0) < 0.02 and abs(float(x.std()) - 0.1) < 0.01
    i = rg.zeros(1000, dtype=rg.long)
    i.random_(3, 7)
    assert set(i.tolist()) == {3, 4, 5, 6} and i.dtype == rg.long
    b = rg.zeros(1000)
    b.bernoulli_(0.25)
    assert set(b.tolist()) == {0.0, 1.0} and 0.2 < float(b.mean()) < 0.3
    e = rg.zeros(2000, dtype=rg.float64).exponential_(2.0)
    assert float(e.min()) >= 0 and abs(float(e.mean()) - 0.5) < 0.05


def test_an_optimizer_step_and_init_are_seen_by_views_of_a_parameter():
    p = nn.Parameter(rg.ones(2, 2))
    view = p.data.view(-1)
    nn.init.zeros_(p)
    assert view.tolist() == [0.0] * 4
    grads = (p * 2.0).sum().backward()
    rg.optim.SGD([p], lr=0.5).step(grads)
    assert view.tolist() == [-1.0] * 4


def test_in_place_ops_on_int_and_bool_tensors():
    same_values_cases = [
        lambda lib: lib.arange(6).reshape(2, 3).mul_(2).add_(1).clamp_(max=8),
        lambda lib: lib.zeros(3, dtype=lib.bool).logical_not(),
        lambda lib: lib.arange(5).masked_fill_(lib.arange(5) > 2, -1),
        lambda lib: lib.arange(4).float().ge_(2.0),
        lambda lib: lib.tensor([[1.0, 2.0], [3.0, 4.0]]).triu_(1),
    ]
    for make in same_values_cases:
        ours, theirs = make(rg), make(torch)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
