"""optim.swa_utils against torch.optim.swa_utils in float64: AveragedModel's averages (EMA and
SWA; avg_fn and multi_avg_fn; use_buffers True and False, on a model with batch norm) after
the same sequence of weights, SWALR's learning rates step by step, and update_bn's running
statistics."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.errors import InvalidArgumentError
from retrograd.optim import swa_utils

torch = pytest.importorskip("torch")
TS = torch.optim.swa_utils


def make_pair(seed: int = 0):
    """The same model (Linear, BatchNorm1d, ReLU, Linear) in float64, ours and torch's."""
    ours = nn.Sequential(
        nn.Linear(3, 4, dtype="float64"),
        nn.BatchNorm1d(4, dtype="float64"),
        nn.ReLU(),
        nn.Linear(4, 2, dtype="float64"),
    )
    theirs = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2)
    ).double()
    set_weights(ours, theirs, np.random.default_rng(seed))
    return ours, theirs


def set_weights(ours, theirs, rng) -> None:
    """New random parameters in both models, then one training forward of the same batch
    (so the batch norm buffers move too)."""
    state = {name: rng.standard_normal(tuple(p.shape)) for name, p in theirs.named_parameters()}
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            p.copy_(torch.from_numpy(state[name]))
    # as an optimizer step writes them: in place, the Parameter objects kept
    ours.load_state_dict({name: rg.tensor(value) for name, value in state.items()}, strict=False)
    x = rng.standard_normal((6, 3))
    ours.train()
    theirs.train()
    ours(rg.tensor(x, dtype="float64"))
    theirs(torch.from_numpy(x))


def assert_same_state(ours, theirs, tolerance: float = 1e-12) -> None:
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(reference)
    for key, value in reference.items():
        np.testing.assert_allclose(
            np.asarray(mine[key], dtype=np.float64),
            value.double().numpy(),
            rtol=tolerance,
            atol=tolerance,
            err_msg=key,
        )


def lerp_in_place(averaged_list, current_list, num_averaged) -> None:
    """A user's multi_avg_fn written as for torch: in-place ops on the tensors it is given
    (the same code runs on both libraries)."""
    for averaged, current in zip(averaged_list, current_list):
        averaged.lerp_(current, 0.25)


AVERAGES = {
    "swa": ({}, {}),
    "ema": (
        {"multi_avg_fn": swa_utils.get_ema_multi_avg_fn(0.9)},
        {"multi_avg_fn": TS.get_ema_multi_avg_fn(0.9)},
    ),
    "ema_single": (
        {"avg_fn": swa_utils.get_ema_avg_fn(0.8)},
        {"avg_fn": TS.get_ema_avg_fn(0.8)},
    ),
    "swa_multi": (
        {"multi_avg_fn": swa_utils.get_swa_multi_avg_fn()},
        {"multi_avg_fn": TS.get_swa_multi_avg_fn()},
    ),
    "swa_single": ({"avg_fn": swa_utils.get_swa_avg_fn()}, {"avg_fn": TS.get_swa_avg_fn()}),
    "user_in_place": ({"multi_avg_fn": lerp_in_place}, {"multi_avg_fn": lerp_in_place}),
}


# torch's get_swa_multi_avg_fn fails on int buffers (addcdiv of int tensors), which batch
# norm's num_batches_tracked is, as lerp_ does: those pairs are left out (ours averages and
# truncates)
CASES = [
    (kind, use_buffers)
    for kind in AVERAGES
    for use_buffers in (False, True)
    if not use_buffers or kind not in ("swa_multi", "user_in_place")
]


@pytest.mark.parametrize(("kind", "use_buffers"), CASES)
def test_averaged_model_matches_torch(kind, use_buffers):
    ours_kwargs, torch_kwargs = AVERAGES[kind]
    model, torch_model = make_pair()
    averaged = swa_utils.AveragedModel(model, use_buffers=use_buffers, **ours_kwargs)
    torch_averaged = TS.AveragedModel(torch_model, use_buffers=use_buffers, **torch_kwargs)
    rng = np.random.default_rng(1)
    for step in range(4):
        averaged.update_parameters(model)
        torch_averaged.update_parameters(torch_model)
        assert int(averaged.n_averaged.item()) == step + 1
        # torch's get_swa_multi_avg_fn weighs by 1 / (n_averaged + 1) computed from the int
        # tensor, a float32 (1/3 to 7 digits); ours is the exact float
        assert_same_state(averaged, torch_averaged, 1e-7 if kind == "swa_multi" else 1e-12)
        set_weights(model, torch_model, rng)
    # the copy's parameters are the same objects as before, distinct from the model's
    assert all(a is not b for a, b in zip(averaged.parameters(), model.parameters()))
    x = rng.standard_normal((5, 3))
    averaged.eval()
    torch_averaged.eval()
    np.testing.assert_allclose(
        np.asarray(averaged(rg.tensor(x, dtype="float64"))),
        torch_averaged(torch.from_numpy(x)).detach().numpy(),
        rtol=1e-6 if kind == "swa_multi" else 1e-10,
        atol=1e-12,
    )


def test_averaged_model_structure():
    model, _ = make_pair()
    averaged = swa_utils.AveragedModel(model)
    assert isinstance(averaged.module, nn.Sequential)
    assert averaged.module is not model
    assert sorted(averaged.state_dict())[-1] == "n_averaged"
    assert "module.1.running_mean" in averaged.state_dict()
    before = [np.asarray(p).copy() for p in averaged.parameters()]
    parameters = list(averaged.parameters())
    set_weights(model, _torch_twin(), np.random.default_rng(3))
    # the model moved; the copy did not (a deep copy), until it is updated
    for p, old in zip(averaged.parameters(), before):
        np.testing.assert_array_equal(np.asarray(p), old)
    averaged.update_parameters(model)
    assert all(a is b for a, b in zip(averaged.parameters(), parameters, strict=True))
    for p, q in zip(averaged.parameters(), model.parameters()):
        np.testing.assert_array_equal(np.asarray(p), np.asarray(q))
        assert p.is_require_grad()
    on_cpu = swa_utils.AveragedModel(model, device="cpu")
    assert on_cpu.n_averaged.device == rg.device("cpu")
    assert on_cpu.n_averaged.dtype == "int64" and int(on_cpu.n_averaged.item()) == 0
    with pytest.raises(InvalidArgumentError, match="only one of avg_fn and multi_avg_fn"):
        swa_utils.AveragedModel(
            model, avg_fn=swa_utils.get_swa_avg_fn(), multi_avg_fn=swa_utils.get_swa_multi_avg_fn()
        )
    with pytest.raises(InvalidArgumentError, match="decay"):
        swa_utils.get_ema_multi_avg_fn(1.5)
    with pytest.raises(InvalidArgumentError, match="decay"):
        swa_utils.get_ema_avg_fn(-0.1)


def _torch_twin():
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2)
    ).double()


def test_averaged_model_trains_nothing_through_the_copy():
    """An EMA kept along real training steps: the averaged model's forward is differentiable
    (its parameters stay leaves), and the model's optimizer is untouched by it."""
    model, _ = make_pair()
    ema = swa_utils.AveragedModel(model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.5))
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    x = rg.tensor(np.random.default_rng(0).standard_normal((6, 3)), dtype="float64")
    expected = {name: np.asarray(p).copy() for name, p in model.named_parameters()}
    ema.update_parameters(model)
    for _ in range(3):
        optimizer.step(model(x).square().sum().backward())
        ema.update_parameters(model)
        for name, p in model.named_parameters():
            expected[name] = 0.5 * expected[name] + 0.5 * np.asarray(p)
    for name, p in ema.module.named_parameters():
        np.testing.assert_allclose(np.asarray(p), expected[name], rtol=1e-12, err_msg=name)
    grads = ema(x).sum().backward()
    assert ema.module[0].weight.grad(grads) is not None


@pytest.mark.parametrize(
    ("swa_lr", "anneal_epochs", "strategy"),
    [(0.05, 10, "cos"), (0.05, 5, "linear"), ([0.02, 0.3], 4, "cos"), (0.01, 0, "linear")],
)
def test_swalr_matches_torch(swa_lr, anneal_epochs, strategy):
    first, second = nn.Linear(2, 2), nn.Linear(2, 1)
    ours_groups = [
        {"params": list(first.parameters()), "lr": 0.1},
        {"params": list(second.parameters()), "lr": 0.03},
    ]
    torch_groups = [
        {"params": [torch.nn.Parameter(torch.zeros(2))], "lr": 0.1},
        {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.03},
    ]
    ours_optimizer = optim.SGD(ours_groups, lr=0.1)
    torch_optimizer = torch.optim.SGD(torch_groups, lr=0.1)
    ours = swa_utils.SWALR(
        ours_optimizer, swa_lr, anneal_epochs=anneal_epochs, anneal_strategy=strategy
    )
    theirs = TS.SWALR(
        torch_optimizer, swa_lr, anneal_epochs=anneal_epochs, anneal_strategy=strategy
    )
    for _ in range(15):
        np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-12)
        torch_optimizer.step()
        theirs.step()
        ours.step()
    np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-12)


def test_swalr_after_another_schedule_matches_torch():
    """SWALR takes over from the learning rate another schedule left (torch's recovery of
    the starting rate from the current one)."""
    p = nn.Linear(2, 1)
    ours_optimizer = optim.SGD(p.parameters(), lr=0.1)
    torch_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    ours_decay = optim.ExponentialLR(ours_optimizer, gamma=0.7)
    torch_decay = torch.optim.lr_scheduler.ExponentialLR(torch_optimizer, gamma=0.7)
    for _ in range(3):
        torch_optimizer.step()
        torch_decay.step()
        ours_decay.step()
    ours = swa_utils.SWALR(ours_optimizer, swa_lr=0.01, anneal_epochs=3)
    theirs = TS.SWALR(torch_optimizer, swa_lr=0.01, anneal_epochs=3)
    for _ in range(6):
        np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-12)
        torch_optimizer.step()
        theirs.step()
        ours.step()


def test_swalr_state_dict_resumes():
    """The schedule's and the optimizer's states saved mid-annealing resume the same rates
    (the step count is in the schedule's state, the current rate in the optimizer's)."""
    optimizer = optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)
    schedule = swa_utils.SWALR(optimizer, 0.01, anneal_epochs=6)
    for _ in range(2):
        schedule.step()
    saved_schedule, saved_optimizer = schedule.state_dict(), optimizer.state_dict()
    expected = [schedule.step() for _ in range(3)]
    other = optim.SGD(nn.Linear(1, 1).parameters(), lr=0.5)
    resumed = swa_utils.SWALR(other, 0.01, anneal_epochs=6)
    other.load_state_dict(saved_optimizer)
    resumed.load_state_dict(saved_schedule)
    assert [resumed.step() for _ in range(3)] == expected
    assert expected[-1] != expected[0]


def test_swalr_bad_arguments():
    optimizer = optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)
    with pytest.raises(InvalidArgumentError, match="anneal_strategy"):
        swa_utils.SWALR(optimizer, 0.05, anneal_strategy="exp")
    with pytest.raises(InvalidArgumentError, match="anneal_epochs"):
        swa_utils.SWALR(optimizer, 0.05, anneal_epochs=-1)
    with pytest.raises(InvalidArgumentError, match="swa_lr"):
        swa_utils.SWALR(optimizer, [0.05, 0.01])


@pytest.mark.parametrize("batches", ["tensors", "tuples"])
def test_update_bn_matches_torch(batches):
    model, torch_model = make_pair()
    averaged = swa_utils.AveragedModel(model)
    torch_averaged = TS.AveragedModel(torch_model)
    rng = np.random.default_rng(2)
    for _ in range(3):
        set_weights(model, torch_model, rng)
        averaged.update_parameters(model)
        torch_averaged.update_parameters(torch_model)
    data = [rng.standard_normal((n, 3)) * 2 + 1 for n in (4, 7, 5)]
    if batches == "tensors":
        ours_loader = [rg.tensor(x, dtype="float64") for x in data]
        torch_loader = [torch.from_numpy(x) for x in data]
    else:
        ours_loader = [(rg.tensor(x, dtype="float64"), 0) for x in data]
        torch_loader = [(torch.from_numpy(x), 0) for x in data]
    averaged.eval()
    torch_averaged.eval()
    swa_utils.update_bn(ours_loader, averaged)
    TS.update_bn(torch_loader, torch_averaged)
    assert_same_state(averaged, torch_averaged)
    assert int(averaged.module[1].num_batches_tracked.item()) == 3
    # the momentum and the eval mode are restored
    assert averaged.module[1].momentum == 0.1
    assert not averaged.training and not averaged.module[1].training


def test_update_bn_without_batch_norm_is_a_no_op():
    model = nn.Linear(2, 2)
    calls = []
    swa_utils.update_bn(calls, model)  # no batch norm: the loader is not even read
    model.train(False)
    swa_utils.update_bn([rg.ones((1, 2))], model)
    assert not model.training


def test_reached_as_torch_names_it():
    assert optim.swa_utils.AveragedModel is swa_utils.AveragedModel
    assert rg.optim.swa_utils.update_bn is swa_utils.update_bn
