"""The gradients of the piecewise-linear activations under ``create_graph``, against torch.

torch's backward kernels of these activations (``threshold_backward``, ``leaky_relu_backward``,
``hardtanh_backward``, ``hardsigmoid_backward``) take the value they compare as an input, with
a derivative of zeros (none for ``hardsigmoid_backward``): a gradient computed with
``create_graph`` stays connected to it. Until 7 December retrograd's rules masked the gradient
with an untracked comparison, so that gradient did not require grad, and a Hessian-vector
product of a ReLU network in its input raised "one of the differentiated tensors appears to not
have been used in the graph" where torch's is zeros.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

# the kinks and bounds themselves, and points on either side of them
POINTS = np.array([-4.0, -3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0, 6.0, 7.0])

ACTIVATIONS = {
    "relu": lambda lib, x: lib.nn.functional.relu(x),
    "leaky_relu": lambda lib, x: lib.nn.functional.leaky_relu(x, 0.2),
    "hardtanh": lambda lib, x: lib.nn.functional.hardtanh(x, -0.5, 1.0),
    "relu6": lambda lib, x: lib.nn.functional.relu6(x),
    "rrelu_eval": lambda lib, x: lib.nn.functional.rrelu(x, training=False),
    "ReLU_module": lambda lib, x: lib.nn.ReLU()(x),
}


def _second(lib, name):
    x = lib.tensor(POINTS, requires_grad=True)
    weights = lib.tensor(np.linspace(-1.0, 2.0, POINTS.size))
    (g,) = lib.autograd.grad((ACTIVATIONS[name](lib, x) * weights).sum(), x, create_graph=True)
    (h,) = lib.autograd.grad((g * weights).sum(), x)
    return g, h


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_the_gradient_stays_connected_and_its_derivative_is_zeros_as_torchs(name):
    want_g, want_h = _second(torch, name)
    got_g, got_h = _second(rg, name)
    assert want_g.requires_grad and got_g.requires_grad
    np.testing.assert_array_equal(got_g.detach().numpy(), want_g.detach().numpy())
    np.testing.assert_array_equal(got_h.numpy(), want_h.numpy())
    assert not got_h.numpy().any()


def test_a_hessian_vector_product_of_a_relu_network_in_its_input_is_zeros():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in ((5, 3), (5,), (1, 5), (1,))]
    point = rng.standard_normal((4, 3))
    found = []
    for lib in (torch, rg):
        net = lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.ReLU(), lib.nn.Linear(5, 1)).double()
        with lib.no_grad():
            for p, a in zip(net.parameters(), arrays):
                p.copy_(lib.tensor(a))
        x = lib.tensor(point, requires_grad=True)
        (g,) = lib.autograd.grad(net(x).sum(), x, create_graph=True)
        (hvp,) = lib.autograd.grad((g * lib.ones_like(g)).sum(), x)
        found.append((g.detach().numpy(), hvp.numpy()))
    (want_g, want_hvp), (got_g, got_hvp) = found
    np.testing.assert_allclose(got_g, want_g, rtol=1e-12)
    np.testing.assert_array_equal(got_hvp, want_hvp)
    assert got_hvp.shape == (4, 3) and not got_hvp.any()


def test_hardsigmoids_gradient_is_connected_and_refuses_a_second_derivative_as_torchs():
    for lib in (torch, rg):
        x = lib.tensor(POINTS, requires_grad=True)
        (g,) = lib.autograd.grad(lib.nn.functional.hardsigmoid(x).sum(), x, create_graph=True)
        assert g.requires_grad
        with pytest.raises(RuntimeError, match="not implemented"):
            lib.autograd.grad(g.sum(), x)
    x = rg.tensor(POINTS, requires_grad=True)
    (g,) = rg.autograd.grad(rg.nn.functional.hardsigmoid(x).sum(), x, create_graph=True)
    with pytest.raises(rg.RetrogradError):
        g.sum().backward()
    # the refusal leaves the graph usable: a first derivative through it still runs
    (again,) = rg.autograd.grad(rg.nn.functional.hardsigmoid(x).sum(), x)
    np.testing.assert_array_equal(again.numpy(), g.detach().numpy())


def test_forward_mode_through_the_piecewise_activations_is_torchs():
    tangent = np.linspace(0.5, 1.5, POINTS.size)
    for name in sorted(ACTIVATIONS):
        results = []
        for lib in (torch, rg):
            _, jvp = lib.func.jvp(
                lambda x, lib=lib, name=name: ACTIVATIONS[name](lib, x),
                (lib.tensor(POINTS),),
                (lib.tensor(tangent),),
            )
            results.append(jvp.numpy())
        np.testing.assert_array_equal(results[1], results[0], err_msg=name)
