"""Defects found by round 15 of the reliability sweep (``tests/test_reliability_sweep_15.py``):
the distributed API, step capture and autograd as a user misuses them.

Each was a silent wrong result (``t.requires_grad = "False"``, ``Module.requires_grad_("False")``
and ``nn.Parameter(t, requires_grad="False")`` made the tensor require grad, since a non-empty
string is truthy; ``set_distributed`` made an int tensor require grad, which ``require_grad``
refuses; a captured step replayed an input that requires grad as plain data, so the loss it
returned had lost its graph, though capture itself refuses such an input), a bare library
traceback (``ZeroRedundancyOptimizer.step()`` without gradients: Python's missing-argument
``TypeError``; a parameter group's ``lr`` set to a string or ``None`` between steps: NumPy's
``TypeError`` from inside the update kernel during a replay; ``set_distributed([1])``:
"unhashable type: 'list'"), or an error that named the wrong thing (capture named both
backends ``autodiff<numpy>`` when a parameter was on another checkpointing strategy's
backend). Each now gives an error of API.md section 7 naming the op and the value at fault,
and leaves every object usable. Expected values come from torch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from retrograd import distributed as dist
from retrograd import nn, optim


# -- requires_grad takes a bool, as torch's ------------------------------------------------------
@pytest.mark.parametrize("flag", ["False", "yes", 0, None])
def test_requires_grad_refuses_a_non_bool(flag):
    with pytest.raises(RuntimeError, match=r"requires_grad must be a bool"):
        torch.ones(3).requires_grad = flag
    x = rg.ones(3)
    with pytest.raises(rg.RetrogradError, match=r"requires_grad.*boolean.*got"):
        x.requires_grad = flag
    assert x.requires_grad is False  # unchanged, and usable
    x.requires_grad = True
    assert x.requires_grad is True


def test_module_and_parameter_requires_grad_refuse_a_string():
    model = nn.Linear(2, 2)
    with pytest.raises(rg.RetrogradError, match=r"Module.requires_grad_.*'False'"):
        model.requires_grad_("False")
    assert all(p.requires_grad for p in model.parameters())
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())
    with pytest.raises(TypeError):
        torch.nn.Parameter(torch.ones(2), requires_grad="False")
    with pytest.raises(rg.RetrogradError, match=r"Parameter.*'False'"):
        nn.Parameter(rg.ones(2), requires_grad="False")


# -- set_distributed ---------------------------------------------------------------------------
def test_set_distributed_refuses_an_int_tensor():
    x = rg.ones(3, dtype=rg.int64)
    with pytest.raises(rg.DTypeError, match=r"set_distributed: only float tensors.*int64"):
        x.set_distributed("w")
    assert not x.requires_grad and not x.is_distributed()
    assert (x + 1).tolist() == [2, 2, 2]


def test_set_distributed_names_an_unhashable_id():
    x = rg.ones(3)
    with pytest.raises(
        rg.DTypeError, match=r"ParamId: expected a non-negative int or a str, got \[1\]"
    ):
        x.set_distributed([1])
    assert not x.is_distributed()


# -- ZeroRedundancyOptimizer.step() as torch's -------------------------------------------------
def test_zero_step_without_gradients_says_what_to_write():
    dist.init_process_group("gloo")
    try:
        rg.seed(0)
        model = nn.Linear(3, 2)
        zero = dist.ZeroRedundancyOptimizer(model.parameters(), optim.SGD, lr=0.1)
        before = model.weight.numpy().copy()
        with pytest.raises(
            rg.AutodiffError, match=r"ZeroRedundancyOptimizer.step: pass the gradients"
        ):
            zero.step()
        np.testing.assert_array_equal(model.weight.numpy(), before)
        zero.step(model(rg.ones((4, 3))).sum().backward())  # still usable: SGD's step, torch's
        t = torch.nn.Linear(3, 2)
        with torch.no_grad():
            t.weight.copy_(torch.tensor(before))
        t(torch.ones(4, 3)).sum().backward()
        np.testing.assert_allclose(
            model.weight.numpy(), (t.weight - 0.1 * t.weight.grad).detach().numpy(), rtol=1e-6
        )
    finally:
        dist.destroy_process_group()


# -- capture ------------------------------------------------------------------------------------
def _model_and_step(lr=0.01):
    rg.seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = optim.Adam(model.parameters(), lr=lr)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.step(loss.backward())
        return loss

    return model, opt, step


def _batch(seed):
    r = np.random.RandomState(seed)
    return rg.tensor(r.randn(3, 4).astype(np.float32)), rg.tensor(r.randn(3, 2).astype(np.float32))


def test_replay_refuses_an_input_that_requires_grad_as_capture_does():
    model, opt, step = _model_and_step()
    x, y = _batch(0)
    captured = rg.capture(step, x, y, state=[opt])
    with pytest.raises(rg.CaptureError, match=r"capture: input 0.*tracked by autodiff"):
        rg.capture(step, x.detach().require_grad(), y, state=[opt])
    before = [p.numpy().copy() for p in model.parameters()]
    x1, y1 = _batch(1)
    with pytest.raises(
        rg.CaptureError, match=r"captured step: input 0 \(shape \[3, 4\]\) is tracked"
    ):
        captured(x1.detach().require_grad(), y1)
    for p, b in zip(model.parameters(), before):  # a refused replay changes nothing
        np.testing.assert_array_equal(p.numpy(), b)
    captured(x1, y1)  # and the step goes on


def test_capture_names_two_backends_that_share_a_name():
    balanced = rg.Autodiff(rg.current_backend().inner, checkpointing=rg.BalancedCheckpointing())
    with rg.use_backend(balanced):
        _, opt, step = _model_and_step()
    x, y = _batch(0)  # on the default backend
    with pytest.raises(
        rg.CaptureError, match=r"BalancedCheckpointing.*NoCheckpointing|NoCheck.*Balanced"
    ):
        rg.capture(step, x, y, state=[opt])


def test_a_string_learning_rate_is_named_at_replay_and_eagerly():
    model, opt, step = _model_and_step()
    x, y = _batch(0)
    captured = rg.capture(step, x, y, state=[opt])
    x1, y1 = _batch(1)
    before = [p.numpy().copy() for p in model.parameters()]
    for bad in ("1e-3", None):
        opt.param_groups[0]["lr"] = bad
        with pytest.raises(rg.DTypeError, match=rf"adam_update: hyper-parameter 'lr'.*{bad!r}"):
            captured(x1, y1)
        # (eagerly named by the step, before any parameter is updated: round 19)
        with pytest.raises(rg.DTypeError, match=rf"Adam.step: hyper-parameter 'lr'.*{bad!r}"):
            step(x1, y1)
        for p, b in zip(model.parameters(), before):
            np.testing.assert_array_equal(p.numpy(), b)
    opt.param_groups[0]["lr"] = 0.01
    captured(x1, y1)  # usable again


def test_a_parameter_replaced_in_a_called_module_outside_state_is_followed():
    """``state=[opt]`` over a list of parameters: a module's weight assigned anew between
    replays is, eagerly, a constant the optimizer does not hold. The replay read the old
    object (another loss, another model); it now captures again, or refuses."""
    results = []
    for recapture in (True, False):
        model, opt, step = _model_and_step()
        twin, _, eager = _model_and_step()
        captured = rg.capture(step, *_batch(0), state=[opt], recapture=recapture)
        eager(*_batch(0))
        for m in (model, twin):
            m[2].weight = nn.Parameter(rg.full((2, 8), 0.05))
        if not recapture:
            with pytest.raises(rg.CaptureError, match=r"parameter of a Linear.*replaced"):
                captured(*_batch(1))
            continue
        for seed in (1, 2):
            results.append((captured(*_batch(seed)).item(), eager(*_batch(seed)).item()))
        for p, q in zip(model.parameters(), twin.parameters()):
            np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert all(a == b for a, b in results)
