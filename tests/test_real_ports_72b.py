"""Real ports, round 72 (the harness: ``tests/real_ports.py``): survival analysis, a program
written here in the style of the PyTorch survival projects (DeepSurv reimplementations and
havakv/pycox: a Cox proportional-hazards network trained by the negative partial likelihood,
a discrete-time logistic-hazard network on a grid of durations, and a parametric Weibull
network in the manner of the deep Weibull models), on a synthetic right-censored cohort; three
configurations (``coxph``, ``logistic_hazard``, ``weibull``), each run under torch and,
ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: exponential event times ``-torch.log(u) / torch.exp(risk)`` from a linear and an
  interaction risk, uniform censoring times, ``torch.minimum`` of the two and the event
  indicator ``(time <= censor).float()``; standardization by ``mean(0, keepdim=True)`` and
  ``std(0, unbiased=False)``; mini-batches by ``torch.argsort(torch.rand(n))`` and
  ``torch.split``;
- the network: ``nn.Linear``, ``nn.BatchNorm1d``, ``nn.SELU``, ``nn.Dropout(p=0)`` in an
  ``nn.Sequential`` built from a list, an output ``nn.Linear(..., bias=False)``;
- the Cox loss in two forms: sorted by ``durations.sort(descending=True)`` then
  ``torch.logcumsumexp`` over the risk set, and a risk-set matrix ``time[None, :] >=
  time[:, None]`` through ``masked_fill(~at_risk, float("-inf"))`` and ``torch.logsumexp``
  (checked equal); the events weighted by ``.mul(events).sum().div(events.sum())``;
- the logistic hazard: a duration grid by ``torch.linspace``, ``torch.bucketize(...,
  right=True)`` less one and ``clamp_(0, ...)`` in place, the targets by
  ``torch.zeros_like(phi).scatter(1, idx, events.view(-1, 1))``,
  ``F.binary_cross_entropy_with_logits(reduction="none")``, its ``cumsum(1).gather(1, idx)``;
  survival curves by ``(1 - sigmoid).add(eps).log().cumsum(1).exp()`` and a ``F.pad`` in front;
- the Weibull likelihood: scale and concentration by ``F.softplus`` of two output columns, the
  events' ``torch.distributions.Weibull(scale, concentration).log_prob`` and the censored
  log-survival ``-torch.pow(t / scale, k)``; the expected time ``Weibull(...).mean`` as the
  risk, survival curves checked against ``1 - Weibull(...).cdf`` of a broadcast batch;
- evaluation under ``torch.no_grad()``: Harrell's concordance index from comparable pairs
  (``&`` of comparisons, ``torch.eq`` ties counted half), the Breslow
  baseline hazard from ``torch.unique(..., return_counts=True)`` event times, an at-risk
  ``einsum`` and ``cumsum``, survival ``torch.exp(-H0[None, :] * exp_r[:, None])`` read at
  median times by ``torch.searchsorted``, the mean ``torch.trapezoid`` of the survival curves;
- training: ``Adam(weight_decay=...)``, ``ExponentialLR``, ``clip_grad_norm_``, a
  ``copy.deepcopy`` of the best ``state_dict`` and a checkpoint through ``torch.save``/
  ``torch.load`` restored with ``load_state_dict``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
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

SURVIVAL_SOURCE = """import copy
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_cohort(n, n_features=5):
    x = torch.randn(n, n_features)
    beta = torch.tensor([0.9, -0.6, 0.4, 0.0, 0.2])
    risk = x @ beta + 0.5 * x[:, 0] * x[:, 1]
    u = torch.rand(n)
    event_time = -torch.log(u) / torch.exp(risk)
    censor_time = torch.rand(n) * 3.0
    event = (event_time <= censor_time).float()
    time = torch.minimum(event_time, censor_time)
    return x, time, event


class MLPVanilla(nn.Module):
    def __init__(self, in_features, num_nodes, out_features, dropout=0.0, output_bias=True):
        super().__init__()
        layers, width = [], in_features
        for nodes in num_nodes:
            layers += [nn.Linear(width, nodes), nn.BatchNorm1d(nodes), nn.SELU(),
                       nn.Dropout(dropout)]
            width = nodes
        self.net = nn.Sequential(*layers)
        self.out = nn.Linear(width, out_features, bias=output_bias)

    def forward(self, x):
        return self.out(self.net(x))


def cox_ph_loss(log_h, durations, events, eps=1e-7):
    order = durations.sort(descending=True)[1]
    log_h = log_h.view(-1)[order]
    events = events.view(-1)[order]
    log_risk_set = torch.logcumsumexp(log_h, dim=0)
    return -log_h.sub(log_risk_set).mul(events).sum().div(events.sum() + eps)


def cox_ph_loss_matrix(log_h, durations, events):
    log_h = log_h.view(-1)
    at_risk = durations[None, :] >= durations[:, None]
    log_risk_set = torch.logsumexp(log_h[None, :].masked_fill(~at_risk, float("-inf")), dim=1)
    return -torch.sum((log_h - log_risk_set) * events) / events.sum()


def label_transform(durations, cuts):
    idx = torch.bucketize(durations, cuts, right=True) - 1
    idx.clamp_(0, len(cuts) - 1)
    return idx


def nll_logistic_hazard(phi, idx_durations, events, reduction="mean"):
    idx = idx_durations.view(-1, 1)
    y_bce = torch.zeros_like(phi).scatter(1, idx, events.view(-1, 1))
    bce = F.binary_cross_entropy_with_logits(phi, y_bce, reduction="none")
    loss = bce.cumsum(1).gather(1, idx).view(-1)
    return loss.mean() if reduction == "mean" else loss


def weibull_parameters(out, eps=1e-6):
    scale = F.softplus(out[:, 0]) + eps
    concentration = F.softplus(out[:, 1]) + 0.5
    return scale, concentration


def weibull_nll(out, durations, events):
    scale, concentration = weibull_parameters(out)
    dist = torch.distributions.Weibull(scale, concentration)
    log_survival = -torch.pow(durations / scale, concentration)
    log_lik = events * dist.log_prob(durations) + (1 - events) * log_survival
    return -log_lik.mean()


def hazard_to_survival(phi, eps=1e-7):
    hazard = torch.sigmoid(phi)
    surv = (1 - hazard).add(eps).log().cumsum(1).exp()
    return F.pad(surv, (1, 0), value=1.0)


def concordance_index(risk, time, event):
    risk, time, event = risk.view(-1), time.view(-1), event.view(-1).bool()
    comparable = (time[:, None] < time[None, :]) & event[:, None]
    concordant = (risk[:, None] > risk[None, :]) & comparable
    ties = torch.eq(risk[:, None], risk[None, :]) & comparable
    return ((concordant.sum() + 0.5 * ties.sum()) / comparable.sum()).item()


def breslow(log_h, time, event):
    exp_r = torch.exp(log_h.view(-1))
    event_times, deaths = torch.unique(time[event.bool()], sorted=True, return_counts=True)
    at_risk = (time[None, :] >= event_times[:, None]).to(exp_r.dtype)
    denominator = torch.einsum("tn,n->t", at_risk, exp_r)
    cumulative = torch.cumsum(deaths.to(exp_r.dtype) / denominator, dim=0)
    return event_times, cumulative


x_all, t_all, e_all = make_cohort(72)
x_all = (x_all - x_all.mean(0, keepdim=True)) / x_all.std(0, unbiased=False, keepdim=True)
(x, x_val), (t, t_val), (e, e_val) = (torch.split(v, [48, 24]) for v in (x_all, t_all, e_all))
cuts = torch.linspace(0.0, t.max().item(), 8)
idx_train, idx_val = label_transform(t, cuts), label_transform(t_val, cuts)

out_features = {"coxph": 1, "logistic_hazard": len(cuts), "weibull": 2}[MODEL]
model = MLPVanilla(x.shape[1], [16, 16], out_features, output_bias=MODEL != "coxph")
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)


def objective(out, durations, idx, events):
    if MODEL == "coxph":
        return cox_ph_loss(out, durations, events)
    if MODEL == "weibull":
        return weibull_nll(out, durations, events)
    return nll_logistic_hazard(out, idx, events)


best_val, best_state = float("inf"), None
for epoch in range(4):
    model.train()
    perm = torch.argsort(torch.rand(x.shape[0]))
    for batch in torch.split(perm, 16):
        out = model(x[batch])
        loss = objective(out, t[batch], idx_train[batch], e[batch])
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        record.append([loss.item(), float(norm)])
    scheduler.step()
    model.eval()
    with torch.no_grad():
        out_val = model(x_val)
        val_loss = objective(out_val, t_val, idx_val, e_val).item()
        if MODEL == "coxph":
            matrix_loss = cox_ph_loss_matrix(out_val, t_val, e_val).item()
            assert abs(matrix_loss - val_loss) < 1e-4 * max(1.0, abs(val_loss))
            risk = out_val.view(-1)
        elif MODEL == "weibull":
            risk = -torch.distributions.Weibull(*weibull_parameters(out_val)).mean
        else:
            risk = -hazard_to_survival(out_val)[:, 1:].sum(1)
        c_index = concordance_index(risk, t_val, e_val)
    if val_loss < best_val:
        best_val, best_state = val_loss, copy.deepcopy(model.state_dict())
    record.append([val_loss, c_index, scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("epoch {} val {:.2f} c-index {:.3f}".format(epoch, val_loss, c_index))

model.load_state_dict(best_state)
model.eval()
with torch.no_grad():
    out_all = model(x_all)
    if MODEL == "coxph":
        event_times, h0 = breslow(model(x), t, e)
        surv = torch.exp(-h0[None, :] * torch.exp(out_all.view(-1))[:, None])
        grid = event_times
    elif MODEL == "weibull":
        grid = torch.linspace(0.0, 3.0, 13)
        scale, concentration = weibull_parameters(out_all)
        surv = torch.exp(-(grid[None, :] / scale[:, None]) ** concentration[:, None])
        cdf = torch.distributions.Weibull(scale[:, None], concentration[:, None]).cdf(grid[1:])
        assert torch.allclose(1 - cdf, surv[:, 1:], atol=1e-5)
    else:
        surv = hazard_to_survival(out_all)
        grid = torch.cat([torch.zeros(1), cuts])
    at = torch.searchsorted(grid, torch.tensor([0.25, 0.5, 1.0]))
    at = at.clamp(max=grid.shape[0] - 1)
    record.append(surv[:, at].numpy().copy())
    record.append(torch.trapezoid(surv, grid, dim=1).mean().item())
    record.append(surv[:6].numpy().copy())

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "cuts": cuts}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = MLPVanilla(x.shape[1], [16, 16], out_features, output_bias=MODEL != "coxph")
restored.load_state_dict(checkpoint["model"])
restored.eval()
with torch.no_grad():
    out_restored = restored(x_val)
    record.append([objective(out_restored, t_val, idx_val, e_val).item(), best_val,
                   len(checkpoint["optimizer"]["state"]), checkpoint["cuts"][-1].item()])
"""

SURVIVAL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 5.0)\n"
        "        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("model", ["coxph", "logistic_hazard", "weibull"])
def test_survival_analysis_as_torch(capsys, model):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SURVIVAL_SOURCE,
        SURVIVAL_STEPS,
        capsys,
        7201,
        initialize=initializer(),
        params_of=params_of,
        MODEL=model,
    )
    assert len(theirs) == 4 * (3 + 2) + 4
    assert their_log == our_log and their_log.count("\n") == 4
    # the biases of the linear layers before a BatchNorm1d: their true gradient is zero (the
    # batch mean is subtracted), so Adam's steps on them follow the rounding noise
    skip = ("0.net.0.bias", "0.net.4.bias")
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=skip)
