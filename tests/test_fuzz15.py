"""Round 15 of the differential fuzzer against PyTorch (``tests/fuzz15_cases.py``): ``vmap``
over random bodies with random ``in_dims``/``out_dims``, nesting and chunks; the ``func``
transforms and their compositions with ``argnums`` and ``has_aux``; ``einsum`` on equations
drawn at random; padding and packing of sequences; ``nn`` layers no round builds; recurrent
layers and cells on their argument grids; float16/bfloat16 among the other dtypes. Every draw
must agree with torch on raising or not, dtype, shape and values (gradients included).

Half precision runs on the torch inner backend only; on NumPy every ``half`` draw must be
refused with a ``DTypeError`` (API.md section 9).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import backends
import fuzz15_cases
import retrograd as rg
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "vmap": 150,
    "transforms": 30,
    "einsum": 150,
    "sequences": 100,
    "layers": 60,
    "recurrent": 80,
    "half": 250,
}


def _check(name: str, seed: int) -> None:
    trial = fuzz15_cases.GENERATORS[name](np.random.default_rng(seed))
    if name == "half" and not backends.on_torch():
        with pytest.raises(rg.DTypeError, match=r"float16|bfloat16"):
            trial.fn(rg)
        return
    try:
        fuzz15_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz15_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round15_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 15_000 + seed)
