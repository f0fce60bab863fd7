"""Round 70's defects in the optimizers, each against torch.

- ``NAdam``'s ``mu_product`` of a 0-d parameter, loaded from torch's state dict (a 0-d tensor
  there, cast to the parameter's dtype by torch's loads; retrograd keeps it as a tensor: for a
  0-d parameter it may be a buffer), was multiplied in float32 at the next steps where torch
  multiplies it in the parameter's dtype: a float64 run parted from torch's by 1e-9;
- ``SparseAdam`` kept its step count as a float32 tensor, torch as a Python int;
- a group added after ``load_state_dict`` lacked the ``differentiable`` (False) torch's load
  gives the defaults of ``SparseAdam`` (its ``__setstate__``);
- ``LBFGS.add_param_group`` refused a second group with a ``ValueError``: torch takes it and
  its next step asserts (an ``AssertionError``), as retrograd's now does;
- ``OneCycleLR(total_steps="10")`` and ``ReduceLROnPlateau`` with a ``mode`` or
  ``threshold_mode`` that is not a str raised ``ValueError`` where torch raises ``TypeError``;
- a Python ``ZeroDivisionError`` inside a guarded call (``OneCycleLR`` whose phase has no
  steps) became a plain ``InvalidArgumentError``: torch's same arithmetic raises
  ``ZeroDivisionError``, which ``DivisionByZeroError`` also is; a ``KeyError`` there
  (``OneCycleLR`` stepping a group added after it, which has no ``max_lr``) likewise, now a
  ``KeyMismatchError``;
- ``ReduceLROnPlateau`` given one ``min_lr`` per group, reducing after a group was added,
  raised a ``ValueError`` where torch raises ``RuntimeError`` (``OptimizerGroupsError`` is
  both now);
- ``Adam``/``AdamW`` took a tensor ``lr`` with ``foreach=True`` and one of several elements,
  which torch refuses (``ValueError``);
- a schedule resuming (``last_epoch >= 0``) over groups without ``initial_lr`` raised a
  ``ValueError``; torch's ``KeyError``.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _torch_state_as_retrograd(state_dict):
    def convert(value):
        if isinstance(value, torch.Tensor):
            return rg.tensor(value.detach().numpy().copy())
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return convert(copy.deepcopy(state_dict))


def test_nadam_multiplies_a_loaded_0d_mu_product_in_the_parameter_s_dtype():
    start = np.float64(0.7)
    theirs = torch.nn.Parameter(torch.tensor(start))
    optimizer = torch.optim.NAdam([theirs], lr=0.05, betas=(0.9, 0.99))
    for _ in range(2):
        optimizer.zero_grad()
        (theirs.sin() * 3).backward()
        optimizer.step()
    # torch's load casts mu_product to the parameter's dtype, and later steps multiply in it
    optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    assert optimizer.state[theirs]["mu_product"].dtype == torch.float64
    saved = _torch_state_as_retrograd(optimizer.state_dict())
    ours = rg.nn.Parameter(rg.tensor(theirs.detach().numpy().copy()))
    ours_optimizer = rg.optim.NAdam([ours], lr=0.05, betas=(0.9, 0.99))
    ours_optimizer.load_state_dict(saved)
    for _ in range(4):
        optimizer.zero_grad()
        (theirs.sin() * 3).backward()
        optimizer.step()
        ours_optimizer.step((ours.sin() * 3).backward())
    expected = float(optimizer.state_dict()["state"][0]["mu_product"])
    got = float(ours_optimizer.state_dict()["state"][0]["mu_product"])
    assert got == pytest.approx(expected, rel=1e-14)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-14)


def test_sparse_adam_counts_its_steps_in_an_int_as_torch():
    """torch's SparseAdam keeps ``state["step"]`` a Python int (the other optimizers' is a 0-d
    float tensor); retrograd's was a float32 tensor, in the state and its state dict."""
    start = np.random.default_rng(70).standard_normal((5, 3))
    index = np.array([1, 3, 3, 0])
    theirs = torch.nn.Parameter(torch.tensor(start))
    ours = rg.nn.Parameter(rg.tensor(start))
    optimizer = torch.optim.SparseAdam([theirs], lr=0.1)
    ours_optimizer = rg.optim.SparseAdam([ours], lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.embedding(
            torch.tensor(index), theirs, sparse=True
        ).sin().sum().backward()
        optimizer.step()
        rows = rg.nn.functional.embedding(rg.tensor(index), ours)
        ours_optimizer.step(rows.sin().sum().backward())
    expected = optimizer.state_dict()["state"][0]["step"]
    assert type(expected) is int
    for step in (
        ours_optimizer.state[ours]["step"],
        ours_optimizer.state_dict()["state"][0]["step"],
    ):
        assert type(step) is int and step == expected == 3
    fresh = rg.optim.SparseAdam([ours], lr=0.1)
    fresh.load_state_dict(copy.deepcopy(ours_optimizer.state_dict()))
    optimizer.zero_grad()
    torch.nn.functional.embedding(torch.tensor(index), theirs, sparse=True).sin().sum().backward()
    optimizer.step()
    fresh.step(rg.nn.functional.embedding(rg.tensor(index), ours).sin().sum().backward())
    assert fresh.state[ours]["step"] == 4 and type(fresh.state[ours]["step"]) is int
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-13)


@pytest.mark.parametrize("name", ["SparseAdam", "Adam"])
def test_a_group_added_after_a_load_takes_torch_s_differentiable_default(name):
    """torch's load_state_dict gives the defaults a ``differentiable`` (False) where they have
    none (its ``__setstate__``): SparseAdam's group added after a load has the key in torch,
    and had not in retrograd."""
    keys = []
    for lib in (torch, rg):
        first, second = (lib.nn.Parameter(lib.tensor(np.ones((3, 2)))) for _ in range(2))
        optimizer = getattr(lib.optim, name)([first], lr=0.1)
        optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
        optimizer.add_param_group({"params": [second]})
        keys.append([sorted(g) for g in optimizer.state_dict()["param_groups"]])
        keys.append(sorted(optimizer.defaults))
    assert keys[2:] == keys[:2]


def test_lbfgs_takes_an_added_group_and_refuses_the_step_with_torch_s_assertion():
    """torch's LBFGS.add_param_group takes a second group and its next step asserts "Expected
    exactly one param_group"; retrograd refused the group itself, with a ValueError."""
    outcomes = []
    for lib in (torch, rg):
        first, second = (lib.nn.Parameter(lib.tensor(np.ones(2))) for _ in range(2))
        optimizer = lib.optim.LBFGS([first])
        optimizer.add_param_group({"params": [second]})
        assert len(optimizer.state_dict()["param_groups"]) == 2

        def closure(first=first, lib=lib, optimizer=optimizer):
            loss = (first**2).sum()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                return loss
            return loss, loss.backward()

        with pytest.raises(AssertionError, match="Expected exactly one param_group") as error:
            optimizer.step(closure)
        outcomes.append(error.value)
    assert isinstance(outcomes[1], rg.errors.InvalidArgumentError)


def _sgd(lib):
    return lib.optim.SGD([lib.nn.Parameter(lib.tensor(np.ones(2)))], lr=0.1, momentum=0.9)


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("OneCycleLR", {"max_lr": 0.1, "total_steps": "10"}),
        ("ReduceLROnPlateau", {"threshold_mode": ["rel"]}),
        ("ReduceLROnPlateau", {"mode": ["min"]}),
        ("ReduceLROnPlateau", {"mode": 1.0}),
        ("ReduceLROnPlateau", {"threshold_mode": None}),
    ],
)
def test_schedule_counts_and_modes_of_the_wrong_type_are_torch_s_type_errors(kind, kwargs):
    """torch compares OneCycleLR's counts with 0 and looks the plateau modes up in a set before
    it checks them: a str count or a list mode is its TypeError; retrograd's were ValueErrors."""
    for lib in (torch, rg):
        with pytest.raises(TypeError):
            getattr(lib.optim.lr_scheduler, kind)(_sgd(lib), **kwargs)


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("OneCycleLR", {"max_lr": 0.1, "total_steps": 2.5}),
        ("OneCycleLR", {"max_lr": 0.1, "total_steps": 0}),
        ("OneCycleLR", {"max_lr": 0.1, "epochs": "2", "steps_per_epoch": 3}),
        ("ReduceLROnPlateau", {"threshold_mode": "relative"}),
    ],
)
def test_schedule_counts_and_modes_of_the_right_type_stay_value_errors(kind, kwargs):
    for lib in (torch, rg):
        with pytest.raises(ValueError):
            getattr(lib.optim.lr_scheduler, kind)(_sgd(lib), **kwargs)


def test_a_one_cycle_whose_phase_has_no_steps_divides_by_zero_as_torch():
    """OneCycleLR with three phases over 4 steps at pct_start 0.25: the first phase ends at
    step 0 and torch's annealing divides by its length, 0 (``ZeroDivisionError``); retrograd's
    guard made that a plain ValueError (``InvalidArgumentError``)."""
    for lib in (torch, rg):
        with pytest.raises(ZeroDivisionError):
            lib.optim.lr_scheduler.OneCycleLR(
                _sgd(lib), max_lr=0.1, total_steps=4, pct_start=0.25, three_phase=True
            )


def _with_added_group(lib, make, steps):
    optimizer = _sgd(lib)
    schedule = make(lib, optimizer)
    schedule.step(*steps[0])
    optimizer.add_param_group({"params": [lib.nn.Parameter(lib.tensor(np.ones(2)))]})
    for args in steps[1:]:
        schedule.step(*args)


def test_one_cycle_with_a_group_added_later_is_torch_s_key_error():
    """torch's OneCycleLR reads the ``initial_lr`` it wrote into each group: a group added later
    has none (``KeyError``); retrograd's guard made it a plain ValueError."""

    def make(lib, optimizer):
        return lib.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=10)

    for lib in (torch, rg):
        with pytest.raises(KeyError, match=r"initial_lr|max_lr"):
            _with_added_group(lib, make, [(), ()])


def test_plateau_with_per_group_min_lrs_and_a_group_added_is_torch_s_runtime_error():
    def make(lib, optimizer):
        return lib.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, min_lr=[0.0])

    for lib in (torch, rg):
        with pytest.raises(RuntimeError, match=r"param groups|param_groups"):
            _with_added_group(lib, make, [(1.0,), (2.0,), (3.0,)])


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_refuses_a_tensor_lr_with_foreach_as_torch(name):
    """torch's Adam refuses a tensor lr with ``foreach=True`` (unless capturable) and a tensor
    lr of more than one element; retrograd took both."""
    for lib in (torch, rg):
        params = [lib.nn.Parameter(lib.tensor(np.ones(2)))]
        with pytest.raises(ValueError, match="lr as a Tensor is not supported"):
            getattr(lib.optim, name)(params, lr=lib.tensor(0.01), foreach=True)
        with pytest.raises(ValueError, match="1-element"):
            getattr(lib.optim, name)(params, lr=lib.tensor([0.01, 0.02]))


def test_resuming_a_schedule_without_initial_lr_is_torch_s_key_error():
    for lib in (torch, rg):
        with pytest.raises(KeyError, match="initial_lr"):
            lib.optim.lr_scheduler.StepLR(_sgd(lib), step_size=2, last_epoch=3)
