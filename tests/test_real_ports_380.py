# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
two of cleanrl's single-file agents, whole (github.com/vwxyzjn/cleanrl ``cleanrl/dqn.py`` and
``cleanrl/pqn.py``, with their ``@dataclass`` ``Args``, ``tyro.cli``, ``SummaryWriter`` and
``if __name__ == "__main__":`` body), on small sizes given through ``tyro.cli``:

- ``dqn.py``: epsilon-greedy by ``linear_schedule`` and Python's ``random``, ``torch.argmax(
  q_values, dim=1).cpu().numpy()``, gymnasium's vector-env ``final_info``/``final_observation``
  handling, the stable-baselines3 replay buffer's samples (``data.actions`` int64 of shape
  ``(batch, 1)`` for ``gather``), ``target_network(...).max(dim=1)`` unpacked, ``F.mse_loss``,
  ``writer.add_scalar`` of a loss tensor that requires grad, the soft target update through
  ``target_network_param.data.copy_(args.tau * ... + (1.0 - args.tau) * ...)``;
- ``pqn.py``: ``layer_init`` by ``orthogonal_``/``constant_``, ``nn.LayerNorm``, ``optim.RAdam``
  with the learning rate annealed through ``param_groups``, storage tensors built by ``torch.zeros(
  (steps, envs) + shape)``, ``torch.randint``/``torch.rand`` exploration through
  ``torch.where(explore, random_actions, max_actions)``, ``q_values[torch.arange(n),
  max_actions]``, int64 actions written into a float32 buffer row, ``torch.tensor(reward)
  .view(-1)``, ``torch.Tensor`` of a NumPy bool array, the Q(lambda) returns loop under
  ``torch.no_grad()``, minibatches indexed by shuffled NumPy index arrays,
  ``.unsqueeze(-1).long()`` actions for ``gather``, ``nn.utils.clip_grad_norm_``.

Both write their TensorBoard event files (``runs/{run_name}``) through the library's own
``SummaryWriter`` (``from torch.utils.tensorboard import SummaryWriter`` becomes retrograd's);
the scalars read back by TensorBoard's ``EventAccumulator`` are compared (the wall-clock
``charts/SPS`` left out), and so are the printed episode returns.

What stands in: ``gymnasium`` (``SyncVectorEnv`` with its autoreset, ``final_info`` and
``final_observation``; ``RecordEpisodeStatistics``; a deterministic point mass of 4
observations and 2 actions whose episodes end after 5 steps, terminated in even-numbered copies
and truncated in odd ones), ``tyro`` (``cli`` makes ``Args`` with the test's sizes) and
``cleanrl_utils.buffers.ReplayBuffer`` (stable-baselines3's ``add``/``sample`` over NumPy,
tensors made by the library of the run). ``initialize(q_network)`` gives the port torch's
initial weights; ``torch.rand``/``torch.randint`` draw from one stream shared by both runs.
The port changes the gradient lines and the import lines naming ``torch``.
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
# docs and experiment results can be found at https://docs.cleanrl.dev/rl-algorithms/dqn/#dqnpy
import os
import random
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tyro
from torch.utils.tensorboard import SummaryWriter

from cleanrl_utils.buffers import ReplayBuffer


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    \"\"\"the name of this experiment\"\"\"
    seed: int = 1
    \"\"\"seed of the experiment\"\"\"
    torch_deterministic: bool = True
    \"\"\"if toggled, `torch.backends.cudnn.deterministic=False`\"\"\"
    cuda: bool = True
    \"\"\"if toggled, cuda will be enabled by default\"\"\"
    track: bool = False
    \"\"\"if toggled, this experiment will be tracked with Weights and Biases\"\"\"
    wandb_project_name: str = "cleanRL"
    \"\"\"the wandb's project name\"\"\"
    wandb_entity: str = None
    \"\"\"the entity (team) of wandb's project\"\"\"
    capture_video: bool = False
    \"\"\"whether to capture videos of the agent performances (check out `videos` folder)\"\"\"
    save_model: bool = False
    \"\"\"whether to save model into the `runs/{run_name}` folder\"\"\"
    upload_model: bool = False
    \"\"\"whether to upload the saved model to huggingface\"\"\"
    hf_entity: str = ""
    \"\"\"the user or org name of the model repository from the Hugging Face Hub\"\"\"

    # Algorithm specific arguments
    env_id: str = "CartPole-v1"
    \"\"\"the id of the environment\"\"\"
    total_timesteps: int = 500000
    \"\"\"total timesteps of the experiments\"\"\"
    learning_rate: float = 2.5e-4
    \"\"\"the learning rate of the optimizer\"\"\"
    num_envs: int = 1
    \"\"\"the number of parallel game environments\"\"\"
    buffer_size: int = 10000
    \"\"\"the replay memory buffer size\"\"\"
    gamma: float = 0.99
    \"\"\"the discount factor gamma\"\"\"
    tau: float = 1.0
    \"\"\"the target network update rate\"\"\"
    target_network_frequency: int = 500
    \"\"\"the timesteps it takes to update the target network\"\"\"
    batch_size: int = 128
    \"\"\"the batch size of sample from the reply memory\"\"\"
    start_e: float = 1
    \"\"\"the starting epsilon for exploration\"\"\"
    end_e: float = 0.05
    \"\"\"the ending epsilon for exploration\"\"\"
    exploration_fraction: float = 0.5
    \"\"\"the fraction of `total-timesteps` it takes from start-e to go end-e\"\"\"
    learning_starts: int = 10000
    \"\"\"timestep to start learning\"\"\"
    train_frequency: int = 10
    \"\"\"the frequency of training\"\"\"


def make_env(env_id, seed, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env.action_space.seed(seed)

        return env

    return thunk


# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(np.array(env.single_observation_space.shape).prod(), 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, env.single_action_space.n),
        )

    def forward(self, x):
        return self.network(x)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


if __name__ == "__main__":
    args = tyro.cli(Args)
    assert args.num_envs == 1, "vectorized envs are not supported at the moment"
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            monitor_gym=True,
            save_code=True,
        )
    writer = SummaryWriter(f"runs/{run_name}")
    writer.add_text(
        "hyperparameters",
        "|param|value|\\n|-|-|\\n%s" % ("\\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # env setup
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.seed + i, i, args.capture_video, run_name) for i in range(args.num_envs)]
    )
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete action space is supported"

    q_network = QNetwork(envs).to(device)
    initialize(q_network)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs).to(device)
    target_network.load_state_dict(q_network.state_dict())

    rb = ReplayBuffer(
        args.buffer_size,
        envs.single_observation_space,
        envs.single_action_space,
        device,
        handle_timeout_termination=False,
    )
    start_time = time.time()

    # TRY NOT TO MODIFY: start the game
    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        # ALGO LOGIC: put action logic here
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            q_values = q_network(torch.Tensor(obs).to(device))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        if "final_info" in infos:
            for info in infos["final_info"]:
                if info and "episode" in info:
                    print(f"global_step={global_step}, episodic_return={info['episode']['r']}")
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"], global_step)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"], global_step)

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
            if global_step % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                with torch.no_grad():
                    target_max, _ = target_network(data.next_observations).max(dim=1)
                    td_target = data.rewards.flatten() + args.gamma * target_max * (1 - data.dones.flatten())
                old_val = q_network(data.observations).gather(1, data.actions).squeeze()
                loss = F.mse_loss(td_target, old_val)

                if global_step % 100 == 0:
                    writer.add_scalar("losses/td_loss", loss, global_step)
                    writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
                    print("SPS:", int(global_step / (time.time() - start_time)))
                    writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)

                # optimize the model
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            # update target network
            if global_step % args.target_network_frequency == 0:
                for target_network_param, q_network_param in zip(target_network.parameters(), q_network.parameters()):
                    target_network_param.data.copy_(
                        args.tau * q_network_param.data + (1.0 - args.tau) * target_network_param.data
                    )

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.cleanrl_model"
        torch.save(q_network.state_dict(), model_path)
        print(f"model saved to {model_path}")
        from cleanrl_utils.evals.dqn_eval import evaluate

        episodic_returns = evaluate(
            model_path,
            make_env,
            args.env_id,
            eval_episodes=10,
            run_name=f"{run_name}-eval",
            Model=QNetwork,
            device=device,
            epsilon=args.end_e,
        )
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)

        if args.upload_model:
            from cleanrl_utils.huggingface import push_to_hub

            repo_name = f"{args.env_id}-{args.exp_name}-seed{args.seed}"
            repo_id = f"{args.hf_entity}/{repo_name}" if args.hf_entity else repo_name
            push_to_hub(args, episodic_returns, repo_id, "DQN", f"runs/{run_name}", f"videos/{run_name}-eval")

    envs.close()
    writer.close()
"""

PQN = """
# docs and experiment results can be found at https://docs.cleanrl.dev/rl-algorithms/pqn/#pqnpy
import os
import random
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tyro
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    \"\"\"the name of this experiment\"\"\"
    seed: int = 1
    \"\"\"seed of the experiment\"\"\"
    torch_deterministic: bool = True
    \"\"\"if toggled, `torch.backends.cudnn.deterministic=False`\"\"\"
    cuda: bool = True
    \"\"\"if toggled, cuda will be enabled by default\"\"\"
    track: bool = False
    \"\"\"if toggled, this experiment will be tracked with Weights and Biases\"\"\"
    wandb_project_name: str = "cleanRL"
    \"\"\"the wandb's project name\"\"\"
    wandb_entity: str = None
    \"\"\"the entity (team) of wandb's project\"\"\"
    capture_video: bool = False
    \"\"\"whether to capture videos of the agent performances (check out `videos` folder)\"\"\"

    # Algorithm specific arguments
    env_id: str = "CartPole-v1"
    \"\"\"the id of the environment\"\"\"
    total_timesteps: int = 500000
    \"\"\"total timesteps of the experiments\"\"\"
    learning_rate: float = 2.5e-4
    \"\"\"the learning rate of the optimizer\"\"\"
    num_envs: int = 4
    \"\"\"the number of parallel game environments\"\"\"
    num_steps: int = 128
    \"\"\"the number of steps to run for each environment per update\"\"\"
    num_minibatches: int = 4
    \"\"\"the number of mini-batches\"\"\"
    update_epochs: int = 4
    \"\"\"the K epochs to update the policy\"\"\"
    anneal_lr: bool = True
    \"\"\"Toggle learning rate annealing\"\"\"
    gamma: float = 0.99
    \"\"\"the discount factor gamma\"\"\"
    start_e: float = 1
    \"\"\"the starting epsilon for exploration\"\"\"
    end_e: float = 0.05
    \"\"\"the ending epsilon for exploration\"\"\"
    exploration_fraction: float = 0.5
    \"\"\"the fraction of `total_timesteps` it takes from start_e to end_e\"\"\"
    max_grad_norm: float = 10.0
    \"\"\"the maximum norm for the gradient clipping\"\"\"
    q_lambda: float = 0.65
    \"\"\"the lambda for Q(lambda)\"\"\"


def make_env(env_id, seed, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env.action_space.seed(seed)

        return env

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()

        self.network = nn.Sequential(
            layer_init(nn.Linear(np.array(env.single_observation_space.shape).prod(), 120)),
            nn.LayerNorm(120),
            nn.ReLU(),
            layer_init(nn.Linear(120, 84)),
            nn.LayerNorm(84),
            nn.ReLU(),
            layer_init(nn.Linear(84, env.single_action_space.n)),
        )

    def forward(self, x):
        return self.network(x)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


if __name__ == "__main__":
    args = tyro.cli(Args)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            monitor_gym=True,
            save_code=True,
        )
    writer = SummaryWriter(f"runs/{run_name}")
    writer.add_text(
        "hyperparameters",
        "|param|value|\\n|-|-|\\n%s" % ("\\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # env setup
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.seed + i, i, args.capture_video, run_name) for i in range(args.num_envs)]
    )
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete action space is supported"

    # agent setup
    q_network = QNetwork(envs).to(device)
    initialize(q_network)
    optimizer = optim.RAdam(q_network.parameters(), lr=args.learning_rate)

    # storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)

    for iteration in range(1, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
            random_actions = torch.randint(0, envs.single_action_space.n, (args.num_envs,)).to(device)
            with torch.no_grad():
                q_values = q_network(next_obs)
                max_actions = torch.argmax(q_values, dim=1)
                values[step] = q_values[torch.arange(args.num_envs), max_actions].flatten()

            explore = torch.rand((args.num_envs,)).to(device) < epsilon
            action = torch.where(explore, random_actions, max_actions)
            actions[step] = action

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

            if "final_info" in infos:
                for info in infos["final_info"]:
                    if info and "episode" in info:
                        print(f"global_step={global_step}, episodic_return={info['episode']['r']}")
                        writer.add_scalar("charts/episodic_return", info["episode"]["r"], global_step)
                        writer.add_scalar("charts/episodic_length", info["episode"]["l"], global_step)

        # Compute Q(lambda) targets
        with torch.no_grad():
            returns = torch.zeros_like(rewards).to(device)
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    next_value, _ = torch.max(q_network(next_obs), dim=-1)
                    nextnonterminal = 1.0 - next_done
                    returns[t] = rewards[t] + args.gamma * next_value * nextnonterminal
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    next_value = values[t + 1]
                    returns[t] = (
                        rewards[t]
                        + args.gamma * (args.q_lambda * returns[t + 1] + (1 - args.q_lambda) * next_value) * nextnonterminal
                    )

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_returns = returns.reshape(-1)

        # Optimizing the Q-network
        b_inds = np.arange(args.batch_size)
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]

                old_val = q_network(b_obs[mb_inds]).gather(1, b_actions[mb_inds].unsqueeze(-1).long()).squeeze()
                loss = F.mse_loss(b_returns[mb_inds], old_val)

                # optimize the model
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
                optimizer.step()

        writer.add_scalar("losses/td_loss", loss, global_step)
        writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
        print("SPS:", int(global_step / (time.time() - start_time)))
        writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)

    envs.close()
    writer.close()
"""

IMPORTS = (
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
    "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
)
STEPS = {
    "dqn": [
        IMPORTS,
        ("                loss.backward()\n                optimizer.step()",
         "                grads = loss.backward()\n                optimizer.step(grads)"),
    ],
    "pqn": [
        IMPORTS,
        ("                loss.backward()\n                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)\n                optimizer.step()",
         "                grads = loss.backward()\n                nn.utils.clip_grad_norm_(grads, q_network.parameters(), args.max_grad_norm)\n                optimizer.step(grads)"),
    ],
}  # fmt: skip

SIZES = {
    "dqn": dict(total_timesteps=110, buffer_size=200, tau=0.5, target_network_frequency=10, batch_size=8,
                learning_starts=10, train_frequency=4, learning_rate=2.5e-3, cuda=False),
    "pqn": dict(total_timesteps=96, num_envs=4, num_steps=8, num_minibatches=2, update_epochs=2,
                learning_rate=2.5e-3, cuda=False),
}  # fmt: skip


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
        return {"gymnasium": gym, "tyro": tyro,
                "cleanrl_utils": types.ModuleType("cleanrl_utils"), "cleanrl_utils.buffers": buffers}  # fmt: skip

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
    assert len(printed) == {"dqn": 44, "pqn": 32}[program]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    torch_scalars, port_scalars = (
        scalars_written(tmp_path / lib) for lib in ("torch", "retrograd")
    )
    assert list(port_scalars) == list(torch_scalars)
    for tag, points in torch_scalars.items():
        assert [step for step, _ in port_scalars[tag]] == [step for step, _ in points], tag
        np.testing.assert_allclose([v for _, v in port_scalars[tag]], [v for _, v in points],
                                   rtol=2e-4, atol=2e-5, err_msg=tag)  # fmt: skip
