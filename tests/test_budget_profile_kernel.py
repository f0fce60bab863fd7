"""The compiled model of a step's memory (``budget/profile_kernel.py``) against the Python
loops it replaced (``profile_loops``, kept as its specification): the same peak, step,
needs, excess and seconds, bit for bit, on random traces with views, fixed spans and
gradients, for every budget and both counts."""

from __future__ import annotations

import math
import random

import pytest

from retrograd.autodiff.checkpoint.budget.plan import Profile, Trace, profile
from retrograd.autodiff.checkpoint.budget.profile_kernel import NEVER, profile_loops

pytestmark = pytest.mark.backend_independent(
    "the memory model's kernel against its Python loops, on traces made here: no tensor"
)


def reference_profile(trace, evicted, budget=0, views=True) -> Profile:
    return Profile(*profile_loops(trace, evicted, budget, views))


def random_trace(rng: random.Random, n: int) -> Trace:
    horizon = rng.randint(1, 2 * n)
    parents = [tuple(rng.sample(range(v), rng.randint(0, min(v, 3)))) for v in range(n)]
    reads = [
        sorted(rng.sample(range(horizon + 1), rng.randint(0, min(3, horizon + 1))))
        for _ in range(n)
    ]
    owners: list[int] = []
    for v in range(n):  # a view's owner is the buffer its parent views (or the parent's own)
        viewed = parents[v] and rng.random() < 0.3
        owners.append(owners[rng.choice(parents[v])] if viewed else v)

    def spans(count: int) -> list:
        rows = []
        for _ in range(count):
            a, b = sorted(rng.randint(0, horizon) for _ in range(2))
            rows.append((rng.randint(1, 1 << 20), a, b))
        return rows

    return Trace(
        sizes=[rng.choice([0, rng.randint(1, 1 << 24)]) for _ in range(n)],
        costs=[rng.random() * 1e-3 for _ in range(n)],
        parents=parents,
        recomputable=[rng.random() < 0.8 for _ in range(n)],
        reads=reads,
        owners=owners,
        fixed=spans(rng.randint(0, 3)),
        gradients=spans(rng.randint(0, 3)),
        horizon=horizon,
    )


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_profile_is_the_python_loops(seed):
    rng = random.Random(seed)
    trace = random_trace(rng, rng.randint(1, 60))
    n = len(trace.sizes)
    for _ in range(5):
        evicted = [rng.random() < 0.5 for _ in range(n)]
        for budget in (0, rng.randint(1, 1 << 26), 1 << 70):
            for views in (True, False):
                mine = profile(trace, evicted, budget, views)
                theirs = reference_profile(trace, evicted, budget, views)
                never = [NEVER if f == math.inf else f for f in theirs.first]
                assert mine == theirs._replace(first=never), (seed, budget, views)
                assert type(mine.seconds) is float and type(mine.peak) is int
