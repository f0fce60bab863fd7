"""Regressions of the defects the training-loop ports (``tests/test_real_ports_211.py`` ..
``_213.py``) exposed, each checked against torch's behaviour:

- ``rg.save`` refused NumPy arrays of a dtype no torch storage holds (``np.random.get_state()``'s
  uint32 key, which every checkpoint of RNG states holds; arrays of strings): they are pickled
  as NumPy pickles them, as ``torch.save`` does;
- ``load_state_dict(assign=True)`` cast the state to the module's dtypes; torch keeps the
  state's;
- ``rg.nn.modules.utils`` was not an attribute of ``rg.nn.modules`` (torch's is);
- ``rg.compile(module)`` returned the module itself; torch's returns an ``OptimizedModule``
  whose state dict's keys start with ``_orig_mod.`` and which has ``_orig_mod``.
"""

from __future__ import annotations

import copy
import io
import random

import numpy as np
import pytest
import torch

import retrograd as rg

NUMPY_CLASSES = [np._core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def _saved(obj, lib=rg) -> io.BytesIO:
    buffer = io.BytesIO()
    lib.save(obj, buffer)
    buffer.seek(0)
    return buffer


# -- rg.save of NumPy arrays no torch storage holds ------------------------------------------------
def test_numpy_rng_state_saves_and_loads_as_torch_saves_it():
    np.random.seed(3)
    state = np.random.get_state()
    rng = {"python": random.getstate(), "numpy": state, "cpu": rg.random.get_rng_state()}
    data = _saved(rng).getvalue()
    for lib in (rg, torch):
        loaded = lib.load(io.BytesIO(data), weights_only=False)
        assert loaded["numpy"][0] == "MT19937"
        assert loaded["numpy"][1].dtype == np.uint32
        np.testing.assert_array_equal(loaded["numpy"][1], state[1])
        assert loaded["numpy"][2:] == state[2:]
        assert loaded["python"] == random.getstate()
    # restoring it restores NumPy's stream
    expected = np.random.uniform(size=3)
    np.random.set_state(rg.load(io.BytesIO(data), weights_only=False)["numpy"])
    np.testing.assert_array_equal(np.random.uniform(size=3), expected)
    # torch's own file of the same state loads in retrograd too
    theirs = rg.load(_saved({"numpy": state}, torch), weights_only=False)
    np.testing.assert_array_equal(theirs["numpy"][1], state[1])


def test_pickled_numpy_arrays_need_weights_only_false_or_allowed_classes_as_in_torch():
    data = _saved({"numpy": np.random.get_state()}).getvalue()
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(io.BytesIO(data))
    with pytest.raises(rg.InvalidArgumentError, match="_reconstruct is not allowed"):
        rg.load(io.BytesIO(data))
    with rg.serialization.safe_globals(NUMPY_CLASSES):
        assert rg.load(io.BytesIO(data))["numpy"][1].dtype == np.uint32
    with torch.serialization.safe_globals(NUMPY_CLASSES):
        assert torch.load(io.BytesIO(data))["numpy"][1].dtype == np.uint32


def test_arrays_of_strings_and_unsigned_ints_round_trip_and_numbers_stay_tensors():
    saved = {
        "names": np.array(["cat", "dog"]),
        "u16": np.arange(4, dtype=np.uint16),
        "u64": np.array([2**63 + 5], dtype=np.uint64),
        "f32": np.ones(2, dtype=np.float32),
    }
    data = _saved(saved).getvalue()
    for lib in (rg, torch):
        loaded = lib.load(io.BytesIO(data), weights_only=False)
        for key in ("names", "u16", "u64"):
            assert loaded[key].dtype == saved[key].dtype
            np.testing.assert_array_equal(loaded[key], saved[key])
    # an array torch has a storage for is still saved as a tensor (torch's default load reads it)
    assert torch.load(io.BytesIO(_saved({"f32": saved["f32"]}).getvalue()))["f32"].tolist() == [
        1.0,
        1.0,
    ]


# -- load_state_dict(assign=True) ----------------------------------------------------------------
def test_load_state_dict_assign_keeps_the_states_dtype_as_torch():
    results = {}
    for lib in (torch, rg):
        model = lib.nn.Linear(3, 2)
        weight = model.weight
        state = {"weight": lib.ones(2, 3, dtype=lib.float64), "bias": lib.zeros(2).double()}
        model.load_state_dict(state, assign=True)
        dtypes = (model.weight.dtype, model.bias.dtype)
        results[lib] = (*(str(d).rpartition(".")[2] for d in dtypes), model.weight.requires_grad)
        assert isinstance(model.weight, lib.nn.Parameter)
        if lib is rg:  # the same Parameter object (retrograd's parameters are mutable slots)
            assert model.weight is weight
            assert model(rg.ones(1, 3, dtype=rg.float64)).dtype == rg.float64
        plain = lib.nn.Linear(3, 2)
        plain.load_state_dict(state)  # without assign: cast to the module's dtype
        assert str(plain.weight.dtype).endswith("float32")
    assert results[rg] == results[torch] == ("float64", "float64", True)


def test_load_state_dict_assign_still_checks_shapes_and_keys():
    model = rg.nn.Linear(3, 2)
    before = model.weight.numpy().copy()
    with pytest.raises(rg.ShapeError, match="'weight' has shape \\[2, 3\\]"):
        model.load_state_dict({"weight": np.ones((3, 3)), "bias": np.zeros(2)}, assign=True)
    with pytest.raises(rg.RetrogradError, match="missing"):
        model.load_state_dict({"weight": np.ones((2, 3))}, assign=True)
    np.testing.assert_array_equal(model.weight.numpy(), before)
    assert model.weight.dtype == rg.float32


# -- nn.modules.utils -------------------------------------------------------------------------
def test_nn_modules_utils_is_an_attribute_as_torchs():
    for lib in (torch, rg):
        state = {"module.a.weight": 1, "module.b": 2, "other": 3}
        lib.nn.modules.utils.consume_prefix_in_state_dict_if_present(state, "module.")
        assert state == {"a.weight": 1, "b": 2, "other": 3}


# -- rg.compile's OptimizedModule --------------------------------------------------------------
def _net(lib):
    return lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))


def test_compiled_module_has_torchs_keys_names_and_orig_mod():
    theirs, ours = torch.compile(_net(torch)), rg.compile(_net(rg))
    assert type(ours).__name__ == type(theirs).__name__ == "OptimizedModule"
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert isinstance(ours._orig_mod, rg.nn.Sequential)
    assert isinstance(ours, rg._dynamo.eval_frame.OptimizedModule)
    # a torch checkpoint of a compiled model loads into the compiled port
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    theirs.eval(), ours.eval()
    with torch.no_grad():
        expected = theirs(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours(rg.tensor(x)).numpy(), expected, rtol=1e-6, atol=1e-6)


def test_compiled_module_delegates_attributes_and_training_as_torch():
    for lib in (torch, rg):
        inner = _net(lib)
        compiled = lib.compile(inner)
        compiled.note = "set through the wrapper"
        assert inner.note == "set through the wrapper" and compiled.note == inner.note
        del compiled.note
        assert not hasattr(inner, "note")
        compiled.eval()
        assert not inner.training and not compiled.training and not inner[1].training
        inner.train()
        assert compiled.training
        assert len(compiled) == 2
        with pytest.raises(TypeError, match="not subscriptable"):
            compiled[0]
        assert lib.compile(inner, disable=True) is inner


def test_compiled_module_trains_copies_and_saves():
    compiled = rg.compile(_net(rg))
    optimizer = rg.optim.SGD(compiled.parameters(), lr=0.1)
    before = compiled._orig_mod[0].weight.numpy().copy()
    grads = compiled(rg.ones(4, 2) * rg.arange(4).reshape(4, 1)).pow(2).sum().backward()
    optimizer.step(grads)
    assert not np.array_equal(compiled._orig_mod[0].weight.numpy(), before)
    twin = copy.deepcopy(compiled)
    assert type(twin).__name__ == "OptimizedModule" and twin._orig_mod is not compiled._orig_mod
    assert list(twin.state_dict()) == list(compiled.state_dict())
    loaded = rg.load(_saved(compiled), weights_only=False)
    assert type(loaded).__name__ == "OptimizedModule"
    np.testing.assert_array_equal(
        loaded._orig_mod[0].weight.numpy(), compiled._orig_mod[0].weight.numpy()
    )
    # torch reads the state dict rg saved from a compiled model under its own keys
    state = torch.load(io.BytesIO(_saved(compiled.state_dict()).getvalue()))
    assert list(state) == list(torch.compile(_net(torch)).state_dict())
