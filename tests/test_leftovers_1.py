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
    with pytest.raises(errors.InvalidArgumentError, match="tried to step"):
        for _ in range(5):
            chain.step()
            rates.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(rates, torch_rates, rtol=1e-12)
    # torch's composite keeps the rate of its last good step (get_last_lr); here the rate,
    # the momentum OneCycleLR cycles and every epoch are those of that step too
    np.testing.assert_allclose(chain.get_last_lr(), tchain.get_last_lr(), rtol=1e-12)
    before = (
        chain.last_epoch,
        [m.last_epoch for m in members],
        dict((k, v) for k, v in opt.param_groups[0].items() if k != "params"),
    )
    for _ in range(2):  # it fails the same way again, still changing nothing
        with pytest.raises(errors.InvalidArgumentError, match="tried to step"):
            chain.step()
    after = (
        chain.last_epoch,
        [m.last_epoch for m in members],
        dict((k, v) for k, v in opt.param_groups[0].items() if k != "params"),
    )
    assert after == before
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
