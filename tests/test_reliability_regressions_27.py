"""Defects found by round 27 of the reliability sweep (``test_reliability_sweep_27.py``), each
checked against torch or an independent computation:

- ``nn.LPPool1d/2d/3d`` of an int64 or bool input pooled the integer powers with integer
  division (windows floored toward zero): torch's modules pass ``float(norm_type)``, whose
  powers are floats.
- ``nn.LSTM/GRU/RNN`` and their cells given an input of another backend than their weights
  failed inside the fused kernel with the library's words ("Cannot interpret 'torch.float32'
  as a data type", "'AutodiffPrimitive' object has no attribute 'shape'") as a DTypeError;
  an untracked input of the weights' inner backend (which every other layer takes) failed the
  same way.
- ``Gradients +`` refused to add a ``backward(create_graph=True)``'s gradients to a plain
  backward's (a gradient penalty's), which torch accumulates into ``.grad``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend, on_torch

X = np.random.default_rng(27).integers(0, 4, (1, 2, 4, 4, 4))


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_lp_pool_modules_of_int_and_bool_inputs_give_torchs_float_norms(spatial, dtype):
    data = X[(0,) * (3 - spatial)].astype(dtype)
    name = f"LPPool{spatial}d"
    expected = getattr(torch.nn, name)(2, 2)(torch.tensor(data))
    got = getattr(rg.nn, name)(2, 2)(rg.tensor(data))
    assert got.dtype == "float32"
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)


RECURRENT = {
    "LSTM": (lambda m: m.nn.LSTM(3, 4), (5, 2, 3)),
    "GRU": (lambda m: m.nn.GRU(3, 4), (5, 2, 3)),
    "RNN": (lambda m: m.nn.RNN(3, 4), (5, 2, 3)),
    "LSTMCell": (lambda m: m.nn.LSTMCell(3, 4), (2, 3)),
    "GRUCell": (lambda m: m.nn.GRUCell(3, 4), (2, 3)),
}


def _pair(name):
    """The same recurrent layer in torch and in retrograd (torch's weights), and an input."""
    build, shape = RECURRENT[name]
    torch.manual_seed(0)
    reference = build(torch)
    layer = build(rg)
    layer.load_state_dict({k: v.numpy() for k, v in reference.state_dict().items()})
    data = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return reference, layer, data


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", RECURRENT)
def test_a_recurrent_layer_names_an_input_of_another_backend_and_stays_usable(name):
    reference, layer, data = _pair(name)
    other = rg.Autodiff(rg.NumpyBackend() if on_torch() else rg.TorchBackend("cpu"))
    with pytest.raises(rg.RetrogradError, match=f"{name}.*cannot combine tensors of"):
        layer(rg.tensor(data, backend=other))
    out = _first(layer(rg.tensor(data)))
    np.testing.assert_allclose(out.numpy(), _first(reference(torch.tensor(data))).detach(), 1e-5)


@pytest.mark.parametrize("name", RECURRENT)
def test_a_recurrent_layer_takes_an_untracked_input_of_its_inner_backend(name):
    reference, layer, data = _pair(name)
    out = _first(layer(rg.tensor(data, backend=inner_backend())))
    expected = _first(reference(torch.tensor(data)))
    np.testing.assert_allclose(out.numpy(), expected.detach(), rtol=1e-5)
    grads = out.sum().backward()
    expected.sum().backward()
    np.testing.assert_allclose(
        layer.weight_hh_l0.grad(grads).numpy() if "Cell" not in name else
        layer.weight_hh.grad(grads).numpy(),
        (reference.weight_hh_l0 if "Cell" not in name else reference.weight_hh).grad,
        rtol=1e-4, atol=1e-6,
    )  # fmt: skip


W = np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]], np.float32)
INPUT = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], np.float32)


@pytest.mark.parametrize("order", ["penalty last", "penalty first", "sum()"])
def test_a_gradient_penalty_adds_to_the_create_graph_gradients_as_torch_accumulates(order):
    w = torch.tensor(W, requires_grad=True)
    (torch.tensor(INPUT) @ w.T).tanh().sum().backward(create_graph=True)
    penalty = w.grad.pow(2).sum()
    first = w.grad.detach().clone()
    penalty.backward()
    weight = rg.nn.Parameter(rg.tensor(W))
    grads = (rg.tensor(INPUT) @ weight.transpose(0, 1)).tanh().sum().backward(create_graph=True)
    penalty_grads = weight.grad(grads).pow(2).sum().backward()
    total = {
        "penalty last": lambda: grads + penalty_grads,
        "penalty first": lambda: penalty_grads + grads,
        "sum()": lambda: sum([grads, penalty_grads]),
    }[order]()
    np.testing.assert_allclose(weight.grad(total).numpy(), w.grad.detach(), rtol=1e-5)
    np.testing.assert_allclose(weight.grad(grads).numpy(), first, rtol=1e-5)  # unchanged
    optimizer = rg.optim.SGD([weight], lr=0.1)
    optimizer.step(total)
    np.testing.assert_allclose(weight.numpy(), W - 0.1 * w.grad.detach().numpy(), rtol=1e-5)


def test_unflatten_and_fold_name_the_input_shape_they_cannot_take():
    with pytest.raises(rg.ShapeError, match=r"Unflatten: .*\(dimension 1 of \[1, 2, 4\]\)"):
        rg.nn.Unflatten(1, (2, 2))(rg.ones(1, 2, 4))
    with pytest.raises(
        rg.ShapeError, match=r"Fold: .*got 10 \(dimension -1 of input \[2, 12, 10\]\)"
    ):
        rg.nn.Fold((4, 4), 2)(rg.ones(2, 12, 10))
    with pytest.raises(RuntimeError):  # torch refuses both too
        torch.nn.Fold((4, 4), 2)(torch.ones(2, 12, 10))
    assert rg.nn.Unflatten(1, (2, 2))(rg.ones(1, 4, 3)).shape == (1, 2, 2, 3)


@pytest.mark.parametrize("shape", [(0, 2), (2, 0), (0, 0)])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_spectral_norm_of_an_empty_weight_computes_as_torchs(shape, mode):
    torch.manual_seed(0)
    reference = torch.nn.utils.parametrizations.spectral_norm(torch.nn.Linear(*shape))
    layer = rg.nn.utils.parametrizations.spectral_norm(rg.nn.Linear(*shape))
    layer.load_state_dict({k: v.numpy() for k, v in reference.state_dict().items()})
    getattr(reference, mode)()
    getattr(layer, mode)()
    x = np.ones((3, shape[0]), np.float32)
    expected = reference(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(layer(rg.tensor(x)).numpy(), expected, rtol=1e-6)


def test_the_older_spectral_norm_of_a_weight_without_columns_computes_as_torchs():
    torch.manual_seed(0)
    reference = torch.nn.utils.spectral_norm(torch.nn.Linear(0, 2))
    layer = rg.nn.utils.spectral_norm(rg.nn.Linear(0, 2))
    layer.load_state_dict({k: v.numpy() for k, v in reference.state_dict().items()})
    expected = reference(torch.ones(3, 0)).detach().numpy()
    np.testing.assert_allclose(layer(rg.ones(3, 0)).numpy(), expected, rtol=1e-6)
