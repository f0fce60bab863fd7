"""A captured step called with inputs or modes its program was not recorded for: captured again
(``recapture=True``, the default), as ``jax.jit`` retraces and ``torch.compile`` recompiles.

Each test trains an eager twin beside the captured step, on the same batches and the same
random stream (dropout), and compares the parameters bit for bit after every step.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.capture import MAX_PROGRAMS
from retrograd.nn import functional as F  # noqa: N812


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))


def batch(size: int, seed: int) -> tuple[rg.Tensor, rg.Tensor]:
    rng = np.random.default_rng(seed)
    x = rg.tensor(rng.standard_normal((size, 6)).astype(np.float32))
    return x, rg.tensor(rng.integers(0, 4, size=size))


def twins():
    """Two equal models, each with an optimizer over its parameter list (no module named)."""
    models = []
    for _ in range(2):
        rg.seed(0)
        models.append(net())
    return [(m, optim.Adam(m.parameters(), lr=0.01)) for m in models]


def step_for(model, opt):
    def train_step(x, y, scale=1.0):
        loss = F.cross_entropy(model(x), y) * scale
        opt.step(loss.backward())
        return loss

    return train_step


def assert_same(a, b):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def run_both(calls, recapture=True):
    """Each call ``(batch size, seed, mode, extra args)`` made on the eager twin and on the
    captured step, from the same random state; the captured step returned."""
    (eager, eager_opt), (model, opt) = twins()
    eager_step, step = step_for(eager, eager_opt), None
    for size, seed, training, extra in calls:
        x, y = batch(size, seed)
        for m in (eager, model):
            m.train(training)
        rg.seed(seed)
        expected = eager_step(x, y, *extra)
        rg.seed(seed)
        if step is None:
            step = rg.capture(step_for(model, opt), x, y, *extra, state=[opt], recapture=recapture)
            got = step.result
        else:
            got = step(x, y, *extra)
        assert np.array_equal(got.numpy(), expected.numpy())
        assert_same(model, eager)
    return step


def test_a_short_last_batch_is_captured_again_and_each_shape_replays():
    epoch = [(8, 1, True, ()), (8, 2, True, ()), (3, 3, True, ())]
    step = run_both(epoch + [(8, 4, True, ()), (3, 5, True, ()), (8, 6, True, ())])
    assert step.programs == 2


def test_switching_to_eval_is_seen_without_the_module_in_state():
    # the optimizer is over model.parameters(): the capture learns the modules from the step
    calls = [(8, 1, True, ()), (8, 2, False, ()), (8, 3, False, ()), (8, 4, True, ())]
    step = run_both(calls)
    assert step.programs == 2


def test_another_constant_argument_is_another_program():
    step = run_both([(8, 1, True, (1.0,)), (8, 2, True, (0.5,)), (8, 3, True, (1.0,))])
    assert step.programs == 2


def test_without_recapture_the_replay_is_refused_and_changes_nothing():
    (model, opt), _ = twins()
    x, y = batch(8, 1)
    step = rg.capture(step_for(model, opt), x, y, state=[opt], recapture=False)
    before = {k: v.copy() for k, v in model.state_dict().items()}
    model.eval()
    with pytest.raises(rg.CaptureError, match=r"mode changed.*recapture=True"):
        step(x, y)
    model.train()
    with pytest.raises(rg.CaptureError, match=r"input 0 has shape \[3, 6\].*\[8, 6\]"):
        step(*batch(3, 2))
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert step.programs == 1


def test_a_tensor_for_a_constant_is_refused_not_captured_again():
    (model, opt), _ = twins()
    x, y = batch(8, 1)
    step = rg.capture(step_for(model, opt), x, y, 1.0, state=[opt])
    with pytest.raises(rg.CaptureError, match=r"non-tensor input 2 was 1\.0"):
        step(x, y, rg.tensor(1.0))


def test_past_the_programs_kept_steps_run_eagerly_with_one_warning():
    sizes = range(2, 2 + MAX_PROGRAMS + 3)
    calls = [(size, size, True, ()) for size in sizes]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = run_both(calls)
    assert step.programs == MAX_PROGRAMS
    assert len([w for w in caught if "run eagerly" in str(w.message)]) == 1
