"""Real ports, round 67 (the harness: ``tests/real_ports.py``): certified training by interval
bound propagation, a program written here in the style of huanzhang12/CROWN-IBP (bounded
layers converted from a plain ``nn.Sequential``, a specification matrix folded into the last
layer, a robust cross-entropy over the margins' lower bounds, epsilon and kappa ramps), on
synthetic images, against torch's run of the same program from the same weights and draws.

- bounded layers: ``BoundLinear``/``BoundConv2d``/``BoundReLU``/``BoundFlatten`` subclasses
  built by a ``convert`` classmethod that copies ``weight.data``/``bias.data`` from the plain
  layer (``copy_`` under ``no_grad``), a ``BoundSequential`` dispatching on
  ``isinstance`` over ``self._modules.values()``;
- interval arithmetic: midpoint and radius ``(h_U + h_L) / 2``, ``w.abs()``, ``F.conv2d`` of
  the radius with ``self.weight.abs()`` and no bias, ``torch.addmm`` for the unbatched layer,
  and, with the specification ``C`` folded in, ``C.matmul(self.weight)`` (a batched weight)
  applied by ``w.matmul(mid.unsqueeze(-1)).squeeze(-1)``; input boxes clipped to the data
  range by ``torch.max``/``torch.min`` against per-channel ``view(1, -1, 1, 1)`` buffers, and
  epsilon divided by the normalisation's ``std``;
- the specification: ``torch.eye(n).type_as(data)[labels].unsqueeze(1) -
  torch.eye(n).type_as(data).unsqueeze(0)``, the rows of the label itself dropped by a
  boolean mask ``~(labels.unsqueeze(1) == torch.arange(n).type_as(labels).unsqueeze(0))`` and
  ``c[I].view(batch, n - 1, n)``;
- the loss: ``lb_padded = torch.cat((torch.zeros(size=(lb.size(0), 1), dtype=lb.dtype,
  device=lb.device), lb), dim=1)`` and ``CrossEntropyLoss()(-lb_padded, fake_labels)`` with
  ``torch.zeros(size=(...,), dtype=torch.int64)``, mixed by kappa with the natural
  cross-entropy; verified errors by ``(lb < 0).any(dim=1).sum().item()``, margins of the
  natural logits by ``logits.gather(1, labels[:, None]) - logits``;
- schedules: a linear epsilon ramp and a kappa ramp of our own, Nesterov ``SGD`` with weight
  decay and ``MultiStepLR``, ``clip_grad_norm_``. (Not ``Adam``: where a unit's lower bound
  is dead and its upper bound is not, the weight's gradient is two terms that cancel exactly,
  which each library rounds to 0 or to about 5e-10, and Adam turns that residue into steps of
  its learning rate's size: measured, 1.6e-4 apart after 12 steps with gradients equal to
  1e-8.);
- evaluation under ``torch.no_grad()``: natural and verified error, a PGD attack outside it
  (``torch.autograd.grad`` of the loss with respect to the input, ``x_adv.detach() + alpha *
  grad.sign()``, a random start by ``torch.rand(*data.shape)``, the
  projection by ``torch.min(torch.max(...))``), the penultimate features' box from the prefix
  ``model[:-1]`` (a ``BoundSequential`` again, with its ``interval_range``), the bounds
  recomputed in float64 by
  ``copy.deepcopy(model).double()``, and the ``state_dict`` round trip into a freshly converted
  model by ``load_state_dict``.

The lines changed for the port: the ``import`` lines and the gradient lines.

The regression guarded (``tests/test_ports67_fixes.py``): a slice of a ``Sequential`` (or
``ModuleList``) subclass was a plain ``Sequential``, so ``model[:-1].interval_range`` failed.
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

IBP_SOURCE = """
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import CrossEntropyLoss


class BoundFlatten(nn.Module):
    def __init__(self):
        super(BoundFlatten, self).__init__()

    def forward(self, x):
        self.shape = x.size()[1:]
        return x.view(x.size(0), -1)

    def interval_propagate(self, h_U, h_L, C=None):
        return h_U.view(h_U.size(0), -1), h_L.view(h_L.size(0), -1)


class BoundLinear(nn.Linear):
    def __init__(self, in_features, out_features, bias=True):
        super(BoundLinear, self).__init__(in_features, out_features, bias)

    @staticmethod
    def convert(linear_layer):
        l = BoundLinear(linear_layer.in_features, linear_layer.out_features,
                        linear_layer.bias is not None)
        with torch.no_grad():
            l.weight.copy_(linear_layer.weight.data)
            l.bias.copy_(linear_layer.bias.data)
        return l

    def interval_propagate(self, h_U, h_L, C=None):
        mid = (h_U + h_L) / 2.0
        diff = (h_U - h_L) / 2.0
        if C is None:
            center = torch.addmm(self.bias, mid, self.weight.t())
            deviation = diff.matmul(self.weight.abs().t())
            return center + deviation, center - deviation
        # the specification folded into the last layer: one weight per example
        w = C.matmul(self.weight)
        b = C.matmul(self.bias)
        center = w.matmul(mid.unsqueeze(-1)).squeeze(-1) + b
        deviation = w.abs().matmul(diff.unsqueeze(-1)).squeeze(-1)
        return center + deviation, center - deviation


class BoundConv2d(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
        super(BoundConv2d, self).__init__(in_channels, out_channels, kernel_size,
                                          stride=stride, padding=padding, bias=bias)

    @staticmethod
    def convert(l):
        nl = BoundConv2d(l.in_channels, l.out_channels, l.kernel_size, l.stride, l.padding,
                         l.bias is not None)
        nl.weight.data.copy_(l.weight.data)
        nl.bias.data.copy_(l.bias.data)
        return nl

    def interval_propagate(self, h_U, h_L, C=None):
        mid = (h_U + h_L) / 2.0
        diff = (h_U - h_L) / 2.0
        center = F.conv2d(mid, self.weight, self.bias, self.stride, self.padding)
        deviation = F.conv2d(diff, self.weight.abs(), None, self.stride, self.padding)
        return center + deviation, center - deviation


class BoundReLU(nn.ReLU):
    def __init__(self, inplace=False):
        super(BoundReLU, self).__init__(inplace)

    @staticmethod
    def convert(act_layer):
        return BoundReLU(act_layer.inplace)

    def interval_propagate(self, h_U, h_L, C=None):
        return F.relu(h_U), F.relu(h_L)


class BoundSequential(nn.Sequential):
    def __init__(self, *args):
        super(BoundSequential, self).__init__(*args)

    @staticmethod
    def convert(sequential_model):
        layers = []
        for l in sequential_model:
            if isinstance(l, nn.Linear):
                layers.append(BoundLinear.convert(l))
            elif isinstance(l, nn.Conv2d):
                layers.append(BoundConv2d.convert(l))
            elif isinstance(l, nn.ReLU):
                layers.append(BoundReLU.convert(l))
            elif isinstance(l, nn.Flatten):
                layers.append(BoundFlatten())
            else:
                raise ValueError("unsupported layer {}".format(type(l).__name__))
        return BoundSequential(*layers)

    def interval_range(self, x_U, x_L, C=None):
        h_U, h_L = x_U, x_L
        modules = list(self._modules.values())
        for i, module in enumerate(modules):
            last = i == len(modules) - 1
            h_U, h_L = module.interval_propagate(h_U, h_L, C if last else None)
        return h_U, h_L


def model_cnn_small(in_ch=1, in_dim=6, n_classes=3):
    return nn.Sequential(
        nn.Conv2d(in_ch, 4, 3, stride=1, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * (in_dim // 2) * (in_dim // 2), 16),
        nn.ReLU(),
        nn.Linear(16, n_classes),
    )


class LinearScheduler:
    # a value ramped linearly from `start` to `end` between two steps
    def __init__(self, start, end, start_step, end_step):
        self.start, self.end = start, end
        self.start_step, self.end_step = start_step, end_step

    def get(self, step):
        if step < self.start_step:
            return self.start
        if step >= self.end_step:
            return self.end
        t = (step - self.start_step) / float(self.end_step - self.start_step)
        return self.start + t * (self.end - self.start)


mean = torch.tensor([0.45])
std = torch.tensor([0.25])
data_max = ((1.0 - mean) / std).view(1, -1, 1, 1)
data_min = ((0.0 - mean) / std).view(1, -1, 1, 1)
num_class = 3


def specification(labels, data):
    c = torch.eye(num_class).type_as(data)[labels].unsqueeze(1) - torch.eye(
        num_class).type_as(data).unsqueeze(0)
    # remove the label's own row, which is all zeros
    I = ~(labels.data.unsqueeze(1) == torch.arange(num_class).type_as(labels.data).unsqueeze(0))
    return c[I].view(data.size(0), num_class - 1, num_class)


def bounds(model, data, labels, eps):
    eps = eps / std.view(1, -1, 1, 1)
    data_ub = torch.min(data + eps, data_max)
    data_lb = torch.max(data - eps, data_min)
    c = specification(labels, data)
    ub, lb = model.interval_range(x_U=data_ub, x_L=data_lb, C=c)
    return ub, lb


def robust_loss(model, data, labels, eps):
    ub, lb = bounds(model, data, labels, eps)
    lb_padded = torch.cat((torch.zeros(size=(lb.size(0), 1), dtype=lb.dtype,
                                       device=lb.device), lb), dim=1)
    fake_labels = torch.zeros(size=(lb.size(0),), dtype=torch.int64, device=lb.device)
    robust_ce = CrossEntropyLoss()(-lb_padded, fake_labels)
    verified_err = (lb < 0).any(dim=1).sum().item() / data.size(0)
    return robust_ce, verified_err, lb


def make_batch(n):
    # three classes of 6x6 images: a bright row, a bright column, a bright diagonal
    labels = torch.randint(0, num_class, (n,))
    images = torch.rand(n, 1, 6, 6) * 0.3
    for i in range(n):
        k = int(labels[i])
        if k == 0:
            images[i, 0, 2, :] += 0.6
        elif k == 1:
            images[i, 0, :, 3] += 0.6
        else:
            images[i, 0].diagonal().add_(0.6)
    return (images - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1), labels


def pgd(model, data, labels, eps, alpha, steps):
    eps = eps / std.view(1, -1, 1, 1)
    alpha = alpha / std.view(1, -1, 1, 1)
    x_adv = data + (2 * torch.rand(*data.shape) - 1) * eps
    x_adv = torch.min(torch.max(x_adv, data_min), data_max)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(model(x_adv), labels)
        grad, = torch.autograd.grad(loss, [x_adv])
        x_adv = x_adv.detach() + alpha * grad.sign()
        x_adv = torch.min(torch.max(x_adv, data - eps), data + eps)
        x_adv = torch.min(torch.max(x_adv, data_min), data_max)
    return x_adv.detach()


base = model_cnn_small()
initialize(base)
model = BoundSequential.convert(base)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                            weight_decay=5e-4)
lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 3], gamma=0.5)
eps_scheduler = LinearScheduler(0.0, 0.1, 1, 7)
kappa_scheduler = LinearScheduler(1.0, 0.5, 1, 7)

batches = [make_batch(8) for _ in range(3)]
step = 0
for epoch in range(4):
    model.train()
    for data, labels in batches:
        eps = eps_scheduler.get(step)
        kappa = kappa_scheduler.get(step)
        output = model(data)
        regular_ce = CrossEntropyLoss()(output, labels)
        nat_err = (output.argmax(dim=1) != labels).sum().item() / data.size(0)
        if eps > 0:
            robust_ce, verified_err, lb = robust_loss(model, data, labels, eps)
            loss = robust_ce * (1 - kappa) + regular_ce * kappa
        else:
            robust_ce, verified_err = torch.tensor(0.0), 1.0
            loss = regular_ce
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 8.0)
        optimizer.step()
        step += 1
        record.append([loss.item(), regular_ce.item(), robust_ce.item(), nat_err,
                       verified_err, eps, kappa])
    lr_scheduler.step()
    print("epoch {} lr {:.5f} loss {:.4f}".format(epoch, lr_scheduler.get_last_lr()[0],
                                                  loss.item()))

record.append(params_of(model))

state = copy.deepcopy(model.state_dict())
restored = BoundSequential.convert(model_cnn_small())
restored.load_state_dict(state)
restored.eval()

test_data, test_labels = make_batch(12)
with torch.no_grad():
    logits = restored(test_data)
    margins = logits.gather(1, test_labels[:, None]) - logits
    record.append(margins.numpy().copy())
    for eps in (0.02, 0.1):
        robust_ce, verified_err, lb = robust_loss(restored, test_data, test_labels, eps)
        record.append([robust_ce.item(), verified_err])
        record.append(lb.numpy().copy())
    # the box of the penultimate features: a prefix of the bounded model, sliced
    features = restored[:-1]
    box = eps / std.view(1, -1, 1, 1)
    fu, fl = features.interval_range(torch.min(test_data + box, data_max),
                                     torch.max(test_data - box, data_min))
    record.append([type(features).__name__, len(features)])
    record.append((fu - fl).mean(dim=1).numpy().copy())
    exact = copy.deepcopy(restored).double()
    ub64, lb64 = bounds(exact, test_data.double(), test_labels, 0.1)
    record.append([lb64.dtype == torch.float64, (lb64.float() - lb).abs().max().item() < 1e-4])
    record.append(lb64.numpy().copy())

x_adv = pgd(restored, test_data, test_labels, 0.1, 0.04, 3)
with torch.no_grad():
    adv_logits = restored(x_adv)
    adv_err = (adv_logits.argmax(1) != test_labels).float().mean().item()
    lower = lb.min(dim=1).values
    # a sound bound: no example verified at 0.1 is broken by the attack
    broken = (adv_logits.argmax(1) != test_labels) & (lower > 0)
    record.append([adv_err, int(broken.sum())])
    record.append(x_adv.numpy().copy())
"""

IBP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 8.0)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 8.0)\n"
        "        optimizer.step(grads)\n",
    ),
]


def test_ibp_certified_training_bounds_and_attacks_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        IBP_SOURCE, IBP_STEPS, capsys, 6702, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 12 + 1 + 1 + 4 + 2 + 2 + 2
    assert theirs[-6] == ["BoundSequential", 7]
    assert their_log == our_log and their_log.count("\n") == 4
    assert theirs[-4] == [True, True]  # float64 bounds, agreeing with the float32 ones
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
