"""Real ports, continued (the harness: ``tests/real_ports.py``): four small single-file
agents written here in the style of seungeunrho/minimalRL, each run on torch and, ported, on
retrograd from the same initial weights and draws:

- a recurrent PPO agent: an ``nn.LSTM`` stepped one observation at a time (``.view(-1, 1, H)``
  of a 1-D input) from ``torch.zeros([1, 1, H], dtype=torch.float)`` states kept in the
  rollout, ``Categorical`` of a ``view(-1)``, ``probs[a].item()``, the optimizer made in the
  module's ``__init__``, ``torch.tensor`` of lists of NumPy rows and of ``[float]`` rows, a GAE
  loop over ``delta.detach().numpy()[::-1]``, ``probs.squeeze(1).gather(1, a)``, the clipped
  ratio plus ``F.smooth_l1_loss`` and ``loss.backward(retain_graph=True)``;
- an ACER agent: sequences drawn from a ``collections.deque`` by ``random.sample``, the
  truncated weights ``rho_a.clamp(max=c)`` and ``(1 - c / rho).clamp(min=0)`` (a float divided
  by a tensor), the Retrace loop of Python floats times one-element tensors and ``.item()``,
  the bias-correction term, on- and off-policy updates;
- a V-trace agent: gymnasium's five-value ``step``, 0-d ``torch.tensor(1.0,
  dtype=torch.float)`` thresholds in ``torch.min(threshold, ratio)``, a tensor times a NumPy
  array and tensors plus NumPy arrays (``corr[:-1] + v.numpy()``) under ``torch.no_grad()``;
- a SAC agent: a float64 ``torch.tensor(np.log(alpha))`` attribute of the policy module with
  ``requires_grad = True`` and its own ``Adam``, ``F.softplus`` scales, ``torch.min(q, 1,
  keepdim=True)[0]``, the policy's backward reaching the Q networks, soft updates through
  ``target.data.copy_`` and ``"{:.4f}".format`` of a 0-d tensor.

The original ports exposed no defect of their own (they passed when added); the file guards
that this surface keeps training as torch does, records compared value for value.

What stands in: ``gym`` (a deterministic point mass of 4 observations and 2 actions for
``CartPole-v1``, of 3 observations and a bounded action for ``Pendulum-v0``; episodes of 6
steps; the actions taken are recorded). The port changes the gradient lines and the import
lines naming ``torch``; ``initialize(model)`` gives it torch's initial weights;
``Categorical.sample`` and ``Normal.rsample`` draw from one stream shared by both runs.
"""

from __future__ import annotations

import pytest

from real_ports import assert_records_agree
from rl_standins import Box, Discrete, PointMassEnv, run_program

PPO_LSTM = """
# Recurrent PPO: the policy sees one observation per step through an LSTM.
import gym
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.distributions.categorical import Categorical

DISCOUNT, GAE_DECAY, CLIP_EPS = 0.97, 0.9, 0.2
EPOCHS, ROLLOUT, HIDDEN = 2, 4, 12


class RecurrentAgent(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 16)
        self.core = nn.LSTM(16, HIDDEN)
        self.to_logits = nn.Linear(HIDDEN, 2)
        self.to_value = nn.Linear(HIDDEN, 1)
        self.opt = optim.Adam(self.parameters(), lr=2e-3)
        self.rollout = []

    def _run_core(self, obs, state):
        z = F.relu(self.embed(obs)).view(-1, 1, 16)  # (time, batch=1, features)
        return self.core(z, state)

    def policy(self, obs, state):
        out, state = self._run_core(obs, state)
        return F.softmax(self.to_logits(out), dim=2), state

    def value(self, obs, state):
        out, _ = self._run_core(obs, state)
        return self.to_value(out)

    def update(self):
        steps, self.rollout = self.rollout, []
        obs = torch.tensor([t[0] for t in steps], dtype=torch.float)
        acts = torch.tensor([[t[1]] for t in steps])
        rews = torch.tensor([[t[2]] for t in steps])
        nxt = torch.tensor([t[3] for t in steps], dtype=torch.float)
        behaviour = torch.tensor([[t[4]] for t in steps])
        alive = torch.tensor([[0 if t[6] else 1] for t in steps], dtype=torch.float)
        h0, c0 = steps[0][5]
        start = (h0.detach(), c0.detach())
        for _ in range(EPOCHS):
            v_now = self.value(obs, start).squeeze(1)
            target = rews + DISCOUNT * self.value(nxt, start).squeeze(1) * alive
            td = (target - v_now).detach().numpy()
            running, gae = 0.0, []
            for err in td[::-1]:
                running = err[0] + DISCOUNT * GAE_DECAY * running
                gae.append([running])
            adv = torch.tensor(gae[::-1], dtype=torch.float)
            probs, _ = self.policy(obs, start)
            taken = probs.squeeze(1).gather(1, acts)
            ratio = torch.exp(torch.log(taken) - torch.log(behaviour))
            surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) * adv)
            loss = (F.smooth_l1_loss(v_now, target.detach()) - surrogate).mean()
            self.opt.zero_grad()
            loss.backward(retain_graph=True)
            self.opt.step()


def main():
    env = gym.make("CartPole-v1")
    agent = RecurrentAgent()
    initialize(agent)
    for episode in range(2):
        blank = lambda: torch.zeros([1, 1, HIDDEN], dtype=torch.float)
        state = (blank(), blank())
        obs, done, total = env.reset(), False, 0.0
        while not done:
            for _ in range(ROLLOUT):
                probs, next_state = agent.policy(torch.from_numpy(obs).float(), state)
                probs = probs.view(-1)
                a = Categorical(probs).sample().item()
                after, r, done, _ = env.step(a)
                agent.rollout.append((obs, a, r / 10.0, after, probs[a].item(), state, done))
                obs, state, total = after, next_state, total + r
                if done:
                    break
            agent.update()
        print("# episode {}: return {:.3f}".format(episode, total))


if __name__ == "__main__":
    main()
"""

ACER = """
# ACER without trust regions: short sequences replayed with truncated importance weights.
import collections
import random

import gym
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.distributions.categorical import Categorical

DISCOUNT, TRUNCATE, SEQ_LEN, SEQS_PER_BATCH = 0.95, 1.0, 3, 2


class SequenceMemory:
    def __init__(self):
        self.seqs = collections.deque(maxlen=50)

    def __len__(self):
        return len(self.seqs)

    def batch(self, latest_only):
        chosen = [self.seqs[-1]] if latest_only else random.sample(self.seqs, SEQS_PER_BATCH)
        flat = [(step, k == 0) for seq in chosen for k, step in enumerate(seq)]
        obs = torch.tensor([s[0] for s, _ in flat], dtype=torch.float)
        acts = torch.tensor([[s[1]] for s, _ in flat])
        mu = torch.tensor([s[3] for s, _ in flat], dtype=torch.float)
        rews = [s[2] for s, _ in flat]
        alive = [0.0 if s[4] else 1.0 for s, _ in flat]
        return obs, acts, mu, rews, alive, [first for _, first in flat]


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(4, 24)
        self.logits = nn.Linear(24, 2)
        self.q_values = nn.Linear(24, 2)

    def forward(self, x, dim=0):
        h = F.relu(self.trunk(x))
        return F.softmax(self.logits(h), dim=dim), self.q_values(h)


def learn(net, opt, memory, latest_only=False):
    obs, acts, mu, rews, alive, starts = memory.batch(latest_only)
    pi, q = net(obs, dim=1)
    q_taken, pi_taken = q.gather(1, acts), pi.gather(1, acts)
    baseline = (pi * q).sum(1).unsqueeze(1).detach()
    rho = pi.detach() / mu
    rho_bar = rho.gather(1, acts).clamp(max=TRUNCATE)
    correction = (1 - TRUNCATE / rho).clamp(min=0)

    ret, targets = baseline[-1] * alive[-1], []
    for i in reversed(range(len(rews))):
        ret = rews[i] + DISCOUNT * ret
        targets.append(ret.item())
        ret = rho_bar[i] * (ret - q_taken[i]) + baseline[i]
        if starts[i] and i > 0:  # the step before belongs to another sequence
            ret = baseline[i - 1] * alive[i - 1]
    q_target = torch.tensor(targets[::-1], dtype=torch.float).unsqueeze(1)

    actor = -rho_bar * torch.log(pi_taken) * (q_target - baseline)
    advantage = q.detach() - baseline
    bias = -(correction * pi.detach() * torch.log(pi) * advantage).sum(1, keepdim=True)
    loss = actor + bias + F.smooth_l1_loss(q_taken, q_target)
    opt.zero_grad()
    loss.mean().backward()
    opt.step()


env = gym.make("CartPole-v1")
memory, net = SequenceMemory(), ActorCritic()
initialize(net)
opt = optim.Adam(net.parameters(), lr=1e-3)
for episode in range(3):
    obs, done, total = env.reset(), False, 0.0
    while not done:
        seq = []
        for _ in range(SEQ_LEN):
            pi, _ = net(torch.from_numpy(obs).float())
            a = Categorical(pi).sample().item()
            after, r, done, _ = env.step(a)
            seq.append((obs, a, r / 10.0, pi.detach().numpy(), done))
            obs, total = after, total + r
            if done:
                break
        memory.seqs.append(seq)
        if len(memory) >= SEQS_PER_BATCH:
            learn(net, opt, memory, latest_only=True)
            learn(net, opt, memory)
    print("# episode {}: return {:.3f}, {} sequences".format(episode, total, len(memory)))
"""

VTRACE = """
# An actor-critic corrected off-policy by V-trace targets.
import gym
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.distributions.categorical import Categorical

DISCOUNT, HORIZON = 0.96, 4


class VTraceAgent(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 24)
        self.pi_head = nn.Linear(24, 2)
        self.v_head = nn.Linear(24, 1)
        self.optimizer = optim.Adam(self.parameters(), lr=1e-3)
        self.rho_max = torch.tensor(1.0, dtype=torch.float)
        self.c_max = torch.tensor(0.9, dtype=torch.float)

    def pi(self, x, dim=0):
        return F.softmax(self.pi_head(F.relu(self.body(x))), dim=dim)

    def v(self, x):
        return self.v_head(F.relu(self.body(x)))


def targets(agent, obs, acts, rews, after, alive, mu):
    with torch.no_grad():
        ratio = agent.pi(obs, dim=1).gather(1, acts) / mu
        rhos = torch.min(agent.rho_max, ratio)
        cs = torch.min(agent.c_max, ratio).numpy()
        v, v_after = agent.v(obs), agent.v(after)
        deltas = rhos * (rews + DISCOUNT * v_after * alive - v).numpy()
        acc = [0.0]
        for t in range(len(deltas) - 1, -1, -1):
            acc.append(deltas[t][0] + DISCOUNT * cs[t][0] * acc[-1])
        corr = torch.tensor([[x] for x in acc[::-1]], dtype=torch.float)
        vs = corr[:-1] + v.numpy()
        advantage = rews + DISCOUNT * (corr[1:] + v_after.numpy()) - v.numpy()
    return vs, advantage, rhos


def train(agent, steps):
    obs = torch.tensor([t[0] for t in steps], dtype=torch.float)
    acts = torch.tensor([[t[1]] for t in steps])
    rews = torch.tensor([[t[2]] for t in steps])
    after = torch.tensor([t[3] for t in steps], dtype=torch.float)
    mu = torch.tensor([[t[4]] for t in steps])
    alive = torch.tensor([[0.0 if t[5] else 1.0] for t in steps])
    vs, advantage, rhos = targets(agent, obs, acts, rews, after, alive, mu)
    log_pi = torch.log(agent.pi(obs, dim=1).gather(1, acts))
    loss = -rhos * log_pi * advantage + F.smooth_l1_loss(agent.v(obs), vs)
    agent.optimizer.zero_grad()
    loss.mean().backward()
    agent.optimizer.step()


env = gym.make("CartPole-v1")
agent = VTraceAgent()
initialize(agent)
for episode in range(2):
    obs, _ = env.reset()
    done, total = False, 0.0
    while not done:
        steps = []
        for _ in range(HORIZON):
            probs = agent.pi(torch.from_numpy(obs).float())
            a = Categorical(probs).sample().item()
            after, r, terminated, truncated, _ = env.step(a)
            done = terminated or truncated
            steps.append((obs, a, r / 10.0, after, probs[a].item(), done))
            obs, total = after, total + r
            if done:
                break
        train(agent, steps)
    print("# episode {}: return {:.3f}".format(episode, total))
"""

SAC = """
# Soft actor-critic for a one-dimensional torque with a learned temperature.
import collections
import random

import gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.distributions.normal import Normal

DISCOUNT, TAU, TARGET_ENTROPY, BATCH = 0.97, 0.05, -1.0, 6


class Replay:
    def __init__(self):
        self.items = collections.deque(maxlen=1000)

    def sample(self, n):
        s, a, r, s2, done = zip(*random.sample(self.items, n))
        as_rows = lambda xs: torch.tensor([[x] for x in xs], dtype=torch.float)
        alive = as_rows([0.0 if d else 1.0 for d in done])
        s, s2 = torch.tensor(s, dtype=torch.float), torch.tensor(s2, dtype=torch.float)
        return s, as_rows(a), as_rows(r), s2, alive


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 24)
        self.mean = nn.Linear(24, 1)
        self.spread = nn.Linear(24, 1)
        self.optimizer = optim.Adam(self.parameters(), lr=1e-3)
        self.log_temp = torch.tensor(np.log(0.05))  # float64, outside parameters()
        self.log_temp.requires_grad = True
        self.alpha_optimizer = optim.Adam([self.log_temp], lr=1e-2)

    def forward(self, s):
        h = F.relu(self.hidden(s))
        dist = Normal(self.mean(h), F.softplus(self.spread(h)))
        u = dist.rsample()
        squashed = torch.tanh(u)
        return squashed, dist.log_prob(u) - torch.log(1 - squashed.pow(2) + 1e-6)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.from_state = nn.Linear(3, 16)
        self.from_action = nn.Linear(1, 16)
        self.head = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))
        self.optimizer = optim.Adam(self.parameters(), lr=2e-3)

    def forward(self, s, a):
        joint = [F.relu(self.from_state(s)), F.relu(self.from_action(a))]
        return self.head(torch.cat(joint, dim=1))


def smaller_q(pair, s, a):
    both = torch.cat([pair[0](s, a), pair[1](s, a)], dim=1)
    return torch.min(both, 1, keepdim=True)[0]


def update(actor, critics, slow_critics, batch):
    s, a, r, s2, alive = batch
    with torch.no_grad():
        a2, logp2 = actor(s2)
        y = r + DISCOUNT * alive * (smaller_q(slow_critics, s2, a2) - actor.log_temp.exp() * logp2)
    for critic in critics:
        critic_loss = F.smooth_l1_loss(critic(s, a), y)
        critic.optimizer.zero_grad()
        critic_loss.backward()
        critic.optimizer.step()

    fresh, logp = actor(s)  # this loss also reaches the critics' parameters
    actor_loss = (actor.log_temp.exp() * logp - smaller_q(critics, s, fresh)).mean()
    actor.optimizer.zero_grad()
    actor_loss.backward()
    actor.optimizer.step()

    alpha_loss = -(actor.log_temp.exp() * (logp + TARGET_ENTROPY).detach()).mean()
    actor.alpha_optimizer.zero_grad()
    alpha_loss.backward()
    actor.alpha_optimizer.step()

    for critic, slow in zip(critics, slow_critics):
        for p_slow, p in zip(slow.parameters(), critic.parameters()):
            p_slow.data.copy_(p_slow.data * (1.0 - TAU) + p.data * TAU)


def main():
    env = gym.make("Pendulum-v0")
    replay, actor = Replay(), Actor()
    critics, slow_critics = (Critic(), Critic()), (Critic(), Critic())
    for net in (actor, *critics, *slow_critics):
        initialize(net)
    for slow, critic in zip(slow_critics, critics):
        slow.load_state_dict(critic.state_dict())
    for episode in range(3):
        s, done = env.reset(), False
        while not done:
            a, _ = actor(torch.from_numpy(s).float())
            s2, r, done, _ = env.step([2.0 * a.item()])
            replay.items.append((s, a.item(), r / 10.0, s2, done))
            s = s2
        if len(replay.items) >= 2 * BATCH:
            for _ in range(2):
                update(actor, critics, slow_critics, replay.sample(BATCH))
        print("# episode {}: alpha {:.4f}".format(episode, actor.log_temp.exp()))


if __name__ == "__main__":
    main()
"""

IMPORTS = (
    "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
    "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
)

STEPS = {
    "ppo_lstm": [
        IMPORTS,
        ("loss.backward(retain_graph=True)\n            self.opt.step()",
         "grads = loss.backward(retain_graph=True)\n            self.opt.step(grads)"),
    ],
    "acer": [
        IMPORTS,
        ("loss.mean().backward()\n    opt.step()",
         "grads = loss.mean().backward()\n    opt.step(grads)"),
    ],
    "vtrace": [
        IMPORTS,
        ("loss.mean().backward()\n    agent.optimizer.step()",
         "grads = loss.mean().backward()\n    agent.optimizer.step(grads)"),
    ],
    "sac": [
        IMPORTS,
        ("critic_loss.backward()\n        critic.optimizer.step()",
         "grads = critic_loss.backward()\n        critic.optimizer.step(grads)"),
        ("actor_loss.backward()\n    actor.optimizer.step()",
         "grads = actor_loss.backward()\n    actor.optimizer.step(grads)"),
        ("alpha_loss.backward()\n    actor.alpha_optimizer.step()",
         "grads = alpha_loss.backward()\n    actor.alpha_optimizer.step(grads)"),
    ],
}  # fmt: skip

SOURCES = {"ppo_lstm": PPO_LSTM, "acer": ACER, "vtrace": VTRACE, "sac": SAC}
PRINTED = {"ppo_lstm": 2, "acer": 3, "vtrace": 2, "sac": 3}


def point_mass(name, run):
    if name == "Pendulum-v0":
        return PointMassEnv(Box(-2.0, 2.0, (1,)), episode_length=6, actions=run.record)
    new_api = run.program == "vtrace"
    return PointMassEnv(Discrete(2), 6, obs_dim=4, new_api=new_api, actions=run.record)


@pytest.mark.parametrize("program", ["ppo_lstm", "acer", "vtrace", "sac"])
def test_minimal_rl_style_agent_trains_as_torch(monkeypatch, capsys, program):
    def env(name, run):
        run.program = program
        return point_mass(name, run)

    theirs, ours = run_program(
        monkeypatch, SOURCES[program], STEPS[program], env, seed=384, __name__="__main__"
    )
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# ep")]
    assert len(printed) == 2 * PRINTED[program]
    assert printed[: len(printed) // 2] == printed[len(printed) // 2 :]  # the same returns
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
