"""Checks found by the ports of round 60 (meta-learning, higher-order gradients, torch.func).

functorch's ``maml-omniglot-transforms.py`` (``tests/test_real_ports_462.py``) vmaps over tasks
a second-order loss through a training-mode batch norm. torch 2.13's own ``vmap`` returns wrong
meta-gradients there for the parameters below the batch norm (its task-by-task loop and finite
differences agree with each other, not with it), so the port is compared with torch's loop;
this pins retrograd's ``vmap`` to the loop and to central finite differences directly.
"""

import numpy as np
import pytest
import torch

import retrograd as rg

SHAPES = {
    "0.weight": (4, 3),
    "0.bias": (4,),
    "1.weight": (4,),
    "1.bias": (4,),
    "2.weight": (2, 4),
    "2.bias": (2,),
}


def meta_loss_functions(lib):
    """``(net, loss_of(params, xs, ys) by vmap, the same by a loop)`` of a Linear, training
    batch norm (no running statistics), Linear net: one inner ``grad`` step a task, the query
    loss at the adapted parameters, summed over the tasks."""
    nn = lib.nn
    net = nn.Sequential(
        nn.Linear(3, 4), nn.BatchNorm1d(4, track_running_stats=False), nn.Linear(4, 2)
    )

    def loss(params, x, y):
        return nn.functional.cross_entropy(lib.func.functional_call(net, params, (x,)), y)

    def task(params, x, y):
        grads = lib.func.grad(loss)(params, x, y)
        return loss({k: params[k] - 0.5 * g for k, g in grads.items()}, x, y)

    def by_vmap(params, xs, ys):
        return lib.func.vmap(task, in_dims=(None, 0, 0))(params, xs, ys).sum()

    def by_loop(params, xs, ys):
        return sum(task(params, xs[i], ys[i]) for i in range(xs.shape[0]))

    return net, by_vmap, by_loop


def test_vmap_of_a_second_order_loss_through_training_batch_norm_as_the_task_loop():
    torch.manual_seed(0)
    rng = np.random.default_rng(60)
    values = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    xs, ys = rng.normal(size=(2, 5, 3)), rng.integers(0, 2, (2, 5))

    # expected: torch's task loop (torch's own vmap is wrong here, see the module docstring)
    _, _, torch_loop = meta_loss_functions(torch)
    torch_params = {k: torch.tensor(v, requires_grad=True) for k, v in values.items()}
    meta = torch_loop(torch_params, torch.tensor(xs), torch.tensor(ys))
    expected = dict(zip(torch_params, torch.autograd.grad(meta, list(torch_params.values()))))

    _, by_vmap, by_loop = meta_loss_functions(rg)
    for meta_loss in (by_vmap, by_loop):
        params = {k: rg.tensor(v, requires_grad=True) for k, v in values.items()}
        got = rg.autograd.grad(
            meta_loss(params, rg.tensor(xs), rg.tensor(ys)), list(params.values())
        )
        for (name, want), value in zip(expected.items(), got):
            np.testing.assert_allclose(
                value.numpy(), want.numpy(), rtol=1e-9, atol=1e-11, err_msg=name
            )

    # and central finite differences of the vmapped loss, for the parameters below the norm
    step = 1e-6
    with rg.no_grad():
        for name in ("0.weight", "0.bias"):
            flat = values[name].reshape(-1)
            for j in range(flat.size):
                moved = []
                for sign in (1, -1):
                    shifted = flat.copy()
                    shifted[j] += sign * step
                    params = {k: rg.tensor(v) for k, v in values.items()}
                    params[name] = rg.tensor(shifted.reshape(values[name].shape))
                    moved.append(by_vmap(params, rg.tensor(xs), rg.tensor(ys)).item())
                numeric = (moved[0] - moved[1]) / (2 * step)
                analytic = expected[name].numpy().reshape(-1)[j]
                assert abs(numeric - analytic) < 1e-6, (name, j, numeric, analytic)
    # the biases feed the batch norm, which cancels them: their meta-gradient is 0
    np.testing.assert_allclose(expected["0.bias"].numpy(), 0.0, atol=1e-12)


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_the_gradient_of_a_hessian_through_a_norm_layer_as_finite_differences(norm):
    """Third order through a normalization (``hessian(..., create_graph=True)`` of the inputs,
    then the gradient of its square to a weight below the norm: curvature regularizers do
    this). torch 2.13 gets this third derivative wrong through ``layer_norm`` and training
    ``batch_norm`` (off by 17% and 69% of the largest entry here, where its Hessians themselves
    are right); the expected values are central finite differences of torch's Hessians."""
    torch.manual_seed(0)
    rng = np.random.default_rng(61)
    weights = {
        "0.weight": rng.normal(size=(4, 3)),
        "0.bias": rng.normal(size=4),
        "1.weight": 1 + 0.1 * rng.normal(size=4),
        "1.bias": 0.1 * rng.normal(size=4),
        "3.weight": rng.normal(size=(2, 4)),
        "3.bias": rng.normal(size=2),
    }
    x = rng.normal(size=(5, 3))

    def hessian_of(lib, first_weight, create_graph=False):
        nn = lib.nn
        norm_layer = nn.LayerNorm(4) if norm == "layer" else nn.BatchNorm1d(4)
        net = nn.Sequential(nn.Linear(3, 4), norm_layer, nn.Tanh(), nn.Linear(4, 2)).double()
        state = {k: lib.tensor(v) for k, v in weights.items()}
        state["0.weight"] = first_weight
        params = {k: v for k, v in state.items()}
        buffers = {k: v.clone() for k, v in net.named_buffers()}

        def f(inputs):
            return lib.func.functional_call(net, (params, buffers), (inputs,)).tanh().sum()

        return lib.autograd.functional.hessian(f, lib.tensor(x), create_graph=create_graph)

    w = rg.tensor(weights["0.weight"], requires_grad=True)
    hessian = hessian_of(rg, w, create_graph=True)
    np.testing.assert_allclose(
        hessian.detach().numpy(),
        hessian_of(torch, torch.tensor(weights["0.weight"])).numpy(),
        rtol=1e-9,
        atol=1e-11,
    )
    (got,) = rg.autograd.grad(hessian.pow(2).sum(), [w])

    step = 1e-6
    numeric = np.zeros((4, 3))
    for i in range(4):
        for j in range(3):
            moved = []
            for sign in (1, -1):
                shifted = weights["0.weight"].copy()
                shifted[i, j] += sign * step
                moved.append(hessian_of(torch, torch.tensor(shifted)).pow(2).sum().item())
            numeric[i, j] = (moved[0] - moved[1]) / (2 * step)
    np.testing.assert_allclose(got.numpy(), numeric, rtol=1e-6, atol=1e-6)
