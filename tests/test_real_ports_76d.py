"""Real ports, round 76 (the harness: ``tests/real_ports.py``): conformal prediction, a program
written here in the style of the PyTorch conformal-prediction libraries and tutorials (TorchCP's
split predictors, the temperature scaling of gpleiss/temperature_scaling, the conformalized
quantile regression of the CQR papers' code): a classifier trained on overlapping Gaussian
blobs, temperature-scaled by ``LBFGS`` on a calibration split, prediction sets by the LAC, APS
and RAPS scores (marginal and class-conditional thresholds), then a quantile regressor trained
by the pinball loss and conformalized; two configurations (``aps`` and ``raps``), each run under
torch and, ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: blobs by ``centers[y] + scale * torch.randn(...)`` over ``torch.randint`` labels
  (an integer-tensor row index), a heteroscedastic regression ``torch.sin(2 * x) + (0.1 + 0.3 *
  x.abs()) * torch.randn_like(x)``;
- the classifier: ``nn.Sequential`` of ``nn.Linear`` and ``nn.SiLU``,
  ``nn.CrossEntropyLoss(label_smoothing=0.05)``, bootstrap minibatches by ``torch.randint``,
  ``SGD(momentum=0.9, nesterov=True)`` under ``OneCycleLR`` (its cycled ``momentum`` read back
  from ``param_groups``);
- temperature scaling in float64 (a flat NLL leaves a float32 line search to rounding): an
  ``nn.Parameter(torch.ones(1, dtype=torch.float64) * 1.5)``, ``unsqueeze(1).expand(n, k)``,
  float32 logits divided by it (promoted to float64), ``.double()`` logits,
  ``optim.LBFGS([temperature], lr=1.0, max_iter=50, line_search_fn="strong_wolfe")`` stepped
  with a closure, the ECE over ``torch.linspace`` bins from ``confidences.gt(lower) *
  confidences.le(upper)`` (a product of bool tensors), boolean-mask means, ``ece += ...`` of a
  float64 value into a float32 ``torch.zeros(1)``; the conformal scores in float64;
- the scores: LAC by ``probs.gather(1, y.unsqueeze(1))``; APS/RAPS by ``sort(dim=1,
  descending=True)``, ``cumsum(dim=1)``, a randomisation ``torch.rand(n, 1)``, the RAPS penalty
  ``lam * (ranks - k_reg).clamp(min=0)``, the sorted scores put back by
  ``torch.empty_like(...).scatter_(1, order, sorted_scores)`` (checked against a ``gather`` by
  ``order.argsort(dim=1)``); the threshold ``torch.quantile(scores, q, interpolation="higher")``,
  class-conditional (Mondrian) thresholds over boolean masks, sets ``scores <= qhat`` and
  ``qhat[None, :]`` broadcast, coverage by ``sets[torch.arange(n), y]``, set sizes by
  ``sum(dim=1)`` and ``torch.bincount(minlength=...)``, class-wise coverage by
  ``index_add_``, an ``F.one_hot`` and ``torch.einsum("nk,nk->n", ...)`` cross-check;
- conformalized quantile regression: an ``nn.Module`` with ``nn.Tanh`` predicting three
  quantiles, the pinball loss ``torch.max((q - 1) * errors, q * errors)`` over a registered
  buffer of levels, ``Adam`` with ``StepLR``, quantile crossing removed by ``sort(dim=1).values``,
  conformity scores ``torch.maximum(lo - y, y - hi)``, intervals widened by the threshold,
  their coverage and mean width;
- a checkpoint through ``torch.save`` of both models' ``state_dict`` with the temperature and
  thresholds, ``torch.load``, ``load_state_dict``, prediction sets of the restored model.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``, the closure returning ``loss, grads``).
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

CONFORMAL_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F

ALPHA = 0.1
N_CLASSES = 4


def make_blobs(n, centers, scale):
    y = torch.randint(0, centers.shape[0], (n,))
    x = centers[y] + scale * torch.randn(n, centers.shape[1])
    return x, y


class Classifier(nn.Module):
    def __init__(self, in_features=2, hidden=24, n_classes=N_CLASSES):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.SiLU(),
                                 nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.net(x)


def ece_score(logits, labels, n_bins=5):
    bin_boundaries = torch.linspace(0, 1, n_bins + 1)
    softmaxes = F.softmax(logits, dim=1)
    confidences, predictions = torch.max(softmaxes, 1)
    accuracies = predictions.eq(labels)
    ece = torch.zeros(1)
    for bin_lower, bin_upper in zip(bin_boundaries[:-1], bin_boundaries[1:]):
        in_bin = confidences.gt(bin_lower.item()) * confidences.le(bin_upper.item())
        prop_in_bin = in_bin.float().mean()
        if prop_in_bin.item() > 0:
            accuracy_in_bin = accuracies[in_bin].float().mean()
            avg_confidence_in_bin = confidences[in_bin].mean()
            ece += torch.abs(avg_confidence_in_bin - accuracy_in_bin) * prop_in_bin
    return ece.item()


class ModelWithTemperature(nn.Module):
    def __init__(self, model):
        super(ModelWithTemperature, self).__init__()
        self.model = model
        # in float64, as the line search's interpolation of a flat NLL needs
        self.temperature = nn.Parameter(torch.ones(1, dtype=torch.float64) * 1.5)

    def forward(self, input):
        return self.temperature_scale(self.model(input))

    def temperature_scale(self, logits):
        temperature = self.temperature.unsqueeze(1).expand(logits.size(0), logits.size(1))
        return logits / temperature

    def set_temperature(self, x, labels):
        nll_criterion = nn.CrossEntropyLoss()
        with torch.no_grad():
            logits = self.model(x).double()
        before = [nll_criterion(logits, labels).item(), ece_score(logits, labels)]
        optimizer = torch.optim.LBFGS([self.temperature], lr=1.0, max_iter=50,
                                      line_search_fn="strong_wolfe")

        def eval():
            optimizer.zero_grad()
            loss = nll_criterion(self.temperature_scale(logits), labels)
            loss.backward()
            return loss
        optimizer.step(eval)
        with torch.no_grad():
            scaled = self.temperature_scale(logits)
            after = [nll_criterion(scaled, labels).item(), ece_score(scaled, labels)]
        return before + after + [self.temperature.item()]


def lac_scores(probs, labels):
    return 1 - probs.gather(1, labels.unsqueeze(1)).squeeze(1)


def sorted_scores(probs, u, penalty=0.0, k_reg=0):
    ordered, order = probs.sort(dim=1, descending=True)
    ranks = torch.arange(1, probs.shape[1] + 1)
    reg = penalty * (ranks - k_reg).clamp(min=0)
    return ordered.cumsum(dim=1) - u * ordered + reg, order


def all_label_scores(probs, u):
    if SCORE == "raps":
        scores, order = sorted_scores(probs, u, penalty=0.05, k_reg=1)
    else:
        scores, order = sorted_scores(probs, u)
    out = torch.empty_like(scores).scatter_(1, order, scores)
    assert torch.equal(out, scores.gather(1, order.argsort(dim=1)))
    return out


def conformal_quantile(scores, alpha=ALPHA):
    n = scores.shape[0]
    q_level = math.ceil((n + 1) * (1 - alpha)) / n
    return torch.quantile(scores, min(q_level, 1.0), interpolation="higher")


def set_report(sets, labels):
    n = labels.shape[0]
    covered = sets[torch.arange(n), labels]
    sizes = sets.sum(dim=1)
    one_hot = F.one_hot(labels, N_CLASSES).float()
    assert torch.equal(torch.einsum("nk,nk->n", sets.float(), one_hot) > 0, covered)
    by_class = torch.zeros(N_CLASSES, dtype=torch.float32).index_add_(0, labels, covered.float())
    counts = torch.bincount(labels, minlength=N_CLASSES).clamp(min=1)
    return {"coverage": covered.float().mean().numpy().copy(),
            "size": sizes.float().mean().numpy().copy(),
            "size_hist": torch.bincount(sizes, minlength=N_CLASSES + 1).numpy().copy(),
            "class_coverage": (by_class / counts).numpy().copy()}


centers = torch.tensor([[0.0, 0.0], [2.0, 0.5], [0.5, 2.0], [2.2, 2.2]])
x_train, y_train = make_blobs(96, centers, 0.6)
x_cal, y_cal = make_blobs(80, centers, 0.6)
x_test, y_test = make_blobs(64, centers, 0.6)

model = Classifier()
initialize(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=8)
criterion = nn.CrossEntropyLoss(label_smoothing=0.05)
for step in range(8):
    model.train()
    idx = torch.randint(0, x_train.shape[0], (32,))
    loss = criterion(model(x_train[idx]), y_train[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), scheduler.get_last_lr()[0], optimizer.param_groups[0]["momentum"]])
    if step % 4 == 3:
        record.append(params_of(model))
        print("step {} loss {:.4f}".format(step, loss.item()))

model.eval()
scaled = ModelWithTemperature(model)
record.append(scaled.set_temperature(x_cal, y_cal))

with torch.no_grad():
    cal_probs = F.softmax(scaled(x_cal), dim=1)
    test_probs = F.softmax(scaled(x_test), dim=1)
    record.append(test_probs.numpy().copy())

    qhat_lac = conformal_quantile(lac_scores(cal_probs, y_cal))
    lac_sets = test_probs >= 1 - qhat_lac
    record.append(set_report(lac_sets, y_test))

    u_cal, u_test = torch.rand(x_cal.shape[0], 1), torch.rand(x_test.shape[0], 1)
    cal_all = all_label_scores(cal_probs, u_cal)
    cal_scores = cal_all[torch.arange(x_cal.shape[0]), y_cal]
    qhat = conformal_quantile(cal_scores)
    test_all = all_label_scores(test_probs, u_test)
    sets = test_all <= qhat
    record.append(set_report(sets, y_test))
    record.append({"cal_scores": cal_scores.numpy().copy(),
                   "qhat": torch.stack([qhat_lac, qhat]).numpy().copy()})

    class_qhat = torch.zeros(N_CLASSES)
    for k in range(N_CLASSES):
        mask = y_cal == k
        class_qhat[k] = conformal_quantile(cal_scores[mask])
    mondrian_sets = test_all <= class_qhat[None, :]
    record.append(set_report(mondrian_sets, y_test))
    record.append(class_qhat.numpy().copy())
print("coverage {:.3f} size {:.3f}".format(sets[torch.arange(64), y_test].float().mean().item(),
                                           sets.sum(1).float().mean().item()))


class QuantileRegressor(nn.Module):
    def __init__(self, quantiles=(0.05, 0.5, 0.95), hidden=24):
        super().__init__()
        self.register_buffer("quantiles", torch.tensor(quantiles))
        self.body = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                  nn.Tanh())
        self.head = nn.Linear(hidden, len(quantiles))

    def forward(self, x):
        return self.head(self.body(x))

    def pinball_loss(self, preds, target):
        errors = target - preds
        q = self.quantiles.unsqueeze(0)
        return torch.max((q - 1) * errors, q * errors).mean()


def make_regression(n):
    x = torch.rand(n, 1) * 4 - 2
    y = torch.sin(2 * x) + (0.1 + 0.3 * x.abs()) * torch.randn_like(x)
    return x, y


xr_train, yr_train = make_regression(96)
xr_cal, yr_cal = make_regression(64)
xr_test, yr_test = make_regression(64)
regressor = QuantileRegressor()
initialize(regressor)
reg_optimizer = torch.optim.Adam(regressor.parameters(), lr=2e-2)
reg_scheduler = torch.optim.lr_scheduler.StepLR(reg_optimizer, step_size=3, gamma=0.5)
for epoch in range(6):
    regressor.train()
    loss = regressor.pinball_loss(regressor(xr_train), yr_train)
    reg_optimizer.zero_grad()
    loss.backward()
    reg_optimizer.step()
    reg_scheduler.step()
    record.append([loss.item(), reg_scheduler.get_last_lr()[0]])
record.append(params_of(regressor))

regressor.eval()
with torch.no_grad():
    cal_pred = regressor(xr_cal).sort(dim=1).values
    cqr_scores = torch.maximum(cal_pred[:, :1] - yr_cal, yr_cal - cal_pred[:, 2:])
    qhat_cqr = conformal_quantile(cqr_scores.squeeze(1))
    test_pred = regressor(xr_test).sort(dim=1).values
    lower, upper = test_pred[:, 0] - qhat_cqr, test_pred[:, 2] + qhat_cqr
    y = yr_test.squeeze(1)
    inside = (y >= lower) & (y <= upper)
    raw_inside = (y >= test_pred[:, 0]) & (y <= test_pred[:, 2])
    record.append([qhat_cqr.item(), inside.float().mean().item(), raw_inside.float().mean().item(),
                   (upper - lower).mean().item()])
    record.append(torch.stack([lower, test_pred[:, 1], upper], dim=1).numpy().copy())

buffer = io.BytesIO()
torch.save({"classifier": model.state_dict(), "temperature": scaled.temperature.detach(),
            "qhat": qhat, "class_qhat": class_qhat, "regressor": regressor.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = Classifier()
restored.load_state_dict(checkpoint["classifier"])
restored.eval()
restored_regressor = QuantileRegressor()
restored_regressor.load_state_dict(checkpoint["regressor"])
with torch.no_grad():
    probs = F.softmax(restored(x_test) / checkpoint["temperature"], dim=1)
    again = all_label_scores(probs, u_test) <= checkpoint["qhat"]
    record.append([float(torch.equal(again, sets)), checkpoint["temperature"].item()]
                  + restored_regressor.quantiles.tolist())
    record.append(restored_regressor(xr_test[:5]).numpy().copy())
"""

CONFORMAL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n            return loss\n",
        "            grads = loss.backward()\n            return loss, grads\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "    loss.backward()\n    reg_optimizer.step()\n",
        "    grads = loss.backward()\n    reg_optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("score", ["aps", "raps"])
def test_conformal_prediction_as_torch(capsys, score):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        CONFORMAL_SOURCE,
        CONFORMAL_STEPS,
        capsys,
        7603,
        initialize=initializer(),
        params_of=params_of,
        SCORE=score,
    )
    assert len(theirs) == 8 + 2 + 1 + 6 + 6 + 1 + 2 + 2
    assert their_log == our_log and their_log.count("\n") == 3
    temperature = theirs[10]
    assert temperature[2] < temperature[0]  # scaling lowered the calibration NLL
    assert theirs[-2][0] == 1.0  # the restored model's sets are the sets
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
