"""A global gradient norm's sum of squares as one call in a captured step
(:mod:`retrograd.capture.squares`): bit for bit the ``square``, ``sum``, ``cast`` and ``add``
calls it replaces (infinities, NaN, float32 and float64 gradients), torch's total norm; a
captured step clipping by the global norm (``clip_grad_norm_``, whose norm is one
``global_norm`` call) equal to the eager step, and the composed norm of a step written out
(``square``, ``sum``, ``cast``, ``add``) still fused."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.backend.numpy_backend import NumpyBackend
from retrograd.capture import squares as capture_squares

pytestmark = pytest.mark.numpy_only("the rewrite is of the NumPy backend's calls")

BACKEND = NumpyBackend()
SHAPES = [(3, 4), (1,), (130,), (2, 3, 5), (64, 33)]


def _grads(dtype, seed=0, special=None):
    rng = np.random.default_rng(seed)
    grads = [
        (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3)).astype(dtype) for shape in SHAPES
    ]
    if special is not None:
        grads[2][5] = special
    return grads


def _calls(grads):
    """The recorded calls of the sum of squares, their metadata and what they compute."""
    values = list(grads)
    meta = [(np.ndarray, g.shape, g.dtype, g.strides) for g in grads]
    calls = []

    def emit(function, name, args, value):
        values.append(value)
        meta.append((type(value), np.shape(value), np.asarray(value).dtype, None))
        calls.append(("call", function, name, args, {}, len(values) - 1))
        return len(values) - 1

    total = None
    for index, grad in enumerate(grads):
        squared = emit(BACKEND.square, "square", [("s", index)], BACKEND.square(grad))
        summed = emit(BACKEND.sum, "sum", [("s", squared)], BACKEND.sum(values[squared]))
        cast = BACKEND.cast(values[summed], "float64")
        widened = emit(BACKEND.cast, "cast", [("s", summed), ("c", "float64")], cast)
        if total is None:
            total = widened
        else:
            value = BACKEND.add(values[total], values[widened])
            total = emit(BACKEND.add, "add", [("s", total), ("s", widened)], value)
    return calls, meta, values, total


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")
@pytest.mark.parametrize("special", [None, np.inf, np.nan, 1e30])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_sum_of_squares_gives_the_calls_bits(dtype, special):
    grads = _grads(dtype, special=special)
    calls, meta, values, total = _calls(grads)
    (fused,) = capture_squares.fuse_squares_total(calls, meta, later=set())
    assert fused[2] == "squares_total" and fused[5] == total
    got = fused[1](*[values[p] for _, p in fused[3]])
    expected = values[total]
    assert type(got) is type(expected) is np.float64
    assert np.array_equal(np.float64(got).view(np.uint64), np.float64(expected).view(np.uint64))


def test_a_sum_read_elsewhere_ends_the_run():
    """The first two gradients' sum read after the calls: one call makes it, the adds after
    it (which start from it) stay as they were."""
    calls, meta, _, _ = _calls(_grads(np.float32))
    partial_total = calls[6][5]  # square, sum, cast twice, then the first add
    kept = capture_squares.fuse_squares_total(calls, meta, later={partial_total})
    assert kept[0][2] == "squares_total" and kept[0][5] == partial_total
    assert kept[1:] == calls[7:]
    one = calls[:3]  # one gradient: nothing to gain
    assert capture_squares.fuse_squares_total(one, meta, later=set()) == one


def test_the_total_matches_torchs_norm():
    torch = pytest.importorskip("torch")
    grads = _grads(np.float32, seed=3)
    calls, meta, _, _ = _calls(grads)
    (fused,) = capture_squares.fuse_squares_total(calls, meta, later=set())
    ours = np.sqrt(fused[1](*grads))
    theirs = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(torch.from_numpy(g)) for g in grads])
    )
    np.testing.assert_allclose(ours, theirs.item(), rtol=1e-5)


def test_a_captured_step_clipping_the_global_norm_equals_the_eager_step():
    rg.seed(0)

    def make():
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))

    eager, replayed = make(), make()
    replayed.load_state_dict(eager.state_dict())
    rng = np.random.default_rng(4)
    batches = [rg.tensor(rng.standard_normal((5, 8)).astype(np.float32) * 50) for _ in range(3)]

    def step_for(model):
        opt = optim.AdamW(model, lr=1e-2)

        def step(x):
            loss = model(x).square().mean()
            grads = loss.backward()
            nn.utils.clip_grad_norm_(grads, model.parameters(), 0.5)
            opt.step(grads)
            return loss

        return step, opt

    eager_step, _ = step_for(eager)
    expected = [eager_step(x).numpy() for x in batches]
    replayed_step, opt = step_for(replayed)
    captured = rg.capture(replayed_step, batches[0], state=[opt])
    # clip_grad_norm_'s norm is one backend call (``Backend.global_norm``) since round 2 of the
    # update phase's speed-up; the squares' rewrite stays for the composed form (below)
    assert "global_norm" in captured.code
    got = [captured.result.numpy()] + [captured(x).numpy() for x in batches[1:]]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for (name, p), (_, q) in zip(eager.named_parameters(), replayed.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def test_a_captured_step_with_the_norm_written_out_fuses_the_squares():
    rg.seed(1)
    eager = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    replayed = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    replayed.load_state_dict(eager.state_dict())
    rng = np.random.default_rng(5)
    batches = [rg.tensor(rng.standard_normal((4, 6)).astype(np.float32)) for _ in range(3)]

    def step_for(model):
        opt = optim.SGD(model, lr=1e-2)

        def step(x):
            loss = model(x).square().mean()
            grads = loss.backward()
            total = None
            for p in model.parameters():
                part = p.grad(grads).square().sum().cast("float64")
                total = part if total is None else total + part
            factor = (1.0 / (total.sqrt() + 1e-6)).clamp(max=1.0).cast("float32")
            for p in model.parameters():
                p.grad_replace(grads, p.grad(grads) * factor)
            opt.step(grads)
            return loss

        return step, opt

    eager_step, _ = step_for(eager)
    expected = [eager_step(x).numpy() for x in batches]
    replayed_step, opt = step_for(replayed)
    captured = rg.capture(replayed_step, batches[0], state=[opt])
    assert "squares_total" in captured.code
    got = [captured.result.numpy()] + [captured(x).numpy() for x in batches[1:]]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for (name, p), (_, q) in zip(eager.named_parameters(), replayed.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name
