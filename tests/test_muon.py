"""``rg.optim.Muon`` against ``torch.optim.Muon``.

On ``TorchBackend`` the Newton-Schulz iteration runs in bfloat16, as torch's: parameters are
compared with torch's after several steps at bfloat16's resolution of the update. NumPy has no
bfloat16, so there the iteration runs in float32: it is compared with torch's algorithm
written out here with the iteration in float32, to float32 rounding.
"""

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch
from retrograd.errors import DTypeError, InvalidArgumentError, ShapeError


def _reference_step(weight, grad, buffer, *, lr, weight_decay, momentum, nesterov, adjust):
    """One Muon step by hand in torch, the iteration in float32 (torch's algorithm, dtype
    aside)."""
    buffer.lerp_(grad, 1 - momentum)
    update = grad.lerp(buffer, momentum) if nesterov else buffer
    a, b, c = 3.4445, -4.775, 2.0315
    x = update.T if update.shape[0] > update.shape[1] else update
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(5):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    x = x.T if update.shape[0] > update.shape[1] else x
    rows, cols = weight.shape
    ratio = (
        0.2 * max(rows, cols) ** 0.5 if adjust == "match_rms_adamw" else max(1, rows / cols) ** 0.5
    )
    weight.mul_(1 - lr * weight_decay)
    weight.add_(x, alpha=-lr * ratio)


def _problem(seed):
    generator = torch.Generator().manual_seed(seed)
    tall = torch.randn(6, 4, generator=generator)
    wide = torch.randn(3, 6, generator=generator)
    inputs = torch.randn(5, 4, generator=generator)
    targets = torch.randn(5, 3, generator=generator)
    return tall, wide, inputs, targets


def _loss(module, tall, wide, inputs, targets):
    hidden = module.tanh(inputs @ tall.T)
    return ((hidden @ wide.T - targets) ** 2).mean()


@pytest.mark.parametrize(
    "settings",
    [
        {"lr": 0.02, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True, "adjust": None},
        {
            "lr": 0.05,
            "weight_decay": 0.0,
            "momentum": 0.9,
            "nesterov": False,
            "adjust": "match_rms_adamw",
        },
    ],
)
def test_steps_follow_torch(settings):
    tall, wide, inputs, targets = _problem(0)
    options = {
        "lr": settings["lr"],
        "weight_decay": settings["weight_decay"],
        "momentum": settings["momentum"],
        "nesterov": settings["nesterov"],
        "adjust_lr_fn": settings["adjust"],
    }
    params = [rg.nn.Parameter(rg.tensor(t.numpy())) for t in (tall, wide)]
    optimizer = rg.optim.Muon(params, **options)
    x, y = rg.tensor(inputs.numpy()), rg.tensor(targets.numpy())

    ref = [t.clone().requires_grad_() for t in (tall, wide)]
    ref_optimizer = torch.optim.Muon(ref, **options)
    buffers = [torch.zeros_like(t) for t in ref]
    for _ in range(4):
        optimizer.step(_loss(rg, *params, x, y).backward())
        loss = _loss(torch, *ref, inputs, targets)
        grads = torch.autograd.grad(loss, ref)
        if on_torch():
            for p, g in zip(ref, grads):
                p.grad = g
            ref_optimizer.step()
        else:
            with torch.no_grad():
                for p, g, buf in zip(ref, grads, buffers):
                    _reference_step(
                        p, g, buf, lr=settings["lr"], weight_decay=settings["weight_decay"],
                        momentum=settings["momentum"], nesterov=settings["nesterov"],
                        adjust=settings["adjust"],
                    )  # fmt: skip
    # bfloat16 keeps 8 bits: its update moves a weight by lr * (1 +- 2**-8) per step
    # on torch's kernels the steps are torch's to the bit; NumPy's matmuls and norm round
    # otherwise than torch's (and iterate in float32)
    tolerance = 0.0 if on_torch() else 2e-6
    for mine, theirs in zip(params, ref):
        np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), atol=tolerance, rtol=0)
    state = optimizer.state_dict()
    assert sorted(state["state"][0]) == ["momentum_buffer"]
    assert state["param_groups"][0] == ref_optimizer.state_dict()["param_groups"][0]


def test_state_dict_resumes_the_same_trajectory():
    tall, wide, inputs, targets = _problem(1)
    x, y = rg.tensor(inputs.numpy()), rg.tensor(targets.numpy())

    def run(steps, resume_from=None):
        params = [rg.nn.Parameter(rg.tensor(t.numpy())) for t in (tall, wide)]
        optimizer = rg.optim.Muon(params, lr=0.03)
        if resume_from is not None:
            values, state = resume_from
            for p, v in zip(params, values):
                p.data = rg.tensor(v)
            optimizer.load_state_dict(state)
        for _ in range(steps):
            optimizer.step(_loss(rg, *params, x, y).backward())
        return [p.numpy().copy() for p in params], optimizer.state_dict()

    straight, _ = run(4)
    halfway = run(2)
    resumed, _ = run(2, resume_from=halfway)
    for a, b in zip(straight, resumed):
        np.testing.assert_array_equal(a, b)


def test_bad_arguments_are_refused_by_name():
    matrix = rg.nn.Parameter(rg.ones(2, 2))
    with pytest.raises(ShapeError, match=r"Muon: only 2-d parameters.*\(3,\)"):
        rg.optim.Muon([matrix, rg.nn.Parameter(rg.ones(3))])
    with pytest.raises(InvalidArgumentError, match="adjust_lr_fn"):
        rg.optim.Muon([matrix], adjust_lr_fn="rms")
    with pytest.raises(InvalidArgumentError, match="ns_steps"):
        rg.optim.Muon([matrix], ns_steps=100)
    with pytest.raises(InvalidArgumentError, match="lr"):
        rg.optim.Muon([matrix], lr=-1.0)
    complex_matrix = rg.nn.Parameter(rg.ones(2, 2, dtype=rg.complex64))
    optimizer = rg.optim.Muon([complex_matrix])
    with pytest.raises(DTypeError, match="Muon: complex"):
        optimizer.step((complex_matrix.abs() ** 2).sum().backward())
    assert complex_matrix.tolist() == [[1, 1], [1, 1]]  # untouched
