"""Reliability sweep 40: every file reader fuzzed (truncated at each structural offset,
bits flipped at seeded positions, records swapped between files, empty files, folders, links).

Readers swept: ``rg.load`` (its own files, torch's zip and legacy formats, ``weights_only``
both ways, ``mmap=True``), the state-dict loaders of modules and optimizers given damaged
dicts, the command line's ``checkpoint.npz`` (``sample``, ``train --resume``) and
``metrics.json``, and ``retrograd.vision``'s MNIST (IDX, plain and ``.gz``) and CIFAR readers.
The fuzzing found ``rg.load``, the command line and the module loader sound (the first test
keeps ``rg.load``'s part of it); a flipped data byte of a legacy torch file or an IDX or CIFAR
file (formats without a checksum) loads as torch's and torchvision's readers load it, the
flipped value included. Defects found (fixed, each test failing before):

* a ``.gz`` IDX file whose compressed stream is damaged raised zlib's bare ``zlib.error``
  (not an ``OSError``): now the ``DamagedFileError`` naming the file;
* MNIST's image and label files swapped (or of two splits) raised an ``InvalidArgumentError``
  naming no file: now a ``DamagedFileError`` naming both (``vision.datasets.MNIST`` and the
  command line's ``--dataset mnist``);
* a CIFAR batch Python 3 wrote at protocol 2 (the original batches' protocol: its arrays'
  bytes pickled through ``_codecs.encode``) or one holding NumPy integers as labels was
  refused as damaged; torchvision's reader loads both, and so does this one now;
* an image whose damaged header claims billions of pixels raised PIL's bare
  ``DecompressionBombError`` (``ImageFolder``, ``vision.io.read_image``): now the
  ``DamagedFileError`` naming the file (and how to read a genuine image that large);
* an optimizer state whose group's ``params`` is not a list failed with a bare ``TypeError``;
  a group's setting of a form the algorithm cannot step with (ASGD's ``lambd`` None,
  Rprop's ``etas`` or Adafactor's ``eps`` of one value) with a bare ``TypeError`` or
  ``ValueError`` inside the load's probe; a moment saved as ``None`` that the algorithm cannot
  start afresh (Adamax's ``exp_inf``, NAdam's ``exp_avg_sq``, Adadelta's ``acc_delta``,
  ASGD's ``eta``) loaded, and the next step failed deep inside with a bare ``TypeError``;
  Adafactor's ``beta2_decay`` saved positive loaded and overflowed in the second step. Each
  is now refused at the load, naming the entry, the optimizer left as it was; Adam's
  ``amsgrad`` step starts an ``exp_avg_sq`` saved as None afresh as its other moments (and
  the fused step) do, the step torch takes from zeros;
* a torch file cut short while ``rg.load`` read it said "damaged or truncated ()" (the zip
  reader's ``EOFError`` has no message): it names the ``EOFError`` now;
* a schedule's state of a damaged file (OneCycleLR's ``use_beta1`` not a bool or its phases
  gone, CyclicLR's ``total_size`` or a ``last_epoch`` NaN) loaded and failed at the next step
  with a bare ``KeyError``, ``AssertionError`` or ``ValueError``: refused at the load now.
"""

from __future__ import annotations

import io
import os
import pickle
import random
import zipfile

import numpy as np
import pytest
import torch

import retrograd as rg
from legacy_files import legacy_file
from retrograd.errors import DamagedFileError
from retrograd.vision import datasets
from retrograd.vision.idx import write_idx


# -- rg.load over damaged files (kept right) ------------------------------------------------------
def _saved_files(tmp_path) -> tuple[dict, dict[str, bytes]]:
    torch.manual_seed(0)
    state = {"w": torch.randn(3, 4), "b": torch.arange(5), "k": torch.ones(2, dtype=torch.float64)}
    files = {}
    torch.save(state, tmp_path / "zip.pt")
    # (torch names a legacy file's storages by their addresses: the same bytes in every process)
    (tmp_path / "legacy.pt").write_bytes(legacy_file(state))
    rg.save({k: rg.tensor(v.numpy()) for k, v in state.items()}, tmp_path / "rg.pt")
    for name in ("zip", "legacy", "rg"):
        files[name] = (tmp_path / f"{name}.pt").read_bytes()
    return state, files


def _structural_offsets(data: bytes) -> list[int]:
    """Where a zip's records start (local headers, the central directory and its end), or a
    pickle's opcodes begin (a legacy file: its first 64 bytes, each), and the ends."""
    offsets = set(range(0, 64, 3)) | {len(data) - 1, len(data) // 2}
    if data.startswith(b"PK"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                offsets |= {info.header_offset, info.header_offset + 30}
            offsets |= {archive.start_dir, data.rfind(b"PK\x05\x06")}
    return sorted(o for o in offsets if 0 <= o < len(data))


def test_damaged_saved_files_are_refused_by_name_or_load_as_torch_loads_them(tmp_path):
    # a stream of its own, whatever else drew from the global one
    draw = random.Random(0)
    state, files = _saved_files(tmp_path)
    target = tmp_path / "case.pt"
    cases = 0
    for kind, data in files.items():
        damaged = [data[:o] for o in _structural_offsets(data)]
        for _ in range(25):
            flipped = bytearray(data)
            flipped[draw.randrange(len(data))] ^= 1 << draw.randrange(8)
            damaged.append(bytes(flipped))
        for content in damaged:
            target.write_bytes(content)
            try:
                expected = torch.load(target, weights_only=True)
            except Exception:
                expected = None
            for weights_only, mmap in ((True, False), (False, False), (True, True)):
                cases += 1
                try:
                    loaded = rg.load(target, weights_only=weights_only, mmap=mmap)
                except rg.RetrogradError as error:
                    assert "case.pt" in str(error)
                    continue
                # read: a zip's entries are checked against their CRC-32s, so what loads
                # is what was saved (a flipped bit in a header field no reader needs, which
                # torch's stricter zip reader refuses, changes nothing); a legacy file has no
                # checksum: what loads is what torch loads, a flipped value included
                if kind == "legacy":
                    assert expected is not None, content[:8]
                else:
                    expected = state
                assert loaded.keys() == expected.keys()
                for key, value in expected.items():
                    np.testing.assert_array_equal(loaded[key].numpy(), value.numpy())
    assert cases > 300


def test_a_file_cut_short_while_it_is_read_is_named_with_what_went_wrong(tmp_path, monkeypatch):
    torch.manual_seed(0)
    path = tmp_path / "run.pt"
    torch.save({"w": torch.randn(64, 64)}, path)
    opened = zipfile.ZipFile.open
    entries = []

    def open_then_cut(archive, name, *args, **kwargs):
        entries.append(getattr(name, "filename", name))
        # another process truncates the file once its reading began: at its storage's record
        # (its 16 KiB the file's greater half)
        if entries[-1].endswith("/data/0") and entries.count(entries[-1]) == 1:
            os.truncate(path, path.stat().st_size // 2)
        return opened(archive, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", open_then_cut)
    with pytest.raises(rg.InvalidArgumentError, match=r"run\.pt") as caught:
        rg.load(path)
    # the zip reader's EOFError has no message: the error said "damaged or truncated ()"
    assert "()" not in str(caught.value) and "EOFError" in str(caught.value)


# -- MNIST's IDX files ----------------------------------------------------------------------------
def _mnist(root, images: np.ndarray, labels: np.ndarray, gz: str = "") -> tuple:
    folder = root / "MNIST" / "raw"
    folder.mkdir(parents=True)
    image_file = folder / f"t10k-images-idx3-ubyte{gz}"
    label_file = folder / f"t10k-labels-idx1-ubyte{gz}"
    write_idx(image_file, images)
    write_idx(label_file, labels)
    return image_file, label_file


def test_a_gz_idx_file_with_a_damaged_compressed_stream_names_the_file(tmp_path):
    np.random.seed(0)
    images = np.random.randint(0, 256, (2, 4, 4)).astype(np.uint8)
    _, label_file = _mnist(tmp_path, images, np.array([3, 1], np.uint8), ".gz")
    whole = label_file.read_bytes()
    # the gzip header kept, then a deflate block of the reserved type (BTYPE 11): zlib's
    # "invalid block type", a zlib.error, not the OSError a bad header or CRC is
    label_file.write_bytes(whole[:10] + b"\x07" + bytes(8))
    with pytest.raises(DamagedFileError, match=r"t10k-labels-idx1-ubyte\.gz") as caught:
        datasets.MNIST(tmp_path, train=False)
    assert isinstance(caught.value, OSError)
    label_file.write_bytes(whole)  # the file whole again: read back as written
    loaded = datasets.MNIST(tmp_path, train=False)
    np.testing.assert_array_equal(loaded.data.numpy(), images)
    assert loaded.targets.tolist() == [3, 1]


def test_mnist_image_and_label_files_swapped_are_a_damaged_file_error_naming_both(tmp_path):
    np.random.seed(0)
    images = np.random.randint(0, 256, (2, 4, 4)).astype(np.uint8)
    image_file, label_file = _mnist(tmp_path, images, np.array([3, 1], np.uint8))
    image_bytes = image_file.read_bytes()
    image_file.write_bytes(label_file.read_bytes())
    label_file.write_bytes(image_bytes)
    with pytest.raises(DamagedFileError) as caught:
        datasets.MNIST(tmp_path, train=False)
    assert "t10k-images-idx3-ubyte" in str(caught.value)
    assert "t10k-labels-idx1-ubyte" in str(caught.value)


def test_the_command_lines_mnist_files_of_two_splits_are_named(tmp_path):
    from retrograd.app.data import load_mnist

    np.random.seed(0)
    for split, count in (("train", 3), ("t10k", 2)):
        write_idx(tmp_path / f"{split}-images-idx3-ubyte", np.zeros((count, 4, 4), np.uint8))
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte", np.zeros(count, np.uint8))
    # the test labels copied over the training ones: 3 images, 2 labels
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(
        (tmp_path / "t10k-labels-idx1-ubyte").read_bytes()
    )
    with pytest.raises(DamagedFileError, match="train-labels-idx1-ubyte") as caught:
        load_mnist(tmp_path)
    assert "train-images-idx3-ubyte" in str(caught.value)


# -- CIFAR's pickles ------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", [2, 4])
def test_cifar_batches_python_3_writes_load_as_torchvisions_reader_loads_them(tmp_path, protocol):
    np.random.seed(0)
    data = np.random.randint(0, 256, (3, 3072)).astype(np.uint8)
    labels = [np.int64(7), 2, np.int64(0)]  # (labels a script took from an array)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batch = {"data": data, "labels": labels, "filenames": ["a.png", "b.png", "c.png"]}
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=protocol))
    meta = {"label_names": [f"class{k}" for k in range(10)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=protocol))
    # what torchvision's reader (pickle.load, encoding latin1) reads from these files
    with open(folder / "test_batch", "rb") as handle:
        expected = pickle.load(handle, encoding="latin1")
    loaded = datasets.CIFAR10(tmp_path, train=False)
    np.testing.assert_array_equal(
        loaded.data, expected["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    )
    assert loaded.targets == [int(label) for label in expected["labels"]] == [7, 2, 0]
    assert loaded.classes[7] == "class7"


def test_a_cifar_batch_naming_another_callable_is_still_refused(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    # _codecs.decode is allowed nowhere: only encode, which protocol 2 writes bytes with
    hostile = b"\x80\x02c_codecs\ndecode\nq\x00X\x01\x00\x00\x00aq\x01\x85q\x02Rq\x03."
    (folder / "test_batch").write_bytes(hostile)
    with pytest.raises(DamagedFileError, match=r"_codecs\.decode is not part of a CIFAR batch"):
        datasets.CIFAR10(tmp_path, train=False)


# -- images whose damaged header claims billions of pixels ---------------------------------------
def test_an_image_whose_damaged_header_claims_billions_of_pixels_names_its_file(tmp_path):
    from PIL import Image

    from retrograd.vision import io as vision_io

    np.random.seed(0)
    (tmp_path / "cat").mkdir()
    path = tmp_path / "cat" / "a.bmp"
    Image.fromarray(np.random.randint(0, 256, (8, 8, 3)).astype(np.uint8)).save(path)
    header = bytearray(path.read_bytes())
    header[18:22] = (2**31 - 1).to_bytes(4, "little")  # BITMAPINFOHEADER's width
    path.write_bytes(bytes(header))
    # PIL's DecompressionBombError (an Exception alone, not the OSError of other damage)
    with pytest.raises(Image.DecompressionBombError), Image.open(path):
        pass
    for read in (lambda: datasets.ImageFolder(tmp_path)[0], lambda: vision_io.read_image(path)):
        with pytest.raises(DamagedFileError, match="MAX_IMAGE_PIXELS") as caught:
            read()
        assert "a.bmp" in str(caught.value) and isinstance(caught.value, OSError)


# -- optimizer states of damaged files ------------------------------------------------------------
def _stepped(make, steps: int = 2):
    rg.seed(0)
    model = rg.nn.Linear(3, 2)
    optimizer = make(model.parameters())
    x = rg.tensor(np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3))
    for _ in range(steps):
        optimizer.step((model(x) ** 2).sum().backward())
    return model, optimizer, x


def _snapshot(optimizer) -> tuple:
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    state = {
        id(p): {k: np.array(v.numpy()) if hasattr(v, "numpy") else v for k, v in s.items()}
        for p, s in optimizer.state.items()
    }
    return repr(groups), repr(state)


OPTIMIZERS = {
    "Adam": lambda p: rg.optim.Adam(p, lr=0.01, amsgrad=True),
    "Adamax": lambda p: rg.optim.Adamax(p),
    "NAdam": lambda p: rg.optim.NAdam(p),
    "Adadelta": lambda p: rg.optim.Adadelta(p),
    "ASGD": lambda p: rg.optim.ASGD(p),
    "Rprop": lambda p: rg.optim.Rprop(p),
    "Adafactor": lambda p: rg.optim.Adafactor(p),
}


@pytest.mark.parametrize(
    ("name", "where", "value", "error", "words"),
    [
        ("Adam", ("param_groups", "params"), None, rg.DTypeError, "'params' must be a list"),
        ("ASGD", ("param_groups", "lambd"), None, rg.DTypeError, "settings of group 0"),
        ("Rprop", ("param_groups", "etas"), (0.5,), rg.InvalidArgumentError, "group 0"),
        ("Adafactor", ("param_groups", "eps"), (1e-3,), rg.InvalidArgumentError, "group 0"),
        ("Adafactor", ("param_groups", "beta2_decay"), 1e300, rg.InvalidArgumentError, "beta2"),
        ("Adamax", ("state", "exp_inf"), None, rg.DTypeError, "state 0/exp_inf is None"),
        ("NAdam", ("state", "exp_avg_sq"), None, rg.DTypeError, "state 0/exp_avg_sq is None"),
        ("Adadelta", ("state", "acc_delta"), None, rg.DTypeError, "state 0/acc_delta is None"),
        ("ASGD", ("state", "eta"), None, rg.DTypeError, "state 0/eta is None"),
    ],
)
def test_a_damaged_optimizer_state_is_refused_at_the_load_and_leaves_the_optimizer(
    name, where, value, error, words
):
    np.random.seed(0)
    _, saved, _ = _stepped(OPTIMIZERS[name])
    damaged = saved.state_dict()
    if where[0] == "param_groups":
        damaged["param_groups"][0][where[1]] = value
    else:
        damaged["state"][0][where[1]] = value
    model, optimizer, x = _stepped(OPTIMIZERS[name], steps=1)
    before = _snapshot(optimizer)
    with pytest.raises(error, match=words) as caught:
        optimizer.load_state_dict(damaged)
    assert f"{name}.load_state_dict" in str(caught.value) or name in str(caught.value)
    assert _snapshot(optimizer) == before
    optimizer.step((model(x) ** 2).sum().backward())  # (still steps)


def test_adam_amsgrad_starts_an_exp_avg_sq_saved_as_none_from_zeros_as_torch():
    np.random.seed(0)
    weight, grad = np.random.randn(2, 3), np.random.randn(2, 3)
    exp_avg, peak = np.full((2, 3), 0.25), np.full((2, 3), 0.5)
    ours = rg.tensor(weight).require_grad()
    optimizer = rg.optim.Adam([ours], lr=0.1, amsgrad=True)
    saved = {
        "state": {
            0: {
                "step": 3.0,
                "exp_avg": rg.tensor(exp_avg),
                "exp_avg_sq": None,
                "max_exp_avg_sq": rg.tensor(peak),
            }
        },
        "param_groups": optimizer.state_dict()["param_groups"],
    }
    optimizer.load_state_dict(saved)
    optimizer.step((ours * rg.tensor(grad)).sum().backward())
    # torch's single-tensor Adam with amsgrad (torch/optim/adam.py), step 4, exp_avg_sq from
    # zeros (torch.optim.Adam given that state gives these values to the last digit)
    beta1, beta2, step = 0.9, 0.999, 4
    first = exp_avg + (1 - beta1) * (grad - exp_avg)
    second = (1 - beta2) * grad * grad
    denom = np.sqrt(np.maximum(peak, second)) / np.sqrt(1 - beta2**step) + 1e-8
    expected = weight - 0.1 / (1 - beta1**step) * first / denom
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-12, atol=1e-12)


# -- learning-rate schedules' states of damaged files ---------------------------------------------
def _schedule(kind: str):
    rg.seed(0)
    optimizer = rg.optim.SGD(rg.nn.Linear(2, 1).parameters(), lr=0.1, momentum=0.9)
    if kind == "OneCycleLR":
        return rg.optim.lr_scheduler.OneCycleLR(optimizer, 1.0, total_steps=10)
    if kind == "CyclicLR":
        return rg.optim.lr_scheduler.CyclicLR(optimizer, 0.01, 0.1, step_size_up=2)
    return rg.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, 3)


@pytest.mark.parametrize(
    ("kind", "key", "value", "error"),
    [
        ("OneCycleLR", "use_beta1", "x", rg.DTypeError),  # (KeyError 'betas' at the step)
        ("OneCycleLR", "_schedule_phases", {}, rg.DTypeError),  # (AssertionError)
        ("CyclicLR", "total_size", float("nan"), rg.InvalidArgumentError),  # (ValueError)
        ("CosineAnnealingWarmRestarts", "last_epoch", float("nan"), rg.InvalidArgumentError),
    ],
)
def test_a_damaged_schedule_state_is_refused_at_the_load_naming_the_entry(kind, key, value, error):
    saved = _schedule(kind)
    saved.step()
    damaged = dict(saved.state_dict(), **{key: value})
    schedule = _schedule(kind)
    before = dict(schedule.__dict__)
    with pytest.raises(error, match=key):
        schedule.load_state_dict(damaged)
    assert schedule.__dict__ == before
    schedule.load_state_dict(saved.state_dict())  # the whole state still loads and steps
    schedule.step()
    assert schedule.last_epoch == 2
