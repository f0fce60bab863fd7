# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the FGSM tutorial (pytorch/tutorials ``beginner_source/fgsm_tutorial.py``), on a smaller
  MNIST net: ``data.requires_grad = True`` on an input, ``output.max(1, keepdim=True)[1]``
  compared by ``.item()``, ``data.grad.data``, ``denorm`` through ``view(1, -1, 1, 1)`` of
  list-made tensors, ``sign()``, ``torch.clamp(x, 0, 1)``, a normalization applied to the
  perturbed batch, adversarial examples kept as ``squeeze().detach().cpu().numpy()``;
- Grad-CAM as it is commonly written: ``register_forward_hook`` and
  ``register_full_backward_hook`` on a conv layer saving ``output.detach()`` and
  ``grad_output[0].detach()``, ``torch.zeros_like(output).scatter_(1, idx.unsqueeze(1), 1.0)``
  seeding ``output.backward(gradient=one_hot, retain_graph=True)``, channel weights by
  ``mean(dim=(2, 3), keepdim=True)``, ``F.interpolate(mode="bilinear")`` to the input size,
  min-max normalization by ``amin``/``amax`` over two dims, and the hooks' ``remove()``.

The defect found: ``Tensor.backward`` did not take torch's keyword ``gradient=`` for its seed
(only retrograd's ``grad``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import both

ATTACKS_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.fc1 = nn.Linear(8 * 5 * 5, 16)
        self.fc2 = nn.Linear(16, 10)
    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output

def denorm(batch, mean=[0.1307], std=[0.3081]):
    if isinstance(mean, list):
        mean = torch.tensor(mean).to(device)
    if isinstance(std, list):
        std = torch.tensor(std).to(device)
    return batch * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)

def fgsm_attack(image, epsilon, data_grad):
    sign_data_grad = data_grad.sign()
    perturbed_image = image + epsilon*sign_data_grad
    perturbed_image = torch.clamp(perturbed_image, 0, 1)
    return perturbed_image

class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std
    def __call__(self, x):
        return (x - self.mean[0]) / self.std[0]

device = "cpu"

def test( model, device, test_loader, epsilon ):
    correct = 0
    adv_examples = []
    records = []
    for data, target in test_loader:
        data, target = data.to(device), target.to(device)
        data.requires_grad = True
        output = model(data)
        init_pred = output.max(1, keepdim=True)[1] # get the index of the max log-probability
        if init_pred.item() != target.item():
            records.append(-1)
            continue
        loss = F.nll_loss(output, target)
        model.zero_grad()
        loss.backward()
        data_grad = data.grad.data
        data_denorm = denorm(data)
        perturbed_data = fgsm_attack(data_denorm, epsilon, data_grad)
        perturbed_data_normalized = Normalize((0.1307,), (0.3081,))(perturbed_data)
        output = model(perturbed_data_normalized)
        final_pred = output.max(1, keepdim=True)[1] # get the index of the max log-probability
        records.append(perturbed_data.detach().numpy())
        if final_pred.item() == target.item():
            correct += 1
            if epsilon == 0 and len(adv_examples) < 5:
                adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
                adv_examples.append( (init_pred.item(), final_pred.item(), adv_ex) )
        else:
            if len(adv_examples) < 5:
                adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
                adv_examples.append( (init_pred.item(), final_pred.item(), adv_ex) )
    final_acc = correct/float(len(test_loader))
    records.append(final_acc)
    records.append([a[:2] for a in adv_examples])
    return records

class GradCAM:
    def __init__(self, model, target_layer):
        self.model = model
        self.gradients = None
        self.activations = None
        self.handles = [
            target_layer.register_forward_hook(self.save_activation),
            target_layer.register_full_backward_hook(self.save_gradient),
        ]
    def save_activation(self, module, input, output):
        self.activations = output.detach()
    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_output[0].detach()
    def remove(self):
        for h in self.handles:
            h.remove()
    def __call__(self, x, class_idx=None):
        self.model.eval()
        output = self.model(x)
        if class_idx is None:
            class_idx = output.argmax(dim=1)
        self.model.zero_grad()
        one_hot = torch.zeros_like(output)
        one_hot.scatter_(1, class_idx.unsqueeze(1), 1.0)
        output.backward(gradient=one_hot, retain_graph=True)
        weights = self.gradients.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * self.activations).sum(dim=1, keepdim=True))
        cam = F.interpolate(cam, size=x.shape[2:], mode="bilinear", align_corners=False)
        cam = cam - cam.amin(dim=(2, 3), keepdim=True)
        cam = cam / (cam.amax(dim=(2, 3), keepdim=True) + 1e-8)
        return cam, class_idx
"""

ATTACKS_STEP = [
    (
        "        model.zero_grad()\n        loss.backward()\n        data_grad = data.grad.data",
        "        model.zero_grad()\n        grads = loss.backward()\n        data_grad = data.grad(grads).data",
    ),
    (
        "        output.backward(gradient=one_hot, retain_graph=True)",
        "        grads = output.backward(gradient=one_hot, retain_graph=True)",
    ),
]


def _run(lib, names, initial, images):
    torch.manual_seed(0)
    model = names["Net"]().double()
    if initial is None:
        initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    else:
        model.load_state_dict(initial)
    model.eval()
    normalized = (images - 0.1307) / 0.3081
    with lib.no_grad():
        predicted = model(lib.tensor(normalized)).argmax(1).numpy().copy()
    predicted[::3] = (predicted[::3] + 1) % 10  # a third misclassified from the start
    loader = [
        (lib.tensor(normalized[i : i + 1]), lib.tensor(predicted[i : i + 1])) for i in range(6)
    ]
    records = names["test"](model, "cpu", loader, 0.1)
    cam = names["GradCAM"](model, model.conv2)
    heat, index = cam(lib.tensor(normalized[:3]))
    cam.remove()
    return initial, [*records, heat.detach().numpy(), index.numpy()]


def test_fgsm_and_grad_cam_match_torch():
    theirs, ours = both(ATTACKS_SOURCE, ATTACKS_STEP)
    images = np.random.default_rng(0).random((6, 1, 14, 14))
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
