"""The lean step of SGD, Adam(W) and RMSprop (``optim.optimizers.LeanStep``): the eager step's
work on the inner backend's raw values, which must leave exactly what the general path leaves
(parameters, state, step counts, gradients after the step, leaves), while making no tensor per
parameter beyond its new step count; and the torch backend's Adam in compiled passes around
torch's own square root, torch's bits."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.optim import optimizers
from retrograd.optim.optimizers import Tensor

torch = pytest.importorskip("torch")

OPTIMIZERS = {
    "sgd": lambda p: optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "sgd_nesterov": lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    "adam_l2": lambda p: optim.Adam(p, lr=1e-2, weight_decay=0.05),
    "adamw": lambda p: optim.AdamW(p, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1),
    "rmsprop": lambda p: optim.RMSprop(p, lr=1e-2),
    "rmsprop_all": lambda p: optim.RMSprop(
        p, lr=1e-2, alpha=0.9, weight_decay=0.01, momentum=0.8, centered=True
    ),
}


def _groups(model):
    weights = [p for name, p in model.named_parameters() if name.endswith("weight")]
    others = [p for name, p in model.named_parameters() if not name.endswith("weight")]
    return [{"params": weights}, {"params": others, "lr": 3e-3}]


def _train(make, lean: bool, monkeypatch):
    """Five steps of a small model (two groups, a parameter without gradient at one step,
    ``zero_grad(set_to_none=False)``, a learning rate set between steps, a graph kept across
    a step): what a program can read afterwards."""
    with monkeypatch.context() as patch:
        if not lean:  # the general path, parameter by parameter
            patch.setattr(optimizers.LeanStep, "of", staticmethod(lambda optimizer, grads: None))
        rg.seed(0)
        model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3), nn.LayerNorm(3))
        x = rg.tensor(np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32))
        optimizer = make(_groups(model))
        seen = []
        kept = None
        for step in range(5):
            out = model(x)
            # at step 2 the last layer's bias gets no gradient (torch's zero kept by
            # zero_grad(set_to_none=False) still steps it)
            loss = (out[:, :2] ** 2).mean() if step == 2 else (out**2).mean()
            if step == 1:
                kept = model(x).sum()  # a graph recorded before the step, backpropagated after
            grads = loss.backward()
            optimizer.step(grads)
            optimizer.zero_grad(set_to_none=False)
            for g in optimizer.param_groups:
                g["lr"] = g["lr"] * 0.9
            seen.append([_array(p.grad(grads)) for p in model.parameters()])
        later = kept.backward()
        seen.append([_array(p.grad(later)) for p in model.parameters()])
        state = [
            {key: _array(value) for key, value in optimizer.state[p].items()}
            for p in model.parameters()
        ]
        leaves = [(p.is_leaf, p.requires_grad) for p in model.parameters()]
        values = [_array(p) for p in model.parameters()]
        return values, state, seen, leaves, optimizer.state_dict()["state"]


def _array(t):
    return None if t is None else np.asarray(t.numpy()).copy()


def _same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))
    elif isinstance(a, rg.Tensor):
        _same(_array(a), _array(b))
    else:
        assert a == b


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_lean_step_leaves_what_the_general_step_leaves(name, monkeypatch):
    lean = _train(OPTIMIZERS[name], True, monkeypatch)
    general = _train(OPTIMIZERS[name], False, monkeypatch)
    _same(lean, general)


def test_lean_step_is_taken_and_makes_one_tensor_per_parameter(monkeypatch):
    # the general path made about eight tensors per parameter and step (the gradient, the
    # state's buffers rewrapped, the kernel's results, the value assigned): on a small model
    # that Python cost more than the update itself
    rg.seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    x = rg.tensor(np.ones((2, 4), dtype=np.float32))
    optimizer = optim.AdamW(model.parameters(), lr=1e-2)
    optimizer.step((model(x) ** 2).sum().backward())  # the state made
    grads = (model(x) ** 2).sum().backward()
    made = []
    original = Tensor.__init__

    def counting(self, *args, **kwargs):
        made.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Tensor, "__init__", counting)
    optimizer.step(grads)
    monkeypatch.undo()
    count = len(list(model.parameters()))
    assert len(made) <= count  # the new step counts alone
    assert all(optimizer.state[p]["step"].item() == 2.0 for p in model.parameters())


def _torch_adam_lines(value, grad, first, second, step, lr, beta1, beta2, eps, wd, decoupled):
    """torch.optim.Adam's single-tensor lines (``_single_tensor_adam``), on torch tensors."""
    if wd:
        if decoupled:
            value.mul_(1 - lr * wd)
        else:
            grad = grad.add(value, alpha=wd)
    first.lerp_(grad, 1 - beta1)
    second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denominator = (second.sqrt() / ((1 - beta2**step) ** 0.5)).add_(eps)
    value.addcdiv_(first, denominator, value=-(lr / (1 - beta1**step)))


@pytest.mark.backend_independent("calls the torch backend's Adam kernel on torch tensors")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("decay", ["none", "l2", "decoupled"])
@pytest.mark.parametrize("size", [(), (1,), (7, 9), (70000,)])
def test_torch_backends_compiled_adam_has_torchs_bits(dtype, decay, size):
    from retrograd.backend import numpy_optim, torch_optim

    numpy_optim._loops()  # the compiled passes, whatever the size
    kernels = rg.TorchBackend("cpu")
    rng = np.random.default_rng(3)
    wd, decoupled = {"none": (0.0, False), "l2": (0.05, False), "decoupled": (0.1, True)}[decay]
    tdtype = getattr(torch, dtype)
    tensors = [torch.from_numpy(rng.standard_normal(size)).to(tdtype) for _ in range(3)]
    tensors[2] = tensors[2].abs()  # the second moment
    ours = [t.clone() for t in tensors]
    theirs = [t.clone() for t in tensors]
    for step in range(1, 6):
        grad = torch.from_numpy(rng.standard_normal(size)).to(tdtype)
        # lerp's two formulas: a weight under 1/2 and one of 1/2 or more
        beta1 = 0.9 if step % 2 else 0.3
        hyper = (step, 1e-2, beta1, 0.99, 1e-8, wd, decoupled)
        kernels.adam_update(*ours[:1], grad, *ours[1:], *hyper, True)
        _torch_adam_lines(*theirs[:1], grad, *theirs[1:], *hyper)
    assert torch_optim._loops_take(*ours[:1], grad, *ours[1:])  # the compiled passes ran
    for mine, expected in zip(ours, theirs):
        assert torch.equal(mine, expected)
        assert np.array_equal(
            mine.numpy().reshape(-1).view(np.uint8), expected.numpy().reshape(-1).view(np.uint8)
        )
