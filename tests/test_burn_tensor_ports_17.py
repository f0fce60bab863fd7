"""Burn's tests that the earlier batches left (tracel-ai/burn at
2c06be351006851d42fdb6df16b976f4a82d9747): ``crates/burn-backend-tests/tests/cubecl/stft.rs`` (the
short-time Fourier transform), burn-nn's ``src/modules/interpolate/{interpolate1d,
interpolate2d}.rs`` (the resizing modules), and
``crates/burn-backend-tests/tests/tensor/{extract_inplace, multi_threads}.rs``,
``tensor/float/ops/transaction.rs``, burn-core's ``tests/test_record.rs``, burn-optim's
``src/lr_scheduler/sequential.rs`` and burn-store's ``{pytorch-tests,
safetensors-tests}/tests/*/mod.rs`` (modules given the state dicts that torch scripts saved), and a
selection of the float and autodiff suites again in half precision (``tensor_f16.rs``,
``autodiff_f16.rs``: ops and their gradients, modules built in a dtype, initializers,
``float/ops/random.rs``'s uniform draws), under every checkpointing strategy on the chosen inner
backend. Expected values are Burn's as its test source writes them; torch (the reference) gives the
spectra Burn only checks the shapes of, and the half-precision values.

Burn's forms map to torch's (API.md section 10): ``signal::stft(x, window, StftOptions { n_fft,
hop_length, win_length, center, onesided })`` is ``rg.stft(x, n_fft, hop_length, win_length,
window, center, onesided=onesided, return_complex=False)``, whose result is torch's
``view_as_real`` layout ``[batch, n_freqs, n_frames, 2]`` where Burn's is ``[batch, n_frames,
n_freqs, 2]``; ``hann_window(n, periodic)``/``hamming_window(n, periodic)`` are
``rg.hann_window(n, periodic=...)``/``rg.hamming_window``. ``Interpolate1d``/``Interpolate2d``
are ``nn.Upsample(size, scale_factor, mode)`` (Burn's ``Linear`` on a 1-d input is torch's
``"linear"``, on a 2-d one ``"bilinear"``). Burn's ``tensor.inplace(f)`` is torch's in-place
form of ``f`` (``square_``, ``mul_``, ``logical_not_``); a ``Transaction`` reading a tensor is
reading it (``numpy()``), and threads share a tensor as torch's threads do. burn-store's
``PytorchStore::from_file(path)`` then ``model.load_from`` is torch's ``model.load_state_dict(
torch.load(path))``: burn_store_cases.json holds each ``.pt`` file's state dict (read with
``torch.load``; safetensors-tests' ``multi_layer`` one read from its ``.safetensors`` file),
Burn's input and its expected output; the modules are the torch ones the export
scripts built, and ``with_key_remapping``/``with_top_level_key`` are the renaming and the
unwrapping done on the dict. The half-precision variants are not ported (float16 is the torch
backend's only, API.md section 9).

Deliberate differences (torch's semantics, API.md being silent; the comments say which): torch's
``stft`` takes a hop longer than the window and any ``n_fft``, where Burn's rejects them; it
gives ``n_fft`` frequencies of a two-sided real transform as Burn's does. Burn's ``istft`` cases
cannot hold: torch's ``istft`` reads a complex spectrum only, and retrograd, having no complex
tensors, refuses it (``rg.istft``); the tests check that refusal. Burn's ``extract`` (taking a
tensor's value and leaving an empty one) has no torch form and is not ported.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)


def values(t):
    return np.asarray(t.numpy())


def close(actual, expected, tol=1e-4):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


# ---- cubecl/stft.rs ---------------------------------------------------------------------------


def stft(signal, n_fft, hop_length, center, onesided, window=None, win_length=None):
    return rg.stft(
        signal,
        n_fft,
        hop_length,
        win_length=win_length,
        window=window,
        center=center,
        onesided=onesided,
        return_complex=False,
    )


def torch_stft(signal, n_fft, hop_length, center, onesided, window=None):
    spectrum = torch.stft(
        torch.tensor(signal, dtype=torch.float64),
        n_fft,
        hop_length,
        window=torch.ones(n_fft, dtype=torch.float64) if window is None else window.double(),
        center=center,
        onesided=onesided,
        return_complex=True,
    )
    return torch.view_as_real(spectrum).numpy()


def test_stft_constant_signal_rectangular_window():
    out = stft(rg.tensor([[1.0, 1.0, 1.0, 1.0]]), 4, 1, center=False, onesided=True)
    # Burn's [batch 1, frames 1, freqs 3, 2]: ours is [batch, freqs, frames, 2]
    assert out.shape == (1, 3, 1, 2)
    spectrum = values(out)
    close(spectrum[0, 0, 0], [4.0, 0.0])  # the DC bin is the sum of the ones
    close(spectrum[0, 1:, 0], np.zeros((2, 2)))  # and no other bin holds anything


@pytest.mark.parametrize("onesided, n_freqs", [(True, 5), (False, 8)], ids=["onesided", "twosided"])
def test_stft_output_shape(onesided, n_freqs):
    signal = [[1.0] * 16]
    out = stft(rg.tensor(signal), 8, 4, center=False, onesided=onesided)
    assert out.shape == (1, n_freqs, 3, 2)  # (16 - 8) / 4 + 1 = 3 frames
    close(values(out), torch_stft(signal, 8, 4, False, onesided))


def test_stft_center_padding():
    signal = [[1.0] * 8]
    out = stft(rg.tensor(signal), 4, 2, center=True, onesided=True)
    # padded by n_fft / 2 on each side (reflected, as torch's default): 2 + 8 + 2 = 12 samples
    assert out.shape[2] == 5  # (12 - 4) / 2 + 1
    close(values(out), torch_stft(signal, 4, 2, True, True))


@pytest.mark.parametrize(
    "make_window", [rg.hann_window, rg.hamming_window], ids=["hann", "hamming"]
)
def test_stft_with_a_window(make_window):
    signal = [[1.0] * 8]
    window = make_window(4, periodic=True)
    out = stft(rg.tensor(signal), 4, 2, center=False, onesided=True, window=window)
    assert out.shape == (1, 3, 3, 2)
    reference = getattr(torch, make_window.__name__)(4, periodic=True)
    close(values(out), torch_stft(signal, 4, 2, False, True, reference))


def test_stft_batch_dimension():
    signal = [[1.0] * 8, [2.0] * 8]
    out = stft(rg.tensor(signal), 4, 2, center=False, onesided=True)
    assert out.shape[0] == 2
    close(values(out), torch_stft(signal, 4, 2, False, True))


RAMP = [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]


@pytest.mark.parametrize(
    "signal, hop_length, center, onesided, hann",
    [
        (RAMP, 2, False, True, False),
        (RAMP, 2, True, True, False),
        (RAMP, 2, False, False, False),
        (RAMP + [[8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]], 2, False, True, False),
        (RAMP, 1, True, True, True),
    ],
    ids=["rectangular", "centered", "twosided", "batch", "hann_window"],
)
def test_stft_of_the_round_trip_signals_and_its_gradient(
    signal, hop_length, center, onesided, hann
):
    # Burn's stft_istft_roundtrip_* cases: the forward half, and the gradient torch gives
    window = rg.hann_window(4, periodic=True) if hann else None
    reference_window = torch.hann_window(4, periodic=True, dtype=torch.float64) if hann else None
    x = rg.tensor(signal).require_grad()
    out = stft(x, 4, hop_length, center=center, onesided=onesided, window=window)
    close(values(out), torch_stft(signal, 4, hop_length, center, onesided, reference_window))
    weights = np.linspace(-1.0, 1.0, int(np.prod(out.shape))).reshape(out.shape)
    grads = (out * rg.tensor(weights.astype(np.float32))).sum().backward()

    tx = torch.tensor(signal, dtype=torch.float64, requires_grad=True)
    expected = torch.view_as_real(
        torch.stft(
            tx,
            4,
            hop_length,
            window=torch.ones(4, dtype=torch.float64) if not hann else reference_window,
            center=center,
            onesided=onesided,
            return_complex=True,
        )
    )
    (expected * torch.tensor(weights)).sum().backward()
    close(x.grad(grads), tx.grad.numpy())


@pytest.mark.parametrize("n_fft, hop_length", [(4, 5), (5, 1)], ids=["hop_over_window", "n_fft_5"])
def test_stft_takes_what_torch_takes(n_fft, hop_length):
    # Burn rejects a hop longer than the window and an n_fft that is not a power of two; torch
    # (and so retrograd) transforms them
    signal = [[float(i % 5) for i in range(16)]]
    out = stft(rg.tensor(signal), n_fft, hop_length, center=False, onesided=True)
    close(values(out), torch_stft(signal, n_fft, hop_length, False, True))


@pytest.mark.parametrize(
    "length, n_fft, hop_length, win_length, center, word",
    [
        (4, 0, 1, None, False, "n_fft"),
        (4, 4, 0, None, False, "hop_length"),
        (4, 4, 1, 0, False, "win_length"),
        (2, 4, 1, None, True, "reflect pad"),
    ],
    ids=["zero_nfft", "zero_hop_length", "zero_win_length", "too_short_signal_with_center"],
)
def test_stft_rejects(length, n_fft, hop_length, win_length, center, word):
    signal = rg.tensor([[1.0] * length])
    with pytest.raises(rg.RetrogradError, match=word):
        stft(signal, n_fft, hop_length, center=center, onesided=True, win_length=win_length)
    # the signal stays usable
    assert values(signal * 2.0).tolist() == [[2.0] * length]


def test_istft_is_refused_for_want_of_complex_tensors():
    spectrum = stft(rg.tensor(RAMP), 4, 2, center=False, onesided=True)
    with pytest.raises(rg.RetrogradError, match="istft"):
        rg.istft(spectrum, 4, 2)


def test_stft_default_hop_is_a_quarter_of_n_fft():
    # StftOptions::new(16): hop 16 / 4, centred, one-sided, as torch's defaults
    signal = [[float(i % 7) for i in range(64)]]
    out = rg.stft(rg.tensor(signal), 16, window=rg.ones(16), return_complex=False)
    assert out.shape == (1, 9, 17, 2)  # (64 + 16 - 16) / 4 + 1 frames
    close(values(out), torch_stft(signal, 16, 4, True, True))


# ---- burn-nn src/modules/interpolate/{interpolate1d, interpolate2d}.rs ------------------------


@pytest.mark.parametrize(
    "kwargs, size",
    [
        ({"size": 2}, 2),
        ({"scale_factor": 2.0}, 8),
        ({"scale_factor": 0.5}, 2),
        ({"scale_factor": 1.5}, 6),
    ],
)
def test_interpolate1d_output_size(kwargs, size):
    x = rg.arange(0, 4).float().reshape(1, 1, 4)
    assert nn.Upsample(**kwargs)(x).shape == (1, 1, size)


@pytest.mark.parametrize(
    "kwargs, size",
    [
        ({"size": (2, 2)}, (2, 2)),
        ({"scale_factor": (2.0, 2.0)}, (8, 8)),
        ({"scale_factor": (0.5, 0.5)}, (2, 2)),
        ({"scale_factor": (2.0, 1.5)}, (8, 6)),
    ],
)
def test_interpolate2d_output_size(kwargs, size):
    x = rg.arange(0, 16).float().reshape(1, 1, 4, 4)
    assert nn.Upsample(**kwargs)(x).shape == (1, 1, *size)


@pytest.mark.parametrize("spatial", [(4,), (4, 4)], ids=["1d", "2d"])
def test_interpolate_needs_a_size_or_a_scale_factor(spatial):
    x = rg.ones(1, 1, *spatial)
    with pytest.raises(rg.RetrogradError, match="size"):
        nn.Upsample()(x)
    assert values(x).sum() == np.prod(spatial)


@pytest.mark.parametrize(
    "spatial, scale",
    [((4,), 1e30), ((4, 4), (1e30, 1.0)), ((4, 4), (1.0, 1e30))],
    ids=["1d", "2d_height", "2d_width"],
)
def test_interpolate_rejects_a_scale_factor_too_large(spatial, scale):
    # Burn's usize::MAX - 1 input times 2 overflows; an output size past int64 is ours (and
    # torch's: "value cannot be converted to type int64_t without overflow")
    x = rg.ones(1, 1, *spatial)
    with pytest.raises(rg.RetrogradError, match="interpolate"):
        nn.Upsample(scale_factor=scale)(x)


@pytest.mark.parametrize(
    "shape, linear",
    [((2, 3, 4), "linear"), ((2, 3, 4, 4), "bilinear")],
    ids=["interpolate1d", "interpolate2d"],
)
def test_interpolate_module(shape, linear):
    rg.seed(0)
    x = rg.rand(*shape)
    spatial = len(shape) - 2
    cases = [
        (nn.Upsample(size=(8,) * spatial), (8,) * spatial, "nearest"),
        (nn.Upsample(scale_factor=(0.5,) * spatial), (2,) * spatial, "nearest"),
        (nn.Upsample(size=(6,) * spatial, mode=linear), (6,) * spatial, linear),
    ]
    for module, size, mode in cases:
        out = module(x)
        assert out.shape == (*shape[:2], *size)
        expected = torch.nn.functional.interpolate(torch.tensor(values(x)), size=size, mode=mode)
        close(values(out), expected.numpy(), 1e-5)


# ---- tensor/extract_inplace.rs ------------------------------------------------------------------


def test_inplace_float():
    t = rg.tensor([0.0, 1.0, 2.0, 3.0])
    same = t
    t.square_()
    assert values(same).tolist() == [0.0, 1.0, 4.0, 9.0]


def test_inplace_int():
    t = rg.tensor([0, 1, 2, 3])
    t.mul_(t)
    assert t.dtype == "int64" and values(t).tolist() == [0, 1, 4, 9]


def test_inplace_bool():
    t = rg.tensor([True, True, False, False])
    t.logical_not_()
    assert t.dtype == "bool" and values(t).tolist() == [False, False, True, True]


# ---- tensor/float/ops/transaction.rs ------------------------------------------------------------


def test_transaction_reads_a_transposed_gram_matrix():
    j = rg.zeros(32, 408)
    g = j.transpose(0, 1).matmul(j).transpose(0, 1)
    assert g.shape == (408, 408)
    first, second = values(g), values(g)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, np.zeros((408, 408), np.float32))


# ---- tensor/multi_threads.rs ------------------------------------------------------------------


@pytest.mark.parametrize(
    "ops_alive, ops_consumed, dropped",
    [(5, 5, True), (5, 5, False), (0, 0, False)],
    ids=["dropped", "consumed", "no_async_op"],
)
def test_threads_share_a_tensor(ops_alive, ops_consumed, dropped):
    data = np.array([[0.0, -1.0, 2.0], [3.0, 4.0, -5.0]], np.float32)
    shared = rg.tensor(data)
    active = rg.current_backend()
    results, errors = {}, []

    def work(i, own):  # each thread holds its own reference, as Burn's clone
        try:
            with rg.use_backend(active):
                base = own
                if ops_alive == 0 and ops_consumed == 0:
                    return
                for j in range(ops_alive - 1):
                    base = own + j
                base = base * own + i
                for n in range(ops_consumed):
                    base = base + n
                results[i] = values(base)
        except Exception as error:  # reported in the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i, shared)) for i in range(3)]
    for thread in threads:
        thread.start()
    if dropped:
        del shared
    else:
        close(values(shared * 2.0), data * 2.0)
    for thread in threads:
        thread.join()
    assert not errors, errors
    for i, got in results.items():
        base = data + (ops_alive - 2)
        expected = base * data + i + sum(range(ops_consumed))
        close(got, expected)
    assert len(results) == (0 if ops_alive == 0 else 3)


# ---- burn-store pytorch-tests/tests/*/mod.rs --------------------------------------------------

with open(os.path.join(os.path.dirname(__file__), "burn_store_cases.json")) as cases_file:
    STORE_CASES = json.load(cases_file)


def state_dict_of(case):
    return {
        key: rg.tensor(np.asarray(entry["data"], dtype=entry["dtype"]))
        for key, entry in STORE_CASES[case]["state"].items()
    }


class TwoLayers(nn.Module):
    """The export scripts' ``Model``: ``conv1`` (with bias) then ``conv2`` (without), or the
    same for linear layers with a ReLU between them."""

    def __init__(self, first, second, between=None):
        super().__init__()
        self.conv1, self.conv2, self.between = first, second, between

    def forward(self, x):
        x = self.conv1(x)
        if self.between is not None:
            x = self.between(x)
        return self.conv2(x)


class Linears(nn.Module):
    def __init__(self, with_second=True):
        super().__init__()
        self.fc1 = nn.Linear(2, 3)
        self.fc2 = nn.Linear(3, 4, bias=False) if with_second else None

    def forward(self, x):
        x = self.fc1(x)
        return x if self.fc2 is None else self.fc2(rg.relu(x))


def conv_pair(conv, kernel):
    return TwoLayers(conv(2, 2, kernel), conv(2, 2, kernel, bias=False))


class Named(nn.Module):
    """A model holding one module under the name the export script gave it."""

    def __init__(self, name, module):
        super().__init__()
        setattr(self, name, module)
        self.name = name

    def forward(self, x):
        return getattr(self, self.name)(x)


STORE_MODELS = {
    # case: (model, Burn's absolute tolerance)
    "conv1d": (lambda: conv_pair(nn.Conv1d, 2), 1e-7),
    "conv2d": (lambda: conv_pair(nn.Conv2d, (2, 2)), 1e-7),
    "conv_transpose1d": (lambda: conv_pair(nn.ConvTranspose1d, 2), 1e-8),
    "conv_transpose2d": (lambda: conv_pair(nn.ConvTranspose2d, (2, 2)), 1e-7),
    "linear": (Linears, 1e-7),
    "linear_with_bias": (lambda: Linears(with_second=False), 1e-3),
    "layer_norm": (lambda: Named("norm1", nn.LayerNorm(2)), 1e-3),
    "group_norm": (lambda: Named("norm1", nn.GroupNorm(2, 6)), 1e-3),
    "embedding": (lambda: Named("embed", nn.Embedding(10, 3)), 1e-3),
}


@pytest.mark.parametrize("case", list(STORE_MODELS))
def test_pytorch_store_module(case):
    make, tolerance = STORE_MODELS[case]
    model = make()
    model.load_state_dict(state_dict_of(case))
    dtype = "int64" if case == "embedding" else "float32"
    out = model(rg.tensor(np.asarray(STORE_CASES[case]["input"], dtype=dtype)))
    # Burn compares to 1e-7 and 1e-8 absolute; float32 rounding in another summation order
    # gives up to a few ulps of these outputs (|y| < 1)
    np.testing.assert_allclose(
        values(out), STORE_CASES[case]["expected"], rtol=0, atol=max(tolerance, 1e-6)
    )


def test_pytorch_store_batch_norm_uses_the_loaded_running_statistics():
    model = Named("norm1", nn.BatchNorm2d(5))
    model.load_state_dict(state_dict_of("batch_norm"))
    assert model.norm1.num_batches_tracked.dtype == "int64"
    model.eval()
    out = model(rg.ones(1, 5, 2, 2) - 0.3)
    close(values(out), STORE_CASES["batch_norm"]["expected"], 1e-5)


def test_pytorch_store_non_contiguous_indexes():
    # fc.0, fc.2, ... fc.8: the convolutions between ReLUs of torch's Sequential
    layers = []
    for _ in range(5):
        layers += [nn.Conv2d(2, 2, kernel_size=3, padding=1), nn.ReLU()]
    model = Named("fc", nn.Sequential(*layers))
    model.load_state_dict(state_dict_of("non_contiguous_indexes"))
    case = STORE_CASES["non_contiguous_indexes"]
    out = model(rg.tensor(case["input"]))
    np.testing.assert_allclose(values(out), case["expected"], rtol=0, atol=1e-6)


def test_pytorch_store_key_remap():
    # with_key_remapping("conv\\.(.*)", "$1"): "conv.conv1.weight" -> "conv1.weight"
    state = {
        re.sub(r"^conv\.(.*)", r"\1", key): value
        for key, value in state_dict_of("key_remap").items()
    }
    model = conv_pair(nn.Conv2d, (2, 2))
    model.load_state_dict(state)
    case = STORE_CASES["key_remap"]
    np.testing.assert_allclose(values(model(rg.tensor(case["input"]))), case["expected"], atol=1e-6)
    # without the remapping the keys name nothing in the model
    with pytest.raises(rg.RetrogradError, match="conv1"):
        conv_pair(nn.Conv2d, (2, 2)).load_state_dict(state_dict_of("key_remap"))


def test_pytorch_store_top_level_key_and_missing_module_field():
    state = state_dict_of("conv2d")
    conv_state = {
        key[len("conv1.") :]: value for key, value in state.items() if key.startswith("conv1.")
    }
    model = Named("conv1", nn.Conv2d(2, 2, (2, 2)))
    with pytest.raises(rg.RetrogradError, match="my_state_dict"):
        model.load_state_dict({"my_state_dict": {"conv1." + k: v for k, v in conv_state.items()}})
    model.load_state_dict({"conv1." + k: v for k, v in conv_state.items()})  # with_top_level_key
    np.testing.assert_array_equal(values(model.conv1.weight), values(conv_state["weight"]))
    # missing_module_field: a model whose field the file does not hold names it
    missing = Named("do_not_exist_in_pt", nn.Conv2d(2, 2, (2, 2)))
    with pytest.raises(rg.RetrogradError, match="do_not_exist_in_pt"):
        missing.load_state_dict({"conv1." + k: v for k, v in conv_state.items()})


class Buffered(nn.Module):
    def __init__(self, placeholder):
        super().__init__()
        self.register_buffer("buffer", placeholder, persistent=True)

    def forward(self, x):
        return self.buffer + x


@pytest.mark.parametrize(
    "placeholder, saved",
    [
        ([[0.0] * 3] * 3, [[1.0] * 3] * 3),  # buffer.pt: torch.ones(3, 3)
        ([False, False, False], [True, False, True]),  # boolean.pt
        ([0, 0, 0], [1, 2, 3]),  # integer.pt: int64
    ],
    ids=["buffer", "boolean", "integer"],
)
def test_pytorch_store_buffers(placeholder, saved):
    model = Buffered(rg.tensor(placeholder))
    saved = rg.tensor(saved)
    model.load_state_dict({"buffer": saved})
    assert model.buffer.dtype == saved.dtype
    assert values(model.buffer).tolist() == values(saved).tolist()
    if saved.dtype == "float32":
        assert values(model(rg.ones(3, 3))).tolist() == [[2.0] * 3] * 3


class DwsConv(nn.Module):
    """enum_module's depthwise separable convolution (Burn's ``Conv::DwsConv`` variant)."""

    def __init__(self):
        super().__init__()
        self.dconv = nn.Conv2d(2, 2, 3, groups=2)
        self.pconv = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        return self.pconv(self.dconv(x))


@pytest.mark.parametrize("depthwise", [False, True], ids=["depthwise_false", "depthwise_true"])
def test_pytorch_store_enum_module(depthwise):
    case = f"enum_depthwise_{str(depthwise).lower()}"
    model = Named("conv", DwsConv() if depthwise else nn.Conv2d(2, 2, 3))
    model.load_state_dict(state_dict_of(case))
    out = model(rg.tensor(STORE_CASES[case]["input"]))
    close(values(out), STORE_CASES[case]["expected"], 1e-5)


class RemappedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 6, 1, bias=False)
        self.bn = nn.BatchNorm2d(6)

    def forward(self, x):
        return self.bn(self.conv(x))


class RemappedModel(nn.Module):
    """key_remap_chained's Burn model: ``layer.blocks.i.{conv, bn}`` where the file, saved from
    torch's ``Sequential`` blocks, has ``layer.i.block.{0, 1}``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.layer = Named("blocks", nn.Sequential(RemappedBlock(), RemappedBlock()))

    def forward(self, x):
        return self.layer(self.bn(self.conv(x)))


def remapped(state, patterns):
    for pattern, replacement in patterns:
        state = {re.sub(pattern, replacement, key): value for key, value in state.items()}
    return state


BLOCK_REMAPS = [(r"(.+)\.block\.0\.(.+)", r"\1.conv.\2"), (r"(.+)\.block\.1\.(.+)", r"\1.bn.\2")]


def test_pytorch_store_key_remap_chained():
    model = RemappedModel()
    state = remapped(
        state_dict_of("key_remap_chained"),
        BLOCK_REMAPS + [(r"layer\.([0-9])\.(.+)", r"layer.blocks.\1.\2")],
    )
    model.load_state_dict(state)
    model.eval()
    case = STORE_CASES["key_remap_chained"]
    close(values(model(rg.tensor(case["input"]))), case["expected"], 1e-5)


def test_pytorch_store_key_remap_chained_missing_pattern():
    model = RemappedModel()
    before = values(model.bn.running_var)
    state = remapped(state_dict_of("key_remap_chained"), BLOCK_REMAPS)
    with pytest.raises(rg.RetrogradError, match="layer"):
        model.load_state_dict(state)
    np.testing.assert_array_equal(values(model.bn.running_var), before)  # nothing half-loaded


class ConvNormBlock(nn.Module):
    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, (3, 2))
        self.norm = nn.BatchNorm2d(channels_out)

    def forward(self, x):
        return self.norm(self.conv(x))


class ComplexNested(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_blocks = nn.Sequential(ConvNormBlock(2, 4), ConvNormBlock(4, 6))
        self.norm1 = nn.BatchNorm2d(6)
        self.fc1 = nn.Linear(120, 12)
        self.fc2 = nn.Linear(12, 10)

    def forward(self, x):
        x = self.norm1(self.conv_blocks(x)).flatten(1)
        return rg.nn.functional.log_softmax(self.fc2(rg.relu(self.fc1(x))), dim=1)


def test_pytorch_store_complex_nested():
    model = ComplexNested()
    model.load_state_dict(state_dict_of("complex_nested"))
    model.eval()
    out = model(rg.ones(1, 2, 9, 6) - 0.5)
    # Burn compares to 1e-8 absolute; float32 rounding in another order gives a few ulps
    np.testing.assert_allclose(values(out), STORE_CASES["complex_nested"]["expected"], atol=1e-5)
    # full_record_autodiff: the loaded parameters are trainable leaves
    loss = out.sum()
    grads = loss.backward()
    assert model.fc1.weight.grad(grads).shape == (12, 120)


def test_pytorch_store_partial_model_loading():
    # the file's conv_blocks.0.* renamed conv1.*, the rest left out (allow_partial)
    state = remapped(state_dict_of("complex_nested"), [(r"conv_blocks\.0\.(.*)", r"conv1.\1")])
    model = Named("conv1", ConvNormBlock(2, 4))
    partial = {key: value for key, value in state.items() if key.startswith("conv1.")}
    model.load_state_dict(partial)
    model.eval()
    out = model(rg.ones(1, 2, 9, 6) - 0.5)
    np.testing.assert_allclose(float(values(out.sum())), 4.871538, atol=2e-5)
    # and strict loading of the whole file names the keys the model lacks
    with pytest.raises(rg.RetrogradError, match="fc1"):
        Named("conv1", ConvNormBlock(2, 4)).load_state_dict(state)
    missing, unexpected = Named("conv1", ConvNormBlock(2, 4)).load_state_dict(state, strict=False)
    assert not missing and "fc1.weight" in unexpected


# ---- tensor_f16.rs, autodiff_f16.rs: the float suites again in half precision -------------------
# Burn builds its float and autodiff tests a second time with FloatElem = f16. Half precision is
# the torch backend's (API.md section 9; NumpyBackend refuses it with a DTypeError), so each case
# runs one op of those suites on a float16 input and checks the result and the gradient against
# torch's own float16 op, or checks the refusal on NumPy.

HALF_INPUT = [[1.0, -2.0, 0.5], [3.0, 0.25, -1.5]]

HALF_OPS = {
    "exp": lambda m, t: t.exp(),
    "matmul": lambda m, t: t @ t.T,
    "sum_dim": lambda m, t: t.sum(1),
    "mean_dim": lambda m, t: t.mean(0),
    "var": lambda m, t: t.var(1),
    "prod": lambda m, t: t.prod(1),
    "powf": lambda m, t: t.abs().pow(2.5),
    "sqrt": lambda m, t: t.abs().sqrt(),
    "log1p": lambda m, t: t.abs().log1p(),
    "erf": lambda m, t: t.erf(),
    "tanh": lambda m, t: t.tanh(),
    "sigmoid": lambda m, t: t.sigmoid(),
    "cumsum": lambda m, t: t.cumsum(1),
    "cumprod": lambda m, t: t.cumprod(1),
    "sort": lambda m, t: t.sort(1)[0],
    "max_dim": lambda m, t: t.max(1)[0],
    "softmax": lambda m, t: m.nn.functional.softmax(t, 1),
    "log_softmax": lambda m, t: m.nn.functional.log_softmax(t, 1),
    "gelu": lambda m, t: m.nn.functional.gelu(t),
    "layer_norm": lambda m, t: m.nn.functional.layer_norm(t, (3,)),
    "conv1d": lambda m, t: m.nn.functional.conv1d(t[None], t[:, :2, None] * 0.5),
    "max_pool1d": lambda m, t: m.nn.functional.max_pool1d(t[None], 2, 1),
    "avg_pool1d": lambda m, t: m.nn.functional.avg_pool1d(t[None], 2, 1),
    "interpolate": lambda m, t: m.nn.functional.interpolate(
        t[None, None], size=(3, 4), mode="bilinear"
    ),
    "cross_entropy": lambda m, t: m.nn.functional.cross_entropy(t, m.tensor([0, 2])),
    "mse_loss": lambda m, t: m.nn.functional.mse_loss(t, t.detach() * 0.5),
}


def half_precision_backend():
    return not isinstance(rg.current_backend().inner, rg.NumpyBackend)


HALF_DTYPES = {"float16": 2e-2, "bfloat16": 8e-2}  # dtype: the tolerance its 8 or 11 bits allow


@pytest.mark.parametrize("dtype", list(HALF_DTYPES))
@pytest.mark.parametrize("op", list(HALF_OPS))
def test_float_ops_in_half_precision(op, dtype):
    if not half_precision_backend():
        with pytest.raises(rg.DTypeError, match=dtype):
            rg.tensor(HALF_INPUT, dtype=dtype)
        return
    make = HALF_OPS[op]
    x = rg.tensor(HALF_INPUT, dtype=dtype).require_grad()
    out = make(rg, x)
    assert out.dtype == dtype
    grad = x.grad((out * 1.0).sum().backward())
    assert grad.dtype == dtype

    tx = torch.tensor(HALF_INPUT, dtype=getattr(torch, dtype), requires_grad=True)
    expected = make(torch, tx)
    expected.sum().backward()
    tolerance = HALF_DTYPES[dtype]
    close(values(out.float()), expected.detach().float().numpy(), tolerance)
    close(values(grad.float()), tx.grad.float().numpy(), tolerance)


@pytest.mark.parametrize("dtype", list(HALF_DTYPES))
def test_rfft_round_trip_in_half_precision(dtype):
    # autodiff/rfft.rs under autodiff_f16.rs: the transforms keep the dtype, and the round trip
    # gives back the signal (and the signal's own values as the gradient of half its square)
    if not half_precision_backend():
        return  # NumPy has no half-precision tensors (test_float_ops_in_half_precision)
    data = np.array([0.26, 0.13, 0.36, 0.24, 0.40, 0.93, 0.12, 0.18], np.float32)
    x = rg.tensor(data, dtype=dtype).require_grad()
    re, im = rg.signal.rfft(x, 0)
    assert re.dtype == im.dtype == dtype
    out = rg.signal.irfft(re, im, 0)
    grad = x.grad((out.pow(2).sum() * 0.5).backward())
    assert out.dtype == grad.dtype == dtype
    rounded = values(x.float())
    close(values(out.float()), rounded, HALF_DTYPES[dtype])
    close(values(grad.float()), rounded, HALF_DTYPES[dtype])
    spectrum = rg.stft(x[None], 4, 2, center=False, return_complex=False)
    assert spectrum.dtype == dtype
    reference = torch.view_as_real(
        torch.stft(
            torch.tensor(rounded)[None],
            4,
            2,
            window=torch.ones(4),
            center=False,
            return_complex=True,
        )
    )
    close(values(spectrum.float()), reference.numpy(), 4 * HALF_DTYPES[dtype])


def test_ctc_loss_refuses_half_precision_as_torch():
    # Burn's module/ctc.rs runs in f16 too; torch's ctc_loss kernels take float32 and float64
    # only ("ctc_loss_cpu" not implemented for 'Half'), so retrograd refuses it clearly
    if not half_precision_backend():
        return  # NumPy has no float16 tensors to refuse (test_float_ops_in_half_precision)
    logits = rg.tensor(HALF_INPUT, dtype="float16")
    log_probs = rg.nn.functional.log_softmax(logits[:, None, :], 2)
    with pytest.raises(rg.DTypeError, match=r"ctc_loss.*float16"):
        rg.nn.functional.ctc_loss(log_probs, rg.tensor([[1]]), [2], [1])
    loss = rg.nn.functional.ctc_loss(log_probs.float(), rg.tensor([[1]]), [2], [1])
    expected = torch.nn.functional.ctc_loss(
        torch.log_softmax(torch.tensor(HALF_INPUT, dtype=torch.float16)[:, None, :], 2).float(),
        torch.tensor([[1]]),
        [2],
        [1],
    )
    close(values(loss), expected.numpy())


class MultiLayer(nn.Module):
    """safetensors-tests' multi_layer model (its state dict read from the .safetensors file)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, kernel_size=3, padding=1)
        self.norm1 = nn.BatchNorm2d(4)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(4 * 8 * 8, 16)

    def forward(self, x):
        return self.fc1(self.flatten(rg.relu(self.norm1(self.conv1(x)))))


def test_safetensors_store_multi_layer():
    model = MultiLayer()
    model.load_state_dict(state_dict_of("safetensors_multi_layer"))
    model.eval()
    out = model(rg.ones(1, 3, 8, 8))
    close(values(out), STORE_CASES["safetensors_multi_layer"]["expected"], 1e-5)


# ---- burn-core tests/test_record.rs -------------------------------------------------------------
# Burn's ``into_record``/``save``/``ModuleRecord::load``/``load_record`` are torch's
# ``state_dict``/``rg.save``/``rg.load``/``load_state_dict``; ``allow_partial`` is
# ``strict=False``.


class RecordLayer(nn.Module):
    def __init__(self, weight, bias):
        super().__init__()
        self.weight = nn.Parameter(rg.tensor(weight))
        self.bias = nn.Parameter(rg.tensor(bias))


class RecordMlp(nn.Module):
    def __init__(self, first, second=None):
        super().__init__()
        self.first = first
        if second is not None:
            self.second = second


def sample_mlp():
    return RecordMlp(
        RecordLayer([[1.0, 2.0], [3.0, 4.0]], [5.0, 6.0]),
        RecordLayer([[7.0, 8.0], [9.0, 10.0]], [11.0, 12.0]),
    )


def zero_mlp():
    return RecordMlp(
        RecordLayer([[0.0] * 2] * 2, [0.0] * 2), RecordLayer([[0.0] * 2] * 2, [0.0] * 2)
    )


def assert_matches_sample(model):
    assert values(model.first.weight).ravel().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert values(model.first.bias).tolist() == [5.0, 6.0]
    assert values(model.second.weight).ravel().tolist() == [7.0, 8.0, 9.0, 10.0]
    assert values(model.second.bias).tolist() == [11.0, 12.0]


def test_save_and_load_module_via_file(tmp_path):
    record = sample_mlp().state_dict()
    assert len(record) == 4  # first.weight, first.bias, second.weight, second.bias
    path = tmp_path / "mlp.pt"
    rg.save(record, path)
    loaded = zero_mlp()
    loaded.load_state_dict(rg.load(path))
    assert_matches_sample(loaded)


def test_save_and_load_module_via_bytes():
    buffer = io.BytesIO()
    rg.save(sample_mlp().state_dict(), buffer)
    buffer.seek(0)
    loaded = zero_mlp()
    loaded.load_state_dict(rg.load(buffer))
    assert_matches_sample(loaded)


def test_missing_parameters_require_allow_partial():
    buffer = io.BytesIO()
    rg.save(RecordMlp(RecordLayer([[1.0, 2.0], [3.0, 4.0]], [5.0, 6.0])).state_dict(), buffer)
    buffer.seek(0)
    partial = rg.load(buffer)
    strict = zero_mlp()
    with pytest.raises(rg.RetrogradError, match="second"):
        strict.load_state_dict(partial)
    assert values(strict.first.weight).ravel().tolist() == [0.0] * 4  # nothing half-loaded
    lenient = zero_mlp()
    missing, unexpected = lenient.load_state_dict(partial, strict=False)
    assert sorted(missing) == ["second.bias", "second.weight"] and not unexpected
    assert values(lenient.first.weight).ravel().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert values(lenient.first.bias).tolist() == [5.0, 6.0]
    assert values(lenient.second.weight).ravel().tolist() == [0.0] * 4
    assert values(lenient.second.bias).tolist() == [0.0, 0.0]


# ---- burn-optim src/lr_scheduler/sequential.rs --------------------------------------------------
# Burn's SequentialLrScheduler of Linear(0.1 -> 0.3 over 2), Exponential(0.5, gamma 0.5) and
# CosineAnnealing(0.8 over 2) at milestones [2, 5] is torch's SequentialLR of LinearLR(0.1, 0.3,
# 2), ExponentialLR(0.5) and CosineAnnealingLR(2). Deliberate difference (torch's semantics):
# torch's schedulers all scale the optimizer's one base rate (1.0 here) where Burn's each start
# from their own, so the rates are torch's; and torch takes a zero or non-increasing milestone,
# which Burn refuses.


def sequential_scheduler(milestones):
    optimizer = rg.optim.SGD([nn.Parameter(rg.zeros(1))], lr=1.0)
    schedulers = rg.optim.lr_scheduler
    parts = [
        schedulers.LinearLR(optimizer, 0.1, 0.3, 2),
        schedulers.ExponentialLR(optimizer, 0.5),
        schedulers.CosineAnnealingLR(optimizer, 2),
    ]
    return schedulers.SequentialLR(optimizer, parts, milestones)


def rates(scheduler, steps):
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0])
        scheduler.step()
    return out


@pytest.mark.parametrize(
    "milestones, expected",
    [
        ([2, 5], [0.1, 0.2, 1.0, 0.5, 0.25, 1.0, 0.5, 0.0]),  # Burn's [0.1, 0.2, 0.5, ... 0.0]
        ([0, 2], [1.0, 0.5, 1.0, 0.5, 0.0, 0.5, 1.0, 0.5]),
        ([2, 2], [0.1, 0.2, 1.0, 0.5, 0.0, 0.5, 1.0, 0.5]),
        ([3, 2], [0.1, 0.2, 1.0, 0.5, 0.0, 0.5, 1.0, 0.5]),
    ],
    ids=["switches_at_milestones", "zero", "equal", "decreasing"],
)
def test_sequential_scheduler_switches_at_milestones(milestones, expected):
    # expected: torch 2.13's SequentialLR on the same schedulers
    close(rates(sequential_scheduler(milestones), 8), expected, 1e-6)


def test_sequential_scheduler_rejects_bad_configs():
    optimizer = rg.optim.SGD([nn.Parameter(rg.zeros(1))], lr=1.0)
    with pytest.raises(rg.InvalidArgumentError, match="at least one scheduler"):
        rg.optim.lr_scheduler.SequentialLR(optimizer, [], [])
    with pytest.raises(rg.InvalidArgumentError, match="one more scheduler than milestones"):
        sequential_scheduler([2])
    # Burn's LinearLrSchedulerConfig of 0 iterations is refused; torch's LinearLR(total_iters=0)
    # keeps the start factor
    linear = rg.optim.lr_scheduler.LinearLR(optimizer, 0.1, 0.2, 0)
    close(rates(linear, 3), [0.1, 0.1, 0.1], 1e-6)


@pytest.mark.parametrize("steps", [1, 4, 6])
def test_sequential_scheduler_saves_and_loads_around_transitions(steps):
    scheduler = sequential_scheduler([2, 5])
    rates(scheduler, steps)
    state = scheduler.state_dict()
    resumed = sequential_scheduler([2, 5])
    resumed.load_state_dict(state)
    close(rates(resumed, 4), rates(scheduler, 4), 1e-9)


# Burn's f16 suites build their modules in f16 as well (burn-nn's ``*_f16`` cases): torch's
# ``dtype=`` on a module constructor, and its initializers on a tensor of that dtype.

MODULES_WITH_DTYPE = {
    "Linear": lambda dtype: nn.Linear(4, 3, dtype=dtype),
    "Embedding": lambda dtype: nn.Embedding(5, 3, padding_idx=1, dtype=dtype),
    "EmbeddingBag": lambda dtype: nn.EmbeddingBag(5, 3, dtype=dtype),
    "LSTM": lambda dtype: nn.LSTM(4, 3, dtype=dtype),
    "MultiheadAttention": lambda dtype: nn.MultiheadAttention(4, 2, dtype=dtype),
    "TransformerEncoderLayer": lambda dtype: nn.TransformerEncoderLayer(
        4, 2, 8, dropout=0.0, dtype=dtype
    ),
}


@pytest.mark.parametrize("dtype", ["float64", *HALF_DTYPES])
@pytest.mark.parametrize("module", list(MODULES_WITH_DTYPE))
def test_module_built_in_a_dtype_holds_that_dtype(module, dtype):
    rg.seed(0)
    if dtype in HALF_DTYPES and not half_precision_backend():
        with pytest.raises(rg.DTypeError, match=dtype):
            MODULES_WITH_DTYPE[module](dtype)
        return
    layer = MODULES_WITH_DTYPE[module](dtype)
    for name, parameter in layer.named_parameters():
        assert parameter.dtype == dtype, (name, parameter.dtype)
        assert np.isfinite(values(parameter.float())).all()
    if module == "Embedding":
        assert not values(layer.weight.float())[1].any()  # the padding row


INITIALIZERS = {
    "xavier_uniform_": lambda t: rg.nn.init.xavier_uniform_(t),
    "kaiming_normal_": lambda t: rg.nn.init.kaiming_normal_(t),
    "trunc_normal_": lambda t: rg.nn.init.trunc_normal_(t, std=0.5),
    "eye_": lambda t: rg.nn.init.eye_(t),
    "constant_": lambda t: rg.nn.init.constant_(t, 0.3),
}


@pytest.mark.parametrize("dtype", list(HALF_DTYPES))
@pytest.mark.parametrize("init", list(INITIALIZERS))
def test_initializers_in_half_precision(init, dtype):
    if not half_precision_backend():
        return  # NumPy has no half-precision tensors (test_float_ops_in_half_precision)
    rg.seed(0)
    t = rg.zeros(4, 4, dtype=dtype)
    out = INITIALIZERS[init](t)
    assert out is t and t.dtype == dtype
    filled = values(t.float())
    if init == "eye_":
        np.testing.assert_array_equal(filled, np.eye(4))
    elif init == "constant_":
        close(filled, np.full((4, 4), 0.3), HALF_DTYPES[dtype])
    else:
        assert np.isfinite(filled).all() and filled.std() > 0


@pytest.mark.parametrize("dtype", ["float64", *HALF_DTYPES])
def test_replicate_keeps_the_dtype(dtype):
    # a replica per device (Burn's fork): the same values in the same dtype
    if dtype in HALF_DTYPES and not half_precision_backend():
        return  # NumPy has no half-precision tensors (test_module_built_in_a_dtype_...)
    rg.seed(0)
    layer = nn.BatchNorm1d(2, dtype=dtype)
    replica = layer.replicate()
    for original, copy in zip(
        [*layer.parameters(), *layer.buffers()], [*replica.parameters(), *replica.buffers()]
    ):
        assert copy.dtype == original.dtype
        np.testing.assert_array_equal(values(copy.double()), values(original.double()))


# float/ops/random.rs in f16: Burn accepts 1 in a half-precision draw ("the conversion can ceil
# the value"); torch's draws stay in [0, 1) in every dtype (they are made on the dtype's grid),
# and so must retrograd's, by every route to them.

UNIFORM_ROUTES = {
    "rand": lambda dtype, gen: rg.rand(4096, dtype=dtype, generator=gen),
    "random": lambda dtype, gen: rg.random((4096,), "uniform", dtype=dtype, generator=gen),
    "uniform_": lambda dtype, gen: rg.empty(4096, dtype=dtype).uniform_(generator=gen),
    "rand_like": lambda dtype, gen: rg.rand_like(rg.empty(4096, dtype=dtype)),
    "init.uniform_": lambda dtype, gen: rg.nn.init.uniform_(
        rg.empty(4096, dtype=dtype), generator=gen
    ),
}


@pytest.mark.parametrize("seeded", ["stream", "generator"])
@pytest.mark.parametrize("dtype", list(HALF_DTYPES))
@pytest.mark.parametrize("route", list(UNIFORM_ROUTES))
def test_uniform_draws_in_half_precision_stay_below_one(route, dtype, seeded):
    if not half_precision_backend():
        return  # NumPy has no half-precision tensors (test_float_ops_in_half_precision)
    rg.seed(0)
    generator = rg.Generator().manual_seed(1) if seeded == "generator" else None
    draws = values(UNIFORM_ROUTES[route](dtype, generator).float())
    # 4096 draws put ~16 (bfloat16) or ~2 (float16) on 1 when rounded to nearest
    assert draws.min() >= 0.0 and draws.max() < 1.0, draws.max()
    assert 0.45 < draws.mean() < 0.55


@pytest.mark.parametrize("dtype", list(HALF_DTYPES))
@pytest.mark.parametrize("low, high", [(4.0, 5.0), (-3.0, -2.0), (0.1, 0.2)], ids=str)
def test_uniform_with_bounds_in_half_precision_stays_in_range(low, high, dtype):
    # random.rs's rand_uniform (Distribution::Uniform(4., 5.)) in f16: a + (b - a) * u rounded
    # to nearest reached b (1 draw in 64 at [4, 5) in bfloat16); torch's draws are the values
    # the dtype holds in [a, b), each about equally often
    if not half_precision_backend():
        return  # NumPy has no half-precision tensors (test_float_ops_in_half_precision)
    rg.seed(0)
    draws = values(rg.empty(4096, dtype=dtype).uniform_(low, high).double())
    reference = torch.empty(4096, dtype=getattr(torch, dtype)).uniform_(low, high).double()
    lowest = float(torch.tensor(low, dtype=getattr(torch, dtype)).double())
    assert draws.min() >= min(low, lowest) and draws.max() < high, (draws.min(), draws.max())
    assert len(np.unique(draws)) > 0.5 * len(np.unique(reference.numpy()))
