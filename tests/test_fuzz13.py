"""Round 13 of the differential fuzzer against PyTorch (``tests/fuzz13_cases.py``): geometric
``nn.functional`` ops (unfold/fold, pixel and channel shuffles, grid_sample/affine_grid,
interpolate, pad, roll/flip/rot90, diagonals and triangles), indexing writes and in-place
updates through views into a tensor that is then differentiated, and ``distributions``
(log_prob, entropy, moments, cdf/icdf, kl_divergence, expand and shapes, validation). Every
draw must agree with torch on raising or not, dtype, shape and values (float64 gradients
included).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz13_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"geometric": 250, "index_write": 300, "distribution": 200}


def _check(name: str, seed: int) -> None:
    trial = fuzz13_cases.GENERATORS[name](np.random.default_rng(seed))
    try:
        fuzz13_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz13_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round13_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 13_000 + seed)
