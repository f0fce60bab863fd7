"""Round 23 of the differential fuzzer against PyTorch (``tests/fuzz23_cases.py``): chains of
4-10 ops over leaves of mixed dtypes that broadcast against each other; ``autograd.grad``'s
arguments on random compositions; distances and norms at zero distances, zero rows and ties;
the ``func`` transforms over random chains. Every draw must agree with torch on raising or
not, dtype, shape and values (gradients included), and retrograd's results under every
checkpointing strategy must be bit-identical to NoCheckpointing's.

Seeded and derandomized: the same draws on every run. ``FUZZ_EXAMPLES`` runs more of them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fuzz23_cases
import retrograd as rg
from fuzz_cases import Mismatch

torch = pytest.importorskip("torch")

SCALE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
DRAWS = {"chain": 120, "distance": 100, "autograd": 40, "func": 20}


def test_every_generator_is_drawn():
    assert set(DRAWS) == set(fuzz23_cases.GENERATORS)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_round23_matches_torch(name):
    for seed in range(SCALE or DRAWS[name]):
        trial = fuzz23_cases.GENERATORS[name](np.random.default_rng(23_000 + seed))
        try:
            fuzz23_cases.check(trial)
        except Mismatch as e:
            message = f"{trial.name} (generator {name!r}, seed {23_000 + seed}):\n{e}"
            raise AssertionError(message) from None


def test_cumprod_second_derivative_through_zeros_is_still_exact():
    # (under create_graph the terms a zero makes zero are kept: their derivatives are the
    # second derivatives, as in torch's O(n^2) form)
    got, want = [], []
    for lib, out in ((rg, got), (torch, want)):
        t = lib.tensor([2.0, 0.0, 3.0, 0.0, 5.0], dtype=lib.float64, requires_grad=True)
        w = lib.tensor([0.3, -0.7, 1.1, 0.5, 0.9], dtype=lib.float64)
        (g,) = lib.autograd.grad((t.cumprod(0) * w).sum(), [t], create_graph=True)
        (h,) = lib.autograd.grad((g * w.flip(0)).sum(), [t])
        out.extend([g.detach().numpy(), h.numpy()])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
