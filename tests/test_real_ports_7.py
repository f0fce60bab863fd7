"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of the PyTorch FGSM tutorial and of Grad-CAM as it is commonly written, on a small digit
net, run under torch and, ported, under retrograd from the same weights.

- A fast-gradient-sign attack: ``x.requires_grad = True`` on an input,
  ``out.max(1, keepdim=True)[1]`` compared by ``.item()``, ``x.grad.data``, un-normalizing
  through ``view(1, -1, 1, 1)`` of tensors made from lists, ``sign()``,
  ``torch.clamp(x, 0, 1)``, the normalization applied again to the perturbed batch, and
  adversarial examples kept as ``squeeze().detach().cpu().numpy()``;
- Grad-CAM: ``register_forward_hook`` and ``register_full_backward_hook`` on a conv layer
  keeping ``output.detach()`` and ``grad_output[0].detach()``,
  ``torch.zeros_like(out).scatter_(1, idx.unsqueeze(1), 1.0)`` seeding
  ``out.backward(gradient=seed, retain_graph=True)``, channel weights by
  ``mean(dim=(2, 3), keepdim=True)``, ``F.interpolate(mode="bilinear")`` to the input size,
  min-max normalization by ``amin``/``amax`` over two dims, and the hooks' ``remove()``.

The regression guarded: ``Tensor.backward`` did not take torch's keyword ``gradient=`` for its
seed (only retrograd's ``grad``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import both

ATTACKS_SOURCE = """
MEAN, STD = [0.13], [0.31]
device = "cpu"

class DigitNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Conv2d(1, 3, 3)
        self.more = nn.Conv2d(3, 6, 3)
        self.drop = nn.Dropout(0.25)
        self.hidden = nn.Linear(6 * 4 * 4, 12)
        self.classes = nn.Linear(12, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.more(F.relu(self.features(x)))), 2)
        x = F.relu(self.hidden(torch.flatten(self.drop(x), 1)))
        return F.log_softmax(self.classes(x), dim=1)

def unnormalize(batch, mean=MEAN, std=STD):
    # back to [0, 1] pixels; mean and std per channel, given as lists
    mean = torch.tensor(mean).to(device) if isinstance(mean, list) else mean
    std = torch.tensor(std).to(device) if isinstance(std, list) else std
    return std.view(1, -1, 1, 1) * batch + mean.view(1, -1, 1, 1)

def normalize(pixels):
    return (pixels - MEAN[0]) / STD[0]

def sign_step(pixels, eps, grad):
    return torch.clamp(pixels + eps * grad.sign(), 0, 1)

def attack(model, loader, eps):
    kept, log, survived = [], [], 0
    for x, label in loader:
        x, label = x.to(device), label.to(device)
        x.requires_grad = True
        out = model(x)
        before = out.max(1, keepdim=True)[1]
        if before.item() != label.item():
            log.append(-1)  # already wrong: nothing to attack
            continue
        loss = F.nll_loss(out, label)
        model.zero_grad()
        loss.backward()
        moved = sign_step(unnormalize(x), eps, x.grad.data)
        after = model(normalize(moved)).max(1, keepdim=True)[1]
        log.append(moved.detach().numpy())
        if after.item() == label.item():
            survived += 1
        elif len(kept) < 4:
            kept.append((before.item(), after.item(), moved.squeeze().detach().cpu().numpy()))
    log.append(survived / float(len(loader)))
    log.append([list(example[:2]) for example in kept])
    return log

class ClassActivationMap:
    def __init__(self, model, layer):
        self.model, self.acts, self.grads = model, None, None
        self.hooks = [
            layer.register_forward_hook(self.keep_acts),
            layer.register_full_backward_hook(self.keep_grads),
        ]

    def keep_acts(self, module, inputs, output):
        self.acts = output.detach()

    def keep_grads(self, module, grad_in, grad_out):
        self.grads = grad_out[0].detach()

    def close(self):
        for hook in self.hooks:
            hook.remove()

    def __call__(self, x, target=None):
        self.model.eval()
        out = self.model(x)
        target = out.argmax(dim=1) if target is None else target
        self.model.zero_grad()
        seed = torch.zeros_like(out).scatter_(1, target.unsqueeze(1), 1.0)
        out.backward(gradient=seed, retain_graph=True)
        channel_weights = self.grads.mean(dim=(2, 3), keepdim=True)
        heat = F.relu((channel_weights * self.acts).sum(dim=1, keepdim=True))
        heat = F.interpolate(heat, size=x.shape[2:], mode="bilinear", align_corners=False)
        heat = heat - heat.amin(dim=(2, 3), keepdim=True)
        return heat / (heat.amax(dim=(2, 3), keepdim=True) + 1e-8), target
"""

ATTACKS_STEP = [
    (
        "        loss.backward()\n        moved = sign_step(unnormalize(x), eps, x.grad.data)",
        "        grads = loss.backward()\n"
        "        moved = sign_step(unnormalize(x), eps, x.grad(grads).data)",
    ),
    (
        "        out.backward(gradient=seed, retain_graph=True)",
        "        grads = out.backward(gradient=seed, retain_graph=True)",
    ),
]


def _run(lib, names, initial, images):
    torch.manual_seed(0)
    model = names["DigitNet"]().double()
    if initial is None:
        initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    else:
        model.load_state_dict(initial)
    model.eval()
    normalized = (images - 0.13) / 0.31
    with lib.no_grad():
        predicted = model(lib.tensor(normalized)).argmax(1).numpy().copy()
    predicted[::3] = (predicted[::3] + 1) % 10  # a third misclassified from the start
    loader = [
        (lib.tensor(normalized[i : i + 1]), lib.tensor(predicted[i : i + 1])) for i in range(6)
    ]
    records = names["attack"](model, loader, 0.1)
    cam = names["ClassActivationMap"](model, model.more)
    heat, index = cam(lib.tensor(normalized[:3]))
    cam.close()
    return initial, [*records, heat.detach().numpy(), index.numpy()]


def test_fgsm_and_grad_cam_match_torch():
    theirs, ours = both(ATTACKS_SOURCE, ATTACKS_STEP)
    images = np.random.default_rng(0).random((6, 1, 12, 12))
    initial, expected = _run(torch, theirs, None, images)
    _, got = _run(rg, ours, initial, images)
    assert len(got) == len(expected)
    for mine, reference in zip(got, expected):
        if isinstance(reference, list):  # the (initial, final) predictions of the examples
            assert mine == reference
        else:
            np.testing.assert_allclose(mine, reference, rtol=1e-9, atol=1e-12)


def test_backward_takes_torch_s_gradient_keyword():
    x = rg.tensor([1.0, 2.0]).require_grad()
    y = x * x
    grads = y.backward(gradient=rg.tensor([1.0, 0.5]))
    assert x.grad(grads).tolist() == [2.0, 2.0]
    with pytest.raises(rg.DTypeError, match="twice"):
        (x * x).backward(rg.ones(2), gradient=rg.ones(2))
