"""Round 24 of the differential fuzzer against PyTorch (``tests/fuzz24_cases.py``): tensors
with a zero-size dimension through reductions, scans, sorting, products, indexing, shape ops,
losses and the ``nn.functional`` layers (values and refusals); second derivatives through
chains of non-contiguous views and through random compositions of smooth ops; dtype
promotion of ``lerp``, ``addcmul``/``addcdiv``, ``logaddexp``, ``igamma``, ``ldexp``, the fills
and ``where`` across int64/bool/float32/float64 tensors, 0-d tensors and numbers. Every draw must
agree with torch on raising or not, dtype, shape and values (gradients and second derivatives
included), and retrograd's results under every checkpointing strategy must be bit-identical
to NoCheckpointing's.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz24_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"empty": 400, "empty_nn": 200, "views": 100, "grad2": 40, "promote": 200}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz24_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round24_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        trial = fuzz24_cases.GENERATORS[name](np.random.default_rng(24_000 + seed))
        try:
            fuzz24_cases.check(trial)
        except Mismatch as e:
            message = f"{trial.name} (generator {name!r}, seed {24_000 + seed}):\n{e}"
            raise AssertionError(message) from None
