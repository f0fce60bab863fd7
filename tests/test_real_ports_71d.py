"""Real ports, round 71 (the harness: ``tests/real_ports.py``): causal inference (treatment
effect estimation from observational data), a program written here in the style of the
PyTorch reimplementations of DragonNet (Shi et al.: a shared representation, a propensity
head and two outcome heads, targeted regularization through a learned ``epsilon``) and of
CFRNet (Shalit et al.: a normalized representation, per-arm heads, sample weights from the
treated fraction, an MMD penalty between the arms' representations), on synthetic confounded
data with known potential outcomes; three configurations (``dragonnet``, ``tarreg``,
``cfr``), each run under torch and, ported, under retrograd from the same weights and draws,
every record compared.

It reaches:

- the data: a treatment drawn as ``(torch.rand(n, 1) < propensity).float()`` from a
  ``torch.sigmoid`` of the covariates, potential outcomes ``y0``/``y1`` with a heterogeneous
  effect, ``torch.cat`` of columns, a train/validation split by ``torch.split``;
- DragonNet: ``nn.Linear`` stacks through ``F.elu``, ``torch.sigmoid`` of the propensity head,
  the ``epsilon`` layer ``nn.Linear(1, 1)`` fed ``torch.ones_like(t_pred)[:, 0:1]``; the loss
  with ``(t_pred + 0.01) / 1.02``, ``torch.sum(F.binary_cross_entropy(...))``,
  ``torch.square``, and the targeted regularization ``t / t_pred - (1 - t) / (1 - t_pred)``;
- CFRNet: a representation divided by ``torch.sqrt(torch.sum(h ** 2, dim=1, keepdim=True))``,
  the arms found by ``torch.nonzero(t > 0, as_tuple=True)[0]`` and ``torch.where(t < 1)[0]``,
  ``index_select`` of rows, a squared-distance matrix ``-2 * X @ Y.t()`` plus row norms
  (``.t()`` broadcasts), ``clamp(min=0)``, the RBF MMD from ``.sum()`` of kernels less their
  diagonal (``torch.diagonal``), per-arm predictions merged by ``torch.where`` over a
  ``bool()`` treatment, sample weights ``t / (2 * p) + (1 - t) / (2 * (1 - p))``;
- training: ``SGD(momentum=0.9, nesterov=True, weight_decay=...)`` for DragonNet and ``Adam``
  for CFRNet, ``ReduceLROnPlateau(mode="min", factor=0.5, patience=0)`` stepped on the
  validation loss (its lowered learning rates recorded), ``clip_grad_norm_``;
- evaluation under ``torch.no_grad()``: the PEHE ``torch.sqrt(torch.mean((tau_hat - tau) **
  2))``, the ATE error, a policy's value by ``(tau_hat > 0).float()``, the propensity's
  ``torch.clamp`` and ``torch.mean``, a ``copy.deepcopy`` of the best ``state_dict`` restored
  by ``load_state_dict`` and a checkpoint through ``torch.save``/``torch.load``.

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

CAUSAL_SOURCE = """import copy
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_observational(n, d=5):
    x = torch.randn(n, d)
    propensity = torch.sigmoid(1.2 * x[:, 0] - 0.8 * x[:, 1]).unsqueeze(1)
    t = (torch.rand(n, 1) < propensity).float()
    y0 = (x[:, 0] + 0.5 * x[:, 2] ** 2).unsqueeze(1)
    tau = (1.0 + x[:, 3]).unsqueeze(1)
    y1 = y0 + tau
    y = t * y1 + (1 - t) * y0 + 0.1 * torch.randn(n, 1)
    return x, t, y, torch.cat([y0, y1], dim=1)


class DragonNet(nn.Module):
    def __init__(self, in_features, shared_hidden=16, outcome_hidden=8):
        super(DragonNet, self).__init__()
        self.fc1 = nn.Linear(in_features, shared_hidden)
        self.fc2 = nn.Linear(shared_hidden, shared_hidden)
        self.fcz = nn.Linear(shared_hidden, shared_hidden)
        self.treat_out = nn.Linear(shared_hidden, 1)
        self.y0_fc1 = nn.Linear(shared_hidden, outcome_hidden)
        self.y0_fc2 = nn.Linear(outcome_hidden, outcome_hidden)
        self.y0_out = nn.Linear(outcome_hidden, 1)
        self.y1_fc1 = nn.Linear(shared_hidden, outcome_hidden)
        self.y1_fc2 = nn.Linear(outcome_hidden, outcome_hidden)
        self.y1_out = nn.Linear(outcome_hidden, 1)
        self.epsilon = nn.Linear(1, 1)
        torch.nn.init.xavier_normal_(self.epsilon.weight)

    def forward(self, inputs):
        z = F.elu(self.fc1(inputs))
        z = F.elu(self.fc2(z))
        z = F.elu(self.fcz(z))
        t_pred = torch.sigmoid(self.treat_out(z))
        y0 = F.elu(self.y0_fc1(z))
        y0 = F.elu(self.y0_fc2(y0))
        y0 = self.y0_out(y0)
        y1 = F.elu(self.y1_fc1(z))
        y1 = F.elu(self.y1_fc2(y1))
        y1 = self.y1_out(y1)
        eps = self.epsilon(torch.ones_like(t_pred)[:, 0:1])
        return y0, y1, t_pred, eps


def dragonnet_loss(y_true, t_true, t_pred, y0_pred, y1_pred, eps, alpha=1.0):
    t_pred = (t_pred + 0.01) / 1.02
    loss_t = torch.sum(F.binary_cross_entropy(t_pred, t_true))
    loss0 = torch.sum((1.0 - t_true) * torch.square(y_true - y0_pred))
    loss1 = torch.sum(t_true * torch.square(y_true - y1_pred))
    return loss0 + loss1 + alpha * loss_t


def tarreg_loss(y_true, t_true, t_pred, y0_pred, y1_pred, eps, alpha=1.0, beta=1.0):
    vanilla_loss = dragonnet_loss(y_true, t_true, t_pred, y0_pred, y1_pred, eps, alpha)
    t_pred = (t_pred + 0.01) / 1.02
    y_pred = t_true * y1_pred + (1 - t_true) * y0_pred
    h = (t_true / t_pred) - ((1 - t_true) / (1 - t_pred))
    y_pert = y_pred + eps * h
    targeted_regularization = torch.sum((y_true - y_pert) ** 2)
    return vanilla_loss + beta * targeted_regularization


class CFRNet(nn.Module):
    def __init__(self, in_features, rep_hidden=16, head_hidden=8):
        super().__init__()
        self.rep = nn.Sequential(nn.Linear(in_features, rep_hidden), nn.ELU(),
                                 nn.Linear(rep_hidden, rep_hidden), nn.ELU())
        self.heads = nn.ModuleList([
            nn.Sequential(nn.Linear(rep_hidden, head_hidden), nn.ELU(), nn.Linear(head_hidden, 1))
            for _ in range(2)
        ])

    def representation(self, x):
        h = self.rep(x)
        return h / torch.sqrt(torch.sum(h ** 2, dim=1, keepdim=True))

    def forward(self, x, t):
        h = self.representation(x)
        y0, y1 = self.heads[0](h), self.heads[1](h)
        return torch.where(t.bool(), y1, y0), h, y0, y1


def pdist2sq(X, Y):
    C = -2 * X @ Y.t()
    nx = torch.sum(X ** 2, 1, keepdim=True)
    ny = torch.sum(Y ** 2, 1, keepdim=True)
    return (C + ny.t() + nx).clamp(min=0)


def mmd2_rbf(X, t, p, sig=0.5):
    it = torch.nonzero(t > 0, as_tuple=True)[0]
    ic = torch.where(t < 1)[0]
    Xc, Xt = X.index_select(0, ic), X.index_select(0, it)
    Kcc = torch.exp(-pdist2sq(Xc, Xc) / (sig ** 2))
    Kct = torch.exp(-pdist2sq(Xc, Xt) / (sig ** 2))
    Ktt = torch.exp(-pdist2sq(Xt, Xt) / (sig ** 2))
    m, n = Xc.shape[0], Xt.shape[0]
    mmd = (1.0 - p) ** 2 / (m * (m - 1.0)) * (Kcc.sum() - torch.diagonal(Kcc).sum())
    mmd = mmd + p ** 2 / (n * (n - 1.0)) * (Ktt.sum() - torch.diagonal(Ktt).sum())
    mmd = mmd - 2.0 * p * (1.0 - p) / (m * n) * Kct.sum()
    return 4.0 * mmd


def cfr_loss(model, x, t, y, p_t, alpha=1.0):
    y_hat, h, _, _ = model(x, t)
    sample_weight = t / (2 * p_t) + (1 - t) / (2 * (1 - p_t))
    factual = torch.mean(sample_weight * (y - y_hat) ** 2)
    imbalance = mmd2_rbf(h, t.squeeze(1), p_t)
    return factual + alpha * imbalance, imbalance


def potential_outcomes(model, x):
    if MODEL == "cfr":
        _, _, y0, y1 = model(x, torch.zeros(x.shape[0], 1))
        return y0, y1, None
    y0, y1, t_pred, _ = model(x)
    return y0, y1, t_pred


def objective(model, x, t, y, p_t):
    if MODEL == "cfr":
        return cfr_loss(model, x, t, y, p_t)
    y0, y1, t_pred, eps = model(x)
    loss_fn = tarreg_loss if MODEL == "tarreg" else dragonnet_loss
    return loss_fn(y, t, t_pred, y0, y1, eps), eps.mean()


x_all, t_all, y_all, mu_all = make_observational(48)
(x, x_val), (t, t_val), (y, y_val), (mu, mu_val) = (
    torch.split(v, [36, 12]) for v in (x_all, t_all, y_all, mu_all))
p_t = t.mean().item()

if MODEL == "cfr":
    model = CFRNet(x.shape[1])
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
else:
    model = DragonNet(x.shape[1])
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=2e-2, momentum=0.9, nesterov=True,
                                weight_decay=1e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5,
                                                       patience=0)
best_val, best_state = float("inf"), None

for epoch in range(8):
    model.train()
    loss, extra = objective(model, x, t, y, p_t)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss, _ = objective(model, x_val, t_val, y_val, p_t)
    scheduler.step(val_loss)
    if val_loss.item() < best_val:
        best_val, best_state = val_loss.item(), copy.deepcopy(model.state_dict())
    record.append([loss.item(), extra.item(), val_loss.item(),
                   optimizer.param_groups[0]["lr"]])
    record.append(params_of(model))
    print("epoch {} loss {:.2f} val {:.2f}".format(epoch, loss.item(), val_loss.item()))

model.load_state_dict(best_state)
model.eval()
with torch.no_grad():
    y0_hat, y1_hat, t_hat = potential_outcomes(model, x_all)
    tau_hat = y1_hat - y0_hat
    tau = mu_all[:, 1:] - mu_all[:, :1]
    pehe = torch.sqrt(torch.mean((tau_hat - tau) ** 2))
    ate_error = torch.abs(tau_hat.mean() - tau.mean())
    policy = (tau_hat > 0).float()
    policy_value = torch.mean(policy * mu_all[:, 1:] + (1 - policy) * mu_all[:, :1])
    record.append([pehe.item(), ate_error.item(), policy_value.item(), best_val])
    record.append(tau_hat.squeeze(1).numpy().copy())
    if t_hat is not None:
        t_hat = torch.clamp(t_hat, 0.01, 0.99)
        record.append([torch.mean(t_hat).item(),
                       F.binary_cross_entropy(t_hat, t_all).item()])
    else:
        record.append(model.representation(x_all[:6]).numpy().copy())

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "scheduler": scheduler.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer, weights_only=False)
restored = CFRNet(x.shape[1]) if MODEL == "cfr" else DragonNet(x.shape[1])
restored.load_state_dict(checkpoint["model"])
restored.eval()
record.append([checkpoint["scheduler"]["best"], checkpoint["scheduler"]["num_bad_epochs"]])
with torch.no_grad():
    r0, r1, _ = potential_outcomes(restored, x_val)
    record.append(torch.cat([r0, r1], dim=1).numpy().copy())
"""

CAUSAL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 5.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("model", ["dragonnet", "tarreg", "cfr"])
def test_treatment_effect_estimation_as_torch(capsys, model):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        CAUSAL_SOURCE,
        CAUSAL_STEPS,
        capsys,
        7104,
        initialize=initializer(),
        params_of=params_of,
        MODEL=model,
    )
    assert len(theirs) == 2 * 8 + 5
    assert theirs[14][3] < theirs[0][3]  # the plateau lowered the learning rate
    assert their_log == our_log and their_log.count("\n") == 8
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
