"""Real ports, round 72 (the harness: ``tests/real_ports.py``): ordinal regression, a program
written here in the style of Raschka-research-group/coral-pytorch (the CORAL layer of one
shared weight and ordered biases, the CORN loss of conditional binary tasks) and of
EthanRosenthal/spacecutter (a cumulative link model whose cutpoints are kept ascending by a
callback clamping ``.data`` in place), on tabular features whose latent score is cut into
five ordered grades; three configurations (``coral``, ``corn``, ``clm``), each run under torch
and, ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: a latent score from ``torch.tanh`` and a product of features, grades by
  ``torch.bucketize`` over boundaries, ``torch.bincount(minlength=...)`` of the grades, the
  extended binary levels ``(labels.unsqueeze(1) > torch.arange(K - 1)).float()``;
- the models: a backbone of ``nn.Linear``/``nn.LeakyReLU``/``nn.LayerNorm`` and a CORAL head
  ``nn.Linear(..., 1, bias=False)`` plus an ``nn.Parameter`` of biases from
  ``torch.arange(K - 1, 0, -1).float() / (K - 1)``; a CORN head ``nn.Linear(..., K - 1)``;
  a cumulative link head whose cutpoints start at ``torch.arange(K - 1).float() - K / 2``;
- the losses: CORAL's ``F.logsigmoid(logits) * levels + (F.logsigmoid(logits) - logits) *
  (1 - levels)`` summed over tasks with ``importance_weights``; CORN's per-task subsets by a
  boolean row mask ``logits[mask, task]`` of labels ``> task - 1``, the targets
  ``(y[mask] > task).to(torch.int64)`` mixed with float, ``continue`` on an empty task;
  the cumulative link likelihoods ``torch.sigmoid(cutpoints - y_pred)`` with ``torch.cat`` of
  ``[:, [0]]``, adjacent differences and ``1 - [:, [-1]]``, ``clamp(eps, 1 - eps)``, the
  negative log of ``gather(1, y.unsqueeze(1))``;
- the ascension callback after every step under ``torch.no_grad()``: a loop over cutpoints
  with ``cutpoints.data[i].clamp_(min, max)`` reading ``.data[i + 1].item()`` less a margin
  (which does clamp);
- predictions: CORAL's ``torch.sigmoid(logits) > 0.5`` summed, CORN's ``torch.cumprod`` of
  conditional probabilities, the cumulative link's ``argmax`` of the likelihoods;
- metrics under ``torch.no_grad()``: the MAE and RMSE of ``.float()`` grades, the accuracy,
  a confusion matrix by ``index_put_((true, pred), ones, accumulate=True)`` and the quadratic
  weighted kappa from ``torch.outer`` of its marginals and ``(i - j) ** 2`` weights over
  ``torch.meshgrid(indexing="ij")``;
- training: ``SGD(momentum=0.9)``, ``MultiStepLR``, ``clip_grad_value_``, and a checkpoint
  through ``torch.save``/``torch.load`` of ``{"model", "optimizer", "epoch"}`` restored with
  ``load_state_dict`` into a fresh model and optimizer, which trains one more step alike.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_value_(grads, ...)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

ORDINAL_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 5


def make_grades(n, n_features=6):
    x = torch.randn(n, n_features)
    latent = 1.5 * torch.tanh(x[:, 0]) + x[:, 1] - 0.5 * x[:, 2] * x[:, 3] + 0.3 * torch.randn(n)
    labels = torch.bucketize(latent, torch.tensor([-1.2, -0.4, 0.4, 1.2]))
    return x, labels


def levels_from_labelbatch(labels, num_classes):
    return (labels.unsqueeze(1) > torch.arange(num_classes - 1)).float()


class CoralLayer(nn.Module):
    def __init__(self, size_in, num_classes, preinit_bias=True):
        super().__init__()
        self.coral_weights = nn.Linear(size_in, 1, bias=False)
        if preinit_bias:
            bias = torch.arange(num_classes - 1, 0, -1).float() / (num_classes - 1)
        else:
            bias = torch.zeros(num_classes - 1).float()
        self.coral_bias = nn.Parameter(bias)

    def forward(self, x):
        return self.coral_weights(x) + self.coral_bias


class LogisticCumulativeLink(nn.Module):
    def __init__(self, num_classes, init_cutpoints="ordered"):
        super().__init__()
        cutpoints = torch.arange(num_classes - 1).float() - num_classes / 2
        self.cutpoints = nn.Parameter(cutpoints)

    def forward(self, y_pred):
        sigmoids = torch.sigmoid(self.cutpoints - y_pred)
        link_mat = sigmoids[:, 1:] - sigmoids[:, :-1]
        return torch.cat((sigmoids[:, [0]], link_mat, 1 - sigmoids[:, [-1]]), dim=1)


class OrdinalNet(nn.Module):
    def __init__(self, in_features, hidden, num_classes, head):
        super().__init__()
        self.features = nn.Sequential(
            nn.Linear(in_features, hidden), nn.LeakyReLU(0.1), nn.LayerNorm(hidden),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.1))
        self.head_name = head
        if head == "coral":
            self.head = CoralLayer(hidden, num_classes)
        elif head == "corn":
            self.head = nn.Linear(hidden, num_classes - 1)
        else:
            self.head = nn.Sequential(nn.Linear(hidden, 1), LogisticCumulativeLink(num_classes))

    def forward(self, x):
        return self.head(self.features(x))


def coral_loss(logits, levels, importance_weights=None, reduction="mean"):
    term1 = F.logsigmoid(logits) * levels + (F.logsigmoid(logits) - logits) * (1 - levels)
    if importance_weights is not None:
        term1 = term1 * importance_weights
    val = -torch.sum(term1, dim=1)
    return torch.mean(val) if reduction == "mean" else val


def corn_loss(logits, y_train, num_classes):
    sets = []
    for i in range(num_classes - 1):
        label_mask = y_train > i - 1
        label_tensor = (y_train[label_mask] > i).to(torch.int64)
        sets.append((label_mask, label_tensor))
    num_examples = 0
    losses = 0.0
    for task_index, (train_examples, train_labels) in enumerate(sets):
        if len(train_labels) < 1:
            continue
        num_examples += len(train_labels)
        pred = logits[train_examples, task_index]
        loss = -torch.sum(F.logsigmoid(pred) * train_labels
                          + (F.logsigmoid(pred) - pred) * (1 - train_labels))
        losses += loss
    return losses / num_examples


def cumulative_link_loss(y_pred, y_true, eps=1e-15):
    likelihoods = torch.clamp(y_pred, eps, 1 - eps)
    return -torch.log(likelihoods.gather(1, y_true.unsqueeze(1))).mean()


def ascension_callback(module, margin=0.0, min_val=-1.0e6):
    with torch.no_grad():
        cutpoints = module.cutpoints
        for i in range(cutpoints.shape[0] - 1):
            cutpoints.data[i].clamp_(min_val, cutpoints.data[i + 1].item() - margin)


def predict(model, x):
    out = model(x)
    if model.head_name == "coral":
        return (torch.sigmoid(out) > 0.5).sum(dim=1)
    if model.head_name == "corn":
        probas = torch.cumprod(torch.sigmoid(out), dim=1)
        return torch.sum(probas > 0.5, dim=1)
    return out.argmax(dim=1)


def quadratic_weighted_kappa(y_true, y_pred, num_classes):
    confusion = torch.zeros(num_classes, num_classes)
    confusion.index_put_((y_true, y_pred), torch.ones(y_true.shape[0]), accumulate=True)
    i, j = torch.meshgrid(torch.arange(num_classes), torch.arange(num_classes), indexing="ij")
    weights = (i - j).float() ** 2 / (num_classes - 1) ** 2
    expected = torch.outer(confusion.sum(1), confusion.sum(0)) / confusion.sum()
    return (1 - (weights * confusion).sum() / (weights * expected).sum()).item(), confusion


x, y = make_grades(64)
x_val, y_val = make_grades(32)
counts = torch.bincount(y, minlength=NUM_CLASSES)
importance = torch.ones(NUM_CLASSES - 1) + 0.1 * torch.arange(NUM_CLASSES - 1).float()
model = OrdinalNet(x.shape[1], 16, NUM_CLASSES, HEAD)
initialize(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[3, 5], gamma=0.5)
record.append(counts.tolist())


def objective(out, labels):
    if HEAD == "coral":
        return coral_loss(out, levels_from_labelbatch(labels, NUM_CLASSES),
                          importance_weights=importance)
    if HEAD == "corn":
        return corn_loss(out, labels, NUM_CLASSES)
    return cumulative_link_loss(out, labels)


def train_step(model, optimizer, xb, yb):
    model.train()
    loss = objective(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    optimizer.step()
    if HEAD == "clm":
        ascension_callback(model.head[1], margin=1.0)
    return loss


for epoch in range(6):
    for start in range(0, x.shape[0], 32):
        loss = train_step(model, optimizer, x[start:start + 32], y[start:start + 32])
        record.append(loss.item())
    scheduler.step()
    model.eval()
    with torch.no_grad():
        pred = predict(model, x_val)
        mae = torch.mean(torch.abs(pred.float() - y_val.float())).item()
        rmse = torch.sqrt(torch.mean((pred - y_val).float() ** 2)).item()
        accuracy = (pred == y_val).float().mean().item()
        val_loss = objective(model(x_val), y_val).item()
    record.append([val_loss, mae, rmse, accuracy, scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("epoch {:d} mae {:.3f} acc {:.3f}".format(epoch, mae, accuracy))

model.eval()
with torch.no_grad():
    pred = predict(model, x_val)
    kappa, confusion = quadratic_weighted_kappa(y_val, pred, NUM_CLASSES)
    record.append(kappa)
    record.append(confusion.numpy().copy())
    record.append(pred.tolist())
    record.append(model(x_val[:5]).numpy().copy())

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 6},
           buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = OrdinalNet(x.shape[1], 16, NUM_CLASSES, HEAD)
restored.load_state_dict(checkpoint["model"])
resumed = torch.optim.SGD(restored.parameters(), lr=0.05, momentum=0.9)
resumed.load_state_dict(checkpoint["optimizer"])
record.append([checkpoint["epoch"], resumed.param_groups[0]["lr"]])
loss = train_step(restored, resumed, x[:32], y[:32])
record.append(loss.item())
record.append(params_of(restored))
"""

ORDINAL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_value_(grads, model.parameters(), 1.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("head", ["coral", "corn", "clm"])
def test_ordinal_regression_as_torch(capsys, head):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        ORDINAL_SOURCE,
        ORDINAL_STEPS,
        capsys,
        7202,
        initialize=initializer(),
        params_of=params_of,
        HEAD=head,
    )
    assert len(theirs) == 1 + 6 * (2 + 2) + 4 + 3
    assert their_log == our_log and their_log.count("\n") == 6
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
