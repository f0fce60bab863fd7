"""``optim.LBFGS`` against ``torch.optim.LBFGS`` (fixed steps and the strong-Wolfe line
search, a short history, float64 and float32, several steps carrying the state), and
``optimizer.step(closure)`` for every optimizer: the closure returns ``(loss, grads)``, or
the loss alone to be differentiated by the step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn, optim


def _data(dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((12, 3)).astype(dtype)
    y = np.sin(x @ np.array([1.0, -2.0, 0.5], dtype=dtype))[:, None].astype(dtype)
    return x, y


def _models(dtype):
    torch.manual_seed(1)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).to(
        getattr(torch, dtype)
    )
    unused = torch.nn.Parameter(torch.ones(2, dtype=getattr(torch, dtype)))
    ours = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)).to(dtype)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return theirs, unused, ours, rg.nn.Parameter(rg.ones(2, dtype=dtype))


def _train(dtype, steps, **options):
    x, y = _data(dtype)
    theirs, their_unused, ours, our_unused = _models(dtype)
    their_opt = torch.optim.LBFGS([*theirs.parameters(), their_unused], **options)
    our_opt = optim.LBFGS([*ours.parameters(), our_unused], **options)
    tx, ty, rx, ry = torch.tensor(x), torch.tensor(y), rg.tensor(x), rg.tensor(y)
    calls = {"torch": 0, "ours": 0}

    def their_closure():
        their_opt.zero_grad()
        loss = torch.nn.functional.mse_loss(theirs(tx), ty)
        loss.backward()
        calls["torch"] += 1
        return loss

    def our_closure():
        our_opt.zero_grad()
        loss = rg.nn.functional.mse_loss(ours(rx), ry)
        grads = loss.backward()
        calls["ours"] += 1
        return loss, grads

    losses = []
    for _ in range(steps):
        losses.append((their_opt.step(their_closure).item(), our_opt.step(our_closure).item()))
    return theirs, ours, losses, calls, their_opt, our_opt


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_follows_torch_step_for_step_in_float64(line_search_fn):
    theirs, ours, losses, calls, their_opt, our_opt = _train(
        "float64", 3, lr=0.5, max_iter=8, history_size=3, line_search_fn=line_search_fn
    )
    assert calls["ours"] == calls["torch"] >= 3 * 8
    for reference, mine in losses:
        assert mine == pytest.approx(reference, rel=1e-10)
    for reference, mine in zip(theirs.state_dict().values(), ours.state_dict().values()):
        np.testing.assert_allclose(np.asarray(mine), reference.numpy(), rtol=1e-9, atol=1e-12)
    their_state = their_opt.state[their_opt.param_groups[0]["params"][0]]
    our_state = our_opt.state[our_opt.param_groups[0]["params"][0]]
    assert our_state["n_iter"] == their_state["n_iter"]
    assert our_state["func_evals"] == their_state["func_evals"]
    assert len(our_state["old_dirs"]) == len(their_state["old_dirs"]) == 3


def test_lbfgs_in_float32_rounds_as_torch_does():
    theirs, ours, losses, _, _, _ = _train("float32", 2, lr=1.0, max_iter=5)
    for reference, mine in losses:
        assert mine == pytest.approx(reference, rel=1e-5)
    for reference, mine in zip(theirs.state_dict().values(), ours.state_dict().values()):
        assert np.asarray(mine).dtype == np.float32
        np.testing.assert_allclose(np.asarray(mine), reference.numpy(), rtol=1e-4, atol=1e-5)


def test_lbfgs_stops_at_once_at_an_optimum():
    w = rg.nn.Parameter(rg.zeros(3, dtype="float64"))
    opt = optim.LBFGS([w])
    calls = []

    def closure():
        calls.append(1)
        return (w * w).sum()  # the loss alone: the step differentiates it

    assert float(opt.step(closure)) == 0.0
    assert len(calls) == 1 and w.tolist() == [0.0, 0.0, 0.0]


def test_a_closure_may_return_the_loss_alone_and_every_optimizer_takes_one():
    for make in (lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda p: optim.Adam(p, lr=0.1)):
        w = rg.nn.Parameter(rg.tensor([1.0, -2.0], dtype="float64"))
        v = rg.nn.Parameter(rg.tensor([1.0, -2.0], dtype="float64"))
        by_closure, by_grads = make([w]), make([v])
        for _ in range(3):
            loss = by_closure.step(lambda w=w: (w**3).sum())
            expected = (v**3).sum()
            by_grads.step(expected.backward())
            assert float(loss) == float(expected)
            assert w.tolist() == v.tolist()
        pair = by_closure.step(lambda w=w: ((w**2).sum(), ((w**2).sum() * 0.0).backward()))
        assert isinstance(pair, rg.Tensor)


def test_a_torch_closure_left_unported_gets_an_error_saying_what_to_write():
    w = rg.nn.Parameter(rg.tensor([1.0, 2.0], dtype="float64"))
    for opt in (optim.LBFGS([w]), optim.SGD([w], lr=0.1)):

        def closure():
            loss = (w * w).sum()
            loss.backward()  # the gradients thrown away, as torch's line reads
            return loss

        with pytest.raises(rg.AutodiffError, match=r"grads = loss.backward\(\)"):
            opt.step(closure)
        with pytest.raises(rg.InvalidArgumentError, match="closure must return"):
            opt.step(lambda: 3.0)
    assert w.tolist() == [1.0, 2.0]


def test_lbfgs_refuses_what_torch_refuses():
    w = rg.nn.Parameter(rg.zeros(2))
    with pytest.raises(rg.InvalidArgumentError, match="parameter groups"):
        optim.LBFGS([{"params": [w]}, {"params": [rg.nn.Parameter(rg.zeros(1))]}])
    with pytest.raises(rg.InvalidArgumentError, match="strong_wolfe"):
        optim.LBFGS([w], line_search_fn="backtracking")
    with pytest.raises(rg.AutodiffError, match="closure"):
        optim.LBFGS([w]).step()
