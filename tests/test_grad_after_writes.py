"""A tensor's gradient is found however many in-place writes followed the backward (or the
recording), as torch's ``.grad`` stays on the tensor: each write through ``.data`` (or under
``no_grad``) makes a parameter a fresh leaf, and the tensor remembered only its last eight
former leaves, so a row-by-row update (``w.data[i] -= lr * w.grad(grads)[i]``) lost the
gradient at the ninth row."""

from __future__ import annotations

import gc

import numpy as np
import torch

import retrograd as rg


def test_a_row_by_row_update_reads_the_gradient_at_every_row_as_torch():
    torch.manual_seed(0)
    theirs = torch.nn.Embedding(20, 4)
    ours = rg.nn.Embedding(20, 4)
    ours.load_state_dict({"weight": theirs.weight.detach().numpy().copy()})
    rows = [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 1, 2]
    grads = ours(rg.tensor(rows)).pow(2).sum().backward()
    theirs(torch.tensor(rows)).pow(2).sum().backward()
    for i in rows:
        ours.weight.data[i] -= 0.1 * ours.weight.grad(grads)[i]
        theirs.weight.data[i] -= 0.1 * theirs.weight.grad[i]
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-6)
    np.testing.assert_array_equal(ours.weight.grad(grads).numpy(), theirs.weight.grad.numpy())


def test_one_gradient_set_applied_twenty_times_as_torchs_grad():
    start = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    p = rg.nn.Parameter(rg.tensor(start))
    grads = (p * p).sum().backward()
    for _ in range(20):
        p.data.add_(p.grad(grads), alpha=-0.01)
    np.testing.assert_array_equal(p.grad(grads).numpy(), 2 * start)
    expected = start.copy()
    for _ in range(20):
        expected = expected + np.float32(-0.01) * (2 * start)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-6)


def test_a_graph_recorded_across_twelve_writes_sends_every_contribution_to_the_tensor():
    start = np.array([0.25, -0.5], dtype=np.float64)
    p = rg.nn.Parameter(rg.tensor(start))
    loss = None
    for i in range(12):
        term = (p * p * (i + 1)).sum()  # records p's value at this write
        loss = term if loss is None else loss + term
        p.data.add_(0.01)
    grads = loss.backward()
    # d/dp of sum_i (i+1) * p_i^2, where p_i = start + 0.01 i is the value recorded at step i
    expected = sum(2 * (i + 1) * (start + 0.01 * i) for i in range(12))
    np.testing.assert_allclose(p.grad(grads).numpy(), expected, rtol=1e-12)


def test_a_training_loop_remembers_only_the_keys_still_in_use():
    # flat memory: the fresh leaves of step n are forgotten once step n's graph and gradients
    # are gone (the tuple would otherwise grow by one key a parameter a step)
    rg.seed(0)
    model = rg.nn.Linear(3, 2)
    x = rg.randn(4, 3)
    for _ in range(50):
        grads = model(x).pow(2).sum().backward()
        for p in model.parameters():
            p.data.add_(p.grad(grads), alpha=-0.01)
    del grads
    gc.collect()
    for p in model.parameters():
        assert len(p._former_keys) <= 2, len(p._former_keys)


def test_a_tensor_with_former_leaves_pickles_and_its_copy_reads_no_stale_key():
    import pickle

    p = rg.nn.Parameter(rg.tensor([1.0, 2.0]))
    grads = (p * p).sum().backward()
    p.data.add_(p.grad(grads), alpha=-0.5)  # p now remembers its first leaf's key
    copy = pickle.loads(pickle.dumps(p))
    np.testing.assert_array_equal(copy.numpy(), p.numpy())
    # node ids are this process's: the copy must not take p's gradient by an old key
    assert copy.grad(grads) is None
    np.testing.assert_array_equal(p.grad(grads).numpy(), [2.0, 4.0])
