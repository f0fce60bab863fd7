"""Round 33 of the differential fuzzer against PyTorch (``tests/fuzz33_cases.py``): values
and first and second derivatives of the primitive tensor ops (elementwise unary and binary
ops with broadcasting, reductions) at special points: signed zeros, +-1, infinities, NaN,
domain edges, ties, subnormals and huge values, in float32 and float64. Every draw must agree
with torch on raising or not, dtype, shape, values (NaN and infinities in the same places,
the same signs of zeros where torch's are defined) and derivatives.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

import math
import os

import numpy as np
import pytest

import fuzz33_cases as cases

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"unary": 250, "binary": 180, "reduction": 130, "second_order": 100}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round33_matches_torch(name):
    failures = []
    for seed in range(max(DRAWS[name], SCALE)):
        draw = cases.GENERATORS[name](np.random.default_rng([33, seed]))
        try:
            cases.check(draw)
        except cases.Mismatch as e:
            failures.append(f"seed {seed}: {draw[0]}\n  {str(e)[:400]}")
    assert not failures, f"{len(failures)} of the draws differ:\n" + "\n".join(failures[:10])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_unary_op_at_every_special_point(dtype):
    # the seeded draws sample the points; here each op meets all of them at once
    failures = []
    points = [p for p in cases._COMMON + cases._EDGES + cases._EXTREMES[dtype]]
    for name, (program, exclude, _) in sorted(cases.UNARY.items()):
        kept = np.array([p for p in points if not cases._excluded(p, exclude)])
        try:
            cases.check((name, program, [(kept, dtype, True)], 1, True))
        except cases.Mismatch as e:
            failures.append(f"{name}: {str(e)[:300]}")
    assert not failures, f"{len(failures)} ops differ:\n" + "\n".join(failures[:10])


def test_the_check_catches_a_wrong_sign_of_zero_and_a_wrong_nan():
    def wrong_zero(lib, x):
        return x * 1.0 if lib is __import__("torch") else x + 0.0  # -0.0 + 0.0 is +0.0

    draw = ("wrong", wrong_zero, [(np.array([-0.0, 1.0]), "float64", True)], 1, True)
    with pytest.raises(cases.Mismatch, match="out"):
        cases.check(draw)

    def wrong_gradient(lib, x):
        y = x.abs()
        return y if lib is __import__("torch") else y + (x - x.detach()) * math.nan

    draw = ("wrong", wrong_gradient, [(np.array([1.0]), "float64", True)], 1, True)
    with pytest.raises(cases.Mismatch, match="grad"):
        cases.check(draw)
