"""Regressions of round 60's random ``nn.Module`` / ``nn.utils`` programs
(tests/test_random_modules_60.py), each against torch 2.13's behaviour on a twin module.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _linear(lib, rows, cols, seed):
    """A ``Linear`` with the same weights in both libraries."""
    rng = np.random.default_rng(seed)
    layer = lib.nn.Linear(cols, rows)
    layer.load_state_dict(
        {
            "weight": lib.tensor(rng.standard_normal((rows, cols)).astype(np.float32)),
            "bias": lib.tensor(rng.standard_normal(rows).astype(np.float32)),
        }
    )
    return layer


def _values(t) -> np.ndarray:
    return np.asarray(t.detach().numpy() if isinstance(t, torch.Tensor) else t.detach())


# -- _load_from_state_dict sees torch's per-module view of the state -----------------------------
def _renaming_tree(lib, log):
    class Renaming(lib.nn.Module):
        """An old checkpoint's ``old`` key read as ``l.weight``, as real upgrade code does."""

        def __init__(self, seed):
            super().__init__()
            self.l = _linear(lib, 2, 2, seed)

        def _load_from_state_dict(self, state, prefix, metadata, strict, *lists):
            log.append((prefix, sorted(state), strict))
            if prefix + "old" in state:
                state[prefix + "l.weight"] = state.pop(prefix + "old")
            super()._load_from_state_dict(state, prefix, metadata, strict, *lists)

    return lib.nn.Sequential(Renaming(0), Renaming(1))


@pytest.mark.parametrize("strict", [True, False])
def test_load_from_state_dict_sees_its_own_keys_and_strict_true(strict):
    """Each module's step was handed the whole state (every other module's keys too) and the
    caller's ``strict``; torch hands it the keys under its prefix and always ``True``."""
    results = {}
    for lib in (torch, rg):
        log: list = []
        root = _renaming_tree(lib, log)
        state = {
            "0.old": lib.tensor(np.full((2, 2), 3.0, np.float32)),
            "0.l.bias": lib.tensor(np.ones(2, np.float32)),
            "1.l.weight": lib.tensor(np.full((2, 2), 5.0, np.float32)),
            "1.l.bias": lib.tensor(np.ones(2, np.float32)),
        }
        keys = root.load_state_dict(state, strict=strict)
        results[lib.__name__] = (log, repr(keys), _values(root[0].l.weight).tolist())
    assert results["retrograd"] == results["torch"]
    assert results["torch"][0][0] == ("0.", ["0.l.bias", "0.old"], True)


def test_a_key_a_child_step_drops_is_not_loaded_nor_unexpected():
    """A step that pops its own key: torch's parent (whose view still holds it) has already
    passed, so the key is neither loaded nor reported."""
    results = {}
    for lib in (torch, rg):

        class Dropping(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.l = _linear(lib, 2, 2, 0)

            def _load_from_state_dict(self, state, prefix, *rest):
                state.pop(prefix + "junk", None)
                super()._load_from_state_dict(state, prefix, *rest)

        root = lib.nn.Sequential(Dropping())
        state = dict(root.state_dict())
        state["0.junk"] = lib.tensor(np.zeros(1, np.float32))
        results[lib.__name__] = repr(root.load_state_dict(state, strict=True))
    assert results["retrograd"] == results["torch"] == "<All keys matched successfully>"


# -- ParameterList slicing, names that are not str, update's pair lengths --------------------------
def test_parameter_list_slices_into_a_new_list():
    values = [np.arange(n, dtype=np.float32) + n for n in (1, 2, 3, 4)]
    got = {}
    for lib in (torch, rg):
        plist = lib.nn.ParameterList([lib.nn.Parameter(lib.tensor(v)) for v in values])
        for index in (slice(1, None), slice(None, None, -2), slice(-3, -1), slice(5, 9)):
            part = plist[index]
            assert type(part).__name__ == "ParameterList"
            assert all(a is b for a, b in zip(part, list(plist)[index]))
            got.setdefault(lib.__name__, []).append(
                ([n for n, _ in part.named_parameters()], [_values(p).tolist() for p in part])
            )
    assert got["retrograd"] == got["torch"]


@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.nn.Linear(1, 1).register_parameter(3, None),
        lambda lib: lib.nn.Linear(1, 1).register_buffer(3, None),
        lambda lib: lib.nn.Linear(1, 1).add_module(3, None),
        lambda lib: lib.nn.ModuleDict().__setitem__(3, lib.nn.ReLU()),
        lambda lib: lib.nn.ParameterList([lib.nn.Parameter(lib.zeros(1))])["0"],
    ],
)
def test_a_name_or_index_of_the_wrong_type_is_a_type_error(call):
    with pytest.raises(TypeError):
        call(torch)
    with pytest.raises(TypeError) as caught:
        call(rg)
    assert isinstance(caught.value, rg.RetrogradError)


@pytest.mark.parametrize("container", ["ModuleDict", "ParameterDict"])
def test_update_with_a_pair_of_the_wrong_length_is_a_value_error(container):
    for lib in (torch, rg):
        with pytest.raises(ValueError):
            getattr(lib.nn, container)().update([("a",)])
        with pytest.raises(TypeError):
            getattr(lib.nn, container)().update([3])
