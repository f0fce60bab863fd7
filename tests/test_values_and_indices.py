"""``sort``, ``topk``, ``cummax`` and ``cummin`` answer both API.md readings: section 2's
(Burn's: the method gives the values, a tensor) and section 10's (torch's: a named
``(values, indices)`` pair). Expected values are torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

DATA = np.array([[3.0, -1.0, 2.0, 2.5], [0.5, 5.0, 4.0, -2.0]], dtype=np.float64)

CALLS = {
    "sort": (lambda t: t.sort(1), lambda t: t.sort(1)),
    "sort descending": (
        lambda t: t.sort(dim=-1, descending=True),
        lambda t: t.sort(dim=-1, descending=True),
    ),
    "topk": (lambda t: t.topk(2, 1), lambda t: t.topk(2, 1)),
    "topk smallest": (lambda t: t.topk(3, largest=False), lambda t: t.topk(3, largest=False)),
    "cummax": (lambda t: t.cummax(1), lambda t: t.cummax(1)),
    "cummin": (lambda t: t.cummin(0), lambda t: t.cummin(0)),
    "rg.sort": (lambda t: rg.sort(t, 1), lambda t: torch.sort(t, 1)),
    "rg.topk": (lambda t: rg.topk(t, 2), lambda t: torch.topk(t, 2)),
    "rg.cummax": (lambda t: rg.cummax(t, 1), lambda t: torch.cummax(t, 1)),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_the_pair_as_torch_reads_it(name):
    ours_call, torch_call = CALLS[name]
    ours, theirs = ours_call(rg.tensor(DATA)), torch_call(torch.tensor(DATA))
    values, indices = ours
    assert len(ours) == 2
    np.testing.assert_array_equal(values.numpy(), theirs.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), theirs.indices.numpy())
    np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
    np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
    np.testing.assert_array_equal(ours[-1].numpy(), theirs[-1].numpy())
    np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
    assert str(ours.indices.dtype) == "int64"
    assert [p.shape for p in ours[:2]] == [tuple(p.shape) for p in theirs[:2]]


@pytest.mark.parametrize("name", list(CALLS))
def test_the_values_as_api_md_section_2_reads_them(name):
    ours_call, torch_call = CALLS[name]
    x = rg.tensor(DATA).require_grad()
    t = torch.tensor(DATA, requires_grad=True)
    weights = np.arange(1.0, 1.0 + torch_call(t).values.numel()).reshape(
        tuple(torch_call(t).values.shape)
    )
    ours = ours_call(x)
    assert ours.shape == tuple(torch_call(t).values.shape)
    np.testing.assert_array_equal(np.asarray(ours), torch_call(t).values.detach().numpy())
    np.testing.assert_array_equal((ours * 2.0).numpy(), 2 * torch_call(t).values.detach().numpy())
    assert type(ours * 2.0) is rg.Tensor
    grads = (ours * rg.tensor(weights)).sum().backward()
    (expected,) = torch.autograd.grad((torch_call(t).values * torch.tensor(weights)).sum(), t)
    np.testing.assert_array_equal(x.grad(grads).numpy(), expected.numpy())
    # other indexes than an int or a slice index the values
    np.testing.assert_array_equal(ours[..., 0].numpy(), torch_call(t).values[..., 0].detach())
    np.testing.assert_array_equal(ours[:, :1].numpy(), torch_call(t).values[:, :1].detach())


def test_burns_sort_test_reads_the_values():
    # burn-autodiff's sort test: the sorted values feed a product directly
    t1 = rg.tensor([[1.0, 7.0], [-2.0, -3.0]]).require_grad()
    t2 = rg.tensor([[4.0, -7.0], [2.0, 3.0]]).require_grad()
    grads = t1.mul(t1.matmul(t2).sort(1)).backward()
    a = torch.tensor([[1.0, 7.0], [-2.0, -3.0]], requires_grad=True)
    b = torch.tensor([[4.0, -7.0], [2.0, 3.0]], requires_grad=True)
    ga, gb = torch.autograd.grad((a * (a @ b).sort(1).values).sum(), (a, b))
    np.testing.assert_allclose(t1.grad(grads).numpy(), ga.numpy())
    np.testing.assert_allclose(t2.grad(grads).numpy(), gb.numpy())
