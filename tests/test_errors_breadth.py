"""Bad input across the public surface (tensor methods, ``rg.*`` and ``nn.functional``
functions, modules, optimizers, data loading, state and files) gets an error of API.md
section 7 naming the op, never a bare NumPy or Python exception from inside, and leaves the
tensors and the graph in progress usable. Each case was a defect found by probing the API
with wrong types, ranks, sizes and values next to PyTorch; the wrong results are checked
against torch."""

from __future__ import annotations

import errno
import io
import zipfile

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from retrograd import nn, optim
from retrograd.errors import KeyMismatchError
from retrograd.utils.data import DataLoader, TensorDataset

#: files and the command line do not depend on the suite's inner backend: run once
files_only_once = pytest.mark.numpy_only(
    "files and the command line: nothing here depends on the suite's inner backend"
)

A = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
B = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -2.0]], dtype=np.float32)


@pytest.fixture
def leaves():
    return rg.tensor(A).require_grad(), rg.tensor(B).require_grad()


def _linear() -> nn.Linear:
    rg.seed(0)
    return nn.Linear(3, 2)


# (op the message names, error class, call on the leaves a and b)
CASES = [
    # tensor methods: a str, float, None or int where a dim, size or tensor belongs
    ("flip", rg.DTypeError, lambda a, b: a.flip(1.5)),
    ("flip", rg.DTypeError, lambda a, b: a.flip(None)),
    ("amax", rg.DTypeError, lambda a, b: a.amax(1.5)),
    ("all", rg.DTypeError, lambda a, b: a.all(1.5)),
    ("logsumexp", rg.DTypeError, lambda a, b: a.logsumexp(None)),
    ("squeeze", rg.DTypeError, lambda a, b: a.squeeze(1.5)),
    ("split", rg.DTypeError, lambda a, b: a.split(1.5)),
    ("permute", rg.DTypeError, lambda a, b: a.permute(1.5)),
    ("type_as", rg.DTypeError, lambda a, b: a.type_as(5)),
    ("expand_as", rg.DTypeError, lambda a, b: a.expand_as("x")),
    ("view_as", rg.DTypeError, lambda a, b: a.view_as(None)),
    ("is_same_size", rg.DTypeError, lambda a, b: a.is_same_size(5)),
    ("reshape", rg.ShapeError, lambda a, b: a.reshape("a")),
    ("broadcast_to", rg.ShapeError, lambda a, b: a.broadcast_to("a")),
    ("roll", rg.InvalidArgumentError, lambda a, b: a.roll("a", 0)),
    ("diag_embed", rg.DTypeError, lambda a, b: a.diag_embed("a")),
    ("diagonal", rg.DTypeError, lambda a, b: a.diagonal("a")),  # torch: TypeError
    ("new_full", rg.DTypeError, lambda a, b: a.new_full(5, 5)),
    ("new_ones", rg.ShapeError, lambda a, b: a.new_ones(-5)),
    ("slice", rg.DTypeError, lambda a, b: a.slice(5)),
    ("index_put", rg.DTypeError, lambda a, b: a.index_put(5, 5)),
    ("topk", rg.DTypeError, lambda a, b: a.topk("a")),
    ("kthvalue", rg.DTypeError, lambda a, b: a.kthvalue("a")),
    ("rot90", rg.DTypeError, lambda a, b: a.rot90(5, 5)),
    ("softplus", rg.InvalidArgumentError, lambda a, b: a.softplus("a")),
    ("leaky_relu", rg.InvalidArgumentError, lambda a, b: a.leaky_relu("a")),
    ("logit", rg.DTypeError, lambda a, b: a.logit("a")),
    ("nan_to_num", rg.InvalidArgumentError, lambda a, b: a.nan_to_num("a")),
    ("histc", rg.InvalidArgumentError, lambda a, b: a.histc(-5)),
    ("sum_to_size", rg.DTypeError, lambda a, b: a.sum_to_size(1.5)),
    ("split_with_sizes", rg.DTypeError, lambda a, b: a.split_with_sizes(5)),
    ("repeat_interleave", rg.DTypeError, lambda a, b: a.repeat_interleave(1.5)),
    ("hsplit", rg.DTypeError, lambda a, b: a.hsplit(1.5)),
    ("float_power", rg.InvalidArgumentError, lambda a, b: a.float_power("a")),
    ("grad", rg.DTypeError, lambda a, b: a.grad("not gradients")),
    ("grad", rg.DTypeError, lambda a, b: a.grad({})),
    ("indexing", rg.IndexOutOfRangeError, lambda a, b: a[::0]),
    ("len() of a 0-d tensor", rg.DTypeError, lambda a, b: len(rg.tensor(1.0))),
    ("len() of a 0-d tensor", rg.DTypeError, lambda a, b: list(rg.tensor(1.0))),
    ("sum_dim", rg.ShapeError, lambda a, b: rg.tensor(1.0).sum_dim(1)),
    ("zeros", rg.ShapeError, lambda a, b: rg.zeros((1.5,))),
    ("reshape", rg.ShapeError, lambda a, b: a.reshape((3.0, 2.0))),
    # values torch refuses and a wrong result came of (glu halved an odd dim unevenly)
    ("glu", rg.ShapeError, lambda a, b: F.glu(a, 1)),
    ("hardtanh", rg.InvalidArgumentError, lambda a, b: F.hardtanh(a, 2.0, 1.0)),
    ("arange", rg.InvalidArgumentError, lambda a, b: rg.arange(0, 5, -1)),
    ("arange", rg.InvalidArgumentError, lambda a, b: rg.arange(5.0, 0.0, 0.5)),
    ("arange", rg.InvalidArgumentError, lambda a, b: rg.arange(0, float("inf"))),
    ("diff", rg.InvalidArgumentError, lambda a, b: a.diff(-1)),
    # what a device backend raises as a RuntimeError (torch's), as NumPy's ValueError
    ("diag_embed", rg.InvalidArgumentError, lambda a, b: a.diag_embed(float("nan"))),
    ("sub", rg.DTypeError, lambda a, b: rg.tensor([True]) - rg.tensor([False])),
    ("sub", rg.DTypeError, lambda a, b: rg.tensor([True]).sub(True)),
    # sizes no machine holds: an error of the hierarchy, also a MemoryError
    ("zeros", rg.OutOfMemoryError, lambda a, b: rg.zeros((10**9, 10**9))),
    ("randn", rg.OutOfMemoryError, lambda a, b: rg.randn(10**9, 10**9)),
    ("eye", rg.OutOfMemoryError, lambda a, b: rg.eye(10**8)),
    ("eye", rg.InvalidArgumentError, lambda a, b: rg.eye(10**10)),  # past any address
    ("normal_", rg.InvalidArgumentError, lambda a, b: nn.init.normal_(rg.zeros((2,)), std=-1.0)),
    ("uniform_", rg.InvalidArgumentError, lambda a, b: nn.init.uniform_(rg.zeros((2,)), 1.0, 0.0)),
    # devices: unknown kinds, bad indices
    ("device", rg.InvalidArgumentError, lambda a, b: rg.device("cpu:a")),
    ("device", rg.InvalidArgumentError, lambda a, b: rg.Device("cpu", -1)),
    ("device", rg.InvalidArgumentError, lambda a, b: rg.device(5)),
    ("tensor", rg.InvalidArgumentError, lambda a, b: rg.tensor([1.0], device="tpu")),
    ("to", rg.InvalidArgumentError, lambda a, b: a.to("tpu")),
    ("zeros", rg.InvalidArgumentError, lambda a, b: rg.zeros((2,), device="gpu")),
    # rg.* functions: a number or a str where a tensor or a list of them belongs
    ("cat", rg.DTypeError, lambda a, b: rg.cat(5)),
    ("cat", rg.DTypeError, lambda a, b: rg.cat(rg.tensor(1.0))),
    ("stack", rg.DTypeError, lambda a, b: rg.stack("a")),
    ("zeros", rg.ShapeError, lambda a, b: rg.zeros("a")),
    ("eye", rg.DTypeError, lambda a, b: rg.eye("a")),
    ("arange", rg.DTypeError, lambda a, b: rg.arange("a")),
    ("einsum", rg.DTypeError, lambda a, b: rg.einsum(5, a)),
    ("where", rg.DTypeError, lambda a, b: rg.where(5)),
    ("where", rg.DTypeError, lambda a, b: rg.where(5, 5)),  # torch: a TypeError
    ("broadcast_tensors", rg.DTypeError, lambda a, b: rg.broadcast_tensors(5)),
    ("broadcast_shapes", rg.DTypeError, lambda a, b: rg.broadcast_shapes(2.5)),
    ("cdist", rg.DTypeError, lambda a, b: rg.cdist(5, 5)),
    ("meshgrid", rg.DTypeError, lambda a, b: rg.meshgrid(5)),
    ("zeros_like", rg.DTypeError, lambda a, b: rg.zeros_like(5)),
    ("unique", rg.DTypeError, lambda a, b: rg.unique(5)),
    ("tril_indices", rg.DTypeError, lambda a, b: rg.tril_indices(5, "a")),
    ("searchsorted", rg.DTypeError, lambda a, b: rg.searchsorted(5, 5)),
    ("std_mean", rg.DTypeError, lambda a, b: rg.std_mean(5)),
    ("trapezoid", rg.DTypeError, lambda a, b: rg.trapezoid(a, 5)),
    ("hstack", rg.DTypeError, lambda a, b: rg.hstack(5)),
    # nn.functional
    ("triplet_margin_loss", rg.DTypeError, lambda a, b: F.triplet_margin_loss(a, b, 2)),
    ("pad", rg.DTypeError, lambda a, b: F.pad(a, 2)),
    ("pad", rg.DTypeError, lambda a, b: F.pad(a, [1, 2], [1, 2])),
    ("normalize", rg.DTypeError, lambda a, b: F.normalize(a, 2.0, 1.5)),
    ("prelu", rg.DTypeError, lambda a, b: F.prelu(a, 2)),
    ("affine_grid", rg.DTypeError, lambda a, b: F.affine_grid(a, 2)),
    ("layer_norm", rg.DTypeError, lambda a, b: F.layer_norm(a, None)),
    ("rms_norm", rg.DTypeError, lambda a, b: F.rms_norm(a, None)),
    ("leaky_relu", rg.DTypeError, lambda a, b: F.leaky_relu(a, (2,))),
    ("softshrink", rg.DTypeError, lambda a, b: F.softshrink(a, (2,))),
    ("pixel_shuffle", rg.DTypeError, lambda a, b: F.pixel_shuffle(rg.ones((1, 4, 2, 2)), (2,))),
    ("pixel_shuffle", rg.InvalidArgumentError, lambda a, b: F.pixel_shuffle(rg.ones((1, 4, 2)), 0)),
    ("adaptive_avg_pool1d", rg.DTypeError, lambda a, b: F.adaptive_avg_pool1d(a, 1.5)),
    ("one_hot", rg.DTypeError, lambda a, b: F.one_hot(rg.tensor([0, 1]), (2,))),
    ("embedding_bag", rg.DTypeError, lambda a, b: F.embedding_bag(rg.tensor([[0, 1]]), 2)),
    # modules: constructors and forward
    ("LayerNorm", rg.InvalidArgumentError, lambda a, b: nn.LayerNorm(-1)),
    ("LayerNorm", rg.DTypeError, lambda a, b: nn.LayerNorm(None)),
    ("Conv1d", rg.DTypeError, lambda a, b: nn.Conv1d(3, 4, "x")),
    ("Embedding", rg.DTypeError, lambda a, b: nn.Embedding(3, 4, "x")),
    ("Dropout", rg.DTypeError, lambda a, b: nn.Dropout("a")),
    ("Bilinear", rg.ShapeError, lambda a, b: nn.Bilinear(3, 4, "x")),
    ("BatchNorm1d", rg.DTypeError, lambda a, b: nn.BatchNorm1d(3)("a")),
    ("InstanceNorm1d", rg.DTypeError, lambda a, b: nn.InstanceNorm1d(3)("a")),
    ("Flatten", rg.DTypeError, lambda a, b: nn.Flatten()("a")),
    ("TransformerEncoderLayer", rg.DTypeError, lambda a, b: nn.TransformerEncoderLayer(4, 2)("a")),
    # optimizers
    ("SGD", rg.DTypeError, lambda a, b: optim.SGD(None, lr=0.1)),
    ("Adam", rg.DTypeError, lambda a, b: optim.Adam(5, lr=0.1)),
    ("Adam", rg.DTypeError, lambda a, b: optim.Adam([a], betas=0.9)),
    ("NAdam", rg.DTypeError, lambda a, b: optim.NAdam([a], betas=0.9)),
    ("SGD", rg.InvalidArgumentError, lambda a, b: optim.SGD([a], lr=0.1, momentum=-1.0)),
    ("SGD", rg.InvalidArgumentError, lambda a, b: optim.SGD([a], lr=0.1, weight_decay=-1.0)),
    ("Adam", rg.InvalidArgumentError, lambda a, b: optim.Adam([a], eps=-1.0)),
    ("RMSprop", rg.InvalidArgumentError, lambda a, b: optim.RMSprop([a], momentum=-1.0)),
    ("Adagrad", rg.InvalidArgumentError, lambda a, b: optim.Adagrad([a], weight_decay="a")),
    ("SGD.step", rg.DTypeError, lambda a, b: optim.SGD([a], lr=0.1).step("a")),
    ("SGD.step", rg.DTypeError, lambda a, b: optim.SGD([a], lr=0.1).step({})),
    ("Adam.step", rg.DTypeError, lambda a, b: optim.Adam([a]).step([1.0])),
    # data and state
    ("DataLoader", rg.DTypeError, lambda a, b: DataLoader(None)),
    ("DataLoader", rg.DTypeError, lambda a, b: DataLoader([1, 2], collate_fn=5)),
    ("DataLoader", rg.InvalidArgumentError, lambda a, b: DataLoader([1, 2], num_workers="a")),
    ("TensorDataset", rg.DTypeError, lambda a, b: TensorDataset("a")),
    ("TensorDataset", rg.ShapeError, lambda a, b: TensorDataset(rg.tensor(1.0))),
    ("load_state_dict", rg.DTypeError, lambda a, b: _linear().load_state_dict(5)),
    ("load_state_dict", rg.DTypeError, lambda a, b: _linear().load_state_dict(None)),
    ("load_state_dict", KeyMismatchError, lambda a, b: _linear().load_state_dict({"x": a})),
    ("load", rg.DTypeError, lambda a, b: rg.load(5)),
    ("save", rg.DTypeError, lambda a, b: rg.save({"a": a}, 5)),
    ("load", rg.DTypeError, lambda a, b: rg.load(None)),
]  # fmt: skip


@pytest.mark.parametrize(
    "op, error, call", CASES, ids=[f"{case[0]}-{i}" for i, case in enumerate(CASES)]
)
def test_bad_arguments_raise_the_hierarchy_naming_the_op(leaves, op, error, call):
    a, b = leaves
    pending = a * b + 1.0  # a graph in progress that the failure must not disturb
    with pytest.raises(rg.RetrogradError) as raised:
        call(a, b)
    assert isinstance(raised.value, error), f"{type(raised.value).__name__}: {raised.value}"
    message = str(raised.value)
    assert op.split(".")[0] in message, message
    assert "\n" not in message.strip("\"'")  # one line
    assert isinstance(raised.value, MemoryError) == (error is rg.OutOfMemoryError)
    grads = pending.sum().backward()
    np.testing.assert_array_equal(a.grad(grads).numpy(), B)
    np.testing.assert_array_equal(b.grad(grads).numpy(), A)
    grads = (a.flip(0) * b).sum().backward()  # the same tensors, a valid call
    np.testing.assert_array_equal(a.grad(grads).numpy(), B[::-1])


def test_an_argument_error_keeps_the_original_as_its_cause():
    with pytest.raises(rg.DTypeError) as raised:
        rg.ones((2, 3)).flip(1.5)
    message = str(raised.value)
    assert message.startswith("flip: invalid arguments (Tensor [2, 3] float32, 1.5)")
    assert isinstance(raised.value.__cause__, TypeError)


def test_the_guard_leaves_exceptions_of_the_users_code_as_they_are():
    """A container's forward runs the user's modules; their exceptions pass unchanged."""

    class Broken(nn.Module):
        def forward(self, x):
            raise KeyError("the user's own")

    with pytest.raises(KeyError) as raised:
        nn.Sequential(Broken())(rg.ones((1,)))
    assert not isinstance(raised.value, rg.RetrogradError)


def test_guarded_functions_still_pickle_by_name():
    import pickle

    for function in (rg.cat, F.relu, rg.Tensor.flip, nn.Conv1d.forward, optim.Adam.__init__):
        assert pickle.loads(pickle.dumps(function)) is function


def test_a_missing_state_key_is_still_a_key_error():
    with pytest.raises(KeyError, match=r"missing parameters \['bias'\]"):
        _linear().load_state_dict({"weight": np.zeros((2, 3), np.float32)})


# -- wrong results, against torch ---------------------------------------------------------------
@pytest.mark.parametrize("shape", [(0,), (0, 3), (4,)])
def test_unique_consecutive_of_empty_and_full_tensors_matches_torch(shape):
    array = np.arange(float(np.prod(shape))).reshape(shape) // 2
    ours = rg.tensor(array).unique_consecutive(return_inverse=True, return_counts=True)
    theirs = torch.tensor(array).unique_consecutive(return_inverse=True, return_counts=True)
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.shape == tuple(other.shape)
        np.testing.assert_array_equal(mine.numpy(), other.numpy())


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)])
@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_of_empty_tensors_is_empty_as_in_torch(shape, dim):
    for name in ("softmax", "log_softmax"):
        x = rg.zeros(shape).require_grad()
        t = torch.zeros(shape, requires_grad=True)
        out, expected = getattr(x, name)(dim), getattr(t, name)(dim)
        assert out.shape == tuple(expected.shape)
        expected.sum().backward()
        assert x.grad(out.sum().backward()).shape == tuple(t.grad.shape)


def test_devices_that_exist_still_parse():
    assert rg.device("cuda:1") == rg.Device("cuda", 1)
    assert rg.Device("cpu", np.int64(2)) is rg.Device("cpu", 2)
    assert str(rg.device("cpu")) == "cpu"  # (torch's text)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss", "soft_margin_loss"])
@pytest.mark.parametrize("legacy", [(0,), (0, 1), (1, 0), (None, 0)])
def test_legacy_size_average_and_reduce_are_read_by_truth_as_in_torch(name, legacy):
    x, y = A / 7, B
    ours = getattr(F, name)(rg.tensor(x), rg.tensor(y), *legacy)
    theirs = getattr(torch.nn.functional, name)(torch.tensor(x), torch.tensor(y), *legacy)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bins, low, high", [(5, 0, 0), (100, 0, 0), (7, -1, 1), (3, 0.1, 0.8)])
def test_histc_bins_values_on_edges_as_torch_does(dtype, bins, low, high):
    rng = np.random.default_rng(0)
    arrays = [np.arange(6.0).reshape(2, 3) / 7 + 0.1] + [
        rng.standard_normal(n) * scale for n, scale in ((7, 1.0), (30, 0.1), (12, 7.0))
    ]
    for array in arrays:
        array = array.astype(dtype)
        ours = rg.tensor(array).histc(bins, low, high)
        theirs = torch.tensor(array).histc(bins, low, high)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_logical_not_of_numbers_is_whether_they_are_zero():
    values = np.array([[0, 1, -2], [3, 0, 5]])
    for array in (values, values.astype(np.float32)):
        ours = rg.tensor(array).logical_not()
        theirs = torch.tensor(array).logical_not()
        assert ours.dtype == "bool"
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        np.testing.assert_array_equal(rg.logical_not(rg.tensor(array)).numpy(), theirs.numpy())


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.chunk(5),
        lambda x: x.chunk(2),
        lambda x: x.split(2),
        lambda x: x.chunk(3, 1),
        lambda x: x.tensor_split((-2, 3), 1),
        lambda x: x.tensor_split((-5, 1), 1),
        lambda x: x.tensor_split([1, -1], 1),
    ],
)
@pytest.mark.parametrize("shape", [(0, 3), (2, 3)])
def test_splits_of_empty_dimensions_and_negative_indices_match_torch(call, shape):
    array = np.arange(float(np.prod(shape))).reshape(shape)
    ours, theirs = call(rg.tensor(array)), call(torch.tensor(array))
    assert [p.shape for p in ours] == [tuple(p.shape) for p in theirs]
    for mine, other in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine.numpy(), other.numpy())


# -- files --------------------------------------------------------------------------------------
@files_only_once
def test_save_on_a_full_disk_keeps_the_previous_file_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    rg.save({"w": rg.tensor([1.0, 2.0])}, path)
    before = path.read_bytes()

    def full_disk(prepared, file):
        file.write(b"PK\x03\x04 half of an archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rg.serialization._Prepared, "copy_to", full_disk)
    with pytest.raises(OSError) as raised:
        rg.save({"w": rg.tensor([3.0, 4.0, 5.0])}, path)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temporary
    assert rg.load(path)["w"].tolist() == [1.0, 2.0]


@files_only_once
def test_a_write_into_a_missing_folder_names_the_file_not_a_temporary(tmp_path):
    for write, name in (
        (lambda path: rg.save({"w": rg.ones((2,))}, path), "x.pt"),
        (lambda path: _linear().save(path), "x.npz"),
    ):
        path = tmp_path / "missing" / name
        with pytest.raises(FileNotFoundError) as raised:
            write(path)
        assert raised.value.filename == str(path)


@files_only_once
def test_save_of_something_it_cannot_store_leaves_the_file_alone(tmp_path):
    path = tmp_path / "checkpoint.pt"
    rg.save([rg.tensor([1.0])], path)
    before = path.read_bytes()
    with pytest.raises(rg.DTypeError, match="save"):
        rg.save({"bad": {(lambda: 1): 1}}, path)  # a key pickle cannot store
    assert path.read_bytes() == before


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _structure(text: str) -> bytes:
    return _npz(__retrograd_structure__=np.array(text))


def _values_at(data: bytes) -> int:
    """Where the first storage's bytes start in a file rg.save wrote (torch's zip)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entry = archive.getinfo("archive/data/0")
    start = entry.header_offset
    name, extra = (int.from_bytes(data[start + at : start + at + 2], "little") for at in (26, 28))
    return start + 30 + name + extra


def _damaged() -> dict[str, tuple[bytes, str]]:
    buffer = io.BytesIO()
    rg.save({"w": rg.tensor([1.0, 2.0, 3.0])}, buffer)
    good = buffer.getvalue()
    flipped = bytearray(good)
    flipped[_values_at(good)] ^= 0xFF  # (a byte of the zip's padding would change nothing)
    return {
        "empty": (b"", "it is empty"),
        "truncated": (good[: len(good) // 2], "truncated"),
        "last bytes cut": (good[:-10], "truncated"),
        "random bytes": (bytes(range(256))[::-1] + bytes(range(44)), "starts with"),
        "random after a zip header": (b"PK\x03\x04" + bytes(range(200)), "not a file rg.sa"),
        "text": (b"hello\n", "starts with b'hello"),
        "a pickle": (b"\x80\x04\x95 pickled", "pickle"),
        "a flipped byte": (bytes(flipped), "damaged"),
        "structure not JSON": (_structure("{oops"), "damaged"),
        "structure a list": (_structure("[1]"), "no saved object"),
        "no object": (_structure('{"format": "retrograd-save/1"}'), "no saved object"),
        "missing array": (
            _structure('{"format": "retrograd-save/1", "object": {"tensor": "a9"}}'),
            "a9",
        ),
        "bad dict": (_structure('{"format": "retrograd-save/1", "object": {"dict": 5}}'), "dama"),
    }  # fmt: skip


@files_only_once
@pytest.mark.parametrize("kind", list(_damaged()))
def test_load_of_a_damaged_file_is_one_clear_error_naming_it(tmp_path, kind):
    data, phrase = _damaged()[kind]
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(data)
    for source, name in ((path, str(path)), (io.BytesIO(data), "the file object")):
        with pytest.raises(rg.InvalidArgumentError) as raised:
            rg.load(source)
        message = str(raised.value)
        assert message.startswith("load: ") and name in message and phrase in message, message
        assert "\n" not in message


@files_only_once
def test_a_damaged_pickled_entry_is_one_clear_error_even_when_trusted():
    import argparse

    buffer = io.BytesIO()
    rg.save({"args": argparse.Namespace(lr=0.1)}, buffer)
    damaged = io.BytesIO()
    with zipfile.ZipFile(buffer) as source, zipfile.ZipFile(damaged, "w") as target:
        for name in source.namelist():  # the pickle (torch's data.pkl) cut short
            cut = name.endswith("data.pkl")
            target.writestr(name, b"\x80\x05 cut short" if cut else source.read(name))
    with pytest.raises(rg.InvalidArgumentError, match="load: the file object is a torch file, dam"):
        rg.load(io.BytesIO(damaged.getvalue()), weights_only=False)
    with pytest.raises(rg.DTypeError, match="get_unsafe_globals_in_checkpoint"):
        rg.serialization.get_unsafe_globals_in_checkpoint(5)  # never fd 5


@files_only_once
def test_load_of_a_missing_file_is_file_not_found_as_in_torch(tmp_path):
    with pytest.raises(FileNotFoundError):
        rg.load(tmp_path / "nothing.pt")


@files_only_once
@pytest.mark.parametrize("kind", ["empty", "random bytes", "a flipped byte", "text"])
def test_load_state_dict_of_a_damaged_file_changes_nothing(tmp_path, kind):
    model = _linear()
    before = {k: v.copy() for k, v in model.state_dict().items()}
    good = tmp_path / "good.npz"
    model.save(good)
    data = _damaged()[kind][0] if kind != "a flipped byte" else None
    if data is None:
        flipped = bytearray(good.read_bytes())
        flipped[len(flipped) // 3] ^= 0xFF
        data = bytes(flipped)
    path = tmp_path / "model.npz"
    path.write_bytes(data)
    with pytest.raises(rg.InvalidArgumentError, match=r"load_state_dict: .*model\.npz"):
        model.load_state_dict(path)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])


@files_only_once
@pytest.mark.parametrize("command", ["sample", "train"])
def test_the_cli_on_random_bytes_with_a_zip_header_is_one_line(tmp_path, capsys, command):
    from retrograd.app import cli

    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.npz").write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)
    arguments = {
        "sample": ["sample", "--out", str(out), "--tokens", "5"],
        "train": ["train", "--model", "gpt", "--out", str(out), "--resume"],
    }[command]
    assert cli.main(arguments) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "is damaged" in lines[0] and "checkpoint.npz" in lines[0], lines
