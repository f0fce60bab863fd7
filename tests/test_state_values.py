"""The values of ``Module.state_dict()`` in the idioms real training code writes against
torch's tensors (nn/modules/state_value.py): copies of the best model, casts, counts, and a
timm-style EMA that writes into another model through them."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

import retrograd as rg


def _pair():
    """A small model in both libraries, the same weights."""
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ours = rg.nn.Sequential(rg.nn.Linear(4, 8), rg.nn.Tanh(), rg.nn.Linear(8, 2))
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _train(model, lib, optimizer, steps: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = rng.standard_normal((16, 4)).astype(np.float32)
        y = rng.standard_normal((16, 2)).astype(np.float32)
        loss = ((model(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
        if lib is torch:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        else:
            optimizer.step(loss.backward())


def test_the_best_model_copy_idiom_restores_as_torch_does():
    ours, theirs = _pair()
    opt_ours = rg.optim.SGD(ours.parameters(), lr=0.1)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.1)
    best = {}
    for model, lib, opt in ((ours, rg, opt_ours), (theirs, torch, opt_theirs)):
        _train(model, lib, opt, 3, seed=1)
        best[lib] = {k: v.cpu().clone() for k, v in model.state_dict().items()}
        _train(model, lib, opt, 3, seed=2)  # moves on; the copy must not
        model.load_state_dict(best[lib])
    for (name, ours_value), theirs_value in zip(
        ours.state_dict().items(), theirs.state_dict().values(), strict=True
    ):
        np.testing.assert_allclose(ours_value, theirs_value.numpy(), rtol=1e-6, err_msg=name)
        np.testing.assert_array_equal(best[rg][name], ours_value)


def test_a_timm_style_ema_writes_into_the_ema_model_as_torch_does():
    ours, theirs = _pair()
    ema_ours, ema_theirs = copy.deepcopy(ours), copy.deepcopy(theirs)
    opt_ours = rg.optim.Adam(ours.parameters(), lr=0.01)
    opt_theirs = torch.optim.Adam(theirs.parameters(), lr=0.01)
    decay = 0.9
    for step in range(4):
        _train(ours, rg, opt_ours, 1, seed=step)
        _train(theirs, torch, opt_theirs, 1, seed=step)
        with torch.no_grad():  # timm's ModelEmaV2._update
            for ema_v, model_v in zip(
                ema_theirs.state_dict().values(), theirs.state_dict().values(), strict=True
            ):
                ema_v.copy_(decay * ema_v + (1.0 - decay) * model_v)
        with rg.no_grad():
            for ema_v, model_v in zip(
                ema_ours.state_dict().values(), ours.state_dict().values(), strict=True
            ):
                ema_v.copy_(decay * ema_v + (1.0 - decay) * model_v)
    for p_ours, p_theirs in zip(ema_ours.parameters(), ema_theirs.parameters(), strict=True):
        np.testing.assert_allclose(p_ours.numpy(), p_theirs.detach().numpy(), rtol=1e-5)
    # the EMA moved away from its start (the writes reached the parameters)
    assert not np.allclose(ema_ours[0].weight.numpy(), ours[0].weight.numpy())


@pytest.mark.parametrize(
    "write",
    [
        lambda v: v.mul_(0.5),
        lambda v: v.add_(1.0, alpha=2.0),
        lambda v: v.sub_(torch.ones(v.shape)),
        lambda v: v.div_(4.0),
        lambda v: v.lerp_(v * 0.0, 0.25),
        lambda v: v.zero_(),
        lambda v: v.fill_(3.0),
    ],
)
def test_in_place_writes_reach_the_parameter_as_torch_s(write):
    ours, theirs = _pair()
    with torch.no_grad():
        write(theirs.state_dict()["0.weight"])
    write(ours.state_dict()["0.weight"])
    np.testing.assert_allclose(ours[0].weight.numpy(), theirs[0].weight.detach().numpy(), rtol=1e-6)


def test_reads_casts_and_counts_as_torch_s():
    ours, theirs = _pair()
    for (name, v), t in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        assert v.numel() == t.numel() and v.dim() == t.dim() and v.shape == tuple(t.shape)
        assert v.is_floating_point() == t.is_floating_point()
        assert v.float().dtype == np.float32 and v.double().dtype == np.float64, name
        assert v.to(torch.float64).dtype == np.float64 and v.to("cpu") is v
        assert v.to(rg.float16).dtype == np.float16
        np.testing.assert_array_equal(torch.from_numpy(v.detach().numpy()), t)
    assert sum(v.numel() for v in ours.state_dict().values()) == sum(
        p.numel() for p in theirs.parameters()
    )


def test_copies_and_results_write_nowhere_else():
    ours, _ = _pair()
    before = ours[0].weight.numpy().copy()
    state = ours.state_dict()
    for detached in (
        state["0.weight"] * 1.0,
        state["0.weight"][:],
        copy.deepcopy(state)["0.weight"],
        pickle.loads(pickle.dumps(state))["0.weight"],
    ):
        if hasattr(detached, "copy_"):
            detached.copy_(np.zeros(detached.shape))
        else:
            assert type(detached) is np.ndarray
    state["0.weight"].clone()[:] = 7.0
    np.testing.assert_array_equal(ours[0].weight.numpy(), before)


def test_a_write_of_the_wrong_shape_names_the_op_and_changes_nothing():
    ours, _ = _pair()
    value = ours.state_dict()["0.bias"]
    before = ours[0].bias.numpy().copy()
    with pytest.raises(rg.ShapeError, match=r"copy_"):
        value.copy_(np.ones((3, 3)))
    with pytest.raises(rg.DTypeError, match=r"fill_"):
        value.fill_("a")
    np.testing.assert_array_equal(ours[0].bias.numpy(), before)
    np.testing.assert_array_equal(value, before)
