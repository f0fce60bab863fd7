"""Defects found by round 28 of the reliability sweep (``test_reliability_sweep_28.py``):
the grad-mode decorators, against torch's.

* ``@rg.inference_mode(False)`` ran the function with recording off: the decorator entered
  a fresh object of the class (``inference_mode()``, whose default is ``True``) instead of
  the one given.
* ``@rg.no_grad``, ``@rg.enable_grad`` and ``@rg.inference_mode`` without parentheses
  (torch 2's form) were a ``TypeError`` or gave an object that could not be called.
* A generator function decorated with ``@rg.no_grad()`` (a sampling loop yielding tokens)
  ran its body with recording on: the block was entered only while the generator object was
  made. torch runs the body in the block each time it resumes, and the caller's own mode
  between yields.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import retrograd as rg
from concurrency_cases import DEADLINE, run_in_threads

DECORATORS = {
    "inference_mode(False)": (
        lambda: torch.inference_mode(False),
        lambda: rg.inference_mode(False),
    ),
    "inference_mode(True)": (lambda: torch.inference_mode(True), lambda: rg.inference_mode(True)),
    "inference_mode": (lambda: torch.inference_mode, lambda: rg.inference_mode),
    "no_grad": (lambda: torch.no_grad, lambda: rg.no_grad),
    "no_grad()": (lambda: torch.no_grad(), lambda: rg.no_grad()),
    "enable_grad": (lambda: torch.enable_grad, lambda: rg.enable_grad),
    "enable_grad()": (lambda: torch.enable_grad(), lambda: rg.enable_grad()),
    "set_grad_enabled(False)": (
        lambda: torch.set_grad_enabled(False),
        lambda: rg.set_grad_enabled(False),
    ),
}


def _recorded(decorator, is_enabled, weight) -> tuple[tuple[bool, bool], bool]:
    """The mode inside the decorated function, whether it records, and the mode after it."""

    @decorator
    def forward(x):
        y = x * weight
        return is_enabled(), y.requires_grad

    return forward(weight), is_enabled()


@pytest.mark.parametrize("outer_on", [True, False], ids=["recording", "in_no_grad"])
@pytest.mark.parametrize("name", list(DECORATORS))
def test_a_grad_mode_decorator_records_as_torch_s(name, outer_on):
    make_theirs, make_ours = DECORATORS[name]
    theirs = torch.ones(2, requires_grad=True)
    ours = rg.ones(2).require_grad()
    with torch.set_grad_enabled(outer_on):
        expected = _recorded(make_theirs(), torch.is_grad_enabled, theirs)
    with rg.set_grad_enabled(outer_on):
        got = _recorded(make_ours(), rg.is_grad_enabled, ours)
    assert got == expected, f"@{name}: (inside, recorded), after: {got}, torch's {expected}"
    assert rg.is_grad_enabled()


def _sampling(no_grad, is_enabled, weight):
    """A decorated sampling loop: each token computed from ``weight``; what the body and the
    caller see at each yield."""

    @no_grad()
    def sample(steps):
        x = weight
        for _ in range(steps):
            x = x * weight
            request = yield (is_enabled(), x.requires_grad)
            assert request in (None, "more")
        return "done"

    seen = []
    tokens = sample(3)
    seen.append(next(tokens))
    seen.append(("caller", is_enabled()))
    seen.append(tokens.send("more"))
    seen.append(next(tokens))
    try:
        next(tokens)
    except StopIteration as stop:
        seen.append(stop.value)
    return seen


def test_a_decorated_generator_runs_its_body_in_the_block_as_torch_s():
    expected = _sampling(torch.no_grad, torch.is_grad_enabled, torch.ones(2, requires_grad=True))
    assert expected[0] == (False, False)
    assert _sampling(rg.no_grad, rg.is_grad_enabled, rg.ones(2).require_grad()) == expected


def test_a_decorated_generator_closed_or_thrown_into_leaves_the_caller_s_mode():
    weight = rg.tensor(np.ones(2, dtype=np.float32)).require_grad()

    @rg.no_grad()
    def sample():
        while True:
            try:
                yield (weight * 2).requires_grad
            except ValueError:
                yield ("thrown in", rg.is_grad_enabled())

    tokens = sample()
    assert next(tokens) is False
    assert tokens.throw(ValueError("stop")) == ("thrown in", False)
    assert rg.is_grad_enabled()
    tokens.close()
    assert rg.is_grad_enabled()
    assert (weight * 2).requires_grad


def test_a_no_grad_sampler_on_one_thread_beside_training_on_another():
    # the sampler's body records nothing on its thread; the trainer's graph is whole
    weight = rg.tensor(np.array([0.5, -1.0, 2.0], dtype=np.float32)).require_grad()
    started = threading.Barrier(2)

    @rg.no_grad()
    def sample():
        x = rg.ones(3)
        for _ in range(4):
            x = (x * weight).tanh()
            yield x.requires_grad

    def sampler():
        started.wait(DEADLINE)
        return list(sample())

    def trainer():
        started.wait(DEADLINE)
        grads = (weight * weight).sum().backward()
        return weight.grad(grads).numpy()

    tracked, gradient = run_in_threads(lambda f: f(), [(sampler,), (trainer,)])
    assert tracked == [False] * 4
    np.testing.assert_allclose(gradient, [1.0, -2.0, 4.0])
