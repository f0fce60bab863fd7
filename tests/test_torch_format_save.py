"""``rg.save`` writes torch's own file (its zip format): ``torch.load`` reads what retrograd
saved, with the structure, values and storage sharing torch's own ``torch.save`` gives, and
``rg.load`` reads it back (and still reads retrograd's earlier ``.npz`` format).

Every expected value comes from NumPy arrays made here or from torch itself.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import pickle
import warnings
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn

DTYPES = ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64", "complex128"]  # fmt: skip


@contextlib.contextmanager
def on_torch_backend():
    """Half-precision tensors need the torch inner backend, whichever the run selected."""
    with rg.use_backend(rg.Autodiff(rg.TorchBackend("cpu"))):
        yield


def _saved(obj, **options) -> bytes:
    buffer = io.BytesIO()
    rg.save(obj, buffer, **options)
    return buffer.getvalue()


def _torch_loaded(data: bytes, **options):
    return torch.load(io.BytesIO(data), **options)


def _values(dtype: str, shape: tuple, seed: int) -> np.ndarray:
    """Values of every bit pattern the dtype has room for (NaNs and infinities included)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=(*shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    values = raw.view(dtype).reshape(shape)
    return values


@pytest.mark.parametrize("shape", [(2, 3), (), (0, 3)])
def test_every_dtype_loads_in_torch_bit_for_bit(shape):
    arrays = {dtype: _values(dtype, shape, seed) for seed, dtype in enumerate(DTYPES)}
    loaded = _torch_loaded(_saved({name: rg.tensor(a) for name, a in arrays.items()}))
    for name, array in arrays.items():
        got = loaded[name]
        assert type(got) is torch.Tensor and str(got.dtype) == f"torch.{name}", name
        assert tuple(got.shape) == shape and got.numpy().tobytes() == array.tobytes(), name


def test_half_precision_tensors_load_in_torch_bit_for_bit():
    rng = np.random.default_rng(7)
    wide = rng.standard_normal((3, 2)).astype(np.float32)
    half = np.array([[1.5, -0.0], [np.inf, np.nan], [65504.0, 6e-8]], dtype=np.float16)
    expected_bf16 = torch.tensor(wide).bfloat16()  # (rounded by torch)
    with on_torch_backend():
        data = _saved({"half": rg.tensor(half), "bf16": rg.tensor(wide).bfloat16()})
        back = rg.load(io.BytesIO(data))
        assert back["bf16"].dtype == rg.bfloat16 and back["half"].dtype == rg.float16
    loaded = _torch_loaded(data)
    assert loaded["half"].dtype == torch.float16 and loaded["bf16"].dtype == torch.bfloat16
    assert loaded["half"].numpy().tobytes() == half.tobytes()
    assert torch.equal(loaded["bf16"].view(torch.int16), expected_bf16.view(torch.int16))


def test_views_are_saved_as_torch_saves_them_sharing_one_storage():
    base = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = rg.tensor(base)
    saved = {"x": x, "xt": x.t(), "row": x[1], "col": x[:, 1], "wide": rg.ones(1).expand(4)}
    loaded = _torch_loaded(_saved(saved))
    theirs = torch.tensor(base)
    for name, view in (("xt", theirs.t()), ("row", theirs[1]), ("col", theirs[:, 1])):
        assert loaded[name].stride() == view.stride(), name
        assert loaded[name].storage_offset() == view.storage_offset(), name
        np.testing.assert_array_equal(loaded[name].numpy(), view.numpy(), err_msg=name)
    assert loaded["wide"].stride() == (0,) and loaded["wide"].tolist() == [1.0] * 4
    pointer = loaded["x"].untyped_storage().data_ptr()
    assert all(loaded[n].untyped_storage().data_ptr() == pointer for n in ("xt", "row", "col"))
    loaded["x"][1, 1] = -1.0  # one storage: a write shows through every view, as in torch
    assert loaded["xt"][1, 1] == loaded["row"][1] == loaded["col"][1] == -1.0
    flipped = _torch_loaded(_saved({"f": x.flip(0)}))["f"]  # (torch has no negative strides)
    np.testing.assert_array_equal(flipped.numpy(), base[::-1])


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(4, 3)
        self.head = nn.Linear(3, 4)
        self.head.weight = self.emb.weight
        self.norm = nn.BatchNorm1d(4)


class TorchTied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(4, 3)
        self.head = torch.nn.Linear(3, 4)
        self.head.weight = self.emb.weight
        self.norm = torch.nn.BatchNorm1d(4)


def test_a_state_dict_loads_into_torchs_model_with_its_tied_weight_shared():
    rg.seed(0)
    model = Tied()
    state = model.state_dict()
    loaded = _torch_loaded(_saved(state))
    assert type(loaded) is OrderedDict and list(loaded) == list(state)
    assert loaded._metadata == state._metadata  # (BatchNorm's version 2 among them)
    assert loaded["emb.weight"].data_ptr() == loaded["head.weight"].data_ptr()
    for name, value in state.items():
        assert loaded[name].numpy().tobytes() == np.asarray(value).tobytes(), name
    theirs = TorchTied()
    theirs.load_state_dict(loaded)  # strict: every key and shape as torch's
    assert theirs.emb.weight is theirs.head.weight
    np.testing.assert_array_equal(theirs.emb.weight.detach().numpy(), model.emb.weight.numpy())


def test_a_training_checkpoint_loads_in_torch_and_back_in_retrograd():
    rg.seed(1)
    model = nn.Linear(3, 2)
    optimizer = rg.optim.Adam(model.parameters(), lr=0.01)
    optimizer.step(model(rg.ones(4, 3)).sum().backward())
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": 3,
        "name": "run",
        "best": None,
        "history": [(1, 0.5), {"lr": [0.01, float("inf")]}],
        "device": rg.device("cpu"),
        "dtype": rg.float64,
        "shape": rg.ones(2, 3).shape,
        "counts": np.arange(3, dtype=np.int16),
        "complex": 1 + 2j,
    }
    data = _saved(checkpoint)
    loaded = _torch_loaded(data)  # weights_only=True, torch's default
    state = checkpoint["optimizer"]["state"]
    assert loaded["optimizer"]["param_groups"] == checkpoint["optimizer"]["param_groups"]
    for index, values in state.items():
        for key, value in values.items():
            got = loaded["optimizer"]["state"][index][key]
            if isinstance(value, rg.Tensor):  # the state's tensors (as torch's): tensors
                assert got.numpy().tobytes() == value.numpy().tobytes()
                assert got.dtype == torch.float32
            else:
                assert got == value
    assert loaded["epoch"] == 3 and loaded["name"] == "run" and loaded["best"] is None
    assert loaded["history"] == [(1, 0.5), {"lr": [0.01, float("inf")]}]
    assert loaded["device"] == torch.device("cpu") and loaded["dtype"] is torch.float64
    assert loaded["shape"] == torch.Size([2, 3]) and type(loaded["shape"]) is torch.Size
    assert loaded["counts"].tolist() == [0, 1, 2]
    assert loaded["complex"] == 1 + 2j
    back = rg.load(io.BytesIO(data))  # NumPy arrays come back as arrays
    assert type(back["counts"]) is np.ndarray and back["counts"].dtype == np.int16
    assert back["device"] == rg.device("cpu") and back["dtype"] == rg.float64
    restored = rg.optim.Adam(nn.Linear(3, 2).parameters(), lr=0.01)
    restored.load_state_dict(back["optimizer"])
    for index, values in restored.state_dict()["state"].items():
        for key, value in values.items():
            np.testing.assert_array_equal(value, state[index][key], err_msg=key)


def test_objects_are_pickled_as_torch_pickles_them():
    args = argparse.Namespace(lr=0.1, layers=[2, 3])
    ours = _saved({"args": args, "w": rg.ones(2)})
    buffer = io.BytesIO()
    torch.save({"args": args, "w": torch.ones(2)}, buffer)
    theirs = buffer.getvalue()
    for data in (ours, theirs):  # the same classes named, refused by torch's default
        with pytest.raises(pickle.UnpicklingError, match=r"argparse\.Namespace"):
            _torch_loaded(data)
        assert torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data)) == [
            "argparse.Namespace"
        ]
    loaded = _torch_loaded(ours, weights_only=False)
    assert loaded["args"] == args and loaded["w"].tolist() == [1.0, 1.0]
    with torch.serialization.safe_globals([argparse.Namespace]):
        assert _torch_loaded(ours)["args"] == args
    assert rg.load(io.BytesIO(ours), weights_only=False)["args"] == args
    with pytest.raises(rg.InvalidArgumentError, match=r"argparse\.Namespace"):
        rg.load(io.BytesIO(ours))
    parameter = _torch_loaded(_saved([nn.Parameter(rg.ones(2))]))[0]
    assert type(parameter) is torch.nn.Parameter and parameter.requires_grad


def test_a_torch_file_goes_through_retrograd_and_back_to_torch_unchanged():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    original = {
        "state": net.state_dict(),
        "ints": torch.arange(5, dtype=torch.int32)[1::2],  # a strided view
        "mask": torch.tensor([True, False]),
        "cplx": torch.tensor([1 + 1j], dtype=torch.complex128),
        "param": torch.nn.Parameter(torch.ones(2)),
        "step": 7,
    }
    buffer = io.BytesIO()
    torch.save(original, buffer)
    again = _torch_loaded(_saved(rg.load(io.BytesIO(buffer.getvalue()))))
    assert list(again) == list(original) and again["step"] == 7
    assert again["state"]._metadata == original["state"]._metadata
    assert list(again["state"]) == list(original["state"])
    for name, value in [*original["state"].items(), *[(k, original[k]) for k in original][1:5]]:
        got = again["state"][name] if name in original["state"] else again[name]
        assert got.dtype == value.dtype and torch.equal(got, value.detach()), name
    assert type(again["param"]) is torch.nn.Parameter and again["param"].requires_grad


@pytest.mark.parametrize("protocol", [1, 2, 3, 4, 5])
def test_every_binary_pickle_protocol_writes_a_file_torch_reads(protocol):
    data = _saved({"w": rg.tensor([1.0, 2.0]), "t": (rg.float32, "x")}, pickle_protocol=protocol)
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(1)}, buffer, pickle_protocol=protocol)
    # torch's default load reads protocols 2 and 3 (its own files' of 1, 4, 5 need
    # weights_only=False: the opcodes of bools and frames are not in its unpickler)
    options = {} if protocol in (2, 3) else {"weights_only": False}
    _torch_loaded(buffer.getvalue(), **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch warns of protocols other than 2)
        loaded = _torch_loaded(data, **options)
    assert loaded["w"].tolist() == [1.0, 2.0] and loaded["t"] == (torch.float32, "x")
    assert rg.load(io.BytesIO(data))["w"].tolist() == [1.0, 2.0]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:  # as torch.save writes it
        assert archive.read("archive/version") == b"3\n"
        assert archive.read("archive/byteorder") == b"little"
        assert archive.read("archive/.data/retrograd_numpy") == b"{}"


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "x.pt"
    for options, error, said in (
        ({"pickle_protocol": 0}, rg.InvalidArgumentError, "pickle_protocol=0"),
        ({"pickle_protocol": "2"}, rg.DTypeError, "pickle_protocol must be an int"),
        ({"pickle_module": json}, rg.InvalidArgumentError, "pickle_module='json'"),
        ({"_use_new_zipfile_serialization": False}, rg.InvalidArgumentError, "legacy"),
    ):
        with pytest.raises(error, match=said):
            rg.save({"w": rg.ones(1)}, path, **options)
    # (an array of strings pickles as NumPy pickles it, as torch.save stores it: see
    # test_realports38_fixes; a lambda pickles nowhere)
    with pytest.raises(rg.DTypeError, match=r"type function at the saved object\['fn'\]"):
        rg.save({"fn": lambda x: x}, path)
    assert list(tmp_path.iterdir()) == []


def test_storages_are_aligned_and_a_path_loads_mapped(tmp_path):
    path = tmp_path / "m.pt"
    rg.save({"a": rg.ones(3), "b": rg.tensor([1, 2], dtype="int8"), "c": rg.zeros(5)}, path)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        for entry in archive.infolist():  # the bytes of each at a multiple of 64, as torch's
            start = entry.header_offset
            name, extra = (int.from_bytes(data[start + at : start + at + 2], "little")
                           for at in (26, 28))  # fmt: skip
            assert (start + 30 + name + extra) % 64 == 0, entry.filename
    mapped = torch.load(path, mmap=True)  # torch maps the storages where they lie
    assert mapped["b"].tolist() == [1, 2] and mapped["c"].tolist() == [0.0] * 5


def test_zip64_fields_read_back_in_torch_and_retrograd(monkeypatch):
    # (a file past 4 GiB needs them: their threshold lowered, as such a file would be written)
    monkeypatch.setattr(rg.torch_files, "_ZIP64_FROM", 16)
    monkeypatch.setattr(rg.torch_files, "_ZIP64_COUNT_FROM", 3)
    values = np.arange(40, dtype=np.float64)
    data = _saved({"v": rg.tensor(values), "n": 1})
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
    assert _torch_loaded(data)["v"].numpy().tobytes() == values.tobytes()
    assert rg.load(io.BytesIO(data))["v"].numpy().tobytes() == values.tobytes()


def test_retrogrades_earlier_format_still_loads():
    entry = {"tensor": "a0", "dtype": "float32", "requires_grad": False}
    structure = {"format": "retrograd-save/1", "object": {"dict": [[{"key": "w"}, entry]]}}
    buffer = io.BytesIO()
    np.savez(
        buffer, a0=np.arange(3, dtype=np.float32), __retrograd_structure__=json.dumps(structure)
    )
    buffer.seek(0)
    assert rg.load(buffer)["w"].tolist() == [0.0, 1.0, 2.0]


def test_numpy_scalars_are_pickled_as_torch_pickles_them():
    metrics = {"best": np.float32(0.25), np.int64(3): "class three", "ok": np.bool_(True)}
    ours = _saved(metrics)
    buffer = io.BytesIO()
    torch.save(metrics, buffer)
    theirs = buffer.getvalue()
    for data in (ours, theirs):  # torch's default load refuses NumPy's scalars in both
        with pytest.raises(pickle.UnpicklingError, match="numpy"):
            _torch_loaded(data)
        with pytest.raises(pickle.UnpicklingError, match=r"Weights only load failed.*numpy"):
            rg.load(io.BytesIO(data))  # and so does ours, in torch's error class
        expected = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
        got = rg.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
        assert sorted(got) == sorted(expected)
    expected = _torch_loaded(theirs, weights_only=False)
    for loaded in (
        _torch_loaded(ours, weights_only=False),
        rg.load(io.BytesIO(ours), weights_only=False),
        rg.load(io.BytesIO(theirs), weights_only=False),
    ):
        assert list(loaded.items()) == list(expected.items())
        assert [type(v) for v in loaded.values()] == [type(v) for v in expected.values()]
        assert [type(k) for k in loaded] == [type(k) for k in expected]
