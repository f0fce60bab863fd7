"""``rg.load`` of the files ``torch.save`` writes (``retrograd/torch_files.py``): the zip
format and the legacy one, state dicts and checkpoints, under torch's ``weights_only`` rules.

Before, ``rg.load`` refused every torch file ("torch's own format, whose pickles are never
read here"), so a ported script could not load a pretrained model or resume from a checkpoint
its PyTorch version wrote. Every expected value here comes from torch.
"""

from __future__ import annotations

import argparse
import io
import zipfile

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch

FORMATS = {"zip": True, "legacy": False}


def _saved(obj, zip_format: bool = True) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer, _use_new_zipfile_serialization=zip_format)
    buffer.seek(0)
    return buffer


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(3)
        self.embed = torch.nn.Embedding(5, 4)
        self.rnn = torch.nn.LSTM(4, 3, batch_first=True)
        self.head = torch.nn.Linear(3 * 4 * 4 + 3, 2)

    def forward(self, image, tokens):
        features = torch.relu(self.norm(self.conv(image))).flatten(1)
        sequence, _ = self.rnn(self.embed(tokens))
        return self.head(torch.cat([features, sequence[:, -1]], 1))


class RgNet(rg.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = rg.nn.Conv2d(2, 3, 3, padding=1)
        self.norm = rg.nn.BatchNorm2d(3)
        self.embed = rg.nn.Embedding(5, 4)
        self.rnn = rg.nn.LSTM(4, 3, batch_first=True)
        self.head = rg.nn.Linear(3 * 4 * 4 + 3, 2)

    def forward(self, image, tokens):
        features = rg.relu(self.norm(self.conv(image))).flatten(1)
        sequence, _ = self.rnn(self.embed(tokens))
        return self.head(rg.cat([features, sequence[:, -1]], 1))


def _inputs():
    gen = np.random.default_rng(7)
    return gen.standard_normal((2, 2, 4, 4)).astype(np.float32), gen.integers(0, 5, (2, 3))


@pytest.mark.parametrize("form", list(FORMATS))
def test_a_state_dict_torch_saved_loads_and_computes_as_torch(form):
    torch.manual_seed(0)
    theirs = TorchNet()
    theirs.train()
    image, tokens = _inputs()
    theirs(torch.tensor(image), torch.tensor(tokens))  # running statistics move
    theirs.eval()
    state = rg.load(_saved(theirs.state_dict(), FORMATS[form]))
    assert list(state) == list(theirs.state_dict())
    ours = RgNet()
    ours.load_state_dict(state)
    ours.eval()
    expected = theirs(torch.tensor(image), torch.tensor(tokens)).detach().numpy()
    got = ours(rg.tensor(image), rg.tensor(tokens)).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert str(state["norm.num_batches_tracked"].dtype) == "int64"
    assert state["norm.num_batches_tracked"].item() == 1


@pytest.mark.parametrize("form", list(FORMATS))
def test_a_checkpoint_resumes_training_as_torch_does(form):
    """{"model", "optimizer", "epoch"} saved by torch after two Adam steps: the ported
    script's third step gives torch's parameters."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1)
    gen = np.random.default_rng(1)
    batches = [gen.standard_normal((5, 3)).astype(np.float32) for _ in range(3)]
    for batch in batches[:2]:
        opt.zero_grad()
        model(torch.tensor(batch)).pow(2).mean().backward()
        opt.step()
    file = _saved(
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 2},
        FORMATS[form],
    )
    opt.zero_grad()
    model(torch.tensor(batches[2])).pow(2).mean().backward()
    opt.step()

    checkpoint = rg.load(file)
    assert checkpoint["epoch"] == 2
    ours = rg.nn.Sequential(rg.nn.Linear(3, 4), rg.nn.Tanh(), rg.nn.Linear(4, 1))
    ours.load_state_dict(checkpoint["model"])
    ours_opt = rg.optim.Adam(ours.parameters(), lr=0.5)
    ours_opt.load_state_dict(checkpoint["optimizer"])
    assert ours_opt.param_groups[0]["lr"] == 0.01
    grads = ours(rg.tensor(batches[2])).pow(2).mean().backward()
    ours_opt.step(grads)
    for (name, theirs), mine in zip(model.state_dict().items(), ours.state_dict().values()):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)


DTYPES = ["float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]


@pytest.mark.parametrize("form", list(FORMATS))
def test_every_dtype_view_and_shape_loads_with_torch_values(form):
    gen = np.random.default_rng(3)
    base = torch.tensor(gen.standard_normal((4, 6)) * 50)
    saved = {name: base.to(getattr(torch, name)) for name in DTYPES}
    saved["transposed"] = base.float().t()
    saved["strided"] = base.float()[::2, 1::3]
    saved["offset"] = base.float()[1:, 2:]
    saved["expanded"] = torch.arange(3.0).expand(2, 3)
    saved["empty"] = torch.zeros(0, 3)
    saved["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    saved["size"] = torch.Size([2, 3])
    saved["device"] = torch.device("cpu")
    saved["dtype"] = torch.int16
    saved["bytes"] = b"\x00\xff"
    saved["set"] = {1, 2}
    saved["complex"] = 1 + 2j
    loaded = rg.load(_saved(saved, FORMATS[form]))
    for name, value in saved.items():
        if isinstance(value, torch.Tensor):
            assert str(loaded[name].dtype) == str(value.dtype).removeprefix("torch."), name
            assert tuple(loaded[name].shape) == tuple(value.shape), name
            np.testing.assert_array_equal(loaded[name].numpy(), value.numpy(), err_msg=name)
    assert tuple(loaded["size"]) == (2, 3) and isinstance(loaded["size"], rg.Size)
    assert loaded["device"] == rg.device("cpu")
    assert loaded["dtype"] == rg.int16
    assert loaded["bytes"] == b"\x00\xff" and loaded["set"] == {1, 2}
    assert loaded["complex"] == 1 + 2j


@pytest.mark.skipif(not on_torch(), reason="half-precision tensors live on the torch backend")
def test_half_precision_tensors_load_bit_for_bit():
    values = torch.tensor([1.5, -2.25, 3.0e38, 1e-3, 0.1])
    saved = {"bf16": values.bfloat16(), "fp16": values[1:].half()}
    with rg.use_backend(rg.Autodiff(rg.TorchBackend())):
        loaded = rg.load(_saved(saved))
        for name, value in saved.items():
            assert str(loaded[name].dtype) == str(value.dtype).removeprefix("torch.")
            np.testing.assert_array_equal(
                loaded[name].float().numpy(), value.float().numpy(), err_msg=name
            )


def test_half_precision_on_the_numpy_backend_is_refused_by_name():
    with (
        rg.use_backend(rg.Autodiff(rg.NumpyBackend())),
        pytest.raises(rg.DTypeError, match="bfloat16"),
    ):
        rg.load(_saved({"w": torch.ones(2, dtype=torch.bfloat16)}))


def test_tied_weights_load_as_one_tensor_and_parameters_as_parameters():
    """torch's state dict holds tied weights as two views of one storage; a saved
    Parameter keeps its class and requires_grad."""
    torch.manual_seed(2)
    embed = torch.nn.Embedding(4, 3)
    head = torch.nn.Linear(3, 4, bias=False)
    head.weight = embed.weight
    state = torch.nn.ModuleDict({"embed": embed, "head": head}).state_dict()
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    loaded = rg.load(_saved({"state": state, "trainable": embed.weight, "frozen": frozen}))
    assert loaded["state"]["embed.weight"] is loaded["state"]["head.weight"]
    assert isinstance(loaded["trainable"], rg.nn.Parameter)
    assert loaded["trainable"].requires_grad
    assert isinstance(loaded["frozen"], rg.nn.Parameter) and not loaded["frozen"].requires_grad
    np.testing.assert_array_equal(loaded["trainable"].detach().numpy(), embed.weight.detach())


def test_the_state_dict_metadata_comes_along():
    state = torch.nn.Linear(2, 2).state_dict()
    loaded = rg.load(_saved(state))
    assert loaded._metadata == state._metadata


@pytest.mark.parametrize("form", list(FORMATS))
def test_weights_only_refuses_other_classes_by_name_as_torch_does(form):
    saved = {"args": argparse.Namespace(lr=0.1), "w": torch.ones(2)}
    with pytest.raises(torch.serialization.pickle.UnpicklingError, match=r"argparse\.Namespace"):
        torch.load(_saved(saved, FORMATS[form]))
    with pytest.raises(rg.InvalidArgumentError, match=r"argparse\.Namespace.*weights_only=False"):
        rg.load(_saved(saved, FORMATS[form]))
    with rg.serialization.safe_globals([argparse.Namespace]):
        assert rg.load(_saved(saved, FORMATS[form]))["args"].lr == 0.1
    loaded = rg.load(_saved(saved, FORMATS[form]), weights_only=False)
    assert loaded["args"] == argparse.Namespace(lr=0.1)
    assert loaded["w"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("form", list(FORMATS))
def test_a_whole_torch_module_is_refused_naming_its_class(form, weights_only):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(rg.InvalidArgumentError, match=r"torch\.nn\.modules.*state_dict\(\)"):
        rg.load(_saved(model, FORMATS[form]), weights_only=weights_only)


def test_the_unsafe_globals_of_a_torch_file_are_torch_s():
    saved = {"args": argparse.Namespace(lr=0.1), "n": np.float64(2.0), "w": torch.ones(2)}
    for obj in (saved, torch.nn.Sequential(torch.nn.Linear(2, 2)), {"w": torch.ones(1)}):
        data = _saved(obj).getvalue()
        expected = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
        got = rg.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
        assert sorted(got) == sorted(expected)  # torch's is a set's order


def test_map_location_as_torch_takes_it():
    state = {"w": torch.arange(3.0)}
    seen = []

    def locate(storage, location):
        seen.append(location)
        return storage

    assert rg.load(_saved(state), map_location=locate)["w"].tolist() == [0.0, 1.0, 2.0]
    assert seen == ["cpu"]
    assert rg.load(_saved(state), map_location="cpu")["w"].tolist() == [0.0, 1.0, 2.0]
    assert rg.load(_saved(state), map_location={"cuda:0": "cpu"})["w"].tolist() == [0, 1, 2]


def test_a_file_path_loads_too(tmp_path):
    path = tmp_path / "weights.pth"
    torch.save({"w": torch.ones(2)}, path)
    assert rg.load(path)["w"].tolist() == [1.0, 1.0]
    assert rg.load(str(path), weights_only=True, mmap=False)["w"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("form", list(FORMATS))
def test_a_damaged_torch_file_is_one_clear_error_at_every_cut(form):
    """Truncated anywhere, or with bytes flipped: an InvalidArgumentError naming the file,
    never another exception and never a read outside a storage."""
    data = _saved({"w": torch.arange(12.0).reshape(3, 4), "n": 3}, FORMATS[form]).getvalue()
    for cut in range(0, len(data), max(1, len(data) // 60)):
        with pytest.raises(rg.InvalidArgumentError):
            rg.load(io.BytesIO(data[:cut]))
    gen = np.random.default_rng(11)
    for _ in range(60):
        damaged = bytearray(data)
        for position in gen.integers(0, len(data), 3):
            damaged[position] ^= 1 << int(gen.integers(0, 8))
        try:
            loaded = rg.load(io.BytesIO(bytes(damaged)))
        except rg.InvalidArgumentError:
            continue
        assert isinstance(loaded, dict)  # a flip in the values themselves reads as values


def test_a_view_past_its_storage_is_refused_not_read():
    """A pickle whose tensor claims more elements than its storage holds (a damaged or
    crafted file) is refused: the view is never made over memory past the storage."""
    data = _saved({"w": torch.arange(4.0)}).getvalue()
    archive = io.BytesIO(data)
    with zipfile.ZipFile(archive) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    pickled = next(name for name in entries if name.endswith("data.pkl"))
    # the size tuple (4,) -> (400,): BININT1 4 TUPLE1 becomes BININT2 400 TUPLE1
    entries[pickled] = entries[pickled].replace(b"K\x04\x85", b"M\x90\x01\x85", 1)
    crafted = io.BytesIO()
    with zipfile.ZipFile(crafted, "w") as target:
        for name, content in entries.items():
            target.writestr(name, content)
    with pytest.raises(rg.InvalidArgumentError, match="reaches element"):
        rg.load(io.BytesIO(crafted.getvalue()))


def test_an_rg_file_and_an_npz_still_load_as_before():
    buffer = io.BytesIO()
    rg.save({"w": rg.tensor([1.0, 2.0])}, buffer)
    assert rg.load(io.BytesIO(buffer.getvalue()))["w"].tolist() == [1.0, 2.0]
    npz = io.BytesIO()
    np.savez(npz, a=np.arange(3))
    assert rg.load(io.BytesIO(npz.getvalue()))["a"].tolist() == [0, 1, 2]


def test_a_checkpoint_in_the_hub_cache_loads_from_its_url_as_torch_s_cached_download(tmp_path):
    """torch's load_state_dict_from_url reads the file it downloaded before from
    <hub>/checkpoints/<name>; here that file loads (torch's .pth), and one not there is
    refused naming the path to fetch it to (retrograd downloads nothing)."""
    before = rg.hub.get_dir()
    rg.hub.set_dir(str(tmp_path))
    try:
        (tmp_path / "checkpoints").mkdir()
        state = torch.nn.Linear(2, 3).state_dict()
        torch.save(state, tmp_path / "checkpoints" / "linear-1a2b3c.pth")
        url = "https://example.org/models/linear-1a2b3c.pth"
        for load in (rg.hub.load_state_dict_from_url, rg.utils.model_zoo.load_url):
            loaded = load(url, map_location="cpu", check_hash=True)
            np.testing.assert_array_equal(loaded["weight"].numpy(), state["weight"].numpy())
        named = rg.hub.load_state_dict_from_url(
            "https://example.org/other",
            model_dir=str(tmp_path / "checkpoints"),
            file_name="linear-1a2b3c.pth",
        )
        assert list(named) == ["weight", "bias"]
        with pytest.raises(rg.InvalidArgumentError, match=r"checkpoints/missing\.pth.*curl"):
            rg.hub.load_state_dict_from_url("https://example.org/missing.pth")
    finally:
        rg.hub.set_dir(before)
