"""A split's backward in a captured step: ``slice_backward`` and the ``slice_accumulate`` calls
after it run as one ``slice_gather`` (:mod:`retrograd.capture.slices`) when the parts tile the
whole array, bit for bit what the calls computed (signed zeros, NaN, infinities), and stay
as they were when they do not."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.backend.numpy_backend import NumpyBackend
from retrograd.capture import slices as capture_slices

pytestmark = pytest.mark.numpy_only("the rewrite is of the NumPy backend's calls")

BACKEND = NumpyBackend()
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan]


def _part(rng, shape, dtype):
    value = rng.standard_normal(shape).astype(dtype)
    flat = value.reshape(-1)
    count = min(len(SPECIAL), flat.size)
    flat[:count] = SPECIAL[:count]
    flat[-1] = -0.0
    return value


def _calls(shape, cuts, dtype, rng):
    """A recorded ``slice_backward`` + ``slice_accumulate`` chain over ``cuts`` (slices), the
    slots' metadata, the parts and what the calls compute."""
    meta, parts, calls = [], [], []
    for where in cuts:
        part = _part(rng, np.empty(shape)[where].shape, dtype)
        parts.append(part)
        meta.append((np.ndarray, part.shape, part.dtype, part.strides))
    expected = BACKEND.slice_backward(parts[0], shape, cuts[0])
    slot = len(meta)
    meta.append((np.ndarray, shape, np.dtype(dtype), expected.strides))
    calls.append(
        ("call", BACKEND.slice_backward, "slice_backward", [("s", 0), ("c", shape), ("c", cuts[0])],
         {}, slot)
    )  # fmt: skip
    for index in range(1, len(cuts)):
        expected = BACKEND.slice_accumulate(expected, parts[index], cuts[index])
        meta.append((np.ndarray, shape, np.dtype(dtype), expected.strides))
        calls.append(
            ("call", BACKEND.slice_accumulate, "slice_accumulate",
             [("s", slot), ("s", index), ("c", cuts[index])], {}, slot + 1)
        )  # fmt: skip
        slot += 1
    return calls, meta, parts, expected


def _run(calls, parts):
    env = dict(enumerate(parts))
    for _, function, _, args, _, out in calls:
        env[out] = function(*[env[p] if kind == "s" else p for kind, p in args])
    return env[calls[-1][5]]


def _bits(a):
    return a.view(np.dtype(f"u{a.itemsize}"))


C = slice(None)
THIRDS = [(C, C, slice(0, 2)), (C, C, slice(2, 4)), (C, C, slice(4, 6))]
TILINGS = {
    "thirds of the last dim": ((4, 5, 6), THIRDS),
    "uneven, out of order": ((7, 3), [(slice(3, 7), C), (slice(0, 1), C), (slice(1, 3), C)]),
    "two halves of the middle": ((2, 6, 3), [(C, slice(3, 6), C), (C, slice(0, 3), C)]),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tiling", TILINGS)
def test_a_tiling_chain_becomes_one_gather_with_the_calls_bits(tiling, dtype):
    shape, cuts = TILINGS[tiling]
    calls, meta, parts, expected = _calls(shape, cuts, dtype, np.random.default_rng(0))
    rewritten = capture_slices.gather_slices(calls, meta, later=set())
    assert [call[2] for call in rewritten] == ["slice_gather"]
    assert rewritten[0][5] == calls[-1][5]
    got = _run(rewritten, parts)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(_bits(got), _bits(expected))  # -0.0 + 0.0 is +0.0 in both


@pytest.mark.parametrize(
    "shape, cuts",
    [
        ((4, 6), [(C, slice(0, 3)), (C, slice(2, 5))]),  # overlapping, and a gap
        ((4, 6), [(C, slice(0, 3)), (C, slice(3, 5))]),  # a column left out
        ((4, 6), [(C, slice(0, 6))]),  # nothing accumulated
    ],
)
def test_parts_that_do_not_tile_keep_their_calls(shape, cuts):
    calls, meta, _, _ = _calls(shape, cuts, np.float32, np.random.default_rng(1))
    assert capture_slices.gather_slices(calls, meta, later=set()) == calls


def test_a_partial_sum_read_elsewhere_keeps_the_calls():
    shape, cuts = TILINGS["thirds of the last dim"]
    calls, meta, _, _ = _calls(shape, cuts, np.float32, np.random.default_rng(2))
    partial = calls[1][5]
    assert capture_slices.gather_slices(calls, meta, later={partial}) == calls
    reader = ("call", BACKEND.neg, "neg", [("s", partial)], {}, len(meta))
    meta.append(meta[partial])
    assert capture_slices.gather_slices([*calls, reader], meta, later=set())[:3] == calls


class Split(nn.Module):
    """A projection split in three (attention's ``q, k, v``), combined elementwise."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 3 * 8)

    def forward(self, x):
        q, k, v = self.proj(x).split(8, 2)
        return ((q * k).tanh() + v.square()).mean()


def test_a_captured_split_backward_equals_the_eager_step_bit_for_bit():
    rg.seed(0)
    eager, replayed = Split(), Split()
    replayed.load_state_dict(eager.state_dict())
    rng = np.random.default_rng(3)
    batches = [rg.tensor(rng.standard_normal((4, 5, 8)).astype(np.float32)) for _ in range(3)]

    def step_for(model):
        opt = optim.AdamW(model, lr=1e-2)

        def step(x):
            loss = model(x)
            opt.step(loss.backward())
            return loss

        return step, opt

    eager_step, _ = step_for(eager)
    expected = [eager_step(x).numpy() for x in batches]
    replayed_step, opt = step_for(replayed)
    captured = rg.capture(replayed_step, batches[0], state=[opt])
    assert "slice_gather" in captured.code and "slice_accumulate" not in captured.code
    got = [captured.result.numpy()] + [captured(x).numpy() for x in batches[1:]]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for (name, p), (_, q) in zip(eager.named_parameters(), replayed.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def test_without_fusion_the_calls_replay_as_recorded():
    rg.seed(0)
    model = Split()
    opt = optim.SGD(model, lr=0.1)

    def step(x):
        loss = model(x)
        opt.step(loss.backward())
        return loss

    x = rg.tensor(np.ones((2, 3, 8), np.float32))
    captured = rg.capture(step, x, state=[opt], fuse=False)
    assert "slice_gather" not in captured.code and "slice_accumulate" in captured.code
