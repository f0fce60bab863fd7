"""Round 17 of the differential fuzzer against PyTorch (``tests/fuzz17_cases.py``): programs
of in-place ops through views of views (of non-leaves, of buffers outside the graph, of
leaves under ``no_grad``), also under ``BalancedCheckpointing`` and ``BudgetCheckpointing``,
whose results must be bit-identical to ``NoCheckpointing``'s; result dtypes of binary ops,
comparisons, division modes, remainders, integer powers and bitwise ops across
int64/bool/float16/bfloat16/float32/float64 tensors, 0-d tensors and Python scalars;
reductions, scans and selections over tuples of dims, negative and empty dims and ties;
chains of shape ops; the ``func`` transforms over random small programs. Every draw must
agree with torch on raising or not, dtype, shape and values (gradients included).

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
import retrograd as rg
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {
    "inplace": 150,
    "promotion": 1000,
    "reductions": 600,
    "shapes": 300,
    "func": 100,
}


def _check(name: str, seed: int) -> None:
    trial = fuzz17_cases.GENERATORS[name](np.random.default_rng(seed))
    if trial.name in fuzz17_cases.HALF and not backends.on_torch():
        with pytest.raises(rg.DTypeError, match=r"float16|bfloat16"):
            trial.fn(rg)
        return
    try:
        fuzz17_cases.check(trial, strategies=name == "inplace")
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz17_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round17_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 17_000 + seed)
