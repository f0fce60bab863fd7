"""Reliability round 26: the product surface outside the math (saved files, state dicts of
half-precision models, TensorBoard's writer, the hub, the command line).

Each test checks one defect found in this round (it fails on the code before the fix) or a
product path checked sound against torch. Expected values come from torch.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import threading

import numpy as np
import pytest
import torch
import torch.utils.data as torch_data

import retrograd as rg
from retrograd import hub
from retrograd.app.cli import main
from retrograd.utils.data import DataLoader

#: a module-level named tuple (pickle finds its class by name, as torch's does)
Saved = collections.namedtuple("Saved", "step weight")


@contextlib.contextmanager
def on_torch_backend():
    """bfloat16 tensors need the torch inner backend, whichever backend the run selected."""
    with rg.use_backend(rg.Autodiff(rg.TorchBackend("cpu"))):
        yield


def _roundtrip(obj, **load_options):
    buffer = io.BytesIO()
    rg.save(obj, buffer)
    buffer.seek(0)
    return rg.load(buffer, **load_options)


def _torch_roundtrip(obj, **load_options):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_options)


# -- state dicts of half-precision models ------------------------------------------------------
def test_bfloat16_model_loads_a_state_dict_as_torch_does():
    values = np.random.default_rng(0).standard_normal((2, 3))  # float64: rounded once, to bf16
    expected = torch.from_numpy(values).to(torch.bfloat16).float().numpy()
    with on_torch_backend():
        model = rg.nn.Linear(3, 2).to(rg.bfloat16)
        # was a bare TypeError ("data type retrograd.bfloat16 not understood")
        model.load_state_dict({"weight": values, "bias": np.zeros(2)})
        assert model.weight.dtype == rg.bfloat16
        np.testing.assert_array_equal(model.weight.float().numpy(), expected)
        twin = rg.nn.Linear(3, 2).to(rg.bfloat16)
        twin.load_state_dict(model.state_dict())  # its own state dict, too
        np.testing.assert_array_equal(twin.weight.float().numpy(), expected)


def test_bfloat16_state_dict_saves_as_bfloat16_as_torch_does(tmp_path):
    torch_model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    torch_loaded = _torch_roundtrip(torch_model.state_dict())
    with on_torch_backend():
        model = rg.nn.Linear(3, 2).to(rg.bfloat16)
        model.load_state_dict({k: v.float().numpy() for k, v in torch_model.state_dict().items()})
        path = tmp_path / "bf16.pt"
        rg.save(model.state_dict(), path)
        loaded = rg.load(path)
        # the file said float32: a bf16 checkpoint doubled and changed dtype
        assert {k: str(v.dtype) for k, v in loaded.items()} == {
            k: str(v.dtype).replace("torch.", "") for k, v in torch_loaded.items()
        }
        for key, value in torch_loaded.items():
            np.testing.assert_array_equal(loaded[key].float().numpy(), value.float().numpy())
        fresh = rg.nn.Linear(3, 2).to(rg.bfloat16)
        fresh.load_state_dict(path)  # a bare TypeError before
        np.testing.assert_array_equal(
            fresh.weight.float().numpy(), torch_model.weight.detach().float().numpy()
        )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_optimizer_state_loads_in_the_parameters_dtype(dtype):
    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    torch_model = torch.nn.Linear(3, 2).to(torch_dtype)
    torch_opt = torch.optim.Adam(torch_model.parameters(), lr=0.1)
    inputs = torch.randn(4, 3).to(torch_dtype)
    torch_model(inputs).sum().backward()
    torch_opt.step()
    torch_fresh = torch.optim.Adam(torch.nn.Linear(3, 2).to(torch_dtype).parameters(), lr=0.1)
    torch_fresh.load_state_dict(torch_opt.state_dict())
    torch_state = next(iter(torch_fresh.state.values()))
    with on_torch_backend():
        model = rg.nn.Linear(3, 2).to(dtype)
        optimizer = rg.optim.Adam(model.parameters(), lr=0.1)
        grads = model(rg.tensor(inputs.float().numpy()).to(dtype)).sum().backward()
        optimizer.step(grads)
        saved = _roundtrip(optimizer.state_dict())
        twin = rg.nn.Linear(3, 2).to(dtype)
        twin.load_state_dict(model.state_dict())
        resumed = rg.optim.Adam(twin.parameters(), lr=0.1)
        resumed.load_state_dict(saved)  # bf16: a bare TypeError; f16: float32 buffers
        state = resumed.state[twin.weight]
        for key in ("exp_avg", "exp_avg_sq"):
            assert str(state[key].dtype) == str(torch_state[key].dtype).replace("torch.", "")
        grads = model(rg.ones(1, 3, dtype=dtype)).sum().backward()
        optimizer.step(grads)
        twin_grads = twin(rg.ones(1, 3, dtype=dtype)).sum().backward()
        resumed.step(twin_grads)  # goes on bit for bit as the uninterrupted optimizer
        np.testing.assert_array_equal(twin.weight.float().numpy(), model.weight.float().numpy())


def test_torch_bfloat16_optimizer_state_loads_as_torch_loads_it():
    torch.manual_seed(0)
    torch_model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    torch_opt = torch.optim.Adam(torch_model.parameters(), lr=0.1)
    torch_model(torch.randn(4, 3).to(torch.bfloat16)).sum().backward()
    torch_opt.step()
    # torch loads it into float32 parameters, the buffers cast to their dtype
    torch_fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=0.1)
    torch_fresh.load_state_dict(torch_opt.state_dict())
    expected = next(iter(torch_fresh.state.values()))
    model = rg.nn.Linear(3, 2)
    model.load_state_dict(torch_model.state_dict())
    optimizer = rg.optim.Adam(model.parameters(), lr=0.1)
    optimizer.load_state_dict(torch_opt.state_dict())  # "unsupported ScalarType BFloat16"
    state = optimizer.state[model.weight]
    for key in ("exp_avg", "exp_avg_sq"):
        assert str(state[key].dtype) == str(expected[key].dtype).replace("torch.", "")
        np.testing.assert_array_equal(state[key].numpy(), expected[key].numpy())


def test_bfloat16_file_loaded_on_the_numpy_backend_is_refused_by_load():
    with on_torch_backend():
        buffer = io.BytesIO()
        rg.save({"w": rg.ones(2, dtype=rg.bfloat16)}, buffer)
    buffer.seek(0)
    refused = pytest.raises(rg.DTypeError, match=r"load: .*cannot make the file's bfloat16 tensors")
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend())), refused:
        rg.load(buffer)  # the cast's message alone before, naming no load
    buffer.seek(0)
    with on_torch_backend():
        assert rg.load(buffer)["w"].dtype == rg.bfloat16


# -- rg.save keeps the class of what it stores ------------------------------------------------
def test_named_tuple_and_defaultdict_keep_their_class_as_torch_keeps_it():
    weight = rg.tensor([1.0, 2.0])
    record = Saved(step=3, weight=weight)
    counts = collections.defaultdict(list, {"a": [1]})
    torch_record = _torch_roundtrip(Saved(3, torch.tensor([1.0, 2.0])), weights_only=False)
    torch_counts = _torch_roundtrip(counts, weights_only=False)
    loaded = _roundtrip(record, weights_only=False)
    assert type(loaded) is type(torch_record) is Saved  # was a plain tuple: loaded.step failed
    assert loaded.step == 3 and loaded.weight.tolist() == [1.0, 2.0]
    loaded_counts = _roundtrip(counts, weights_only=False)
    assert type(loaded_counts) is type(torch_counts)  # was a dict: counts["new"] a KeyError
    assert loaded_counts["new"] == [] and loaded_counts["a"] == [1]
    # torch's default (weights_only) load refuses both classes, and so does retrograd's,
    # naming them, where it gave plain containers without a word
    for obj, name in ((record, "Saved"), (counts, "defaultdict")):
        with pytest.raises(Exception, match="Weights only load failed"):
            _torch_roundtrip(obj if obj is counts else torch_record)
        with pytest.raises(rg.InvalidArgumentError, match=name):
            _roundtrip(obj)
    # a frozenset is pickled by its class, which torch's default load refuses (rg.save writes
    # torch's file): read back under weights_only=False, or refused by name
    assert _roundtrip(frozenset({1, 2}), weights_only=False) == frozenset({1, 2})
    assert type(_roundtrip(frozenset({1}), weights_only=False)) is frozenset  # was a set
    with pytest.raises(rg.InvalidArgumentError, match=r"builtins\.frozenset"):
        _roundtrip(frozenset({1}))
    assert type(_roundtrip(collections.OrderedDict(a=1))) is collections.OrderedDict
    assert _roundtrip(rg.ones(2, 3).shape) == (2, 3)  # shapes stay plain structure
    assert _roundtrip(torch.Size([2, 3])) == (2, 3)
    values, indices = _roundtrip(rg.tensor([[1.0, 5.0], [7.0, 2.0]]).max(0))  # a result tuple
    assert values.tolist() == [7.0, 5.0] and indices.tolist() == [1, 0]


class _WriteOnlyStream:
    """A stream that can only be written (a socket's or a pipe's writer): torch.save takes it."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.chunks.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


def test_save_to_a_write_only_stream_and_a_failed_archive_writes_nothing(monkeypatch):
    torch_stream = _WriteOnlyStream()
    torch.save({"w": torch.ones(3)}, torch_stream)
    assert torch.load(io.BytesIO(b"".join(torch_stream.chunks)))["w"].tolist() == [1.0] * 3
    stream = _WriteOnlyStream()
    rg.save({"w": rg.ones(3)}, stream)  # os.fspath's bare TypeError before
    assert rg.load(io.BytesIO(b"".join(stream.chunks)))["w"].tolist() == [1.0] * 3

    def disk_full_midway(file, folder, records):
        file.write(b"PK\x03\x04 half an archive")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rg.torch_files, "write_zip", disk_full_midway)
    kept = io.BytesIO()
    with pytest.raises(OSError, match="No space left"):
        rg.save({"w": rg.ones(3)}, kept)
    assert kept.getvalue() == b""  # the caller's file got half an archive before


def test_load_state_dict_reads_a_stream_that_cannot_seek():
    source = rg.nn.Linear(3, 2)
    stream = _WriteOnlyStream()
    rg.save(source.state_dict(), stream)
    data = io.BytesIO(b"".join(stream.chunks))

    class ReadOnlyStream:  # a pipe's or a response body's reader: read() alone
        def read(self, size: int = -1) -> bytes:
            return data.read(size)

    model = rg.nn.Linear(3, 2)
    # "the file object is not a readable .npz archive ('ReadOnlyStream' object has no
    # attribute 'seek')" before: a whole file said to be damaged
    model.load_state_dict(ReadOnlyStream())
    np.testing.assert_array_equal(model.weight.numpy(), source.weight.numpy())


def test_numpy_number_keys_are_stored_as_torch_stores_them():
    weights = {np.int64(0): 0.25, np.int64(3): 0.75, (np.int32(1), "a"): 1.0, np.float32(0.5): 2}
    expected = _torch_roundtrip(weights, weights_only=False)
    # "cannot store a dict key of type int64" before; NumPy's scalars load as torch's do,
    # with weights_only=False (a default load refuses them, as torch's: test_leftovers20)
    loaded = _roundtrip(weights, weights_only=False)
    assert list(loaded.items()) == list(expected.items())
    assert [type(k) for k in loaded] == [type(k) for k in expected]


def test_save_to_a_folder_name_writes_nothing_as_open_and_torch_refuse(tmp_path):
    folder_name = str(tmp_path / "ckpts") + os.sep
    with pytest.raises(IsADirectoryError):
        open(folder_name, "wb")  # noqa: SIM115 (the reference: never opened)
    with pytest.raises(RuntimeError, match="invalid file name"):
        torch.save({"step": 1}, folder_name)
    # a file "ckpts" was written, where the next save to "ckpts/epoch1.pt" then failed
    for path in (folder_name, folder_name + "."):
        with pytest.raises(IsADirectoryError, match="a folder's name"):
            rg.save({"step": 1}, path)
    assert os.listdir(tmp_path) == []


def test_file_of_another_format_version_is_named(tmp_path):
    path = tmp_path / "old.pt"
    # retrograd's earlier format (rg.save wrote it until it wrote torch's): an .npz of the
    # arrays and the structure as JSON
    entry = {"tensor": "a0", "dtype": "float32", "requires_grad": False}
    structure = {"format": "retrograd-save/0", "object": {"dict": [[{"key": "w"}, entry]]}}
    arrays = {"a0": np.ones(2, dtype=np.float32)}
    arrays["__retrograd_structure__"] = np.array(json.dumps(structure))
    with open(path, "wb") as file:
        np.savez(file, **arrays)
    with pytest.raises(rg.InvalidArgumentError, match=r"old\.pt.*another version of retrograd"):
        rg.load(path)


# -- TensorBoard's writer and the hub ---------------------------------------------------------
def test_summary_writer_refuses_what_is_not_numbers_from_the_hierarchy(tmp_path):
    from retrograd.utils.tensorboard import SummaryWriter

    with SummaryWriter(tmp_path / "run") as writer:
        with pytest.raises(rg.DTypeError, match="add_scalar"):  # a bare ValueError before
            writer.add_scalar("loss", "0.5", 0)
        with pytest.raises(rg.DTypeError, match="add_histogram"):
            writer.add_histogram("w", ["a", "b"], 0)
        with pytest.raises(rg.ShapeError, match="add_image: 'img' has no pixels"):
            writer.add_image("img", rg.zeros(3, 0, 4), 0)  # PIL's bare ValueError before
        before = sorted(os.listdir(tmp_path / "run"))
        with pytest.raises(rg.DTypeError, match="add_hparams: metric 'acc'"):
            writer.add_hparams({"lr": 0.1}, {"acc": "high"}, run_name="bad")
        assert sorted(os.listdir(tmp_path / "run")) == before  # no half-written session
        writer.add_scalar("loss", rg.tensor(0.5), 1)  # the writer goes on
        # torch's writer takes its bfloat16 tensors; "unsupported ScalarType BFloat16" here
        half = torch.linspace(0, 1, 12, dtype=torch.bfloat16)
        writer.add_scalar("loss", half[3], 2)
        writer.add_histogram("w", half, 2)
        writer.add_image("img", half.reshape(3, 2, 2), 2)
    blocker = tmp_path / "taken"
    blocker.write_text("mine")
    with pytest.raises(NotADirectoryError, match="log_dir is a file"):  # "File exists" before
        SummaryWriter(blocker)
    assert blocker.read_text() == "mine"


def test_hub_set_dir_refuses_a_non_path():
    before = hub.get_dir()
    with pytest.raises(rg.DTypeError, match=r"hub\.set_dir"):  # os.fspath's bare TypeError
        hub.set_dir(None)
    assert hub.get_dir() == before


# -- DataLoader --------------------------------------------------------------------------------
def test_data_loader_takes_numpy_worker_counts_and_names_a_sampler_without_length():
    workers = np.int64(2)  # a count read from a config through NumPy: torch takes it
    assert torch_data.DataLoader(range(5), batch_size=2, num_workers=workers).num_workers == 2
    expected = [b.tolist() for b in torch_data.DataLoader(range(5), batch_size=2)]
    loader = DataLoader(range(5), batch_size=2, num_workers=workers)  # refused before
    assert [b.tolist() for b in loader] == expected and len(loader) == 3
    with pytest.raises(TypeError):
        len(torch_data.DataLoader([1.0, 2.0], sampler=iter([0, 1])))
    with pytest.raises(rg.DTypeError, match="DataLoader: len"):  # len()'s bare TypeError
        len(DataLoader([1.0, 2.0], sampler=iter([0, 1])))


# -- retrograd sample ----------------------------------------------------------------------------
def test_gpt_sampling_at_a_vanishing_temperature_takes_the_likeliest_token():
    from retrograd.app.models import GPT, GPTConfig

    rg.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4))
    model.eval()
    context = [1, 2]
    for _ in range(3):  # greedy decoding, the limit of sampling as the temperature goes to 0
        logits, _ = model(rg.tensor([context[-4:]]))
        context.append(int(np.argmax(logits.numpy()[0, -1])))
    # `retrograd sample --temperature 1e-300` ended in multinomial's "probability tensor
    # contains either inf, nan or element < 0": the logits overflowed to inf
    out = model.generate(rg.tensor([[1, 2]]), 3, temperature=1e-300)
    assert out.tolist() == [context]


# -- checked sound: the save paths and the command line ----------------------------------------
def test_interrupted_rename_and_concurrent_saves_keep_a_whole_file(tmp_path, monkeypatch):
    path = tmp_path / "é ü ckpt.pt"
    rg.save({"step": 1, "w": rg.ones(3)}, path)
    real = os.replace

    def interrupted(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rg.save({"step": 2, "w": rg.zeros(3)}, path)
    monkeypatch.setattr(os, "replace", real)
    assert rg.load(path)["step"] == 1 and os.listdir(tmp_path) == [path.name]
    failures = []

    def writer(step):
        try:
            for _ in range(3):
                rg.save({"step": step, "w": rg.full((64,), float(step))}, path)
        except Exception as error:  # pragma: no cover - reported below
            failures.append(error)

    threads = [threading.Thread(target=writer, args=(step,)) for step in (10, 20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    loaded = rg.load(path)
    assert not failures and sorted(os.listdir(tmp_path)) == [path.name]
    assert loaded["w"].tolist() == [float(loaded["step"])] * 64


@pytest.mark.parametrize("dtype", ["float32", "float64", "uint8", "int32", "int64", "bool"])
def test_views_scalars_and_empty_tensors_of_every_dtype_load_as_torch_loads_them(dtype):
    base = np.arange(12).reshape(3, 4) % 3
    pieces = {
        "whole": lambda t: t,
        "transposed": lambda t: t.t(),
        "strided": lambda t: t[:, ::2],
        "scalar": lambda t: t[1, 2],
        "empty": lambda t: t[:0],
        "row_view": lambda t: t[1],
    }
    torch_base = torch.tensor(base).to(getattr(torch, dtype))
    expected = _torch_roundtrip({k: f(torch_base) for k, f in pieces.items()})
    rg_base = rg.tensor(base).to(dtype)
    loaded = _roundtrip({k: f(rg_base) for k, f in pieces.items()})
    for key, value in expected.items():
        assert str(loaded[key].dtype) == str(value.dtype).replace("torch.", ""), key
        assert tuple(loaded[key].shape) == tuple(value.shape), key
        assert loaded[key].tolist() == value.tolist(), key


@pytest.mark.parametrize("command", ["train", "sample", "graph", "bench", "warmup"])
def test_every_command_has_help_and_refuses_unknown_flags_in_one_line(command, capsys):
    with pytest.raises(SystemExit) as ended:
        main([command, "--help"])
    assert ended.value.code == 0 and f"usage: retrograd {command}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as ended:
        main([command, "--no-such-flag"])
    error = capsys.readouterr().err.strip().splitlines()
    assert ended.value.code == 2
    assert error == [
        f"retrograd {command}: unrecognized arguments: --no-such-flag — see retrograd "
        f"{command} --help"
    ]
