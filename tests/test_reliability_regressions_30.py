"""One test per defect found by round 30 of the reliability sweep
(``tests/test_reliability_sweep_30.py``: ``rg.load`` of the files ``torch.save`` writes, with
torch 2.13's ``torch.load`` as the reference).
"""

from __future__ import annotations

import argparse
import io
import zipfile

import numpy as np
import pytest
import torch

import retrograd as rg


def _saved(obj, zip_format: bool = True) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer, _use_new_zipfile_serialization=zip_format)
    buffer.seek(0)
    return buffer


def _with_pickle(obj, pickle_bytes: bytes) -> io.BytesIO:
    """torch's zip file of ``obj`` with its ``data.pkl`` replaced (a crafted file)."""
    with zipfile.ZipFile(_saved(obj)) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    pickled = next(name for name in entries if name.endswith("data.pkl"))
    entries[pickled] = pickle_bytes
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name, content in entries.items():
            target.writestr(name, content)
    out.seek(0)
    return out


@pytest.mark.parametrize("kind", ["NAdam", "ASGD"])
def test_an_optimizer_state_with_0d_scalars_loads_from_torch_s_file(kind):
    """NAdam's mu_product and ASGD's eta and mu are 0-d tensors in torch's state; read from
    torch's file they are 0-d retrograd tensors, which load_state_dict refused ("state
    0/mu_product has shape [], its parameter [3]"). The next step now gives torch's."""
    start = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    theirs = torch.nn.Parameter(torch.tensor(start))
    optimizer = getattr(torch.optim, kind)([theirs], lr=0.01)
    for _ in range(2):
        optimizer.zero_grad()
        theirs.pow(3).sum().backward()
        optimizer.step()
    file = _saved({"w": theirs.detach(), "opt": optimizer.state_dict()})
    optimizer.zero_grad()
    theirs.pow(3).sum().backward()
    optimizer.step()
    checkpoint = rg.load(file)
    ours = rg.nn.Parameter(checkpoint["w"])
    ours_optimizer = getattr(rg.optim, kind)([ours], lr=0.01)
    ours_optimizer.load_state_dict(checkpoint["opt"])
    ours_optimizer.step(ours.pow(3).sum().backward())
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5)


def test_a_dtype_retrograd_lacks_is_a_dtype_error_naming_it():
    """torch.uint16 (a dtype torch's weights_only load allows) was refused as "a class of
    torch's own ... save its state_dict() and load that", which it is not."""
    with pytest.raises(rg.DTypeError, match=r"torch\.uint16, a dtype retrograd has no tensors"):
        rg.load(_saved({"w": torch.ones(2, dtype=torch.uint16)}))


def test_the_unsafe_globals_of_a_file_of_torch_s_allowed_dtypes_are_none_as_in_torch():
    """get_unsafe_globals_in_checkpoint listed torch.uint16 and torch.per_tensor_affine,
    which torch's default allow-list holds (torch lists nothing)."""
    data = _saved([torch.uint16, torch.float8_e5m2, torch.per_tensor_affine]).getvalue()
    expected = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
    assert rg.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data)) == expected == []


def test_a_sparse_tensor_is_refused_without_advising_weights_only_false():
    """Under weights_only=True the refusal of a sparse tensor advised weights_only=False,
    which refuses it too."""
    with pytest.raises(rg.InvalidArgumentError, match="sparse") as refused:
        rg.load(_saved({"w": torch.ones(2, 2).to_sparse()}))
    assert "weights_only=False" not in str(refused.value)


def test_a_bare_storage_is_refused_not_handed_out_as_the_reader_s_object():
    """torch.save(t.untyped_storage()) loaded as retrograd.torch_files._Storage, an internal
    object nothing can use."""
    with pytest.raises(rg.InvalidArgumentError, match="storage"):
        rg.load(_saved({"s": torch.arange(3.0).untyped_storage()}))


def test_safe_globals_takes_torch_s_object_and_name_pairs():
    """torch's add_safe_globals takes (object, "module.name"); retrograd's called it a
    damaged file ("'tuple' object has no attribute '__module__'")."""
    file = _saved({"args": argparse.Namespace(lr=0.5)})
    with rg.serialization.safe_globals([(argparse.Namespace, "argparse.Namespace")]):
        assert rg.load(file)["args"] == argparse.Namespace(lr=0.5)


def test_a_crafted_bytearray_of_a_huge_count_is_refused_without_allocating_it():
    """bytearray(2**31 - 1) in a crafted pickle allocated 2 GB (torch's pickler writes a
    bytearray of its bytes, never of a count)."""
    crafted = _with_pickle([], b"\x80\x02c__builtin__\nbytearray\nJ\xff\xff\xff\x7f\x85R.")
    with pytest.raises(rg.InvalidArgumentError, match="bytearray"):
        rg.load(crafted)


@pytest.mark.parametrize(
    "pickle_bytes",
    [
        b"\x80\x02ctorch\ndevice\nX\x03\x00\x00\x00foo\x85R.",  # torch.device("foo")
        b"\x80\x02ctorch._utils\n_rebuild_parameter\nK\x01\x88N\x87R.",  # a Parameter of 1
    ],
)
def test_a_crafted_device_or_parameter_is_an_error_naming_the_file(pickle_bytes):
    """The errors of torch.device("foo") and of a Parameter of an int came out as they were
    (a bare "device: unknown device type", a DTypeError about requires_grad), naming no
    file."""
    with pytest.raises(rg.InvalidArgumentError, match="the file object is a torch file"):
        rg.load(_with_pickle([], pickle_bytes))


def test_a_damaged_pickle_is_damage_not_a_class_not_allowed():
    """A pickle that refers to a memo entry it never made was reported as naming "a class
    not allowed", advising weights_only=False."""
    with pytest.raises(rg.InvalidArgumentError, match="damaged") as refused:
        rg.load(_with_pickle([], b"\x80\x02h\x05."))
    assert "weights_only=False" not in str(refused.value)


def test_a_torch_zip_without_its_pickle_is_a_damaged_torch_file():
    """Without data.pkl, torch's zip was read as a NumPy archive and refused as "torch's own
    format, whose pickles are never read here", though they are."""
    with zipfile.ZipFile(_saved({"w": torch.ones(2)})) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name, content in entries.items():
            if not name.endswith("data.pkl"):
                target.writestr(name, content)
    out.seek(0)
    with pytest.raises(rg.InvalidArgumentError, match=r"torch file.*data\.pkl"):
        rg.load(out)


def test_a_map_location_dict_moves_only_the_storages_saved_from_its_keys():
    """torch maps each storage by the location it was saved from: {"cuda:1": "cuda:0"}
    leaves a CPU file's tensors on the CPU. Retrograd moved them all to cuda:0 (an error on a
    machine without CUDA)."""
    file = _saved({"w": torch.arange(3.0)}).getvalue()
    mapping = {"cuda:1": "cuda:0"}
    expected = torch.load(io.BytesIO(file), map_location=mapping)["w"]
    got = rg.load(io.BytesIO(file), map_location=mapping)["w"]
    assert got.device == rg.device("cpu") and expected.device == torch.device("cpu")
    assert got.tolist() == expected.tolist()


def test_a_map_location_function_is_given_the_saved_location():
    """torch calls map_location(storage, location) with the location the storage was saved
    from ("cuda:0"); retrograd's was always given "cpu"."""
    with zipfile.ZipFile(_saved({"w": torch.arange(3.0)})) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    pickled = next(name for name in entries if name.endswith("data.pkl"))
    entries[pickled] = entries[pickled].replace(
        b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"
    )  # saved from a GPU, which this machine need not have
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name, content in entries.items():
            target.writestr(name, content)
    data = out.getvalue()
    theirs, ours = [], []
    torch.load(io.BytesIO(data), map_location=lambda s, where: theirs.append(where) or s)
    loaded = rg.load(io.BytesIO(data), map_location=lambda s, where: ours.append(where) or s)
    assert ours == theirs == ["cuda:0"]
    assert loaded["w"].tolist() == [0.0, 1.0, 2.0]


def test_clear_safe_globals_is_torch_s():
    """torch.serialization.clear_safe_globals() (ported scripts call it between loads) was
    missing: an AttributeError."""
    ours, theirs = rg.serialization.get_safe_globals(), torch.serialization.get_safe_globals()
    try:
        rg.serialization.add_safe_globals([argparse.Namespace])
        rg.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals([argparse.Namespace])
        torch.serialization.clear_safe_globals()
        assert rg.serialization.get_safe_globals() == []
        assert torch.serialization.get_safe_globals() == []
        with pytest.raises(rg.InvalidArgumentError, match=r"argparse\.Namespace"):
            rg.load(_saved({"args": argparse.Namespace(lr=0.5)}))
    finally:  # (the allow-lists are the process's)
        rg.serialization.add_safe_globals(ours)
        torch.serialization.add_safe_globals(theirs)


def test_an_expanded_view_of_a_crafted_size_is_refused_not_copied():
    """A tensor of size (2**28,) and stride (0,) over a one-element storage (torch's
    expanded view, which costs torch nothing) was copied element by element: a file of a few
    hundred bytes asked for 256 MB here, and a larger size for all the memory there is."""
    with zipfile.ZipFile(_saved({"w": torch.ones(1, dtype=torch.bool).expand(3)})) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    pickled = next(name for name in entries if name.endswith("data.pkl"))
    # size (3,), memoized, then stride (0,): K\x03\x85q\x08 -> size (2**28,): J<2**28>\x85q\x08
    assert entries[pickled].count(b"K\x03\x85q") == 1
    entries[pickled] = entries[pickled].replace(
        b"K\x03\x85q", b"J" + (2**28).to_bytes(4, "little") + b"\x85q"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name, content in entries.items():
            target.writestr(name, content)
    assert torch.load(io.BytesIO(out.getvalue()))["w"].shape == (2**28,)
    with pytest.raises(rg.InvalidArgumentError, match="repeating a storage"):
        rg.load(io.BytesIO(out.getvalue()))
