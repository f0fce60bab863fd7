"""Round 22 of the differential fuzzer against PyTorch (``tests/fuzz22_cases.py``): training
loops of random small models under random optimizers, parameter groups, schedulers and
gradient clipping; reductions and scans with tuples of dims, ``keepdim``, ``dtype=`` and
``correction=``; ``torch.linalg`` on well-conditioned input, values and gradients. Every draw
must agree with torch on raising or not, dtype, shape and values.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz22_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"train": 15, "reduce": 200, "linalg": 70}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz22_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round22_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        trial = fuzz22_cases.GENERATORS[name](np.random.default_rng(22_000 + seed))
        try:
            fuzz22_cases.check(trial)
        except Mismatch as e:
            message = f"{trial.name} (generator {name!r}, seed {22_000 + seed}):\n{e}"
            raise AssertionError(message) from None
