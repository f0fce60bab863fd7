"""Round 34 of the differential fuzzer against PyTorch (``tests/fuzz34_cases.py``): how real
code calls the names ranked about 151 to 500 by use (``shared/torch_surface/names.tsv``) that
round 31 left out: the ``nn`` constructors of that range (keyword names, defaults, ``repr``,
forward and parameter gradients on the same weights), the optimizers and schedulers,
``nn.init``, the random in-place fillers and a set of tensor functions. Every draw must agree
with torch on raising or not, type, dtype, shape and values, and gradients.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

import os
import warnings

import numpy as np
import pytest

import fuzz34_cases as cases

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "modules": 120,
    "optimizers": 60,
    "ops": 200,
    "init": 80,
    "random": 80,
    "misc": 150,
}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round34_matches_torch(name):
    import torch

    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's deprecation notes)
        for seed in range(max(DRAWS[name], SCALE)):
            draw = cases.GENERATORS[name](np.random.default_rng([34, seed]))
            torch.manual_seed(seed)
            try:
                cases.check(draw)
            except cases.Mismatch as e:
                failures.append(f"seed {seed}: {draw[0]}\n  {str(e)[:400]}")
    assert not failures, f"{len(failures)} of the draws differ:\n" + "\n".join(failures[:10])
