"""Real ports, round 73 (the harness: ``tests/real_ports.py``): temporal point processes, a
program written here in the style of the PyTorch reimplementations of RMTPP (Du et al.: a
recurrent marked temporal point process whose conditional intensity is
``exp(v . h_j + w (t - t_j) + b)``, its likelihood in closed form, the next event's time by
numerical integration of ``t f(t)``), of the intensity-free point processes (Shchur et al.: the
inter-event time a log-normal mixture, ``TransformedDistribution`` of a ``MixtureSameFamily``
through ``AffineTransform`` and ``ExpTransform``, its survival written out with
``torch.special.log_ndtr``) and of the maximum-likelihood fits of a multivariate
Hawkes process with an exponential kernel (baseline rates ``mu``, excitations ``alpha``, a decay
``beta``, all through ``softplus``; the log-likelihood by the pairwise kernel matrix and, checked
against it, by the recursive state update); three configurations (``rmtpp``,
``intensity_free``, ``hawkes``), each run
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
- intensity-free: a ``D.TransformedDistribution`` subclass built of ``D.MixtureSameFamily(
  D.Categorical(logits=...), D.Normal(...))``, ``D.AffineTransform`` and ``D.ExpTransform``,
  its ``log_prob`` of clamped gaps, ``cdf``, ``base_dist.mean``, the survival function by
  ``base_dist.component_distribution.loc``/``.scale``, ``mixture_distribution.logits``,
  ``torch.special.log_ndtr`` and ``torch.logsumexp``; the context ``nn.GRU`` output after an
  ``nn.Parameter`` initial context ``expand``-ed, read at each sequence's end by ``gather``
  with an ``expand``-ed index; ``AdamW`` and ``ExponentialLR``; the log-time statistics from
  ``x[mask]`` by ``.mean()`` and ``.std()``;
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

import numpy as np
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
import torch.distributions as D

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


class LogNormalMixture(D.TransformedDistribution):
    def __init__(self, logits, locs, log_scales, mean_log_inter_time, std_log_inter_time):
        mixture = D.MixtureSameFamily(D.Categorical(logits=logits),
                                      D.Normal(loc=locs, scale=log_scales.exp()))
        transforms = [D.AffineTransform(loc=mean_log_inter_time, scale=std_log_inter_time),
                      D.ExpTransform()]
        self.mean_log_inter_time = mean_log_inter_time
        self.std_log_inter_time = std_log_inter_time
        super().__init__(mixture, transforms)

    def log_survival_function(self, x):
        y = (torch.log(x) - self.mean_log_inter_time) / self.std_log_inter_time
        mixture = self.base_dist
        locs = mixture.component_distribution.loc
        scales = mixture.component_distribution.scale
        log_weights = torch.log_softmax(mixture.mixture_distribution.logits, dim=-1)
        log_sf = torch.special.log_ndtr(-(y.unsqueeze(-1) - locs) / scales)
        return torch.logsumexp(log_weights + log_sf, dim=-1)


class IntensityFree(nn.Module):
    def __init__(self, num_marks, context_size=8, num_mix=3, emb_dim=4):
        super().__init__()
        self.num_mix = num_mix
        self.mark_embedding = nn.Embedding(num_marks, emb_dim)
        self.rnn = nn.GRU(emb_dim + 1, context_size, batch_first=True)
        self.init_context = nn.Parameter(torch.zeros(context_size))
        self.linear = nn.Linear(context_size, 3 * num_mix)
        self.mark_linear = nn.Linear(context_size, num_marks)
        self.mean_log_inter_time, self.std_log_inter_time = 0.0, 1.0

    def get_context(self, gaps, marks):
        features = torch.cat([torch.log(gaps + 1e-8).unsqueeze(-1),
                              self.mark_embedding(marks)], dim=-1)
        context = self.rnn(features)[0]
        batch_size, _, context_size = context.shape
        init = self.init_context[None, None, :].expand(batch_size, 1, -1)
        return torch.cat([init, context], dim=1)

    def get_inter_time_dist(self, context):
        raw = self.linear(context)
        locs = raw[..., :self.num_mix]
        log_scales = raw[..., self.num_mix:(2 * self.num_mix)].clamp(-5.0, 3.0)
        logits = torch.log_softmax(raw[..., (2 * self.num_mix):], dim=-1)
        return LogNormalMixture(logits, locs, log_scales, self.mean_log_inter_time,
                                self.std_log_inter_time)

    def log_likelihood(self, times, marks, mask, horizon):
        gaps = torch.diff(times, dim=1, prepend=torch.zeros_like(times[:, :1]))
        gaps = torch.where(mask, gaps, torch.ones_like(gaps))
        full_context = self.get_context(gaps, marks)
        context = full_context[:, :-1, :]
        dist = self.get_inter_time_dist(context)
        log_p = dist.log_prob(gaps.clamp(min=1e-10))
        log_p = (log_p * mask).sum(-1)
        lengths = mask.sum(-1)
        last_time = times.gather(1, (lengths - 1)[:, None]).squeeze(1)
        index = lengths[:, None, None].expand(-1, 1, full_context.shape[-1])
        survival_context = full_context.gather(1, index)
        log_surv = self.get_inter_time_dist(survival_context).log_survival_function(
            (horizon - last_time).clamp(min=1e-10)[:, None]).squeeze(1)
        mark_logits = torch.log_softmax(self.mark_linear(context), dim=-1)
        mark_ll = (mark_logits.gather(-1, marks.unsqueeze(-1)).squeeze(-1) * mask).sum(-1)
        return (log_p + log_surv + mark_ll).mean() / mask.float().sum(-1).mean()


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
elif MODEL == "intensity_free":
    model = IntensityFree(NUM_MARKS)
    initialize(model)
    log_gaps = torch.log(torch.diff(times, dim=1, prepend=torch.zeros_like(times[:, :1]))[mask])
    model.mean_log_inter_time = log_gaps.mean().item()
    model.std_log_inter_time = log_gaps.std().item()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.8)
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
    elif MODEL == "intensity_free":
        val_gaps = torch.diff(val[0], dim=1, prepend=torch.zeros_like(val[0][:, :1]))
        val_gaps = torch.where(val[2], val_gaps, torch.ones_like(val_gaps))
        expected = model.get_inter_time_dist(model.get_context(val_gaps, val[1])[:, :-1])
        grid = torch.tensor([0.25, 1.0, 2.5])[:, None, None]
        record.append(expected.cdf(grid.expand(3, *val[0].shape)).numpy().copy())
        record.append(expected.base_dist.mean.numpy().copy())
        record.append(expected.log_survival_function(grid.expand(3, *val[0].shape)).numpy().copy())
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
restored = {"rmtpp": RMTPP, "intensity_free": IntensityFree, "hawkes": Hawkes}[MODEL](NUM_MARKS)
restored.load_state_dict(checkpoint["model"])
if MODEL == "intensity_free":
    restored.mean_log_inter_time = model.mean_log_inter_time
    restored.std_log_inter_time = model.std_log_inter_time
restored.eval()
with torch.no_grad():
    again, _ = objective(restored, *val)
    record.append([again.item(), len(checkpoint["optimizer"]["state"])])
"""

TPP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "import torch.distributions as D\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\nimport retrograd.distributions as D\n",
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


@pytest.mark.parametrize("model", ["rmtpp", "intensity_free", "hawkes"])
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
    if model == "intensity_free":  # the survival function written out is one less the cdf
        np.testing.assert_allclose(theirs[14] + np.exp(theirs[16]), 1.0, atol=1e-5)
    assert their_log == our_log and their_log.count("\n") == 6
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
