"""Programs written here in the style of cleanrl's single-file agents (vwxyzjn/cleanrl: a DQN
with a replay buffer and a PQN with Q(lambda) returns over vectorized environments), each with a
``@dataclass`` ``Args`` filled by ``tyro.cli``, a ``SummaryWriter`` and an ``if __name__ ==
"__main__":`` body, run under torch and, ported, under retrograd on small sizes (the harness:
``tests/real_ports.py`` and ``tests/rl_standins.py``).

- the DQN: epsilon-greedy by a linear schedule and Python's ``random``, ``torch.argmax(q,
  dim=1).cpu().numpy()``, the vector env's ``final_info``/``final_observation`` handling, replay
  samples (``batch.actions`` int64 of shape ``(n, 1)`` for ``gather``), ``target(...).max(dim=1)``
  unpacked, ``F.mse_loss``, ``writer.add_scalar`` of a loss tensor that requires grad, a Linear
  sized by ``np.array(space.shape).prod()``, the soft target update through
  ``t.data.copy_(tau * ... + (1.0 - tau) * ...)``;
- the PQN: ``orthogonal_``/``constant_`` layer init, ``nn.LayerNorm``, ``optim.RAdam`` with the
  learning rate annealed through ``param_groups``, storage by ``torch.zeros((steps, envs) +
  shape)``, exploration by ``torch.randint``/``torch.rand`` and ``torch.where(explore, random,
  greedy)``, ``q[torch.arange(n), greedy]``, int64 actions written into a float32 storage row,
  ``torch.tensor(reward).view(-1)``, ``torch.Tensor`` of a NumPy bool array, the Q(lambda)
  returns loop under ``torch.no_grad()`` (``torch.max(..., dim=-1)`` unpacked), minibatches
  indexed by shuffled NumPy index arrays, ``.unsqueeze(-1).long()`` actions for ``gather``,
  ``nn.utils.clip_grad_norm_``.

Both write TensorBoard event files (``runs/{run_name}``) through the library's own
``SummaryWriter`` (``from torch.utils import tensorboard`` becomes retrograd's);
the scalars read back by TensorBoard's ``EventAccumulator`` are compared, and so are the printed
episode returns.

What stands in: ``gymnasium`` (``SyncVectorEnv`` with its autoreset, ``final_info`` and
``final_observation``; ``RecordEpisodeStatistics``; a deterministic point mass of 4
observations and 2 actions whose episodes end after 5 steps, terminated in even-numbered copies
and truncated in odd ones), ``tyro`` (``cli`` makes ``Args`` with the test's sizes) and
``cleanrl_utils.buffers.ReplayBuffer`` (stable-baselines3's ``add``/``sample`` over NumPy,
tensors made by the library of the run). ``initialize(qnet)`` gives the port torch's initial
weights; ``torch.rand``/``torch.randint`` draw from one stream shared by both runs. The port
changes the gradient lines and the import lines naming ``torch``.
"""

from __future__ import annotations

import types
from typing import NamedTuple

import numpy as np
import pytest

from real_ports import assert_records_agree
from rl_standins import Discrete, PointMassEnv, gymnasium_standin, run_program, scalars_written

pytest.importorskip("tensorboard")

DQN = """
import os
import random
import dataclasses

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn, optim
from torch.nn import functional as F
from torch.utils import tensorboard

from cleanrl_utils.buffers import ReplayBuffer  # stable-baselines3's, over NumPy


@dataclasses.dataclass
class Args:
    exp_name: str = os.path.basename(__file__).removesuffix(".py")
    seed: int = 7
    env_id: str = "PointMass-v0"
    steps: int = 1000
    lr: float = 1e-3
    memory: int = 1000
    batch: int = 32
    gamma: float = 0.98
    tau: float = 0.1
    sync_every: int = 50
    warmup: int = 100
    train_every: int = 4
    eps_high: float = 1.0
    eps_low: float = 0.1
    eps_span: float = 0.4  # of all steps


def env_factory(env_id, seed):
    def build():
        env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
        env.action_space.seed(seed)
        return env
    return build


def decayed_epsilon(high, low, span, t):
    return max(low, high + (low - high) * t / span)


class QNet(nn.Module):
    def __init__(self, envs, width=32):
        super().__init__()
        n_obs = np.array(envs.single_observation_space.shape).prod()
        self.layers = nn.Sequential(
            nn.Linear(n_obs, width), nn.ReLU(), nn.Linear(width, envs.single_action_space.n)
        )

    def forward(self, obs):
        return self.layers(obs)


if __name__ == "__main__":
    args = tyro.cli(Args)
    run_name = f"{args.env_id}_{args.exp_name}_{args.seed}"
    writer = tensorboard.SummaryWriter(log_dir=f"runs/{run_name}")
    table = "\\n".join(f"|{k}|{v}|" for k, v in vars(args).items())
    writer.add_text("args", "|name|value|\\n|-|-|\\n" + table)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    envs = gym.vector.SyncVectorEnv([env_factory(args.env_id, args.seed)])
    assert isinstance(envs.single_action_space, gym.spaces.Discrete)
    qnet = QNet(envs).to(device)
    initialize(qnet)
    target = QNet(envs).to(device)
    target.load_state_dict(qnet.state_dict())
    opt = optim.Adam(qnet.parameters(), lr=args.lr)
    memory = ReplayBuffer(args.memory, envs.single_observation_space, envs.single_action_space,
                          device, handle_timeout_termination=False)

    obs = envs.reset(seed=args.seed)[0]
    for step in range(args.steps):
        eps = decayed_epsilon(args.eps_high, args.eps_low, args.eps_span * args.steps, step)
        if random.random() < eps:
            act = np.array([envs.single_action_space.sample()])
        else:
            act = torch.argmax(qnet(torch.Tensor(obs).to(device)), dim=1).cpu().numpy()
        next_obs, rew, term, trunc, infos = envs.step(act)
        for info in infos.get("final_info", []):
            if info is not None and "episode" in info:
                print(f"global_step={step} return={info['episode']['r']}")
                writer.add_scalar("episode/return", info["episode"]["r"], step)
                writer.add_scalar("episode/length", info["episode"]["l"], step)
        stored_next = next_obs.copy()
        for i, cut in enumerate(trunc):
            if cut:  # the env already reset: keep the true last observation
                stored_next[i] = infos["final_observation"][i]
        memory.add(obs, stored_next, act, rew, term, infos)
        obs = next_obs

        if step > args.warmup and step % args.train_every == 0:
            batch = memory.sample(args.batch)
            with torch.no_grad():
                best_next, _ = target(batch.next_observations).max(dim=1)
                alive = 1 - batch.dones.flatten()
                goal = batch.rewards.flatten() + args.gamma * best_next * alive
            taken = qnet(batch.observations).gather(1, batch.actions).squeeze()
            loss = F.mse_loss(goal, taken)
            if step % 20 == 0:
                writer.add_scalar("train/td_loss", loss, step)
                writer.add_scalar("train/q_taken", taken.mean().item(), step)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if step % args.sync_every == 0:
            for t_param, q_param in zip(target.parameters(), qnet.parameters()):
                t_param.data.copy_(args.tau * q_param.data + (1.0 - args.tau) * t_param.data)

    envs.close()
    writer.close()
"""

PQN = """
import os
import dataclasses

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn, optim
from torch.nn import functional as F
from torch.utils import tensorboard


@dataclasses.dataclass
class Args:
    exp_name: str = os.path.basename(__file__).removesuffix(".py")
    seed: int = 3
    env_id: str = "PointMass-v0"
    steps: int = 10000
    n_envs: int = 4
    rollout: int = 16
    n_minibatches: int = 2
    epochs: int = 2
    lr: float = 1e-3
    gamma: float = 0.98
    lam: float = 0.6
    eps_high: float = 1.0
    eps_low: float = 0.05
    eps_span: float = 0.5
    clip: float = 5.0


def env_factory(env_id, seed):
    def build():
        env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
        env.action_space.seed(seed)
        return env
    return build


def ortho(layer, gain=np.sqrt(2), bias=0.0):
    torch.nn.init.orthogonal_(layer.weight, gain)
    torch.nn.init.constant_(layer.bias, bias)
    return layer


class QNet(nn.Module):
    def __init__(self, envs, width=32):
        super().__init__()
        n_obs = np.array(envs.single_observation_space.shape).prod()
        self.body = nn.Sequential(
            ortho(nn.Linear(n_obs, width)), nn.LayerNorm(width), nn.ReLU(),
            ortho(nn.Linear(width, envs.single_action_space.n)),
        )

    def forward(self, obs):
        return self.body(obs)


if __name__ == "__main__":
    args = tyro.cli(Args)
    per_update = args.n_envs * args.rollout
    mb_size = per_update // args.n_minibatches
    updates = args.steps // per_update
    run_name = f"{args.env_id}_{args.exp_name}_{args.seed}"
    writer = tensorboard.SummaryWriter(log_dir=f"runs/{run_name}")
    writer.add_text("args", str(vars(args)))
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    thunks = [env_factory(args.env_id, args.seed + k) for k in range(args.n_envs)]
    envs = gym.vector.SyncVectorEnv(thunks)
    obs_shape, act_shape = envs.single_observation_space.shape, envs.single_action_space.shape
    qnet = QNet(envs).to(device)
    initialize(qnet)
    opt = optim.RAdam(qnet.parameters(), lr=args.lr)

    seen = torch.zeros((args.rollout, args.n_envs) + obs_shape).to(device)
    taken = torch.zeros((args.rollout, args.n_envs) + act_shape).to(device)
    paid = torch.zeros((args.rollout, args.n_envs)).to(device)
    ended = torch.zeros((args.rollout, args.n_envs)).to(device)
    greedy_q = torch.zeros((args.rollout, args.n_envs)).to(device)

    step = 0
    obs = torch.Tensor(envs.reset(seed=args.seed)[0]).to(device)
    done = torch.zeros(args.n_envs).to(device)
    for update in range(updates):
        opt.param_groups[0]["lr"] = args.lr * (1.0 - update / updates)
        for t in range(args.rollout):
            step += args.n_envs
            seen[t], ended[t] = obs, done
            progress = step / (args.eps_span * args.steps)
            eps = max(args.eps_low, args.eps_high - (args.eps_high - args.eps_low) * progress)
            coin = torch.randint(0, envs.single_action_space.n, (args.n_envs,)).to(device)
            with torch.no_grad():
                q = qnet(obs)
                best = torch.argmax(q, dim=1)
                greedy_q[t] = q[torch.arange(args.n_envs), best].flatten()
            act = torch.where(torch.rand((args.n_envs,)).to(device) < eps, coin, best)
            taken[t] = act
            obs, rew, term, trunc, infos = envs.step(act.cpu().numpy())
            paid[t] = torch.tensor(rew).to(device).view(-1)
            obs = torch.Tensor(obs).to(device)
            done = torch.Tensor(np.logical_or(term, trunc)).to(device)
            for info in infos.get("final_info", []):
                if info is not None and "episode" in info:
                    print(f"global_step={step} return={info['episode']['r']}")
                    writer.add_scalar("episode/return", info["episode"]["r"], step)

        with torch.no_grad():  # Q(lambda): blend the bootstrap and the lambda-return
            targets = torch.zeros_like(paid).to(device)
            last_q, _ = torch.max(qnet(obs), dim=-1)
            targets[-1] = paid[-1] + args.gamma * last_q * (1.0 - done)
            for t in range(args.rollout - 2, -1, -1):
                blend = args.lam * targets[t + 1] + (1 - args.lam) * greedy_q[t + 1]
                targets[t] = paid[t] + args.gamma * blend * (1.0 - ended[t + 1])

        flat_obs = seen.reshape((-1,) + obs_shape)
        flat_act = taken.reshape((-1,) + act_shape)
        flat_targets = targets.reshape(-1)
        order = np.arange(per_update)
        for epoch in range(args.epochs):
            np.random.shuffle(order)
            for lo in range(0, per_update, mb_size):
                idx = order[lo:lo + mb_size]
                pred = qnet(flat_obs[idx]).gather(1, flat_act[idx].unsqueeze(-1).long()).squeeze()
                loss = F.mse_loss(flat_targets[idx], pred)
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(qnet.parameters(), args.clip)
                opt.step()
        writer.add_scalar("train/td_loss", loss, step)
        writer.add_scalar("train/q_pred", pred.mean().item(), step)

    envs.close()
    writer.close()
"""

STEPS = {
    "dqn": [
        ("import torch\n", "import retrograd as torch\n"),
        ("from torch import nn, optim\n", "from retrograd import nn, optim\n"),
        ("            loss.backward()\n            opt.step()",
         "            grads = loss.backward()\n            opt.step(grads)"),
    ],
    "pqn": [
        ("import torch\n", "import retrograd as torch\n"),
        ("from torch import nn, optim\n", "from retrograd import nn, optim\n"),
        ("                loss.backward()\n"
         "                nn.utils.clip_grad_norm_(qnet.parameters(), args.clip)\n"
         "                opt.step()",
         "                grads = loss.backward()\n"
         "                nn.utils.clip_grad_norm_(grads, qnet.parameters(), args.clip)\n"
         "                opt.step(grads)"),
    ],
}  # fmt: skip

SIZES = {
    "dqn": dict(steps=90, memory=100, batch=8, tau=0.5, sync_every=10, warmup=10, lr=3e-3),
    "pqn": dict(steps=96, n_envs=4, rollout=8, n_minibatches=2, epochs=2, lr=3e-3),
}


def replay_buffer_standin(lib):
    """``cleanrl_utils.buffers.ReplayBuffer`` (stable-baselines3's) as dqn.py uses it."""

    class ReplayBufferSamples(NamedTuple):
        observations: object
        actions: object
        next_observations: object
        dones: object
        rewards: object

    class ReplayBuffer:
        def __init__(self, buffer_size, observation_space, action_space, device, n_envs=1,
                     optimize_memory_usage=False, handle_timeout_termination=True):  # fmt: skip
            self.buffer_size, self.n_envs, self.device = buffer_size, n_envs, device
            self.action_dim = (
                1 if isinstance(action_space, Discrete) else int(np.prod(action_space.shape))
            )
            shape = (buffer_size, n_envs, *observation_space.shape)
            self.observations = np.zeros(shape, dtype=observation_space.dtype)
            self.next_observations = np.zeros(shape, dtype=observation_space.dtype)
            self.actions = np.zeros(
                (buffer_size, n_envs, self.action_dim), dtype=action_space.dtype
            )
            self.rewards = np.zeros((buffer_size, n_envs), dtype=np.float32)
            self.dones = np.zeros((buffer_size, n_envs), dtype=np.float32)
            self.timeouts = np.zeros((buffer_size, n_envs), dtype=np.float32)
            self.pos, self.full = 0, False

        def add(self, obs, next_obs, action, reward, done, infos):
            self.observations[self.pos] = np.array(obs)
            self.next_observations[self.pos] = np.array(next_obs)
            self.actions[self.pos] = np.array(action.reshape((self.n_envs, self.action_dim)))
            self.rewards[self.pos] = np.array(reward)
            self.dones[self.pos] = np.array(done)
            self.pos += 1
            if self.pos == self.buffer_size:
                self.full, self.pos = True, 0

        def sample(self, batch_size):
            upper_bound = self.buffer_size if self.full else self.pos
            batch_inds = np.random.randint(0, upper_bound, size=batch_size)
            env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
            data = (
                self.observations[batch_inds, env_indices, :],
                self.actions[batch_inds, env_indices, :],
                self.next_observations[batch_inds, env_indices, :],
                (
                    self.dones[batch_inds, env_indices]
                    * (1 - self.timeouts[batch_inds, env_indices])
                ).reshape(-1, 1),
                self.rewards[batch_inds, env_indices].reshape(-1, 1),
            )
            return ReplayBufferSamples(*(lib.tensor(array, device=self.device) for array in data))

    return ReplayBuffer


def standin_modules(program):
    def modules(run):
        buffers = types.ModuleType("cleanrl_utils.buffers")
        buffers.ReplayBuffer = replay_buffer_standin(run.lib)
        tyro = types.ModuleType("tyro")
        tyro.cli = lambda cls: cls(**SIZES[program])
        gym = gymnasium_standin(
            lambda env_id: PointMassEnv(Discrete(2), 5, obs_dim=4, new_api=True)
        )
        return {
            "gymnasium": gym,
            "tyro": tyro,
            "cleanrl_utils": types.ModuleType("cleanrl_utils"),
            "cleanrl_utils.buffers": buffers,
        }

    return modules


@pytest.mark.parametrize("program", ["dqn", "pqn"])
def test_cleanrl_agent_trains_and_logs_as_torch(monkeypatch, capsys, tmp_path, program):
    theirs, ours = run_program(
        monkeypatch, {"dqn": DQN, "pqn": PQN}[program], STEPS[program], None, seed=380,
        modules_of=standin_modules(program), workdir=tmp_path,
        __name__="__main__", __file__=f"{program}.py",
    )  # fmt: skip
    printed = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("global_step=")
    ]
    assert printed[: len(printed) // 2] == printed[len(printed) // 2 :]
    assert len(printed) == {"dqn": 36, "pqn": 32}[program]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    torch_scalars, port_scalars = (
        scalars_written(tmp_path / lib) for lib in ("torch", "retrograd")
    )
    assert list(port_scalars) == list(torch_scalars)
    for tag, points in torch_scalars.items():
        assert [step for step, _ in port_scalars[tag]] == [step for step, _ in points], tag
        np.testing.assert_allclose([v for _, v in port_scalars[tag]], [v for _, v in points],
                                   rtol=2e-4, atol=2e-5, err_msg=tag)  # fmt: skip
