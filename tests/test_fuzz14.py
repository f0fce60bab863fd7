"""Round 14 of the differential fuzzer against PyTorch (``tests/fuzz14_cases.py``): sorting
and selection on their argument grids (quantiles, unique with a dim, searchsorted with sides
and sorters, histograms), scatter/index_add/take/put with duplicate, negative and
out-of-range indices, result dtypes of n-ary ops, batched linalg, second derivatives of
programs through views and in-place updates, ``nn.functional`` ops on unusual arguments and
cumulative ops. Every draw must agree with torch on raising or not, dtype, shape and values
(float64 gradients included).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz14_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "selection": 300,
    "scatter": 300,
    "promotion": 500,
    "linalg": 300,
    "chain2": 150,
    "nnf": 400,
    "scan": 400,
}


def _check(name: str, seed: int) -> None:
    trial = fuzz14_cases.GENERATORS[name](np.random.default_rng(seed))
    try:
        fuzz14_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz14_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round14_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 14_000 + seed)
