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


# -- _foreach_ ops over state-dict values; StateValue.lerp_ ----------------------------------------
def test_foreach_lerp_over_state_dict_values_updates_the_module_as_torch():
    # timm's ModelEmaV3.apply_update_: torch._foreach_lerp_ of the floating state-dict values
    rng = np.random.default_rng(2)
    weights = {"weight": rng.standard_normal((3, 4)), "bias": rng.standard_normal(3)}
    start = {"weight": rng.standard_normal((3, 4)), "bias": rng.standard_normal(3)}
    results = []
    for lib in (torch, rg):
        ema, model = lib.nn.Linear(4, 3), lib.nn.Linear(4, 3)
        model.load_state_dict({k: lib.tensor(v, dtype=lib.float32) for k, v in weights.items()})
        ema.load_state_dict({k: lib.tensor(v, dtype=lib.float32) for k, v in start.items()})
        before = {k: v.detach().numpy().copy() for k, v in ema.state_dict().items()}
        with lib.no_grad():
            values = [v for v in ema.state_dict().values() if v.is_floating_point()]
            written = lib._foreach_lerp_(values, list(model.state_dict().values()), weight=0.3)
            lib._foreach_mul_(values, scalar=0.5)
            lib._foreach_add_(values, list(model.state_dict().values()), alpha=0.5)
        assert written is None or written is values  # (torch returns None, rg the list)
        results.append({k: v.detach().numpy().copy() for k, v in ema.state_dict().items()})
        assert not np.array_equal(results[-1]["weight"], before["weight"])
    for name in weights:  # each op rounds as torch's: the same bits
        np.testing.assert_array_equal(results[1][name], results[0][name])


def test_state_value_lerp_rounds_as_torchs_lerp_on_both_sides_of_one_half():
    rng = np.random.default_rng(3)
    start = rng.standard_normal((1, 257)).astype(np.float32)
    end = rng.standard_normal((1, 257)).astype(np.float32)
    for weight in (0.1, 0.3, 0.5, 0.9, 1.0):
        expected = torch.tensor(start).lerp_(torch.tensor(end), weight).numpy()
        layer = rg.nn.Linear(257, 1, bias=False)
        layer.load_state_dict({"weight": start})
        layer.state_dict()["weight"].lerp_(end, weight)
        np.testing.assert_array_equal(layer.weight.numpy(), expected)


def test_foreach_binary_takes_torchs_operand_keywords_and_refuses_none_or_two():
    assert rg._foreach_mul([rg.ones(2)], scalar=3.0)[0].tolist() == [3.0, 3.0]
    assert rg._foreach_mul([rg.ones(2), rg.ones(1)], scalars=[2.0, 4.0])[1].tolist() == [4.0]
    assert rg._foreach_add([rg.ones(2)], other=[rg.ones(2)], alpha=2)[0].tolist() == [3.0, 3.0]
    for bad in ({}, {"other": 1.0, "scalar": 2.0}):
        with pytest.raises(rg.InvalidArgumentError, match="_foreach_mul: expected one of"):
            rg._foreach_mul([rg.ones(2)], **bad)
    with pytest.raises(rg.DTypeError, match="must hold tensors only, got a list"):
        rg._foreach_lerp_([[1.0]], [rg.ones(1)], 0.5)


# -- vector_to_parameters with a short vector ----------------------------------------------------
def test_vector_to_parameters_refuses_a_short_vector_before_changing_anything():
    first, second = rg.nn.Parameter(rg.zeros(2)), rg.nn.Parameter(rg.zeros(2, 2))
    with pytest.raises(
        rg.InvalidArgumentError, match="vector has 5 elements, the 2 parameters need 6"
    ):
        rg.nn.utils.vector_to_parameters(rg.arange(5).float(), iter([first, second]))
    assert first.tolist() == [0.0, 0.0]  # (torch's would have written the first one)
    rg.nn.utils.vector_to_parameters(rg.arange(6).float(), iter([first, second]))
    assert first.tolist() == [0.0, 1.0] and second.tolist() == [[2.0, 3.0], [4.0, 5.0]]
