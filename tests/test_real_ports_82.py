"""Real-port tests, continued (the harness: ``tests/real_ports.py``): programs written here
in the style of four code bases, each run under torch and, ported, under retrograd from the
same weights and draws.

- PPO in the style of ikostrikov/pytorch-a2c-ppo-acktr-gail: subclasses of
  ``torch.distributions.Categorical``/``Normal`` calling ``super().log_prob``, a learned
  log-std bias (``self._bias.t().view(1, -1)``), orthogonal init, a GRU run over the stretches
  between episode starts (``(masks[1:] == 0.0).any(dim=-1).nonzero().squeeze()``), rollout
  storage written by ``copy_`` into rows, GAE cut by ``bad_masks``, minibatches from
  ``BatchSampler(SubsetRandomSampler(range(n)), ...)`` or, recurrent, ``torch.randperm`` over
  processes, the clipped objective and clipped value loss with ``clip_grad_norm_``,
  ``isinstance(actions, torch.LongTensor)``, ``torch.FloatTensor`` of lists, linear decay;
  discrete and feed-forward, continuous and recurrent. The draws come from one seeded stream.
- PatchTST in the style of yuqinie98/PatchTST: ``RevIN`` by ``torch.var(..., unbiased=False)``
  over ``tuple(range(1, x.ndim - 1))`` and ``subtract_last``, ``nn.ReplicationPad1d``,
  ``z.unfold(dimension=-1, size=, step=)``, positional encodings by ``nn.init.uniform_`` or by
  a search printing ``f'{t.mean():+6.3f}'`` and testing ``abs(t.mean()) <= eps``,
  ``nn.Parameter(torch.tensor(d ** -0.5), requires_grad=False)``, residual attention scores,
  batch norms between ``Transpose(1, 2)`` modules, per-channel ``Flatten(start_dim=-2)``
  heads, a moving-average trend split, ``OneCycleLR`` by keywords.
- A raw-audio keyword classifier in the style of the PyTorch speech command tutorial (M5),
  and a DreamerV3-style actor-critic: see their tests.

Defects found and fixed: ``Tensor.unfold``'s first parameter was named ``dim`` where torch
names it ``dimension``; torch's per-family modules of ``torch.distributions``
(``one_hot_categorical``, ``uniform``, ``independent``...) were missing; a parameter frozen and
thawed between the forward and the backward lost its gradient (each has its regression test
below).
"""

from __future__ import annotations

import copy
import re
import types

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


def _share_draws(monkeypatch, lib, seed):
    """``Categorical.sample``, ``Normal.sample`` and ``randperm`` of ``lib`` drawing from one
    stream seeded by ``seed`` (inverse CDF, ``loc + scale * eps``, NumPy's permutation)."""
    rng = np.random.default_rng(seed)

    def categorical(self, sample_shape=()):
        p = self.probs.detach().numpy().astype(np.float64)
        u = rng.random(p.shape[:-1] + (1,))
        index = (np.cumsum(p, -1) < u).sum(-1).clip(0, p.shape[-1] - 1)
        return lib.tensor(index, dtype=lib.int64)

    def normal(self, sample_shape=()):
        eps = lib.tensor(rng.standard_normal(tuple(self.loc.shape)), dtype=self.loc.dtype)
        return (self.loc + self.scale * eps).detach()

    def randperm(n, generator=None, **_):
        return lib.tensor(rng.permutation(n), dtype=lib.int64)

    monkeypatch.setattr(lib.distributions.Categorical, "sample", categorical)
    monkeypatch.setattr(lib.distributions.Normal, "sample", normal)
    monkeypatch.setattr(lib, "randperm", randperm)
    if lib is rg:
        monkeypatch.setattr(rg_sampler, "randperm", randperm)


PPO_SOURCE = """
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data.sampler import SubsetRandomSampler, BatchSampler


class Categorical(torch.distributions.Categorical):
    # actions as (n, 1) columns, log-probabilities summed to (n, 1)
    def sample(self):
        return super().sample().unsqueeze(1)

    def log_probs(self, actions):
        return super().log_prob(actions.squeeze(-1)).view(actions.size(0), -1).sum(-1).unsqueeze(-1)

    def mode(self):
        return torch.argmax(self.probs, dim=-1, keepdim=True)


class Normal(torch.distributions.Normal):
    def log_probs(self, actions):
        return super().log_prob(actions).sum(dim=-1, keepdim=True)

    def entropy(self):
        return super().entropy().sum(dim=-1)

    def mode(self):
        return self.mean


class Bias(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self._bias = nn.Parameter(bias.unsqueeze(1))  # stored as a column

    def forward(self, x):
        return x + self._bias.t().view(1, -1)


def orthogonal(module, gain=1.0):
    nn.init.orthogonal_(module.weight.data, gain=gain)
    nn.init.constant_(module.bias.data, 0)
    return module


class ActorCritic(nn.Module):
    def __init__(self, n_obs, action_space, hidden=8, recurrent=False):
        super().__init__()
        self.recurrent = recurrent
        if recurrent:
            self.gru = nn.GRU(n_obs, hidden)
            for name, p in self.gru.named_parameters():
                if 'bias' in name:
                    nn.init.constant_(p, 0)
                elif 'weight' in name:
                    nn.init.orthogonal_(p)
            n_obs = hidden
        tanh = lambda a, b: nn.Sequential(orthogonal(nn.Linear(a, b), np.sqrt(2)), nn.Tanh())
        self.actor = nn.Sequential(tanh(n_obs, hidden), tanh(hidden, hidden))
        self.critic = nn.Sequential(
            tanh(n_obs, hidden), tanh(hidden, hidden), orthogonal(nn.Linear(hidden, 1)))
        if type(action_space).__name__ == 'Discrete':
            self.head = orthogonal(nn.Linear(hidden, action_space.n), gain=0.01)
        else:
            self.head = orthogonal(nn.Linear(hidden, action_space.shape[0]))
            self.logstd = Bias(torch.zeros(1))
        self.hidden_size = hidden if recurrent else 1

    def gru_steps(self, x, hxs, masks):
        if x.size(0) == hxs.size(0):  # one step of every process
            x, hxs = self.gru(x[None], (hxs * masks)[None])
            return x.squeeze(0), hxs.squeeze(0)
        n = hxs.size(0)
        steps = int(x.size(0) / n)
        x, masks = x.view(steps, n, x.size(1)), masks.view(steps, n)
        # run through the stretches between the steps where some process started over
        restarts = (masks[1:] == 0.0).any(dim=-1).nonzero().squeeze().cpu()
        restarts = [restarts.item() + 1] if restarts.dim() == 0 else (restarts + 1).numpy().tolist()
        bounds, hxs, outputs = [0] + restarts + [steps], hxs.unsqueeze(0), []
        for start, end in zip(bounds[:-1], bounds[1:]):
            out, hxs = self.gru(x[start:end], hxs * masks[start].view(1, -1, 1))
            outputs.append(out)
        return torch.cat(outputs, dim=0).view(steps * n, -1), hxs.squeeze(0)

    def forward(self, obs, hxs, masks):
        if self.recurrent:
            obs, hxs = self.gru_steps(obs, hxs, masks)
        features = self.actor(obs)
        if hasattr(self, 'logstd'):
            mean = self.head(features)
            dist = Normal(mean, self.logstd(torch.zeros(mean.size())).exp())
        else:
            dist = Categorical(logits=self.head(features))
        return self.critic(obs), dist, hxs

    def act(self, obs, hxs, masks):
        value, dist, hxs = self(obs, hxs, masks)
        action = dist.sample()
        return value, action, dist.log_probs(action), hxs

    def evaluate(self, obs, hxs, masks, action):
        value, dist, _ = self(obs, hxs, masks)
        return value, dist.log_probs(action), dist.entropy().mean()


class Rollouts:
    def __init__(self, steps, procs, n_obs, action_shape, hidden):
        self.obs = torch.zeros(steps + 1, procs, n_obs)
        self.hxs = torch.zeros(steps + 1, procs, hidden)
        self.rewards, self.log_probs = (torch.zeros(steps, procs, 1) for _ in range(2))
        self.values, self.returns = (torch.zeros(steps + 1, procs, 1) for _ in range(2))
        self.actions = torch.zeros(steps, procs, action_shape)
        self.masks, self.bad_masks = (torch.ones(steps + 1, procs, 1) for _ in range(2))
        self.steps, self.step = steps, 0

    def insert(self, obs, hxs, action, log_prob, value, reward, masks, bad_masks):
        ahead = ((self.obs, obs), (self.hxs, hxs), (self.masks, masks), (self.bad_masks, bad_masks))
        here = ((self.actions, action), (self.log_probs, log_prob), (self.values, value),
                (self.rewards, reward))
        for row, new in ahead:
            row[self.step + 1].copy_(new)
        for row, new in here:
            row[self.step].copy_(new)
        self.step = (self.step + 1) % self.steps

    def after_update(self):
        for row in (self.obs, self.hxs, self.masks, self.bad_masks):
            row[0].copy_(row[-1])

    def compute_returns(self, next_value, gamma, lam):
        # GAE, cut where an episode ended by a time limit (bad_masks) as well as by failure
        self.values[-1] = next_value
        gae = 0
        for t in reversed(range(self.rewards.size(0))):
            nxt = gamma * self.values[t + 1] * self.masks[t + 1]
            delta = self.rewards[t] + nxt - self.values[t]
            gae = (delta + gamma * lam * self.masks[t + 1] * gae) * self.bad_masks[t + 1]
            self.returns[t] = gae + self.values[t]

    def batches(self, advantages, n_batches, recurrent):
        steps, procs = self.rewards.size()[0:2]
        rows = lambda t: t[:steps].reshape(-1, *t.size()[2:])
        if not recurrent:
            n = steps * procs
            for idx in BatchSampler(SubsetRandomSampler(range(n)), n // n_batches, drop_last=True):
                parts = (self.obs, self.hxs, self.actions, self.values, self.returns, self.masks,
                         self.log_probs)
                yield (*(rows(t)[idx] for t in parts), advantages.view(-1, 1)[idx])
            return
        order, per = torch.randperm(procs), procs // n_batches
        for start in range(0, procs, per):
            picked = order[start:start + per]
            def take(t):
                stacked = torch.stack([t[:steps, i] for i in picked], 1)
                return stacked.view(steps * per, *t.size()[2:])
            hxs = torch.stack([self.hxs[0, i] for i in picked], 1).view(per, -1)
            yield (take(self.obs), hxs, take(self.actions), take(self.values), take(self.returns),
                   take(self.masks), take(self.log_probs), take(advantages))


class PPO:
    def __init__(self, model, clip, epochs, n_batches, value_coef, entropy_coef, lr, eps, max_norm):
        self.model, self.clip, self.epochs, self.n_batches = model, clip, epochs, n_batches
        self.value_coef, self.entropy_coef, self.max_norm = value_coef, entropy_coef, max_norm
        self.optimizer = optim.Adam(model.parameters(), lr=lr, eps=eps)

    def update(self, rollouts):
        adv = rollouts.returns[:-1] - rollouts.values[:-1]
        adv = (adv - adv.mean()) / (adv.std() + 1e-5)
        totals, count = np.zeros(3), 0
        for _ in range(self.epochs):
            for obs, hxs, actions, old_values, returns, masks, old_log_probs, a in rollouts.batches(
                    adv, self.n_batches, self.model.recurrent):
                values, log_probs, entropy = self.model.evaluate(obs, hxs, masks, actions)
                ratio = torch.exp(log_probs - old_log_probs)
                bounded = torch.clamp(ratio, 1.0 - self.clip, 1.0 + self.clip)
                policy_loss = -torch.min(ratio * a, bounded * a).mean()
                clipped = old_values + (values - old_values).clamp(-self.clip, self.clip)
                worst = torch.max((values - returns).pow(2), (clipped - returns).pow(2))
                value_loss = 0.5 * worst.mean()
                self.optimizer.zero_grad()
                total = value_loss * self.value_coef + policy_loss - entropy * self.entropy_coef
                total.backward()
                nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
                self.optimizer.step()
                totals += [value_loss.item(), policy_loss.item(), entropy.item()]
                count += 1
        return totals / count


class Discrete:
    def __init__(self, n):
        self.n = n


class Box:
    def __init__(self, shape):
        self.shape = shape


class Envs:
    # four toy processes whose state decays towards the action; episodes of 3, 5, 4 and 7 steps
    def __init__(self, n, continuous):
        self.n, self.t = n, np.zeros(n, dtype=np.int64)
        self.action_space = Box((1,)) if continuous else Discrete(n=2)

    def reset(self):
        self.state = np.linspace(-1, 1, 3 * self.n).reshape(self.n, 3).astype(np.float32)
        return torch.from_numpy(self.state.copy()).float()

    def step(self, actions):
        if isinstance(actions, torch.LongTensor):  # discrete: (n, 1) indices
            actions = actions.squeeze(1)
        a = actions.cpu().numpy().reshape(self.n, -1)[:, 0].astype(np.float32)
        if isinstance(self.action_space, Discrete):
            a = 2 * a - 1
        push = a[:, None] * np.array([1.0, -0.5, 0.25], np.float32)
        self.state = (0.8 * self.state + 0.2 * push).astype(np.float32)
        reward = (0.1 * a - np.abs(self.state).sum(1)).astype(np.float32)
        self.t += 1
        done = self.t % np.array([3, 5, 4, 7]) == 0
        infos = [{'bad_transition': True} if d and i == 1 else {} for i, d in enumerate(done)]
        for i in np.flatnonzero(done):
            infos[i]['episode'] = {'r': float(reward[i])}
            self.state[i] = [-1.0, 0.0, 1.0]
        obs = torch.from_numpy(self.state.copy()).float()
        return obs, torch.from_numpy(reward).unsqueeze(dim=1).float(), done, infos


envs = Envs(4, args.continuous)
model = ActorCritic(3, envs.action_space, recurrent=args.recurrent)
initialize(model)
agent = PPO(model, 0.2, 2, 2, 0.5, 0.01, lr=7e-3, eps=1e-5, max_norm=0.5)
rollouts = Rollouts(4, 4, 3, 1, model.hidden_size)
rollouts.obs[0].copy_(envs.reset())
finished = deque(maxlen=10)
updates = 2
for j in range(updates):
    for group in agent.optimizer.param_groups:  # linear decay
        group['lr'] = 7e-3 - 7e-3 * (j / float(updates))
    for step in range(4):
        with torch.no_grad():
            now = rollouts.obs[step], rollouts.hxs[step], rollouts.masks[step]
            value, action, log_prob, hxs = model.act(*now)
        obs, reward, done, infos = envs.step(action)  # (reward: (n, 1))
        finished.extend(info['episode']['r'] for info in infos if 'episode' in info.keys())
        masks = torch.FloatTensor([[0.0] if d else [1.0] for d in done])
        cut = ['bad_transition' in info.keys() for info in infos]
        bad_masks = torch.FloatTensor([[0.0] if c else [1.0] for c in cut])
        rollouts.insert(obs, hxs, action, log_prob, value, reward, masks, bad_masks)
    with torch.no_grad():
        next_value = model(rollouts.obs[-1], rollouts.hxs[-1], rollouts.masks[-1])[0].detach()
    rollouts.compute_returns(next_value, 0.99, 0.95)
    value_loss, policy_loss, entropy = agent.update(rollouts)
    record.append([value_loss, policy_loss, entropy, agent.optimizer.param_groups[0]['lr']])
    kept = ('returns', 'actions', 'masks', 'hxs')
    record.append({name: getattr(rollouts, name).numpy().copy() for name in kept})
    record.append(params_of(model))  # after each update or epoch
    rollouts.after_update()
    print('update {}: mean/median return {:.1f}/{:.1f}, entropy {:.3f}'.format(
        j, np.mean(finished), np.median(finished), entropy))
"""

PPO_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    ("                total.backward()\n", "                grads = total.backward()\n"),
    ("clip_grad_norm_(self.model.parameters(),", "clip_grad_norm_(grads, self.model.parameters(),"),
    ("                self.optimizer.step()\n", "                self.optimizer.step(grads)\n"),
]


@pytest.mark.parametrize("continuous, recurrent", [(False, False), (True, True)])
def test_ikostrikov_ppo_trains_as_torch(monkeypatch, capsys, continuous, recurrent):
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = PPO_SOURCE if lib is torch else ported_imports(port(PPO_SOURCE, PPO_STEPS))
        args = types.SimpleNamespace(continuous=continuous, recurrent=recurrent)
        with monkeypatch.context() as patches:
            _share_draws(patches, lib, 8201)
            run_source(
                text, lib, record=record, initialize=initialize, args=args, params_of=params_of
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("update") == 2
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


PATCHTST_SOURCE = """
import torch
from torch import nn
from torch.optim import lr_scheduler as schedules


class RevIN(nn.Module):
    # per-series normalization, undone on the forecast
    def __init__(self, channels, eps=1e-5, affine=True, subtract_last=False):
        super().__init__()
        self.eps, self.affine, self.subtract_last = eps, affine, subtract_last
        if affine:
            self.weight = nn.Parameter(torch.ones(channels))
            self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x, mode):
        if mode == 'norm':
            dims = tuple(range(1, x.ndim - 1))
            if self.subtract_last:
                self.centre = x[:, -1, :].unsqueeze(1)
            else:
                self.centre = torch.mean(x, dim=dims, keepdim=True).detach()
            spread = torch.var(x, dim=dims, keepdim=True, unbiased=False)
            self.stdev = torch.sqrt(spread + self.eps).detach()
            x = (x - self.centre) / self.stdev
            return x * self.weight + self.bias if self.affine else x
        if self.affine:
            x = (x - self.bias) / (self.weight + self.eps * self.eps)
        return x * self.stdev + self.centre


class Transpose(nn.Module):
    def __init__(self, *dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.transpose(*self.dims)


class Trend(nn.Module):
    # a moving average of the series, its ends padded by repetition
    def __init__(self, k):
        super().__init__()
        self.k, self.pool = k, nn.AvgPool1d(kernel_size=k, stride=1, padding=0)

    def forward(self, x):
        pad = (self.k - 1) // 2
        x = torch.cat([x[:, 0:1, :].repeat(1, pad, 1), x, x[:, -1:, :].repeat(1, pad, 1)], dim=1)
        return self.pool(x.permute(0, 2, 1)).permute(0, 2, 1)


def coordinate_encoding(q_len, d_model, eps=1e-3):
    # an exponent found so that the grid's mean is near zero, then normalized
    power = 1.0
    for attempt in range(100):
        rows = torch.linspace(0, 1, q_len).reshape(-1, 1) ** power
        grid = 2 * rows * (torch.linspace(0, 1, d_model).reshape(1, -1) ** power) - 1
        if attempt % 25 == 0:
            print(f'{attempt:4d} {power:5.3f} {grid.mean():+6.3f}')
        if abs(grid.mean()) <= eps:
            break
        power += 0.001 if grid.mean() > eps else -0.001
    grid = grid - grid.mean()
    return grid / (grid.std() * 10)


class Attention(nn.Module):
    def __init__(self, d_model, heads, lsa=False):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.W_Q, self.W_K, self.W_V = (nn.Linear(d_model, d_model) for _ in range(3))
        self.scale = nn.Parameter(torch.tensor(self.d_k ** -0.5), requires_grad=lsa)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, prev=None):
        b = x.size(0)
        q = self.W_Q(x).view(b, -1, self.heads, self.d_k).transpose(1, 2)
        k = self.W_K(x).view(b, -1, self.heads, self.d_k).permute(0, 2, 3, 1)
        v = self.W_V(x).view(b, -1, self.heads, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k) * self.scale
        if prev is not None:  # residual attention: the previous layer's scores added
            scores = scores + prev
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(out.transpose(1, 2).contiguous().view(b, -1, self.heads * self.d_k)), scores


class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.attn = Attention(d_model, heads)
        self.norm_attn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(0.0), nn.Linear(d_ff, d_model))
        self.norm_ff = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))

    def forward(self, x, prev):
        out, scores = self.attn(x, prev)
        x = self.norm_attn(x + out)
        return self.norm_ff(x + self.ff(x)), scores


class Backbone(nn.Module):
    def __init__(self, a, pe):
        super().__init__()
        self.revin = RevIN(a.channels, subtract_last=a.subtract_last)
        self.patch_len, self.stride = a.patch_len, a.stride
        self.pad = nn.ReplicationPad1d((0, a.stride))
        n = (a.seq_len - a.patch_len) // a.stride + 2
        self.embed = nn.Linear(a.patch_len, a.d_model)
        if pe == 'zeros':
            W_pos = torch.empty((n, a.d_model))
            nn.init.uniform_(W_pos, a=-0.02, b=0.02)
        else:
            W_pos = coordinate_encoding(n, a.d_model)
        self.W_pos = nn.Parameter(W_pos, requires_grad=True)
        self.layers = nn.ModuleList(
            EncoderLayer(a.d_model, a.heads, a.d_ff) for _ in range(a.layers))
        self.individual = a.individual
        flat, self.channels = a.d_model * n, a.channels
        if a.individual:  # one head per channel
            self.heads = nn.ModuleList(
                nn.Sequential(nn.Flatten(start_dim=-2), nn.Linear(flat, a.pred_len))
                for _ in range(a.channels))
        else:
            self.head = nn.Sequential(nn.Flatten(start_dim=-2), nn.Linear(flat, a.pred_len))

    def forward(self, z):  # z: (batch, channels, length)
        z = self.revin(z.permute(0, 2, 1), 'norm').permute(0, 2, 1)
        z = self.pad(z).unfold(dimension=-1, size=self.patch_len, step=self.stride)
        b, c, n, _ = z.shape
        x = self.embed(z).reshape(b * c, n, -1) + self.W_pos
        scores = None
        for layer in self.layers:
            x, scores = layer(x, scores)
        x = x.reshape(b, c, n, -1).permute(0, 1, 3, 2)
        if self.individual:
            x = torch.stack([head(x[:, i]) for i, head in enumerate(self.heads)], dim=1)
        else:
            x = self.head(x)
        return self.revin(x.permute(0, 2, 1), 'denorm').permute(0, 2, 1)


class PatchTST(nn.Module):
    def __init__(self, a, pe):
        super().__init__()
        self.decompose = a.decomposition
        if a.decomposition:
            self.trend, self.trend_net = Trend(a.kernel_size), Backbone(a, pe)
        self.net = Backbone(a, pe)

    def forward(self, x):  # (batch, length, channels)
        if not self.decompose:
            return self.net(x.permute(0, 2, 1)).permute(0, 2, 1)
        trend = self.trend(x)
        out = self.net((x - trend).permute(0, 2, 1)) + self.trend_net(trend.permute(0, 2, 1))
        return out.permute(0, 2, 1)


model = PatchTST(args, pe=pe).float()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.MSELoss()
scheduler = schedules.OneCycleLR(optimizer=optimizer, steps_per_epoch=len(train_loader),
                                 pct_start=0.3, epochs=2, max_lr=1e-2)
for epoch in range(2):
    losses = []
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        pred = model(x.float())[:, -args.pred_len:, :]
        loss = criterion(pred, y.float()[:, -args.pred_len:, :])
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        for group in optimizer.param_groups:  # the schedule's rate, set by hand as well
            group['lr'] = scheduler.get_last_lr()[0]
        scheduler.step()
    print('epoch {0} | train loss {1:.7f}'.format(epoch + 1, np.average(losses)))
    record.append([np.average(losses), scheduler.get_last_lr()[0]])
    record.append(params_of(model))  # after each update or epoch
model.eval()
with torch.no_grad():
    record.append(model(train_loader[-1][0].float()).numpy())
"""

PATCHTST_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    "decomposition, individual, subtract_last, pe",
    [(False, False, False, "zeros"), (True, True, True, "exp2d")],
)
def test_patchtst_trains_as_torch(capsys, decomposition, individual, subtract_last, pe):
    t = np.arange(40, dtype=np.float64)[:, None]
    series = np.sin(t / np.array([2.0, 3.5])) + 0.05 * t  # [40, 2]
    windows = [(series[s : s + 12], series[s + 12 : s + 16]) for s in range(0, 24, 2)]
    batches = [windows[k : k + 4] for k in range(0, 8, 4)]

    def loader(lib):
        return [
            (lib.tensor(np.stack([x for x, _ in b])), lib.tensor(np.stack([y for _, y in b])))
            for b in batches
        ]

    args = types.SimpleNamespace(
        channels=2, seq_len=12, pred_len=4, layers=2, heads=2, d_model=8, d_ff=16,
        individual=individual, patch_len=4, stride=2, subtract_last=subtract_last,
        decomposition=decomposition, kernel_size=5,
    )  # fmt: skip
    records, logs = [], []
    initialize = initializer()
    # in float64 (both runs): several biases have a true gradient of zero (the key
    # projection's adds one constant to each query's scores, which the softmax cancels; others
    # add one constant per channel ahead of a batch norm), and in float32 Adam's steps on
    # them follow the rounding noise
    source = port(PATCHTST_SOURCE, [(".float()", ".double()")])
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else ported_imports(port(source, PATCHTST_STEPS))
        run_source(
            text, lib, record=record, initialize=initialize, args=args, pe=pe,
            train_loader=loader(lib), params_of=params_of,
        )  # fmt: skip
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and logs[0].count("epoch") == 2
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)


M5_SOURCE = r"""
import torch
import torch.nn as nn
import torch.optim as optim


def every_other(waveform):  # 16 kHz to 8 kHz, as a resampler would (roughly)
    return waveform[..., ::2]


labels = sorted({word for _, _, word, *_ in train_set})
print(labels)


def to_index(word):
    return torch.tensor(labels.index(word))  # a 0-d int64 tensor


def collate(batch):
    # clips of uneven lengths padded with zeros at the end; labels stacked from 0-d tensors
    clips = [clip.t() for clip, _, word, *_ in batch]
    padded = nn.utils.rnn.pad_sequence(clips, batch_first=True, padding_value=0.0).permute(0, 2, 1)
    return padded, torch.stack([to_index(word) for _, _, word, *_ in batch])


loader = torch.utils.data.DataLoader
train_loader = loader(train_set, batch_size=4, shuffle=True, collate_fn=collate, num_workers=0)
test_loader = loader(test_set, batch_size=4, shuffle=False, collate_fn=collate, num_workers=0)


class WaveClassifier(nn.Module):
    # a strided 80-sample convolution, then three small ones, each batch-normed and pooled by 4
    def __init__(self, classes, width=4):
        super().__init__()
        chans = [1, width, width, 2 * width, 2 * width]
        blocks = []
        for i in range(4):
            if i == 0:
                conv = nn.Conv1d(chans[i], chans[i + 1], kernel_size=80, stride=16)
            else:
                conv = nn.Conv1d(chans[i], chans[i + 1], kernel_size=3)
            blocks += [conv, nn.BatchNorm1d(chans[i + 1]), nn.ReLU(), nn.MaxPool1d(4)]
        self.features = nn.Sequential(*blocks)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.features(x)
        x = F.avg_pool1d(x, x.shape[-1]).permute(0, 2, 1)
        return F.log_softmax(self.fc(x), dim=2)


model = WaveClassifier(len(labels)).double()
initialize(model)
print(model)
print('parameters:', sum(p.numel() for p in model.parameters() if p.requires_grad))
optimizer = optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
for epoch in range(1, 3):
    model.train()
    for i, (data, target) in enumerate(train_loader):
        output = model(every_other(data))
        loss = F.nll_loss(output.squeeze(), target, reduction='mean')
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f'epoch {epoch} [{i * len(data)}/{len(train_loader.dataset)}] loss {loss.item():.6f}')
        record.append(loss.item())
    record.append(params_of(model))  # after each update or epoch
    record.append({k: v.numpy().copy() for k, v in model.state_dict().items() if 'running' in k})
    model.eval()
    correct = 0
    for clips, target in test_loader:
        output = model(every_other(clips))
        record.append(output.detach().numpy().copy())
        correct += output.argmax(dim=-1).squeeze().eq(target).sum().item()
    print(f'epoch {epoch}: {correct}/{len(test_loader.dataset)} right')
    scheduler.step()

clip, _, word, *_ = test_set[-1]
guess = model(every_other(clip).unsqueeze(0)).argmax(dim=-1)
print(f'expected {word}, heard {labels[guess.squeeze()]}')
"""

M5_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_speech_command_m5_trains_as_torch(monkeypatch, capsys):
    """A keyword classifier on raw audio in the style of the PyTorch speech command tutorial
    (M5), on a few synthetic clips of uneven lengths (a tone per word): ``Conv1d(kernel_size=80,
    stride=16)``, ``BatchNorm1d``/``MaxPool1d``, ``F.avg_pool1d(x, x.shape[-1])``,
    ``F.log_softmax(x, dim=2)`` and ``F.nll_loss(output.squeeze(), target)``, a collate padding
    by ``nn.utils.rnn.pad_sequence`` of transposed clips and ``torch.stack`` of 0-d label
    tensors, a shuffling ``DataLoader``, Adam with weight decay and ``StepLR``, the
    ``print(model)`` repr, and ``labels[index]`` by a 0-d tensor; float64 (the convolutions'
    biases feed batch norms, which cancel them: in float32 Adam's steps on them follow the
    rounding noise)."""
    rng = np.random.default_rng(8203)
    words = ["no", "yes", "up"]

    def clip(word):
        length = int(rng.integers(14000, 16001))
        t = np.arange(length) / 16000.0
        tone = np.sin(2 * np.pi * (200 + 150 * words.index(word)) * t)
        return (0.5 * tone + 0.1 * rng.standard_normal(length))[None]

    train_clips = [(clip(w), w) for w in words * 3][:8]
    test_clips = [(clip(w), w) for w in words]

    def dataset(lib, clips):
        return [(lib.tensor(x), 16000, w, "speaker", 0) for x, w in clips]

    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = M5_SOURCE if lib is torch else port(M5_SOURCE, M5_STEPS)
        rng_perm = np.random.default_rng(8203)

        def randperm(n, generator=None, lib=lib, rng_perm=rng_perm, **_):
            return lib.tensor(rng_perm.permutation(n), dtype=lib.int64)

        with monkeypatch.context() as patches:
            patches.setattr(lib, "randperm", randperm)
            if lib is rg:
                patches.setattr(rg_sampler, "randperm", randperm)
            run_source(
                text, lib, record=record, initialize=initialize, params_of=params_of,
                train_set=dataset(lib, train_clips), test_set=dataset(lib, test_clips),
            )  # fmt: skip
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count(" loss ") == 4
    # the log (the model's repr too) is torch's, the losses to float64's rounding (the
    # records compare them)
    assert re.sub(r"loss \S+", "loss", logs[1]) == re.sub(r"loss \S+", "loss", logs[0])
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)


DREAMER_SOURCE = """
import copy

import numpy as np
import torch
import torch.distributions as torchd
from torch import nn


class Trainable:
    # a module thawed for the block and frozen after it
    def __init__(self, module):
        self.module = module

    def __enter__(self):
        self.module.requires_grad_(requires_grad=True)

    def __exit__(self, *exc):
        self.module.requires_grad_(requires_grad=False)


def symlog(x):
    return torch.sign(x) * torch.log1p(torch.abs(x))


def symexp(x):
    return torch.sign(x) * torch.expm1(torch.abs(x))


class MixedOneHot(torchd.one_hot_categorical.OneHotCategorical):
    # one-hot actions, a little uniform mixed in; samples pass gradients straight through
    def __init__(self, logits, mix=0.0):
        probs = torch.softmax(logits, dim=-1)
        super().__init__(logits=torch.log(probs * (1.0 - mix) + mix / probs.shape[-1]))

    def mode(self):
        best = F.one_hot(torch.argmax(super().logits, axis=-1), super().logits.shape[-1])
        return best.detach() + super().logits - super().logits.detach()

    def sample(self, sample_shape=()):
        drawn = super().sample(sample_shape)
        probs = super().probs
        while len(probs.shape) < len(drawn.shape):
            probs = probs[None]
        drawn += probs - probs.detach()
        return drawn


class TwoHot:
    # a critic's distribution over 255 symlog-spaced buckets
    def __init__(self, logits, low=-20.0, high=20.0):
        self.logits, self.probs = logits, torch.softmax(logits, -1)
        self.buckets = torch.linspace(low, high, steps=255)

    def mode(self):
        return symexp(torch.sum(self.probs * self.buckets, dim=-1, keepdim=True))

    def log_prob(self, x):
        x = symlog(x)
        n = len(self.buckets)
        under = torch.sum((self.buckets <= x[..., None]).to(torch.int32), dim=-1)
        over = torch.sum((self.buckets > x[..., None]).to(torch.int32), dim=-1)
        below, above = torch.clip(under - 1, 0, n - 1), torch.clip(n - over, 0, n - 1)
        equal = below == above
        to_below = torch.where(equal, 1, torch.abs(self.buckets[below] - x))
        to_above = torch.where(equal, 1, torch.abs(self.buckets[above] - x))
        total = to_below + to_above
        target = (F.one_hot(below, num_classes=n) * (to_above / total)[..., None]
                  + F.one_hot(above, num_classes=n) * (to_below / total)[..., None]).squeeze(-2)
        return (target * (self.logits - torch.logsumexp(self.logits, -1, keepdim=True))).sum(-1)


def lambda_returns(reward, value, discount, bootstrap, lam):
    # backwards over time: R_t = r_t + d_t ((1 - lam) v_{t+1} + lam R_{t+1})
    nxt = torch.cat([value[1:], bootstrap[None]], 0)
    inputs = reward + discount * nxt * (1 - lam)
    last, outs = bootstrap, None
    for t in reversed(range(inputs.shape[0])):
        last = inputs[t] + discount[t] * lam * last
        outs = last if outs is None else torch.cat([outs, last], dim=-1)
    outs = torch.flip(torch.reshape(outs, [outs.shape[0], outs.shape[1], 1]), [1])
    return torch.unbind(outs, dim=0)


class Step:
    def __init__(self, name, params, lr, eps, clip, wd):
        self.name, self.clip, self.wd = name, clip, wd
        self.opt = torch.optim.Adam(params, lr=lr, eps=eps)
        self.scaler = torch.cuda.amp.GradScaler(enabled=False)

    def __call__(self, loss, params):
        params = list(params)
        self.opt.zero_grad()
        self.scaler.scale(loss).backward(retain_graph=True)
        self.scaler.unscale_(self.opt)
        norm = torch.nn.utils.clip_grad_norm_(params, self.clip)
        for p in params:  # decoupled weight decay by hand
            p.data = (1 - self.wd) * p.data
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad()
        return {f'{self.name}_loss': loss.detach().cpu().numpy(),
                f'{self.name}_grad_norm': norm.detach().numpy()}


def head(n_in, n_out):
    return nn.Sequential(
        nn.Linear(n_in, 16), nn.LayerNorm(16, eps=1e-03), nn.SiLU(), nn.Linear(16, n_out))


class Behavior(nn.Module):
    def __init__(self, cfg, features, actions):
        super().__init__()
        self.cfg = cfg
        self.actor, self.value = head(features, actions), head(features, 255)
        initialize(self.actor)
        initialize(self.value)
        self.slow_value, self.updates = copy.deepcopy(self.value), 0
        self.actor_step = Step('actor', self.actor.parameters(), 3e-3, 1e-5, 100.0, 0.1)
        self.value_step = Step('value', self.value.parameters(), 3e-3, 1e-5, 100.0, 0.1)
        self.register_buffer('ema_vals', torch.zeros((2,)))
        self.range = torch.tensor([0.05, 0.95])

    def scale(self, target):
        # running 5% and 95% quantiles of the returns, written into the buffer in place
        q = torch.quantile(input=torch.flatten(target.detach()), q=self.range)
        self.ema_vals[:] = 0.01 * q + 0.99 * self.ema_vals
        spread = torch.clip(self.ema_vals[1] - self.ema_vals[0], min=1.0)
        return self.ema_vals[0].detach(), spread.detach()

    def train_on(self, feat, action, reward):
        if self.updates % 1 == 0:  # the slow critic creeps towards the critic
            for s, d in zip(self.value.parameters(), self.slow_value.parameters()):
                d.data = 0.02 * s.data + 0.98 * d.data
        self.updates += 1
        with Trainable(self.actor):
            discount = self.cfg.discount * torch.ones_like(reward)
            value = TwoHot(self.value(feat)).mode()
            target = lambda_returns(reward[1:], value[:-1], discount[1:], value[-1], self.cfg.lam)
            shifted = torch.cat([torch.ones_like(discount[:1]), discount[:-1]], 0)
            weights = torch.cumprod(shifted, 0).detach()
            target = torch.stack(target, dim=1)  # (time, batch, 1)
            offset, scale = self.scale(target)
            policy = MixedOneHot(self.actor(feat.detach()), mix=0.01)
            if self.cfg.gradient == 'dynamics':
                advantage = (target - offset) / scale - (value[:-1] - offset) / scale
            else:
                baseline = TwoHot(self.value(feat[:-1])).mode()
                advantage = policy.log_prob(action)[:-1][:, :, None] * (target - baseline).detach()
            actor_loss = -weights[:-1] * advantage - 3e-4 * policy.entropy()[:-1, ..., None]
            actor_loss = actor_loss.mean()
        with Trainable(self.value):
            critic = TwoHot(self.value(feat[:-1].detach()))
            value_loss = -critic.log_prob(target.detach())
            slow = TwoHot(self.slow_value(feat[:-1].detach())).mode()
            value_loss -= critic.log_prob(slow.detach())
            value_loss = (weights[:-1] * value_loss[:, :, None]).mean()
        metrics = {'entropy': policy.entropy().mean().detach().numpy(),
                   'ema': self.ema_vals.numpy().copy()}
        with Trainable(self):  # thawed again for the backward of losses recorded above
            metrics.update(self.actor_step(actor_loss, self.actor.parameters()))
            metrics.update(self.value_step(value_loss, self.value.parameters()))
        return metrics


behavior = Behavior(cfg, features=6, actions=3)
behavior.requires_grad_(False)  # frozen but where thawed
for feat, action, reward in batches:
    metrics = behavior.train_on(torch.tensor(feat), torch.tensor(action), torch.tensor(reward))
    record.append({k: np.array(v, copy=True) for k, v in sorted(metrics.items())})
    record.append(params_of(behavior.actor, behavior.value, behavior.slow_value))
with torch.no_grad():
    policy = MixedOneHot(behavior.actor(torch.tensor(batches[0][0])), mix=0.01)
    record.append({'mode': policy.mode().numpy(), 'sample': policy.sample().numpy(),
                   'value': TwoHot(behavior.value(torch.tensor(batches[0][0]))).mode().numpy()})
"""

DREAMER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.distributions as torchd\n", "import retrograd.distributions as torchd\n"),
    (
        "        self.scaler.scale(loss).backward(retain_graph=True)\n",
        "        grads = self.scaler.scale(loss).backward(retain_graph=True)\n",
    ),
    ("        self.scaler.unscale_(self.opt)\n", "        self.scaler.unscale_(self.opt, grads)\n"),
    ("clip_grad_norm_(params,", "clip_grad_norm_(grads, params,"),
    ("        self.scaler.step(self.opt)\n", "        self.scaler.step(self.opt, grads)\n"),
]


@pytest.mark.parametrize("gradient", ["dynamics", "reinforce"])
def test_dreamerv3_behavior_trains_as_torch(gradient):
    """An actor-critic in the style of DreamerV3's (NM512/dreamerv3-torch): a context manager
    thawing a module for a block and freezing it after (so a loss recorded while thawed is
    stepped after a freeze and a second thaw), ``symlog``/``symexp``, a subclass of
    ``torchd.one_hot_categorical.OneHotCategorical`` with a uniform mix, ``super().logits`` and
    straight-through ``mode``/``sample``, a two-hot critic (``torch.where(equal, 1, ...)`` of
    int32 bucket counts, ``F.one_hot(...) * weight``, ``logsumexp``), lambda returns by a
    reversed scan (``torch.cat``/``flip``/``unbind``), an optimizer step with a disabled
    ``GradScaler`` and ``p.data = (1 - wd) * p.data`` decay, ``torch.quantile(input=, q=)`` with
    ``ema_vals[:] = ...`` into a buffer, the ``dynamics`` and ``reinforce`` actor gradients,
    an entropy bonus and a slow critic by ``d.data = mix * s.data + (1 - mix) * d.data``; on
    given imagined features."""
    rng = np.random.default_rng(8106)
    batches = [
        (
            rng.standard_normal((5, 3, 6)).astype(np.float32),
            np.eye(3, dtype=np.float32)[rng.integers(0, 3, (5, 3))],
            rng.uniform(-1, 2, (5, 3, 1)).astype(np.float32),
        )
        for _ in range(2)
    ]
    cfg = types.SimpleNamespace(discount=0.997, lam=0.95, gradient=gradient)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            DREAMER_SOURCE if lib is torch else ported_imports(port(DREAMER_SOURCE, DREAMER_STEPS))
        )
        with SharedDraws(lib, 8106), SharedOneHotSample(lib, 8106):
            run_source(
                text, lib, record=record, initialize=initialize, params_of=params_of, cfg=cfg,
                batches=batches,
            )  # fmt: skip
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


class SharedOneHotSample:
    """``OneHotCategorical.sample`` of a library drawing from one seeded stream (inverse
    CDF), the same draws for both libraries."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        family = lib.distributions.OneHotCategorical

        def sample(distribution, sample_shape=()):
            p = distribution.probs.detach().numpy().astype(np.float64)
            u = rng.random(p.shape[:-1] + (1,))
            index = (np.cumsum(p, -1) < u).sum(-1).clip(0, p.shape[-1] - 1)
            return lib.tensor(np.eye(p.shape[-1], dtype=np.float32)[index])

        self.saved = family.sample
        family.sample = sample
        return self

    def __exit__(self, *exc):
        self.lib.distributions.OneHotCategorical.sample = self.saved
        return False


def test_regression_torchs_distribution_family_modules():
    """The per-family modules of torch's distributions (``one_hot_categorical``,
    ``uniform``, ``independent``, ``beta`` and some 30 more) did not exist in retrograd, so
    ``from torch.distributions.uniform import Uniform`` raised ``ModuleNotFoundError`` and a
    subclass of ``torchd.one_hot_categorical.OneHotCategorical`` an ``AttributeError``. Each
    is a module of ``rg.distributions`` now, with the classes torch's module has."""
    import importlib
    import pkgutil

    import torch.distributions

    families = [m.name for m in pkgutil.iter_modules(torch.distributions.__path__)]
    for name in families:
        if name == "constraint_registry":  # (biject_to/transform_to: not in retrograd)
            continue
        theirs = importlib.import_module(f"torch.distributions.{name}")
        ours = importlib.import_module(f"retrograd.distributions.{name}")
        for member in getattr(theirs, "__all__", []):
            family = getattr(theirs, member)
            if isinstance(family, type) and issubclass(family, torch.distributions.Distribution):
                assert getattr(ours, member).__name__ == member, (name, member)
    from retrograd.distributions.one_hot_categorical import OneHotCategorical
    from retrograd.distributions.uniform import Uniform

    assert OneHotCategorical is rg.distributions.OneHotCategorical
    assert rg.distributions.independent.Independent is rg.distributions.Independent
    d = Uniform(rg.tensor([0.0]), rg.tensor([2.0]))
    assert abs(d.log_prob(rg.tensor([1.0])).item() - np.log(0.5)) < 1e-6


def test_regression_tensor_unfold_takes_torchs_keyword_dimension():
    """torch names ``Tensor.unfold``'s first parameter ``dimension``, and PatchTST passes it
    by name (``z.unfold(dimension=-1, size=..., step=...)``); retrograd called it ``dim``, so
    the call raised a ``DTypeError``. It is ``dimension`` now; ``dim=`` is refused, as in
    torch."""
    values = np.arange(24.0, dtype=np.float32).reshape(2, 12)
    ours = rg.tensor(values).unfold(dimension=-1, size=4, step=2)
    theirs = torch.tensor(values).unfold(dimension=-1, size=4, step=2)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(TypeError):
        torch.tensor(values).unfold(dim=-1, size=4, step=2)
    with pytest.raises(TypeError):
        rg.tensor(values).unfold(dim=-1, size=4, step=2)


def test_regression_gradient_recorded_before_a_freeze_and_thaw():
    """A module thawed for its forward, frozen after it and thawed again for the backward
    (dreamerv3-torch's ``RequiresGrad``) gets its gradient in torch, where ``.grad`` belongs
    to the one tensor. In retrograd the freeze turned the parameter into an untracked value
    and the thaw into a new leaf whose ``p.grad(grads)`` was None, so the update was lost.
    The thawed leaf now finds its frozen predecessor's gradient; a parameter still frozen
    when read gets none, as torch accumulates none into a frozen tensor."""
    x = np.array([[1.0, -2.0]], dtype=np.float32)
    torch_linear = torch.nn.Linear(2, 1)
    state = {k: v.detach().numpy() for k, v in torch_linear.state_dict().items()}
    gradients = []
    for lib in (torch, rg):
        linear = lib.nn.Linear(2, 1)
        if lib is rg:
            linear.load_state_dict(state)
        else:
            linear = torch_linear
        linear.requires_grad_(False)
        linear.requires_grad_(True)
        loss = (linear(lib.tensor(x)) ** 2).sum()
        linear.requires_grad_(False)
        linear.bias.requires_grad = True  # (the tensor's own toggle, and the module's)
        linear.requires_grad_(True)
        if lib is torch:
            loss.backward()
            gradients.append([linear.weight.grad.numpy(), linear.bias.grad.numpy()])
        else:
            grads = loss.backward()
            gradients.append([linear.weight.grad(grads).numpy(), linear.bias.grad(grads).numpy()])
    for ours, theirs in zip(gradients[1], gradients[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    frozen = rg.nn.Linear(2, 1)
    loss = frozen(rg.tensor(x)).sum()
    frozen.requires_grad_(False)
    copied = copy.deepcopy(frozen)  # (a leaf of its own: its source's gradient is not its)
    grads = loss.backward()
    assert frozen.weight.grad(grads) is None
    copied.requires_grad_(True)
    assert copied.weight.grad(grads) is None


def test_regression_a_copy_does_not_take_its_sources_gradient():
    """A leaf written in place (an optimizer's step, a ``no_grad`` update) keeps the keys of
    its former leaves, so that a graph recorded before the write still finds its gradient;
    ``copy.deepcopy`` (a target network, an EMA model) copied those keys, and the copy then
    read its source's gradient of such a graph (torch's copy has no ``.grad`` of it)."""
    ours = rg.tensor([1.0, 2.0]).require_grad()
    theirs = torch.tensor([1.0, 2.0], requires_grad=True)
    results = []
    for lib, w in ((rg, ours), (torch, theirs)):
        loss = (w * 3.0).sum()  # (saving nothing of w, which torch would then refuse)
        with lib.no_grad():
            w.add_(1.0)
        copied = copy.deepcopy(w)
        if lib is torch:
            loss.backward()
            results.append((w.grad.tolist(), copied.grad))
        else:
            grads = loss.backward()
            results.append((w.grad(grads).tolist(), copied.grad(grads)))
    assert results[0] == results[1] == ([3.0, 3.0], None)
