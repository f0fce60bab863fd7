"""Optimizers, clipping and schedules against torch.optim on the same gradient sequence."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim

STEPS = 12


def gradient_sequence(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(shape).astype(dtype) for shape in shapes] for _ in range(STEPS)]


def retrograd_run(make_optimizer, dtype, gradients, schedule=None):
    """Apply ``gradients`` (one list per step, in named_parameters order) to a Linear(4, 3)."""
    rg.seed(0)
    model = nn.Linear(4, 3, dtype=dtype)
    # a copy, as torch's code would clone: a state dict's values are the module's, live
    start = {name: value.copy() for name, value in model.state_dict().items()}
    optimizer = make_optimizer(model)
    scheduler = schedule(optimizer) if schedule else None
    for step in gradients:
        # a loss whose gradient with respect to each parameter is exactly the given array
        loss = sum((p * rg.tensor(g)).sum() for p, g in zip(model.parameters(), step))
        optimizer.step(loss.backward())
        if scheduler is not None:
            scheduler.step()
    return start, model.state_dict()


def torch_run(torch, make_optimizer, start, gradients, schedule=None):
    parameters = [
        torch.nn.Parameter(torch.from_numpy(start[name].copy())) for name in ("weight", "bias")
    ]
    optimizer = make_optimizer(parameters)
    scheduler = schedule(optimizer) if schedule else None
    for step in gradients:
        for parameter, g in zip(parameters, step):
            parameter.grad = torch.from_numpy(g.copy())
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return {"weight": parameters[0].detach().numpy(), "bias": parameters[1].detach().numpy()}


CASES = {
    "sgd": (lambda m: optim.SGD(m, lr=0.1), lambda t, p: t.optim.SGD(p, lr=0.1)),
    "sgd_momentum_dampening_decay": (
        lambda m: optim.SGD(m, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
        lambda t, p: t.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    ),
    "sgd_nesterov": (
        lambda m: optim.SGD(m, lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3),
        lambda t, p: t.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3),
    ),
    "adam": (lambda m: optim.Adam(m, lr=1e-2), lambda t, p: t.optim.Adam(p, lr=1e-2)),
    "adam_decay_betas": (
        lambda m: optim.Adam(m, lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
        lambda t, p: t.optim.Adam(p, lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    ),
    "adamw": (
        lambda m: optim.AdamW(m, lr=1e-2, weight_decay=0.05),
        lambda t, p: t.optim.AdamW(p, lr=1e-2, weight_decay=0.05),
    ),
    "adamw_default_decay": (lambda m: optim.AdamW(m), lambda t, p: t.optim.AdamW(p)),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_optimizer_matches_torch(case, dtype):
    torch = pytest.importorskip("torch")
    ours, theirs = CASES[case]
    gradients = gradient_sequence([(3, 4), (3,)], dtype)
    start, result = retrograd_run(ours, dtype, gradients)
    expected = torch_run(torch, lambda p: theirs(torch, p), start, gradients)
    tolerance = (
        {"rtol": 1e-12, "atol": 1e-14} if dtype == "float64" else {"rtol": 2e-6, "atol": 1e-7}
    )
    for name in ("weight", "bias"):
        assert result[name].dtype == np.dtype(dtype)
        assert not np.allclose(result[name], start[name])  # it moved
        np.testing.assert_allclose(result[name], expected[name], **tolerance, err_msg=name)


SCHEDULES = {
    "step": (
        lambda o: optim.StepLR(o, step_size=3, gamma=0.5),
        lambda t, o: t.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
    ),
    "cosine": (
        lambda o: optim.CosineAnnealingLR(o, T_max=5, eta_min=1e-3),
        lambda t, o: t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=1e-3),
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_matches_torch(name):
    torch = pytest.importorskip("torch")
    ours, theirs = SCHEDULES[name]
    ours_optimizer = optim.SGD(nn.Linear(1, 1), lr=0.1)
    ours_schedule = ours(ours_optimizer)
    torch_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    torch_schedule = theirs(torch, torch_optimizer)
    ours_lrs, torch_lrs = [ours_optimizer.lr], [torch_optimizer.param_groups[0]["lr"]]
    for _ in range(12):  # past T_max: the cosine comes back up, in both
        torch_optimizer.step()
        torch_schedule.step()
        ours_schedule.step()
        ours_lrs.append(ours_optimizer.lr)
        torch_lrs.append(torch_optimizer.param_groups[0]["lr"])
    np.testing.assert_allclose(ours_lrs, torch_lrs, rtol=1e-12, atol=1e-15)
    assert ours_schedule.get_last_lr() == [ours_lrs[-1]]


def test_scheduled_optimizer_matches_torch():
    torch = pytest.importorskip("torch")
    gradients = gradient_sequence([(3, 4), (3,)], "float64", seed=5)
    schedule_ours, schedule_torch = SCHEDULES["cosine"]
    ours, theirs = CASES["adam"]
    start, result = retrograd_run(ours, "float64", gradients, schedule_ours)
    expected = torch_run(
        torch, lambda p: theirs(torch, p), start, gradients, lambda o: schedule_torch(torch, o)
    )
    for name in ("weight", "bias"):
        np.testing.assert_allclose(result[name], expected[name], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(max_norm):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal(3)]
    leaves = [rg.tensor(a).require_grad() for a in arrays]
    weights = [rng.standard_normal(a.shape) for a in arrays]
    grads = sum((p * rg.tensor(w)).sum() for p, w in zip(leaves, weights)).backward()
    norm = optim.clip_grad_norm(grads, leaves, max_norm)
    parameters = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in arrays]
    for parameter, w in zip(parameters, weights):
        parameter.grad = torch.from_numpy(w.copy())
    expected_norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    assert norm == pytest.approx(float(expected_norm), rel=1e-12)
    for leaf, parameter in zip(leaves, parameters):
        np.testing.assert_allclose(leaf.grad(grads).numpy(), parameter.grad.numpy(), rtol=1e-12)
    clipped = np.sqrt(sum(float((leaf.grad(grads).numpy() ** 2).sum()) for leaf in leaves))
    assert clipped == pytest.approx(min(max_norm, norm.item()), rel=1e-5)


def test_clip_grad_norm_takes_a_module():
    model = nn.Linear(3, 2)
    grads = (model(rg.ones((5, 3))) * 100.0).sum().backward()
    before = optim.clip_grad_norm(grads, model, max_norm=1.0)
    assert before > 1.0
    after = np.sqrt(sum(float((p.grad(grads).numpy() ** 2).sum()) for p in model.parameters()))
    assert after == pytest.approx(1.0, rel=1e-5)


def test_step_skips_parameters_without_gradient_and_keeps_marks():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model.set_distributed()
    before = model.state_dict()
    loss = model[0](rg.ones((1, 2))).sum()  # the second layer takes no part
    optimizer = optim.SGD(model, lr=0.5, momentum=0.9)  # (without, SGD keeps no state)
    optimizer.step(loss.backward())
    after = model.state_dict()
    assert not np.array_equal(before["0.weight"], after["0.weight"])
    np.testing.assert_array_equal(before["1.weight"], after["1.weight"])
    assert all(p.is_distributed() and p.is_require_grad() for p in model.parameters())
    assert model[1].weight not in optimizer.state and model[0].weight in optimizer.state


def test_optimizer_arguments_are_checked():
    model = nn.Linear(1, 1)
    with pytest.raises(ValueError, match="lr"):
        optim.SGD(model, lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(model, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam(model, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="T_max"):
        optim.CosineAnnealingLR(optim.SGD(model, lr=0.1), T_max=0)
