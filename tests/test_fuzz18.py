"""Round 18 of the differential fuzzer against PyTorch (``tests/fuzz18_cases.py``): wide
argument grids of convolutions and their transposes, pooling and unpooling, resampling
(``interpolate``, ``grid_sample``/``affine_grid``, ``pad``, ``fold``/``unfold``, pixel
shuffles), losses and normalization layers. Every draw must agree with torch on raising or
not, dtype, shape and values (gradients of the input and of every parameter included).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz18_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "conv": 120,
    "losses": 100,
    "norm": 50,
    "pool": 120,
    "resample": 120,
}


def _check(name: str, seed: int) -> None:
    trial = fuzz18_cases.GENERATORS[name](np.random.default_rng(seed))
    try:
        fuzz18_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz18_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round18_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 18_000 + seed)
