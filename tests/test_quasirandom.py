"""``rg.quasirandom.SobolEngine`` against ``torch.quasirandom.SobolEngine``: the unscrambled
sequence bit for bit (in float32 and float64, drawn in pieces, after ``fast_forward`` and
``reset``), a scrambled one reproducible and still a (0, m, d)-net, and bad arguments refused
naming the call."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import errors

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dimension", [1, 2, 7, 100, 21201])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_unscrambled_sequence_is_torch_s(dimension, dtype):
    n = 8 if dimension == 21201 else 70
    ours = rg.quasirandom.SobolEngine(dimension).draw(n, dtype=getattr(rg, dtype))
    theirs = torch.quasirandom.SobolEngine(dimension).draw(n, dtype=getattr(torch, dtype))
    assert ours.dtype == getattr(rg, dtype) and tuple(ours.shape) == (n, dimension)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_draws_in_pieces_fast_forward_and_reset_continue_as_torch():
    ours, theirs = rg.quasirandom.SobolEngine(5), torch.quasirandom.SobolEngine(5)
    for step in (lambda e: e.draw(), lambda e: e.draw(3), lambda e: e.fast_forward(8),
                 lambda e: e.draw(4), lambda e: e.draw_base2(4), lambda e: e.reset(),
                 lambda e: e.draw(2), lambda e: e.draw_base2(1), lambda e: e.draw(6)):  # fmt: skip
        a, b = step(ours), step(theirs)
        if isinstance(b, torch.Tensor):
            assert a.dtype == rg.float32
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        else:
            assert a is ours
        assert ours.num_generated == theirs.num_generated
    assert repr(ours) == repr(theirs) == "SobolEngine(dimension=5)"


def test_draw_into_out():
    out = rg.zeros(4, 3)
    got = rg.quasirandom.SobolEngine(3).draw(4, out=out)
    assert got is out
    expected = torch.quasirandom.SobolEngine(3).draw(4)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_a_scrambled_sequence_is_reproducible_and_a_net():
    m, dimension = 6, 4
    points = rg.quasirandom.SobolEngine(dimension, scramble=True, seed=11).draw_base2(m).numpy()
    again = rg.quasirandom.SobolEngine(dimension, scramble=True, seed=11).draw_base2(m).numpy()
    other = rg.quasirandom.SobolEngine(dimension, scramble=True, seed=12).draw_base2(m).numpy()
    np.testing.assert_array_equal(points, again)
    assert not np.array_equal(points, other)
    assert ((points >= 0) & (points < 1)).all()
    # each coordinate of the first 2**m points has one point in each interval of width 2**-m
    # (a scrambled Sobol' sequence is still a (0, m, d)-net in every one-dimensional projection)
    for column in points.T:
        assert sorted(np.floor(column * 2**m).astype(int).tolist()) == list(range(2**m))
    # and for pairs of the first two coordinates: one point in each [2**-k, 2**-(m-k)] box
    for k in range(m + 1):
        boxes = np.floor(points[:, 0] * 2**k) * 2 ** (m - k) + np.floor(points[:, 1] * 2 ** (m - k))
        assert len(set(boxes.tolist())) == 2**m, k
    assert repr(rg.quasirandom.SobolEngine(2, scramble=True, seed=3)) == repr(
        torch.quasirandom.SobolEngine(2, scramble=True, seed=3)
    )


def test_an_unseeded_scramble_follows_the_global_generator():
    rg.manual_seed(5)
    first = rg.quasirandom.SobolEngine(3, scramble=True).draw(8).numpy()
    rg.manual_seed(5)
    np.testing.assert_array_equal(
        rg.quasirandom.SobolEngine(3, scramble=True).draw(8).numpy(), first
    )


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: rg.quasirandom.SobolEngine(0), errors.InvalidArgumentError, "[1, 21201]"),
        (lambda: rg.quasirandom.SobolEngine(21202), errors.InvalidArgumentError, "21202"),
        (lambda: rg.quasirandom.SobolEngine(2.5), errors.InvalidArgumentError, "dimension"),
        (lambda: rg.quasirandom.SobolEngine(2).draw(-1), errors.InvalidArgumentError, "at least"),
        (lambda: rg.quasirandom.SobolEngine(2).draw(2.0), errors.InvalidArgumentError, "an int"),
        (lambda: rg.quasirandom.SobolEngine(2).draw(2, dtype=rg.int64), errors.DTypeError, "int64"),
        (lambda: rg.quasirandom.SobolEngine(2).draw(3, out=rg.zeros(2, 2)), errors.ShapeError,
         "[3, 2]"),
        (lambda: rg.quasirandom.SobolEngine(2).fast_forward(-1), errors.InvalidArgumentError,
         "fast_forward"),
        (lambda: rg.quasirandom.SobolEngine(2).fast_forward(3).draw_base2(2),
         errors.InvalidArgumentError, "3 + 2**2 = 7"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_naming_the_call(call, error, words):
    with pytest.raises(error, match="SobolEngine") as raised:
        call()
    assert words in str(raised.value)


def test_an_empty_draw():
    engine = rg.quasirandom.SobolEngine(3)
    assert tuple(engine.draw(0).shape) == (0, 3) and engine.num_generated == 0
    np.testing.assert_array_equal(engine.draw(2).numpy(), [[0, 0, 0], [0.5, 0.5, 0.5]])
