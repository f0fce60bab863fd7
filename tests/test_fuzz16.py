"""Round 16 of the differential fuzzer against PyTorch (``tests/fuzz16_cases.py``): the
activation and softmax families on float32 tensors of 65,536 elements or more (the NumPy
backend's compiled loops) in three layouts with special values, losses over large
vocabularies, normalization layers and their running statistics over several steps,
reductions with ``dtype=`` and ``keepdim``, ordering ops over ties, NaN and infinities, and
``index_reduce``/``scatter_reduce`` with ``include_self``.
Every draw must agree with torch on raising or not, dtype, shape and values (gradients
included).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz16_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "activations": 40,
    "softmax": 25,
    "losses": 60,
    "norm_stats": 50,
    "reductions": 150,
    "ordering": 150,
    "index_reduce": 60,
}


def _check(name: str, seed: int) -> None:
    trial = fuzz16_cases.GENERATORS[name](np.random.default_rng(seed))
    try:
        fuzz16_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz16_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round16_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 16_000 + seed)
