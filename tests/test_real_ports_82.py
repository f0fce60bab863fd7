# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- PPO as ikostrikov/pytorch-a2c-ppo-acktr-gail writes it (``a2c_ppo_acktr/distributions.py``'s
  ``FixedCategorical``/``FixedNormal`` subclassing ``torch.distributions`` and calling
  ``super().log_prob``, ``Categorical``/``DiagGaussian`` heads; ``utils.py``'s ``AddBias``
  (``self._bias.t().view(1, -1)``), ``init`` and ``update_linear_schedule``; ``model.py``'s
  ``Policy``, ``NNBase`` with its GRU over ``(masks[1:] == 0.0).any(dim=-1).nonzero()
  .squeeze()`` segments, ``MLPBase``; ``storage.py``'s ``RolloutStorage`` with ``copy_`` into
  rows, GAE with ``bad_masks``, the ``feed_forward_generator`` over ``BatchSampler(
  SubsetRandomSampler(range(batch_size)), ...)`` and the ``recurrent_generator`` over
  ``torch.randperm``; ``algo/ppo.py``'s clipped objective and clipped value loss with
  ``clip_grad_norm_``; ``main.py``'s loop), small, with a deterministic vector environment in
  ``VecPyTorch``'s place, discrete and feed-forward, continuous and recurrent. The draws
  (``Categorical.sample``, ``Normal.sample``, the samplers' ``randperm``) come from one seeded
  stream in both runs.
- PatchTST as yuqinie98/PatchTST writes it (``PatchTST_supervised/layers/RevIN.py``,
  ``PatchTST_layers.py``, ``PatchTST_backbone.py``, ``models/PatchTST.py`` and the ``TST``
  branch of ``exp_main.py``'s training with ``OneCycleLR``), small: ``RevIN`` with
  ``torch.var(..., unbiased=False)`` over ``tuple(range(1, x.ndim-1))`` and ``subtract_last``,
  ``nn.ReplicationPad1d((0, stride))``, ``z.unfold(dimension=-1, size=..., step=...)``,
  ``nn.Parameter(W_pos, requires_grad=learn_pe)`` of ``nn.init.uniform_`` or of
  ``Coord2dPosEncoding``'s search (``abs(cpe.mean()) <= eps``, ``f'{cpe.mean():+6.3f}'``),
  residual attention scores carried between layers, ``nn.Parameter(torch.tensor(head_dim **
  -0.5), requires_grad=lsa)``, batch norm between ``Transpose(1,2)`` modules, the channel-
  independent ``Flatten_Head``s and the moving-average ``series_decomp``.
- the speech command classifier of pytorch/tutorials (M5) and DreamerV3's actor-critic
  (NM512/dreamerv3-torch): see their tests.

Defects found and fixed: ``Tensor.unfold``'s first parameter was named ``dim`` where torch
names it ``dimension``, so PatchTST's ``z.unfold(dimension=-1, ...)`` failed; torch's
per-family modules of ``torch.distributions`` (``one_hot_categorical``, ``uniform``,
``independent``...) were missing, so dreamerv3-torch's ``torchd.one_hot_categorical
.OneHotCategorical`` failed; a parameter frozen and thawed between the forward and the backward
(dreamerv3-torch's ``RequiresGrad``) lost its gradient.
"""

from __future__ import annotations

import copy
import random
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
    run_source,
)


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


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


PPO_SOURCE = '''
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data.sampler import BatchSampler, SubsetRandomSampler
from collections import deque


# a2c_ppo_acktr/utils.py
# Necessary for my KFAC implementation.
class AddBias(nn.Module):
    def __init__(self, bias):
        super(AddBias, self).__init__()
        self._bias = nn.Parameter(bias.unsqueeze(1))

    def forward(self, x):
        if x.dim() == 2:
            bias = self._bias.t().view(1, -1)
        else:
            bias = self._bias.t().view(1, -1, 1, 1)

        return x + bias


def update_linear_schedule(optimizer, epoch, total_num_epochs, initial_lr):
    """Decreases the learning rate linearly"""
    lr = initial_lr - (initial_lr * (epoch / float(total_num_epochs)))
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def init(module, weight_init, bias_init, gain=1):
    weight_init(module.weight.data, gain=gain)
    bias_init(module.bias.data)
    return module


# a2c_ppo_acktr/distributions.py
#
# Standardize distribution interfaces
#

# Categorical
class FixedCategorical(torch.distributions.Categorical):
    def sample(self):
        return super().sample().unsqueeze(-1)

    def log_probs(self, actions):
        return (
            super()
            .log_prob(actions.squeeze(-1))
            .view(actions.size(0), -1)
            .sum(-1)
            .unsqueeze(-1)
        )

    def mode(self):
        return self.probs.argmax(dim=-1, keepdim=True)


# Normal
class FixedNormal(torch.distributions.Normal):
    def log_probs(self, actions):
        return super().log_prob(actions).sum(-1, keepdim=True)

    def entropy(self):
        return super().entropy().sum(-1)

    def mode(self):
        return self.mean


class Categorical(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(Categorical, self).__init__()

        init_ = lambda m: init(
            m,
            nn.init.orthogonal_,
            lambda x: nn.init.constant_(x, 0),
            gain=0.01)

        self.linear = init_(nn.Linear(num_inputs, num_outputs))

    def forward(self, x):
        x = self.linear(x)
        return FixedCategorical(logits=x)


class DiagGaussian(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(DiagGaussian, self).__init__()

        init_ = lambda m: init(m, nn.init.orthogonal_, lambda x: nn.init.
                               constant_(x, 0))

        self.fc_mean = init_(nn.Linear(num_inputs, num_outputs))
        self.logstd = AddBias(torch.zeros(num_outputs))

    def forward(self, x):
        action_mean = self.fc_mean(x)

        #  An ugly hack for my KFAC implementation.
        zeros = torch.zeros(action_mean.size())
        if x.is_cuda:
            zeros = zeros.cuda()

        action_logstd = self.logstd(zeros)
        return FixedNormal(action_mean, action_logstd.exp())


# a2c_ppo_acktr/model.py
class Policy(nn.Module):
    def __init__(self, obs_shape, action_space, base=None, base_kwargs=None):
        super(Policy, self).__init__()
        if base_kwargs is None:
            base_kwargs = {}
        if base is None:
            if len(obs_shape) == 1:
                base = MLPBase
            else:
                raise NotImplementedError

        self.base = base(obs_shape[0], **base_kwargs)

        if action_space.__class__.__name__ == "Discrete":
            num_outputs = action_space.n
            self.dist = Categorical(self.base.output_size, num_outputs)
        elif action_space.__class__.__name__ == "Box":
            num_outputs = action_space.shape[0]
            self.dist = DiagGaussian(self.base.output_size, num_outputs)
        else:
            raise NotImplementedError

    @property
    def is_recurrent(self):
        return self.base.is_recurrent

    @property
    def recurrent_hidden_state_size(self):
        """Size of rnn_hx."""
        return self.base.recurrent_hidden_state_size

    def forward(self, inputs, rnn_hxs, masks):
        raise NotImplementedError

    def act(self, inputs, rnn_hxs, masks, deterministic=False):
        value, actor_features, rnn_hxs = self.base(inputs, rnn_hxs, masks)
        dist = self.dist(actor_features)

        if deterministic:
            action = dist.mode()
        else:
            action = dist.sample()

        action_log_probs = dist.log_probs(action)
        dist_entropy = dist.entropy().mean()

        return value, action, action_log_probs, rnn_hxs

    def get_value(self, inputs, rnn_hxs, masks):
        value, _, _ = self.base(inputs, rnn_hxs, masks)
        return value

    def evaluate_actions(self, inputs, rnn_hxs, masks, action):
        value, actor_features, rnn_hxs = self.base(inputs, rnn_hxs, masks)
        dist = self.dist(actor_features)

        action_log_probs = dist.log_probs(action)
        dist_entropy = dist.entropy().mean()

        return value, action_log_probs, dist_entropy, rnn_hxs


class NNBase(nn.Module):
    def __init__(self, recurrent, recurrent_input_size, hidden_size):
        super(NNBase, self).__init__()

        self._hidden_size = hidden_size
        self._recurrent = recurrent

        if recurrent:
            self.gru = nn.GRU(recurrent_input_size, hidden_size)
            for name, param in self.gru.named_parameters():
                if 'bias' in name:
                    nn.init.constant_(param, 0)
                elif 'weight' in name:
                    nn.init.orthogonal_(param)

    @property
    def is_recurrent(self):
        return self._recurrent

    @property
    def recurrent_hidden_state_size(self):
        if self._recurrent:
            return self._hidden_size
        return 1

    @property
    def output_size(self):
        return self._hidden_size

    def _forward_gru(self, x, hxs, masks):
        if x.size(0) == hxs.size(0):
            x, hxs = self.gru(x.unsqueeze(0), (hxs * masks).unsqueeze(0))
            x = x.squeeze(0)
            hxs = hxs.squeeze(0)
        else:
            # x is a (T, N, -1) tensor that has been flatten to (T * N, -1)
            N = hxs.size(0)
            T = int(x.size(0) / N)

            # unflatten
            x = x.view(T, N, x.size(1))

            # Same deal with masks
            masks = masks.view(T, N)

            # Let's figure out which steps in the sequence have a zero for any agent
            # We will always assume t=0 has a zero in it as that makes the logic cleaner
            has_zeros = ((masks[1:] == 0.0) \\
                            .any(dim=-1)
                            .nonzero()
                            .squeeze()
                            .cpu())

            # +1 to correct the masks[1:]
            if has_zeros.dim() == 0:
                # Deal with scalar
                has_zeros = [has_zeros.item() + 1]
            else:
                has_zeros = (has_zeros + 1).numpy().tolist()

            # add t=0 and t=T to the list
            has_zeros = [0] + has_zeros + [T]

            hxs = hxs.unsqueeze(0)
            outputs = []
            for i in range(len(has_zeros) - 1):
                # We can now process steps that don't have any zeros in masks together!
                # This is much faster
                start_idx = has_zeros[i]
                end_idx = has_zeros[i + 1]

                rnn_scores, hxs = self.gru(
                    x[start_idx:end_idx],
                    hxs * masks[start_idx].view(1, -1, 1))

                outputs.append(rnn_scores)

            # assert len(outputs) == T
            # x is a (T, N, -1) tensor
            x = torch.cat(outputs, dim=0)
            # flatten
            x = x.view(T * N, -1)
            hxs = hxs.squeeze(0)

        return x, hxs


class MLPBase(NNBase):
    def __init__(self, num_inputs, recurrent=False, hidden_size=64):
        super(MLPBase, self).__init__(recurrent, num_inputs, hidden_size)

        if recurrent:
            num_inputs = hidden_size

        init_ = lambda m: init(m, nn.init.orthogonal_, lambda x: nn.init.
                               constant_(x, 0), np.sqrt(2))

        self.actor = nn.Sequential(
            init_(nn.Linear(num_inputs, hidden_size)), nn.Tanh(),
            init_(nn.Linear(hidden_size, hidden_size)), nn.Tanh())

        self.critic = nn.Sequential(
            init_(nn.Linear(num_inputs, hidden_size)), nn.Tanh(),
            init_(nn.Linear(hidden_size, hidden_size)), nn.Tanh())

        self.critic_linear = init_(nn.Linear(hidden_size, 1))

        self.train()

    def forward(self, inputs, rnn_hxs, masks):
        x = inputs

        if self.is_recurrent:
            x, rnn_hxs = self._forward_gru(x, rnn_hxs, masks)

        hidden_critic = self.critic(x)
        hidden_actor = self.actor(x)

        return self.critic_linear(hidden_critic), hidden_actor, rnn_hxs


# a2c_ppo_acktr/storage.py
def _flatten_helper(T, N, _tensor):
    return _tensor.view(T * N, *_tensor.size()[2:])


class RolloutStorage(object):
    def __init__(self, num_steps, num_processes, obs_shape, action_space,
                 recurrent_hidden_state_size):
        self.obs = torch.zeros(num_steps + 1, num_processes, *obs_shape)
        self.recurrent_hidden_states = torch.zeros(
            num_steps + 1, num_processes, recurrent_hidden_state_size)
        self.rewards = torch.zeros(num_steps, num_processes, 1)
        self.value_preds = torch.zeros(num_steps + 1, num_processes, 1)
        self.returns = torch.zeros(num_steps + 1, num_processes, 1)
        self.action_log_probs = torch.zeros(num_steps, num_processes, 1)
        if action_space.__class__.__name__ == 'Discrete':
            action_shape = 1
        else:
            action_shape = action_space.shape[0]
        self.actions = torch.zeros(num_steps, num_processes, action_shape)
        if action_space.__class__.__name__ == 'Discrete':
            self.actions = self.actions.long()
        self.masks = torch.ones(num_steps + 1, num_processes, 1)

        # Masks that indicate whether it's a true terminal state
        # or time limit end state
        self.bad_masks = torch.ones(num_steps + 1, num_processes, 1)

        self.num_steps = num_steps
        self.step = 0

    def to(self, device):
        self.obs = self.obs.to(device)
        self.recurrent_hidden_states = self.recurrent_hidden_states.to(device)
        self.rewards = self.rewards.to(device)
        self.value_preds = self.value_preds.to(device)
        self.returns = self.returns.to(device)
        self.action_log_probs = self.action_log_probs.to(device)
        self.actions = self.actions.to(device)
        self.masks = self.masks.to(device)
        self.bad_masks = self.bad_masks.to(device)

    def insert(self, obs, recurrent_hidden_states, actions, action_log_probs,
               value_preds, rewards, masks, bad_masks):
        self.obs[self.step + 1].copy_(obs)
        self.recurrent_hidden_states[self.step +
                                     1].copy_(recurrent_hidden_states)
        self.actions[self.step].copy_(actions)
        self.action_log_probs[self.step].copy_(action_log_probs)
        self.value_preds[self.step].copy_(value_preds)
        self.rewards[self.step].copy_(rewards)
        self.masks[self.step + 1].copy_(masks)
        self.bad_masks[self.step + 1].copy_(bad_masks)

        self.step = (self.step + 1) % self.num_steps

    def after_update(self):
        self.obs[0].copy_(self.obs[-1])
        self.recurrent_hidden_states[0].copy_(self.recurrent_hidden_states[-1])
        self.masks[0].copy_(self.masks[-1])
        self.bad_masks[0].copy_(self.bad_masks[-1])

    def compute_returns(self,
                        next_value,
                        use_gae,
                        gamma,
                        gae_lambda,
                        use_proper_time_limits=True):
        if use_proper_time_limits:
            if use_gae:
                self.value_preds[-1] = next_value
                gae = 0
                for step in reversed(range(self.rewards.size(0))):
                    delta = self.rewards[step] + gamma * self.value_preds[
                        step + 1] * self.masks[step +
                                               1] - self.value_preds[step]
                    gae = delta + gamma * gae_lambda * self.masks[step +
                                                                  1] * gae
                    gae = gae * self.bad_masks[step + 1]
                    self.returns[step] = gae + self.value_preds[step]
            else:
                self.returns[-1] = next_value
                for step in reversed(range(self.rewards.size(0))):
                    self.returns[step] = (self.returns[step + 1] * \\
                        gamma * self.masks[step + 1] + self.rewards[step]) * self.bad_masks[step + 1] \\
                        + (1 - self.bad_masks[step + 1]) * self.value_preds[step]
        else:
            if use_gae:
                self.value_preds[-1] = next_value
                gae = 0
                for step in reversed(range(self.rewards.size(0))):
                    delta = self.rewards[step] + gamma * self.value_preds[
                        step + 1] * self.masks[step +
                                               1] - self.value_preds[step]
                    gae = delta + gamma * gae_lambda * self.masks[step +
                                                                  1] * gae
                    self.returns[step] = gae + self.value_preds[step]
            else:
                self.returns[-1] = next_value
                for step in reversed(range(self.rewards.size(0))):
                    self.returns[step] = self.returns[step + 1] * \\
                        gamma * self.masks[step + 1] + self.rewards[step]

    def feed_forward_generator(self,
                               advantages,
                               num_mini_batch=None,
                               mini_batch_size=None):
        num_steps, num_processes = self.rewards.size()[0:2]
        batch_size = num_processes * num_steps

        if mini_batch_size is None:
            assert batch_size >= num_mini_batch, (
                "PPO requires the number of processes ({}) "
                "* number of steps ({}) = {} "
                "to be greater than or equal to the number of PPO mini batches ({})."
                "".format(num_processes, num_steps, num_processes * num_steps,
                          num_mini_batch))
            mini_batch_size = batch_size // num_mini_batch
        sampler = BatchSampler(
            SubsetRandomSampler(range(batch_size)),
            mini_batch_size,
            drop_last=True)
        for indices in sampler:
            obs_batch = self.obs[:-1].view(-1, *self.obs.size()[2:])[indices]
            recurrent_hidden_states_batch = self.recurrent_hidden_states[:-1].view(
                -1, self.recurrent_hidden_states.size(-1))[indices]
            actions_batch = self.actions.view(-1,
                                              self.actions.size(-1))[indices]
            value_preds_batch = self.value_preds[:-1].view(-1, 1)[indices]
            return_batch = self.returns[:-1].view(-1, 1)[indices]
            masks_batch = self.masks[:-1].view(-1, 1)[indices]
            old_action_log_probs_batch = self.action_log_probs.view(-1,
                                                                    1)[indices]
            if advantages is None:
                adv_targ = None
            else:
                adv_targ = advantages.view(-1, 1)[indices]

            yield obs_batch, recurrent_hidden_states_batch, actions_batch, \\
                value_preds_batch, return_batch, masks_batch, old_action_log_probs_batch, adv_targ

    def recurrent_generator(self, advantages, num_mini_batch):
        num_processes = self.rewards.size(1)
        assert num_processes >= num_mini_batch, (
            "PPO requires the number of processes ({}) "
            "to be greater than or equal to the number of "
            "PPO mini batches ({}).".format(num_processes, num_mini_batch))
        num_envs_per_batch = num_processes // num_mini_batch
        perm = torch.randperm(num_processes)
        for start_ind in range(0, num_processes, num_envs_per_batch):
            obs_batch = []
            recurrent_hidden_states_batch = []
            actions_batch = []
            value_preds_batch = []
            return_batch = []
            masks_batch = []
            old_action_log_probs_batch = []
            adv_targ = []

            for offset in range(num_envs_per_batch):
                ind = perm[start_ind + offset]
                obs_batch.append(self.obs[:-1, ind])
                recurrent_hidden_states_batch.append(
                    self.recurrent_hidden_states[0:1, ind])
                actions_batch.append(self.actions[:, ind])
                value_preds_batch.append(self.value_preds[:-1, ind])
                return_batch.append(self.returns[:-1, ind])
                masks_batch.append(self.masks[:-1, ind])
                old_action_log_probs_batch.append(
                    self.action_log_probs[:, ind])
                adv_targ.append(advantages[:, ind])

            T, N = self.num_steps, num_envs_per_batch
            # These are all tensors of size (T, N, -1)
            obs_batch = torch.stack(obs_batch, 1)
            actions_batch = torch.stack(actions_batch, 1)
            value_preds_batch = torch.stack(value_preds_batch, 1)
            return_batch = torch.stack(return_batch, 1)
            masks_batch = torch.stack(masks_batch, 1)
            old_action_log_probs_batch = torch.stack(
                old_action_log_probs_batch, 1)
            adv_targ = torch.stack(adv_targ, 1)

            # States is just a (N, -1) tensor
            recurrent_hidden_states_batch = torch.stack(
                recurrent_hidden_states_batch, 1).view(N, -1)

            # Flatten the (T, N, ...) tensors to (T * N, ...)
            obs_batch = _flatten_helper(T, N, obs_batch)
            actions_batch = _flatten_helper(T, N, actions_batch)
            value_preds_batch = _flatten_helper(T, N, value_preds_batch)
            return_batch = _flatten_helper(T, N, return_batch)
            masks_batch = _flatten_helper(T, N, masks_batch)
            old_action_log_probs_batch = _flatten_helper(T, N, \\
                    old_action_log_probs_batch)
            adv_targ = _flatten_helper(T, N, adv_targ)

            yield obs_batch, recurrent_hidden_states_batch, actions_batch, \\
                value_preds_batch, return_batch, masks_batch, old_action_log_probs_batch, adv_targ


# a2c_ppo_acktr/algo/ppo.py
class PPO():
    def __init__(self,
                 actor_critic,
                 clip_param,
                 ppo_epoch,
                 num_mini_batch,
                 value_loss_coef,
                 entropy_coef,
                 lr=None,
                 eps=None,
                 max_grad_norm=None,
                 use_clipped_value_loss=True):

        self.actor_critic = actor_critic

        self.clip_param = clip_param
        self.ppo_epoch = ppo_epoch
        self.num_mini_batch = num_mini_batch

        self.value_loss_coef = value_loss_coef
        self.entropy_coef = entropy_coef

        self.max_grad_norm = max_grad_norm
        self.use_clipped_value_loss = use_clipped_value_loss

        self.optimizer = optim.Adam(actor_critic.parameters(), lr=lr, eps=eps)

    def update(self, rollouts):
        advantages = rollouts.returns[:-1] - rollouts.value_preds[:-1]
        advantages = (advantages - advantages.mean()) / (
            advantages.std() + 1e-5)

        value_loss_epoch = 0
        action_loss_epoch = 0
        dist_entropy_epoch = 0

        for e in range(self.ppo_epoch):
            if self.actor_critic.is_recurrent:
                data_generator = rollouts.recurrent_generator(
                    advantages, self.num_mini_batch)
            else:
                data_generator = rollouts.feed_forward_generator(
                    advantages, self.num_mini_batch)

            for sample in data_generator:
                obs_batch, recurrent_hidden_states_batch, actions_batch, \\
                   value_preds_batch, return_batch, masks_batch, old_action_log_probs_batch, \\
                        adv_targ = sample

                # Reshape to do in a single forward pass for all steps
                values, action_log_probs, dist_entropy, _ = self.actor_critic.evaluate_actions(
                    obs_batch, recurrent_hidden_states_batch, masks_batch,
                    actions_batch)

                ratio = torch.exp(action_log_probs -
                                  old_action_log_probs_batch)
                surr1 = ratio * adv_targ
                surr2 = torch.clamp(ratio, 1.0 - self.clip_param,
                                    1.0 + self.clip_param) * adv_targ
                action_loss = -torch.min(surr1, surr2).mean()

                if self.use_clipped_value_loss:
                    value_pred_clipped = value_preds_batch + \\
                        (values - value_preds_batch).clamp(-self.clip_param, self.clip_param)
                    value_losses = (values - return_batch).pow(2)
                    value_losses_clipped = (
                        value_pred_clipped - return_batch).pow(2)
                    value_loss = 0.5 * torch.max(value_losses,
                                                 value_losses_clipped).mean()
                else:
                    value_loss = 0.5 * (return_batch - values).pow(2).mean()

                self.optimizer.zero_grad()
                (value_loss * self.value_loss_coef + action_loss -
                 dist_entropy * self.entropy_coef).backward()
                nn.utils.clip_grad_norm_(self.actor_critic.parameters(),
                                         self.max_grad_norm)
                self.optimizer.step()

                value_loss_epoch += value_loss.item()
                action_loss_epoch += action_loss.item()
                dist_entropy_epoch += dist_entropy.item()

        num_updates = self.ppo_epoch * self.num_mini_batch

        value_loss_epoch /= num_updates
        action_loss_epoch /= num_updates
        dist_entropy_epoch /= num_updates

        return value_loss_epoch, action_loss_epoch, dist_entropy_epoch


# a small deterministic vector environment behind VecPyTorch's interface (envs.py)
class Discrete:
    def __init__(self, n):
        self.n = n


class Box:
    def __init__(self, shape):
        self.shape = shape


class VecPyTorch:
    def __init__(self, num_envs, continuous, device):
        self.num_envs = num_envs
        self.observation_space = Box((3,))
        self.action_space = Box((1,)) if continuous else Discrete(2)
        self.device = device
        self.t = np.zeros(num_envs, dtype=np.int64)

    def reset(self):
        self.state = np.linspace(-1, 1, 3 * self.num_envs).reshape(self.num_envs, 3).astype(np.float32)
        obs = torch.from_numpy(self.state.copy()).float().to(self.device)
        return obs

    def step(self, actions):
        if isinstance(actions, torch.LongTensor):
            # Squeeze the dimension for discrete actions
            actions = actions.squeeze(1)
        actions = actions.cpu().numpy()
        a = actions.reshape(self.num_envs, -1)[:, 0].astype(np.float32)
        if self.action_space.__class__.__name__ == "Discrete":
            a = 2 * a - 1
        self.state = (0.8 * self.state + 0.2 * a[:, None] * np.array([1.0, -0.5, 0.25], np.float32)).astype(np.float32)
        reward = (-np.abs(self.state).sum(1) + 0.1 * a).astype(np.float32)
        self.t += 1
        done = (self.t % np.array([3, 5, 4, 7])[: self.num_envs]) == 0
        infos = [{"bad_transition": True} if d and i == 1 else {} for i, d in enumerate(done)]
        for i, d in enumerate(done):
            if d:
                infos[i]["episode"] = {"r": float(reward[i])}
                self.state[i] = np.linspace(-1, 1, 3)
        obs = torch.from_numpy(self.state.copy()).float().to(self.device)
        reward = torch.from_numpy(reward).unsqueeze(dim=1).float()
        return obs, reward, done, infos


# main.py, less the logging, saving and evaluation
device = torch.device("cpu")
envs = VecPyTorch(args.num_processes, args.continuous, device)

actor_critic = Policy(
    envs.observation_space.shape,
    envs.action_space,
    base_kwargs={'recurrent': args.recurrent_policy, 'hidden_size': 8})
actor_critic.to(device)
initialize(actor_critic)

agent = PPO(
    actor_critic,
    args.clip_param,
    args.ppo_epoch,
    args.num_mini_batch,
    args.value_loss_coef,
    args.entropy_coef,
    lr=args.lr,
    eps=args.eps,
    max_grad_norm=args.max_grad_norm)

rollouts = RolloutStorage(args.num_steps, args.num_processes,
                          envs.observation_space.shape, envs.action_space,
                          actor_critic.recurrent_hidden_state_size)

obs = envs.reset()
rollouts.obs[0].copy_(obs)
rollouts.to(device)

episode_rewards = deque(maxlen=10)

num_updates = int(
    args.num_env_steps) // args.num_steps // args.num_processes
for j in range(num_updates):

    if args.use_linear_lr_decay:
        # decrease learning rate linearly
        update_linear_schedule(
            agent.optimizer, j, num_updates,
            agent.optimizer.lr if args.algo == "acktr" else args.lr)

    for step in range(args.num_steps):
        # Sample actions
        with torch.no_grad():
            value, action, action_log_prob, recurrent_hidden_states = actor_critic.act(
                rollouts.obs[step], rollouts.recurrent_hidden_states[step],
                rollouts.masks[step])

        # Obser reward and next obs
        obs, reward, done, infos = envs.step(action)

        for info in infos:
            if 'episode' in info.keys():
                episode_rewards.append(info['episode']['r'])

        # If done then clean the history of observations.
        masks = torch.FloatTensor(
            [[0.0] if done_ else [1.0] for done_ in done])
        bad_masks = torch.FloatTensor(
            [[0.0] if 'bad_transition' in info.keys() else [1.0]
             for info in infos])
        rollouts.insert(obs, recurrent_hidden_states, action,
                        action_log_prob, value, reward, masks, bad_masks)

    with torch.no_grad():
        next_value = actor_critic.get_value(
            rollouts.obs[-1], rollouts.recurrent_hidden_states[-1],
            rollouts.masks[-1]).detach()

    rollouts.compute_returns(next_value, args.use_gae, args.gamma,
                             args.gae_lambda, args.use_proper_time_limits)

    value_loss, action_loss, dist_entropy = agent.update(rollouts)

    record.append([value_loss, action_loss, dist_entropy, agent.optimizer.param_groups[0]['lr']])
    record.append({"returns": rollouts.returns.numpy().copy(), "actions": rollouts.actions.numpy().copy(),
                   "masks": rollouts.masks.numpy().copy(), "hxs": rollouts.recurrent_hidden_states.numpy().copy()})
    record.append(params_of(actor_critic))

    rollouts.after_update()

    print("Updates {}, mean/median reward {:.1f}/{:.1f}, entropy {:.3f}".format(
        j, np.mean(episode_rewards), np.median(episode_rewards), dist_entropy))
'''

PPO_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\nfrom torch.utils.data.sampler import",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\nfrom retrograd.utils.data.sampler import",
    ),
    (
        "                (value_loss * self.value_loss_coef + action_loss -\n                 dist_entropy * self.entropy_coef).backward()\n                nn.utils.clip_grad_norm_(self.actor_critic.parameters(),\n                                         self.max_grad_norm)\n                self.optimizer.step()\n",
        "                grads = (value_loss * self.value_loss_coef + action_loss -\n                 dist_entropy * self.entropy_coef).backward()\n                nn.utils.clip_grad_norm_(grads, self.actor_critic.parameters(),\n                                         self.max_grad_norm)\n                self.optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("continuous, recurrent", [(False, False), (True, True)])
def test_ikostrikov_ppo_trains_as_torch(monkeypatch, capsys, continuous, recurrent):
    def args():
        return types.SimpleNamespace(
            algo="ppo", num_processes=4, num_steps=4, num_env_steps=32, continuous=continuous,
            recurrent_policy=recurrent, clip_param=0.2, ppo_epoch=2, num_mini_batch=2,
            value_loss_coef=0.5, entropy_coef=0.01, lr=7e-3, eps=1e-5, max_grad_norm=0.5,
            use_linear_lr_decay=True, use_gae=True, gamma=0.99, gae_lambda=0.95,
            use_proper_time_limits=True,
        )  # fmt: skip

    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = PPO_SOURCE if lib is torch else port(PPO_SOURCE, PPO_STEPS)
        with monkeypatch.context() as patches:
            _share_draws(patches, lib, 8201)
            run_source(
                text, lib, record=record, initialize=initialize, args=args(), params_of=params_of
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("Updates") == 2
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


PATCHTST_SOURCE = '''
__all__ = ['PatchTST']

# Cell
from typing import Callable, Optional
import math
import numpy as np
import torch
from torch import nn
from torch import Tensor
import torch.nn.functional as F
from torch.optim import lr_scheduler


# layers/RevIN.py
class RevIN(nn.Module):
    def __init__(self, num_features: int, eps=1e-5, affine=True, subtract_last=False):
        """
        :param num_features: the number of features or channels
        :param eps: a value added for numerical stability
        :param affine: if True, RevIN has learnable affine parameters
        """
        super(RevIN, self).__init__()
        self.num_features = num_features
        self.eps = eps
        self.affine = affine
        self.subtract_last = subtract_last
        if self.affine:
            self._init_params()

    def forward(self, x, mode:str):
        if mode == 'norm':
            self._get_statistics(x)
            x = self._normalize(x)
        elif mode == 'denorm':
            x = self._denormalize(x)
        else: raise NotImplementedError
        return x

    def _init_params(self):
        # initialize RevIN params: (C,)
        self.affine_weight = nn.Parameter(torch.ones(self.num_features))
        self.affine_bias = nn.Parameter(torch.zeros(self.num_features))

    def _get_statistics(self, x):
        dim2reduce = tuple(range(1, x.ndim-1))
        if self.subtract_last:
            self.last = x[:,-1,:].unsqueeze(1)
        else:
            self.mean = torch.mean(x, dim=dim2reduce, keepdim=True).detach()
        self.stdev = torch.sqrt(torch.var(x, dim=dim2reduce, keepdim=True, unbiased=False) + self.eps).detach()

    def _normalize(self, x):
        if self.subtract_last:
            x = x - self.last
        else:
            x = x - self.mean
        x = x / self.stdev
        if self.affine:
            x = x * self.affine_weight
            x = x + self.affine_bias
        return x

    def _denormalize(self, x):
        if self.affine:
            x = x - self.affine_bias
            x = x / (self.affine_weight + self.eps*self.eps)
        x = x * self.stdev
        if self.subtract_last:
            x = x + self.last
        else:
            x = x + self.mean
        return x


# layers/PatchTST_layers.py
class Transpose(nn.Module):
    def __init__(self, *dims, contiguous=False):
        super().__init__()
        self.dims, self.contiguous = dims, contiguous
    def forward(self, x):
        if self.contiguous: return x.transpose(*self.dims).contiguous()
        else: return x.transpose(*self.dims)


def get_activation_fn(activation):
    if callable(activation): return activation()
    elif activation.lower() == "relu": return nn.ReLU()
    elif activation.lower() == "gelu": return nn.GELU()
    raise ValueError(f'{activation} is not available. You can use "relu", "gelu", or a callable')


# decomposition

class moving_avg(nn.Module):
    """
    Moving average block to highlight the trend of time series
    """
    def __init__(self, kernel_size, stride):
        super(moving_avg, self).__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=0)

    def forward(self, x):
        # padding on the both ends of time series
        front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        x = torch.cat([front, x, end], dim=1)
        x = self.avg(x.permute(0, 2, 1))
        x = x.permute(0, 2, 1)
        return x


class series_decomp(nn.Module):
    """
    Series decomposition block
    """
    def __init__(self, kernel_size):
        super(series_decomp, self).__init__()
        self.moving_avg = moving_avg(kernel_size, stride=1)

    def forward(self, x):
        moving_mean = self.moving_avg(x)
        res = x - moving_mean
        return res, moving_mean


# pos_encoding

def PositionalEncoding(q_len, d_model, normalize=True):
    pe = torch.zeros(q_len, d_model)
    position = torch.arange(0, q_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    if normalize:
        pe = pe - pe.mean()
        pe = pe / (pe.std() * 10)
    return pe

SinCosPosEncoding = PositionalEncoding

def pv(msg, verbose):
    if verbose: print(msg)

def Coord2dPosEncoding(q_len, d_model, exponential=False, normalize=True, eps=1e-3, verbose=False):
    x = .5 if exponential else 1
    i = 0
    for i in range(100):
        cpe = 2 * (torch.linspace(0, 1, q_len).reshape(-1, 1) ** x) * (torch.linspace(0, 1, d_model).reshape(1, -1) ** x) - 1
        pv(f'{i:4.0f}  {x:5.3f}  {cpe.mean():+6.3f}', verbose)
        if abs(cpe.mean()) <= eps: break
        elif cpe.mean() > eps: x += .001
        else: x -= .001
        i += 1
    if normalize:
        cpe = cpe - cpe.mean()
        cpe = cpe / (cpe.std() * 10)
    return cpe

def Coord1dPosEncoding(q_len, exponential=False, normalize=True):
    cpe = (2 * (torch.linspace(0, 1, q_len).reshape(-1, 1)**(.5 if exponential else 1)) - 1)
    if normalize:
        cpe = cpe - cpe.mean()
        cpe = cpe / (cpe.std() * 10)
    return cpe

def positional_encoding(pe, learn_pe, q_len, d_model):
    # Positional encoding
    if pe == None:
        W_pos = torch.empty((q_len, d_model)) # pe = None and learn_pe = False can be used to measure impact of pe
        nn.init.uniform_(W_pos, -0.02, 0.02)
        learn_pe = False
    elif pe == 'zero':
        W_pos = torch.empty((q_len, 1))
        nn.init.uniform_(W_pos, -0.02, 0.02)
    elif pe == 'zeros':
        W_pos = torch.empty((q_len, d_model))
        nn.init.uniform_(W_pos, -0.02, 0.02)
    elif pe == 'normal' or pe == 'gauss':
        W_pos = torch.zeros((q_len, 1))
        torch.nn.init.normal_(W_pos, mean=0.0, std=0.1)
    elif pe == 'uniform':
        W_pos = torch.zeros((q_len, 1))
        nn.init.uniform_(W_pos, a=0.0, b=0.1)
    elif pe == 'lin1d': W_pos = Coord1dPosEncoding(q_len, exponential=False, normalize=True)
    elif pe == 'exp1d': W_pos = Coord1dPosEncoding(q_len, exponential=True, normalize=True)
    elif pe == 'lin2d': W_pos = Coord2dPosEncoding(q_len, d_model, exponential=False, normalize=True)
    elif pe == 'exp2d': W_pos = Coord2dPosEncoding(q_len, d_model, exponential=True, normalize=True)
    elif pe == 'sincos': W_pos = PositionalEncoding(q_len, d_model, normalize=True)
    else: raise ValueError(f"{pe} is not a valid pe (positional encoder. Available types: 'gauss'=='normal', \\
        'zeros', 'zero', uniform', 'lin1d', 'exp1d', 'lin2d', 'exp2d', 'sincos', None.)")
    return nn.Parameter(W_pos, requires_grad=learn_pe)


# layers/PatchTST_backbone.py
# Cell
class PatchTST_backbone(nn.Module):
    def __init__(self, c_in:int, context_window:int, target_window:int, patch_len:int, stride:int, max_seq_len:Optional[int]=1024,
                 n_layers:int=3, d_model=128, n_heads=16, d_k:Optional[int]=None, d_v:Optional[int]=None,
                 d_ff:int=256, norm:str='BatchNorm', attn_dropout:float=0., dropout:float=0., act:str="gelu", key_padding_mask:bool='auto',
                 padding_var:Optional[int]=None, attn_mask:Optional[Tensor]=None, res_attention:bool=True, pre_norm:bool=False, store_attn:bool=False,
                 pe:str='zeros', learn_pe:bool=True, fc_dropout:float=0., head_dropout = 0, padding_patch = None,
                 pretrain_head:bool=False, head_type = 'flatten', individual = False, revin = True, affine = True, subtract_last = False,
                 verbose:bool=False, **kwargs):

        super().__init__()

        # RevIn
        self.revin = revin
        if self.revin: self.revin_layer = RevIN(c_in, affine=affine, subtract_last=subtract_last)

        # Patching
        self.patch_len = patch_len
        self.stride = stride
        self.padding_patch = padding_patch
        patch_num = int((context_window - patch_len)/stride + 1)
        if padding_patch == 'end': # can be modified to general case
            self.padding_patch_layer = nn.ReplicationPad1d((0, stride))
            patch_num += 1

        # Backbone
        self.backbone = TSTiEncoder(c_in, patch_num=patch_num, patch_len=patch_len, max_seq_len=max_seq_len,
                                n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_k=d_k, d_v=d_v, d_ff=d_ff,
                                attn_dropout=attn_dropout, dropout=dropout, act=act, key_padding_mask=key_padding_mask, padding_var=padding_var,
                                attn_mask=attn_mask, res_attention=res_attention, pre_norm=pre_norm, store_attn=store_attn,
                                pe=pe, learn_pe=learn_pe, verbose=verbose, **kwargs)

        # Head
        self.head_nf = d_model * patch_num
        self.n_vars = c_in
        self.pretrain_head = pretrain_head
        self.head_type = head_type
        self.individual = individual

        if self.pretrain_head:
            self.head = self.create_pretrain_head(self.head_nf, c_in, fc_dropout) # custom head passed as a partial func with all its kwargs
        elif head_type == 'flatten':
            self.head = Flatten_Head(self.individual, self.n_vars, self.head_nf, target_window, head_dropout=head_dropout)


    def forward(self, z):                                                                   # z: [bs x nvars x seq_len]
        # norm
        if self.revin:
            z = z.permute(0,2,1)
            z = self.revin_layer(z, 'norm')
            z = z.permute(0,2,1)

        # do patching
        if self.padding_patch == 'end':
            z = self.padding_patch_layer(z)
        z = z.unfold(dimension=-1, size=self.patch_len, step=self.stride)                   # z: [bs x nvars x patch_num x patch_len]
        z = z.permute(0,1,3,2)                                                              # z: [bs x nvars x patch_len x patch_num]

        # model
        z = self.backbone(z)                                                                # z: [bs x nvars x d_model x patch_num]
        z = self.head(z)                                                                    # z: [bs x nvars x target_window]

        # denorm
        if self.revin:
            z = z.permute(0,2,1)
            z = self.revin_layer(z, 'denorm')
            z = z.permute(0,2,1)
        return z

    def create_pretrain_head(self, head_nf, vars, dropout):
        return nn.Sequential(nn.Dropout(dropout),
                    nn.Conv1d(head_nf, vars, 1)
                    )


class Flatten_Head(nn.Module):
    def __init__(self, individual, n_vars, nf, target_window, head_dropout=0):
        super().__init__()

        self.individual = individual
        self.n_vars = n_vars

        if self.individual:
            self.linears = nn.ModuleList()
            self.dropouts = nn.ModuleList()
            self.flattens = nn.ModuleList()
            for i in range(self.n_vars):
                self.flattens.append(nn.Flatten(start_dim=-2))
                self.linears.append(nn.Linear(nf, target_window))
                self.dropouts.append(nn.Dropout(head_dropout))
        else:
            self.flatten = nn.Flatten(start_dim=-2)
            self.linear = nn.Linear(nf, target_window)
            self.dropout = nn.Dropout(head_dropout)

    def forward(self, x):                                 # x: [bs x nvars x d_model x patch_num]
        if self.individual:
            x_out = []
            for i in range(self.n_vars):
                z = self.flattens[i](x[:,i,:,:])          # z: [bs x d_model * patch_num]
                z = self.linears[i](z)                    # z: [bs x target_window]
                z = self.dropouts[i](z)
                x_out.append(z)
            x = torch.stack(x_out, dim=1)                 # x: [bs x nvars x target_window]
        else:
            x = self.flatten(x)
            x = self.linear(x)
            x = self.dropout(x)
        return x


class TSTiEncoder(nn.Module):  #i means channel-independent
    def __init__(self, c_in, patch_num, patch_len, max_seq_len=1024,
                 n_layers=3, d_model=128, n_heads=16, d_k=None, d_v=None,
                 d_ff=256, norm='BatchNorm', attn_dropout=0., dropout=0., act="gelu", store_attn=False,
                 key_padding_mask='auto', padding_var=None, attn_mask=None, res_attention=True, pre_norm=False,
                 pe='zeros', learn_pe=True, verbose=False, **kwargs):


        super().__init__()

        self.patch_num = patch_num
        self.patch_len = patch_len

        # Input encoding
        q_len = patch_num
        self.W_P = nn.Linear(patch_len, d_model)        # Eq 1: projection of feature vectors onto a d-dim vector space
        self.seq_len = q_len

        # Positional encoding
        self.W_pos = positional_encoding(pe, learn_pe, q_len, d_model)

        # Residual dropout
        self.dropout = nn.Dropout(dropout)

        # Encoder
        self.encoder = TSTEncoder(q_len, d_model, n_heads, d_k=d_k, d_v=d_v, d_ff=d_ff, norm=norm, attn_dropout=attn_dropout, dropout=dropout,
                                   pre_norm=pre_norm, activation=act, res_attention=res_attention, n_layers=n_layers, store_attn=store_attn)


    def forward(self, x) -> Tensor:                                              # x: [bs x nvars x patch_len x patch_num]

        n_vars = x.shape[1]
        # Input encoding
        x = x.permute(0,1,3,2)                                                   # x: [bs x nvars x patch_num x patch_len]
        x = self.W_P(x)                                                          # x: [bs x nvars x patch_num x d_model]

        u = torch.reshape(x, (x.shape[0]*x.shape[1],x.shape[2],x.shape[3]))      # u: [bs * nvars x patch_num x d_model]
        u = self.dropout(u + self.W_pos)                                         # u: [bs * nvars x patch_num x d_model]

        # Encoder
        z = self.encoder(u)                                                      # z: [bs * nvars x patch_num x d_model]
        z = torch.reshape(z, (-1,n_vars,z.shape[-2],z.shape[-1]))                # z: [bs x nvars x patch_num x d_model]
        z = z.permute(0,1,3,2)                                                   # z: [bs x nvars x d_model x patch_num]

        return z



# Cell
class TSTEncoder(nn.Module):
    def __init__(self, q_len, d_model, n_heads, d_k=None, d_v=None, d_ff=None,
                        norm='BatchNorm', attn_dropout=0., dropout=0., activation='gelu',
                        res_attention=False, n_layers=1, pre_norm=False, store_attn=False):
        super().__init__()

        self.layers = nn.ModuleList([TSTEncoderLayer(q_len, d_model, n_heads=n_heads, d_k=d_k, d_v=d_v, d_ff=d_ff, norm=norm,
                                                      attn_dropout=attn_dropout, dropout=dropout,
                                                      activation=activation, res_attention=res_attention,
                                                      pre_norm=pre_norm, store_attn=store_attn) for i in range(n_layers)])
        self.res_attention = res_attention

    def forward(self, src:Tensor, key_padding_mask:Optional[Tensor]=None, attn_mask:Optional[Tensor]=None):
        output = src
        scores = None
        if self.res_attention:
            for mod in self.layers: output, scores = mod(output, prev=scores, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
            return output
        else:
            for mod in self.layers: output = mod(output, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
            return output



class TSTEncoderLayer(nn.Module):
    def __init__(self, q_len, d_model, n_heads, d_k=None, d_v=None, d_ff=256, store_attn=False,
                 norm='BatchNorm', attn_dropout=0, dropout=0., bias=True, activation="gelu", res_attention=False, pre_norm=False):
        super().__init__()
        assert not d_model%n_heads, f"d_model ({d_model}) must be divisible by n_heads ({n_heads})"
        d_k = d_model // n_heads if d_k is None else d_k
        d_v = d_model // n_heads if d_v is None else d_v

        # Multi-Head attention
        self.res_attention = res_attention
        self.self_attn = _MultiheadAttention(d_model, n_heads, d_k, d_v, attn_dropout=attn_dropout, proj_dropout=dropout, res_attention=res_attention)

        # Add & Norm
        self.dropout_attn = nn.Dropout(dropout)
        if "batch" in norm.lower():
            self.norm_attn = nn.Sequential(Transpose(1,2), nn.BatchNorm1d(d_model), Transpose(1,2))
        else:
            self.norm_attn = nn.LayerNorm(d_model)

        # Position-wise Feed-Forward
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff, bias=bias),
                                get_activation_fn(activation),
                                nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model, bias=bias))

        # Add & Norm
        self.dropout_ffn = nn.Dropout(dropout)
        if "batch" in norm.lower():
            self.norm_ffn = nn.Sequential(Transpose(1,2), nn.BatchNorm1d(d_model), Transpose(1,2))
        else:
            self.norm_ffn = nn.LayerNorm(d_model)

        self.pre_norm = pre_norm
        self.store_attn = store_attn


    def forward(self, src:Tensor, prev:Optional[Tensor]=None, key_padding_mask:Optional[Tensor]=None, attn_mask:Optional[Tensor]=None) -> Tensor:

        # Multi-Head attention sublayer
        if self.pre_norm:
            src = self.norm_attn(src)
        ## Multi-Head attention
        if self.res_attention:
            src2, attn, scores = self.self_attn(src, src, src, prev, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        else:
            src2, attn = self.self_attn(src, src, src, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        if self.store_attn:
            self.attn = attn
        ## Add & Norm
        src = src + self.dropout_attn(src2) # Add: residual connection with residual dropout
        if not self.pre_norm:
            src = self.norm_attn(src)

        # Feed-forward sublayer
        if self.pre_norm:
            src = self.norm_ffn(src)
        ## Position-wise Feed-Forward
        src2 = self.ff(src)
        ## Add & Norm
        src = src + self.dropout_ffn(src2) # Add: residual connection with residual dropout
        if not self.pre_norm:
            src = self.norm_ffn(src)

        if self.res_attention:
            return src, scores
        else:
            return src




class _MultiheadAttention(nn.Module):
    def __init__(self, d_model, n_heads, d_k=None, d_v=None, res_attention=False, attn_dropout=0., proj_dropout=0., qkv_bias=True, lsa=False):
        """Multi Head Attention Layer
        Input shape:
            Q:       [batch_size (bs) x max_q_len x d_model]
            K, V:    [batch_size (bs) x q_len x d_model]
            mask:    [q_len x q_len]
        """
        super().__init__()
        d_k = d_model // n_heads if d_k is None else d_k
        d_v = d_model // n_heads if d_v is None else d_v

        self.n_heads, self.d_k, self.d_v = n_heads, d_k, d_v

        self.W_Q = nn.Linear(d_model, d_k * n_heads, bias=qkv_bias)
        self.W_K = nn.Linear(d_model, d_k * n_heads, bias=qkv_bias)
        self.W_V = nn.Linear(d_model, d_v * n_heads, bias=qkv_bias)

        # Scaled Dot-Product Attention (multiple heads)
        self.res_attention = res_attention
        self.sdp_attn = _ScaledDotProductAttention(d_model, n_heads, attn_dropout=attn_dropout, res_attention=self.res_attention, lsa=lsa)

        # Poject output
        self.to_out = nn.Sequential(nn.Linear(n_heads * d_v, d_model), nn.Dropout(proj_dropout))


    def forward(self, Q:Tensor, K:Optional[Tensor]=None, V:Optional[Tensor]=None, prev:Optional[Tensor]=None,
                key_padding_mask:Optional[Tensor]=None, attn_mask:Optional[Tensor]=None):

        bs = Q.size(0)
        if K is None: K = Q
        if V is None: V = Q

        # Linear (+ split in multiple heads)
        q_s = self.W_Q(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1,2)       # q_s    : [bs x n_heads x max_q_len x d_k]
        k_s = self.W_K(K).view(bs, -1, self.n_heads, self.d_k).permute(0,2,3,1)     # k_s    : [bs x n_heads x d_k x q_len] - transpose(1,2) + transpose(2,3)
        v_s = self.W_V(V).view(bs, -1, self.n_heads, self.d_v).transpose(1,2)       # v_s    : [bs x n_heads x q_len x d_v]

        # Apply Scaled Dot-Product Attention (multiple heads)
        if self.res_attention:
            output, attn_weights, attn_scores = self.sdp_attn(q_s, k_s, v_s, prev=prev, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        else:
            output, attn_weights = self.sdp_attn(q_s, k_s, v_s, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        # output: [bs x n_heads x q_len x d_v], attn: [bs x n_heads x q_len x q_len], scores: [bs x n_heads x max_q_len x q_len]

        # back to the original inputs dimensions
        output = output.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * self.d_v) # output: [bs x q_len x n_heads * d_v]
        output = self.to_out(output)

        if self.res_attention: return output, attn_weights, attn_scores
        else: return output, attn_weights


class _ScaledDotProductAttention(nn.Module):
    r"""Scaled Dot-Product Attention module (Attention is all you need by Vaswani et al., 2017) with optional residual attention from previous layer
    (Realformer: Transformer likes residual attention by He et al, 2020) and locality self sttention (Vision Transformer for Small-Size Datasets
    by Lee et al, 2021)"""

    def __init__(self, d_model, n_heads, attn_dropout=0., res_attention=False, lsa=False):
        super().__init__()
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.res_attention = res_attention
        head_dim = d_model // n_heads
        self.scale = nn.Parameter(torch.tensor(head_dim ** -0.5), requires_grad=lsa)
        self.lsa = lsa

    def forward(self, q:Tensor, k:Tensor, v:Tensor, prev:Optional[Tensor]=None, key_padding_mask:Optional[Tensor]=None, attn_mask:Optional[Tensor]=None):

        # Scaled MatMul (q, k) - similarity scores for all pairs of positions in an input sequence
        attn_scores = torch.matmul(q, k) * self.scale      # attn_scores : [bs x n_heads x max_q_len x q_len]

        # Add pre-softmax attention scores from the previous layer (optional)
        if prev is not None: attn_scores = attn_scores + prev

        # Attention mask (optional)
        if attn_mask is not None:                                     # attn_mask with shape [q_len x seq_len] - only used when q_len == seq_len
            if attn_mask.dtype == torch.bool:
                attn_scores.masked_fill_(attn_mask, -np.inf)
            else:
                attn_scores += attn_mask

        # Key padding mask (optional)
        if key_padding_mask is not None:                              # mask with shape [bs x q_len] (only when max_w_len == q_len)
            attn_scores.masked_fill_(key_padding_mask.unsqueeze(1).unsqueeze(2), -np.inf)

        # normalize the attention weights
        attn_weights = F.softmax(attn_scores, dim=-1)                 # attn_weights   : [bs x n_heads x max_q_len x q_len]
        attn_weights = self.attn_dropout(attn_weights)

        # compute the new values given the attention weights
        output = torch.matmul(attn_weights, v)                        # output: [bs x n_heads x max_q_len x d_v]

        if self.res_attention: return output, attn_weights, attn_scores
        else: return output, attn_weights


# models/PatchTST.py
class Model(nn.Module):
    def __init__(self, configs, max_seq_len:Optional[int]=1024, d_k:Optional[int]=None, d_v:Optional[int]=None, norm:str='BatchNorm', attn_dropout:float=0.,
                 act:str="gelu", key_padding_mask:bool='auto',padding_var:Optional[int]=None, attn_mask:Optional[Tensor]=None, res_attention:bool=True,
                 pre_norm:bool=False, store_attn:bool=False, pe:str='zeros', learn_pe:bool=True, pretrain_head:bool=False, head_type = 'flatten', verbose:bool=False, **kwargs):

        super().__init__()

        # load parameters
        c_in = configs.enc_in
        context_window = configs.seq_len
        target_window = configs.pred_len

        n_layers = configs.e_layers
        n_heads = configs.n_heads
        d_model = configs.d_model
        d_ff = configs.d_ff
        dropout = configs.dropout
        fc_dropout = configs.fc_dropout
        head_dropout = configs.head_dropout

        individual = configs.individual

        patch_len = configs.patch_len
        stride = configs.stride
        padding_patch = configs.padding_patch

        revin = configs.revin
        affine = configs.affine
        subtract_last = configs.subtract_last

        decomposition = configs.decomposition
        kernel_size = configs.kernel_size


        # model
        self.decomposition = decomposition
        if self.decomposition:
            self.decomp_module = series_decomp(kernel_size)
            self.model_trend = PatchTST_backbone(c_in=c_in, context_window = context_window, target_window=target_window, patch_len=patch_len, stride=stride,
                                  max_seq_len=max_seq_len, n_layers=n_layers, d_model=d_model,
                                  n_heads=n_heads, d_k=d_k, d_v=d_v, d_ff=d_ff, norm=norm, attn_dropout=attn_dropout,
                                  dropout=dropout, act=act, key_padding_mask=key_padding_mask, padding_var=padding_var,
                                  attn_mask=attn_mask, res_attention=res_attention, pre_norm=pre_norm, store_attn=store_attn,
                                  pe=pe, learn_pe=learn_pe, fc_dropout=fc_dropout, head_dropout=head_dropout, padding_patch = padding_patch,
                                  pretrain_head=pretrain_head, head_type=head_type, individual=individual, revin=revin, affine=affine,
                                  subtract_last=subtract_last, verbose=verbose, **kwargs)
            self.model_res = PatchTST_backbone(c_in=c_in, context_window = context_window, target_window=target_window, patch_len=patch_len, stride=stride,
                                  max_seq_len=max_seq_len, n_layers=n_layers, d_model=d_model,
                                  n_heads=n_heads, d_k=d_k, d_v=d_v, d_ff=d_ff, norm=norm, attn_dropout=attn_dropout,
                                  dropout=dropout, act=act, key_padding_mask=key_padding_mask, padding_var=padding_var,
                                  attn_mask=attn_mask, res_attention=res_attention, pre_norm=pre_norm, store_attn=store_attn,
                                  pe=pe, learn_pe=learn_pe, fc_dropout=fc_dropout, head_dropout=head_dropout, padding_patch = padding_patch,
                                  pretrain_head=pretrain_head, head_type=head_type, individual=individual, revin=revin, affine=affine,
                                  subtract_last=subtract_last, verbose=verbose, **kwargs)
        else:
            self.model = PatchTST_backbone(c_in=c_in, context_window = context_window, target_window=target_window, patch_len=patch_len, stride=stride,
                                  max_seq_len=max_seq_len, n_layers=n_layers, d_model=d_model,
                                  n_heads=n_heads, d_k=d_k, d_v=d_v, d_ff=d_ff, norm=norm, attn_dropout=attn_dropout,
                                  dropout=dropout, act=act, key_padding_mask=key_padding_mask, padding_var=padding_var,
                                  attn_mask=attn_mask, res_attention=res_attention, pre_norm=pre_norm, store_attn=store_attn,
                                  pe=pe, learn_pe=learn_pe, fc_dropout=fc_dropout, head_dropout=head_dropout, padding_patch = padding_patch,
                                  pretrain_head=pretrain_head, head_type=head_type, individual=individual, revin=revin, affine=affine,
                                  subtract_last=subtract_last, verbose=verbose, **kwargs)


    def forward(self, x):           # x: [Batch, Input length, Channel]
        if self.decomposition:
            res_init, trend_init = self.decomp_module(x)
            res_init, trend_init = res_init.permute(0,2,1), trend_init.permute(0,2,1)  # x: [Batch, Channel, Input length]
            res = self.model_res(res_init)
            trend = self.model_trend(trend_init)
            x = res + trend
            x = x.permute(0,2,1)    # x: [Batch, Input length, Channel]
        else:
            x = x.permute(0,2,1)    # x: [Batch, Channel, Input length]
            x = self.model(x)
            x = x.permute(0,2,1)    # x: [Batch, Input length, Channel]
        return x


# utils/tools.py
def adjust_learning_rate(optimizer, scheduler, epoch, args, printout=True):
    # lr = args.learning_rate * (0.2 ** (epoch // 2))
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    elif args.lradj == 'TST':
        lr_adjust = {epoch: scheduler.get_last_lr()[0]}
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        if printout: print('Updating learning rate to {}'.format(lr))


# exp/exp_main.py's train, less its data provider, early stopping and checkpoints
model = Model(args, pe=pe).float()
initialize(model)
model_optim = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
criterion = nn.MSELoss()
train_steps = len(train_loader)
scheduler = lr_scheduler.OneCycleLR(optimizer = model_optim,
                                    steps_per_epoch = train_steps,
                                    pct_start = args.pct_start,
                                    epochs = args.train_epochs,
                                    max_lr = args.learning_rate)

for epoch in range(args.train_epochs):
    iter_count = 0
    train_loss = []

    model.train()
    for i, (batch_x, batch_y) in enumerate(train_loader):
        iter_count += 1
        model_optim.zero_grad()
        batch_x = batch_x.float()
        batch_y = batch_y.float()

        outputs = model(batch_x)
        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        batch_y = batch_y[:, -args.pred_len:, f_dim:]
        loss = criterion(outputs, batch_y)
        train_loss.append(loss.item())
        loss.backward()
        model_optim.step()

        if args.lradj == 'TST':
            adjust_learning_rate(model_optim, scheduler, epoch + 1, args, printout=False)
            scheduler.step()

    train_loss = np.average(train_loss)
    print("Epoch: {0}, Steps: {1} | Train Loss: {2:.7f}".format(epoch + 1, train_steps, train_loss))
    record.append([train_loss, scheduler.get_last_lr()[0]])
    record.append(params_of(model))

model.eval()
with torch.no_grad():
    record.append(model(train_loader[0][0].float()).numpy())
'''

PATCHTST_STEPS = [
    (
        "import torch\nfrom torch import nn\nfrom torch import Tensor\nimport torch.nn.functional as F\nfrom torch.optim import lr_scheduler\n",
        "import retrograd as torch\nfrom retrograd import nn\nfrom retrograd import Tensor\nimport retrograd.nn.functional as F\nfrom retrograd.optim import lr_scheduler\n",
    ),
    (
        "        loss.backward()\n        model_optim.step()\n",
        "        grads = loss.backward()\n        model_optim.step(grads)\n",
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
    batches = [windows[k : k + 4] for k in range(0, 12, 4)]

    def loader(lib):
        return [
            (lib.tensor(np.stack([x for x, _ in b])), lib.tensor(np.stack([y for _, y in b])))
            for b in batches
        ]

    args = types.SimpleNamespace(
        enc_in=2, seq_len=12, pred_len=4, e_layers=2, n_heads=2, d_model=8, d_ff=16, dropout=0.0,
        fc_dropout=0.0, head_dropout=0.0, individual=individual, patch_len=4, stride=2,
        padding_patch="end", revin=1, affine=1, subtract_last=subtract_last,
        decomposition=decomposition, kernel_size=5, learning_rate=1e-2, pct_start=0.3,
        train_epochs=2, lradj="TST", features="M",
    )  # fmt: skip
    records, logs = [], []
    initialize = initializer()
    # in float64 (both runs): several biases have a true gradient of zero (the key
    # projection's adds one constant to each query's scores, which the softmax cancels; the
    # value, output and feed-forward projections' add one constant per channel ahead of a
    # batch norm), and in float32 Adam's steps on them follow the rounding noise
    source = port(PATCHTST_SOURCE, [(".float()", ".double()")])
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, PATCHTST_STEPS)
        run_source(
            text, lib, record=record, initialize=initialize, args=args, pe=pe,
            train_loader=loader(lib), params_of=params_of,
        )  # fmt: skip
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("Epoch:") == 2
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)


M5_SOURCE = r"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class Resample(nn.Module):  # torchaudio.transforms.Resample's stand-in: every k-th sample
    def __init__(self, orig_freq, new_freq):
        super().__init__()
        self.orig_freq, self.new_freq = orig_freq, new_freq

    def forward(self, waveform):
        return waveform[..., :: self.orig_freq // self.new_freq]


class tqdm:  # (the progress bar, silent)
    def __init__(self, total):
        self.n = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n):
        self.n += n


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(device)

waveform, sample_rate, label, speaker_id, utterance_number = train_set[0]
labels = sorted(list(set(datapoint[2] for datapoint in train_set)))
print(labels)

new_sample_rate = 8000
transform = Resample(orig_freq=sample_rate, new_freq=new_sample_rate)
transformed = transform(waveform)


def label_to_index(word):
    # Return the position of the word in labels
    return torch.tensor(labels.index(word))


def index_to_label(index):
    # Return the word corresponding to the index in labels
    # This is the inverse of label_to_index
    return labels[index]


word_start = "yes"
index = label_to_index(word_start)
word_recovered = index_to_label(index)

print(word_start, "-->", index, "-->", word_recovered)


def pad_sequence(batch):
    # Make all tensor in a batch the same length by padding with zeros
    batch = [item.t() for item in batch]
    batch = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True, padding_value=0.)
    return batch.permute(0, 2, 1)


def collate_fn(batch):

    # A data tuple has the form:
    # waveform, sample_rate, label, speaker_id, utterance_number

    tensors, targets = [], []

    # Gather in lists, and encode labels as indices
    for waveform, _, label, *_ in batch:
        tensors += [waveform]
        targets += [label_to_index(label)]

    # Group the list of tensors into a batched tensor
    tensors = pad_sequence(tensors)
    targets = torch.stack(targets)

    return tensors, targets


batch_size = 4

if device == "cuda":
    num_workers = 1
    pin_memory = True
else:
    num_workers = 0
    pin_memory = False

train_loader = torch.utils.data.DataLoader(
    train_set,
    batch_size=batch_size,
    shuffle=True,
    collate_fn=collate_fn,
    num_workers=num_workers,
    pin_memory=pin_memory,
)
test_loader = torch.utils.data.DataLoader(
    test_set,
    batch_size=batch_size,
    shuffle=False,
    drop_last=False,
    collate_fn=collate_fn,
    num_workers=num_workers,
    pin_memory=pin_memory,
)


class M5(nn.Module):
    def __init__(self, n_input=1, n_output=35, stride=16, n_channel=32):
        super().__init__()
        self.conv1 = nn.Conv1d(n_input, n_channel, kernel_size=80, stride=stride)
        self.bn1 = nn.BatchNorm1d(n_channel)
        self.pool1 = nn.MaxPool1d(4)
        self.conv2 = nn.Conv1d(n_channel, n_channel, kernel_size=3)
        self.bn2 = nn.BatchNorm1d(n_channel)
        self.pool2 = nn.MaxPool1d(4)
        self.conv3 = nn.Conv1d(n_channel, 2 * n_channel, kernel_size=3)
        self.bn3 = nn.BatchNorm1d(2 * n_channel)
        self.pool3 = nn.MaxPool1d(4)
        self.conv4 = nn.Conv1d(2 * n_channel, 2 * n_channel, kernel_size=3)
        self.bn4 = nn.BatchNorm1d(2 * n_channel)
        self.pool4 = nn.MaxPool1d(4)
        self.fc1 = nn.Linear(2 * n_channel, n_output)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(self.bn1(x))
        x = self.pool1(x)
        x = self.conv2(x)
        x = F.relu(self.bn2(x))
        x = self.pool2(x)
        x = self.conv3(x)
        x = F.relu(self.bn3(x))
        x = self.pool3(x)
        x = self.conv4(x)
        x = F.relu(self.bn4(x))
        x = self.pool4(x)
        x = F.avg_pool1d(x, x.shape[-1])
        x = x.permute(0, 2, 1)
        x = self.fc1(x)
        return F.log_softmax(x, dim=2)


model = M5(n_input=transformed.shape[0], n_output=len(labels), n_channel=4)
model.to(device)
initialize(model)
print(model)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


n = count_parameters(model)
print("Number of parameters: %s" % n)

optimizer = optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0001)
scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)  # (step_size=20 as written)


def train(model, epoch, log_interval):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):

        data = data.to(device)
        target = target.to(device)

        # apply transform and model on whole batch directly on device
        data = transform(data)
        output = model(data)

        # negative log-likelihood for a tensor of size (batch x 1 x n_output)
        loss = F.nll_loss(output.squeeze(), target)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # print training stats
        if batch_idx % log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} ({100. * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}")

        # update progress bar
        pbar.update(pbar_update)
        # record loss
        losses.append(loss.item())
    record.append(params_of(model))
    record.append({k: v.numpy().copy() for k, v in model.state_dict().items() if "running" in k})


def number_of_correct(pred, target):
    # count number of correct predictions
    return pred.squeeze().eq(target).sum().item()


def get_likely_index(tensor):
    # find most likely label index for each element in the batch
    return tensor.argmax(dim=-1)


def test(model, epoch):
    model.eval()
    correct = 0
    for data, target in test_loader:

        data = data.to(device)
        target = target.to(device)

        # apply transform and model on whole batch directly on device
        data = transform(data)
        output = model(data)
        record.append(output.detach().numpy())

        pred = get_likely_index(output)
        correct += number_of_correct(pred, target)

        # update progress bar
        pbar.update(pbar_update)

    print(f"\nTest Epoch: {epoch}\tAccuracy: {correct}/{len(test_loader.dataset)} ({100. * correct / len(test_loader.dataset):.0f}%)\n")


log_interval = 1
n_epoch = 2

pbar_update = 1 / (len(train_loader) + len(test_loader))
losses = []

# The transform needs to live on the same device as the model and the data.
transform = transform.to(device)
with tqdm(total=n_epoch) as pbar:
    for epoch in range(1, n_epoch + 1):
        train(model, epoch, log_interval)
        test(model, epoch)
        scheduler.step()
record.append(losses)


def predict(tensor):
    # Use the model to predict the label of the waveform
    tensor = tensor.to(device)
    tensor = transform(tensor)
    tensor = model(tensor.unsqueeze(0))
    tensor = get_likely_index(tensor)
    tensor = index_to_label(tensor.squeeze())
    return tensor


waveform, sample_rate, utterance, *_ = train_set[-1]
print(f"Expected: {utterance}. Predicted: {predict(waveform)}.")

for i, (waveform, sample_rate, utterance, *_) in enumerate(test_set):
    output = predict(waveform)
    if output != utterance:
        print(f"Data point #{i}. Expected: {utterance}. Predicted: {output}.")
        break
else:
    print("All examples in this dataset were correctly classified!")
    print("In this case, let's try the data point with the maximum output:")
"""

M5_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_speech_command_m5_trains_as_torch(monkeypatch, capsys):
    """The speech command tutorial (pytorch/tutorials ``intermediate_source/
    speech_command_classification_with_torchaudio_tutorial.py``), SPEECHCOMMANDS replaced by
    a few synthetic clips of uneven lengths (tones per word) and torchaudio's ``Resample``
    by taking every other sample: ``M5`` with ``Conv1d(kernel_size=80, stride=16)``,
    ``BatchNorm1d``/``MaxPool1d`` and ``F.avg_pool1d(x, x.shape[-1])``, ``F.log_softmax(x,
    dim=2)`` and ``F.nll_loss(output.squeeze(), target)``, ``collate_fn`` padding by
    ``nn.utils.rnn.pad_sequence`` of transposed clips and ``torch.stack`` of 0-d label
    tensors, a shuffling ``DataLoader``, Adam with weight decay under ``StepLR``, the
    ``print(model)`` repr, and ``predict``'s ``labels[index]`` by a 0-d tensor."""
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
    # in float64 (both runs, the clips too): the convolutions' biases feed batch norms, which
    # cancel them, and in float32 Adam's steps on them follow the rounding noise
    source = port(
        M5_SOURCE, [("model.to(device)\ninitialize", "model.to(device).double()\ninitialize")]
    )
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, M5_STEPS)
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
    assert logs[0].count("Train Epoch") == 4
    # by retrograd's documented design (CHANGELOG): the CPU device prints as ``cpu:0``; the
    # rest of the log (the model's repr, the tensors too) is torch's, the losses to float32's
    # rounding (the records compare them)
    ours = logs[1].replace("cpu:0\n", "cpu\n")
    assert re.sub(r"Loss: \S+", "Loss:", ours) == re.sub(r"Loss: \S+", "Loss:", logs[0])
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)


DREAMER_SOURCE = '''
import copy
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch import distributions as torchd


def to_np(x):
    return x.detach().cpu().numpy()


# tools.py
class RequiresGrad:
    def __init__(self, model):
        self._model = model

    def __enter__(self):
        self._model.requires_grad_(requires_grad=True)

    def __exit__(self, *args):
        self._model.requires_grad_(requires_grad=False)


def symlog(x):
    return torch.sign(x) * torch.log(torch.abs(x) + 1.0)


def symexp(x):
    return torch.sign(x) * (torch.exp(torch.abs(x)) - 1.0)


class OneHotDist(torchd.one_hot_categorical.OneHotCategorical):
    def __init__(self, logits=None, probs=None, unimix_ratio=0.0):
        if logits is not None and unimix_ratio > 0.0:
            probs = F.softmax(logits, dim=-1)
            probs = probs * (1.0 - unimix_ratio) + unimix_ratio / probs.shape[-1]
            logits = torch.log(probs)
            super().__init__(logits=logits, probs=None)
        else:
            super().__init__(logits=logits, probs=probs)

    def mode(self):
        _mode = F.one_hot(
            torch.argmax(super().logits, axis=-1), super().logits.shape[-1]
        )
        return _mode.detach() + super().logits - super().logits.detach()

    def sample(self, sample_shape=(), seed=None):
        if seed is not None:
            raise ValueError("need to check")
        sample = super().sample(sample_shape)
        probs = super().probs
        while len(probs.shape) < len(sample.shape):
            probs = probs[None]
        sample += probs - probs.detach()
        return sample


class DiscDist:
    def __init__(
        self,
        logits,
        low=-20.0,
        high=20.0,
        transfwd=symlog,
        transbwd=symexp,
        device="cuda",
    ):
        self.logits = logits
        self.probs = torch.softmax(logits, -1)
        self.buckets = torch.linspace(low, high, steps=255, device=device)
        self.width = (self.buckets[-1] - self.buckets[0]) / 255
        self.transfwd = transfwd
        self.transbwd = transbwd

    def mean(self):
        _mean = self.probs * self.buckets
        return self.transbwd(torch.sum(_mean, dim=-1, keepdim=True))

    def mode(self):
        _mode = self.probs * self.buckets
        return self.transbwd(torch.sum(_mode, dim=-1, keepdim=True))

    # Inside OneHotCategorical, log_prob is calculated using only max element in targets
    def log_prob(self, x):
        x = self.transfwd(x)
        # x(time, batch, 1)
        below = torch.sum((self.buckets <= x[..., None]).to(torch.int32), dim=-1) - 1
        above = len(self.buckets) - torch.sum(
            (self.buckets > x[..., None]).to(torch.int32), dim=-1
        )
        # this is implemented using clip at the original repo as the gradients are not backpropagated for the out of limits.
        below = torch.clip(below, 0, len(self.buckets) - 1)
        above = torch.clip(above, 0, len(self.buckets) - 1)
        equal = below == above

        dist_to_below = torch.where(equal, 1, torch.abs(self.buckets[below] - x))
        dist_to_above = torch.where(equal, 1, torch.abs(self.buckets[above] - x))
        total = dist_to_below + dist_to_above
        weight_below = dist_to_above / total
        weight_above = dist_to_below / total
        target = (
            F.one_hot(below, num_classes=len(self.buckets)) * weight_below[..., None]
            + F.one_hot(above, num_classes=len(self.buckets)) * weight_above[..., None]
        )
        log_pred = self.logits - torch.logsumexp(self.logits, -1, keepdim=True)
        target = target.squeeze(-2)

        return (target * log_pred).sum(-1)


def static_scan_for_lambda_return(fn, inputs, start):
    last = start
    indices = range(inputs[0].shape[0])
    indices = reversed(indices)
    flag = True
    for index in indices:
        # (inputs, pcont) -> (inputs[index], pcont[index])
        inp = lambda x: (_input[x] for _input in inputs)
        last = fn(last, *inp(index))
        if flag:
            outputs = last
            flag = False
        else:
            outputs = torch.cat([outputs, last], dim=-1)
    outputs = torch.reshape(outputs, [outputs.shape[0], outputs.shape[1], 1])
    outputs = torch.flip(outputs, [1])
    outputs = torch.unbind(outputs, dim=0)
    return outputs


def lambda_return(reward, value, pcont, bootstrap, lambda_, axis):
    # Setting lambda=1 gives a discounted Monte Carlo return.
    # Setting lambda=0 gives a fixed 1-step return.
    # assert reward.shape.ndims == value.shape.ndims, (reward.shape, value.shape)
    assert len(reward.shape) == len(value.shape), (reward.shape, value.shape)
    if isinstance(pcont, (int, float)):
        pcont = pcont * torch.ones_like(reward)
    dims = list(range(len(reward.shape)))
    dims = [axis] + dims[1:axis] + [0] + dims[axis + 1 :]
    if axis != 0:
        reward = reward.permute(dims)
        value = value.permute(dims)
        pcont = pcont.permute(dims)
    if bootstrap is None:
        bootstrap = torch.zeros_like(value[-1])
    next_values = torch.cat([value[1:], bootstrap[None]], 0)
    inputs = reward + pcont * next_values * (1 - lambda_)
    # returns = static_scan(
    #    lambda agg, cur0, cur1: cur0 + cur1 * lambda_ * agg,
    #    (inputs, pcont), bootstrap, reverse=True)
    # reimplement to optimize performance
    returns = static_scan_for_lambda_return(
        lambda agg, cur0, cur1: cur0 + cur1 * lambda_ * agg, (inputs, pcont), bootstrap
    )
    if axis != 0:
        returns = returns.permute(dims)
    return returns


class Optimizer:
    def __init__(
        self,
        name,
        parameters,
        lr,
        eps=1e-4,
        clip=None,
        wd=None,
        wd_pattern=r".*",
        opt="adam",
        use_amp=False,
    ):
        assert 0 <= wd < 1
        assert not clip or 1 <= clip
        self._name = name
        self._parameters = parameters
        self._clip = clip
        self._wd = wd
        self._wd_pattern = wd_pattern
        self._opt = {
            "adam": lambda: torch.optim.Adam(parameters, lr=lr, eps=eps),
            "adamax": lambda: torch.optim.Adamax(parameters, lr=lr, eps=eps),
            "sgd": lambda: torch.optim.SGD(parameters, lr=lr),
            "momentum": lambda: torch.optim.SGD(parameters, lr=lr, momentum=0.9),
        }[opt]()
        self._scaler = torch.cuda.amp.GradScaler(enabled=use_amp)

    def __call__(self, loss, params, retain_graph=True):
        assert len(loss.shape) == 0, loss.shape
        metrics = {}
        metrics[f"{self._name}_loss"] = loss.detach().cpu().numpy()
        self._opt.zero_grad()
        self._scaler.scale(loss).backward(retain_graph=retain_graph)
        self._scaler.unscale_(self._opt)
        # loss.backward(retain_graph=retain_graph)
        norm = torch.nn.utils.clip_grad_norm_(params, self._clip)
        if self._wd:
            self._apply_weight_decay(params)
        self._scaler.step(self._opt)
        self._scaler.update()
        # self._opt.step()
        self._opt.zero_grad()
        metrics[f"{self._name}_grad_norm"] = to_np(norm)
        return metrics

    def _apply_weight_decay(self, varibs):
        nontrivial = self._wd_pattern != r".*"
        if nontrivial:
            raise NotImplementedError
        for var in varibs:
            var.data = (1 - self._wd) * var.data


# models.py's RewardEMA and ImagBehavior's targets, losses and slow critic, the world model's
# imagined features given (and the heads nn.Sequential MLPs where networks.MLP stands)
class RewardEMA:
    """running mean and std"""

    def __init__(self, device, alpha=1e-2):
        self.device = device
        self.alpha = alpha
        self.range = torch.tensor([0.05, 0.95]).to(device)

    def __call__(self, x, ema_vals):
        flat_x = torch.flatten(x.detach())
        x_quantile = torch.quantile(input=flat_x, q=self.range)
        # this should be in-place operation
        ema_vals[:] = self.alpha * x_quantile + (1 - self.alpha) * ema_vals
        scale = torch.clip(ema_vals[1] - ema_vals[0], min=1.0)
        offset = ema_vals[0]
        return offset.detach(), scale.detach()


class Actor(nn.Module):
    def __init__(self, feat_size, num_actions, unimix_ratio):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(feat_size, 16), nn.LayerNorm(16, eps=1e-03), nn.SiLU(), nn.Linear(16, num_actions))
        self._unimix_ratio = unimix_ratio

    def forward(self, features):
        return OneHotDist(self.net(features), unimix_ratio=self._unimix_ratio)


class Value(nn.Module):
    def __init__(self, feat_size):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(feat_size, 16), nn.LayerNorm(16, eps=1e-03), nn.SiLU(), nn.Linear(16, 255))

    def forward(self, features):
        return DiscDist(logits=self.net(features), device="cpu")


class ImagBehavior(nn.Module):
    def __init__(self, config, feat_size, num_actions):
        super().__init__()
        self._config = config
        self.actor = Actor(feat_size, num_actions, config.unimix_ratio)
        self.value = Value(feat_size)
        initialize(self.actor)
        initialize(self.value)
        if config.critic["slow_target"]:
            self._slow_value = copy.deepcopy(self.value)
            self._updates = 0
        kw = dict(wd=config.weight_decay, opt=config.opt, use_amp=False)
        self._actor_opt = Optimizer("actor", self.actor.parameters(), config.actor["lr"], config.actor["eps"], config.actor["grad_clip"], **kw)
        self._value_opt = Optimizer("value", self.value.parameters(), config.critic["lr"], config.critic["eps"], config.critic["grad_clip"], **kw)
        if self._config.reward_EMA:
            # register ema_vals to nn.Module for enabling torch.save and torch.load
            self.register_buffer("ema_vals", torch.zeros((2,)).to(self._config.device))
            self.reward_ema = RewardEMA(device=self._config.device)

    def _train(self, imag_feat, imag_action, reward):
        self._update_slow_target()
        metrics = {}

        with RequiresGrad(self.actor):
            target, weights, base = self._compute_target(imag_feat, reward)
            actor_loss, mets = self._compute_actor_loss(imag_feat, imag_action, target, weights, base)
            actor_ent = self.actor(imag_feat).entropy()
            actor_loss -= self._config.actor["entropy"] * actor_ent[:-1, ..., None]
            actor_loss = torch.mean(actor_loss)
            metrics.update(mets)
            value_input = imag_feat

        with RequiresGrad(self.value):
            value = self.value(value_input[:-1].detach())
            target = torch.stack(target, dim=1)
            # (time, batch, 1), (time, batch, 1) -> (time, batch)
            value_loss = -value.log_prob(target.detach())
            slow_target = self._slow_value(value_input[:-1].detach())
            if self._config.critic["slow_target"]:
                value_loss -= value.log_prob(slow_target.mode().detach())
            # (time, batch, 1), (time, batch, 1) -> (1,)
            value_loss = torch.mean(weights[:-1] * value_loss[:, :, None])

        metrics["actor_entropy"] = to_np(torch.mean(actor_ent))
        with RequiresGrad(self):
            metrics.update(self._actor_opt(actor_loss, self.actor.parameters()))
            metrics.update(self._value_opt(value_loss, self.value.parameters()))
        return metrics

    def _compute_target(self, imag_feat, reward):
        discount = self._config.discount * torch.ones_like(reward)
        value = self.value(imag_feat).mode()
        target = lambda_return(
            reward[1:],
            value[:-1],
            discount[1:],
            bootstrap=value[-1],
            lambda_=self._config.discount_lambda,
            axis=0,
        )
        weights = torch.cumprod(
            torch.cat([torch.ones_like(discount[:1]), discount[:-1]], 0), 0
        ).detach()
        return target, weights, value[:-1]

    def _compute_actor_loss(self, imag_feat, imag_action, target, weights, base):
        metrics = {}
        inp = imag_feat.detach()
        policy = self.actor(inp)
        # Q-val for actor is not transformed using symlog
        target = torch.stack(target, dim=1)
        if self._config.reward_EMA:
            offset, scale = self.reward_ema(target, self.ema_vals)
            normed_target = (target - offset) / scale
            normed_base = (base - offset) / scale
            adv = normed_target - normed_base
            metrics["EMA_005"] = to_np(self.ema_vals[0])
            metrics["EMA_095"] = to_np(self.ema_vals[1])

        if self._config.imag_gradient == "dynamics":
            actor_target = adv
        elif self._config.imag_gradient == "reinforce":
            actor_target = (
                policy.log_prob(imag_action)[:-1][:, :, None]
                * (target - self.value(imag_feat[:-1]).mode()).detach()
            )
        actor_loss = -weights[:-1] * actor_target
        return actor_loss, metrics

    def _update_slow_target(self):
        if self._config.critic["slow_target"]:
            if self._updates % self._config.critic["slow_target_update"] == 0:
                mix = self._config.critic["slow_target_fraction"]
                for s, d in zip(self.value.parameters(), self._slow_value.parameters()):
                    d.data = mix * s.data + (1 - mix) * d.data
            self._updates += 1


behavior = ImagBehavior(config, feat_size=6, num_actions=3)
behavior.requires_grad_(requires_grad=False)
for imag_feat, imag_action, reward in batches:
    metrics = behavior._train(torch.tensor(imag_feat), torch.tensor(imag_action), torch.tensor(reward))
    record.append({k: np.array(v, copy=True) for k, v in sorted(metrics.items())})  # (to_np of ema_vals[0] is a view in torch, which the next step's ema_vals[:] = ... rewrites)
    record.append(params_of(behavior.actor, behavior.value, behavior._slow_value))
    record.append(behavior.ema_vals.numpy().copy())
with torch.no_grad():
    policy = behavior.actor(torch.tensor(batches[0][0]))
    record.append({"mode": policy.mode().numpy(), "sample": policy.sample().numpy(),
                   "value": behavior.value(torch.tensor(batches[0][0])).mean().numpy()})
'''

DREAMER_STEPS = [
    (
        "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\nfrom torch import distributions as torchd\n",
        "import retrograd as torch\nfrom retrograd import nn\nfrom retrograd.nn import functional as F\nfrom retrograd import distributions as torchd\n",
    ),
    (
        "        self._scaler.scale(loss).backward(retain_graph=retain_graph)\n        self._scaler.unscale_(self._opt)\n        # loss.backward(retain_graph=retain_graph)\n        norm = torch.nn.utils.clip_grad_norm_(params, self._clip)\n        if self._wd:\n            self._apply_weight_decay(params)\n        self._scaler.step(self._opt)\n",
        "        grads = self._scaler.scale(loss).backward(retain_graph=retain_graph)\n        self._scaler.unscale_(self._opt, grads)\n        # loss.backward(retain_graph=retain_graph)\n        norm = torch.nn.utils.clip_grad_norm_(grads, params, self._clip)\n        if self._wd:\n            self._apply_weight_decay(params)\n        self._scaler.step(self._opt, grads)\n",
    ),
]


@pytest.mark.parametrize("imag_gradient", ["dynamics", "reinforce"])
def test_dreamerv3_behavior_trains_as_torch(imag_gradient):
    """DreamerV3's actor-critic as NM512/dreamerv3-torch writes it (``tools.py``'s
    ``RequiresGrad``, ``symlog``/``symexp``, ``OneHotDist`` subclassing
    ``torchd.one_hot_categorical.OneHotCategorical`` with its uniform mix, ``super().logits``
    and the straight-through ``mode``/``sample``, the two-hot ``DiscDist`` critic (``torch.where
    (equal, 1, ...)`` of int32 bucket counts, ``F.one_hot(...) * weight``), ``lambda_return``
    by ``static_scan_for_lambda_return``'s ``torch.cat``/``flip``/``unbind``, the
    ``Optimizer`` wrapper with a disabled ``GradScaler`` and ``var.data = (1 - wd) *
    var.data`` weight decay; ``models.py``'s ``RewardEMA`` (``torch.quantile(input=, q=)``,
    ``ema_vals[:] = ...`` into a buffer) and ``ImagBehavior``'s targets, actor loss (the
    ``dynamics`` and ``reinforce`` gradients), entropy bonus and slow critic by ``d.data = mix *
    s.data + (1 - mix) * d.data``), on given imagined features where the world model would
    imagine them, the heads small ``nn.Sequential`` MLPs where ``networks.MLP`` stands."""
    rng = np.random.default_rng(8106)
    batches = [
        (
            rng.standard_normal((5, 3, 6)).astype(np.float32),
            np.eye(3, dtype=np.float32)[rng.integers(0, 3, (5, 3))],
            rng.uniform(-1, 2, (5, 3, 1)).astype(np.float32),
        )
        for _ in range(2)
    ]
    config = types.SimpleNamespace(
        device="cpu", unimix_ratio=0.01, weight_decay=0.1, opt="adam", discount=0.997,
        discount_lambda=0.95, reward_EMA=True, imag_gradient=imag_gradient,
        actor={"lr": 3e-3, "eps": 1e-5, "grad_clip": 100.0, "entropy": 3e-4},
        critic={"lr": 3e-3, "eps": 1e-5, "grad_clip": 100.0, "slow_target": True,
                "slow_target_update": 1, "slow_target_fraction": 0.02},
    )  # fmt: skip
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DREAMER_SOURCE if lib is torch else port(DREAMER_SOURCE, DREAMER_STEPS)
        with SharedDraws(lib, 8106), SharedOneHotSample(lib, 8106):
            run_source(
                text, lib, record=record, initialize=initialize, params_of=params_of,
                config=config, batches=batches,
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
    """torch's per-family modules (``torch.distributions.one_hot_categorical``, ``uniform``,
    ``independent``, ``beta``... 30 of them) were missing: ``from
    torch.distributions.uniform import Uniform`` failed (``ModuleNotFoundError``) and
    dreamerv3-torch's ``torchd.one_hot_categorical.OneHotCategorical`` (an
    ``AttributeError``). Each is a module of ``rg.distributions`` now, holding the classes
    torch's holds."""
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
    """``Tensor.unfold``'s first parameter is ``dimension`` in torch, and PatchTST names it
    (``z.unfold(dimension=-1, size=self.patch_len, step=self.stride)``); retrograd's was
    ``dim``, so the call failed with a ``DTypeError``. It is ``dimension`` now, and ``dim=``
    is refused as torch refuses it."""
    values = np.arange(24.0, dtype=np.float32).reshape(2, 12)
    ours = rg.tensor(values).unfold(dimension=-1, size=4, step=2)
    theirs = torch.tensor(values).unfold(dimension=-1, size=4, step=2)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(TypeError):
        torch.tensor(values).unfold(dim=-1, size=4, step=2)
    with pytest.raises(TypeError):
        rg.tensor(values).unfold(dim=-1, size=4, step=2)


def test_regression_gradient_recorded_before_a_freeze_and_thaw():
    """dreamerv3-torch's ``RequiresGrad`` thaws a module around its forward and freezes it
    after, then thaws it again around the backward: torch's ``.grad`` belongs to the one
    tensor, so the gradient arrives. Retrograd's freeze made the parameter an untracked value
    and the thaw a fresh leaf, whose ``p.grad(grads)`` was None (the actor's update was
    lost). The thawed leaf now finds the gradient its frozen predecessor got; a parameter
    still frozen at the read gets none, as torch accumulates none into a frozen tensor."""
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
