"""Small torch names found missing this round, against torch."""

import numpy as np
import torch

import retrograd as rg


def test_tensor_istft_method_is_torchs():
    signal = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    window = torch.hann_window(16)
    spectrum = torch.from_numpy(signal).stft(16, hop_length=4, window=window, return_complex=True)
    expected = spectrum.istft(16, hop_length=4, window=window, length=64)
    mine = rg.tensor(spectrum.numpy()).istft(
        16, hop_length=4, window=rg.tensor(window.numpy()), length=64
    )
    np.testing.assert_allclose(mine.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_device_as_a_block_as_torchs():
    import pytest

    from retrograd.errors import RetrogradError

    with torch.device("cpu"):
        expected = torch.ones(2).device.type
    with rg.device("cpu") as device:
        made = rg.ones(2)
    assert device == rg.device("cpu") and made.device.type == expected == "cpu"
    refused = pytest.raises(RetrogradError, match=r"cannot make a tensor on cuda:0")
    if rg.cuda.device_count() == 0:  # (a GPU backend would take the block)
        with refused, rg.device("cuda"):
            pass


def test_module_compile_in_place_returns_none_as_torchs():
    model = rg.nn.Linear(2, 3)
    assert model.compile(mode="max-autotune") is None
    assert torch.nn.Linear(2, 3).compile.__doc__  # torch's exists (it compiles lazily)
    assert model(rg.ones(1, 2)).shape == (1, 3)


def test_quantizing_is_refused_by_name():
    import pytest

    from retrograd.errors import InvalidArgumentError

    assert callable(torch.ao.quantization.quantize_dynamic)
    for name in ("quantize_dynamic", "prepare", "prepare_qat", "convert", "fuse_modules"):
        with pytest.raises(InvalidArgumentError, match=rf"ao\.quantization\.{name}: retrograd"):
            getattr(rg.ao.quantization, name)(rg.nn.Linear(1, 1))


def test_manual_seed_returns_the_default_generator_as_torchs():
    assert torch.manual_seed(0) is torch.default_generator
    assert rg.manual_seed(0) is rg.default_generator
    assert rg.random.manual_seed(0) is rg.default_generator
    first = rg.randn(4, generator=rg.manual_seed(7)).tolist()
    assert rg.randn(4, generator=rg.manual_seed(7)).tolist() == first


def test_weight_and_spectral_normed_modules_pickle_whole_as_torchs():
    import pickle

    x = rg.tensor(np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32))
    for name in ("weight_norm", "spectral_norm"):
        pickle.dumps(getattr(torch.nn.utils, name)(torch.nn.Linear(3, 2)))  # torch's pickles
        model = getattr(rg.nn.utils, name)(rg.nn.Linear(3, 2))
        model(x)
        copy = pickle.loads(pickle.dumps(model))
        np.testing.assert_array_equal(copy(x).numpy(), model(x).numpy())  # hooks kept
        assert sorted(copy.state_dict()) == sorted(model.state_dict())


def test_a_benchmark_timer_restores_torchs_own_thread_count():
    from threadpoolctl import threadpool_info

    prior = torch.get_num_threads()
    torch.set_num_threads(3)  # torch's count, unlike the BLAS pools'
    pools = [p["num_threads"] for p in threadpool_info()]
    try:
        rg.utils.benchmark.Timer("x + 1", setup="x = torch.ones(3)", num_threads=2).timeit(5)
        assert torch.get_num_threads() == 3
        assert [p["num_threads"] for p in threadpool_info()] == pools
    finally:
        torch.set_num_threads(prior)
