"""Round 12 of the differential fuzzer against PyTorch (``tests/fuzz12_cases.py``): third
derivatives of random compositions, ``autograd.functional``/``func`` transforms, optimizer and
scheduler trajectories on random option grids (parameter groups, ``add_param_group``, state
dicts saved and loaded mid-run), ``nn`` modules on argument grids, and tensor creation and
zero-size tensors. Every draw must agree with torch on raising or not, dtype, shape and values
(float64 gradients included).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz12_cases
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "higher_order": 30,
    "functional": 20,
    "optimizer": 40,
    "scheduler": 40,
    "module": 60,
    "creation": 60,
}


def _check(name: str, seed: int) -> None:
    trial = fuzz12_cases.GENERATORS[name](np.random.default_rng(seed))
    try:
        fuzz12_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz12_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round12_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 12_000 + seed)


def test_check_catches_a_difference():
    """The comparison itself can fail: a value, a dtype and an error off."""
    trial = fuzz12_cases.Trial("ok", lambda lib: [lib.arange(3) * 2])
    fuzz12_cases.check(trial)
    for wrong in (
        lambda lib: [lib.arange(3) * (2 if lib is not fuzz12_cases.rg else 3)],
        lambda lib: [lib.arange(3) if lib is not fuzz12_cases.rg else lib.arange(3.0)],
        lambda lib: [lib.arange(3) if lib is not fuzz12_cases.rg else lib.arange(4)],
        lambda lib: [lib.ones(2) @ lib.ones(3 if lib is not fuzz12_cases.rg else 2)],
    ):
        with pytest.raises(Mismatch):
            fuzz12_cases.check(fuzz12_cases.Trial("wrong", wrong))
