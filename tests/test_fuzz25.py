"""Round 25 of the differential fuzzer against PyTorch (``tests/fuzz25_cases.py``): random
stacks of ``nn`` modules (convolutions with every padding mode, dilation and groups, norms,
embeddings, recurrent layers, attention) loaded with torch's weights, in train and eval mode
(outputs, gradients, buffers after a step); every common optimizer over parameter groups
under chained learning-rate schedulers, saved and resumed mid-run; ``clip_grad_norm_`` and
``clip_grad_value_`` at every norm type, with non-finite gradients. Every draw must agree with
torch on raising or not, dtype, shape and values, and a resumed run must be bit-identical to
the uninterrupted one.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz25_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"stack": 25, "optim": 50, "clip": 300}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz25_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round25_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        trial = fuzz25_cases.GENERATORS[name](np.random.default_rng(25_000 + seed))
        try:
            fuzz25_cases.check(trial)
        except Mismatch as e:
            message = f"{trial.name} (generator {name!r}, seed {25_000 + seed}):\n{e}"
            raise AssertionError(message) from None
