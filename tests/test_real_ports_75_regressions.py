"""Focused checks of what the ports of ``tests/test_real_ports_75.py`` and ``_76.py`` found:
``Tensor.register_hook`` was refused, where SuPar's tree CRF registers
``s_s.register_hook(lambda x: x.masked_fill_(torch.isnan(x), 0))`` on every span chart of its
inside pass. Tensor hooks now run on a tensor's summed gradient before it flows on (a leaf's:
before backward returns it), each compared here with torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _leaf(lib, values):
    return lib.tensor(np.asarray(values, dtype=np.float32), requires_grad=True)


def _grads(lib, loss, tensors):
    """The gradients of ``tensors`` (leaves or retained) after ``loss.backward()``."""
    if lib is torch:
        loss.backward()
        return [t.grad.numpy().copy() for t in tensors]
    grads = loss.backward()
    return [t.grad(grads).numpy().copy() for t in tensors]


def _both(program):
    theirs, ours = program(torch), program(rg)
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-6, atol=1e-6)


def test_a_hook_on_an_intermediate_replaces_the_gradient_flowing_on_as_torch():
    def program(lib):
        x = _leaf(lib, [1.0, -2.0, 3.0])
        y = x * 3
        y.register_hook(lambda g: g.clamp(max=0.5))
        first = _grads(lib, (y * y).sum(), [x])
        x = _leaf(lib, [1.0, -2.0, 3.0])
        y = x * 3
        y.register_hook(lambda g: g + 1)  # hooks run in the order registered
        y.register_hook(lambda g: g * 2)
        second = _grads(lib, (y * y).sum(), [x])
        return first + second

    _both(program)


def test_a_hook_changing_the_gradient_in_place_and_returning_none_as_torch():
    def program(lib):
        x = _leaf(lib, [1.0, -2.0])
        y = x.exp()

        def double(g):
            g.mul_(2)  # returns nothing: the gradient changed in place is the new one

        y.register_hook(double)
        return _grads(lib, (y * x).sum(), [x])

    _both(program)


def test_supar_s_hook_masks_the_nan_gradients_of_an_all_minus_inf_logsumexp_as_torch():
    def program(lib):
        w = _leaf(lib, [[0.5, 1.0], [2.0, -1.0]])
        blocked = lib.tensor([[0.0, 0.0], [float("-inf"), float("-inf")]])
        s = w + blocked
        s.register_hook(lambda x: x.masked_fill_(lib.isnan(x), 0))
        return _grads(lib, s.logsumexp(-1)[0] * 2, [w])

    _both(program)
    # without the hook the blocked row's gradient is NaN (0 * exp(-inf - -inf)) in both
    w = rg.tensor([[0.5, 1.0], [2.0, -1.0]]).require_grad()
    s = w + rg.tensor([[0.0, 0.0], [float("-inf"), float("-inf")]])
    assert np.isnan(w.grad((s.logsumexp(-1)[0] * 2).backward()).numpy()[1]).all()


def test_a_hook_on_a_leaf_changes_the_gradient_backward_returns_and_the_step_as_torch():
    def program(lib):
        w = lib.nn.Parameter(lib.tensor([[1.0, -2.0], [0.5, 3.0]]))
        handle = w.register_hook(lambda g: g.clamp(-1, 1))
        optimizer = lib.optim.SGD([w], lr=0.1)
        x = lib.tensor([[1.0, 2.0], [-3.0, 0.5]])
        records = []
        for step in range(3):
            if step == 2:
                handle.remove()  # the last step's gradient is not clipped
            loss = (x @ w).pow(2).sum()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                records.append(w.grad.numpy().copy())
                optimizer.step()
            else:
                grads = loss.backward()
                records.append(w.grad(grads).numpy().copy())
                optimizer.step(grads)
            records.append(w.detach().numpy().copy())
        return records

    _both(program)


def test_retained_gradients_are_hooked_and_autograd_grad_inputs_are_not_as_torch():
    def program(lib):
        x = _leaf(lib, [1.0, -2.0, 3.0])
        y = x * 3
        y.retain_grad()
        y.register_hook(lambda g: g * 10)
        retained = _grads(lib, (y * y).sum(), [y, x])
        x = _leaf(lib, [1.0, -2.0, 3.0])
        y = x * 3
        y.register_hook(lambda g: g * 10)
        x.register_hook(lambda g: g + 1)
        wanted = lib.autograd.grad((y * y).sum(), [y, x])
        return retained + [t.detach().numpy() for t in wanted]

    _both(program)


def test_a_hook_runs_recorded_under_create_graph_as_torch():
    def program(lib):
        x = _leaf(lib, [1.0, -2.0, 3.0])
        y = x**2
        y.register_hook(lambda g: g * x)
        (first,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        (second,) = lib.autograd.grad(first.sum(), x)
        return [first.detach().numpy(), second.numpy()]

    _both(program)


def test_register_hook_errors_name_the_fault_and_leave_the_tensor_usable():
    with pytest.raises(rg.AutodiffError, match="register_hook: cannot register a hook"):
        rg.tensor([1.0, 2.0]).register_hook(lambda g: g)
    with pytest.raises(rg.DTypeError, match="register_hook"):
        rg.tensor([1.0]).require_grad().register_hook("not callable")
    x = rg.tensor([1.0, 2.0]).require_grad()
    y = x * 2
    handle = y.register_hook(lambda g: g.sum())
    with pytest.raises(rg.ShapeError, match=r"register_hook: .*shape \[\], expected shape \[2\]"):
        (y * y).sum().backward(retain_graph=True)
    handle.remove()
    assert x.grad((y * y).sum().backward()).tolist() == [8.0, 16.0]
    with pytest.raises(rg.DTypeError, match="register_hook: the hook changed the gradient's dtype"):
        z = x * 2
        z.register_hook(lambda g: g.double())
        z.sum().backward()
    # torch's optimizer-in-backward hook reads p.grad, which retrograd never fills: said so
    with pytest.raises(rg.AutodiffError, match="register_post_accumulate_grad_hook: gradients"):
        x.register_post_accumulate_grad_hook(lambda p: None)


def test_a_hook_on_a_data_parallel_parameter_runs_before_the_all_reduce():
    """A hook on a parameter synced by data parallel runs on each device's own gradient, then
    the all-reduce sums the hooked gradients (torch's DistributedDataParallel reduces in
    post-accumulate hooks, after the tensor's hooks)."""
    from retrograd import distributed as dist
    from test_distributed_local import devices_of, on_devices, values

    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], dtype=np.float32)
    devices = devices_of(2)

    def run(i, device, distributed):
        w = rg.tensor(w0, device=device)
        w = w.set_distributed("w") if distributed else w.require_grad()
        w.register_hook(lambda g: g.clamp(-1, 1))
        x = rg.tensor(np.full((2, 2), 3.0 * (i + 1), np.float32), device=device)
        return w.grad((x @ w).pow(2).sum().backward()).numpy()

    unsynced = [run(i, d, False) for i, d in enumerate(devices)]
    assert np.abs(unsynced[0]).max() == 1.0  # the hook clipped each device's gradient
    config = dist.DistributedConfig(dist.ReduceOperation.SUM, timeout=10.0)
    with dist.DistributedContext(devices, config):
        synced = values(on_devices(devices, lambda i, d: run(i, d, True)))
    for grad in synced:
        np.testing.assert_allclose(grad, np.sum(unsynced, axis=0), rtol=1e-6)
