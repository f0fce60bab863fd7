"""Leftover defects, each checked against torch 2.13 (the reference).

- Built-in modules' ``forward`` takes torch's parameter names (``input``, ...), so that
  ``nn.Conv1d(2, 3, 3)(input=x)`` works as in torch.
- ``Module.state_dict()`` is an ``OrderedDict`` with torch's ``_metadata`` (each module's
  ``{"version": cls._version}`` by prefix), which ``load_state_dict`` hands to each
  ``_load_from_state_dict`` and ``rg.save``/``rg.load`` keep.
- The compiled float32 attention gives torch's zero rows (and gradients) where every score of
  a row is ``-inf`` from the data.
- ``torch.embedding_bag``'s ATen form with its four results as torch's CPU kernel gives them;
  ``F.embedding_bag(mode="max")``'s left-out entries no longer turn NaN from another bag's NaN.
"""

from __future__ import annotations

import collections
import inspect
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import KeyMismatchError
from retrograd.nn import parallel as rg_parallel

INF = float("inf")


# -- forward's parameter names ------------------------------------------------------------------
def _shared_module_classes():
    pairs = []
    for library, reference in ((rg.nn, torch.nn), (rg_parallel, torch.nn.parallel)):
        for name in sorted(dir(library)):
            ours, theirs = getattr(library, name), getattr(reference, name, None)
            classes = isinstance(ours, type) and isinstance(theirs, type)
            if classes and issubclass(theirs, torch.nn.Module) and issubclass(ours, rg.nn.Module):
                pairs.append((name, ours, theirs))
    return pairs


#: Intentional differences: torch's RNNBase and RNNCellBase are abstract there (``*input``);
#: retrograd's run the recurrence, taking ``(input, hx)`` as every subclass does.
_ABSTRACT_IN_TORCH = {"RNNBase", "RNNCellBase"}


def _names(function):
    return list(inspect.signature(function).parameters)


def test_every_forward_takes_torchs_parameter_names():
    pairs = _shared_module_classes()
    assert len(pairs) > 150  # (the sweep reaches the whole namespace)
    wrong = {}
    for name, ours, theirs in pairs:
        if name in _ABSTRACT_IN_TORCH:
            continue
        if name.startswith("Lazy"):
            # a lazy layer's forward(input, *args, **kwargs) builds the layer, then calls the
            # built class's forward, whose names are the ones compared
            assert _names(ours.forward)[:2] == ["self", "input"], name
            ours = ours.cls_to_become
        if _names(ours.forward) != _names(theirs.forward):
            wrong[name] = (_names(ours.forward), _names(theirs.forward))
    assert not wrong, wrong


def _pair(make):
    """The same layer in torch and retrograd, retrograd's loaded with torch's state."""
    torch.manual_seed(0)
    theirs = make(torch.nn)
    ours = make(rg.nn)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _both(array, dtype=None):
    return rg.tensor(array, dtype=dtype), torch.tensor(array)


@pytest.mark.parametrize(
    "make, shape, keywords",
    [
        (lambda nn: nn.Conv1d(2, 3, 3), (2, 2, 5), {}),
        (lambda nn: nn.Linear(4, 3), (2, 4), {}),
        (lambda nn: nn.ReLU(), (2, 4), {}),
        (lambda nn: nn.BatchNorm1d(3), (4, 3), {}),
        (lambda nn: nn.LayerNorm(4), (2, 4), {}),
        (lambda nn: nn.Sequential(nn.Linear(4, 3), nn.Tanh()), (2, 4), {}),
        (lambda nn: nn.ConvTranspose1d(2, 3, 3, stride=2), (1, 2, 4), {"output_size": [10]}),
        (lambda nn: nn.Dropout(0.0), (2, 4), {}),
        (lambda nn: nn.Identity(), (2, 4), {}),
    ],
)
def test_forward_by_keyword_as_torch(make, shape, keywords):
    ours, theirs = _pair(make)
    array = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x, tx = _both(array)
    expected = theirs(input=tx, **keywords).detach().numpy()
    np.testing.assert_allclose(ours(input=x, **keywords).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours(x, **keywords).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_embedding_unpool_and_lazy_layers_by_keyword():
    ours, theirs = _pair(lambda nn: nn.Embedding(5, 3))
    indices = np.array([[0, 4], [2, 2]])
    expected = theirs(input=torch.tensor(indices)).detach().numpy()
    np.testing.assert_allclose(ours(input=rg.tensor(indices)).numpy(), expected)

    array = np.random.default_rng(1).standard_normal((1, 2, 6)).astype(np.float32)
    x, tx = _both(array)
    pooled, where = rg.nn.MaxPool1d(2, return_indices=True)(x)
    t_pooled, t_where = torch.nn.MaxPool1d(2, return_indices=True)(tx)
    unpooled = rg.nn.MaxUnpool1d(2)(input=pooled, indices=where)
    np.testing.assert_allclose(
        unpooled.numpy(), torch.nn.MaxUnpool1d(2)(input=t_pooled, indices=t_where).numpy()
    )

    lazy = rg.nn.LazyLinear(3)
    assert tuple(lazy(input=rg.ones((2, 4))).shape) == (2, 3)
    assert lazy.weight.shape == (3, 4)


# -- state_dict's OrderedDict and _metadata -----------------------------------------------------
def _nested(nn):
    return nn.Sequential(
        nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Sequential(nn.InstanceNorm1d(3), nn.ReLU())
    )


def test_state_dict_is_an_ordered_dict_with_torchs_metadata():
    ours, theirs = _nested(rg.nn), _nested(torch.nn)
    state, reference = ours.state_dict(), theirs.state_dict()
    assert type(state) is collections.OrderedDict
    assert list(state) == list(reference)
    assert list(state._metadata.items()) == list(reference._metadata.items())
    assert state._metadata["1"] == {"version": 2}  # BatchNorm's _version
    assert rg.nn.BatchNorm2d._version == torch.nn.BatchNorm2d._version == 2

    prefixed = ours.state_dict(prefix="model.")
    assert list(prefixed._metadata.items()) == list(
        theirs.state_dict(prefix="model.")._metadata.items()
    )
    # a destination without _metadata gets none, as torch's
    plain = ours.state_dict(destination={})
    assert type(plain) is dict and not hasattr(plain, "_metadata")
    with pytest.warns(FutureWarning):
        positional = ours.state_dict(None, "p.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        expected = theirs.state_dict(None, "p.")
    assert list(positional) == list(expected)
    assert list(positional._metadata.items()) == list(expected._metadata.items())


def test_state_dict_copy_idiom_and_load_with_metadata():
    ours = _nested(rg.nn)
    state = ours.state_dict()
    metadata = getattr(state, "_metadata", None)
    state = state.copy()
    state._metadata = metadata  # (torch's idiom: failed on a plain dict)
    keys = ours.load_state_dict(state)
    assert keys.missing_keys == [] and keys.unexpected_keys == []


def _recording_layer(nn, version, seen):
    class Recording(nn.Module):
        _version = version

        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):
            seen.append((prefix, dict(local_metadata)))
            super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    return nn.Sequential(Recording())


def test_load_state_dict_hands_each_module_its_metadata():
    seen = {"rg": [], "torch": []}
    ours = _recording_layer(rg.nn, 3, seen["rg"])
    theirs = _recording_layer(torch.nn, 3, seen["torch"])
    state, reference = ours.state_dict(), theirs.state_dict()
    ours.load_state_dict(state)
    theirs.load_state_dict(reference)
    # an older checkpoint's version reaches the override as torch's does
    state._metadata["0"] = {"version": 1}
    reference._metadata["0"] = {"version": 1}
    ours.load_state_dict(state)
    theirs.load_state_dict(reference)
    assert seen["rg"] == seen["torch"] == [("0.", {"version": 3}), ("0.", {"version": 1})]


def test_batch_norm_reads_the_version_from_metadata():
    ours, theirs = rg.nn.BatchNorm1d(2), torch.nn.BatchNorm1d(2)
    state, reference = ours.state_dict(), theirs.state_dict()
    del state["num_batches_tracked"], reference["num_batches_tracked"]
    # version 2 in the metadata: the count is expected, its absence a missing key
    with pytest.raises(RuntimeError, match="num_batches_tracked"):
        theirs.load_state_dict(reference)
    with pytest.raises(KeyMismatchError, match="num_batches_tracked"):
        ours.load_state_dict(state)
    # version 1 (a checkpoint from before the count): the module's own is kept
    state._metadata[""] = {"version": 1}
    reference._metadata[""] = {"version": 1}
    assert not any(ours.load_state_dict(state))
    assert not any(theirs.load_state_dict(reference))


def test_saved_state_dict_keeps_metadata(tmp_path):
    ours = _nested(rg.nn)
    state = ours.state_dict()
    rg.save({"model": state, "epoch": 3}, tmp_path / "checkpoint.pt")
    loaded = rg.load(tmp_path / "checkpoint.pt")["model"]
    assert type(loaded) is collections.OrderedDict
    assert list(loaded._metadata.items()) == list(state._metadata.items())
    assert not any(ours.load_state_dict(loaded))


# -- attention over rows whose every score is -inf ----------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_with_an_infinite_key_feature_as_torch(dtype, is_causal):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 4, 3))
    k = rng.standard_normal((1, 2, 4, 3))
    v = rng.standard_normal((1, 2, 4, 3))
    k[..., 0] = -INF
    q[0, 0, :, 0] = np.abs(q[0, 0, :, 0])  # head 0: every score -inf, a zero row in torch
    q[0, 1, :, 0] = [0.5, -0.5, 0.7, -0.2]  # head 1: rows of -inf (zero) and +inf (NaN)
    arrays = [a.astype(dtype) for a in (q, k, v)]
    reference = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = torch.nn.functional.scaled_dot_product_attention(*reference, is_causal=is_causal)
    out.sum().backward()
    ours = [rg.tensor(a, requires_grad=True) for a in arrays]
    result = rg.nn.functional.scaled_dot_product_attention(*ours, is_causal=is_causal)
    grads = result.sum().backward()
    np.testing.assert_allclose(result.numpy(), out.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert np.all(result.numpy()[0, 0] == 0.0)
    for mine, theirs in zip(ours, reference):
        np.testing.assert_allclose(mine.grad(grads).numpy(), theirs.grad.numpy(), atol=1e-5)


# -- torch.embedding_bag ------------------------------------------------------------------------
def _bag_weight():
    torch.manual_seed(0)
    return torch.randn(6, 3)


INDICES, OFFSETS = [1, 2, 4, 5, 4, 3], [0, 2, 2, 5]


def _check_bags(ours, theirs):
    for name, mine, reference in zip(("output", "offset2bag", "bag_size", "max_indices"), ours,
                                     theirs):  # fmt: skip
        assert tuple(mine.shape) == tuple(reference.shape), name
        assert mine.dtype == str(reference.dtype).removeprefix("torch."), name
        np.testing.assert_allclose(
            mine.numpy(), reference.detach().numpy(), rtol=1e-6, err_msg=name
        )


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [None, 4, -1])
def test_embedding_bag_aten_form_matches_torch(mode, padding_idx):
    weight = _bag_weight()
    for dtype, requires_grad, last in [
        (torch.float32, False, False),
        (torch.float64, False, False),
        (torch.float32, True, True),
        (torch.float64, True, False),
    ]:
        offsets = [*OFFSETS, 6] if last else OFFSETS
        base = weight.to(dtype)
        theirs_weight = base.clone().requires_grad_(requires_grad)
        theirs = torch.embedding_bag(
            theirs_weight, torch.tensor(INDICES), torch.tensor(offsets), False, mode, False,
            None, last, padding_idx,
        )  # fmt: skip
        ours_weight = rg.tensor(base.numpy(), requires_grad=requires_grad)
        ours = rg.embedding_bag(
            ours_weight, rg.tensor(INDICES), rg.tensor(offsets), False, mode, False, None,
            last, padding_idx,
        )  # fmt: skip
        _check_bags(ours, theirs)
        if requires_grad:
            scale = np.arange(12.0).reshape(4, 3)
            (theirs[0] * torch.tensor(scale, dtype=dtype)).sum().backward()
            grads = (ours[0] * rg.tensor(scale, dtype=ours[0].dtype)).sum().backward()
            np.testing.assert_allclose(
                ours_weight.grad(grads).numpy(), theirs_weight.grad.numpy(), rtol=1e-6
            )


def test_embedding_bag_aten_form_other_layouts():
    weight = _bag_weight()
    # the brief's form: float32 sum with no padding skips offset2bag (empty), as torch's
    theirs = torch.embedding_bag(weight, torch.tensor(INDICES), torch.tensor(OFFSETS), False, 0)
    ours = rg.embedding_bag(rg.tensor(weight.numpy()), rg.tensor(INDICES), rg.tensor(OFFSETS),
                            False, 0)  # fmt: skip
    _check_bags(ours, theirs)
    # int32 indices and offsets: int32 bookkeeping
    for mode in (1, 2):
        theirs = torch.embedding_bag(
            weight, torch.tensor(INDICES).int(), torch.tensor(OFFSETS).int(), False, mode
        )
        ours = rg.embedding_bag(
            rg.tensor(weight.numpy()), rg.tensor(INDICES, dtype="int32"),
            rg.tensor(OFFSETS, dtype="int32"), False, mode,
        )  # fmt: skip
        _check_bags(ours, theirs)
    # weights strided along the rows, and per-sample weights: offset2bag computed again
    theirs = torch.embedding_bag(weight.t().contiguous().t(), torch.tensor(INDICES),
                                 torch.tensor(OFFSETS), False, 0)  # fmt: skip
    strided = rg.tensor(weight.t().contiguous().numpy()).t()
    _check_bags(rg.embedding_bag(strided, rg.tensor(INDICES), rg.tensor(OFFSETS)), theirs)
    per_sample = np.linspace(0.5, 2.0, 6).astype(np.float32)
    theirs = torch.embedding_bag(weight, torch.tensor(INDICES), torch.tensor(OFFSETS), False, 0,
                                 False, torch.tensor(per_sample), False, 4)  # fmt: skip
    ours = rg.embedding_bag(rg.tensor(weight.numpy()), rg.tensor(INDICES), rg.tensor(OFFSETS),
                            False, 0, False, rg.tensor(per_sample), False, 4)  # fmt: skip
    _check_bags(ours, theirs)


def test_embedding_bag_aten_form_refuses_bad_arguments():
    weight = rg.tensor(_bag_weight().numpy())
    with pytest.raises(rg.InvalidArgumentError, match="mode"):
        rg.embedding_bag(weight, rg.tensor(INDICES), rg.tensor(OFFSETS), False, 3)
    with pytest.raises(rg.InvalidArgumentError, match="-6 through 5, but got 6"):
        rg.embedding_bag(weight, rg.tensor(INDICES), rg.tensor(OFFSETS), False, 1, False, None,
                         False, 6)  # fmt: skip
    with pytest.raises(rg.ShapeError, match="indices must be a 1-d tensor"):
        rg.embedding_bag(weight, rg.tensor([INDICES]), rg.tensor(OFFSETS))


def test_embedding_bag_max_keeps_a_nan_in_its_own_bag():
    weight = _bag_weight()
    weight[1, 0] = float("nan")  # bag 0's first entry
    indices, offsets = torch.tensor(INDICES), torch.tensor(OFFSETS)
    expected = torch.nn.functional.embedding_bag(indices, weight, offsets, mode="max",
                                                 padding_idx=4)  # fmt: skip
    result = rg.nn.functional.embedding_bag(
        rg.tensor(INDICES), rg.tensor(weight.numpy()), rg.tensor(OFFSETS), mode="max", padding_idx=4
    )
    np.testing.assert_allclose(result.numpy(), expected.numpy())
    assert np.isfinite(result.numpy()[1:]).all()
