"""Where the torch backend draws its random numbers: on the host (NumPy's seeded stream, the
same values as the NumPy backend) on the CPU, on the device elsewhere, where a host draw would
make each dropout mask on the CPU and copy it over every step. The device's generator follows
the host stream's seeding, so ``rg.seed`` repeats a run whichever backend is current.
(``TorchBackend("meta")`` stands in for a GPU: a device that is not the CPU.)"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import retrograd as rg

pytest.importorskip("torch")

pytestmark = pytest.mark.backend_independent(
    "builds its own TorchBackends, whatever the suite's inner backend"
)


def test_the_default_generator_is_the_host_on_the_cpu_and_the_device_elsewhere():
    assert rg.TorchBackend("cpu").generator == "numpy"
    assert rg.TorchBackend("meta").generator == "torch"
    assert rg.TorchBackend("meta", generator="numpy").generator == "numpy"
    assert rg.TorchBackend("cpu", generator="torch").generator == "torch"
    with pytest.raises(rg.InvalidArgumentError, match="generator"):
        rg.TorchBackend("cpu", generator="cuda")


def _draws(backend):
    x = rg.randn(6, backend=backend).numpy()
    mask = rg.nn.functional.dropout(rg.ones(8, backend=backend), 0.5, training=True).numpy()
    return np.concatenate([x, mask])


def test_the_device_generator_follows_rg_seed_made_on_another_backend():
    device = rg.Autodiff(rg.TorchBackend("cpu", generator="torch"))
    host = rg.Autodiff(rg.NumpyBackend())
    with rg.use_backend(host):
        rg.seed(5)
        first = _draws(device)
        rg.seed(5)
        again = _draws(device)
        rg.seed(6)
        other = _draws(device)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_the_device_generator_follows_a_restored_rng_state():
    device = rg.Autodiff(rg.TorchBackend("cpu", generator="torch"))
    with rg.use_backend(device):
        rg.seed(11)
        state = rg.get_rng_state()
        first = _draws(device)
        _draws(device)
        rg.set_rng_state(state)
        again = _draws(device)
    np.testing.assert_array_equal(first, again)


def test_a_pickled_backend_draws_from_a_fresh_generator_seeded_like_the_original():
    backend = rg.TorchBackend("cpu", generator="torch")
    backend.seed(3)
    copy = pickle.loads(pickle.dumps(backend))
    backend.seed(3)
    expected = backend.random((4,), "normal", "float32", None).numpy()
    copy.seed(3)
    np.testing.assert_array_equal(copy.random((4,), "normal", "float32", None).numpy(), expected)
