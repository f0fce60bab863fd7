"""Focused regressions for the defects real ports 34-39 found (each compared with torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

X = np.random.default_rng(6).standard_normal((3, 4))
INDEX = np.array([[0, 1, 2, 0], [2, 1, 0, 1]])


def _agree(call):
    expected = call(torch, torch.tensor(X), torch.tensor(INDEX))
    got = call(rg, rg.tensor(X), rg.tensor(INDEX))
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x, i: lib.gather(x, dim=0, index=i),  # MAE's random_masking
        lambda lib, x, i: x.gather(dim=0, index=i),
        lambda lib, x, i: x.gather(0, index=i),
        lambda lib, x, i: x.gather(0, i),
    ],
)
def test_gather_takes_torchs_index_keyword(call):
    _agree(call)


def test_gather_keeps_burns_indices_keyword_and_refuses_two_indices():
    x, i = rg.tensor(X), rg.tensor(INDEX)
    np.testing.assert_array_equal(x.gather(0, indices=i).numpy(), x.gather(0, i).numpy())
    with pytest.raises(rg.errors.InvalidArgumentError, match="gather: give the index once"):
        x.gather(0, i, indices=i)
    with pytest.raises(rg.errors.InvalidArgumentError, match="gather: give the index once"):
        x.gather(0)


def test_torch_split_takes_split_size_or_sections():
    for sections in ([1, 3], 2):
        for part in range(2):
            _agree(
                lambda lib, x, i: lib.split(x, split_size_or_sections=sections, dim=1)[part]  # noqa: B023
            )
    _agree(lambda lib, x, i: lib.split(x, 2, 1)[1])


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_take_other_as_a_keyword(op):
    _agree(lambda lib, x, i: getattr(lib, op)(x, other=-x))
    _agree(lambda lib, x, i: getattr(x, op)(other=x.flip(0)))
    with pytest.raises(rg.errors.InvalidArgumentError, match=f"{op}: give dim or other"):
        getattr(rg.tensor(X), op)(1, other=rg.tensor(X))


def test_a_saved_state_dict_loads_back_as_tensors(tmp_path):
    """BYOL's README saves ``torch.save(resnet.state_dict(), path)``; torch's ``load`` gives
    tensors back (``.numpy()``, ``.float()``, ``.shape`` as a tensor's): so does ``rg.load``,
    with each value's dtype."""
    for lib in (torch, rg):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))
        path = tmp_path / f"{lib.__name__}.pt"
        lib.save(model.state_dict(), path)
        loaded = lib.load(path)
        assert all(isinstance(v, lib.Tensor) for v in loaded.values()), loaded
        assert [str(v.dtype).split(".")[-1] for v in loaded.values()] == [
            "float32",
            "float32",
            "float32",
            "float32",
            "float32",
            "float32",
            "int64",
        ]
        expected = {k: np.array(v) for k, v in model.state_dict().items()}
        assert {k: v.numpy().tolist() for k, v in loaded.items()} == {
            k: v.tolist() for k, v in expected.items()
        }
        model.load_state_dict(loaded)
