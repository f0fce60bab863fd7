"""Round 19 of the differential fuzzer against PyTorch (``tests/fuzz19_cases.py``): module
hooks (forward, backward, state-dict and load hooks), ``nn.utils`` (gradient clipping,
parameter vectors, packed sequences through recurrent layers, weight and spectral norm,
parametrizations, pruning), mixed precision (``GradScaler``, ``autocast``) and
``func.functional_call``/``stack_module_state``. Every draw must agree with torch on raising
or not, dtype, shape and values (gradients included), and on the calls the hooks saw.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz19_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "amp": 80,
    "clip": 200,
    "hooks": 200,
    "packed": 100,
    "reparam": 80,
}


def _check(name: str, seed: int) -> None:
    trial = fuzz19_cases.GENERATORS[name](np.random.default_rng(seed))
    try:
        fuzz19_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz19_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round19_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 19_000 + seed)
