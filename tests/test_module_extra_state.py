"""torch's ``Module`` protocol beyond parameters and buffers, against torch 2.13: a module's
``get_extra_state``/``set_extra_state`` (a vocabulary, a counter saved as
``<prefix>_extra_state``, a missing one refused by a strict load), a ``_save_to_state_dict``
override that adds entries (it was never called: the state dict was filled without it),
``_get_name`` and ``set_submodule``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _classes(lib):
    class Vocab(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.nn.Linear(2, 2)
            self.words = ["a", "b"]

        def get_extra_state(self):
            return {"words": list(self.words)}

        def set_extra_state(self, state):
            self.words = list(state["words"])

    class Outer(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.v = Vocab()
            self.count = 3

        def _save_to_state_dict(self, destination, prefix, keep_vars):
            super()._save_to_state_dict(destination, prefix, keep_vars)
            destination[prefix + "count"] = self.count

    return Vocab, Outer


def test_extra_state_and_saving_overrides_as_torchs():
    states = {}
    for lib in (torch, rg):
        _, outer = _classes(lib)
        model = outer()
        states[lib.__name__] = model.state_dict()
    theirs, ours = states["torch"], states["retrograd"]
    assert list(ours) == list(theirs)
    assert ours["v._extra_state"] == theirs["v._extra_state"] == {"words": ["a", "b"]}
    assert ours["count"] == theirs["count"] == 3
    _, outer = _classes(rg)
    fresh = outer()
    fresh.v.words = []
    loaded = {k: v for k, v in ours.items() if k != "count"}
    loaded["v._extra_state"] = {"words": ["x", "y", "z"]}
    result = fresh.load_state_dict(loaded, strict=False)
    assert fresh.v.words == ["x", "y", "z"] and result.missing_keys == []
    assert result.unexpected_keys == []
    np.testing.assert_array_equal(np.asarray(fresh.v.fc.weight), np.asarray(ours["v.fc.weight"]))


def test_a_strict_load_without_the_extra_state_is_refused_as_torchs():
    for lib, error in ((torch, RuntimeError), (rg, rg.errors.KeyMismatchError)):
        _, outer = _classes(lib)
        model = outer()
        state = {k: v for k, v in model.state_dict().items() if k.startswith("v.fc")}
        with pytest.raises(error, match=r"v\._extra_state"):
            model.load_state_dict(state)
        assert model.v.words == ["a", "b"]  # nothing taken from a refused load


def test_a_module_without_extra_state_has_no_entry_and_refuses_a_call():
    assert "_extra_state" not in "".join(rg.nn.Linear(2, 2).state_dict())
    with pytest.raises(NotImplementedError):
        rg.nn.Linear(2, 2).get_extra_state()


def test_extra_state_survives_save_and_load(tmp_path):
    _, outer = _classes(rg)
    model = outer()
    model.v.words = ["kept"]
    rg.save(model.state_dict(), tmp_path / "state.pt")
    other = outer()
    other.load_state_dict({k: v for k, v in rg.load(tmp_path / "state.pt").items() if k != "count"})
    assert other.v.words == ["kept"]


def test_get_name_and_set_submodule_as_torchs():
    for lib in (torch, rg):
        model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Sequential(lib.nn.ReLU()))
        assert model._get_name() == "Sequential"
        model.set_submodule("1.0", lib.nn.Tanh())
        assert type(model[1][0]).__name__ == "Tanh"
        with pytest.raises(AttributeError):
            model.set_submodule("1.5", lib.nn.Tanh(), strict=True)
        with pytest.raises(AttributeError):
            model.set_submodule("7.0", lib.nn.Tanh())
    assert repr(model) == repr(
        torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Tanh()))
    )
