"""Round 31 of the differential fuzzer against PyTorch (``tests/fuzz31_cases.py``): how real
code calls the names it uses most (``shared/torch_surface/names.tsv``): positional against
keyword arguments, negative dims and dims as tuples or lists, Python, NumPy and 0-d tensor
operands on either side, method against function form, varargs shapes against tuples,
aliases, tensor attributes, the ``*_like``/``new_*`` families, in-place methods. Every draw
must agree with torch on raising or not, type, dtype, shape and values, and gradients.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

import os
import warnings

import numpy as np
import pytest

import fuzz31_cases as cases

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "reductions": 200,
    "shapes": 200,
    "binary": 200,
    "unary": 120,
    "functional": 100,
    "creation": 120,
    "attributes": 120,
    "sequences": 120,
    "inplace": 120,
}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round31_matches_torch(name):
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's deprecation notes: 0-d mT, resized out=)
        for seed in range(max(DRAWS[name], SCALE)):
            draw = cases.GENERATORS[name](np.random.default_rng([31, seed]))
            try:
                cases.check(draw)
            except cases.Mismatch as e:
                failures.append(f"seed {seed}: {draw[0]}\n  {str(e)[:400]}")
    assert not failures, f"{len(failures)} of the draws differ:\n" + "\n".join(failures[:10])


def test_the_check_catches_a_wrong_result():
    def wrong(lib, x):
        return x.sum(-1) + (0.5 if lib is rg_module() else 0.0)

    draw = ("wrong", wrong, [(np.array([2.0, 1.0]), "float64", True)])
    with pytest.raises(cases.Mismatch):
        cases.check(draw)


def test_the_check_catches_a_wrong_gradient():
    def wrong(lib, x):
        return x * 2 if lib is rg_module() else x * 2 + (x - x.detach())  # (same values)

    draw = ("wrong gradient", wrong, [(np.array([2.0, 1.0]), "float64", True)])
    with pytest.raises(cases.Mismatch, match="grad"):
        cases.check(draw)


def rg_module():
    import retrograd

    return retrograd
