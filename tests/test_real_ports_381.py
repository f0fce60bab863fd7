"""A program written here in the style of OpenAI Spinning Up's PyTorch proximal policy
optimization (a ``core`` of actor-critic modules and a ``ppo`` function with a GAE buffer and an
epoch logger), run under torch and, ported, under retrograd, small, with a discrete and a
continuous action space (the harness: ``tests/real_ports.py`` and ``tests/rl_standins.py``).

What it exercises: ``combined_shape`` (``np.isscalar`` of an empty shape), an ``mlp`` of
``nn.Sequential`` layers ended by ``nn.Identity``, parameter counts, a discounted cumulative sum
by ``scipy.signal.lfilter`` of the reversed sequence; actors whose ``forward`` returns the
distribution and the log-probability of given actions: categorical (``Categorical(logits=...)``
whose ``log_prob`` takes the buffer's float32 actions) and Gaussian (a state-independent
``torch.nn.Parameter(torch.as_tensor(log_std))`` of a NumPy array, ``Normal(mu,
torch.exp(self.log_std))``, ``log_prob(act).sum(axis=-1)``), chosen by ``isinstance`` of gym's
``Box``/``Discrete``; a critic with ``torch.squeeze(..., -1)``; ``step`` under
``torch.no_grad()`` returning ``.numpy()`` arrays; the buffer (GAE-lambda advantages,
rewards-to-go, normalized advantages handed out as ``torch.as_tensor(v, dtype=torch.float32)``);
the clipped surrogate (``torch.exp(logp - logp_old)``, ``torch.clamp``, ``torch.min``), the
approximate KL, ``dist.entropy().mean().item()``, the clip fraction by ``torch.as_tensor(ratio.gt(
...) | ratio.lt(...), dtype=torch.float32)``, early stopping on the KL, the value loss, two
``Adam`` optimizers from ``from torch.optim import Adam``, and trajectories cut off by the epoch
bootstrapped by ``ac.step`` (with a ``print(..., flush=True)`` warning).

What stands in: ``gym`` (a deterministic point-mass environment with gym's old four-value
``step``) and Spinning Up's ``EpochLogger`` (its ``store``d values and ``log_tabular``
statistics are the records). The port changes the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``) and the import lines naming ``torch``. ``initialize(ac)`` gives the
port torch's initial weights; ``Normal.sample`` and ``Categorical.sample`` draw from one stream
shared by both runs.
"""

from __future__ import annotations

import pytest

from real_ports import assert_records_agree
from rl_standins import Box, Discrete, PointMassEnv, run_program

PPO_SOURCE = """
import gym
import numpy as np
import scipy.signal
import torch
import torch.nn as nn
from gym import spaces
from torch.distributions import Categorical, Normal
from torch.optim import Adam


def combined_shape(n, shape=None):
    if shape is None:
        return (n,)
    return (n, shape) if np.isscalar(shape) else (n, *shape)


def mlp(sizes, act, last=nn.Identity):
    layers = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), (act if i + 2 < len(sizes) else last)()]
    return nn.Sequential(*layers)


def n_params(module):
    return sum(np.prod(p.shape) for p in module.parameters())


def discounted(x, rate):
    # y[t] = x[t] + rate * y[t + 1], as a linear filter run backwards
    return scipy.signal.lfilter([1], [1, float(-rate)], x[::-1], axis=0)[::-1]


class Policy(nn.Module):
    def forward(self, obs, actions=None):
        dist = self.distribution(obs)
        return dist, (None if actions is None else self.log_prob(dist, actions))


class SoftmaxPolicy(Policy):
    def __init__(self, n_obs, n_act, hidden, act):
        super().__init__()
        self.logits = mlp([n_obs, *hidden, n_act], act)

    def distribution(self, obs):
        return Categorical(logits=self.logits(obs))

    def log_prob(self, dist, act):
        return dist.log_prob(act)


class DiagGaussianPolicy(Policy):
    def __init__(self, n_obs, n_act, hidden, act):
        super().__init__()
        start = np.full(n_act, -0.5, dtype=np.float32)
        self.log_std = torch.nn.Parameter(torch.as_tensor(start))
        self.mu = mlp([n_obs, *hidden, n_act], act)

    def distribution(self, obs):
        return Normal(self.mu(obs), torch.exp(self.log_std))

    def log_prob(self, dist, act):
        return dist.log_prob(act).sum(axis=-1)


class Critic(nn.Module):
    def __init__(self, n_obs, hidden, act):
        super().__init__()
        self.body = mlp([n_obs, *hidden, 1], act)

    def forward(self, obs):
        return torch.squeeze(self.body(obs), -1)


class ActorCritic(nn.Module):
    def __init__(self, obs_space, act_space, hidden=(32, 32), act=nn.Tanh):
        super().__init__()
        n_obs = obs_space.shape[0]
        if isinstance(act_space, spaces.Box):
            self.pi = DiagGaussianPolicy(n_obs, act_space.shape[0], hidden, act)
        elif isinstance(act_space, spaces.Discrete):
            self.pi = SoftmaxPolicy(n_obs, act_space.n, hidden, act)
        self.v = Critic(n_obs, hidden, act)

    def step(self, obs):
        with torch.no_grad():
            dist = self.pi.distribution(obs)
            a = dist.sample()
            return a.numpy(), self.v(obs).numpy(), self.pi.log_prob(dist, a).numpy()


class Rollouts:
    def __init__(self, obs_shape, act_shape, size, gamma, lam):
        self.obs = np.zeros(combined_shape(size, obs_shape), dtype=np.float32)
        self.act = np.zeros(combined_shape(size, act_shape), dtype=np.float32)
        columns = (np.zeros(size, dtype=np.float32) for _ in range(5))
        self.rew, self.val, self.logp, self.adv, self.ret = columns
        self.gamma = gamma
        self.lam = lam
        self.i, self.start = 0, 0

    def add(self, o, a, r, v, logp):
        self.obs[self.i], self.act[self.i], self.rew[self.i] = o, a, r
        self.val[self.i], self.logp[self.i] = v, logp
        self.i += 1

    def end_path(self, bootstrap=0):
        span = slice(self.start, self.i)
        rews = np.append(self.rew[span], bootstrap)
        vals = np.append(self.val[span], bootstrap)
        td = rews[:-1] + self.gamma * vals[1:] - vals[:-1]
        self.adv[span] = discounted(td, self.gamma * self.lam)
        self.ret[span] = discounted(rews, self.gamma)[:-1]
        self.start = self.i

    def drain(self):
        self.i, self.start = 0, 0
        adv = (self.adv - self.adv.mean()) / self.adv.std()
        data = dict(obs=self.obs, act=self.act, ret=self.ret, adv=adv, logp=self.logp)
        return {k: torch.as_tensor(v, dtype=torch.float32) for k, v in data.items()}


def ppo(make_env, hidden=(32, 32), seed=0, epoch_steps=1000, epochs=10, gamma=0.99,
        clip=0.2, pi_lr=3e-4, v_lr=1e-3, pi_iters=40, v_iters=40, lam=0.95, horizon=500,
        target_kl=0.015):
    logger = EpochLogger()
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = make_env()
    ac = ActorCritic(env.observation_space, env.action_space, hidden)
    initialize(ac)
    logger.log("params: pi %d, v %d" % (n_params(ac.pi), n_params(ac.v)))
    shapes = env.observation_space.shape, env.action_space.shape
    rollouts = Rollouts(*shapes, epoch_steps, gamma, lam)
    pi_opt = Adam(ac.pi.parameters(), lr=pi_lr)
    v_opt = Adam(ac.v.parameters(), lr=v_lr)

    def surrogate(data):
        dist, logp = ac.pi(data["obs"], data["act"])
        ratio = torch.exp(logp - data["logp"])
        clipped_adv = torch.clamp(ratio, 1 - clip, 1 + clip) * data["adv"]
        loss = -torch.min(ratio * data["adv"], clipped_adv).mean()
        outside = ratio.gt(1 + clip) | ratio.lt(1 - clip)
        info = dict(kl=(data["logp"] - logp).mean().item(), ent=dist.entropy().mean().item(),
                    cf=torch.as_tensor(outside, dtype=torch.float32).mean().item())
        return loss, info

    def value_loss(data):
        return ((ac.v(data["obs"]) - data["ret"]) ** 2).mean()

    def update():
        data = rollouts.drain()
        pi_before, info_before = surrogate(data)
        v_before = value_loss(data).item()
        for k in range(pi_iters):
            pi_opt.zero_grad()
            loss_pi, info = surrogate(data)
            if info["kl"] > 1.5 * target_kl:
                logger.log("early stop of the policy at iteration %d (kl)" % k)
                break
            loss_pi.backward()
            pi_opt.step()
        logger.store(StopIter=k)
        for _ in range(v_iters):
            v_opt.zero_grad()
            loss_v = value_loss(data)
            loss_v.backward()
            v_opt.step()
        logger.store(LossPi=pi_before.item(), LossV=v_before, KL=info["kl"],
                     Entropy=info_before["ent"], ClipFrac=info["cf"],
                     DeltaLossPi=loss_pi.item() - pi_before.item(),
                     DeltaLossV=loss_v.item() - v_before)

    o, ep_len, ep_ret = env.reset(), 0, 0
    for epoch in range(epochs):
        for t in range(epoch_steps):
            obs_t = torch.as_tensor(o, dtype=torch.float32)
            a, v, logp = ac.step(obs_t)
            next_o, r, d, _ = env.step(a)
            ep_ret, ep_len = ep_ret + r, ep_len + 1
            rollouts.add(o, a, r, v, logp)
            logger.store(VVals=v)
            o = next_o
            timed_out = ep_len == horizon
            last = t == epoch_steps - 1
            if d or timed_out or last:
                if last and not (d or timed_out):
                    print("cut off by the epoch after %d steps" % ep_len, flush=True)
                bootstrap = 0
                if timed_out or last:  # not a true end: estimate what would follow
                    _, bootstrap, _ = ac.step(torch.as_tensor(o, dtype=torch.float32))
                rollouts.end_path(bootstrap)
                if d or timed_out:
                    logger.store(EpLen=ep_len, EpRet=ep_ret)
                o, ep_len, ep_ret = env.reset(), 0, 0
        update()
        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("VVals", with_min_and_max=True)
        for key in ("EpLen", "LossPi", "LossV", "DeltaLossPi", "DeltaLossV", "Entropy", "KL",
                    "ClipFrac", "StopIter"):
            logger.log_tabular(key, average_only=True)
        logger.dump_tabular()
        record.append(params_of(ac))


ppo(lambda: gym.make("PointMass-v0"), hidden=[8, 8], seed=5, epoch_steps=10, epochs=3,
    pi_lr=1e-2, v_lr=1e-2, pi_iters=8, v_iters=4, target_kl=0.02)
"""

PPO_STEPS = [
    ("import torch\nimport torch.nn as nn\n",
     "import retrograd as torch\nimport retrograd.nn as nn\n"),
    ("            loss_pi.backward()\n            pi_opt.step()",
     "            grads = loss_pi.backward()\n            pi_opt.step(grads)"),
    ("            loss_v.backward()\n            v_opt.step()",
     "            grads = loss_v.backward()\n            v_opt.step(grads)"),
]  # fmt: skip


@pytest.mark.parametrize("space", ["discrete", "continuous"])
def test_ppo_in_the_style_of_spinning_up_trains_as_torch(monkeypatch, capsys, space):
    action_space = Discrete(3) if space == "discrete" else Box(-1.0, 1.0, (2,))
    theirs, ours = run_program(
        monkeypatch,
        PPO_SOURCE,
        PPO_STEPS,
        lambda name, run: PointMassEnv(action_space),
        seed=381,
    )
    torch_log, port_log = capsys.readouterr().out.split("params: ")[1:]
    assert torch_log == port_log
    assert torch_log.count("cut off by the epoch after 2 steps") == 3
    assert "early stop of the policy" in torch_log  # the early stop is taken
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
