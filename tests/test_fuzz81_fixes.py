"""Round 81's defects in saving, loading and module state, each against torch.

- views of one storage in a file (``torch.save`` of ``x[1:, ::2]`` beside ``x.t()``, or of a
  lone non-contiguous view) loaded as contiguous copies: a write into one did not show in the
  other, and strides and storage offsets were not torch's;
- a damaged, truncated or foreign file was refused with an ``InvalidArgumentError`` (a
  ``ValueError``) only, where torch raises a ``RuntimeError`` ("PytorchStreamReader failed
  reading zip archive") or a ``pickle.UnpicklingError``: a script's ``except RuntimeError:``
  around a checkpoint's load let ours through;
- ``rg.save`` of a 0-d ``bfloat16`` tensor (retrograd's or torch's) wrote a tensor of shape
  ``[1]`` (and, once that was mended, two of them one storage: NumPy scalars' memory);
- ``load_state_dict`` under ``strict`` with a load post hook and a shape mismatch named the
  size only, where torch's one message names the unexpected and missing keys beside it.
"""

from __future__ import annotations

import io
import pickle
import re

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _round_trip(saver, loader, obj):
    buffer = io.BytesIO()
    saver.save(obj, buffer)
    buffer.seek(0)
    return loader.load(buffer)


def _views(lib):
    x = lib.arange(12.0).reshape(3, 4)
    return {"a": x[1:, ::2], "b": x.t(), "c": x[2]}


@pytest.mark.parametrize("writer", ["torch", "retrograd"])
def test_loaded_views_of_one_storage_share_it_with_torchs_layout(writer):
    saver = torch if writer == "torch" else rg
    expected = _round_trip(torch, torch, _views(torch))
    got = _round_trip(saver, rg, _views(saver))
    for key in "abc":
        assert tuple(got[key].stride()) == tuple(expected[key].stride()), key
        assert got[key].storage_offset() == expected[key].storage_offset(), key
        assert got[key].is_contiguous() == expected[key].is_contiguous(), key
    with torch.no_grad():
        expected["a"][0, 1] = 100.0  # (x[1, 2]: b[2, 1] and nothing of c)
        expected["c"].fill_(-1.0)
    with rg.no_grad():
        got["a"][0, 1] = 100.0
        got["c"].fill_(-1.0)
    for key in "abc":
        np.testing.assert_array_equal(got[key].numpy(), expected[key].numpy(), err_msg=key)
    assert expected["b"][2, 1].item() == 100.0  # (torch's, the behaviour asserted)


def test_a_loaded_view_that_requires_grad_is_a_leaf_sharing_its_storage():
    x = torch.arange(6.0, dtype=torch.float64)
    saved = {"w": x[:4].requires_grad_(), "v": x[2:]}
    got = _round_trip(torch, rg, saved)
    assert got["w"].requires_grad and got["w"].is_leaf and not got["v"].requires_grad
    with rg.no_grad():
        got["v"].zero_()
    np.testing.assert_array_equal(got["w"].detach().numpy(), [0.0, 1.0, 0.0, 0.0])
    (grad,) = rg.autograd.grad((got["w"] * 3).sum(), [got["w"]])
    np.testing.assert_array_equal(grad.numpy(), np.full(4, 3.0))


def _damaged_files() -> dict[str, bytes]:
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(100.0)}, buffer)
    data = buffer.getvalue()
    return {
        "truncated": data[: len(data) // 2],
        "no end": data[:-1],
        "a pickle": pickle.dumps({"w": [1.0]}),
    }


@pytest.mark.parametrize("name", ["truncated", "no end", "a pickle"])
def test_a_damaged_file_is_refused_as_the_runtime_error_torch_raises(tmp_path, name):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(_damaged_files()[name])
    with pytest.raises(RuntimeError):
        torch.load(path, weights_only=False)
    with pytest.raises(rg.InvalidArgumentError, match=re.escape(str(path))) as refused:
        rg.load(path, weights_only=False)
    assert isinstance(refused.value, RuntimeError)
    assert isinstance(refused.value, pickle.UnpicklingError)
    assert isinstance(refused.value, rg.serialization.UnreadableFileError)
    rg.save({"w": rg.ones(2)}, path)  # (and the path takes a whole file after)
    np.testing.assert_array_equal(rg.load(path)["w"].numpy(), np.ones(2))


def test_a_bare_pickle_in_memory_is_an_unpickling_error_as_torchs_weights_only_load():
    data = _damaged_files()["a pickle"]
    with pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(data))
    with pytest.raises(pickle.UnpicklingError, match="file object"):
        rg.load(io.BytesIO(data))


def _message(error: Exception) -> str:
    text = str(error).replace("torch.", "").replace("retrograd.", "")
    return re.sub(r"\s+", " ", text).strip()


def test_a_size_mismatch_beside_keys_a_post_hook_leaves_is_reported_as_torchs():
    def attempt(lib):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Linear(2, 1))
        model.register_load_state_dict_post_hook(lambda module, keys: None)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        state["1.weight"] = lib.zeros(5)
        state["stray"] = lib.zeros(1)
        del state["0.bias"]
        with pytest.raises(RuntimeError) as refused:
            model.load_state_dict(state)
        return refused.value

    expected, got = attempt(torch), attempt(rg)
    assert isinstance(got, rg.RetrogradError)
    assert "Unexpected key(s)" in str(expected) and "Missing key(s)" in str(expected)
    assert _message(expected) in _message(got)


def test_0d_bfloat16_tensors_are_saved_0d_each_with_its_value():
    try:
        ours = [rg.tensor(2.5, dtype=rg.bfloat16), rg.tensor(-1.0, dtype=rg.bfloat16)]
    except rg.DTypeError:  # (the NumPy backend has no bfloat16: API.md section 9)
        ours = None
    theirs = [torch.tensor(2.5, dtype=torch.bfloat16), torch.tensor(-1.0, dtype=torch.bfloat16)]
    for values in (ours, theirs):
        if values is None:
            continue
        buffer = io.BytesIO()
        rg.save({"t": values[0], "u": values[1]}, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)
        for key, want in (("t", 2.5), ("u", -1.0)):
            assert loaded[key].shape == () and loaded[key].dtype == torch.bfloat16, key
            assert loaded[key].item() == want, key
