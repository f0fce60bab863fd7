"""Defects found by round 28 of the reliability sweep (``test_reliability_sweep_28.py``):
the grad-mode decorators, against torch's.

* ``@rg.inference_mode(False)`` ran the function with recording off: the decorator entered
  a fresh object of the class (``inference_mode()``, whose default is ``True``) instead of
  the one given.
* ``@rg.no_grad``, ``@rg.enable_grad`` and ``@rg.inference_mode`` without parentheses
  (torch 2's form) were a ``TypeError`` or gave an object that could not be called.
* Two threads differentiating one graph without ``retain_graph`` both walked it whole, then
  ran steps on nodes the other had released: a bare ``KeyError``, gradients silently
  missing, or "never checkpointed" under a budget. A consuming backward now claims the
  nodes it will release before it runs any step; the second is refused by name
  (``AutodiffError``), as torch refuses a second backward through a graph.
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
from backends import inner_backend
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


# -- two threads differentiating one graph without retain_graph ---------------------------------
STRATEGIES = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
    "budget": lambda: rg.BudgetCheckpointing(1 << 10),
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_second_thread_s_backward_of_a_graph_being_consumed_is_refused_by_name(strategy):
    """Thread A's backward pauses in the root's hook (nothing released yet) while thread B
    differentiates the same loss. B ran the whole graph and A then failed on released nodes
    (a bare KeyError) or returned gradients missing; torch refuses the second backward
    through a graph. A's gradients are torch's."""
    backend = rg.Autodiff(inner_backend(), checkpointing=STRATEGIES[strategy]())
    gen = np.random.default_rng(28)
    w1 = gen.standard_normal((5, 8)).astype(np.float32)
    w2 = gen.standard_normal((8, 3)).astype(np.float32)
    x = gen.standard_normal((4, 5)).astype(np.float32)
    with rg.use_backend(backend):
        a, b = rg.tensor(w1).require_grad(), rg.tensor(w2).require_grad()
        loss = ((rg.tensor(x) @ a).tanh() @ b).sigmoid().pow(2).sum()
    first_in_hook, second_done = threading.Event(), threading.Event()
    first = []

    def hook(grad):
        if threading.current_thread() is first[0]:
            first_in_hook.set()
            assert second_done.wait(DEADLINE)
        return grad

    loss.register_hook(hook)

    def differentiate_first():
        first.append(threading.current_thread())
        with rg.use_backend(backend):
            grads = loss.backward()
            return a.grad(grads).numpy(), b.grad(grads).numpy()

    def differentiate_second():
        assert first_in_hook.wait(DEADLINE)
        try:
            with rg.use_backend(backend):
                loss.backward()
        except rg.AutodiffError as error:
            return str(error)
        finally:
            second_done.set()
        return "ran"

    (ga, gb), refusal = run_in_threads(
        lambda f: f(), [(differentiate_first,), (differentiate_second,)]
    )
    assert "being consumed by a backward() still running (on another thread" in refusal
    ta, tb = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    ((torch.tensor(x) @ ta).tanh() @ tb).sigmoid().pow(2).sum().backward()
    np.testing.assert_allclose(ga, ta.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(rg.AutodiffError, match="consumed by an earlier backward"):
        loss.backward()
