"""Programs written here in the style of two of cleanrl's single-file agents
(github.com/vwxyzjn/cleanrl), run under torch and, ported, under retrograd from the same
weights and draws (the harness: ``tests/real_ports.py``): the networks and a ``main`` loop in
cleanrl's manner, with a namespace of small sizes for the argument parsing, a small
deterministic vector environment for ``gym`` and a stand-in for stable-baselines3's
``ReplayBuffer`` (``add``/``sample``, ``data.observations``, ``data.actions``, ...):

- TD3 for continuous actions: ``register_buffer`` of ``torch.tensor((high - low) / 2.0,
  dtype=torch.float32)``, ``nn.Linear`` of ``np.array(shape).prod() + np.prod(shape)`` (NumPy
  integer widths), exploration by ``actions += torch.normal(0, actor.action_scale * noise)`` (a
  float mean and a tensor std) under ``no_grad``, target policy smoothing by
  ``(torch.randn_like(data.actions, device=device) * noise).clamp(-clip, clip) * scale``,
  ``.clamp`` by NumPy float32 bounds, ``torch.min`` of the twin targets, one Adam over
  ``list(q1.parameters()) + list(q2.parameters())``, delayed actor updates and Polyak updates
  through ``target.data.copy_``;
- C51, the categorical DQN: ``register_buffer("atoms", torch.linspace(v_min, v_max,
  steps=n_atoms))``, ``torch.softmax(logits.view(len(x), n, n_atoms), dim=2)``,
  ``pmfs[torch.arange(len(x)), action]``, the distributional projection under ``no_grad``
  (``b.floor().clamp(0, n_atoms - 1)``, ``(lo == hi).float()``, ``target[i].index_add_(0,
  lo[i].long(), mass[i])`` into a row of ``torch.zeros_like``), the cross-entropy against
  ``pmfs.clamp(min=1e-5, max=1 - 1e-5).log()``, Adam with ``eps=0.01 / batch_size``,
  ``nn.utils.clip_grad_norm_(list(net.parameters()), max_norm)``, epsilon-greedy by a linear
  schedule and Python's ``random``, and the target network's
  ``load_state_dict(net.state_dict())``.

The random draws of both runs are the same: ``np.random`` and ``random`` seeded alike, and
``torch.normal``/``torch.randn_like`` drawn from one NumPy stream by the harness. The port
changes only the gradient lines; no defect found.
"""

from __future__ import annotations

import random
import types

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, both


class SharedNormalDraws:
    """``torch.normal(mean, std)`` and ``torch.randn_like`` of a library drawing from one seeded
    NumPy stream: the same numbers for both libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def randn_like(x, dtype=None, device=None, **_):
            return lib.tensor(rng.standard_normal(tuple(x.shape)), dtype=dtype or x.dtype)

        def normal(mean, std, *args, **kwargs):
            mean_a = np.asarray(mean.numpy() if hasattr(mean, "numpy") else mean, np.float64)
            std_a = np.asarray(std.numpy() if hasattr(std, "numpy") else std, np.float64)
            shape = np.broadcast(mean_a, std_a).shape
            like = std if hasattr(std, "dtype") else mean
            return lib.tensor(mean_a + std_a * rng.standard_normal(shape), dtype=like.dtype)

        monkeypatch.setattr(lib, "randn_like", randn_like)
        monkeypatch.setattr(lib, "normal", normal)


class Box:
    def __init__(self, low, high, shape):
        self.low = np.full(shape, low, dtype=np.float32)
        self.high = np.full(shape, high, dtype=np.float32)
        self.shape = shape
        self.dtype = np.float32

    def sample(self):
        return np.random.uniform(self.low, self.high).astype(np.float32)


class Discrete:
    def __init__(self, n):
        self.n = n
        self.shape = ()

    def sample(self):
        return np.random.randint(self.n)


class VectorEnv:
    """A deterministic point-mass stand-in for ``gym.vector.SyncVectorEnv``: ``num_envs``
    copies, observations of 3 floats, episodes of 5 steps; ``gymnasium``'s five-value ``step``
    (``old_api=False``) or old gym's four."""

    def __init__(self, num_envs, action_space, old_api):
        self.num_envs = num_envs
        self.single_observation_space = Box(-np.inf, np.inf, (3,))
        self.single_action_space = action_space
        self.action_space = types.SimpleNamespace(
            sample=lambda: np.array([action_space.sample() for _ in range(num_envs)])
        )
        self.old_api = old_api
        self.t = 0
        self.state = None

    def reset(self, seed=None):
        self.t = 0
        self.state = np.linspace(-0.5, 0.5, 3 * self.num_envs, dtype=np.float32).reshape(
            self.num_envs, 3
        )
        return self.state.copy() if self.old_api else (self.state.copy(), {})

    def step(self, actions):
        a = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)
        if isinstance(self.single_action_space, Discrete):
            a = a - 1.0
        self.state = np.tanh(
            self.state + 0.3 * a.mean(1, keepdims=True) + np.array([0.1, -0.2, 0.05], np.float32)
        ).astype(np.float32)
        rewards = (-np.abs(self.state).sum(1)).astype(np.float32)
        self.t += 1
        done = self.t % 5 == 0
        dones = np.full(self.num_envs, done)
        if self.old_api:
            return self.state.copy(), rewards, dones, [{} for _ in range(self.num_envs)]
        return self.state.copy(), rewards, dones, np.zeros(self.num_envs, bool), {}


class ReplayBuffer:
    """stable-baselines3's ``ReplayBuffer`` as the agents use it: ``add`` and ``sample``
    (indices by ``np.random.randint``, tensors of the library given)."""

    def __init__(self, lib, discrete):
        self.lib = lib
        self.discrete = discrete
        self.rows = []

    def add(self, obs, next_obs, actions, rewards, dones, infos):
        for i in range(len(obs)):
            self.rows.append(
                (
                    obs[i],
                    next_obs[i],
                    np.asarray(actions[i]).reshape(-1),
                    rewards[i],
                    float(dones[i]),
                )
            )

    def sample(self, batch_size):
        idx = np.random.randint(0, len(self.rows), size=batch_size)
        cols = list(zip(*[self.rows[i] for i in idx]))
        lib = self.lib
        return types.SimpleNamespace(
            observations=lib.tensor(np.stack(cols[0]), dtype=lib.float32),
            next_observations=lib.tensor(np.stack(cols[1]), dtype=lib.float32),
            actions=lib.tensor(
                np.stack(cols[2]), dtype=lib.int64 if self.discrete else lib.float32
            ),
            rewards=lib.tensor(np.array(cols[3]).reshape(-1, 1), dtype=lib.float32),
            dones=lib.tensor(np.array(cols[4]).reshape(-1, 1), dtype=lib.float32),
        )


def run_agent(monkeypatch, source, step, seed, make):
    """``main(envs, rb)`` of the program in torch and in the port, from the same seeds; the
    port's networks get torch's initial weights through ``make`` (``build``/``load``)."""
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedNormalDraws(seed).patch(patch, lib)
            names = both(source, step)[0 if lib is torch else 1]
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)
            envs, rb = make(lib)
            nets = names["build"](envs)
            if initial is None:
                initial = [
                    {k: v.detach().numpy().copy() for k, v in n.state_dict().items()} for n in nets
                ]
            else:
                for n, state in zip(nets, initial):
                    n.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            records.append(names["main"](envs, rb, *nets))
    return records


# -- TD3 -------------------------------------------------------------------------------------------
TD3_SOURCE = """
def width(space):
    return np.array(space.shape).prod()


class Critic(nn.Module):
    def __init__(self, env, hidden=12):
        super().__init__()
        obs_dim = width(env.single_observation_space)
        self.body = nn.Sequential(
            nn.Linear(obs_dim + np.prod(env.single_action_space.shape), hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1),
        )

    def forward(self, obs, act):
        return self.body(torch.cat([obs, act], 1))


class DeterministicActor(nn.Module):
    def __init__(self, env, hidden=12):
        super().__init__()
        space = env.single_action_space
        self.hidden = nn.Linear(width(env.single_observation_space), hidden)
        self.mu = nn.Linear(hidden, np.prod(space.shape))
        # map tanh's (-1, 1) onto the box of the action space
        half_span = torch.tensor((space.high - space.low) / 2.0, dtype=torch.float32)
        self.register_buffer("action_scale", half_span)
        centre = torch.tensor((space.high + space.low) / 2.0, dtype=torch.float32)
        self.register_buffer("action_bias", centre)

    def forward(self, obs):
        return torch.tanh(self.mu(F.relu(self.hidden(obs)))) * self.action_scale + self.action_bias


args = types.SimpleNamespace(
    seed=3, total_timesteps=12, lr=3e-3, gamma=0.95, tau=0.01, batch_size=4,
    explore_noise=0.1, smooth_noise=0.2, smooth_clip=0.5, learning_starts=3, actor_every=2,
)
device = torch.device("cpu")


def build(envs):
    return DeterministicActor(envs).to(device), Critic(envs).to(device), Critic(envs).to(device)


def polyak(net, target):
    for p, tp in zip(net.parameters(), target.parameters()):
        tp.data.copy_(args.tau * p.data + (1 - args.tau) * tp.data)


def main(envs, rb, actor, q1, q2):
    log = []
    actor_t, q1_t, q2_t = build(envs)
    for net, copy in ((actor, actor_t), (q1, q1_t), (q2, q2_t)):
        copy.load_state_dict(net.state_dict())
    critic_opt = optim.Adam(list(q1.parameters()) + list(q2.parameters()), lr=args.lr)
    actor_opt = optim.Adam(list(actor.parameters()), lr=args.lr)
    space = envs.single_action_space
    obs, _info = envs.reset(seed=args.seed)
    for step in range(args.total_timesteps):
        if step < args.learning_starts:
            actions = np.array([space.sample() for _ in range(envs.num_envs)])
        else:
            with torch.no_grad():
                guess = actor(torch.Tensor(obs).to(device))
                guess += torch.normal(0, actor.action_scale * args.explore_noise)
                actions = guess.cpu().numpy().clip(space.low, space.high)
        next_obs, rewards, terminated, truncated, infos = envs.step(actions)
        stored_next = next_obs.copy()
        for i, cut in enumerate(truncated):
            if cut:  # a truncated episode: store the true last observation
                stored_next[i] = infos["final_observation"][i]
        rb.add(obs, stored_next, actions, rewards, terminated, infos)
        obs = next_obs
        if step <= args.learning_starts:
            log.append(np.asarray(actions, dtype=np.float64).copy())
            continue
        batch = rb.sample(args.batch_size)
        with torch.no_grad():
            noise = (torch.randn_like(batch.actions, device=device) * args.smooth_noise).clamp(
                -args.smooth_clip, args.smooth_clip) * actor_t.action_scale
            next_act = (actor_t(batch.next_observations) + noise).clamp(space.low[0], space.high[0])
            after = batch.next_observations
            next_q = torch.min(q1_t(after, next_act), q2_t(after, next_act)).view(-1)
            target = batch.rewards.flatten() + args.gamma * (1 - batch.dones.flatten()) * next_q
        q1_pred = q1(batch.observations, batch.actions).view(-1)
        q2_pred = q2(batch.observations, batch.actions).view(-1)
        q1_loss, q2_loss = F.mse_loss(q1_pred, target), F.mse_loss(q2_pred, target)
        critic_loss = q1_loss + q2_loss
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        if step % args.actor_every == 0:
            pi_loss = -q1(batch.observations, actor(batch.observations)).mean()
            actor_opt.zero_grad()
            pi_loss.backward()
            actor_opt.step()
            for net, copy in ((actor, actor_t), (q1, q1_t), (q2, q2_t)):
                polyak(net, copy)
            log.append(pi_loss.item())
        log.append([q1_loss.item(), q2_loss.item(), q1_pred.mean().item()])
        log.append(np.asarray(actions, dtype=np.float64).copy())
    for net in (actor, q1, q2, actor_t, q1_t, q2_t):
        log.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return log
"""

TD3_STEP = [
    (
        "        critic_loss.backward()\n        critic_opt.step()",
        "        grads = critic_loss.backward()\n        critic_opt.step(grads)",
    ),
    (
        "            pi_loss.backward()\n            actor_opt.step()",
        "            grads = pi_loss.backward()\n            actor_opt.step(grads)",
    ),
]


def test_cleanrl_td3_matches_torch(monkeypatch):
    def make(lib):
        return VectorEnv(2, Box(-2.0, 2.0, (1,)), old_api=False), ReplayBuffer(lib, discrete=False)

    records = run_agent(monkeypatch, "import types\n" + TD3_SOURCE, TD3_STEP, 90, make)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- C51 -------------------------------------------------------------------------------------------
C51_SOURCE = """
import random


class Distributional(nn.Module):
    # one categorical return distribution over fixed atoms per action
    def __init__(self, env, n_atoms=51, v_min=-10.0, v_max=10.0):
        super().__init__()
        self.n_atoms, self.n = n_atoms, env.single_action_space.n
        atoms = torch.linspace(v_min, v_max, steps=n_atoms)
        self.register_buffer("atoms", atoms)
        self.net = nn.Sequential(
            nn.Linear(np.array(env.single_observation_space.shape).prod(), 10), nn.ReLU(),
            nn.Linear(10, self.n * n_atoms),
        )

    def forward(self, x):
        return self.net(x)

    def pmf_of(self, x, action=None):
        pmfs = torch.softmax(self(x).view(len(x), self.n, self.n_atoms), dim=2)
        if action is None:
            action = torch.argmax((pmfs * self.atoms).sum(2), 1)
        rows = torch.arange(len(x))
        return action, pmfs[rows, action]


def epsilon_at(first, last, span, t):
    return max(last, first + (last - first) * t / span)


args = types.SimpleNamespace(
    total_timesteps=14, lr=2e-3, gamma=0.9, sync_every=4, max_norm=0.5, batch_size=4,
    eps_first=1.0, eps_last=0.1, eps_span=7, learning_starts=3, n_atoms=9, v_min=-4.0, v_max=4.0,
)
device = torch.device("cpu")


def build(envs):
    return (Distributional(envs, args.n_atoms, args.v_min, args.v_max).to(device),)


def project(target_net, rewards, dones, next_pmfs):
    atoms = target_net.atoms
    shifted = (rewards + args.gamma * atoms * (1 - dones)).clamp(args.v_min, args.v_max)
    b = (shifted - args.v_min) / (atoms[1] - atoms[0])
    lo = b.floor().clamp(0, args.n_atoms - 1)
    hi = b.ceil().clamp(0, args.n_atoms - 1)
    to_lo = (hi + (lo == hi).float() - b) * next_pmfs  # b on an atom: all mass to lo
    to_hi = (b - lo) * next_pmfs
    target = torch.zeros_like(next_pmfs)
    for i in range(target.size(0)):
        target[i].index_add_(0, lo[i].long(), to_lo[i])
        target[i].index_add_(0, hi[i].long(), to_hi[i])
    return target


def main(envs, rb, net):
    log = []
    opt = optim.Adam(net.parameters(), lr=args.lr, eps=0.01 / args.batch_size)
    target_net = Distributional(envs, args.n_atoms, args.v_min, args.v_max).to(device)
    target_net.load_state_dict(net.state_dict())
    obs = envs.reset()
    for step in range(args.total_timesteps):
        if random.random() < epsilon_at(args.eps_first, args.eps_last, args.eps_span, step):
            actions = np.asarray(envs.action_space.sample())
        else:
            chosen, _ = net.pmf_of(torch.Tensor(obs).to(device))
            actions = chosen.cpu().numpy()
        next_obs, rewards, dones, info = envs.step(actions)
        rb.add(obs, next_obs.copy(), actions, rewards, dones, info)
        obs = next_obs
        if step > args.learning_starts:
            batch = rb.sample(args.batch_size)
            with torch.no_grad():
                _, next_pmfs = target_net.pmf_of(batch.next_observations)
                target = project(target_net, batch.rewards, batch.dones, next_pmfs)
            _, pmfs = net.pmf_of(batch.observations, batch.actions.flatten())
            loss = -(target * pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(list(net.parameters()), args.max_norm)
            opt.step()
            log += [loss.item(), target.numpy().copy()]
            if step % args.sync_every == 0:
                target_net.load_state_dict(net.state_dict())
        log.append(np.asarray(actions).tolist())
    for n in (net, target_net):
        log.append({k: v.detach().numpy().copy() for k, v in n.state_dict().items()})
    return log
"""

C51_STEP = [
    (
        "            loss.backward()\n"
        "            nn.utils.clip_grad_norm_(list(net.parameters()), args.max_norm)\n"
        "            opt.step()",
        "            grads = loss.backward()\n"
        "            nn.utils.clip_grad_norm_(grads, list(net.parameters()), args.max_norm)\n"
        "            opt.step(grads)",
    ),
]


def test_cleanrl_c51_matches_torch(monkeypatch):
    def make(lib):
        return VectorEnv(1, Discrete(3), old_api=True), ReplayBuffer(lib, discrete=True)

    records = run_agent(monkeypatch, "import types\n" + C51_SOURCE, C51_STEP, 91, make)
    assert any(isinstance(r, np.ndarray) for r in records[0])  # it trained
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)
