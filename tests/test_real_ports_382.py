"""A program written here in the style of OpenAI Spinning Up's PyTorch soft actor-critic (a
``core`` of actor-critic modules and an ``sac`` function with a replay buffer, target networks
and an epoch logger), run under torch and, ported, under retrograd, small (the harness:
``tests/real_ports.py`` and ``tests/rl_standins.py``).

What it exercises: ``combined_shape``, an ``mlp`` of ``nn.Sequential`` layers ended by
``nn.Identity``, parameter counts by ``np.prod(p.shape)``; the squashed Gaussian actor
(``torch.clamp(log_std, LOW, HIGH)``, ``Normal(mu, std).rsample()``, ``log_prob(u).sum(axis=-1)``
and the tanh correction ``(2 * (np.log(2) - u - F.softplus(-2 * u))).sum(axis=1)`` of a NumPy
float minus a tensor, subtracted in place by ``-=``); twin Q functions over ``torch.cat([obs,
act], dim=-1)`` and ``torch.squeeze(q, -1)``; ``act`` under ``torch.no_grad()`` returning
``.numpy()``; a FIFO replay buffer whose batches become ``torch.as_tensor(v,
dtype=torch.float32)``; ``target = deepcopy(agent)`` frozen by ``p.requires_grad = False``; the
Q parameters as an ``itertools.chain`` that the Q optimizer consumes (so the later freezing
loops see nothing, in torch as in the port); the Bellman backup under ``torch.no_grad()`` with
``torch.min``; ``Adam`` from ``from torch.optim import Adam``; the polyak update
``t.data.mul_(rho); t.data.add_((1 - rho) * p.data)`` under ``torch.no_grad()``; uniform
exploration by ``env.action_space.sample()`` and a deterministic evaluation episode.

What stands in: ``gym`` (a deterministic point-mass environment with gym's old four-value
``step``) and Spinning Up's ``EpochLogger`` (its ``store``d values and ``log_tabular``
statistics are the records). The port changes the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``) and the import lines naming ``torch``. ``initialize(agent)`` gives
the port torch's initial weights; ``Normal.rsample`` draws its noise from one stream shared by
both runs.
"""

from __future__ import annotations

from real_ports import assert_records_agree
from rl_standins import Box, PointMassEnv, run_program

SAC_SOURCE = """
import itertools
from copy import deepcopy

import gym
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.distributions.normal import Normal  # reparameterized: rsample
from torch.optim import Adam

LOW, HIGH = -20, 2


def combined_shape(n, shape=None):
    if shape is None:
        return (n,)
    return (n, shape) if np.isscalar(shape) else (n, *shape)


def mlp(sizes, act, last=nn.Identity):
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(n_in, n_out), (act if i < len(sizes) - 2 else last)()]
    return nn.Sequential(*layers)


def n_params(module):
    return sum(np.prod(p.shape) for p in module.parameters())


class TanhGaussianPolicy(nn.Module):
    def __init__(self, n_obs, n_act, hidden, act, limit):
        super().__init__()
        self.trunk = mlp([n_obs, *hidden], act, act)
        self.mean = nn.Linear(hidden[-1], n_act)
        self.log_std = nn.Linear(hidden[-1], n_act)
        self.limit = limit

    def forward(self, obs, deterministic=False, with_logp=True):
        h = self.trunk(obs)
        mu = self.mean(h)
        std = torch.exp(torch.clamp(self.log_std(h), LOW, HIGH))
        dist = Normal(mu, std)
        u = mu if deterministic else dist.rsample()
        logp = None
        if with_logp:
            # density of tanh(u): subtract log(1 - tanh(u)^2), written stably
            logp = dist.log_prob(u).sum(axis=-1)
            logp -= (2 * (np.log(2) - u - F.softplus(-2 * u))).sum(axis=1)
        return self.limit * torch.tanh(u), logp


class QNet(nn.Module):
    def __init__(self, n_obs, n_act, hidden, act):
        super().__init__()
        self.body = mlp([n_obs + n_act, *hidden, 1], act)

    def forward(self, obs, action):
        return torch.squeeze(self.body(torch.cat([obs, action], dim=-1)), -1)


class ActorCritic(nn.Module):
    def __init__(self, obs_space, act_space, hidden=(64, 64), act=nn.ReLU):
        super().__init__()
        n_obs, n_act = obs_space.shape[0], act_space.shape[0]
        self.pi = TanhGaussianPolicy(n_obs, n_act, hidden, act, act_space.high[0])
        self.q1 = QNet(n_obs, n_act, hidden, act)
        self.q2 = QNet(n_obs, n_act, hidden, act)

    def act(self, obs, deterministic: bool = False):
        with torch.no_grad():
            return self.pi(obs, deterministic, False)[0].numpy()


class Replay:
    def __init__(self, n_obs, n_act, capacity):
        self.obs = np.zeros(combined_shape(capacity, n_obs), dtype=np.float32)
        self.next_obs = np.zeros(combined_shape(capacity, n_obs), dtype=np.float32)
        self.act = np.zeros(combined_shape(capacity, n_act), dtype=np.float32)
        self.rew = np.zeros(capacity, dtype=np.float32)
        self.done = np.zeros(capacity, dtype=np.float32)
        self.head, self.count, self.capacity = 0, 0, capacity

    def add(self, o, a, r, o2, d):
        i = self.head
        self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.done[i] = o, a, r, o2, d
        self.head = (i + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def sample(self, n):
        idx = np.random.randint(0, self.count, size=n)
        parts = dict(o=self.obs[idx], a=self.act[idx], r=self.rew[idx])
        parts.update(o2=self.next_obs[idx], d=self.done[idx])
        return {k: torch.as_tensor(v, dtype=torch.float32) for k, v in parts.items()}


def soft_actor_critic(make_env, hidden=(64, 64), seed=0, epochs=10, epoch_steps=1000,
                      capacity=10000, gamma=0.99, rho=0.995, lr=1e-3, alpha=0.2, batch=64,
                      explore_steps=500, learn_after=200, learn_every=20, horizon=200):
    logger = EpochLogger()
    torch.manual_seed(seed)
    np.random.seed(seed)
    env, eval_env = make_env(), make_env()
    n_act = env.action_space.shape[0]

    agent = ActorCritic(env.observation_space, env.action_space, hidden)
    initialize(agent)
    target = deepcopy(agent)
    for p in target.parameters():
        p.requires_grad = False
    critic_params = itertools.chain(agent.q1.parameters(), agent.q2.parameters())
    replay = Replay(env.observation_space.shape, n_act, capacity)
    sizes = tuple(n_params(m) for m in (agent.pi, agent.q1, agent.q2))
    logger.log("parameters: pi %d, q1 %d, q2 %d" % sizes)

    pi_opt = Adam(agent.pi.parameters(), lr=lr)
    q_opt = Adam(critic_params, lr=lr)

    def critic_loss(b):
        q1, q2 = agent.q1(b["o"], b["a"]), agent.q2(b["o"], b["a"])
        with torch.no_grad():
            a2, logp2 = agent.pi(b["o2"])
            q_next = torch.min(target.q1(b["o2"], a2), target.q2(b["o2"], a2))
            y = b["r"] + gamma * (1 - b["d"]) * (q_next - alpha * logp2)
        loss = ((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean()
        return loss, dict(Q1=q1.detach().numpy(), Q2=q2.detach().numpy())

    def actor_loss(b):
        a, logp = agent.pi(b["o"])
        q = torch.min(agent.q1(b["o"], a), agent.q2(b["o"], a))
        return (alpha * logp - q).mean(), dict(LogPi=logp.detach().numpy())

    def learn(b):
        q_opt.zero_grad()
        loss_q, info = critic_loss(b)
        loss_q.backward()
        q_opt.step()
        logger.store(LossQ=loss_q.item(), **info)
        for p in critic_params:  # (the chain is spent: nothing to freeze)
            p.requires_grad = False
        pi_opt.zero_grad()
        loss_pi, info = actor_loss(b)
        loss_pi.backward()
        pi_opt.step()
        for p in critic_params:
            p.requires_grad = True
        logger.store(LossPi=loss_pi.item(), **info)
        with torch.no_grad():
            for p, t in zip(agent.parameters(), target.parameters()):
                t.data.mul_(rho)
                t.data.add_((1 - rho) * p.data)

    def evaluate():
        o, done, ret, length = eval_env.reset(), False, 0, 0
        while not done and length < horizon:
            a = agent.act(torch.as_tensor(o, dtype=torch.float32), deterministic=True)
            o, r, done, _ = eval_env.step(a)
            ret, length = ret + r, length + 1
        logger.store(EvalRet=ret, EvalLen=length)

    o, ret, length = env.reset(), 0, 0
    for t in range(epochs * epoch_steps):
        if t < explore_steps:
            a = env.action_space.sample()
        else:
            a = agent.act(torch.as_tensor(o, dtype=torch.float32))
        o2, r, d, _ = env.step(a)
        ret, length = ret + r, length + 1
        d = d and length < horizon  # running out of time is not a terminal state
        replay.add(o, a, r, o2, d)
        o = o2
        if d or length == horizon:
            logger.store(Ret=ret, Len=length)
            o, ret, length = env.reset(), 0, 0
        if t >= learn_after and t % learn_every == 0:
            for _ in range(learn_every):
                learn(replay.sample(batch))
        if (t + 1) % epoch_steps == 0:
            evaluate()
            logger.log_tabular("Epoch", (t + 1) // epoch_steps)
            for key in ("Ret", "EvalRet", "Q1", "Q2", "LogPi"):
                logger.log_tabular(key, with_min_and_max=True)
            for key in ("Len", "EvalLen", "LossPi", "LossQ"):
                logger.log_tabular(key, average_only=True)
            logger.dump_tabular()
    record.append(params_of(agent, target))


soft_actor_critic(lambda: gym.make("PointMass-v0"), hidden=[12, 12], seed=3, epochs=2,
                  epoch_steps=8, capacity=40, batch=4, explore_steps=5, learn_after=4,
                  learn_every=2, horizon=6, lr=3e-3, rho=0.9)
"""

SAC_STEPS = [
    ("import torch\nimport torch.nn as nn\n",
     "import retrograd as torch\nimport retrograd.nn as nn\n"),
    ("        loss_q.backward()\n        q_opt.step()",
     "        grads = loss_q.backward()\n        q_opt.step(grads)"),
    ("        loss_pi.backward()\n        pi_opt.step()",
     "        grads = loss_pi.backward()\n        pi_opt.step(grads)"),
]  # fmt: skip


def test_sac_in_the_style_of_spinning_up_trains_as_torch(monkeypatch, capsys):
    theirs, ours = run_program(
        monkeypatch,
        SAC_SOURCE,
        SAC_STEPS,
        lambda name, run: PointMassEnv(Box(-1.0, 1.0, (2,))),
        seed=382,
    )
    out = capsys.readouterr().out
    header = "parameters: pi 256, q1 241, q2 241\n"
    assert out == 2 * (header + "----------\n" * 2)  # the same lines in both runs
    # 2 epochs of 8 steps, updates (2 each) at t = 4, 6, ..., 14: 12 updates of 2 stores
    assert sum(list(r) == ["LossQ", "Q1", "Q2"] for r in theirs) == 12
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
