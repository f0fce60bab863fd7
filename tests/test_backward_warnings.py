"""Backward gives the IEEE values a rule computes (``inf``, ``NaN``) without warnings, as
torch does: a gradient's ``0 * inf`` or ``1 / 0`` is the answer, and a NumPy warning raised
inside the engine would point at no line the user wrote. Every test runs with warnings as
errors; the values are torch's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend

STRATEGIES = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
    "budget": lambda: rg.BudgetCheckpointing(1),
}

# (name, function of a tensor, input values): each rule meets 0, inf or NaN on the way
CASES = [
    ("sqrt at 0", lambda x: x.sqrt(), [0.0, 1.0, 4.0]),
    ("log at 0", lambda x: x.log(), [0.0, 2.0]),
    ("pow 0.5 at 0", lambda x: x.pow(0.5), [0.0, 9.0]),
    ("reciprocal at 0", lambda x: x.reciprocal(), [0.0, 2.0]),
    ("x / x at 0", lambda x: x / x, [0.0, 3.0]),
    ("exp overflow", lambda x: x.exp() * 0.0, [100.0, 1.0]),
    ("norm of zeros", lambda x: x.norm(), [0.0, 0.0]),
    ("acos at 1", lambda x: x.acos(), [1.0, 0.5]),
]


def strict(fn):
    """``fn()`` with every warning an error (a warning fails the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("name,fn,values", CASES, ids=[c[0] for c in CASES])
def test_backward_meets_infinities_without_warnings(strategy, name, fn, values):
    expected_x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the forward's own warnings are NumPy's (not under test)
        fn(expected_x).sum().backward()
    backend = rg.Autodiff(inner_backend(), STRATEGIES[strategy]())
    with rg.use_backend(backend):
        x = rg.tensor(values, dtype="float64").require_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = fn(x).sum()
        grads = strict(loss.backward)
    np.testing.assert_array_equal(x.grad(grads).numpy(), expected_x.grad.numpy())


def test_a_second_order_gradient_through_infinities_without_warnings():
    x = rg.tensor([0.0, 4.0], dtype="float64").require_grad()
    (first,) = strict(lambda: rg.autograd.grad(x.sqrt().sum(), [x], create_graph=True))
    (second,) = strict(lambda: rg.autograd.grad(first.sum(), [x]))
    xt = torch.tensor([0.0, 4.0], dtype=torch.float64, requires_grad=True)
    (first_t,) = torch.autograd.grad(xt.sqrt().sum(), [xt], create_graph=True)
    (second_t,) = torch.autograd.grad(first_t.sum(), [xt])
    np.testing.assert_array_equal(first.detach().numpy(), first_t.detach().numpy())
    np.testing.assert_array_equal(second.numpy(), second_t.numpy())


def test_warnings_still_reach_the_user_after_backward():
    """The silence is backward's alone: NumPy's own settings are what they were."""
    before = np.geterr()
    x = rg.tensor([0.0, 1.0], dtype="float64").require_grad()
    strict(x.sqrt().sum().backward)
    assert np.geterr() == before
    with pytest.warns(RuntimeWarning):
        np.log(np.zeros(1))


def test_an_optimizer_update_meets_infinities_without_warnings():
    """SGD at lr=0 over an infinite gradient: ``inf * 0`` gives the NaN torch gives."""
    weight = rg.nn.Parameter(rg.tensor([0.0, 1.0, 4.0]))
    optimizer = rg.optim.SGD([weight], lr=0.0)
    strict(lambda: optimizer.step(weight.sqrt().sum().backward()))
    expected = torch.nn.Parameter(torch.tensor([0.0, 1.0, 4.0]))
    torch_optimizer = torch.optim.SGD([expected], lr=0.0)
    expected.sqrt().sum().backward()
    torch_optimizer.step()
    np.testing.assert_array_equal(weight.detach().numpy(), expected.detach().numpy())


def test_a_captured_step_replays_its_backward_and_update_without_warnings():
    weight = rg.nn.Parameter(rg.tensor([0.0, 1.0, 4.0]))
    optimizer = rg.optim.SGD([weight], lr=0.0)

    def step(x):
        loss = (weight.sqrt() * x).sum()
        optimizer.step(loss.backward())
        return loss

    x = rg.tensor([1.0, 1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager first step (capture) may warn in forward
        captured = rg.capture(step, x, state=[optimizer])
    losses = [strict(lambda: captured(x)).item() for _ in range(2)]
    assert np.isnan(losses).all()  # as torch: the first update made the weight NaN
    np.testing.assert_array_equal(weight.detach().numpy(), [np.nan, 1.0, 4.0])


def test_torch_s_step_without_gradients_under_capture_says_what_to_write():
    """``loss.backward(); optimizer.step()`` in a captured step gets the optimizer's own
    error (gradients are a value here), not a TypeError from the capture's wrapper."""
    weight = rg.nn.Parameter(rg.tensor([1.0, 2.0]))
    optimizer = rg.optim.SGD([weight], lr=0.1)

    def step(x):
        loss = (weight * x).sum()
        loss.backward()
        optimizer.step()
        return loss

    with pytest.raises(rg.errors.AutodiffError, match=r"SGD.step: pass the gradients"):
        rg.capture(step, rg.tensor([1.0, 1.0]), state=[optimizer])
    weight.sum().backward()  # the graph and the parameter are usable after the refusal


FORWARD_WARNS = """
import numpy as np
import retrograd as rg
for inner in (rg.NumpyBackend(), rg.Autodiff(rg.NumpyBackend())):
    x = rg.tensor([0.0, 1.0, 1000.0], backend=inner)
    x.log(), x / 0.0, x.exp(), (-x).sqrt(), rg.tensor([0.0], backend=inner).reciprocal()
np.log(np.zeros(1))  # the user's own NumPy call
"""


@pytest.mark.numpy_only("NumPy's floating-point warnings")
def test_forward_ops_meet_poles_without_numpys_warnings():
    """Forward's ``log(0)``, ``1 / 0``, ``exp(1000)``, ``sqrt(-1)`` give torch's values without
    a warning, as torch's do; the user's own NumPy call still warns. In a fresh process: the
    filter is installed when retrograd is imported, and pytest restores the filters it found
    around each test and the collection."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FORWARD_WARNS], capture_output=True, text=True, check=True
    )
    lines = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert len(lines) == 1 and "<string>:7: RuntimeWarning: divide by zero" in lines[0], done.stderr
