"""Round 28 of the differential fuzzer against PyTorch (``tests/fuzz28_cases.py``): ordering
and selection ops over ties, NaN, infinities and empty dims; integer and boundary values
through division, remainders, powers, shifts and bitwise ops (in place too); second
derivatives (``autograd.grad(create_graph=True)`` then again) of random smooth chains under
every checkpointing strategy, bit-identical to NoCheckpointing's; chains of views written in
place through views and bases; gradient penalties through stacks of ``nn.functional``
layers under every strategy. Every draw must agree with torch on raising or not, dtype,
shape and values (first and second derivatives included).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

import os

import numpy as np
import pytest

import fuzz28_cases as cases

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "ordering": 300,
    "boundary": 400,
    "second_order": 30,
    "view_writes": 300,
    "gradient_penalty": 8,
}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round28_matches_torch(name):
    failures = []
    for seed in range(max(DRAWS[name], SCALE)):
        draw = cases.GENERATORS[name](np.random.default_rng([28, seed]))
        try:
            cases.check(draw, strategies=name in ("second_order", "gradient_penalty"))
        except cases.Mismatch as e:
            failures.append(f"seed {seed}: {draw[0]}\n  {str(e)[:400]}")
    assert not failures, f"{len(failures)} of the draws differ:\n" + "\n".join(failures[:10])


def test_the_check_catches_a_wrong_result():
    def wrong(lib, x):
        return x.sort(-1).values + (0.5 if lib is not __import__("torch") else 0.0)

    draw = ("wrong", wrong, [(np.array([2.0, 1.0]), "float64", True)], 1)
    with pytest.raises(cases.Mismatch):
        cases.check(draw)
