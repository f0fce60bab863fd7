"""``SGD(momentum=0, dampening=d)`` on a parameter the compiled loops update (at least
``COMPILED_MIN_SIZE`` elements, or any size once a process has loaded them) made no step at
all: the general loop wrote the new value, then the "buffer", which without momentum is the
value itself, back over it with the old one. torch ignores dampening without momentum. Fuzz
round 25 caught it only when an earlier test on the worker had loaded the loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.backend.numpy_optim import COMPILED_MIN_SIZE


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_dampening_without_momentum_steps_as_torch(weight_decay):
    start = np.random.default_rng(0).standard_normal(COMPILED_MIN_SIZE).astype(np.float32)
    scale = np.linspace(0.5, 2.0, COMPILED_MIN_SIZE, dtype=np.float32)
    results = []
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.tensor(start.copy()))
        opt = lib.optim.SGD([p], lr=0.1, momentum=0.0, dampening=0.1, weight_decay=weight_decay)
        for _ in range(3):
            loss = (p * p * lib.tensor(scale)).sum()
            if lib is torch:
                opt.zero_grad()
                loss.backward()
                opt.step()
            else:
                opt.step(loss.backward())
        results.append(p.detach().numpy().copy())
    assert not np.allclose(results[0], start)  # (torch moved)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)
