"""Real ports, round 73 (the harness: ``tests/real_ports.py``): temporal point processes, a
program written here in the style of the PyTorch reimplementations of RMTPP (Du et al.: a
recurrent marked temporal point process whose conditional intensity is
``exp(v . h_j + w (t - t_j) + b)``, its likelihood in closed form, the next event's time by
numerical integration of ``t f(t)``) and of the maximum-likelihood fits of a multivariate
Hawkes process with an exponential kernel (baseline rates ``mu``, excitations ``alpha``, a decay
``beta``, all through ``softplus``; the log-likelihood by the pairwise kernel matrix and, checked
against it, by the recursive state update); two configurations (``rmtpp``, ``hawkes``), each run
under torch and, ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: padded marked sequences drawn as exponential gaps ``-torch.log(torch.rand(...))``
  divided by a per-sequence rate, ``torch.cumsum`` into times, marks by ``torch.randint``, a
  padding mask ``torch.arange(L)[None, :] < lengths[:, None]``, ``masked_fill`` of padded
  times, ``torch.diff`` with ``prepend=`` for the gaps;
- RMTPP: ``nn.Embedding(padding_idx=0)``, ``torch.cat`` of the embedded marks with the gap and
  ``torch.log1p`` of it, ``nn.GRU(batch_first=True)``, a scalar ``nn.Parameter`` ``w``, the
  log-likelihood terms ``(1 / w) * torch.exp(...)``, ``F.cross_entropy(reduction="none")`` on
  flattened marks, sums masked by ``* mask`` and divided by ``mask.sum()``;
- the next-time prediction under ``torch.no_grad()``: a ``torch.linspace`` grid broadcast with
  ``[..., None]``, a density from the intensity and its integral, ``torch.trapezoid(y, x=...,
  dim=-1)``, the mark by ``argmax``, accuracy through ``eq`` and ``masked_select``;
- Hawkes: ``F.softplus`` of raw parameters, the gap matrix ``t[:, :, None] - t[:, None, :]``,
  ``torch.tril(torch.ones(...), diagonal=-1).bool()`` combined with the padding masks by
  ``&``, ``alpha[marks[:, :, None], marks[:, None, :]]`` (two index tensors), ``torch.where``
  keeping ``exp`` of masked gaps finite, the compensator with ``alpha.sum(0)[marks]`` and
  ``-torch.expm1``; the recursive form through a Python loop over events with
  ``F.one_hot(...).float()``, ``gather`` of the rate of the event's mark, and ``torch.stack``;
- training: ``Adam`` with a ``CosineAnnealingLR`` (RMTPP) and ``SGD(momentum=0.9)`` with a
  ``StepLR`` (Hawkes), ``clip_grad_norm_``; ``state_dict`` through ``torch.save``/``torch.load``
  into a fresh model evaluated under ``torch.no_grad()``.

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

TPP_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_MARKS = 3


def make_sequences(batch, max_len):
    lengths = torch.randint(4, max_len + 1, (batch,))
    rate = 0.5 + torch.rand(batch, 1)
    gaps = -torch.log(torch.rand(batch, max_len)) / rate
    times = torch.cumsum(gaps, dim=1)
    marks = torch.randint(0, NUM_MARKS, (batch, max_len))
    mask = torch.arange(max_len)[None, :] < lengths[:, None]
    times = times.masked_fill(~mask, 0.0)
    marks = marks.masked_fill(~mask, 0)
    horizon = times.max(dim=1).values + 0.5
    return times, marks, mask, horizon


class RMTPP(nn.Module):
    def __init__(self, num_marks, emb_dim=6, hidden=8):
        super().__init__()
        self.embed = nn.Embedding(num_marks + 1, emb_dim, padding_idx=0)
        self.rnn = nn.GRU(emb_dim + 2, hidden, batch_first=True)
        self.intensity = nn.Linear(hidden, 1)
        self.mark_head = nn.Linear(hidden, num_marks)
        self.w = nn.Parameter(torch.tensor(0.2))

    def forward(self, times, marks, mask):
        gaps = torch.diff(times, dim=1, prepend=torch.zeros_like(times[:, :1])) * mask
        x = torch.cat([self.embed((marks + 1) * mask.long()), gaps.unsqueeze(-1),
                       torch.log1p(gaps).unsqueeze(-1)], dim=-1)
        h, _ = self.rnn(x)
        return h, gaps

    def log_likelihood(self, times, marks, mask):
        h, gaps = self(times, marks, mask)
        h, next_gap = h[:, :-1], gaps[:, 1:]
        valid = mask[:, 1:].float()
        past = self.intensity(h).squeeze(-1)
        current = past + self.w * next_gap
        time_ll = current + (1 / self.w) * torch.exp(past) - (1 / self.w) * torch.exp(current)
        logits = self.mark_head(h)
        mark_nll = F.cross_entropy(logits.reshape(-1, NUM_MARKS), marks[:, 1:].reshape(-1),
                                   reduction="none").view_as(valid)
        n = valid.sum()
        return (time_ll * valid).sum() / n, (mark_nll * valid).sum() / n

    def predict(self, times, marks, mask, grid_size=64, t_max=6.0):
        h, _ = self(times, marks, mask)
        past = self.intensity(h).squeeze(-1)[..., None]
        grid = torch.linspace(0.0, t_max, grid_size)
        log_lam = past + self.w * grid
        integral = (torch.exp(log_lam) - torch.exp(past)) / self.w
        density = torch.exp(log_lam - integral)
        expected = torch.trapezoid(grid * density, x=grid, dim=-1)
        return expected, self.mark_head(h).argmax(dim=-1)


class Hawkes(nn.Module):
    def __init__(self, num_marks):
        super().__init__()
        self.raw_mu = nn.Parameter(torch.full((num_marks,), -1.0))
        self.raw_alpha = nn.Parameter(torch.full((num_marks, num_marks), -2.0)
                                      + 0.3 * torch.eye(num_marks))
        self.raw_beta = nn.Parameter(torch.tensor(0.5))

    def params(self):
        return F.softplus(self.raw_mu), F.softplus(self.raw_alpha), F.softplus(self.raw_beta)

    def log_likelihood(self, times, marks, mask, horizon):
        mu, alpha, beta = self.params()
        L = times.shape[1]
        dt = times[:, :, None] - times[:, None, :]
        earlier = torch.tril(torch.ones(L, L), diagonal=-1).bool()
        pair = earlier[None] & mask[:, :, None] & mask[:, None, :]
        kernel = alpha[marks[:, :, None], marks[:, None, :]] * beta * torch.exp(
            -beta * torch.where(pair, dt, torch.zeros_like(dt)))
        lam = mu[marks] + (kernel * pair).sum(-1)
        log_term = (torch.log(lam) * mask).sum(1)
        tail = (horizon[:, None] - times).clamp(min=0.0)
        excited = alpha.sum(0)[marks] * -torch.expm1(-beta * tail)
        compensator = mu.sum() * horizon + (excited * mask).sum(1)
        return (log_term - compensator).mean()

    def recursive_intensities(self, times, marks, mask):
        mu, alpha, beta = self.params()
        state = torch.zeros(times.shape[0], NUM_MARKS)
        last = torch.zeros(times.shape[0])
        rates = []
        for i in range(times.shape[1]):
            state = state * torch.exp(-beta * (times[:, i] - last))[:, None]
            lam = mu + beta * state @ alpha.t()
            rates.append(lam.gather(1, marks[:, i:i + 1]).squeeze(1))
            step = F.one_hot(marks[:, i], NUM_MARKS).float() * mask[:, i:i + 1]
            state = state + step
            last = torch.where(mask[:, i], times[:, i], last)
        return torch.stack(rates, dim=1)


times, marks, mask, horizon = make_sequences(6, 9)
val = make_sequences(4, 9)
record.append([mask.sum().item(), horizon.sum().item()])

if MODEL == "rmtpp":
    model = RMTPP(NUM_MARKS)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
else:
    model = Hawkes(NUM_MARKS)
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def objective(model, times, marks, mask, horizon):
    if MODEL == "rmtpp":
        time_ll, mark_nll = model.log_likelihood(times, marks, mask)
        return -time_ll + mark_nll, time_ll
    ll = model.log_likelihood(times, marks, mask, horizon)
    return -ll, ll


for epoch in range(6):
    model.train()
    loss, ll = objective(model, times, marks, mask, horizon)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), ll.item(), scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("epoch {} nll {:.3f}".format(epoch, loss.item()))

model.eval()
with torch.no_grad():
    val_loss, _ = objective(model, *val)
    record.append([val_loss.item()])
    if MODEL == "rmtpp":
        expected, mark_pred = model.predict(*val[:3])
        target = val[1][:, 1:]
        hits = mark_pred[:, :-1].eq(target).masked_select(val[2][:, 1:])
        record.append(expected.numpy().copy())
        record.append([hits.float().mean().item(), int(hits.sum())])
    else:
        t, m, msk, hor = val
        mu, alpha, beta = model.params()
        L = t.shape[1]
        dt = t[:, :, None] - t[:, None, :]
        pair = torch.tril(torch.ones(L, L), diagonal=-1).bool()[None] & msk[:, :, None]
        pair = pair & msk[:, None, :]
        kern = alpha[m[:, :, None], m[:, None, :]] * beta * torch.exp(
            -beta * torch.where(pair, dt, torch.zeros_like(dt)))
        direct = mu[m] + (kern * pair).sum(-1)
        recursive = model.recursive_intensities(t, m, msk)
        record.append(torch.where(msk, recursive, torch.zeros_like(recursive)).numpy().copy())
        record.append([(direct - recursive).abs().masked_select(msk).max().item() < 1e-4])
        record.append(torch.cat([mu, alpha.flatten(), beta.reshape(1)]).numpy().copy())

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = RMTPP(NUM_MARKS) if MODEL == "rmtpp" else Hawkes(NUM_MARKS)
restored.load_state_dict(checkpoint["model"])
restored.eval()
with torch.no_grad():
    again, _ = objective(restored, *val)
    record.append([again.item(), len(checkpoint["optimizer"]["state"])])
"""

TPP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 2.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("model", ["rmtpp", "hawkes"])
def test_temporal_point_process_as_torch(capsys, model):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        TPP_SOURCE,
        TPP_STEPS,
        capsys,
        7301,
        initialize=initializer(),
        params_of=params_of,
        MODEL=model,
    )
    assert len(theirs) == 1 + 2 * 6 + (3 if model == "rmtpp" else 4) + 1
    assert theirs[-1][0] == pytest.approx(theirs[13][0], rel=1e-6)  # restored as trained
    if model == "hawkes":
        assert theirs[-3] == [True]  # the recursion agrees with the pairwise form
    assert their_log == our_log and their_log.count("\n") == 6
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
