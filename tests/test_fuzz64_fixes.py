"""Defects found by round 64's random programs of parametrizations and pruning
(tests/test_random_64.py), each checked against torch."""

from __future__ import annotations

import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_input_of_another_dtype_raises_torchs_value_error(kind):
    # torch: ValueError "RNN input dtype (torch.float64) does not match weight dtype
    # (torch.float32)"; ours was a DTypeError (a TypeError), which torch's except missed
    with pytest.raises(ValueError, match="dtype"):
        getattr(torch.nn, kind)(3, 2)(torch.zeros(2, 1, 3, dtype=torch.float64))
    with pytest.raises(
        ValueError,
        match=rf"{kind}: input dtype \(float64\) does not match weight dtype \(float32\)",
    ):
        getattr(rg.nn, kind)(3, 2)(rg.zeros(2, 1, 3).double())
    with pytest.raises(rg.DTypeError):  # (still the hierarchy's dtype error)
        getattr(rg.nn, kind)(3, 2)(rg.zeros(2, 1, 3).double())


def test_recurrent_cell_of_another_dtype_still_raises_runtime_error():
    # torch's cells: RuntimeError "mat1 and mat2 must have the same dtype"
    with pytest.raises(RuntimeError):
        torch.nn.LSTMCell(3, 2)(torch.zeros(1, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="LSTMCell: input is float64 but weight_ih is float32"):
        rg.nn.LSTMCell(3, 2)(rg.zeros(1, 3).double())


def _refreshed(lib, form):
    """A reference to the spectral norm's ``u`` taken before a training forward, and the
    buffer after it."""
    lib.manual_seed(0)
    layer = lib.nn.Linear(4, 3)
    if form == "parametrization":
        lib.nn.utils.parametrizations.spectral_norm(layer)
        owner, name = layer.parametrizations.weight[0], "_u"
    else:
        lib.nn.utils.spectral_norm(layer)
        owner, name = layer, "weight_u"
    held = getattr(owner, name)
    before = held.detach().numpy().copy()
    layer(lib.ones(2, 4))
    return held, getattr(owner, name), before


@pytest.mark.parametrize("form", ["parametrization", "hook"])
def test_spectral_norm_refines_its_vectors_in_place(form):
    # torch's power iteration writes u and v with out=: a reference held to the buffer sees
    # the refined vector (ours replaced the buffer, leaving the reference stale)
    held, current, before = _refreshed(torch, form)
    assert held is current and not (before == current.detach().numpy()).all()
    held, current, before = _refreshed(rg, form)
    assert held is current
    assert not (before == current.detach().numpy()).all()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("name", ["weight_hh_l0", "bias_hh_l0", "bias_ih_l1"])
def test_recurrent_weights_of_mixed_dtypes_are_refused(kind, name):
    # torch: RuntimeError ("mat1 and mat2 must have the same dtype" / "get_mkldnn_dtype");
    # ours promoted the mix to float64 and computed (an unsafe parametrization casting one
    # weight, or a weight replaced by a float64 Parameter)
    for lib in (torch, rg):
        module = getattr(lib.nn, kind)(3, 2, num_layers=2)
        setattr(module, name, lib.nn.Parameter(getattr(module, name).detach().double()))
        with pytest.raises(RuntimeError):
            module(lib.zeros(2, 1, 3))
    with pytest.raises(rg.DTypeError, match=f"{kind}: input is float32 but {name} is float64"):
        module(rg.zeros(2, 1, 3))
