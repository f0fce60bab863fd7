"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_69.py`` (the
harness: ``tests/real_ports.py``). Both programs are written here, in the style of the public
projects named, and run on torch and, ported, on retrograd from the same weights and draws:

- an offline-RL Decision Transformer written in the style of kzl/decision-transformer (its
  GPT-2 trunk in the style of HuggingFace's ``modeling_gpt2.py``, without position
  embeddings), small: returns-to-go, states and actions embedded with a shared timestep
  ``nn.Embedding`` and interleaved by ``torch.stack(..., dim=1).permute(0, 2, 1, 3).reshape``;
  ``Conv1D`` layers of ``x.size()[:-1] + (self.n_out,)`` and ``torch.addmm``; the causal mask
  as a uint8 ``torch.tril`` buffer sliced ``self.bias[:, :, n_key - n_query : n_key, :n_key]``
  and applied by ``torch.where(mask.bool(), w, self.masked_bias.to(w.dtype))``; the padding mask
  as ``(1.0 - mask) * -10000.0`` after ``.to(dtype=self.dtype)`` (a float64 mask from NumPy in
  training, a long one in the rollout); ``split(self.split_size, dim=2)``; ``self.apply`` of an
  initialiser writing ``.data.normal_``/``zero_``/``fill_``; actions through ``tanh``; the MSE
  over ``preds.reshape(-1, act_dim)[mask.reshape(-1) > 0]``; ``AdamW`` with a ``LambdaLR``
  warmup, ``clip_grad_norm_(..., .25)``; a length-weighted ``np.random.choice`` over the best
  trajectories; and the evaluation rollout's float64 NumPy states and normalisers promoted and
  cast back (``torch.cat`` of float32 and float64, ``.to(dtype=torch.float32)``, a left padding
  ``torch.cat`` of float zeros and long timesteps cast ``.to(dtype=torch.long)``),
  ``actions[-1] = action`` and ``rewards[-1] = reward`` of a NumPy float.
- a character-level Reformer written in the style of lucidrains/reformer-pytorch (its
  ``LSHAttention``, reversible blocks, autopadder, generation wrapper and enwik8 training
  script), small and causal with tied layer weights: random rotations ``torch.randn(...)
  .expand(batch, -1, -1, -1)`` through ``torch.einsum('btf,bfhi->bhti', ...)`` and
  ``torch.argmax`` hashing, a key/value sort (``t1.sort`` and ``t2.expand_as(t1).gather``),
  the undo-sort by a second ``sort``, row gathers by ``index[:, :, None].expand(-1, -1, d)``,
  chunks looking one back by ``torch.cat([x[:, -1:, ...], x[:, :-1, ...]], dim=1)``,
  ``masked_fill_`` of the einsum's scores with ``-torch.finfo(dtype).max`` by boolean masks made
  by ``q_real[:, :, :, None] * kv_real[:, :, None, :]`` (bool times bool) and ``~mask``, the
  hashing rounds merged through ``torch.logsumexp`` and ``gather``, ``F.pad`` of bool masks with
  ``value=False``/``True`` and of token ids with ``value=0``, a batch-chunked call concatenating
  its outputs (``torch.empty(0)`` too), a ``Chunk``ed feed-forward, ``@torch.no_grad()``
  generation with top-k's ``scatter_`` into ``full_like(logits, float('-inf'))`` and
  ``torch.multinomial``, a ``Dataset`` slicing by a one-element ``torch.randint`` tensor, a
  ``DataLoader``, ``Adam`` with gradients accumulated over two batches and ``clip_grad_norm_``;
  the reversible blocks (``reverse_thres=0``): ``ReplayRng``'s
  ``torch.get_rng_state``/``torch.random.fork_rng``/``set_rng_state``, a custom
  ``autograd.Function`` whose ``backward`` recomputes each block with ``y1.requires_grad =
  True`` and calls ``torch.autograd.backward(g_of_y1, dy2)``, the parameters' gradients reaching the
  optimizer from those inner backwards; rotary positions (a sinusoid table by
  ``torch.einsum('i , j -> i j', ...)``, pairs rotated with einops' ``rearrange``/``repeat``)
  and, in one run, a learned absolute position embedding instead; and in one run the plain
  (irreversible) blocks.

The regressions guarded: gradients that an ``autograd.backward`` inside a custom Function's
``backward`` computes reach the outer backward's parameters (they were dropped, so the
reversible Reformer's parameters had no gradient and the optimizer left them alone); the
reversible blocks with dropout replay the forward's generator state and so give the plain
blocks' gradients (the focused tests below).
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

DECISION_TRANSFORMER_SOURCE = """
import random

import numpy as np
import torch
import torch.nn as nn


# --- a GPT-2 trunk that reads embeddings (no position table: the timesteps give position) ---

class Conv1D(nn.Module):
    # GPT-2's dense layer: the weight is stored (in, out) and applied by addmm
    def __init__(self, n_out, n_in):
        super().__init__()
        self.n_out = n_out
        weight = torch.empty(n_in, n_out)
        nn.init.normal_(weight, std=0.02)
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        shape = x.size()[:-1] + (self.n_out,)
        flat = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return flat.view(*shape)


class CausalAttention(nn.Module):
    def __init__(self, width, context, cfg):
        super().__init__()
        assert width % cfg.n_head == 0
        lower = torch.tril(torch.ones((context, context), dtype=torch.uint8))
        self.register_buffer('bias', lower.view(1, 1, context, context))
        self.register_buffer('masked_bias', torch.tensor(-1e4))
        self.n_head = cfg.n_head
        self.split_size = width
        self.c_attn = Conv1D(3 * width, width)
        self.c_proj = Conv1D(width, width)
        self.attn_dropout = nn.Dropout(cfg.attn_pdrop)
        self.resid_dropout = nn.Dropout(cfg.resid_pdrop)

    def to_heads(self, x, as_keys=False):
        x = x.view(*(x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)))
        # keys come out transposed, ready for q @ k
        return x.permute(0, 2, 3, 1) if as_keys else x.permute(0, 2, 1, 3)

    def from_heads(self, x):
        merged = x.permute(0, 2, 1, 3).contiguous()
        return merged.view(*(merged.size()[:-2] + (merged.size(-2) * merged.size(-1),)))

    def forward(self, hidden, pad_bias=None):
        q, k, v = self.c_attn(hidden).split(self.split_size, dim=2)
        q, k, v = self.to_heads(q), self.to_heads(k, as_keys=True), self.to_heads(v)
        scores = torch.matmul(q, k) / (float(v.size(-1)) ** 0.5)
        n_query, n_key = scores.size(-2), scores.size(-1)
        visible = self.bias[:, :, n_key - n_query : n_key, :n_key]
        scores = torch.where(visible.bool(), scores, self.masked_bias.to(scores.dtype))
        if pad_bias is not None:
            scores = scores + pad_bias
        probs = self.attn_dropout(nn.Softmax(dim=-1)(scores))
        mixed = self.from_heads(torch.matmul(probs, v))
        return self.resid_dropout(self.c_proj(mixed))


class FeedForward(nn.Module):
    def __init__(self, inner, cfg):
        super().__init__()
        self.c_fc = Conv1D(inner, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, inner)
        self.dropout = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(nn.functional.relu(self.c_fc(x))))


class Layer(nn.Module):
    def __init__(self, context, cfg):
        super().__init__()
        width = cfg.n_embd
        self.ln_1 = nn.LayerNorm(width, eps=cfg.layer_norm_epsilon)
        self.attn = CausalAttention(width, context, cfg)
        self.ln_2 = nn.LayerNorm(width, eps=cfg.layer_norm_epsilon)
        self.mlp = FeedForward(cfg.n_inner or 4 * width, cfg)

    def forward(self, hidden, pad_bias=None):
        hidden = hidden + self.attn(self.ln_1(hidden), pad_bias=pad_bias)
        return hidden + self.mlp(self.ln_2(hidden))


class TrunkConfig:
    def __init__(self, n_embd, n_layer, n_head, n_ctx, n_inner=None, pdrop=0.1,
                 layer_norm_epsilon=1e-5, initializer_range=0.02):
        self.n_embd, self.n_layer, self.n_head, self.n_ctx = n_embd, n_layer, n_head, n_ctx
        self.n_inner = n_inner
        self.resid_pdrop = self.embd_pdrop = self.attn_pdrop = pdrop
        self.layer_norm_epsilon, self.initializer_range = layer_norm_epsilon, initializer_range


class Trunk(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.drop = nn.Dropout(cfg.embd_pdrop)
        self.h = nn.ModuleList([Layer(cfg.n_ctx, cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.apply(self.init_weights)

    def init_weights(self, module):
        if isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()
        elif isinstance(module, (nn.Linear, Conv1D)):
            module.weight.data.normal_(mean=0.0, std=self.cfg.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()

    @property
    def dtype(self):
        return self.ln_f.weight.dtype

    def forward(self, inputs_embeds, token_mask=None):
        batch, pad_bias = inputs_embeds.shape[0], None
        if token_mask is not None:
            # 1 = attend, 0 = padding; broadcast over heads and queries as an additive bias
            extended = token_mask.view(batch, -1)[:, None, None, :]
            extended = extended.to(dtype=self.dtype)
            pad_bias = (1.0 - extended) * -10000.0
        hidden = self.drop(inputs_embeds)
        for layer in self.h:
            hidden = layer(hidden, pad_bias=pad_bias)
        return self.ln_f(hidden)


# --- the return-conditioned policy ---

class DecisionTransformer(nn.Module):
    # reads (R_1, s_1, a_1, R_2, s_2, a_2, ...) and predicts a_t from the token of s_t

    def __init__(self, state_dim, act_dim, hidden_size, max_length, max_ep_len, **trunk_args):
        super().__init__()
        self.state_dim, self.act_dim = state_dim, act_dim
        self.hidden_size, self.max_length = hidden_size, max_length
        self.transformer = Trunk(TrunkConfig(n_embd=hidden_size, **trunk_args))
        self.embed_timestep = nn.Embedding(max_ep_len, self.hidden_size)
        self.embed_return = nn.Linear(1, hidden_size)
        self.embed_state = nn.Linear(state_dim, hidden_size)
        self.embed_action = nn.Linear(act_dim, hidden_size)
        self.embed_ln = nn.LayerNorm(self.hidden_size)
        self.predict_state = nn.Linear(hidden_size, state_dim)
        self.predict_action = nn.Sequential(nn.Linear(hidden_size, act_dim), nn.Tanh())
        self.predict_return = nn.Linear(hidden_size, 1)

    def forward(self, states, actions, returns_to_go, timesteps, attention_mask=None):
        batch, length = states.shape[0], states.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones((batch, length), dtype=torch.long)
        when = self.embed_timestep(timesteps)
        tokens = (
            self.embed_return(returns_to_go) + when,
            self.embed_state(states) + when,
            self.embed_action(actions) + when,
        )
        # interleave the three streams along time: (batch, 3 * length, hidden)
        sequence = torch.stack(tokens, dim=1).permute(0, 2, 1, 3)
        sequence = self.embed_ln(sequence.reshape(batch, 3 * length, self.hidden_size))
        mask3 = torch.stack((attention_mask,) * 3, dim=1).permute(0, 2, 1)
        hidden = self.transformer(sequence, token_mask=mask3.reshape(batch, 3 * length))
        per_kind = hidden.reshape(batch, length, 3, self.hidden_size).permute(0, 2, 1, 3)
        return (
            self.predict_state(per_kind[:, 2]),
            self.predict_action(per_kind[:, 1]),
            self.predict_return(per_kind[:, 2]),
        )

    def get_action(self, states, actions, returns_to_go, timesteps):
        # the last max_length steps of one episode, left-padded with zeros
        states = states.reshape(1, -1, self.state_dim)[:, -self.max_length:]
        actions = actions.reshape(1, -1, self.act_dim)[:, -self.max_length:]
        returns_to_go = returns_to_go.reshape(1, -1, 1)[:, -self.max_length:]
        timesteps = timesteps.reshape(1, -1)[:, -self.max_length:]
        seen = states.shape[1]
        missing = self.max_length - seen
        mask = torch.cat([torch.zeros(missing), torch.ones(seen)])
        mask = mask.to(dtype=torch.long, device=states.device).reshape(1, -1)

        def left_pad(x, width):
            zeros = torch.zeros((1, missing, width), device=x.device)
            return torch.cat([zeros, x], dim=1).to(dtype=torch.float32)

        states = left_pad(states, self.state_dim)
        actions = left_pad(actions, self.act_dim)
        returns_to_go = left_pad(returns_to_go, 1)
        timesteps = torch.cat([torch.zeros((1, missing)), timesteps], dim=1).to(dtype=torch.long)
        _, predicted, _ = self.forward(
            states, actions, returns_to_go, timesteps, attention_mask=mask
        )
        return predicted[0, -1]


# --- offline data ---

def reward_to_go(rewards, gamma=1.0):
    out = np.zeros_like(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


class SegmentSampler:
    # draws fixed-length windows from the best trajectories, weighted by their lengths

    def __init__(self, trajectories, context, max_ep_len, scale, top_fraction=1.0):
        self.trajectories, self.context = trajectories, context
        self.max_ep_len, self.scale = max_ep_len, scale
        observations = np.concatenate([t['observations'] for t in trajectories], axis=0)
        self.state_mean = np.mean(observations, axis=0)
        self.state_std = np.std(observations, axis=0) + 1e-6
        lengths = np.array([len(t['observations']) for t in trajectories])
        totals = np.array([t['rewards'].sum() for t in trajectories])
        print(f'{len(lengths)} trajectories with {lengths.sum()} steps; '
              f'returns {np.mean(totals):.2f} +- {np.std(totals):.2f} '
              f'in [{np.min(totals):.2f}, {np.max(totals):.2f}]')
        budget = max(int(top_fraction * lengths.sum()), 1)
        by_return = np.argsort(totals)
        kept, used = [by_return[-1]], lengths[by_return[-1]]
        for index in by_return[-2::-1]:
            if used + lengths[index] > budget:
                break
            kept.append(index)
            used += lengths[index]
        self.kept = np.array(kept[::-1])
        self.weights = lengths[self.kept] / lengths[self.kept].sum()

    def window(self, traj):
        K, sd = self.context, traj['observations'].shape[1]
        ad = traj['actions'].shape[1]
        start = random.randint(0, traj['rewards'].shape[0] - 1)
        s = traj['observations'][start:start + K]
        n = s.shape[0]
        a = traj['actions'][start:start + K]
        r = traj['rewards'][start:start + K].reshape(-1, 1)
        done = traj['terminals'][start:start + K].astype(np.int64)
        rtg = reward_to_go(traj['rewards'][start:])[:n + 1].reshape(-1, 1)
        if rtg.shape[0] <= n:
            rtg = np.concatenate([rtg, np.zeros((1, 1))], axis=0)
        t = np.minimum(np.arange(start, start + n), self.max_ep_len - 1)
        pad = K - n
        return (
            np.concatenate([np.zeros((pad, sd)), (s - self.state_mean) / self.state_std]),
            np.concatenate([np.full((pad, ad), -10.0), a]),
            np.concatenate([np.zeros((pad, 1)), r]),
            np.concatenate([np.full(pad, 2), done]),
            np.concatenate([np.zeros((pad, 1)), rtg]) / self.scale,
            np.concatenate([np.zeros(pad), t]),
            np.concatenate([np.zeros(pad), np.ones(n)]),
        )

    def sample(self, batch_size):
        picks = np.random.choice(
            np.arange(len(self.kept)), size=batch_size, replace=True, p=self.weights
        )
        columns = zip(*[self.window(self.trajectories[int(self.kept[i])]) for i in picks])
        s, a, r, d, rtg, t, mask = (np.stack(c) for c in columns)
        as_float = dict(dtype=torch.float32, device='cpu')
        return (
            torch.from_numpy(s).to(**as_float),
            torch.from_numpy(a).to(**as_float),
            torch.from_numpy(r).to(**as_float),
            torch.from_numpy(d).to(dtype=torch.long, device='cpu'),
            torch.from_numpy(rtg).to(**as_float),
            torch.from_numpy(t).to(dtype=torch.long, device='cpu'),
            torch.from_numpy(mask).to(device='cpu'),  # float64, as NumPy made it
        )


# --- an evaluation episode, conditioned on a target return ---

def rollout(env, model, sampler, target, max_ep_len, device='cpu'):
    model.eval()
    mean = torch.from_numpy(sampler.state_mean).to(device=device)
    std = torch.from_numpy(sampler.state_std).to(device=device)
    first = env.reset()
    states = torch.from_numpy(first).reshape(1, -1).to(device=device, dtype=torch.float32)
    act_dim = model.act_dim
    acts = torch.zeros((0, act_dim), device=device, dtype=torch.float32)
    rews = torch.zeros(0, device=device, dtype=torch.float32)
    to_go = torch.tensor(target / sampler.scale, device=device, dtype=torch.float32).reshape(1, 1)
    steps = torch.tensor(0, device=device, dtype=torch.long).reshape(1, 1)
    total, length = 0.0, 0
    for t in range(max_ep_len):
        acts = torch.cat([acts, torch.zeros((1, act_dim), device=device)], dim=0)
        rews = torch.cat([rews, torch.zeros(1, device=device)])
        with torch.no_grad():
            action = model.get_action(
                (states.to(dtype=torch.float32) - mean) / std,
                acts.to(dtype=torch.float32),
                to_go.to(dtype=torch.float32),
                steps.to(dtype=torch.long),
            )
        acts[-1] = action
        observation, reward, done, _ = env.step(action.detach().cpu().numpy())
        # float64 observations join the float32 history: the history becomes float64
        seen = torch.from_numpy(observation).to(device=device).reshape(1, -1)
        states = torch.cat([states, seen], dim=0)
        rews[-1] = reward
        to_go = torch.cat([to_go, (to_go[0, -1] - reward / sampler.scale).reshape(1, 1)], dim=1)
        later = torch.ones((1, 1), device=device, dtype=torch.long) * (t + 1)
        steps = torch.cat([steps, later], dim=1)
        total += reward
        length += 1
        if done:
            break
    record.append({
        'return': total, 'actions': acts.numpy().copy(), 'to_go': to_go.numpy().copy(),
        'rewards': rews.numpy().copy(), 'float64_history': states.dtype == torch.float64,
    })
    return total, length


def train(cfg, trajectories, env):
    state_dim = trajectories[0]['observations'].shape[1]
    act_dim = trajectories[0]['actions'].shape[1]
    sampler = SegmentSampler(
        trajectories, cfg['context'], cfg['max_ep_len'], cfg['scale'], cfg['top_fraction']
    )
    model = DecisionTransformer(
        state_dim, act_dim, cfg['width'], max_length=cfg['context'], max_ep_len=cfg['max_ep_len'],
        n_layer=cfg['layers'], n_head=cfg['heads'], n_inner=4 * cfg['width'],
        n_ctx=3 * cfg['context'], pdrop=cfg['dropout'],
    )
    initialize(model)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg['lr'], weight_decay=cfg['weight_decay']
    )
    warmup = cfg['warmup']
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: min((n + 1) / warmup, 1))

    for iteration in range(1, cfg['iterations'] + 1):
        model.train()
        losses, logs = [], {}
        for _ in range(cfg['steps_per_iteration']):
            batch = sampler.sample(cfg['batch_size'])
            states, actions, rewards, dones, rtg, timesteps, mask = batch
            target = torch.clone(actions)
            _, predicted, _ = model(states, actions, rtg[:, :-1], timesteps, attention_mask=mask)
            real = mask.reshape(-1) > 0
            predicted = predicted.reshape(-1, act_dim)[real]
            target = target.reshape(-1, act_dim)[real]
            loss = torch.mean((predicted - target) ** 2)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), .25)
            opt.step()
            scheduler.step()
            with torch.no_grad():
                error = torch.mean((predicted - target) ** 2)
                logs['training/action_error'] = error.detach().cpu().item()
            losses.append(loss.detach().cpu().item())
            record.append(losses[-1])
        for goal in cfg['targets']:
            score, length = rollout(env, model, sampler, goal, cfg['max_ep_len'])
            logs[f'evaluation/target_{goal}_return'] = score
            logs[f'evaluation/target_{goal}_length'] = length
        logs['training/train_loss_mean'] = np.mean(losses)
        logs['training/train_loss_std'] = np.std(losses)
        logs['training/lr'] = scheduler.get_last_lr()[0]
        print('-' * 60)
        print(f'Iteration {iteration}')
        for key, value in logs.items():
            print(f'{key}: {value:.5f}')
        record.append(dict(logs))
    record.append({name: p.detach().numpy().copy() for name, p in model.state_dict().items()})
"""


DECISION_TRANSFORMER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), .25)\n"
        "            opt.step()\n",
        "            grads = loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), .25)\n"
        "            opt.step(grads)\n",
    ),
]


class _Drift:
    """A gym-style task with float64 NumPy states: the state decays and the action pushes it
    through a fixed matrix; the reward, a NumPy float, falls with the distance from the
    origin; an episode lasts ``horizon`` steps."""

    def __init__(self, horizon=3):
        self.horizon = horizon
        self.push = np.array([[0.4, -0.1], [0.2, 0.3], [-0.2, 0.5]])

    def reset(self):
        self.t = 0
        self.state = np.array([0.6, -0.3, 0.2])
        return self.state

    def step(self, action):
        self.t += 1
        self.state = 0.8 * self.state + self.push @ np.asarray(action, dtype=np.float64)
        reward = 1.0 - np.abs(self.state).sum()  # a numpy.float64
        return self.state, reward, self.t >= self.horizon, {}


def _offline_data(rng):
    """Three logged episodes of different lengths (float32, as a D4RL file holds them)."""
    episodes = []
    for length in (4, 6, 3):
        episodes.append(
            {
                "observations": rng.standard_normal((length, 3)).astype(np.float32),
                "actions": np.tanh(rng.standard_normal((length, 2))).astype(np.float32),
                "rewards": rng.standard_normal(length).astype(np.float32),
                "terminals": np.arange(length) == length - 1,
            }
        )
    return episodes


def test_decision_transformer_trains_and_rolls_out_as_torch(capsys):
    cfg = {
        "context": 4,
        "max_ep_len": 20,
        "scale": 10.0,
        "top_fraction": 0.8,
        "width": 8,
        "layers": 2,
        "heads": 2,
        "dropout": 0.0,
        "lr": 1e-2,
        "weight_decay": 1e-4,
        "warmup": 2,
        "iterations": 2,
        "steps_per_iteration": 2,
        "batch_size": 3,
        "targets": [5.0],
    }
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        np.random.seed(7001)
        random.seed(7001)
        text = DECISION_TRANSFORMER_SOURCE
        if lib is rg:
            text = port(text, DECISION_TRANSFORMER_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["train"](dict(cfg), _offline_data(np.random.default_rng(7001)), _Drift())
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "Iteration 2" in logs[0] and "trajectories with 13 steps" in logs[0]
    # the rollout's history was promoted to float64 by the environment's states
    assert records[0][2]["float64_history"] is True
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


REFORMER_SOURCE = """
import random
from functools import partial

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.autograd import Function as AutogradFunction
from torch.nn import Identity

from einops import repeat, rearrange

# a query's score for its own key: it attends to itself only if nothing else is left
SELF_SCORE = -5e4


def exists(x):
    return x is not None


def default(x, fallback):
    return fallback if x is None else x


def sort_along(keys, values, dim=-1):
    # sort the keys, carrying values (broadcast to the keys' shape) along
    ordered, order = keys.sort(dim=dim)
    return ordered, values.expand_as(keys).gather(dim, order)


def take_rows(x, index):
    # x: (batch, n, d), index: (batch, m) -> (batch, m, d)
    return x.gather(1, index[:, :, None].expand(-1, -1, x.shape[-1]))


def batch_chunked(fn, chunks):
    # fn over slices of the batch; each of its outputs concatenated back
    def run(*tensors, **named):
        names, n = list(named), len(tensors)
        sliced = [t.chunk(chunks, dim=0) for t in list(tensors) + list(named.values())]
        results = [fn(*piece[:n], **dict(zip(names, piece[n:]))) for piece in zip(*sliced)]
        return tuple(torch.cat(parts, dim=0) for parts in zip(*results))
    return run


def built_once(build):
    # the same module on every call: one set of weights for every layer
    made = []

    def get():
        if not made:
            made.append(build())
        return made[0]
    return get


def fold_heads(t):
    # (batch, heads, ...) -> (batch * heads, ...)
    return t.reshape(-1, *t.shape[2:])


class Constant(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def forward(self, *_, **__):
        return self.value


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kw):
        return self.fn(self.norm(x), **kw)


class Chunk(nn.Module):
    # fn applied piece by piece along one axis (the feed-forward's memory saving)
    def __init__(self, chunks, fn, along_dim=-1):
        super().__init__()
        self.chunks, self.fn, self.dim = chunks, fn, along_dim

    def forward(self, x, **kw):
        pieces = x.chunk(self.chunks, dim=self.dim)
        return torch.cat([self.fn(piece, **kw) for piece in pieces], dim=self.dim)


# --- LSH attention: shared query/key vectors, attention only within hash buckets ---

class HashedAttention(nn.Module):
    def __init__(self, bucket_size=64, n_hashes=8, causal=False, dropout=0.):
        super().__init__()
        self.bucket_size, self.n_hashes, self.causal = bucket_size, n_hashes, causal
        self.drop = nn.Dropout(dropout)
        # per depth: a reversible block's backward must hash as its forward did
        self.saved_buckets = {}

    def hash(self, vecs, n_buckets):
        batch, _, width = vecs.shape
        # one random rotation per round, shared over the batch; a vector's bucket is the
        # largest of its rotated coordinates and their negatives
        shape = (1, width, self.n_hashes, n_buckets // 2)
        rotations = torch.randn(shape, dtype=vecs.dtype, device=vecs.device)
        rotated = torch.einsum('btf,bfhi->bhti', vecs, rotations.expand(batch, -1, -1, -1))
        buckets = torch.argmax(torch.cat([rotated, -rotated], dim=-1), dim=-1)
        rounds = torch.arange(self.n_hashes, device=vecs.device).reshape(1, -1, 1)
        return (buckets + rounds * n_buckets).reshape(batch, -1)

    def forward(self, qk, v, input_mask=None, pos_emb=None, _depth=None, _reverse=False):
        batch, seqlen, width = qk.shape
        assert seqlen % (2 * self.bucket_size) == 0, 'pad the sequence to twice the bucket size'
        n_buckets, rounds = seqlen // self.bucket_size, self.n_hashes
        if _reverse:
            buckets = self.saved_buckets[_depth]
        else:
            buckets = self.hash(qk, n_buckets)
            if self.training:
                self.saved_buckets[_depth] = buckets

        ticker = torch.arange(rounds * seqlen, device=qk.device).unsqueeze(0).expand_as(buckets)
        sort_keys = (seqlen * buckets + ticker % seqlen).detach()
        _, order = sort_along(sort_keys, ticker)
        _, unsort = order.sort(dim=-1)
        order, unsort = order.detach(), unsort.detach()

        if exists(pos_emb):
            qk = rotary(qk, pos_emb)

        # gather into sorted order, then cut into equal chunks
        token = order % seqlen
        n_chunks = rounds * n_buckets
        q_pos = kv_pos = token.reshape(batch, n_chunks, -1)
        q = take_rows(qk, token).reshape(batch, n_chunks, -1, width)
        values = take_rows(v, token).reshape(batch, n_chunks, -1, width)
        k = F.normalize(q, p=2, dim=-1).type_as(q)

        def and_previous(x):
            # every chunk also sees the one before it (the first sees the last)
            before = torch.cat([x[:, -1:, ...], x[:, :-1, ...]], dim=1)
            return torch.cat([x, before], dim=2)

        k, values, kv_pos = and_previous(k), and_previous(values), and_previous(kv_pos)
        scores = torch.einsum('bhie,bhje->bhij', q, k) * (width ** -0.5)
        hidden = -torch.finfo(scores.dtype).max

        if input_mask is not None:
            input_mask = F.pad(input_mask, (0, seqlen - input_mask.shape[-1]), value=True)
            q_real = input_mask.gather(1, token).reshape(batch, n_chunks, -1)
            kv_real = and_previous(q_real)
            both_real = q_real[:, :, :, None] * kv_real[:, :, None, :]
            scores.masked_fill_(~both_real, hidden)
        if self.causal:
            scores.masked_fill_(q_pos[:, :, :, None] < kv_pos[:, :, None, :], hidden)
        scores.masked_fill_(q_pos[:, :, :, None] == kv_pos[:, :, None, :], SELF_SCORE)

        log_norm = torch.logsumexp(scores, dim=-1, keepdim=True)
        weights = self.drop(torch.exp(scores - log_norm).type_as(scores))
        out = torch.einsum('buij,buje->buie', weights, values).reshape(batch, -1, width)

        # back to the input order; the rounds combined by the mass each one's buckets held
        out = take_rows(out, unsort).reshape(batch, rounds, seqlen, width)
        log_norm = log_norm.reshape(batch, -1).gather(1, unsort).reshape(batch, rounds, seqlen, 1)
        share = torch.exp(log_norm - torch.logsumexp(log_norm, dim=1, keepdim=True))
        return torch.sum(out * share, dim=1), torch.empty(0, device=qk.device), buckets


class HashedSelfAttention(nn.Module):
    def __init__(self, dim, heads, dim_head, bucket_size, n_hashes, causal=False, attn_chunks=1,
                 dropout=0.):
        super().__init__()
        self.heads, self.attn_chunks = heads, attn_chunks
        self.toqk = nn.Linear(dim, heads * dim_head, bias=False)
        self.tov = nn.Linear(dim, heads * dim_head, bias=False)
        self.to_out = nn.Linear(heads * dim_head, dim)
        self.lsh_attn = HashedAttention(bucket_size, n_hashes, causal=causal, dropout=dropout)

    def forward(self, x, input_mask=None, pos_emb=None, **signal):
        b, t, _ = x.shape
        h = self.heads

        def per_head(z):
            return fold_heads(z.view(b, t, h, -1).transpose(1, 2))

        masks = {}
        if input_mask is not None:
            masks['input_mask'] = fold_heads(input_mask.unsqueeze(1).expand(-1, h, -1))
        attend = batch_chunked(partial(self.lsh_attn, pos_emb=pos_emb, **signal), self.attn_chunks)
        out, _, _ = attend(per_head(self.toqk(x)), per_head(self.tov(x)), **masks)
        out = out.view(b, h, t, -1).transpose(1, 2).contiguous().view(b, t, -1)
        return self.to_out(out)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * mult), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim * mult, dim)
        )

    def forward(self, x, **_):
        return self.net(x)


# --- positions ---

class LearnedPositions(nn.Module):
    def __init__(self, dim, n_positions):
        super().__init__()
        self.table = nn.Embedding(n_positions, dim)

    def forward(self, x):
        return self.table(torch.arange(x.shape[1], device=x.device))


class SinusoidTable(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer('inv_freq', 1. / (10000 ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, x):
        t = torch.arange(x.shape[1], device=x.device).type_as(self.inv_freq)
        angles = torch.einsum('i , j -> i j', t, self.inv_freq)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)[None, :, :].type_as(x)


def rotate_pairs(x):
    pairs = rearrange(x, '... (d two) -> ... d two', two=2)
    even, odd = pairs.unbind(dim=-1)
    return rearrange(torch.stack((-odd, even), dim=-1), '... d two -> ... (d two)')


def rotary(qk, table):
    table = table.type(qk.dtype)
    sin, cos = rearrange(table, '() n (two d) -> n two d', two=2).unbind(dim=-2)
    sin, cos = (repeat(z, 'n d -> n (d two)', two=2) for z in (sin, cos))
    n = sin.shape[0]
    rotated = qk[:, :n] * cos + rotate_pairs(qk[:, :n]) * sin
    return torch.cat((rotated, qk[:, n:]), dim=1)


# --- reversible residual blocks: activations recomputed in the backward, not stored ---

class ReplayRng(nn.Module):
    # replays the forward's generator state when the backward runs the net again
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.rng_state = None

    def forward(self, *inputs, record_rng=False, set_rng=False, **kwargs):
        if record_rng:
            self.rng_state = torch.get_rng_state()
        if not set_rng:
            return self.net(*inputs, **kwargs)
        with torch.random.fork_rng(devices=[], enabled=True):
            torch.set_rng_state(self.rng_state)
            return self.net(*inputs, **kwargs)


class RevBlock(nn.Module):
    # y1 = x1 + f(x2), y2 = x2 + g(y1); the backward rebuilds x from y
    def __init__(self, f, g, depth):
        super().__init__()
        self.f, self.g, self.depth = ReplayRng(f), ReplayRng(g), depth

    def forward(self, x, attn_args, ff_args):
        x1, x2 = x.chunk(2, dim=2)
        attn_args = dict(attn_args, _depth=self.depth, _reverse=False)
        with torch.no_grad():
            y1 = x1 + self.f(x2, record_rng=self.training, **attn_args)
            y2 = x2 + self.g(y1, record_rng=self.training, **ff_args)
        return torch.cat((y1, y2), dim=2)

    def backward_pass(self, y, dy, attn_args, ff_args):
        y1, y2 = y.chunk(2, dim=2)
        dy1, dy2 = dy.chunk(2, dim=2)
        attn_args = dict(attn_args, _depth=self.depth, _reverse=True)

        with torch.enable_grad():
            y1.requires_grad = True
            g_of_y1 = self.g(y1, set_rng=True, **ff_args)
            torch.autograd.backward(g_of_y1, dy2)
        with torch.no_grad():
            x2 = y2 - g_of_y1
            dx1 = dy1 + y1.grad
            y1.grad = None

        with torch.enable_grad():
            x2.requires_grad = True
            f_of_x2 = self.f(x2, set_rng=True, **attn_args)
            torch.autograd.backward(f_of_x2, dx1, retain_graph=True)
        with torch.no_grad():
            x1 = y1 - f_of_x2
            dx2 = dy2 + x2.grad
            x2.grad = None
            return torch.cat([x1, x2.detach()], dim=2), torch.cat([dx1, dx2], dim=2)


class PlainBlock(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.f, self.g = f, g

    def forward(self, x, attn_args, ff_args):
        x1, x2 = x.chunk(2, dim=2)
        y1 = x1 + self.f(x2, **attn_args)
        return torch.cat([y1, x2 + self.g(y1, **ff_args)], dim=2)


class ReversibleFunction(AutogradFunction):
    @staticmethod
    def forward(ctx, x, blocks, block_args):
        for block in blocks:
            x = block(x, **block_args)
        ctx.y, ctx.blocks, ctx.block_args = x.detach(), blocks, block_args
        return x

    @staticmethod
    def backward(ctx, dy):
        y = ctx.y
        for block in list(ctx.blocks)[::-1]:
            y, dy = block.backward_pass(y, dy, **ctx.block_args)
        return dy, None, None


class RevStack(nn.Module):
    def __init__(self, blocks, reverse_thres=0):
        super().__init__()
        self.reverse_thres, self.depth = reverse_thres, len(blocks)
        self.blocks = nn.ModuleList([RevBlock(f, g, depth) for depth, (f, g) in enumerate(blocks)])
        self.irrev_blocks = nn.ModuleList([PlainBlock(f, g) for f, g in blocks])

    def forward(self, x, **kw):
        # masks and positions go to the attention (f) only
        block_args = {'attn_args': kw, 'ff_args': {}}
        if x.shape[1] <= self.reverse_thres:
            for block in self.irrev_blocks:
                x = block(x, **block_args)
            return x
        return ReversibleFunction.apply(x, self.blocks, block_args)


class Reformer(nn.Module):
    def __init__(self, dim, depth, heads=8, dim_head=None, bucket_size=64, n_hashes=8,
                 ff_chunks=1, attn_chunks=1, causal=False, weight_tie=False, lsh_dropout=0.,
                 ff_dropout=0., ff_mult=4, reverse_thres=0):
        super().__init__()
        self.dim, self.bucket_size = dim, bucket_size
        dim_head = dim_head or dim // heads

        def attention():
            return HashedSelfAttention(dim, heads, dim_head, bucket_size, n_hashes, causal=causal,
                                    attn_chunks=attn_chunks, dropout=lsh_dropout)

        def feed_forward():
            return Chunk(ff_chunks, FeedForward(dim, ff_mult, ff_dropout), along_dim=-2)

        if weight_tie:
            attention, feed_forward = built_once(attention), built_once(feed_forward)
        blocks = [
            nn.ModuleList([PreNorm(dim, attention()), PreNorm(dim, feed_forward())])
            for _ in range(depth)
        ]
        self.layers = RevStack(nn.ModuleList(blocks), reverse_thres=reverse_thres)

    def forward(self, x, **kw):
        # two copies of the stream: the reversible blocks' halves
        both = self.layers(torch.cat([x, x], dim=-1), **kw)
        return torch.stack(both.chunk(2, dim=-1)).mean(dim=0)


class ReformerLM(nn.Module):
    def __init__(self, num_tokens, dim, depth, max_seq_len, absolute_position_emb=False,
                 **reformer_args):
        super().__init__()
        self.max_seq_len, self.num_tokens = max_seq_len, num_tokens
        self.token_emb = nn.Embedding(num_tokens, dim)
        if absolute_position_emb:
            self.pos_emb, self.layer_pos_emb = LearnedPositions(dim, max_seq_len), Constant(None)
        else:  # rotary positions inside every attention layer
            self.pos_emb, self.layer_pos_emb = Constant(0), SinusoidTable(reformer_args['dim_head'])
        self.reformer = Reformer(dim, depth, **reformer_args)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Sequential(Identity(), nn.Linear(dim, num_tokens))

    def forward(self, x, **kw):
        x = self.token_emb(x)
        x = x + self.pos_emb(x)
        x = self.reformer(x, pos_emb=self.layer_pos_emb(x), **kw)
        return self.out(self.norm(x))


class Autopadder(nn.Module):
    # pads token ids (and their mask) to a multiple of twice the bucket size
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.multiple = 2 * net.reformer.bucket_size

    def forward(self, x, input_mask=None):
        b, t = x.shape
        if input_mask is None:
            input_mask = torch.full((b, t), True, dtype=torch.bool, device=x.device)
        short = -t % self.multiple
        if short:
            x = F.pad(x, (0, short), value=0)
        input_mask = F.pad(input_mask, (0, x.shape[1] - input_mask.shape[1]), value=False)
        return self.net(x, input_mask=input_mask)[:, 0:t]


def top_k(logits, thres=0.9):
    k = max(int((1 - thres) * logits.shape[-1]), 1)
    best, where = torch.topk(logits, k)
    kept = torch.full_like(logits, float('-inf'))
    kept.scatter_(1, where, best)
    return kept


class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index=-100):
        super().__init__()
        self.net, self.ignore_index = Autopadder(net), ignore_index
        self.window = net.max_seq_len

    @torch.no_grad()
    def generate(self, prime, length, temperature=1., keep=0.9):
        training = self.net.training
        self.net.eval()
        out = prime[None, :]
        mask = torch.full_like(out, True, dtype=torch.bool, device=out.device)
        for _ in range(length):
            out, mask = out[:, -self.window:], mask[:, -self.window:]
            logits = self.net(out, input_mask=mask)[:, -1, :]
            probs = F.softmax(top_k(logits, thres=keep) / temperature, dim=-1)
            out = torch.cat((out, torch.multinomial(probs, 1)), dim=-1)
            mask = F.pad(mask, (0, 1), value=True)
        self.net.train(training)
        return out[0, -length:]

    def forward(self, x, return_loss=False, **kwargs):
        if not return_loss:
            return self.net(x, **kwargs)
        logits = self.net(x[:, :-1], **kwargs)
        return F.cross_entropy(logits.transpose(1, 2), x[:, 1:], ignore_index=self.ignore_index)


# --- a character-level training script ---

def endless(loader):
    while True:
        yield from loader


def as_text(tokens):
    return ''.join(chr(max(32, int(t))) for t in tokens)


class RandomWindows(torch.utils.data.Dataset):
    def __init__(self, tokens, seq_len):
        super().__init__()
        self.tokens, self.seq_len = tokens, seq_len

    def __len__(self):
        return self.tokens.size(0) // self.seq_len

    def __getitem__(self, index):
        start = torch.randint(0, self.tokens.size(0) - self.seq_len - 1, (1,))
        return self.tokens[start: start + self.seq_len + 1].long()


def train_characters(data_train, data_val, steps, batch_size, accumulate, lr, validate_every,
                     generate_every, generate_length, seq_len, reverse_thres=0,
                     absolute_position_emb=False):
    lm = ReformerLM(
        num_tokens=64, dim=8, depth=2, max_seq_len=16, heads=2, dim_head=4, bucket_size=4,
        n_hashes=2, ff_chunks=2, causal=True, weight_tie=True, reverse_thres=reverse_thres,
        absolute_position_emb=absolute_position_emb,
    )
    model = AutoregressiveWrapper(lm)
    initialize(model)
    val_set = RandomWindows(data_val, seq_len)
    loader = torch.utils.data.DataLoader
    train_batches = endless(loader(RandomWindows(data_train, seq_len), batch_size=batch_size))
    val_batches = endless(loader(val_set, batch_size=batch_size))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    for step in range(steps):
        model.train()
        for _ in range(accumulate):
            loss = model(next(train_batches), return_loss=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        optimizer.step()
        optimizer.zero_grad()
        print(f'step {step} training loss: {loss.item()}')
        record.append(loss.item())

        if step % validate_every == 0:
            model.eval()
            with torch.no_grad():
                val_loss = model(next(val_batches), return_loss=True).item()
            print(f'step {step} validation loss: {val_loss}')
            record.append(val_loss)

        if step % generate_every == 0:
            prime = random.choice(val_set)[:-1]
            sample = model.generate(prime, generate_length)
            print(as_text(prime), '->', as_text(sample))
            record.append(as_text(sample))

    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""


REFORMER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "from retrograd.nn import functional as F\n",
    ),
    # two batches' gradients summed before the step (torch accumulates them in ``.grad``)
    (
        "        for _ in range(accumulate):\n"
        "            loss = model(next(train_batches), return_loss=True)\n"
        "            loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)\n"
        "        optimizer.step()\n",
        "        grads = None\n"
        "        for _ in range(accumulate):\n"
        "            loss = model(next(train_batches), return_loss=True)\n"
        "            more = loss.backward()\n"
        "            grads = more if grads is None else grads + more\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=0.5)\n"
        "        optimizer.step(grads)\n",
    ),
    # the reversible blocks' backward: the inner backwards return their gradients
    (
        "            torch.autograd.backward(g_of_y1, dy2)\n",
        "            g_grads = torch.autograd.backward(g_of_y1, dy2)\n",
    ),
    (
        "            dx1 = dy1 + y1.grad\n            y1.grad = None\n",
        "            dx1 = dy1 + y1.grad(g_grads)\n",
    ),
    (
        "            torch.autograd.backward(f_of_x2, dx1, retain_graph=True)\n",
        "            f_grads = torch.autograd.backward(f_of_x2, dx1, retain_graph=True)\n",
    ),
    (
        "            dx2 = dy2 + x2.grad\n            x2.grad = None\n",
        "            dx2 = dy2 + x2.grad(f_grads)\n",
    ),
]


def _reformer_port():
    return ported_imports(port(REFORMER_SOURCE, REFORMER_STEPS))


class SharedMultinomial:
    """``torch.multinomial(probs, 1)`` of a library drawing from one seeded stream (the
    inverse of the rows' cumulative sums at uniform draws)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def multinomial(probs, num_samples, replacement=False, generator=None):
            rows = np.asarray(probs.detach().numpy(), dtype=np.float64)
            cumulative = np.cumsum(rows / rows.sum(-1, keepdims=True), -1)
            draws = rng.uniform(size=(rows.shape[0], 1))
            picks = (cumulative < draws).sum(-1, keepdims=True)
            return lib.tensor(np.minimum(picks, rows.shape[-1] - 1), dtype=lib.int64)

        self.saved = lib.multinomial
        lib.multinomial = multinomial
        return self

    def __exit__(self, *exc):
        self.lib.multinomial = self.saved
        return False


def _rounded(log):
    return re.sub(r"\d+\.\d+", lambda number: f"{float(number.group()):.6g}", log)


@pytest.mark.parametrize(
    ("reverse_thres", "absolute_position_emb"),
    [(0, False), (64, False), (0, True)],
    ids=["reversible-rotary", "irreversible-rotary", "reversible-absolute"],
)
def test_reformer_lsh_attention_trains_and_generates_as_torch(
    capsys, reverse_thres, absolute_position_emb
):
    rng = np.random.default_rng(7002)
    data_train = rng.integers(33, 64, 80).astype(np.uint8)  # printable bytes, as enwik8's
    data_val = rng.integers(33, 64, 40).astype(np.uint8)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        random.seed(7002)
        text = REFORMER_SOURCE if lib is torch else _reformer_port()
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedDraws(lib, 7002), SharedMultinomial(lib, 7003):
            names["train_characters"](
                lib.from_numpy(data_train.astype(np.int64)),
                lib.from_numpy(data_val.astype(np.int64)),
                steps=2,
                batch_size=2,
                accumulate=2,
                lr=1e-2,
                validate_every=1,
                generate_every=2,
                generate_length=3,
                seq_len=12,
                reverse_thres=reverse_thres,
                absolute_position_emb=absolute_position_emb,
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    # the losses print in full (``f'... loss: {loss.item()}'``): equal to 6 digits
    assert _rounded(logs[1]) == _rounded(logs[0])
    assert "validation loss" in logs[0]
    assert len(records[0][2]) == 3 and records[0][2].strip()  # the sampled characters
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def _recomputed(lib, layer):
    """``x + layer(x)`` as a Function whose backward recomputes it and backpropagates through
    it with ``autograd.backward`` (a reversible block's backward, in small)."""

    class Recomputed(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = x.detach()
            return x + layer(x)

        @staticmethod
        def backward(ctx, dy):
            with lib.enable_grad():
                x = ctx.x
                x.requires_grad = True
                y = x + layer(x)
                inner = lib.autograd.backward(y, dy)
            return x.grad if lib is torch else x.grad(inner)

    return Recomputed


def test_a_backward_run_inside_a_function_s_backward_adds_to_the_outer_gradients():
    """The Reformer's reversible blocks recompute their forward inside a custom
    ``autograd.Function``'s ``backward`` and call ``torch.autograd.backward`` there: torch
    accumulates the parameters' gradients into ``.grad``, where the optimizer reads them next to
    the outer backward's. retrograd's inner ``Gradients`` were dropped, so the parameters had no
    gradient (``None``) and the step left them alone, silently."""
    results = []
    reference = torch.nn.Linear(2, 2)
    for lib in (torch, rg):
        layer = reference if lib is torch else rg.nn.Linear(2, 2)
        if lib is rg:
            layer.load_state_dict(
                {k: v.detach().numpy() for k, v in reference.state_dict().items()}
            )

        recomputed = _recomputed(lib, layer)
        x = lib.tensor(np.array([[1.0, -2.0], [0.5, 3.0]], dtype=np.float32))
        x = x.requires_grad_() if lib is torch else x.require_grad()
        loss = (recomputed.apply(x) * layer.bias).sum()
        if lib is torch:
            loss.backward()
            grads = [x.grad, layer.weight.grad, layer.bias.grad]
        else:
            gradients = loss.backward()
            grads = [x.grad(gradients), layer.weight.grad(gradients), layer.bias.grad(gradients)]
        results.append([g.numpy() for g in grads])
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    # a backward outside any other is unchanged: its gradients are its own
    w = rg.tensor([1.0, 2.0]).require_grad()
    first = (w * 3).sum().backward()
    assert w.grad((w * w).sum().backward()).tolist() == [2.0, 4.0]
    assert w.grad(first).tolist() == [3.0, 3.0]


def test_reversible_reformer_with_dropout_gives_the_irreversible_gradients():
    """The reversible blocks recompute each block in the backward under the generator state
    ``Deterministic`` recorded (``torch.get_rng_state``, ``fork_rng``, ``set_rng_state``), so
    with dropout they draw the forward's masks again: their gradients are the plain
    (irreversible) network's, computed by ordinary autodiff under the same seed. Before, the
    parameters' gradients from the blocks' inner backwards were lost (``None``)."""
    names = run_source(_reformer_port(), rg, record=[], initialize=None)
    rg.manual_seed(0)
    model = names["Reformer"](8, 2, heads=2, dim_head=4, bucket_size=4, n_hashes=2, ff_chunks=2,
                              causal=True, lsh_dropout=0.3, ff_dropout=0.3)  # fmt: skip
    signal = np.random.default_rng(7004).standard_normal((2, 16, 8)).astype(np.float32)
    results = []
    for reverse_thres in (0, 64):  # reversible, then irreversible
        model.layers.reverse_thres = reverse_thres
        with SharedDraws(rg, 7004):  # the same rotations
            rg.manual_seed(123)  # the same dropout masks
            x = rg.tensor(signal).require_grad()
            grads = (model(x) ** 2).sum().backward()
        results.append([x.grad(grads)] + [p.grad(grads) for p in model.parameters()])
    for reversible, irreversible in zip(*results):
        assert reversible is not None
        np.testing.assert_allclose(reversible.numpy(), irreversible.numpy(), rtol=1e-4, atol=1e-5)
