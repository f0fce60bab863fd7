"""Regression tests for what the ports of ``tests/test_real_ports_311.py`` .. ``_319.py``
exposed (torch as an array library: ranges, running sums, ...). Expected values come from
torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "start, end, step",
    [
        (0, 103, 0.7),  # torchaudio's phase_vocoder: torch.arange(0, frames, rate)
        (0, 5000, 0.7),
        (-3.3, 7.1, 0.013),
        (2.5, -7.3, -0.37),
        (-28.8484671537214, -2397.842072906658, -2.208965214026416),
        (0.0, 1.0, 1 / 3),
        (1, 20000, 1.37),
    ],
)
def test_fractional_arange_has_torchs_values_to_the_last_place(dtype, start, end, step):
    theirs = torch.arange(start, end, step, dtype=getattr(torch, dtype))
    ours = rg.arange(start, end, step, dtype=getattr(rg, dtype))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # the indices a time stretch takes from them (one place apart is a whole frame apart)
    np.testing.assert_array_equal(ours.long().numpy(), theirs.long().numpy())
    np.testing.assert_array_equal((ours + 1).long().numpy(), (theirs + 1).long().numpy())


def test_default_dtype_fractional_arange_as_torch():
    np.testing.assert_array_equal(
        rg.arange(-1.1, 5.3, 0.3).numpy(), torch.arange(-1.1, 5.3, 0.3).numpy()
    )


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_float32_running_sums_and_products_are_carried_in_double_as_torchs(op):
    rng = np.random.default_rng(4501)
    values = (
        rng.uniform(0, 3, (3, 40000)) if op == "cumsum" else rng.uniform(0.999, 1.001, (3, 40000))
    )
    values = values.astype(np.float32)
    theirs = getattr(torch, op)(torch.tensor(values), 1).numpy()
    ours = getattr(rg, op)(rg.tensor(values), 1).numpy()
    assert ours.dtype == np.float32
    # float32 steps carried in float32 drift by hundreds of places over 40000 steps
    np.testing.assert_allclose(ours, theirs, rtol=2e-7, atol=0)


def test_complex64_running_sum_is_carried_in_double_as_torchs():
    rng = np.random.default_rng(4502)
    values = (rng.uniform(0, 3, 30000) + 1j * rng.uniform(0, 3, 30000)).astype(np.complex64)
    theirs = torch.cumsum(torch.tensor(values), 0).numpy()
    ours = rg.cumsum(rg.tensor(values), 0).numpy()
    assert ours.dtype == np.complex64
    np.testing.assert_allclose(ours, theirs, rtol=2e-7, atol=0)


def test_the_running_sum_of_float32_still_differentiates_as_torch():
    values = np.random.default_rng(4504).standard_normal((4, 50)).astype(np.float32)
    weights = np.random.default_rng(4505).standard_normal((4, 50)).astype(np.float32)
    x = torch.tensor(values, requires_grad=True)
    (torch.cumsum(x, 1) * torch.tensor(weights)).sum().backward()
    y = rg.tensor(values, requires_grad=True)
    grads = (rg.cumsum(y, 1) * rg.tensor(weights)).sum().backward()
    np.testing.assert_allclose(y.grad(grads).numpy(), x.grad.numpy(), rtol=1e-5, atol=1e-5)


_WINDOW_LENGTHS = [*range(0, 40), 64, 400, 512, 1024]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("periodic", [True, False])
def test_bartlett_window_is_torchs_to_the_last_place(dtype, periodic):
    for length in _WINDOW_LENGTHS:
        theirs = torch.bartlett_window(length, periodic, dtype=getattr(torch, dtype)).numpy()
        ours = rg.bartlett_window(length, periodic, dtype=getattr(rg, dtype)).numpy()
        np.testing.assert_array_equal(ours, theirs, err_msg=str(length))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window"])
def test_cosine_windows_round_as_torchs_steps_do(name, dtype):
    # torch runs each step in the window's dtype; only its own cos may differ in the last place
    tolerance = {"float32": 1.2e-7, "float64": 1.2e-16}[dtype]
    for periodic in (True, False):
        for length in _WINDOW_LENGTHS:
            theirs = getattr(torch, name)(length, periodic, dtype=getattr(torch, dtype)).numpy()
            ours = getattr(rg, name)(length, periodic, dtype=getattr(rg, dtype)).numpy()
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=tolerance, err_msg=str(length))


def test_windows_take_the_default_dtype_and_refuse_bad_lengths():
    assert rg.hann_window(8).dtype == rg.float32
    previous = rg.get_default_dtype()
    rg.set_default_dtype(rg.float64)
    try:
        assert rg.hamming_window(8).dtype == rg.float64
    finally:
        rg.set_default_dtype(previous)
    with pytest.raises(rg.InvalidArgumentError, match="hann_window"):
        rg.hann_window(-1)


def _next_draws(generator, lib):
    return [
        lib.rand(3, generator=generator).numpy(),
        lib.randn(2, generator=generator).numpy(),
        lib.randint(0, 100, (4,), generator=generator).numpy(),
        lib.randperm(6, generator=generator).numpy(),
    ]


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
@pytest.mark.parametrize("how", ["deepcopy", "pickle", "clone_state"])
def test_a_copied_generator_draws_what_the_original_draws_next(lib, how):
    import copy
    import pickle

    generator = lib.Generator().manual_seed(4506)
    lib.rand(5, generator=generator)  # a position past the seed
    copied = {
        "deepcopy": copy.deepcopy,
        "pickle": lambda g: pickle.loads(pickle.dumps(g)),
        "clone_state": lambda g: g.clone_state(),
    }[how](generator)
    assert copied is not generator and copied.initial_seed() == generator.initial_seed() == 4506
    for theirs, ours in zip(_next_draws(generator, lib), _next_draws(copied, lib), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    # each goes on from its own stream
    lib.rand(7, generator=copied)
    assert not np.array_equal(
        lib.rand(4, generator=copied).numpy(), lib.rand(4, generator=generator).numpy()
    )


def test_the_default_generator_pickles_as_itself_and_refuses_clone_state():
    import pickle

    assert pickle.loads(pickle.dumps(rg.default_generator)) is rg.default_generator
    with pytest.raises(rg.InvalidArgumentError, match="clone_state"):
        rg.default_generator.clone_state()


_SIGNAL_WINDOWS = [
    ("bartlett", {}),
    ("blackman", {}),
    ("cosine", {}),
    ("exponential", {}),
    ("exponential", {"tau": 3.0}),
    ("gaussian", {"std": 2.5}),
    ("general_cosine", {"a": [0.5, 0.3, 0.2]}),
    ("general_hamming", {"alpha": 0.6}),
    ("hamming", {}),
    ("hann", {}),
    ("kaiser", {"beta": 8.0}),
    ("nuttall", {}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("name", "keywords"), _SIGNAL_WINDOWS)
def test_signal_windows_are_torchs(name, keywords, dtype):
    tolerance = {"float32": 1e-6, "float64": 1e-15}[dtype]
    for length in [*range(0, 12), 64, 257]:
        for sym in (True, False):
            theirs = getattr(torch.signal.windows, name)(
                length, sym=sym, dtype=getattr(torch, dtype), **keywords
            ).numpy()
            ours = getattr(rg.signal.windows, name)(
                length, sym=sym, dtype=getattr(rg, dtype), **keywords
            ).numpy()
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (length, sym)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=tolerance, err_msg=str(length))


def test_signal_windows_refuse_what_torch_refuses():
    with pytest.raises(ValueError, match="non-negative window length"):
        rg.signal.windows.hann(-1)
    with pytest.raises(ValueError, match="float32 or float64"):
        rg.signal.windows.gaussian(4, dtype=rg.int64)
    with pytest.raises(ValueError, match="Center must be None"):
        rg.signal.windows.exponential(4, center=1.0)
    with pytest.raises(ValueError, match="Standard deviation must be positive"):
        rg.signal.windows.gaussian(4, std=0.0)
    assert rg.signal.windows.hann(8).dtype == rg.float32
