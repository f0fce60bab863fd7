"""Real ports, round 70 (the harness: ``tests/real_ports.py``): multi-task learning, two
programs written here, each against torch's run of the same program from the same weights and
draws:

- in the style of the GradNorm reimplementations (brianlan/pytorch-grad-norm): learnable task
  weights beside the model, trained by the gap between each task's weighted gradient norm at
  the last shared layer and its target from the relative training rates, then renormalised
  to sum to the number of tasks, on three synthetic tasks of one input (regression,
  classification, multi-label);
- in the style of WeiChengTseng/Pytorch-PCGrad with homoscedastic uncertainty weighting
  (Kendall et al.): each task's gradient projected off those it conflicts with, in an order
  shuffled by Python's ``random``, merged by a mask of the shared parameters, the task losses
  weighted by learned log-variances, on a two-head 1-D conv network.

The GradNorm program reaches:

- the model: a shared trunk (``nn.Sequential`` with ``ReLU(inplace=True)`` and
  ``LayerNorm``) and task heads in an ``nn.ModuleDict``, returning a dict of outputs; the last
  shared layer picked by ``self.trunk.layers[2]``;
- the losses: ``MSELoss``, ``CrossEntropyLoss``, ``BCEWithLogitsLoss(pos_weight=...)`` (a
  buffer in the ``state_dict``), stacked by ``torch.stack``; targets made by fancy column
  indexing ``x[:, [0, 2, 4, 5]] > 0``, ``.long()`` sums of comparisons, a column overwritten;
- GradNorm: ``torch.mul(weights, task_loss)``, ``loss.backward(retain_graph=True)``, the
  weights' gradient zeroed through ``.grad.data = .grad.data * 0.0``, per-task
  ``torch.autograd.grad(task_loss[i], W.parameters(), retain_graph=True)``, ``torch.norm`` of
  the weighted gradient, loss ratios through ``.data.cpu().numpy()`` and NumPy means, the
  target ``torch.tensor(..., requires_grad=False)`` from a NumPy array, ``torch.abs`` gap,
  the weights' gradient replaced by ``torch.autograd.grad(grad_norm_loss, weights)[0]``, and
  the renormalisation ``weights.data = weights.data * (n_tasks / torch.sum(weights.data,
  dim=0))``;
- training: ``Adam`` over model and weights, ``zero_grad(set_to_none=True)``, ``StepLR``;
  the checkpoint (``state_dict``, the scheduler's, a NumPy array) through ``torch.save`` to a
  buffer and ``torch.load(..., weights_only=False)``, ``load_state_dict(strict=True)``'s
  missing and unexpected keys;
- evaluation under ``torch.no_grad()``: a confusion matrix by ``index_put_((rows, cols),
  torch.ones_like(pred), accumulate=True)``, multi-label hits by ``(probs > 0.5) ==
  targets.bool()``, ``torch.where`` of large errors, ``torch.softmax`` of the task weights.

The PCGrad program reaches: an optimizer wrapper class with a ``@property``; per-task
``torch.autograd.grad(obj, params, retain_graph=True, allow_unused=True)`` (``None`` for the
other head's parameters), flattened by ``torch.cat`` of ``flatten()``s with
``torch.zeros_like``/``ones_like`` presence masks, ``torch.stack(has_grads).prod(0).bool()``;
``copy.deepcopy`` of a list of tensors, ``random.shuffle`` of a list of tensors,
``torch.dot``, the in-place projection ``g_i -= g_i_g_j * g_j / (g_j.norm() ** 2)`` behind a
0-d comparison; ``merged[shared] = ...`` and ``merged[~shared] = ...`` boolean-mask
assignment; unflattening by ``int(np.prod(shape))`` slices ``view(shape).clone()``; the
gradient installed by ``p.grad = g``; ``torch.where`` over a bool tensor for the weighting,
``torch.exp(-log_vars)``; ``Conv1d`` with ``dilation``, ``nn.GELU``,
``AdaptiveMaxPool1d``, ``nn.Flatten``; targets by ``max(-1).indices // 3`` and
``clamp(max=3)``; ``F.smooth_l1_loss(beta=0.5)``, ``F.cross_entropy``, ``list(weighted)`` of
a 1-D tensor; ``Adam`` under ``LambdaLR``, ``zero_grad(set_to_none=True)``;
``F.cosine_similarity``; the optimizer's ``state_dict()["state"]``, a deep-copied model
state loaded into a fresh net, ``F.log_softmax`` and ``F.l1_loss`` under ``torch.no_grad()``.

The lines changed for the port: the ``import`` lines and the gradient lines (GradNorm's:
``grads = loss.backward(retain_graph=True)``, the weights' ``.grad`` assignments as
``weights.grad_replace(grads, ...)``, ``optimizer.step(grads)``; PCGrad's, where no backward
runs: the ``Gradients`` of a zero loss over the parameters, the merged gradient installed by
``p.grad_replace(grads, g)`` and given to the wrapped optimizer's ``step``).
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

GRADNORM_SOURCE = """import copy
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


class SharedTrunk(nn.Module):
    def __init__(self, in_dim=6, hidden=16):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.LayerNorm(hidden),
            nn.ReLU(),
        )

    def forward(self, x):
        return self.layers(x)


class MultiTaskNet(nn.Module):
    def __init__(self, in_dim=6, hidden=16, n_classes=3, n_labels=4):
        super().__init__()
        self.trunk = SharedTrunk(in_dim, hidden)
        self.heads = nn.ModuleDict({
            "depth": nn.Linear(hidden, 2),
            "segment": nn.Linear(hidden, n_classes),
            "attributes": nn.Linear(hidden, n_labels),
        })

    def forward(self, x):
        features = self.trunk(x)
        return {name: head(features) for name, head in self.heads.items()}

    def get_last_shared_layer(self):
        return self.trunk.layers[2]


class GradNormTrainer(nn.Module):
    # the task weights live next to the model, trained by the gradient-norm loss alone
    def __init__(self, model, n_tasks):
        super().__init__()
        self.model = model
        self.weights = nn.Parameter(torch.ones(n_tasks).float())
        self.mse_loss = nn.MSELoss()
        self.ce_loss = nn.CrossEntropyLoss()
        self.bce_loss = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0, 2.0, 1.0, 0.5]))

    def forward(self, x, targets):
        out = self.model(x)
        task_loss = [
            self.mse_loss(out["depth"], targets["depth"]),
            self.ce_loss(out["segment"], targets["segment"]),
            self.bce_loss(out["attributes"], targets["attributes"]),
        ]
        return torch.stack(task_loss), out


def make_data(n):
    x = torch.randn(n, 6)
    depth = torch.stack([x[:, 0] * 2.0 - x[:, 1], torch.sin(x[:, 2])], dim=1)
    segment = (x[:, 3] > 0.5).long() + (x[:, 3] > -0.5).long()
    attributes = (x[:, [0, 2, 4, 5]] > 0).float()
    attributes[:, 3] = ((x[:, 4] * x[:, 5]) > 0).float()
    return x, {"depth": depth, "segment": segment, "attributes": attributes}


n_tasks = 3
alpha = 1.5
net = MultiTaskNet()
initialize(net)
trainer = GradNormTrainer(net, n_tasks)
optimizer = torch.optim.Adam(trainer.parameters(), lr=0.02)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
X, targets = make_data(24)

initial_task_loss = None
for t in range(10):
    trainer.train()
    task_loss, _ = trainer(X, targets)
    weighted_task_loss = torch.mul(trainer.weights, task_loss)
    if t == 0:
        initial_task_loss = task_loss.data.cpu().numpy()
    loss = torch.sum(weighted_task_loss)
    optimizer.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    trainer.weights.grad.data = trainer.weights.grad.data * 0.0

    W = net.get_last_shared_layer()
    norms = []
    for i in range(len(task_loss)):
        gygw = torch.autograd.grad(task_loss[i], W.parameters(), retain_graph=True)
        norms.append(torch.norm(torch.mul(trainer.weights[i], gygw[0])))
    norms = torch.stack(norms)
    loss_ratio = task_loss.data.cpu().numpy() / initial_task_loss
    inverse_train_rate = loss_ratio / np.mean(loss_ratio)
    mean_norm = np.mean(norms.data.cpu().numpy())
    constant_term = torch.tensor(mean_norm * (inverse_train_rate ** alpha), requires_grad=False)
    grad_norm_loss = torch.sum(torch.abs(norms - constant_term))
    trainer.weights.grad = torch.autograd.grad(grad_norm_loss, trainer.weights)[0]
    optimizer.step()
    scheduler.step()

    normalize_coeff = n_tasks / torch.sum(trainer.weights.data, dim=0)
    trainer.weights.data = trainer.weights.data * normalize_coeff
    record.append([loss.item(), grad_norm_loss.item()] + task_loss.tolist())
    record.append({"weights": trainer.weights.detach().numpy().copy(),
                   "norms": norms.detach().numpy().copy(),
                   "ratio": np.asarray(loss_ratio, dtype=np.float64)})
    record.append(params_of(trainer))
    print("{}: loss {:.3f} gradnorm {:.3f} weights {}".format(
        t, loss.item(), grad_norm_loss.item(),
        " ".join("{:.2f}".format(w) for w in trainer.weights.tolist())))

buffer = io.BytesIO()
torch.save({"trainer": trainer.state_dict(), "scheduler": scheduler.state_dict(),
            "initial_task_loss": initial_task_loss}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer, weights_only=False)
restored = GradNormTrainer(MultiTaskNet(), n_tasks)
missing, unexpected = restored.load_state_dict(checkpoint["trainer"], strict=True)
restored.eval()
record.append([list(missing), list(unexpected), sorted(checkpoint["trainer"].keys())])
record.append(checkpoint["scheduler"]["last_epoch"])

X_test, targets_test = make_data(16)
with torch.no_grad():
    task_loss, out = restored(X_test, targets_test)
    record.append(task_loss.numpy().copy())
    pred = out["segment"].argmax(dim=-1)
    confusion = torch.zeros(3, 3, dtype=torch.long)
    confusion.index_put_((targets_test["segment"], pred), torch.ones_like(pred),
                         accumulate=True)
    record.append(confusion.numpy().copy())
    probs = torch.sigmoid(out["attributes"])
    hits = (probs > 0.5) == targets_test["attributes"].bool()
    record.append(hits.float().mean(dim=0).numpy().copy())
    depth_err = (out["depth"] - targets_test["depth"]).abs()
    record.append(torch.where(depth_err > 0.5, depth_err, torch.zeros_like(depth_err))
                  .sum(dim=0).numpy().copy())
    record.append(torch.softmax(restored.weights, 0).numpy().copy())
"""

GRADNORM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward(retain_graph=True)\n"
        "    trainer.weights.grad.data = trainer.weights.grad.data * 0.0\n",
        "    grads = loss.backward(retain_graph=True)\n"
        "    trainer.weights.grad_replace(grads, trainer.weights.grad(grads).data * 0.0)\n",
    ),
    (
        "    trainer.weights.grad = torch.autograd.grad(grad_norm_loss, trainer.weights)[0]\n"
        "    optimizer.step()\n",
        "    trainer.weights.grad_replace(\n"
        "        grads, torch.autograd.grad(grad_norm_loss, trainer.weights)[0]\n"
        "    )\n"
        "    optimizer.step(grads)\n",
    ),
]


def test_gradnorm_multi_task_training_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        GRADNORM_SOURCE,
        GRADNORM_STEPS,
        capsys,
        7004,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 3 * 10 + 7
    assert their_log == our_log and their_log.count("\n") == 10
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


PCGRAD_SOURCE = """import copy
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class PCGrad:
    # projects each task's gradient off the others it conflicts with, then merges them
    def __init__(self, optimizer, reduction="mean"):
        self._optim, self._reduction = optimizer, reduction
        self.conflicts = 0

    @property
    def optimizer(self):
        return self._optim

    def zero_grad(self):
        return self._optim.zero_grad(set_to_none=True)

    def step(self):
        return self._optim.step()

    def pc_backward(self, objectives, params):
        grads, shapes, has_grads = self._pack_grad(objectives, params)
        pc_grad = self._project_conflicting(grads, has_grads)
        pc_grad = self._unflatten_grad(pc_grad, shapes)
        self._set_grad(pc_grad, params)
        return pc_grad

    def _project_conflicting(self, grads, has_grads):
        shared = torch.stack(has_grads).prod(0).bool()
        pc_grad, num_task = copy.deepcopy(grads), len(grads)
        for g_i in pc_grad:
            random.shuffle(grads)
            for g_j in grads:
                g_i_g_j = torch.dot(g_i, g_j)
                if g_i_g_j < 0:
                    g_i -= g_i_g_j * g_j / (g_j.norm() ** 2)
                    self.conflicts += 1
        merged_grad = torch.zeros_like(grads[0])
        if self._reduction == "mean":
            merged_grad[shared] = torch.stack([g[shared] for g in pc_grad]).mean(dim=0)
        else:
            merged_grad[shared] = torch.stack([g[shared] for g in pc_grad]).sum(dim=0)
        merged_grad[~shared] = torch.stack([g[~shared] for g in pc_grad]).sum(dim=0)
        return merged_grad

    def _pack_grad(self, objectives, params):
        grads, shapes, has_grads = [], [], []
        for obj in objectives:
            task_grads = torch.autograd.grad(obj, params, retain_graph=True, allow_unused=True)
            flat, has = [], []
            for p, g in zip(params, task_grads):
                if g is None:
                    flat.append(torch.zeros_like(p).flatten())
                    has.append(torch.zeros_like(p).flatten())
                else:
                    flat.append(g.clone().flatten())
                    has.append(torch.ones_like(p).flatten())
            grads.append(torch.cat(flat))
            has_grads.append(torch.cat(has))
        shapes = [p.shape for p in params]
        return grads, shapes, has_grads

    def _unflatten_grad(self, grads, shapes):
        unflatten, idx = [], 0
        for shape in shapes:
            length = int(np.prod(shape))
            unflatten.append(grads[idx:idx + length].view(shape).clone())
            idx += length
        return unflatten

    def _set_grad(self, grads, params):
        for p, g in zip(params, grads):
            p.grad = g


class UncertaintyWeighting(nn.Module):
    # homoscedastic task uncertainty: one learned log-variance per task
    def __init__(self, num_tasks):
        super().__init__()
        self.log_vars = nn.Parameter(torch.zeros(num_tasks))

    def forward(self, losses, is_regression):
        precision = torch.exp(-self.log_vars)
        scale = torch.where(is_regression, 0.5 * precision, precision)
        return scale * losses + 0.5 * self.log_vars


class HardSharingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv1d(2, 6, 3, padding=1), nn.GELU(),
                                     nn.Conv1d(6, 6, 3, padding=2, dilation=2), nn.GELU())
        self.age_head = nn.Sequential(nn.Flatten(), nn.Linear(6 * 10, 1))
        self.kind_head = nn.Sequential(nn.AdaptiveMaxPool1d(2), nn.Flatten(), nn.Linear(12, 4))

    def forward(self, x):
        h = self.encoder(x)
        return self.age_head(h).squeeze(-1), self.kind_head(h)


def make_signals(n):
    x = torch.randn(n, 2, 10)
    age = x[:, 0].mean(-1) * 3.0 + x[:, 1, :3].sum(-1)
    kind = (x[:, 1].max(-1).indices // 3).clamp(max=3)
    return x, age, kind


net = HardSharingNet()
initialize(net)
weighting = UncertaintyWeighting(2)
params = list(net.parameters()) + list(weighting.parameters())
pc_adam = PCGrad(torch.optim.Adam(params, lr=0.01))
scheduler = torch.optim.lr_scheduler.LambdaLR(pc_adam.optimizer, lambda e: 0.9 ** e)
is_regression = torch.tensor([True, False])
data = [make_signals(16) for _ in range(2)]

for step in range(8):
    net.train()
    x, age, kind = data[step % 2]
    age_pred, kind_logits = net(x)
    losses = torch.stack([F.smooth_l1_loss(age_pred, age, beta=0.5),
                          F.cross_entropy(kind_logits, kind)])
    weighted = weighting(losses, is_regression)
    pc_adam.zero_grad()
    merged = pc_adam.pc_backward(list(weighted), params)
    pc_adam.step()
    scheduler.step()
    cosine = F.cosine_similarity(merged[0].flatten(), params[0].detach().flatten(), dim=0)
    record.append(losses.tolist() + [weighted.sum().item(), cosine.item(), pc_adam.conflicts])
    record.append(params_of(net, weighting))
    print("step {} losses {} sigma {}".format(
        step, ["%.3f" % v for v in losses.tolist()],
        ["%.3f" % v for v in torch.exp(0.5 * weighting.log_vars).tolist()]))

state = {"net": net.state_dict(), "weighting": weighting.state_dict(),
         "optimizer": pc_adam.optimizer.state_dict()}
restored_net = HardSharingNet()
restored_net.load_state_dict(copy.deepcopy(state["net"]))
restored_net.eval()
record.append(len(state["optimizer"]["state"]))
x_test, age_test, kind_test = make_signals(12)
with torch.no_grad():
    age_pred, kind_logits = restored_net(x_test)
    record.append(age_pred.numpy().copy())
    record.append(F.log_softmax(kind_logits, dim=-1).numpy().copy())
    record.append([(kind_logits.argmax(-1) == kind_test).float().mean().item(),
                   F.l1_loss(age_pred, age_test).item()])
"""

PCGRAD_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    def step(self):\n        return self._optim.step()\n",
        "    def step(self):\n        return self._optim.step(self.grads)\n",
    ),
    (
        "        for p, g in zip(params, grads):\n            p.grad = g\n",
        # no backward here: a zero loss's gradients hold the merged gradient
        "        self.grads = sum(p.sum() * 0 for p in params).backward()\n"
        "        for p, g in zip(params, grads):\n            p.grad_replace(self.grads, g)\n",
    ),
]


def test_pcgrad_with_uncertainty_weighting_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        PCGRAD_SOURCE,
        PCGRAD_STEPS,
        capsys,
        7006,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 2 * 8 + 4
    assert theirs[-6][-1] > 0  # some task gradients conflicted and were projected
    assert their_log == our_log and their_log.count("\n") == 8
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
