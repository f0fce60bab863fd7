# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
two more of cleanrl's single-file agents (github.com/vwxyzjn/cleanrl), their networks and the
body of ``if __name__ == "__main__":`` as written, the argument parsing replaced by a namespace
of small sizes, ``gym`` by a small deterministic vector environment and the stable-baselines3
``ReplayBuffer`` by a stand-in with its ``add``/``sample`` (``data.observations``,
``data.actions``, ``data.rewards``, ``data.dones``, ...):

- ``td3_continuous_action.py``: ``register_buffer`` of ``torch.tensor((high - low) / 2.0,
  dtype=torch.float32)``, ``nn.Linear`` of ``np.array(shape).prod() + np.prod(shape)`` (NumPy
  integer widths), exploration by ``actions += torch.normal(0, actor.action_scale *
  args.exploration_noise)`` (a float mean and a tensor std) under ``no_grad``, target policy
  smoothing by ``(torch.randn_like(data.actions, device=device) * args.policy_noise).clamp(
  -args.noise_clip, args.noise_clip) * target_actor.action_scale``, ``.clamp`` by NumPy float32
  bounds, ``torch.min`` of the twin targets, one Adam over ``list(qf1.parameters()) +
  list(qf2.parameters())``, delayed actor updates and three Polyak updates through
  ``target_param.data.copy_``;
- ``c51.py``: the categorical DQN: ``register_buffer("atoms", torch.linspace(v_min, v_max,
  steps=n_atoms))``, ``torch.softmax(logits.view(len(x), self.n, self.n_atoms), dim=2)``,
  ``pmfs[torch.arange(len(x)), action]``, the distributional projection under ``no_grad``
  (``b.floor().clamp(0, n_atoms - 1)``, ``(l == u).float()``, ``target_pmfs[i].index_add_(0,
  l[i].long(), d_m_l[i])`` into a row of ``torch.zeros_like``), the cross-entropy against
  ``old_pmfs.clamp(min=1e-5, max=1-1e-5).log()``, Adam with ``eps=0.01/args.batch_size``,
  ``nn.utils.clip_grad_norm_(list(q_network.parameters()), args.max_grad_norm)``, epsilon-greedy
  by ``linear_schedule`` and Python's ``random``, and the target network's
  ``load_state_dict(q_network.state_dict())``.

The random draws of both runs are the same: ``np.random`` and ``random`` seeded alike, and
``torch.normal``/``torch.randn_like`` drawn from one NumPy stream by the harness.

Both ran unchanged but for the gradient lines; no defect found.
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
# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.fc1 = nn.Linear(
            np.array(env.single_observation_space.shape).prod() + np.prod(env.single_action_space.shape),
            16,
        )
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


class Actor(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod(), 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc_mu = nn.Linear(16, np.prod(env.single_action_space.shape))
        # action rescaling
        self.register_buffer(
            "action_scale",
            torch.tensor(
                (env.single_action_space.high - env.single_action_space.low) / 2.0,
                dtype=torch.float32,
            ),
        )
        self.register_buffer(
            "action_bias",
            torch.tensor(
                (env.single_action_space.high + env.single_action_space.low) / 2.0,
                dtype=torch.float32,
            ),
        )

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = torch.tanh(self.fc_mu(x))
        return x * self.action_scale + self.action_bias


args = types.SimpleNamespace(seed=1, total_timesteps=14, learning_rate=3e-3, buffer_size=100, gamma=0.99, tau=0.005, batch_size=4,
                             policy_noise=0.2, exploration_noise=0.1, learning_starts=4, policy_frequency=2, noise_clip=0.5)
device = torch.device("cpu")


def build(envs):
    actor = Actor(envs).to(device)
    qf1 = QNetwork(envs).to(device)
    qf2 = QNetwork(envs).to(device)
    return actor, qf1, qf2


def main(envs, rb, actor, qf1, qf2):
    records = []
    qf1_target = QNetwork(envs).to(device)
    qf2_target = QNetwork(envs).to(device)
    target_actor = Actor(envs).to(device)
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.learning_rate)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.learning_rate)

    # TRY NOT TO MODIFY: start the game
    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            with torch.no_grad():
                actions = actor(torch.Tensor(obs).to(device))
                actions += torch.normal(0, actor.action_scale * args.exploration_noise)
                actions = actions.cpu().numpy().clip(envs.single_action_space.low, envs.single_action_space.high)

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        # TRY NOT TO MODIFY: save data to reply buffer; handle `final_observation`
        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = infos["final_observation"][idx]
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                clipped_noise = (torch.randn_like(data.actions, device=device) * args.policy_noise).clamp(
                    -args.noise_clip, args.noise_clip
                ) * target_actor.action_scale

                next_state_actions = (target_actor(data.next_observations) + clipped_noise).clamp(
                    envs.single_action_space.low[0], envs.single_action_space.high[0]
                )
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = torch.min(qf1_next_target, qf2_next_target)
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * (min_qf_next_target).view(-1)

            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss

            # optimize the model
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if global_step % args.policy_frequency == 0:
                actor_loss = -qf1(data.observations, actor(data.observations)).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()

                # update the target network
                for param, target_param in zip(actor.parameters(), target_actor.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                records.append(actor_loss.item())
            records.append([qf1_loss.item(), qf2_loss.item(), qf1_a_values.mean().item()])
        records.append(np.asarray(actions, dtype=np.float64).copy())
    for net in (actor, qf1, qf2, target_actor, qf1_target, qf2_target):
        records.append({n: v.detach().numpy().copy() for n, v in net.state_dict().items()})
    return records
"""

TD3_STEP = [
    (
        "            qf_loss.backward()\n            q_optimizer.step()",
        "            grads = qf_loss.backward()\n            q_optimizer.step(grads)",
    ),
    (
        "                actor_loss.backward()\n                actor_optimizer.step()",
        "                grads = actor_loss.backward()\n                actor_optimizer.step(grads)",
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
# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
    def __init__(self, env, n_atoms=101, v_min=-100, v_max=100):
        super(QNetwork, self).__init__()
        self.env = env
        self.n_atoms = n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        self.n = env.single_action_space.n
        self.network = nn.Sequential(
            nn.Linear(np.array(env.single_observation_space.shape).prod(), 12),
            nn.ReLU(),
            nn.Linear(12, 8),
            nn.ReLU(),
            nn.Linear(8, self.n * n_atoms)
        )

    def forward(self, x):
        return self.network(x)

    def get_action(self, x, action=None):
        logits = self.forward(x)
        # probability mass function for each action
        pmfs = torch.softmax(logits.view(len(x), self.n, self.n_atoms), dim=2)
        q_values = (pmfs*self.atoms).sum(2)
        if action is None:
            action = torch.argmax(q_values, 1)
        return action, pmfs[torch.arange(len(x)), action]


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope =  (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


args = types.SimpleNamespace(total_timesteps=16, learning_rate=2.5e-3, buffer_size=100, gamma=0.99, target_network_frequency=5,
                             max_grad_norm=0.5, batch_size=4, start_e=1, end_e=0.05, exploration_fraction=0.5,
                             learning_starts=4, train_frequency=1, n_atoms=11, v_min=-5, v_max=5)
device = torch.device("cpu")


def build(envs):
    q_network = QNetwork(envs, n_atoms=args.n_atoms, v_min=args.v_min, v_max=args.v_max).to(device)
    return (q_network,)


def main(envs, rb, q_network):
    records = []
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01/args.batch_size)
    target_network = QNetwork(envs, n_atoms=args.n_atoms, v_min=args.v_min, v_max=args.v_max).to(device)
    target_network.load_state_dict(q_network.state_dict())

    # TRY NOT TO MODIFY: start the game
    obs = envs.reset()
    for global_step in range(args.total_timesteps):
        # ALGO LOGIC: put action logic here
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction*args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = envs.action_space.sample()
        else:
            actions, pmf = q_network.get_action(torch.Tensor(obs).to(device))
            actions = actions.cpu().numpy()

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, dones, infos = envs.step(actions)

        # TRY NOT TO MODIFY: save data to reply buffer; handle `terminal_observation`
        real_next_obs = next_obs.copy()
        for idx, d in enumerate(dones):
            if d:
                real_next_obs[idx] = next_obs[idx]
        rb.add(obs, real_next_obs, actions, rewards, dones, infos)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            data = rb.sample(args.batch_size)

            with torch.no_grad():
                _, next_pmfs = target_network.get_action(data.next_observations)
                next_atoms = data.rewards + args.gamma * target_network.atoms * (1 - data.dones)
                # projection
                delta_z = target_network.atoms[1] - target_network.atoms[0]
                tz = next_atoms.clamp(args.v_min, args.v_max)

                b = (tz - args.v_min)/ delta_z
                l = b.floor().clamp(0, args.n_atoms-1)
                u = b.ceil().clamp(0, args.n_atoms-1)
                # (l == u).float() handles the case where bj is exactly an integer
                # example bj = 1, then the upper ceiling should be uj= 2, and lj= 1
                d_m_l = (u + (l == u).float() - b) * next_pmfs
                d_m_u = (b - l) * next_pmfs
                target_pmfs = torch.zeros_like(next_pmfs)
                for i in range(target_pmfs.size(0)):
                    target_pmfs[i].index_add_(0, l[i].long(), d_m_l[i])
                    target_pmfs[i].index_add_(0, u[i].long(), d_m_u[i])

            _, old_pmfs = q_network.get_action(data.observations, data.actions.flatten())
            loss = (-(target_pmfs * old_pmfs.clamp(min=1e-5, max=1-1e-5).log()).sum(-1)).mean()

            # optimize the midel
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(list(q_network.parameters()), args.max_grad_norm)
            optimizer.step()

            records.append([loss.item(), target_pmfs.numpy().copy()])

            # update the target network
            if global_step % args.target_network_frequency == 0:
                target_network.load_state_dict(q_network.state_dict())
        records.append(np.asarray(actions).tolist())
    for net in (q_network, target_network):
        records.append({n: v.detach().numpy().copy() for n, v in net.state_dict().items()})
    return records
"""

C51_STEP = [
    (
        "            loss.backward()\n            nn.utils.clip_grad_norm_(list(q_network.parameters()), args.max_grad_norm)\n            optimizer.step()",
        "            grads = loss.backward()\n            nn.utils.clip_grad_norm_(grads, list(q_network.parameters()), args.max_grad_norm)\n            optimizer.step(grads)",
    ),
]


def test_cleanrl_c51_matches_torch(monkeypatch):
    def make(lib):
        return VectorEnv(1, Discrete(3), old_api=True), ReplayBuffer(lib, discrete=True)

    records = run_agent(monkeypatch, "import types\n" + C51_SOURCE, C51_STEP, 91, make)
    flat_theirs = [
        x
        for r in records[0]
        for x in (
            r if isinstance(r, list) and len(r) == 2 and isinstance(r[1], np.ndarray) else [r]
        )
    ]
    flat_ours = [
        x
        for r in records[1]
        for x in (
            r if isinstance(r, list) and len(r) == 2 and isinstance(r[1], np.ndarray) else [r]
        )
    ]
    assert_records_agree(flat_ours, flat_theirs, rtol=1e-4, atol=1e-6)
