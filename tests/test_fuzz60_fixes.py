"""Regressions of round 60's random ``nn.Module`` / ``nn.utils`` programs
(tests/test_random_modules_60.py), each against torch 2.13's behaviour on a twin module.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.utils.prune  # (torch's submodule: not imported by torch.nn.utils)

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
            def __init__(self, lib=lib):
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


# -- load_state_dict(assign=True) of integer values into a Parameter that requires grad ------------
def test_assigning_integer_values_to_a_trained_parameter_is_refused_as_torch():
    """torch refuses (an integer tensor cannot require grad); ours made an int64 Parameter
    that requires grad, and left the layer unusable for training."""
    for lib in (torch, rg):
        layer = lib.nn.Linear(2, 2)
        state = dict(layer.state_dict())
        state["bias"] = lib.tensor([1, 2])
        with pytest.raises(RuntimeError, match="floating point and complex dtype"):
            layer.load_state_dict(state, assign=True)
        assert layer.bias.dtype == lib.float32 and layer.bias.requires_grad
        layer.requires_grad_(False)  # a frozen Parameter takes the state's dtype in both
        layer.load_state_dict(state, assign=True)
        assert layer.bias.dtype == lib.int64


# -- the hook form of spectral norm on a 1-d tensor ------------------------------------------------
def test_hook_spectral_norm_of_a_bias_matches_torch():
    """torch reads a 1-d tensor as a column (``reshape(height, -1)``); ours failed in
    ``flatten(1)``."""
    outputs = {}
    drawn = {}
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    for lib in (torch, rg):
        torch.manual_seed(0)
        layer = _linear(lib, 3, 3, 1)
        lib.nn.utils.spectral_norm(layer, "bias", n_power_iterations=2)
        if lib is torch:
            drawn = {n: b.numpy().copy() for n, b in layer.named_buffers()}
        else:
            with rg.no_grad():
                for n, b in layer.named_buffers():
                    b.copy_(rg.tensor(drawn[n]))
        train = _values(layer(lib.tensor(x)))
        layer.eval()
        outputs[lib.__name__] = (
            sorted(layer.state_dict()),
            [tuple(b.shape) for _, b in layer.named_buffers()],
            train,
            _values(layer(lib.tensor(x))),
        )
    want, got = outputs["torch"], outputs["retrograd"]
    assert got[:2] == want[:2] == (["bias_orig", "bias_u", "bias_v", "weight"], [(3,), (1,)])
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-6)


# -- reparametrizing what is not a registered Parameter: torch's error classes ---------------------
def _prepared(lib, state):
    layer = lib.nn.Linear(2, 2)
    layer.register_buffer("buf", lib.ones(2))
    if state == "none":
        layer.register_parameter("bias", None)
    elif state == "weight_norm":
        lib.nn.utils.weight_norm(layer)
    elif state == "pruned":
        lib.nn.utils.prune.l1_unstructured(layer, "weight", 1)
    elif state == "parametrized":
        lib.nn.utils.parametrizations.weight_norm(layer)
    return layer


@pytest.mark.parametrize(
    ("state", "call", "name", "error"),
    [
        ("plain", "prune", "buf", TypeError),
        ("none", "prune", "bias", TypeError),
        ("weight_norm", "prune", "weight", TypeError),
        ("parametrized", "prune", "weight", TypeError),
        ("plain", "weight_norm", "buf", KeyError),
        ("plain", "weight_norm", "nope", AttributeError),
        ("none", "weight_norm", "bias", TypeError),
        ("pruned", "weight_norm", "weight", KeyError),
        ("plain", "spectral_norm", "nope", KeyError),
        ("none", "spectral_norm", "bias", ValueError),
        ("parametrized", "spectral_norm", "weight", KeyError),
        ("none", "parametrizations.weight_norm", "bias", AttributeError),
    ],
)
def test_reparametrizing_what_is_no_parameter_raises_torchs_class(state, call, name, error):
    def apply(lib, layer):
        utils = lib.nn.utils
        if call == "prune":
            utils.prune.l1_unstructured(layer, name, amount=1)
        elif call == "parametrizations.weight_norm":
            utils.parametrizations.weight_norm(layer, name)
        else:
            getattr(utils, call)(layer, name)

    with pytest.raises(error):
        apply(torch, _prepared(torch, state))
    layer = _prepared(rg, state)
    before = sorted(n for n, _ in layer.named_parameters())
    with pytest.raises(error) as caught:
        apply(rg, layer)
    assert isinstance(caught.value, rg.RetrogradError)
    assert sorted(n for n, _ in layer.named_parameters()) == before


# -- Module.type casts every tensor, integer buffers too ------------------------------------------
@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("target", ["float64", "int32"])
def test_module_type_casts_every_parameter_and_buffer_as_torch(target, frozen):
    """torch's ``Module.type`` is ``_apply(t.type(dst))`` on every tensor (batch norm's
    ``num_batches_tracked`` becomes float64 too); ours kept integer buffers as ``to`` does."""
    results = {}
    for lib in (torch, rg):
        model = lib.nn.Sequential(_linear(lib, 3, 2, 0), lib.nn.BatchNorm1d(3))
        model.requires_grad_(not frozen)
        try:
            model.type(getattr(lib, target))
        except (RuntimeError, TypeError) as error:
            results[lib.__name__] = (
                "raise",
                isinstance(error, TypeError if lib is rg else Exception),
            )
            continue
        dtypes = [(k, str(v.dtype).rpartition(".")[2]) for k, v in model.state_dict().items()]
        results[lib.__name__] = (dtypes, [p.requires_grad for p in model.parameters()])
    assert results["retrograd"] == results["torch"]


# -- functional_call with a parametrized tensor's name ---------------------------------------------
def test_functional_call_of_a_parametrized_name_leaves_the_module_as_it_was():
    """torch sets ``weight`` through the parametrization for the call and sets it back after;
    ours set it and never set it back, so every later call of the module used the given
    weight."""
    import torch.func

    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    given = (np.eye(3) * 2).astype(np.float32)
    outputs = {}
    for lib in (torch, rg):
        layer = _linear(lib, 3, 3, 2)
        lib.nn.utils.parametrizations.weight_norm(layer)
        before = [_values(p).copy() for p in layer.parameters()]
        call = torch.func.functional_call if lib is torch else rg.func.functional_call
        during = _values(call(layer, {"weight": lib.tensor(given)}, (lib.tensor(x),)))
        after = _values(layer(lib.tensor(x)))
        for old, p in zip(before, layer.parameters()):
            np.testing.assert_allclose(_values(p), old, rtol=1e-6, atol=1e-6)
        outputs[lib.__name__] = (during, after)
    for got, want in zip(outputs["retrograd"], outputs["torch"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- load_state_dict of values that are no tensor --------------------------------------------------
@pytest.mark.parametrize("value", [[[1.0, 2.0], [3.0, 4.0]], (1.0, 2.0), 2.5, True])
def test_a_state_value_of_python_numbers_is_refused_as_torch(value):
    """torch wants a tensor (or a tensor-like) for every entry; ours read nested lists and
    numbers as arrays and loaded them."""
    for lib in (torch, rg):
        layer = lib.nn.Linear(2, 2)
        before = _values(layer.weight).copy()
        state = dict(layer.state_dict())
        state["weight"] = value
        with pytest.raises(RuntimeError, match=r"expected torch\.Tensor or Tensor-like object"):
            layer.load_state_dict(state)
        np.testing.assert_array_equal(_values(layer.weight), before)
