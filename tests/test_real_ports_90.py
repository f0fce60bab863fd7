"""Real ports, continued (the harness: ``tests/real_ports.py``): game-playing networks, text
classification and graph embeddings, written here in the style of four public projects and
trained a few steps on torch and, ported, on retrograd from the same weights and draws.

- a policy-value network for a 6x6 board in the style of junxiaosong/AlphaZero_Gomoku: the
  learning rate set over ``optimizer.param_groups``, ``F.log_softmax`` without ``dim`` and
  ``F.tanh``, ``Variable(torch.FloatTensor(states))`` of a list of NumPy boards,
  ``log_probs.data.numpy()``, the loss ``F.mse_loss(values.view(-1), outcomes) -
  torch.mean(torch.sum(probs * log_probs, 1))`` with the L2 term as Adam's ``weight_decay``,
  the entropy, the board's rotations and flips as augmentation, the KL early stop and adaptive
  learning-rate scale; the weights saved by ``torch.save(state_dict, path)`` and loaded into a
  new learner whose move priors read ``Variable(torch.from_numpy(planes)).float()`` of a
  reversed-view board made contiguous, and ``value.data[0][0]``.
- a MuZero learner and search in the style of werner-duvaud/muzero-general: an
  ``(abc.ABC, torch.nn.Module)`` base, MLP parts wrapped in ``torch.nn.DataParallel``, hidden
  states min-max normalised (``state.min(1, keepdim=True)[0]``, ``span[span < 1e-5] +=
  1e-5``), the one-hot action by ``scatter_``, the first reward as ``torch.log(torch.zeros(1,
  n).scatter(1, ..., 1.0).repeat(len(obs), 1))``, ``support_to_scalar``/``scalar_to_support``
  (``scatter_`` twice, ``masked_fill_`` of the top bin), gradients scaled by
  ``state.register_hook(lambda grad: grad * 0.5)`` and by hooks on the per-step losses
  (``lambda grad: grad / grad_scale[:, k]``, ``k`` late-bound), or, in a second run, by
  ``scale_gradient`` (``scale * x + (1 - scale) * x.detach()``); prioritised-replay weights,
  a decayed learning rate, Adam and SGD; the checkpoint of
  ``copy.deepcopy(to_cpu(optimizer.state_dict()))`` resumed by a new learner; and an MCTS
  with Dirichlet root noise, ``torch.softmax(torch.tensor([policy_logits[0][a] for a in
  actions]), dim=0)`` of 0-d tensors, min-max value bounds and a visit-count action choice.
  The scalars decoded by ``support_to_scalar`` amplify float32 rounding (its inverse
  transform subtracts nearly equal numbers): those are compared at 1e-3.
- a sentence CNN in the style of Shawn1993/cnn-text-classification-pytorch, on lists of
  torchtext-like batches: ``nn.Conv2d(1, filters, (width, dim))`` over ``x.unsqueeze(1)``,
  ``F.max_pool1d(fmap, fmap.size(2)).squeeze(2)``, ``tokens.t_(), labels.sub_(1)`` in place,
  ``F.cross_entropy(logits, labels, size_average=False)``, ``torch.max(logits, 1)[1].view(
  labels.size()).data == labels.data``, a 0-d tensor formatted by ``'{:.4f}'.format(...)``,
  ``autograd.Variable`` and a printed index tensor, the best model saved by
  ``torch.save(model.state_dict(), ...)`` and loaded back; with ``static`` embeddings
  (``self.embed.weight.requires_grad = False``) too. The logs are compared with their
  decimals masked (the records compare those numbers).
- node2vec in the style of PyTorch Geometric's model and example: ``Embedding(n, dim,
  sparse=True)`` trained by ``torch.optim.SparseAdam(list(model.parameters()), lr=0.01)``
  over the ``DataLoader(range(n), collate_fn=self.sample)`` of positive walks and
  ``torch.randint`` negatives (``walks[:, j:j + window]`` windows), the loss of
  ``self.embedding(first).view(...)`` against ``self.embedding(others.view(-1)).view(...)``,
  ``index_select``, cosine similarities under ``@torch.no_grad()``, SparseAdam's state. The
  walks (``torch_cluster``'s ``random_walk`` with ``p = q = 1``) come from a NumPy stand-in,
  the CSR pointers from ``torch.bincount(src, minlength=n).cumsum(0)``. retrograd's gradients
  are dense and its ``SparseAdam`` steps the rows they reach, which are the rows torch's
  sparse gradient holds.

The lines changed: the ``import`` lines and the gradient lines (``optimizer.step(
loss.backward())``). The file names no regression of its own: it guards that this surface
trains as torch does.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import random
import re
import types
from collections import deque

import numpy as np
import pytest
import torch

import retrograd as rg
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

# -- AlphaZero-style policy-value learning --
ALPHAZERO_SOURCE = '''
# A policy-value network for a 6x6 board trained in the style of AlphaZero_Gomoku: a shared
# convolutional trunk with a log-softmax policy head and a tanh value head, Adam whose weight
# decay is the L2 term, data augmented by the board's symmetries, and an update loop that
# stops early on a large KL and adapts the learning rate to it.
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.autograd import Variable  # (a no-op wrapper since torch 0.4)


def assign_lr(optimizer, lr):
    for group in optimizer.param_groups:
        group["lr"] = lr


class PolicyValue(nn.Module):
    def __init__(self, side):
        super().__init__()
        self.cells = side * side
        self.trunk = nn.ModuleList([
            nn.Conv2d(4, 8, kernel_size=3, padding=1),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.Conv2d(16, 16, kernel_size=3, padding=1),
        ])
        self.policy_conv = nn.Conv2d(16, 4, kernel_size=1)
        self.policy_fc = nn.Linear(4 * self.cells, self.cells)
        self.value_conv = nn.Conv2d(16, 2, kernel_size=1)
        self.value_fc = nn.Sequential(nn.Linear(2 * self.cells, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, planes):
        h = planes
        for conv in self.trunk:
            h = F.relu(conv(h))
        p = F.relu(self.policy_conv(h)).view(-1, 4 * self.cells)
        log_probs = F.log_softmax(self.policy_fc(p))  # (the implicit dim: 1 for 2-d input)
        v = F.relu(self.value_conv(h)).view(-1, 2 * self.cells)
        return log_probs, F.tanh(self.value_fc(v))


class Agent:
    def __init__(self, side, weights_file=None, l2=1e-4):
        self.side = side
        self.net = PolicyValue(side)
        self.optimizer = optim.Adam(self.net.parameters(), weight_decay=l2)
        if weights_file:
            self.net.load_state_dict(torch.load(weights_file))

    def evaluate(self, states):
        log_probs, values = self.net(Variable(torch.FloatTensor(states)))
        return np.exp(log_probs.data.numpy()), values.data.numpy()

    def move_priors(self, board):
        legal = board.availables
        planes = board.current_state().reshape(-1, 4, self.side, self.side)
        planes = np.ascontiguousarray(planes)  # (the board hands a reversed view)
        log_probs, value = self.net(Variable(torch.from_numpy(planes)).float())
        probs = np.exp(log_probs.data.numpy().flatten())
        return zip(legal, probs[legal]), value.data[0][0]

    def fit(self, states, search_probs, outcomes, lr):
        states = Variable(torch.FloatTensor(states))
        search_probs = Variable(torch.FloatTensor(search_probs))
        outcomes = Variable(torch.FloatTensor(outcomes))
        self.optimizer.zero_grad()
        assign_lr(self.optimizer, lr)
        log_probs, values = self.net(states)
        # (z - v)^2 - pi . log p; the L2 term is Adam's weight decay
        value_loss = F.mse_loss(values.view(-1), outcomes)
        loss = value_loss - torch.mean(torch.sum(search_probs * log_probs, 1))
        loss.backward()
        self.optimizer.step()
        entropy = -torch.mean(torch.sum(torch.exp(log_probs) * log_probs, 1))
        return loss.item(), entropy.item()  # (entropy: monitoring only)

    def save(self, path):
        torch.save(self.net.state_dict(), path)


def symmetries(samples, side):
    """Each (planes, move probabilities, outcome) in its eight rotations and reflections."""
    out = []
    for planes, probs, z in samples:
        grid = probs.reshape(side, side)
        for k in range(1, 5):
            turned = np.array([np.rot90(p, k) for p in planes])
            turned_probs = np.rot90(np.flipud(grid), k)
            out.append((turned, np.flipud(turned_probs).flatten(), z))
            mirrored = np.array([np.fliplr(p) for p in turned])
            out.append((mirrored, np.flipud(np.fliplr(turned_probs)).flatten(), z))
    return out


class Learner:
    def __init__(self, weights_file=None):
        self.side, self.base_lr, self.lr_scale = 6, 2e-3, 1.0
        self.batch, self.epochs, self.kl_target = 8, 2, 0.02
        self.buffer = deque(maxlen=1000)
        self.agent = Agent(self.side, weights_file=weights_file)

    def update(self):
        sample = random.sample(self.buffer, self.batch)
        states = [s for s, _, _ in sample]
        probs = [p for _, p, _ in sample]
        outcomes = [z for _, _, z in sample]
        before, v_before = self.agent.evaluate(states)
        for _ in range(self.epochs):
            loss, entropy = self.agent.fit(states, probs, outcomes, self.base_lr * self.lr_scale)
            after, v_after = self.agent.evaluate(states)
            kl = np.mean(np.sum(before * (np.log(before + 1e-10) - np.log(after + 1e-10)), axis=1))
            if kl > 4 * self.kl_target:  # moved too far: stop this update
                break
        if kl > 2 * self.kl_target and self.lr_scale > 0.1:
            self.lr_scale /= 1.5
        elif kl < self.kl_target / 2 and self.lr_scale < 10:
            self.lr_scale *= 1.5
        z = np.array(outcomes)
        explained = [1 - np.var(z - v.flatten()) / np.var(z) for v in (v_before, v_after)]
        print(f"kl:{kl:.5f} lr_scale:{self.lr_scale:.3f} loss:{loss} entropy:{entropy} "
              f"explained:{explained[0]:.3f}->{explained[1]:.3f}")
        record.append([kl, self.lr_scale, loss, entropy, *explained])


learner = Learner()
initialize(learner.agent.net)
for game in games:
    learner.buffer.extend(symmetries(game, learner.side))
    if len(learner.buffer) > learner.batch:
        learner.update()
    record.append(params_of(learner.agent.net))

path = os.path.join(save_dir, "policy.pt")
learner.agent.save(path)
reloaded = Learner(weights_file=path)
priors, value = reloaded.agent.move_priors(board)
priors = list(priors)
record.append([move for move, _ in priors])
record.append([p for _, p in priors])
record.append(value.item())
record.append(reloaded.agent.optimizer.param_groups[0]["lr"])
record.append(learner.agent.optimizer.param_groups[0]["lr"])
'''

ALPHAZERO_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        self.optimizer.step(loss.backward())\n",
    ),
]


class _Board:
    """What ``policy_value_fn`` reads of the game's ``Board``: ``availables`` and
    ``current_state()`` (4 planes, here a flipped view: a negative-stride array)."""

    def __init__(self, rng):
        self.state = (rng.uniform(size=(4, 6, 6)) < 0.2).astype(np.float64)
        empty = np.flatnonzero(self.state[0].reshape(-1) == 0)
        self.availables = [int(m) for m in empty][:10]

    def current_state(self):
        return self.state[:, ::-1, :]


def test_alphazero_policy_value_net_trains_as_torch(tmp_path):
    rng = np.random.default_rng(8905)
    games = [
        [
            (
                (rng.uniform(size=(4, 6, 6)) < 0.3).astype(np.float64),
                rng.dirichlet(np.ones(36)),
                float(rng.choice([-1.0, 1.0])),
            )
            for _ in range(2)
        ]
        for _ in range(2)
    ]
    board = _Board(rng)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        random.seed(5)  # random.sample of the data buffer
        text = (
            ALPHAZERO_SOURCE
            if lib is torch
            else ported_imports(port(ALPHAZERO_SOURCE, ALPHAZERO_STEPS))
        )
        save_dir = tmp_path / lib.__name__
        save_dir.mkdir()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_source(
                text,
                lib,
                record=record,
                games=games,
                board=board,
                deque=deque,
                os=os,
                save_dir=str(save_dir),
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        logs.append(out.getvalue())
    theirs, ours = records
    assert logs[0].count("kl:") == logs[1].count("kl:") == 2
    assert theirs[-2:] == [0.001, 0.003]  # Adam's default lr; base_lr * lr_scale
    # Adam steps the weights of near-zero gradients (dead ReLUs) by rounding noise: atol of
    # 2% of a step
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-4)


# -- MuZero-style learner and search --
MUZERO_SOURCE = '''
# A fully connected MuZero learner and its tree search, in the style of muzero-general: the
# representation, dynamics and prediction functions as MLPs, values and rewards as
# categorical supports over an invertibly squashed scale, an unrolled loss whose gradients
# are scaled by hooks, prioritised-replay weights, a resumable checkpoint, and an MCTS on the
# learned model.
import math
import abc

import numpy
import torch


def mlp(n_in, hidden, n_out, act=torch.nn.ELU, last=torch.nn.Identity):
    sizes = [n_in, *hidden, n_out]
    layers = []
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [torch.nn.Linear(a, b), (act if k < len(sizes) - 2 else last)()]
    return torch.nn.Sequential(*layers)  # (no activation after the last layer)


def minmax_normalize(state):
    """Each hidden state scaled into [0, 1] along its features."""
    low = state.min(1, keepdim=True)[0]
    span = state.max(1, keepdim=True)[0] - low
    span[span < 1e-5] += 1e-5  # a flat state would divide by zero
    return (state - low) / span


def to_cpu(tree):
    if isinstance(tree, torch.Tensor):
        return tree.cpu()
    if isinstance(tree, dict):
        return {k: to_cpu(v) for k, v in tree.items()}
    return tree


class LearnedModel(abc.ABC, torch.nn.Module):
    @abc.abstractmethod
    def initial_inference(self, obs):
        ...

    @abc.abstractmethod
    def recurrent_inference(self, state, action):
        ...

    def get_weights(self):
        return to_cpu(self.state_dict())

    def set_weights(self, state):
        self.load_state_dict(state)


class DenseMuZero(LearnedModel):
    def __init__(self, obs_shape, n_actions, width, hidden, support):
        super().__init__()
        self.n_actions = n_actions
        self.bins = 2 * support + 1
        n_obs = obs_shape[0] * obs_shape[1] * obs_shape[2]
        wrap = torch.nn.DataParallel
        self.represent = wrap(mlp(n_obs, hidden, width))
        self.transition = wrap(mlp(width + n_actions, hidden, width))
        self.reward_head = wrap(mlp(width, hidden, self.bins))
        self.policy_head = wrap(mlp(width, hidden, n_actions))
        self.value_head = wrap(mlp(width, hidden, self.bins))

    def predict(self, state):
        return self.policy_head(state), self.value_head(state)

    def initial_inference(self, obs):
        state = minmax_normalize(self.represent(obs.view(obs.shape[0], -1)))
        policy, value = self.predict(state)
        # no reward before the first move: all mass on the middle (zero) bin, as log-probs
        zero_bin = torch.tensor([[self.bins // 2]]).long()
        reward = torch.zeros(1, self.bins).scatter(1, zero_bin, 1.0).repeat(len(obs), 1)
        return value, torch.log(reward.to(obs.device)), policy, state

    def recurrent_inference(self, state, action):
        one_hot = torch.zeros((action.shape[0], self.n_actions)).to(action.device).float()
        one_hot.scatter_(1, action.long(), 1.0)
        next_state = self.transition(torch.cat((state, one_hot), dim=1))
        reward = self.reward_head(next_state)
        next_state = minmax_normalize(next_state)
        policy, value = self.predict(next_state)
        return value, reward, policy, next_state


EPS_H = 0.001  # h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x


def support_to_scalar(logits, support):
    probs = torch.softmax(logits, dim=1)
    atoms = torch.tensor(list(range(-support, support + 1))).expand(probs.shape).float()
    h = torch.sum(atoms.to(device=probs.device) * probs, dim=1, keepdim=True)
    # h's inverse, in closed form
    root = torch.sqrt(1 + 4 * EPS_H * (torch.abs(h) + 1 + EPS_H))
    return torch.sign(h) * (((root - 1) / (2 * EPS_H)) ** 2 - 1)


def scalar_to_support(x, support):
    h = torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + EPS_H * x
    h = torch.clamp(h, -support, support)
    below = h.floor()
    upper_share = h - below
    dist = torch.zeros(x.shape[0], x.shape[1], 2 * support + 1).to(x.device)
    dist.scatter_(2, (below + support).long().unsqueeze(-1), (1 - upper_share).unsqueeze(-1))
    above = below + support + 1
    past_end = 2 * support < above  # the top bin has no neighbour above
    upper_share = upper_share.masked_fill_(past_end, 0.0)
    above = above.masked_fill_(past_end, 0.0)
    dist.scatter_(2, above.long().unsqueeze(-1), upper_share.unsqueeze(-1))
    return dist


def scale_gradient(x, scale):
    # the same value, a gradient multiplied by scale
    return scale * x + (1 - scale) * x.detach()


def cross_entropy(logits, target):
    return (-target * torch.nn.LogSoftmax(dim=1)(logits)).sum(1)


class Learner:
    def __init__(self, checkpoint, cfg):
        self.cfg = cfg
        numpy.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.model = DenseMuZero(*cfg.model_args)
        initialize(self.model)
        weights = checkpoint["weights"]
        fresh = weights is None
        self.model.set_weights(self.model.get_weights() if fresh else copy.deepcopy(weights))
        self.model.to(torch.device("cpu"))
        self.model.train()
        self.steps = checkpoint["training_step"]
        params = self.model.parameters()
        if cfg.optimizer == "SGD":
            self.opt = torch.optim.SGD(params, cfg.lr, momentum=cfg.momentum, weight_decay=cfg.wd)
        elif cfg.optimizer == "Adam":
            self.opt = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.wd)
        else:
            raise NotImplementedError(cfg.optimizer)
        if checkpoint["optimizer_state"] is not None:
            print("resuming the optimizer")
            self.opt.load_state_dict(copy.deepcopy(checkpoint["optimizer_state"]))

    def decay_lr(self):
        lr = self.cfg.lr * self.cfg.lr_decay ** (self.steps / self.cfg.lr_decay_steps)
        for group in self.opt.param_groups:
            group["lr"] = lr

    def step(self, batch):
        obs, actions, values, rewards, policies, is_weights, grad_scale = batch
        value_targets = numpy.array(values, dtype="float32")
        priority = numpy.zeros_like(value_targets)
        dev = next(self.model.parameters()).device
        is_weights = torch.tensor(is_weights.copy()).float().to(dev)
        obs = torch.tensor(numpy.array(obs)).float().to(dev)
        actions = torch.tensor(actions).long().to(dev).unsqueeze(-1)
        grad_scale = torch.tensor(grad_scale).float().to(dev)
        support = self.cfg.support
        z_value = scalar_to_support(torch.tensor(values).float().to(dev), support)
        z_reward = scalar_to_support(torch.tensor(rewards).float().to(dev), support)
        z_policy = torch.tensor(policies).float().to(dev)

        value, reward, policy, state = self.model.initial_inference(obs)
        outputs = [(value, reward, policy)]
        for k in range(1, actions.shape[1]):
            value, reward, policy, state = self.model.recurrent_inference(state, actions[:, k])
            state.register_hook(lambda grad: grad * 0.5)  # halve what flows into the dynamics
            outputs.append((value, reward, policy))

        value_loss = reward_loss = policy_loss = 0
        for k, (value, reward, policy) in enumerate(outputs):
            v_loss = cross_entropy(value.squeeze(-1), z_value[:, k])
            p_loss = cross_entropy(policy, z_policy[:, k])
            if k > 0:  # the first step has no reward to predict
                r_loss = cross_entropy(reward.squeeze(-1), z_reward[:, k])
                # each unrolled step's loss divided by the unroll length; the lambdas read k
                # when the backward pass runs (so all of them see its last value)
                for term in (v_loss, r_loss, p_loss):
                    term.register_hook(lambda grad: grad / grad_scale[:, k])
                reward_loss += r_loss
            value_loss += v_loss
            policy_loss += p_loss
            predicted = support_to_scalar(value, support).detach().cpu().numpy().squeeze()
            priority[:, k] = numpy.abs(predicted - value_targets[:, k]) ** self.cfg.per_alpha

        loss = value_loss * self.cfg.value_weight + reward_loss + policy_loss
        loss *= is_weights  # importance sampling for the prioritised replay
        loss = loss.mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.steps += 1
        means = [t.mean().item() for t in (value_loss, reward_loss, policy_loss)]
        return priority, loss.item(), *means


class Node:
    def __init__(self, prior):
        self.prior, self.visits, self.total = prior, 0, 0.0
        self.children, self.state, self.reward, self.player = {}, None, 0.0, -1

    def expanded(self):
        return bool(self.children)

    def value(self):
        return self.total / self.visits if self.visits else 0

    def expand(self, actions, player, reward, policy_logits, state):
        self.player, self.reward, self.state = player, reward, state
        logits = torch.tensor([policy_logits[0][a] for a in actions])  # a list of 0-d tensors
        for a, p in zip(actions, torch.softmax(logits, dim=0).tolist()):
            self.children[a] = Node(p)

    def perturb(self, alpha, fraction):
        noise = numpy.random.dirichlet([alpha] * len(self.children))
        for child, eta in zip(self.children.values(), noise):
            child.prior = (1 - fraction) * child.prior + fraction * eta


class Bounds:
    def __init__(self):
        self.lo, self.hi = float("inf"), -float("inf")

    def update(self, v):
        self.lo, self.hi = min(self.lo, v), max(self.hi, v)

    def normalize(self, v):
        return (v - self.lo) / (self.hi - self.lo) if self.hi > self.lo else v


class Search:
    def __init__(self, cfg):
        self.cfg = cfg

    def ucb(self, parent, child, bounds):
        cfg = self.cfg
        c = math.log((parent.visits + cfg.pb_c_base + 1) / cfg.pb_c_base) + cfg.pb_c_init
        c *= math.sqrt(parent.visits) / (child.visits + 1)
        q = bounds.normalize(child.reward + cfg.discount * child.value()) if child.visits else 0
        return c * child.prior + q

    def pick(self, node, bounds):
        scores = {a: self.ucb(node, child, bounds) for a, child in node.children.items()}
        best = max(scores.values())
        action = numpy.random.choice([a for a, s in scores.items() if s == best])
        return action, node.children[action]  # ties broken at random

    def run(self, model, observation, legal, player, noise):
        support = self.cfg.support
        root = Node(0)
        obs = torch.tensor(observation).float().unsqueeze(0).to(next(model.parameters()).device)
        root_value, reward, policy, state = model.initial_inference(obs)
        root_value = support_to_scalar(root_value, support).item()
        reward = support_to_scalar(reward, support).item()
        assert legal and set(legal) <= set(self.cfg.actions)
        root.expand(legal, player, reward, policy, state)
        if noise:
            root.perturb(self.cfg.dirichlet_alpha, self.cfg.exploration_fraction)
        bounds, deepest = Bounds(), 0
        for _ in range(self.cfg.simulations):
            node, path = root, [root]
            while node.expanded():
                action, node = self.pick(node, bounds)
                path.append(node)
            deepest = max(deepest, len(path) - 1)
            parent = path[-2]
            step = torch.tensor([[action]]).to(parent.state.device)
            value, reward, policy, state = model.recurrent_inference(parent.state, step)
            value = support_to_scalar(value, support).item()
            reward = support_to_scalar(reward, support).item()
            node.expand(self.cfg.actions, player, reward, policy, state)
            for visited in reversed(path):  # one player: no sign flips
                visited.total += value
                visited.visits += 1
                bounds.update(visited.reward + self.cfg.discount * visited.value())
                value = visited.reward + self.cfg.discount * value
        return root, {"depth": deepest, "root_value": root_value}


def choose(node, temperature):
    counts = numpy.array([c.visits for c in node.children.values()], dtype="int32")
    actions = list(node.children)
    if temperature == 0:
        return actions[numpy.argmax(counts)]
    weights = counts ** (1 / temperature)
    return numpy.random.choice(actions, p=weights / sum(weights))


learner = Learner({"weights": None, "optimizer_state": None, "training_step": 0}, cfg)
for batch in batches:
    learner.decay_lr()
    priority, *losses = learner.step(batch)
    record.append(losses)
    loose.append(priority)
    record.append(params_of(learner.model))
    record.append(learner.opt.param_groups[0]["lr"])

with torch.no_grad():
    obs = torch.tensor(numpy.array(batches[0][0])).float()
    value, reward, policy, state = learner.model.initial_inference(obs)
    record.append(support_to_scalar(value.double(), cfg.support).numpy().copy())
    record.append(reward.numpy().copy())  # log-probs: -inf off the zero bin
    record.append(state.numpy().copy())
    dist = scalar_to_support(torch.tensor([[0.5, 3.7, -120.0, 2.0]]), cfg.support)
    record.append(dist.numpy().copy())
    back = support_to_scalar(torch.log(dist[0] + 1e-12).double(), cfg.support)
    record.append(back.numpy().copy())
record.append(sorted(learner.model.get_weights()))

saved = {
    "weights": copy.deepcopy(learner.model.get_weights()),
    "optimizer_state": copy.deepcopy(to_cpu(learner.opt.state_dict())),
    "training_step": learner.steps,
}
again = Learner(saved, cfg)
again.decay_lr()
record.append(again.step(batches[0])[1:])
record.append(params_of(again.model))

learner.model.eval()
with torch.no_grad():
    for observation in batches[1][0][:2]:  # two searches with root noise
        root, info = Search(cfg).run(learner.model, observation, [0, 2], 0, True)
        record.append(info["depth"])
        record.append([[a, c.visits] for a, c in root.children.items()])
        stats = [x for c in root.children.values() for x in (c.prior, c.value(), c.reward)]
        loose.append([info["root_value"], *stats])
        record.append(int(choose(root, 1.0)))
'''

MUZERO_STEPS = [
    ("\nimport numpy\nimport torch\n", "\nimport numpy\nimport retrograd as torch\n"),
    (
        "        loss.backward()\n        self.opt.step()\n",
        "        self.opt.step(loss.backward())\n",
    ),
]


def _muzero_batches(rng, batch=4, unroll=3, actions=3, batches=3):
    """``ReplayBuffer.get_batch``'s tuples: observations, actions, value and reward targets
    (scalars), policy targets, PER weights and the gradient scales."""
    out = []
    for _ in range(batches):
        out.append(
            [
                list(rng.standard_normal((batch, 1, 1, 4))),
                rng.integers(0, actions, (batch, unroll + 1)).tolist(),
                rng.uniform(-30, 30, (batch, unroll + 1)).tolist(),
                rng.uniform(-3, 3, (batch, unroll + 1)).tolist(),
                rng.dirichlet(np.ones(actions), (batch, unroll + 1)).tolist(),
                rng.uniform(0.5, 1.0, batch),
                [[unroll + 1] * (unroll + 1) for _ in range(batch)],
            ]
        )
    return out


@pytest.mark.parametrize(
    "scaling, optimizer", [("hook", "Adam"), ("hook", "SGD"), ("scale_gradient", "Adam")]
)
def test_muzero_trains_resumes_and_searches_as_torch(scaling, optimizer):
    batches = _muzero_batches(np.random.default_rng(8906))
    source = MUZERO_SOURCE
    if scaling == "scale_gradient":
        source = source.replace(
            "state.register_hook(lambda grad: grad * 0.5)",
            "state = scale_gradient(state, 0.5)",
        )
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record, loose = [], []
        cfg = types.SimpleNamespace(
            seed=0, model_args=((1, 1, 4), 3, 5, [8], 10), optimizer=optimizer, lr=0.02,
            momentum=0.9, wd=1e-4, per_alpha=0.5, support=10, value_weight=0.25, lr_decay=0.9,
            lr_decay_steps=2, actions=list(range(3)), simulations=6, dirichlet_alpha=0.25,
            exploration_fraction=0.25, pb_c_base=19652, pb_c_init=1.25, discount=0.997,
        )  # fmt: skip
        text = source if lib is torch else ported_imports(port(source, MUZERO_STEPS))
        with contextlib.redirect_stdout(io.StringIO()):
            run_source(
                text,
                lib,
                record=record,
                loose=loose,
                batches=batches,
                cfg=cfg,
                copy=copy,
                initialize=initialize,
                params_of=params_of,
            )
        records.append((record, loose))
    (theirs, their_loose), (ours, our_loose) = records
    assert theirs[-6] == 4  # the deepest MCTS path
    assert_records_agree(our_loose, their_loose, rtol=1e-3, atol=1e-4)
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- Kim-style text CNN --
TEXTCNN_SOURCE = """
# A Kim-style CNN sentence classifier trained in the style of cnn-text-classification-pytorch:
# word embeddings (optionally frozen), one convolution per n-gram width spanning the whole
# embedding, max-over-time pooling, dropout and a linear layer; torchtext-like batches
# (sequence-first, 1-based labels), periodic evaluation, best-model snapshots.
import os
import sys
import torch
from torch import autograd
from torch import nn
from torch.nn import functional as F


class SentenceCNN(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.embed = nn.Embedding(opt.vocab_size, opt.embed_dim)
        if opt.static:
            self.embed.weight.requires_grad = False  # static: pretrained words stay
        self.convs = nn.ModuleList(
            nn.Conv2d(1, opt.filters, (width, opt.embed_dim)) for width in opt.widths
        )
        self.drop = nn.Dropout(opt.dropout)
        self.out = nn.Linear(len(opt.widths) * opt.filters, opt.n_classes)

    def forward(self, tokens):
        x = self.embed(tokens).unsqueeze(1)  # (batch, 1, words, dim)
        pooled = []
        for conv in self.convs:
            fmap = F.relu(conv(x)).squeeze(3)  # (batch, filters, positions)
            pooled.append(F.max_pool1d(fmap, fmap.size(2)).squeeze(2))
        return self.out(self.drop(torch.cat(pooled, 1)))


def unpack(batch):
    tokens, labels = batch.text, batch.label
    tokens.t_(), labels.sub_(1)  # to batch-first and 0-based, in place
    return tokens, labels


def hits(logits, labels):
    return (torch.max(logits, 1)[1].view(labels.size()).data == labels.data).sum()


def snapshot(model, folder, tag, step):
    os.makedirs(folder, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(folder, f"{tag}_steps_{step}.pt"))


def evaluate(batches, model):
    model.eval()
    total_loss, correct = 0.0, 0
    for batch in batches:
        tokens, labels = unpack(batch)
        logits = model(tokens)
        total_loss += F.cross_entropy(logits, labels, size_average=False).item()
        correct += hits(logits, labels)
    n = len(batches.dataset)
    total_loss /= n
    acc = 100.0 * correct / n
    print("\\nEval: loss {:.6f} acc {:.4f}% ({}/{})".format(total_loss, acc, correct, n))
    record.append([total_loss, acc.item(), correct.item()])
    return acc


def fit(train_batches, dev_batches, model, opt):
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr)
    step, best, best_step = 0, 0, 0
    for _ in range(opt.epochs):
        for batch in train_batches:
            model.train()
            tokens, labels = unpack(batch)
            optimizer.zero_grad()
            logits = model(tokens)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            optimizer.step()
            record.append(params_of(model))  # after each step
            step += 1
            if step % opt.log_every == 0:
                right = hits(logits, labels)
                acc = 100.0 * right / batch.batch_size
                sys.stdout.write("\\rstep {} loss {:.6f} acc {:.4f}% ({}/{})".format(
                    step, loss.item(), acc.item(), right.item(), batch.batch_size))
            if step % opt.eval_every == 0:
                acc = evaluate(dev_batches, model)
                if acc > best:
                    best, best_step = acc, step
                    snapshot(model, opt.out_dir, "best", step)
                elif step - best_step >= opt.patience:
                    print("no better for {} steps".format(opt.patience))
            elif step % opt.save_every == 0:
                snapshot(model, opt.out_dir, "snapshot", step)


def classify(sentence, model, words, labels):
    model.eval()
    ids = [[words.vocab.stoi[w] for w in words.preprocess(sentence)]]
    x = autograd.Variable(torch.tensor(ids))
    print(x)
    _, best = torch.max(model(x), 1)
    return labels.vocab.itos[best.item() + 1]  # (label 0 is <unk>)


opt.vocab_size = len(text_field.vocab)
opt.n_classes = len(label_field.vocab) - 1
opt.widths = [int(w) for w in opt.widths.split(",")]
opt.out_dir = os.path.join(opt.out_dir, "run")
model = SentenceCNN(opt)
initialize(model)
fit(make_iter(train_data), make_iter(dev_data), model, opt)
record.append(classify("a good good movie", model, text_field, label_field))
record.append(sorted(os.listdir(opt.out_dir)))
best = SentenceCNN(opt)
best.load_state_dict(torch.load(os.path.join(opt.out_dir, f"best_steps_{opt.eval_every}.pt")))
record.append(params_of(best))  # the reloaded best snapshot
"""

TEXTCNN_STEPS = [
    (
        "\nimport torch\n",
        "\nimport retrograd as torch\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            optimizer.step(loss.backward())\n",
    ),
]


class _Vocab:
    def __init__(self, itos):
        self.itos, self.stoi = itos, {s: i for i, s in enumerate(itos)}

    def __len__(self):
        return len(self.itos)


class _Field:
    """torchtext's ``Field`` as ``predict`` reads it."""

    def __init__(self, itos):
        self.vocab = _Vocab(itos)

    def preprocess(self, text):
        return text.split()


def _iterator(lib, data):
    """torchtext's ``BucketIterator`` as ``train``/``eval`` read it: fresh batches at every
    pass (``feature.t_()`` transposes them in place), ``text`` ``[width, batch]`` and 1-based
    ``label``, ``batch_size``, and ``len(data_iter.dataset)``."""

    class Iterator:
        dataset = [None] * sum(len(labels) for _, labels in data)

        def __iter__(self):
            return iter(
                [
                    types.SimpleNamespace(
                        text=lib.tensor(text), label=lib.tensor(labels), batch_size=len(labels)
                    )
                    for text, labels in data
                ]
            )

    return Iterator()


@pytest.mark.parametrize("static", [False, True])
def test_textcnn_trains_and_predicts_as_torch(tmp_path, static):
    words = [
        "<unk>",
        "<pad>",
        "a",
        "good",
        "bad",
        "movie",
        "plot",
        "very",
        "not",
        "fun",
        "dull",
        "the",
    ]
    text_field, label_field = _Field(words), _Field(["<unk>", "positive", "negative"])
    rng = np.random.default_rng(8907)

    def batches(n, size, width):
        return [
            (rng.integers(2, len(words), (width, size)), rng.integers(1, 3, size)) for _ in range(n)
        ]

    train_data, dev_data = batches(4, 5, 7), batches(2, 3, 6)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = (
            TEXTCNN_SOURCE if lib is torch else ported_imports(port(TEXTCNN_SOURCE, TEXTCNN_STEPS))
        )
        opt = types.SimpleNamespace(
            lr=0.01, epochs=1, log_every=1, eval_every=2, save_every=3, patience=1,
            out_dir=str(tmp_path / lib.__name__), embed_dim=6, filters=4, widths="2,3,4",
            dropout=0.0, static=static,
        )  # fmt: skip
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_source(
                text,
                lib,
                record=record,
                text_field=text_field,
                label_field=label_field,
                train_data=train_data,
                dev_data=dev_data,
                make_iter=lambda data, lib=lib: _iterator(lib, data),
                opt=opt,
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        logs.append(out.getvalue())
    theirs, ours = records
    assert logs[0].count("Eval: loss ") == 2

    # the numbers printed to 6 digits are compared in the records (their last digit may
    # round either way); the rest of the log exactly
    def masked(log):
        return re.sub(r"\d+\.\d+", "#", log)

    assert masked(logs[1]) == masked(logs[0])
    assert "best_steps_2.pt" in theirs[-2]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- node2vec --
NODE2VEC_SOURCE = """
# node2vec in the style of PyTorch Geometric's model and example: a (sparse) embedding table
# trained by SparseAdam on skip-gram windows cut from random walks, against windows that
# start at the same nodes and continue uniformly at random.
import torch
from torch import Tensor
from torch.utils.data import DataLoader  # batches of start nodes
from torch.nn import Embedding  # (sparse=True: row gradients)


class WalkEmbedding(torch.nn.Module):
    def __init__(self, edge_index, dim, walk_length, window, walks_per_node=1,
                 negatives_per_walk=1, n_nodes=None, sparse=False):
        super().__init__()
        self.n_nodes = int(edge_index.max()) + 1 if n_nodes is None else n_nodes
        src, dst = edge_index
        order = (src * self.n_nodes + dst).argsort()  # CSR: by source, then target
        src, dst = src[order], dst[order]
        degree = torch.bincount(src, minlength=self.n_nodes)
        self.rowptr = torch.cat([degree.new_zeros(1), degree.cumsum(0)])
        self.col = dst
        assert walk_length >= window
        self.dim, self.steps, self.window = dim, walk_length - 1, window
        self.walks_per_node, self.negatives = walks_per_node, negatives_per_walk
        self.embedding = Embedding(self.n_nodes, dim, sparse=sparse)
        self.embedding.reset_parameters()  # N(0, 1) rows

    def forward(self, nodes=None):
        table = self.embedding.weight
        return table if nodes is None else table.index_select(0, nodes)

    def loader(self, **kwargs):
        return DataLoader(range(self.n_nodes), collate_fn=self.sample, **kwargs)

    def windows(self, walks):
        count = self.steps + 2 - self.window  # windows per walk
        return torch.cat([walks[:, j:j + self.window] for j in range(count)], dim=0)

    def positive(self, start):
        start = start.repeat(self.walks_per_node)
        walks = random_walk(self.rowptr, self.col, start, self.steps, 1.0, 1.0)
        if not isinstance(walks, Tensor):  # (walks, edge ids)
            walks = walks[0]
        return self.windows(walks)

    def negative(self, start):
        start = start.repeat(self.walks_per_node * self.negatives)
        shape = (start.size(0), self.steps)
        tail = torch.randint(self.n_nodes, shape, dtype=start.dtype, device=start.device)
        return self.windows(torch.cat([start.view(-1, 1), tail], dim=-1))

    def sample(self, nodes):
        if not isinstance(nodes, Tensor):
            nodes = torch.tensor(nodes)
        return self.positive(nodes), self.negative(nodes)

    def score(self, walks):
        first, others = walks[:, 0], walks[:, 1:].contiguous()
        n = walks.size(0)
        h_first = self.embedding(first).view(n, 1, self.dim)
        h_others = self.embedding(others.view(-1)).view(n, -1, self.dim)
        return (h_first * h_others).sum(dim=-1).view(-1)

    def loss(self, pos, neg, eps=1e-15):
        attract = -torch.log(torch.sigmoid(self.score(pos)) + eps).mean()
        repel = -torch.log(1 - torch.sigmoid(self.score(neg)) + eps).mean()
        return attract + repel

    def __repr__(self):
        rows, cols = self.embedding.weight.size(0), self.embedding.weight.size(1)
        return f"{type(self).__name__}({rows}, {cols})"


model = WalkEmbedding(graph.edge_index, dim=8, walk_length=6, window=3, walks_per_node=2,
                      negatives_per_walk=1, sparse=True).to("cpu")
initialize(model)
record.append(repr(model))
batches = model.loader(batch_size=4, shuffle=False, num_workers=0)
optimizer = torch.optim.SparseAdam(list(model.parameters()), lr=1e-2)


def epoch():
    model.train()
    total = 0.0
    for pos, neg in batches:
        optimizer.zero_grad()
        loss = model.loss(pos, neg)
        loss.backward()
        optimizer.step()
        total += loss.item()
        record.append(pos.tolist())
        record.append(params_of(model))  # the rows this batch reached
    return total / len(batches)


@torch.no_grad()
def similarities():
    model.eval()
    z = model()
    z = z / z.norm(dim=-1, keepdim=True)  # cosine similarities
    return (z[graph.test_idx] @ z.t()).numpy().copy()


for e in range(2):
    mean_loss = epoch()
    print(f"epoch {e}: loss {mean_loss:.4f}")
    record.append(mean_loss)
record.append(similarities())
moments = optimizer.state[model.embedding.weight]
record.append({k: v.numpy().copy() for k, v in moments.items() if k != "step"})
"""

NODE2VEC_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        optimizer.step(loss.backward())\n",
    ),
]


def _random_walk(lib, seed):
    """torch_cluster's ``random_walk(rowptr, col, start, walk_length, p, q)`` for ``p = q =
    1``: uniform steps along the CSR graph, from a seeded NumPy stream; returns ``(walks,
    None)`` as it does."""
    rng = np.random.default_rng(seed)

    def random_walk(rowptr, col, start, walk_length, p, q):
        rowptr, col = np.asarray(rowptr.tolist()), np.asarray(col.tolist())
        walks = []
        for node in start.tolist():
            walk = [node]
            for _ in range(walk_length):
                lo, hi = rowptr[walk[-1]], rowptr[walk[-1] + 1]
                walk.append(int(col[rng.integers(lo, hi)]) if hi > lo else walk[-1])
            walks.append(walk)
        return lib.tensor(walks, dtype=lib.int64), None

    return random_walk


def test_node2vec_sparse_embedding_trains_as_torch():
    rng = np.random.default_rng(8908)
    nodes = 10
    edges = {(i, (i + 1) % nodes) for i in range(nodes)} | {
        ((i + 1) % nodes, i) for i in range(nodes)
    }
    for _ in range(6):
        a, b = (int(v) for v in rng.choice(nodes, 2, replace=False))
        edges |= {(a, b), (b, a)}
    edge_index = np.array(sorted(edges)).T
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = (
            NODE2VEC_SOURCE
            if lib is torch
            else ported_imports(port(NODE2VEC_SOURCE, NODE2VEC_STEPS))
        )
        graph = types.SimpleNamespace(
            edge_index=lib.tensor(edge_index), test_idx=lib.tensor([0, 3, 7])
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out), SharedDraws(lib, 8908):
            run_source(
                text,
                lib,
                record=record,
                graph=graph,
                random_walk=_random_walk(lib, 8908),
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        logs.append(out.getvalue())
    theirs, ours = records
    assert theirs[0] == "WalkEmbedding(10, 8)" and logs[0].count("epoch ") == 2
    assert logs[1] == logs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
