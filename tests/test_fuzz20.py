"""Round 20 of the differential fuzzer: integer and bool tensors end to end and the creation
functions against PyTorch (``tests/fuzz20_cases.py``), and random small differentiable
programs captured with ``rg.capture`` against their eager runs, bit for bit (values,
gradients and trained parameters; replays on new data, a batch of another size captured
again, under each checkpointing strategy).

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz20_cases
import retrograd as rg
from backends import inner_backend
from fuzz_cases import Mismatch

pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"integers": 500, "creation": 400}
#: programs per checkpointing strategy (each runs its step eagerly and captured: ~0.1 s)
PROGRAMS = 8


def _check(name: str, seed: int) -> None:
    trial = fuzz20_cases.GENERATORS[name](np.random.default_rng(seed))
    try:
        fuzz20_cases.check(trial)
    except Mismatch as e:
        raise AssertionError(f"{trial.name} (generator {name!r}, seed {seed}):\n{e}") from None


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz20_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round20_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        _check(name, 20_000 + seed)


def _check_program(program):
    try:
        fuzz20_cases.check_program(rg, inner_backend(), program)
    except Mismatch as e:
        raise AssertionError(f"{program}:\n{e}") from None


@pytest.mark.parametrize("strategy", fuzz20_cases.STRATEGIES)
def test_captured_programs_equal_eager_runs(strategy):
    for seed in range(SCALE or PROGRAMS):
        _check_program(fuzz20_cases.Program(20_000 + seed, strategy))


def test_fused_captured_programs_equal_eager_runs():
    # (fused kernels are compiled per program: two draws; NumPy calls only are fused)
    for seed in range(2):
        _check_program(fuzz20_cases.Program(21_000 + seed, "balanced", fuse=True))
