"""Regression tests for what the realports48 ports (scientific machine learning,
``tests/test_real_ports_340.py`` .. ``_344.py``) found in retrograd, each against torch."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import retrograd as rg

_RNG = np.random.default_rng(48)
_COMPLEX = _RNG.standard_normal((2, 3)) + 1j * _RNG.standard_normal((2, 3))
_TARGET = _RNG.standard_normal((2, 3)) + 1j * _RNG.standard_normal((2, 3))
_REAL = _RNG.standard_normal(3)


def _lbfgs_run(lib, dtype, line_search_fn, steps=2):
    """A complex and a real parameter fitted by L-BFGS; the parameters and the state after
    each step."""
    real_dtype = lib.float32 if dtype == "complex64" else lib.float64
    z = lib.nn.Parameter(lib.tensor(_COMPLEX, dtype=getattr(lib, dtype)))
    w = lib.nn.Parameter(lib.tensor(_REAL, dtype=real_dtype))
    target = lib.tensor(_TARGET, dtype=getattr(lib, dtype))
    optimizer = lib.optim.LBFGS(
        [z, w], lr=0.5, max_iter=4, history_size=3, line_search_fn=line_search_fn
    )

    def closure():
        optimizer.zero_grad()
        loss = ((z - target).abs() ** 2).sum() + ((z.real * w) ** 2).sum() + (w**4).sum()
        if lib is torch:
            loss.backward()
            return loss
        return loss, loss.backward()

    seen = []
    for _ in range(steps):
        optimizer.step(closure)
        state = copy.deepcopy(optimizer.state_dict()["state"][0])  # torch's holds live tensors
        seen.append((z.detach().numpy().copy(), w.detach().numpy().copy(), state))
    return seen, optimizer


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_steps_complex_parameters_as_their_real_pairs_as_torch(dtype, line_search_fn):
    """Found by the ports: L-BFGS on a complex parameter (a Fourier layer's weights) failed
    with a bare ``TypeError`` from ``float()`` of a complex 0-d value; torch flattens each
    complex parameter's gradient to real and imaginary parts (``view_as_real``)."""
    theirs, _ = _lbfgs_run(torch, dtype, line_search_fn)
    ours, _ = _lbfgs_run(rg, dtype, line_search_fn)
    tolerance = 1e-5 if dtype == "complex64" else 1e-12
    for (z, w, state), (their_z, their_w, their_state) in zip(ours, theirs):
        np.testing.assert_allclose(z, their_z, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(w, their_w, rtol=tolerance, atol=tolerance)
        assert state["d"].dtype == their_state["d"].numpy().dtype  # real, as torch's
        assert tuple(state["d"].shape) == tuple(their_state["d"].shape) == (15,)
        np.testing.assert_allclose(
            state["d"], their_state["d"].numpy(), rtol=100 * tolerance, atol=tolerance
        )


def test_lbfgs_state_of_complex_parameters_loads_from_torch_and_steps_on_as_torch():
    """The saved history of a complex parameter is real (twice its elements); torch's state
    dict loads and the next step agrees with torch's."""
    _, their_optimizer = _lbfgs_run(torch, "complex128", "strong_wolfe", steps=1)
    their_state = their_optimizer.state_dict()
    z = rg.nn.Parameter(rg.tensor(_COMPLEX, dtype=rg.complex128))
    w = rg.nn.Parameter(rg.tensor(_REAL, dtype=rg.float64))
    optimizer = rg.optim.LBFGS(
        [z, w], lr=0.5, max_iter=4, history_size=3, line_search_fn="strong_wolfe"
    )
    optimizer.load_state_dict(their_state)
    loaded = optimizer.state_dict()["state"][0]
    assert loaded["d"].dtype == rg.float64 and loaded["d"].shape == (15,)
    assert all(v.dtype == rg.float64 for v in loaded["old_dirs"])
    with pytest.raises(rg.ShapeError, match="d"):
        bad = {**their_state, "state": {0: {**their_state["state"][0], "d": np.zeros(9)}}}
        optimizer.load_state_dict(bad)
