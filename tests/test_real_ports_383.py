"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a soft actor-critic written here in the style of denisyarats/pytorch_sac (its utilities, actor,
critic, agent, replay buffer and training workspace), small:

- the squashed Gaussian as a distribution: a ``pyd.transforms.Transform`` subclass with class
  attributes ``domain = pyd.constraints.real``, ``codomain = pyd.constraints.interval(-1.0,
  1.0)``, ``bijective``, ``sign``, ``super().__init__(cache_size=cache_size)``, its own
  ``atanh`` by ``log1p``, ``__eq__``, ``_call``, ``_inverse`` and the stable
  ``log_abs_det_jacobian`` ``2. * (math.log(2.) - x - F.softplus(-2. * x))``; a
  ``pyd.transformed_distribution.TransformedDistribution`` subclass that sets
  ``self.loc``/``self.scale``/``self.base_dist`` before ``super().__init__`` and overrides
  ``mean`` by running ``self.transforms``; ``rsample`` then ``log_prob`` of the sample (the
  inverse taken from the transform's cache), ``sample`` under an eval-mode context manager;
- the actor (``self.trunk(obs).chunk(2, dim=-1)``, ``tanh``-rescaled ``log_std`` bounds,
  ``self.apply(init)`` with ``nn.init.orthogonal_(m.weight.data)`` and
  ``m.bias.data.fill_(0.0)``, ``nn.ReLU(inplace=True)``, ``type(m) == nn.Linear``), the twin
  critic (``obs.size(0)``, ``torch.cat``);
- the agent: the temperature as a plain tensor, ``torch.tensor(np.log(t0)).to(device)``
  (float64) with ``requires_grad = True``, stepped by its own ``Adam([log_alpha],
  betas=...)``, ``self.alpha.detach() * log_prob`` (a float64 0-d tensor times float32),
  ``F.mse_loss`` of the twin Qs, ``torch.FloatTensor(obs).to(device)``,
  ``action.clamp(*self.action_range)``, delayed target updates through
  ``target.data.copy_(tau * p.data + (1 - tau) * target.data)``;
- the replay buffer (``np.copyto`` into rows, ``torch.as_tensor(..., device=).float()``) and
  the workspace's loop with its seed steps, evaluation and ``done_no_max``.

What stands in: the environment (a deterministic point mass with gym's old API),
``hydra.utils.instantiate`` (the ``class`` of a config looked up among the program's names;
each module it makes passes through ``initialize``, so the port starts from torch's weights),
the ``Logger`` (its logged scalars and histograms are the records), and the configuration (a
namespace). The port changes the gradient lines and the import lines naming ``torch``;
``Normal.rsample``/``sample`` draw from one stream shared by both runs.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from real_ports import assert_records_agree
from rl_standins import Box, PointMassEnv, run_program

PYTORCH_SAC = """
import abc
import math
import os
import random

import numpy as np
import torch
import torch.distributions as pyd
from torch import nn
from torch.nn import functional as F


class evaluation:
    def __init__(self, *modules):
        self.modules = modules

    def __enter__(self):
        self.was_training = [m.training for m in self.modules]
        for m in self.modules:
            m.train(False)

    def __exit__(self, *exc):
        for m, flag in zip(self.modules, self.was_training):
            m.train(flag)
        return False


def polyak(source, target, tau):
    for p, tp in zip(source.parameters(), target.parameters()):
        tp.data.copy_(tau * p.data + (1 - tau) * tp.data)


def seed_all(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)  # every GPU too
    np.random.seed(seed)
    random.seed(seed)


def orthogonal_init(module):
    if isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight.data)
        if hasattr(module.bias, "data"):
            module.bias.data.fill_(0.0)


def build_mlp(n_in, width, n_out, depth):
    layers, d = [], n_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU(inplace=True)]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, n_out))


def numpy_of(tensor):
    if tensor is None:
        return None
    if tensor.nelement() == 0:
        return np.array([])
    return tensor.cpu().detach().numpy()


class TanhBijector(pyd.transforms.Transform):
    domain = pyd.constraints.real
    codomain = pyd.constraints.interval(-1.0, 1.0)  # the range of tanh
    bijective = True
    sign = +1

    def __init__(self, cache_size: int = 1):
        super().__init__(cache_size=cache_size)  # log_prob of a sample finds it cached

    @staticmethod
    def atanh(y):
        return 0.5 * (y.log1p() - (-y).log1p())

    def __eq__(self, other):
        return isinstance(other, TanhBijector)

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return self.atanh(y)  # unclamped: the cache hands samples back without coming here

    def log_abs_det_jacobian(self, x, _y):
        # log(1 - tanh(x)**2) without the cancellation for large |x|
        return 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))


class TanhNormal(pyd.transformed_distribution.TransformedDistribution):
    def __init__(self, mean, std):
        self.loc, self.scale = mean, std
        self.base_dist = pyd.Normal(mean, std)
        super().__init__(self.base_dist, [TanhBijector()])

    @property
    def mean(self):
        m = self.loc
        for t in self.transforms:
            m = t(m)
        return m


class TanhGaussianPolicy(nn.Module):
    def __init__(self, obs_dim, action_dim, hidden_dim, hidden_depth, log_std_bounds):
        super().__init__()
        self.low, self.high = log_std_bounds
        self.trunk = build_mlp(obs_dim, hidden_dim, 2 * action_dim, hidden_depth)
        self.outputs = {}
        self.apply(orthogonal_init)

    def forward(self, obs):
        mu, raw = self.trunk(obs).chunk(2, dim=-1)
        log_std = self.low + 0.5 * (self.high - self.low) * (torch.tanh(raw) + 1)
        std = log_std.exp()
        self.outputs.update(mu=mu, std=std)
        return TanhNormal(mu, std)

    def log(self, logger, step):
        for name, value in self.outputs.items():
            logger.log_histogram(f"train_actor/{name}_hist", value, step)
        for i, layer in enumerate(self.trunk):
            if type(layer) == nn.Linear:
                logger.log_param(f"train_actor/fc{i}", layer, step)


class TwinQ(nn.Module):
    def __init__(self, obs_dim, action_dim, hidden_depth, hidden_dim):
        super().__init__()
        self.q1 = build_mlp(obs_dim + action_dim, hidden_dim, 1, hidden_depth)
        self.q2 = build_mlp(obs_dim + action_dim, hidden_dim, 1, hidden_depth)
        self.outputs = {}
        self.apply(orthogonal_init)

    def forward(self, state, action):
        assert state.size(0) == action.size(0)
        pair = torch.cat([state, action], dim=-1)
        q1, q2 = self.q1(pair), self.q2(pair)
        self.outputs.update(q1=q1, q2=q2)
        return q1, q2

    def log(self, logger, step):
        for name, value in self.outputs.items():
            logger.log_histogram(f"train_critic/{name}_hist", value, step)
        for i, (a, b) in enumerate(zip(self.q1, self.q2)):
            if type(a) is nn.Linear:
                logger.log_param(f"train_critic/q1_fc{i}", a, step)
                logger.log_param(f"train_critic/q2_fc{i}", b, step)


class BaseAgent:
    def reset(self):
        pass

    @abc.abstractmethod
    def act(self, state, sample=False):
        # the action for a state: drawn from the policy, or its mean
        ...


class SoftActorCritic(BaseAgent):
    def __init__(self, obs_dim, action_dim, action_range, device, critic_cfg, actor_cfg,
                 discount, init_temperature, alpha_lr, alpha_betas, actor_lr, actor_betas,
                 critic_lr, critic_betas, critic_tau, batch_size, actor_update_frequency,
                 critic_target_update_frequency):
        self.action_range, self.device = action_range, torch.device(device)
        self.discount, self.tau, self.batch_size = discount, critic_tau, batch_size
        self.actor_every = actor_update_frequency
        self.target_every = critic_target_update_frequency
        make = hydra.utils.instantiate
        self.critic = make(critic_cfg).to(self.device)
        self.critic_target = make(critic_cfg).to(self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())  # both start equal
        self.actor = make(actor_cfg).to(self.device)
        # the entropy temperature, learnt in log space as a bare (float64) tensor
        self.log_alpha = torch.tensor(np.log(init_temperature)).to(self.device)  # float64
        self.log_alpha.requires_grad = True  # a leaf of its own optimizer
        self.target_entropy = -float(action_dim)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=actor_lr,
                                          betas=actor_betas)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=critic_lr,
                                           betas=critic_betas)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=alpha_lr, betas=alpha_betas)
        self.train()
        self.critic_target.train()

    def train(self, mode=True):
        self.training = mode
        self.actor.train(mode)
        self.critic.train(mode)

    @property
    def alpha(self):
        return self.log_alpha.exp()

    def act(self, state, sample=False):
        state = torch.FloatTensor(state).to(self.device).unsqueeze(0)
        policy = self.actor(state)
        action = (policy.sample() if sample else policy.mean).clamp(*self.action_range)
        assert action.ndim == 2 and action.shape[0] == 1, action.shape
        return numpy_of(action[0])

    def critic_step(self, obs, action, reward, next_obs, not_done, logger, step):
        policy = self.actor(next_obs)
        next_action = policy.rsample()
        log_prob = policy.log_prob(next_action).sum(-1, keepdim=True)
        tq1, tq2 = self.critic_target(next_obs, next_action)
        soft_value = torch.min(tq1, tq2) - self.alpha.detach() * log_prob
        target = (reward + not_done * self.discount * soft_value).detach()
        q1, q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        logger.log("train_critic/loss", critic_loss, step)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()
        self.critic.log(logger, step)

    def actor_step(self, obs, logger, step):
        policy = self.actor(obs)
        action = policy.rsample()
        log_prob = policy.log_prob(action).sum(-1, keepdim=True)
        q = torch.min(*self.critic(obs, action))
        actor_loss = (self.alpha.detach() * log_prob - q).mean()
        logger.log("train_actor/loss", actor_loss, step)
        logger.log("train_actor/target_entropy", self.target_entropy, step)
        logger.log("train_actor/entropy", -log_prob.mean(), step)
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        self.actor.log(logger, step)
        # raise the temperature while the entropy is under its target, lower it above
        self.alpha_opt.zero_grad()
        alpha_loss = (self.alpha * (-log_prob - self.target_entropy).detach()).mean()
        logger.log("train_alpha/loss", alpha_loss, step)
        logger.log("train_alpha/value", self.alpha, step)
        alpha_loss.backward()
        self.alpha_opt.step()

    def update(self, memory, logger, step):
        obs, action, reward, next_obs, _, not_done_no_max = memory.sample(self.batch_size)
        logger.log("train/batch_reward", reward.mean(), step)
        self.critic_step(obs, action, reward, next_obs, not_done_no_max, logger, step)
        if step % self.actor_every == 0:
            self.actor_step(obs, logger, step)
        if step % self.target_every == 0:
            polyak(self.critic, self.critic_target, self.tau)


class Memory:
    FIELDS = ("obs", "action", "reward", "next_obs", "not_done", "not_done_no_max")

    def __init__(self, state_shape, action_shape, capacity, device):
        self.capacity, self.device, self.size, self.cursor = capacity, device, 0, 0
        shapes = dict(obs=state_shape, action=action_shape, reward=(1,), next_obs=state_shape,
                      not_done=(1,), not_done_no_max=(1,))
        self.rows = {f: np.empty((capacity, *shapes[f]), dtype=np.float32) for f in self.FIELDS}

    def __len__(self):
        return self.size

    def add(self, state, action, reward, next_state, done, done_no_max):
        values = (state, action, reward, next_state, not done, not done_no_max)
        for field, value in zip(self.FIELDS, values):
            np.copyto(self.rows[field][self.cursor], value)
        self.cursor = (self.cursor + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, n):
        picked = np.random.randint(0, self.size, size=n)
        return tuple(torch.as_tensor(self.rows[f][picked], device=self.device).float()
                     for f in self.FIELDS)


class Workspace:
    def __init__(self, cfg):
        print(f"workspace: {os.getcwd()}")
        self.cfg = cfg
        self.logger = Logger(os.getcwd(), save_tb=cfg.log_save_tb,
                             log_frequency=cfg.log_frequency, agent=cfg.agent.name)
        seed_all(cfg.seed)
        self.device = torch.device(self.cfg.device)
        self.env = make_env(cfg)
        space = self.env.action_space
        params = cfg.agent.params
        params.obs_dim = self.env.observation_space.shape[0]
        params.action_dim = space.shape[0]
        params.action_range = [float(space.low.min()), float(space.high.max())]
        self.agent = hydra.utils.instantiate(self.cfg.agent)
        self.memory = Memory(self.env.observation_space.shape, space.shape,
                             int(cfg.replay_buffer_capacity), self.device)
        self.step = 0

    def evaluate(self):
        for _ in range(self.cfg.num_eval_episodes):
            state, done, total = self.env.reset(), False, 0
            self.agent.reset()
            while not done:
                with evaluation(self.agent):
                    move = self.agent.act(state, sample=False)
                state, reward, done, _ = self.env.step(move)
                total += reward
            self.logger.log("eval/episode_reward", total, self.step)
        self.logger.dump(self.step)

    def run(self):
        cfg, episode, total, done = self.cfg, 0, 0, True
        while self.step < cfg.num_train_steps:
            if done:
                if self.step > 0:
                    self.logger.dump(self.step, save=self.step > cfg.num_seed_steps)
                    if self.step % cfg.eval_frequency == 0:
                        self.logger.log("eval/episode", episode, self.step)
                        self.evaluate()
                self.logger.log("train/episode_reward", total, self.step)
                state, done, total, t_in_episode = self.env.reset(), False, 0, 0
                self.agent.reset()
                episode += 1
                self.logger.log("train/episode", episode, self.step)
            warming_up = self.step < cfg.num_seed_steps
            if warming_up:
                move = self.env.action_space.sample()
            else:
                with evaluation(self.agent):
                    move = self.agent.act(state, sample=True)
                self.agent.update(self.memory, self.logger, self.step)
            next_state, reward, done, _ = self.env.step(move)
            done = float(done)
            # a time limit is not a terminal state: keep bootstrapping through it
            time_up = t_in_episode + 1 == self.env._max_episode_steps
            done_no_max = 0 if time_up else done
            total += reward
            self.memory.add(state, move, reward, next_state, done, done_no_max)
            state = next_state
            t_in_episode += 1
            self.step += 1


workspace = Workspace(cfg)
workspace.run()
agent = workspace.agent
record.append(params_of(agent.actor, agent.critic, agent.critic_target))
record.append(agent.log_alpha.item())
"""

PYTORCH_SAC_STEPS = [
    (
        "import torch\nimport torch.distributions as pyd\nfrom torch import nn\n",
        "import retrograd as torch\nimport retrograd.distributions as pyd\n"
        "from retrograd import nn\n",
    ),
    (
        "        critic_loss.backward()\n        self.critic_opt.step()",
        "        grads = critic_loss.backward()\n        self.critic_opt.step(grads)",
    ),
    (
        "        actor_loss.backward()\n        self.actor_opt.step()",
        "        grads = actor_loss.backward()\n        self.actor_opt.step(grads)",
    ),
    (
        "        alpha_loss.backward()\n        self.alpha_opt.step()",
        "        grads = alpha_loss.backward()\n        self.alpha_opt.step(grads)",
    ),
]


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
        "SoftActorCritic", obs_dim=None, action_dim=None, action_range=None, device="cpu",
        critic_cfg=node("TwinQ", obs_dim=3, action_dim=2, hidden_dim=16, hidden_depth=2),
        actor_cfg=node("TanhGaussianPolicy", obs_dim=3, action_dim=2, hidden_dim=16,
                       hidden_depth=2, log_std_bounds=[-5, 2]),
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


def test_soft_actor_critic_with_a_tanh_transform_trains_as_torch(monkeypatch, capsys):
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
