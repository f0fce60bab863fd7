"""Regressions found by round 48's random training loops (tests/test_random_training_48.py),
each compared with torch and failing before its fix."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import retrograd as rg


def _parameters(lib, *rows, dtype="float64"):
    return [lib.nn.Parameter(lib.tensor(np.array(r, dtype=dtype))) for r in rows]


def _step(lib, optimizer, params, used):
    """One step on a quadratic of the parameters ``used`` (indices)."""
    loss = sum((params[k] * params[k]).sum() + 0.3 * params[k].sum() for k in used)
    if lib is torch:
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        optimizer.step(loss.backward())


def _state(lib, optimizer) -> dict:
    """The optimizer's state dict's state as NumPy values."""
    state = optimizer.state_dict()["state"]
    convert = (lambda v: v.numpy().copy()) if lib is torch else np.asarray
    return {n: {k: convert(v) for k, v in entry.items()} for n, entry in state.items()}


def _same_state(theirs: dict, ours: dict) -> None:
    assert list(theirs) == list(ours)
    for number, entry in theirs.items():
        assert sorted(entry) == sorted(ours[number])
        for key, value in entry.items():
            assert value.dtype == ours[number][key].dtype, (number, key)
            np.testing.assert_array_equal(ours[number][key], value)


def test_adagrad_gives_every_parameter_its_state_at_construction_as_torchs():
    # torch's constructor makes step 0 and the accumulator for every parameter of its
    # groups, a frozen one too, from the constructor's initial_accumulator_value (a group's
    # own is not read); retrograd's state was empty until a parameter's first step, and its
    # accumulator started from the group's value
    states = {}
    for lib in (torch, rg):
        p, frozen, late = _parameters(lib, [1.0, -2.0], [0.5, 3.0], [2.0])
        frozen.requires_grad_(False)
        optimizer = lib.optim.Adagrad(
            [{"params": [p, frozen], "initial_accumulator_value": 1.0}],
            lr=0.1,
            initial_accumulator_value=0.5,
        )
        before = _state(lib, optimizer)
        _step(lib, optimizer, [p], [0])
        optimizer.add_param_group({"params": [late], "initial_accumulator_value": 2.0})
        _step(lib, optimizer, [p, frozen, late], [0, 2])  # the added one: lazily, torch's way
        states[lib] = before, _state(lib, optimizer)
    for theirs, ours in zip(states[torch], states[rg]):
        _same_state(theirs, ours)


def test_adagrad_complex_accumulator_starts_as_torchs():
    states = {}
    for lib in (torch, rg):
        (c,) = _parameters(lib, [1 + 2j, -1j], dtype="complex128")
        optimizer = lib.optim.Adagrad([c], lr=0.1, initial_accumulator_value=0.5)
        states[lib] = _state(lib, optimizer), c
    _same_state(states[torch][0], states[rg][0])


def test_nadam_resumed_in_float64_goes_on_as_torchs_resumed_run():
    # torch's load_state_dict casts the float32 0-d mu_product to the float64 parameter's
    # dtype, and its later steps multiply it in float64 (leaving its own uninterrupted run by
    # 1e-10 here); retrograd kept multiplying in float32, so its resumed run was torch's
    # uninterrupted one and not torch's resumed one
    runs = {}
    for lib in (torch, rg):
        (p,) = _parameters(lib, [1.0, -2.0, 0.5])
        optimizer, values = lib.optim.NAdam([p], lr=0.1, momentum_decay=0.01), []
        for step in range(6):
            if step == 2:
                saved = copy.deepcopy(optimizer.state_dict())
                optimizer = lib.optim.NAdam([p], lr=0.1, momentum_decay=0.01)
                optimizer.load_state_dict(saved)
            _step(lib, optimizer, [p], [0])
            values.append(np.array(p.detach().numpy(), copy=True))
        runs[lib] = np.array(values)
    np.testing.assert_array_equal(runs[rg], runs[torch])


def _rates(lib, make_schedule, steps=5):
    """Each group's rate after each step of a schedule made over two groups, a third added
    after it was made; and the groups' keys at the end."""
    params = _parameters(lib, [1.0], [2.0], [3.0])
    optimizer = lib.optim.SGD([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.2}], lr=0.1)
    schedule = make_schedule(lib.optim.lr_scheduler, optimizer)
    optimizer.add_param_group({"params": [params[2]], "lr": 0.3})
    rates = []
    for _ in range(steps):
        schedule.step()
        rates.append([g["lr"] for g in optimizer.param_groups])
    return rates, [sorted(k for k in g if k != "params") for g in optimizer.param_groups]


@pytest.mark.parametrize(
    "make",
    [
        lambda s, o: s.MultiStepLR(o, [1, 3, 3], gamma=0.3),
        lambda s, o: s.ConstantLR(o, factor=0.3, total_iters=2),
        lambda s, o: s.ExponentialLR(o, gamma=0.7),
        lambda s, o: s.ChainedScheduler([s.MultiStepLR(o, [2], 0.3), s.ConstantLR(o, 0.7, 3)]),
    ],
    ids=["MultiStepLR", "ConstantLR", "ExponentialLR", "ChainedScheduler"],
)
def test_a_group_added_after_a_schedule_was_made_gains_no_initial_lr_as_in_torch(make):
    # torch's recursive steps scale the added group's rate without giving it an initial_lr;
    # retrograd's first step set one in its param_groups (and MultiStepLR's and ConstantLR's
    # steps were ratios of closed forms, an ulp from torch's current * gamma ** n)
    (theirs, their_keys), (ours, our_keys) = _rates(torch, make), _rates(rg, make)
    assert our_keys == their_keys
    assert ours == theirs  # bit for bit


@pytest.mark.parametrize(
    "groups",
    [
        [[("a", 0)], []],  # an empty group added to an optimizer of named groups
        [[], [("a", 0)]],  # a named group added to one holding an empty group
    ],
    ids=["empty_into_named", "named_after_empty"],
)
def test_an_empty_group_has_no_names_as_in_torch(groups):
    # torch checks the names of a new group against every group, and an empty group has
    # none: retrograd exempted empty groups and compared with the first group only
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.ones(2))
        first, second = ([(n, p) for n, _ in g] for g in groups)
        expected = ValueError if lib is torch else rg.InvalidArgumentError
        with pytest.raises(expected, match="with/without names"):
            optimizer = lib.optim.SGD([{"params": first}], lr=0.1)
            optimizer.add_param_group({"params": second})
    # an empty group joins an optimizer of unnamed groups, in both
    for lib in (torch, rg):
        optimizer = lib.optim.SGD([lib.nn.Parameter(lib.ones(2))], lr=0.1)
        optimizer.add_param_group({"params": []})
        assert [len(g["params"]) for g in optimizer.param_groups] == [1, 0]


@pytest.mark.parametrize("set_to_none", [False, True])
def test_module_zero_grad_keeps_or_drops_gradients_as_optimizer_zero_grad(set_to_none):
    # torch's model.zero_grad(set_to_none=False) leaves a zero .grad on every parameter that
    # had one, so a later step in which it gets none still steps it (momentum, weight
    # decay); retrograd's Module.zero_grad did nothing, leaving such a parameter in place
    runs = {}
    for lib in (torch, rg):
        model = lib.nn.Linear(2, 2).double()
        model.extra = lib.nn.Parameter(lib.tensor(np.array([1.0, -1.0])))
        model.load_state_dict({"weight": np.array([[0.5, -0.3], [0.2, 0.1]]),
                               "bias": np.array([0.1, -0.2]),
                               "extra": np.array([1.0, -1.0])}
                              if lib is rg else
                              {"weight": torch.tensor([[0.5, -0.3], [0.2, 0.1]]).double(),
                               "bias": torch.tensor([0.1, -0.2]).double(),
                               "extra": torch.tensor([1.0, -1.0]).double()})  # fmt: skip
        optimizer = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        x = lib.tensor(np.array([[1.0, 2.0]]))
        for step in range(4):
            model.zero_grad(set_to_none=set_to_none)
            loss = model(x).sum()
            if step == 0:  # the extra parameter has a gradient in the first step only
                loss = loss + (model.extra * model.extra).sum()
            if lib is torch:
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
        runs[lib] = np.array(model.extra.detach().numpy(), copy=True)
    np.testing.assert_allclose(runs[rg], runs[torch], rtol=1e-14)


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("MultiStepLR", {"milestones": [1, 3], "gamma": 0.5}),
        ("ConstantLR", {"factor": 0.5, "total_iters": 3}),
        ("StepLR", {"step_size": 3, "gamma": 0.5}),
        ("CosineAnnealingLR", {"T_max": 5, "eta_min": 0.001}),
        ("ExponentialLR", {"gamma": 0.9}),
    ],
)
def test_a_schedule_resumed_with_last_epoch_steps_its_constructor_as_torchs(kind, kwargs):
    # the script's resume: the optimizer's state loaded, then the schedule made with
    # last_epoch=2. torch's constructor steps by its get_lr: MultiStepLR, ConstantLR and
    # StepLR scale once more at a milestone (epoch 3 here), the others keep the restored
    # rate (here one set by hand before the save). retrograd set the closed form at epoch 3
    runs = {}
    for lib in (torch, rg):
        (p,) = _parameters(lib, [1.0])
        schedules = lib.optim.lr_scheduler
        optimizer = lib.optim.SGD([p], lr=0.1, momentum=0.9)
        schedule = getattr(schedules, kind)(optimizer, **kwargs)
        for _ in range(3):
            schedule.step()
        optimizer.param_groups[0]["lr"] *= 0.7
        saved = copy.deepcopy(optimizer.state_dict())
        optimizer = lib.optim.SGD([p], lr=0.1, momentum=0.9)
        optimizer.load_state_dict(saved)
        schedule = getattr(schedules, kind)(optimizer, last_epoch=2, **kwargs)
        rates = [optimizer.param_groups[0]["lr"]]
        for _ in range(4):
            schedule.step()
            rates.append(optimizer.param_groups[0]["lr"])
        runs[lib] = rates, schedule.get_last_lr(), schedule.last_epoch, schedule._step_count
    (theirs, their_last, *their_counts), (ours, our_last, *our_counts) = runs[torch], runs[rg]
    np.testing.assert_allclose(ours, theirs, rtol=1e-15)
    np.testing.assert_allclose(our_last, their_last, rtol=1e-15)
    assert our_counts == their_counts
