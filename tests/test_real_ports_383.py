# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
soft actor-critic as denisyarats/pytorch_sac writes it (``utils.py``'s ``eval_mode``,
``soft_update_params``, ``set_seed_everywhere``, ``weight_init``, ``mlp``, ``to_np``;
``agent/__init__.py``'s ``Agent``; ``agent/actor.py``; ``agent/critic.py``; ``agent/sac.py``;
``replay_buffer.py``; ``train.py``'s ``Workspace``), small:

- the squashed Gaussian as a distribution: ``TanhTransform(pyd.transforms.Transform)`` with
  class attributes ``domain = pyd.constraints.real``, ``codomain =
  pyd.constraints.interval(-1.0, 1.0)``, ``bijective``, ``sign``, ``super().__init__(
  cache_size=cache_size)``, its own ``atanh`` by ``log1p``, ``__eq__``, ``_call``,
  ``_inverse`` and the stable ``log_abs_det_jacobian`` ``2. * (math.log(2.) - x -
  F.softplus(-2. * x))``; ``SquashedNormal(pyd.transformed_distribution.
  TransformedDistribution)`` that sets ``self.loc``/``self.scale``/``self.base_dist`` before
  ``super().__init__`` and overrides ``mean`` by running ``self.transforms``; ``rsample``
  then ``log_prob`` of the sample (the inverse taken from the transform's cache),
  ``sample`` under ``eval_mode``;
- ``DiagGaussianActor`` (``self.trunk(obs).chunk(2, dim=-1)``, the ``tanh``-rescaled
  ``log_std`` bounds, ``self.apply(utils.weight_init)`` with ``nn.init.orthogonal_(
  m.weight.data)`` and ``m.bias.data.fill_(0.0)``, ``nn.ReLU(inplace=True)``, ``type(m) ==
  nn.Linear``), ``DoubleQCritic`` (``obs.size(0)``, ``torch.cat``);
- ``SACAgent``: the temperature as a plain tensor, ``torch.tensor(np.log(init_temperature))
  .to(device)`` (float64) with ``requires_grad = True``, stepped by its own ``Adam([
  self.log_alpha], betas=...)``, ``self.alpha.detach() * log_prob`` (a float64 0-d tensor
  times float32), ``F.mse_loss`` of the twin Qs, ``torch.FloatTensor(obs).to(device)``,
  ``action.clamp(*self.action_range)``, delayed target updates through
  ``target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)``;
- ``ReplayBuffer`` (``np.copyto`` into rows, ``torch.as_tensor(..., device=).float()``) and
  the ``Workspace``'s loop with its seed steps, evaluation and ``done_no_max``.

What stands in: ``dmc2gym`` (``utils.make_env``: a deterministic point mass with gym's old
API), ``hydra.utils.instantiate`` (the ``class`` of a config looked up among the program's
names; each module it makes passes through ``initialize``, so the port starts from torch's
weights), the ``Logger`` (its logged scalars and histograms are the records; the gradients'
histograms left out), and the configuration (a namespace). Left out: the video recorder and
``evaluate``'s normalization branch (``replay_buffer.mean_obs_np``, which the ``ReplayBuffer``
of that commit does not have). The port changes the gradient lines and the import lines naming
``torch``; ``Normal.rsample``/``sample`` draw from one stream shared by both runs.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from real_ports import assert_records_agree
from rl_standins import Box, PointMassEnv, run_program

PYTORCH_SAC = """
import numpy as np
import torch
from torch import nn
from torch import distributions as pyd
import torch.nn.functional as F
import math
import abc
import os
import random


# utils.py
class eval_mode(object):
    def __init__(self, *models):
        self.models = models

    def __enter__(self):
        self.prev_states = []
        for model in self.models:
            self.prev_states.append(model.training)
            model.train(False)

    def __exit__(self, *args):
        for model, state in zip(self.models, self.prev_states):
            model.train(state)
        return False


def soft_update_params(net, target_net, tau):
    for param, target_param in zip(net.parameters(), target_net.parameters()):
        target_param.data.copy_(tau * param.data +
                                (1 - tau) * target_param.data)

def set_seed_everywhere(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    np.random.seed(seed)
    random.seed(seed)


def weight_init(m):
    \"\"\"Custom weight init for Conv2D and Linear layers.\"\"\"
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        if hasattr(m.bias, 'data'):
            m.bias.data.fill_(0.0)


def mlp(input_dim, hidden_dim, output_dim, hidden_depth, output_mod=None):
    if hidden_depth == 0:
        mods = [nn.Linear(input_dim, output_dim)]
    else:
        mods = [nn.Linear(input_dim, hidden_dim), nn.ReLU(inplace=True)]
        for i in range(hidden_depth - 1):
            mods += [nn.Linear(hidden_dim, hidden_dim), nn.ReLU(inplace=True)]
        mods.append(nn.Linear(hidden_dim, output_dim))
    if output_mod is not None:
        mods.append(output_mod)
    trunk = nn.Sequential(*mods)
    return trunk

def to_np(t):
    if t is None:
        return None
    elif t.nelement() == 0:
        return np.array([])
    else:
        return t.cpu().detach().numpy()


utils = types.SimpleNamespace(make_env=make_env, eval_mode=eval_mode, soft_update_params=soft_update_params,
                              set_seed_everywhere=set_seed_everywhere, weight_init=weight_init, mlp=mlp, to_np=to_np)


# agent/actor.py
class TanhTransform(pyd.transforms.Transform):
    domain = pyd.constraints.real
    codomain = pyd.constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def __init__(self, cache_size=1):
        super().__init__(cache_size=cache_size)

    @staticmethod
    def atanh(x):
        return 0.5 * (x.log1p() - (-x).log1p())

    def __eq__(self, other):
        return isinstance(other, TanhTransform)

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        # We do not clamp to the boundary here as it may degrade the performance of certain algorithms.
        # one should use `cache_size=1` instead
        return self.atanh(y)

    def log_abs_det_jacobian(self, x, y):
        # We use a formula that is more numerically stable, see details in the following link
        # https://github.com/tensorflow/probability/commit/ef6bb176e0ebd1cf6e25c6b5cecdd2428c22963f#diff-e120f70e92e6741bca649f04fcd907b7
        return 2. * (math.log(2.) - x - F.softplus(-2. * x))


class SquashedNormal(pyd.transformed_distribution.TransformedDistribution):
    def __init__(self, loc, scale):
        self.loc = loc
        self.scale = scale

        self.base_dist = pyd.Normal(loc, scale)
        transforms = [TanhTransform()]
        super().__init__(self.base_dist, transforms)

    @property
    def mean(self):
        mu = self.loc
        for tr in self.transforms:
            mu = tr(mu)
        return mu


class DiagGaussianActor(nn.Module):
    \"\"\"torch.distributions implementation of an diagonal Gaussian policy.\"\"\"
    def __init__(self, obs_dim, action_dim, hidden_dim, hidden_depth,
                 log_std_bounds):
        super().__init__()

        self.log_std_bounds = log_std_bounds
        self.trunk = utils.mlp(obs_dim, hidden_dim, 2 * action_dim,
                               hidden_depth)

        self.outputs = dict()
        self.apply(utils.weight_init)

    def forward(self, obs):
        mu, log_std = self.trunk(obs).chunk(2, dim=-1)

        # constrain log_std inside [log_std_min, log_std_max]
        log_std = torch.tanh(log_std)
        log_std_min, log_std_max = self.log_std_bounds
        log_std = log_std_min + 0.5 * (log_std_max - log_std_min) * (log_std +
                                                                     1)

        std = log_std.exp()

        self.outputs['mu'] = mu
        self.outputs['std'] = std

        dist = SquashedNormal(mu, std)
        return dist

    def log(self, logger, step):
        for k, v in self.outputs.items():
            logger.log_histogram(f'train_actor/{k}_hist', v, step)

        for i, m in enumerate(self.trunk):
            if type(m) == nn.Linear:
                logger.log_param(f'train_actor/fc{i}', m, step)


# agent/critic.py
class DoubleQCritic(nn.Module):
    \"\"\"Critic network, employes double Q-learning.\"\"\"
    def __init__(self, obs_dim, action_dim, hidden_dim, hidden_depth):
        super().__init__()

        self.Q1 = utils.mlp(obs_dim + action_dim, hidden_dim, 1, hidden_depth)
        self.Q2 = utils.mlp(obs_dim + action_dim, hidden_dim, 1, hidden_depth)

        self.outputs = dict()
        self.apply(utils.weight_init)

    def forward(self, obs, action):
        assert obs.size(0) == action.size(0)

        obs_action = torch.cat([obs, action], dim=-1)
        q1 = self.Q1(obs_action)
        q2 = self.Q2(obs_action)

        self.outputs['q1'] = q1
        self.outputs['q2'] = q2

        return q1, q2

    def log(self, logger, step):
        for k, v in self.outputs.items():
            logger.log_histogram(f'train_critic/{k}_hist', v, step)

        assert len(self.Q1) == len(self.Q2)
        for i, (m1, m2) in enumerate(zip(self.Q1, self.Q2)):
            assert type(m1) == type(m2)
            if type(m1) is nn.Linear:
                logger.log_param(f'train_critic/q1_fc{i}', m1, step)
                logger.log_param(f'train_critic/q2_fc{i}', m2, step)


# agent/__init__.py
class Agent(object):
    def reset(self):
        \"\"\"For state-full agents this function performs reseting at the beginning of each episode.\"\"\"
        pass

    @abc.abstractmethod
    def train(self, training=True):
        \"\"\"Sets the agent in either training or evaluation mode.\"\"\"

    @abc.abstractmethod
    def update(self, replay_buffer, logger, step):
        \"\"\"Main function of the agent that performs learning.\"\"\"

    @abc.abstractmethod
    def act(self, obs, sample=False):
        \"\"\"Issues an action given an observation.\"\"\"


# agent/sac.py
class SACAgent(Agent):
    \"\"\"SAC algorithm.\"\"\"
    def __init__(self, obs_dim, action_dim, action_range, device,
                 critic_cfg, actor_cfg, discount, init_temperature, alpha_lr,
                 alpha_betas, actor_lr, actor_betas, actor_update_frequency,
                 critic_lr, critic_betas, critic_tau,
                 critic_target_update_frequency, batch_size):
        super().__init__()

        self.action_range = action_range
        self.device = torch.device(device)
        self.discount = discount
        self.critic_tau = critic_tau
        self.actor_update_frequency = actor_update_frequency
        self.critic_target_update_frequency = critic_target_update_frequency
        self.batch_size = batch_size

        self.critic = hydra.utils.instantiate(critic_cfg).to(self.device)
        self.critic_target = hydra.utils.instantiate(critic_cfg).to(
            self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())

        self.actor = hydra.utils.instantiate(actor_cfg).to(self.device)

        self.log_alpha = torch.tensor(np.log(init_temperature)).to(self.device)
        self.log_alpha.requires_grad = True
        # set target entropy to -|A|
        self.target_entropy = -action_dim

        # optimizers
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(),
                                                lr=actor_lr,
                                                betas=actor_betas)

        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(),
                                                 lr=critic_lr,
                                                 betas=critic_betas)

        self.log_alpha_optimizer = torch.optim.Adam([self.log_alpha],
                                                    lr=alpha_lr,
                                                    betas=alpha_betas)

        self.train()
        self.critic_target.train()

    def train(self, training=True):
        self.training = training
        self.actor.train(training)
        self.critic.train(training)

    @property
    def alpha(self):
        return self.log_alpha.exp()

    def act(self, obs, sample=False):
        obs = torch.FloatTensor(obs).to(self.device)
        obs = obs.unsqueeze(0)
        dist = self.actor(obs)
        action = dist.sample() if sample else dist.mean
        action = action.clamp(*self.action_range)
        assert action.ndim == 2 and action.shape[0] == 1
        return utils.to_np(action[0])

    def update_critic(self, obs, action, reward, next_obs, not_done, logger, step):
        dist = self.actor(next_obs)
        next_action = dist.rsample()
        log_prob = dist.log_prob(next_action).sum(-1, keepdim=True)
        target_Q1, target_Q2 = self.critic_target(next_obs, next_action)
        target_V = torch.min(target_Q1, target_Q2) - self.alpha.detach() * log_prob
        target_Q = reward + (not_done * self.discount * target_V)
        target_Q = target_Q.detach()

        # get current Q estimates
        current_Q1, current_Q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(
            current_Q2, target_Q)
        logger.log('train_critic/loss', critic_loss, step)

        # Optimize the critic
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        self.critic.log(logger, step)

    def update_actor_and_alpha(self, obs, logger, step):
        dist = self.actor(obs)
        action = dist.rsample()
        log_prob = dist.log_prob(action).sum(-1, keepdim=True)
        actor_Q1, actor_Q2 = self.critic(obs, action)

        actor_Q = torch.min(actor_Q1, actor_Q2)
        actor_loss = (self.alpha.detach() * log_prob - actor_Q).mean()

        logger.log('train_actor/loss', actor_loss, step)
        logger.log('train_actor/target_entropy', self.target_entropy, step)
        logger.log('train_actor/entropy', -log_prob.mean(), step)

        # optimize the actor
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        self.actor.log(logger, step)

        self.log_alpha_optimizer.zero_grad()
        alpha_loss = (self.alpha *
                      (-log_prob - self.target_entropy).detach()).mean()
        logger.log('train_alpha/loss', alpha_loss, step)
        logger.log('train_alpha/value', self.alpha, step)
        alpha_loss.backward()
        self.log_alpha_optimizer.step()

    def update(self, replay_buffer, logger, step):
        obs, action, reward, next_obs, not_done, not_done_no_max = replay_buffer.sample(
            self.batch_size)

        logger.log('train/batch_reward', reward.mean(), step)

        self.update_critic(obs, action, reward, next_obs, not_done_no_max,
                           logger, step)

        if step % self.actor_update_frequency == 0:
            self.update_actor_and_alpha(obs, logger, step)

        if step % self.critic_target_update_frequency == 0:
            utils.soft_update_params(self.critic, self.critic_target,
                                     self.critic_tau)


# replay_buffer.py
class ReplayBuffer(object):
    \"\"\"Buffer to store environment transitions.\"\"\"
    def __init__(self, obs_shape, action_shape, capacity, device):
        self.capacity = capacity
        self.device = device

        # the proprioceptive obs is stored as float32, pixels obs as uint8
        obs_dtype = np.float32 if len(obs_shape) == 1 else np.uint8

        self.obses = np.empty((capacity, *obs_shape), dtype=obs_dtype)
        self.next_obses = np.empty((capacity, *obs_shape), dtype=obs_dtype)
        self.actions = np.empty((capacity, *action_shape), dtype=np.float32)
        self.rewards = np.empty((capacity, 1), dtype=np.float32)
        self.not_dones = np.empty((capacity, 1), dtype=np.float32)
        self.not_dones_no_max = np.empty((capacity, 1), dtype=np.float32)

        self.idx = 0
        self.last_save = 0
        self.full = False

    def __len__(self):
        return self.capacity if self.full else self.idx

    def add(self, obs, action, reward, next_obs, done, done_no_max):
        np.copyto(self.obses[self.idx], obs)
        np.copyto(self.actions[self.idx], action)
        np.copyto(self.rewards[self.idx], reward)
        np.copyto(self.next_obses[self.idx], next_obs)
        np.copyto(self.not_dones[self.idx], not done)
        np.copyto(self.not_dones_no_max[self.idx], not done_no_max)

        self.idx = (self.idx + 1) % self.capacity
        self.full = self.full or self.idx == 0

    def sample(self, batch_size):
        idxs = np.random.randint(0,
                                 self.capacity if self.full else self.idx,
                                 size=batch_size)

        obses = torch.as_tensor(self.obses[idxs], device=self.device).float()
        actions = torch.as_tensor(self.actions[idxs], device=self.device)
        rewards = torch.as_tensor(self.rewards[idxs], device=self.device)
        next_obses = torch.as_tensor(self.next_obses[idxs],
                                     device=self.device).float()
        not_dones = torch.as_tensor(self.not_dones[idxs], device=self.device)
        not_dones_no_max = torch.as_tensor(self.not_dones_no_max[idxs],
                                           device=self.device)

        return obses, actions, rewards, next_obses, not_dones, not_dones_no_max


# train.py's Workspace, less its video recorder and the observation normalization of
# evaluate (the ReplayBuffer above has no mean_obs_np)
class Workspace(object):
    def __init__(self, cfg):
        self.work_dir = os.getcwd()
        print(f'workspace: {self.work_dir}')

        self.cfg = cfg

        self.logger = Logger(self.work_dir,
                             save_tb=cfg.log_save_tb,
                             log_frequency=cfg.log_frequency,
                             agent=cfg.agent.name)

        utils.set_seed_everywhere(cfg.seed)
        self.device = torch.device(cfg.device)
        self.env = utils.make_env(cfg)

        cfg.agent.params.obs_dim = self.env.observation_space.shape[0]
        cfg.agent.params.action_dim = self.env.action_space.shape[0]
        cfg.agent.params.action_range = [
            float(self.env.action_space.low.min()),
            float(self.env.action_space.high.max())
        ]
        self.agent = hydra.utils.instantiate(cfg.agent)

        self.replay_buffer = ReplayBuffer(self.env.observation_space.shape,
                                          self.env.action_space.shape,
                                          int(cfg.replay_buffer_capacity),
                                          self.device)
        self.step = 0

    def evaluate(self):
        for episode in range(self.cfg.num_eval_episodes):
            obs = self.env.reset()
            self.agent.reset()
            done = False
            episode_reward = 0
            while not done:
                with utils.eval_mode(self.agent):
                    action = self.agent.act(obs, sample=False)
                obs, reward, done, _ = self.env.step(action)
                episode_reward += reward

            self.logger.log('eval/episode_reward', episode_reward, self.step)
        self.logger.dump(self.step)

    def run(self):
        episode, episode_reward, done = 0, 0, True
        while self.step < self.cfg.num_train_steps:
            if done:
                if self.step > 0:
                    self.logger.dump(
                        self.step, save=(self.step > self.cfg.num_seed_steps))

                # evaluate agent periodically
                if self.step > 0 and self.step % self.cfg.eval_frequency == 0:
                    self.logger.log('eval/episode', episode, self.step)
                    self.evaluate()

                self.logger.log('train/episode_reward', episode_reward,
                                self.step)

                obs = self.env.reset()
                self.agent.reset()
                done = False
                episode_reward = 0
                episode_step = 0
                episode += 1

                self.logger.log('train/episode', episode, self.step)

            # sample action for data collection
            if self.step < self.cfg.num_seed_steps:
                action = self.env.action_space.sample()
            else:
                with utils.eval_mode(self.agent):
                    action = self.agent.act(obs, sample=True)

            # run training update
            if self.step >= self.cfg.num_seed_steps:
                self.agent.update(self.replay_buffer, self.logger, self.step)

            next_obs, reward, done, _ = self.env.step(action)

            # allow infinite bootstrap
            done = float(done)
            done_no_max = 0 if episode_step + 1 == self.env._max_episode_steps else done
            episode_reward += reward

            self.replay_buffer.add(obs, action, reward, next_obs, done,
                                   done_no_max)

            obs = next_obs
            episode_step += 1
            self.step += 1


workspace = Workspace(cfg)
workspace.run()
record.append(params_of(workspace.agent.actor, workspace.agent.critic, workspace.agent.critic_target))
record.append(workspace.agent.log_alpha.item())
"""

PYTORCH_SAC_STEPS = [
    ("import torch\nfrom torch import nn\nfrom torch import distributions as pyd\nimport torch.nn.functional as F\n",
     "import retrograd as torch\nfrom retrograd import nn\nfrom retrograd import distributions as pyd\nimport retrograd.nn.functional as F\n"),
    ("        critic_loss.backward()\n        self.critic_optimizer.step()",
     "        grads = critic_loss.backward()\n        self.critic_optimizer.step(grads)"),
    ("        actor_loss.backward()\n        self.actor_optimizer.step()",
     "        grads = actor_loss.backward()\n        self.actor_optimizer.step(grads)"),
    ("        alpha_loss.backward()\n        self.log_alpha_optimizer.step()",
     "        grads = alpha_loss.backward()\n        self.log_alpha_optimizer.step(grads)"),
]  # fmt: skip


def hydra_standin(run):
    """``hydra.utils.instantiate`` of an old-style config (``class`` and ``params``): the class
    is found by name among the calling program's globals; modules it makes go through
    ``initialize``."""

    def instantiate(config):
        program = sys._getframe(1).f_globals
        made = program[getattr(config, "class")](**vars(config.params))
        if hasattr(made, "state_dict"):
            run.initialize(made)
        return made

    return types.SimpleNamespace(utils=types.SimpleNamespace(instantiate=instantiate))


def logger_standin(run):
    """pytorch_sac's ``Logger``: each logged scalar (``.item()`` of a tensor) and histogram
    (a NumPy copy) goes into ``record``; ``log_param`` logs a layer's weight and bias."""

    class Logger:
        def __init__(self, log_dir, save_tb=False, log_frequency=10000, agent="sac"):
            pass

        def log(self, key, value, step, n=1):
            value = value.item() if hasattr(value, "item") else value
            run.record.append({key: np.asarray(value, np.float64)})

        def log_histogram(self, key, histogram, step):
            run.record.append({key: np.array(histogram.detach().numpy(), np.float64)})

        def log_param(self, key, param, step):
            self.log_histogram(key + "_w", param.weight.data, step)
            self.log_histogram(key + "_b", param.bias.data, step)

        def dump(self, step, save=True, ty=None):
            print(f"| step {step} | save {save}")

    return Logger


def config(run):
    def node(cls, **params):
        return types.SimpleNamespace(**{"class": cls, "params": types.SimpleNamespace(**params)})

    agent = node(
        "SACAgent", obs_dim=None, action_dim=None, action_range=None, device="cpu",
        critic_cfg=node("DoubleQCritic", obs_dim=3, action_dim=2, hidden_dim=16, hidden_depth=2),
        actor_cfg=node("DiagGaussianActor", obs_dim=3, action_dim=2, hidden_dim=16, hidden_depth=2, log_std_bounds=[-5, 2]),
        discount=0.99, init_temperature=0.1, alpha_lr=1e-2, alpha_betas=[0.9, 0.999],
        actor_lr=3e-3, actor_betas=[0.9, 0.999], actor_update_frequency=1,
        critic_lr=3e-3, critic_betas=[0.9, 0.999], critic_tau=0.05,
        critic_target_update_frequency=2, batch_size=4,
    )  # fmt: skip
    agent.name = "sac"
    return types.SimpleNamespace(
        agent=agent, seed=7, device="cpu", log_save_tb=False, log_frequency=1,
        num_train_steps=14, num_seed_steps=4, eval_frequency=10, num_eval_episodes=1,
        replay_buffer_capacity=100,
    )  # fmt: skip


def make_env(cfg):
    env = PointMassEnv(Box(-1.0, 1.0, (2,)), episode_length=5)
    env._max_episode_steps = 5
    return env


def test_pytorch_sac_with_a_tanh_transform_trains_as_torch(monkeypatch, capsys):
    theirs, ours = run_program(
        monkeypatch, PYTORCH_SAC, PYTORCH_SAC_STEPS, None, seed=383,
        cfg_of=config, make_env=make_env, hydra_of=hydra_standin, Logger_of=logger_standin,
    )  # fmt: skip
    torch_log, port_log = capsys.readouterr().out.split("workspace: ")[1:]
    assert torch_log == port_log
    assert torch_log.endswith(
        "| step 5 | save True\n| step 10 | save True\n| step 10 | save True\n"
    )
    # 10 updates (steps 4 to 13), each logging the actor's and the critic's layers
    assert sum(isinstance(r, dict) and list(r) == ["train_alpha/value"] for r in theirs) == 10
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
