"""Round 21 of the differential fuzzer against PyTorch (``tests/fuzz21_cases.py``): several
views of one tensor written through each other (also under every checkpointing strategy,
bit-identical to ``NoCheckpointing``); advanced indexing in get and set with every kind of
index item; second derivatives through chains of ``nn.functional`` layers with unusual
arguments; reductions, scans and activations over infinities and NaN; in-place ops and
writes across int64/bool/float16/bfloat16/float32/float64 targets and operands. Every draw
must agree with torch on raising or not, dtype, shape and values (gradients included).

Half precision runs on the torch inner backend only; on NumPy every draw of a float16 or
bfloat16 tensor must be refused with a ``DTypeError`` (API.md section 9).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import backends
import fuzz17_cases
import fuzz21_cases
import retrograd as rg
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"alias": 80, "index": 150, "nnf2": 25, "special": 150, "dtypes": 250, "nnf_half": 30}
#: the alias draws also run under each checkpointing strategy
STRATEGY_DRAWS = 15


def _check(name: str, seed: int, strategies: bool = False) -> None:
    trial = fuzz21_cases.GENERATORS[name](np.random.default_rng(seed))
    if trial.name in fuzz21_cases.HALF and not backends.on_torch():
        with pytest.raises(rg.DTypeError, match=r"float16|bfloat16"):
            trial.fn(rg)
        return
    try:
        if strategies:
            fuzz17_cases.check(trial, strategies=True)
        else:
            fuzz21_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz21_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round21_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 21_000 + seed)


def test_alias_programs_under_every_checkpointing_strategy():
    for seed in range(SCALE or STRATEGY_DRAWS):
        _check("alias", 22_000 + seed, strategies=True)
