"""Differential fuzzing of the uint8 and int32 dtypes (with bool, int64, float32, float64,
Python numbers and 0-d tensors) against torch 2.13: seeded random programs from
``tests/fuzz29_cases.py`` run by retrograd and by torch give the same dtypes and values, or,
where torch raises, a ``RetrogradError`` (API.md section 7). Each seed's program is rebuilt
from its seed alone, so a failure names the seed and the program that reproduce it."""

from __future__ import annotations

import random
import warnings

import pytest

from fuzz29_cases import chain_program, check, misc_program, program

FAMILIES = {"ops": program, "misc": misc_program, "chains": chain_program}
#: programs per family and test: a few hundred in all, run on the suite's inner backend
PROGRAMS = 100


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("block", [0, 1])
def test_random_programs_agree_with_torch(family, block):
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (NumPy's and torch's overflow and casting notes)
        for seed in range(block * PROGRAMS, (block + 1) * PROGRAMS):
            run, description = FAMILIES[family](random.Random(seed))
            message = check(run)
            if message:
                failures.append(f"seed {seed}: {description}\n    {message}")
    assert not failures, "\n".join(failures[:10])
