# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
cleanrl's recurrent PPO for Atari, whole (github.com/vwxyzjn/cleanrl
``cleanrl/ppo_atari_lstm.py``: the ``@dataclass`` ``Args`` through ``tyro.cli``, the
``SummaryWriter``, the ``if __name__ == "__main__":`` body), on small sizes:

- the ``Agent``: a Nature-CNN trunk (``nn.Conv2d(1, 32, 8, stride=4)``, ``nn.Flatten``,
  ``nn.Linear(64 * 7 * 7, 512)``) over ``x / 255.0``, an ``nn.LSTM(512, 128)`` initialized by
  name from ``named_parameters()`` (``constant_`` biases, ``orthogonal_`` weights), stepped
  one time step at a time by iterating ``zip(hidden, done)`` over tensors, its state reset
  where an episode ended by ``(1.0 - d).view(1, -1, 1) * lstm_state[0]``, the steps joined by
  ``torch.flatten(torch.cat(new_hidden), 0, 1)``; ``Categorical(logits=...)`` heads;
- the rollout: the LSTM state carried across steps and cloned per iteration
  (``next_lstm_state[0].clone()``), storage tensors, GAE under ``torch.no_grad()``;
- the update over minibatches of whole environments: ``flatinds[:, mbenvinds].ravel()`` (NumPy
  fancy indexing) into the flattened batch and ``initial_lstm_state[0][:, mbenvinds]`` (a
  NumPy index array on the second axis of a tensor), ``b_actions.long()[mb_inds]``, the
  clipped policy and value losses, the entropy bonus, ``clip_grad_norm_``, Adam with
  ``eps=1e-5`` and the annealed learning rate; the explained variance and the logged scalars.

What stands in: ``gymnasium`` (``SyncVectorEnv``, ``RecordEpisodeStatistics``, and identity
``ResizeObservation``/``GrayScaleObservation``/``FrameStack``: the environment already gives
``(1, 84, 84)`` frames), cleanrl's ``atari_wrappers`` (identity wrappers), the Atari game (a
deterministic paddle-and-ball drawing of 84 by 84 pixels, 4 actions with ``FIRE`` among their
meanings, episodes of 3 steps), ``tyro``. The event files each library's ``SummaryWriter``
wrote are read back and compared, and so are the printed returns and the final weights.
``initialize(agent)`` gives the port torch's initial weights; ``Categorical.sample`` draws
from one stream shared by both runs. The port changes the gradient lines and the import lines
naming ``torch``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from real_ports import assert_records_agree
from rl_standins import Box, Discrete, gymnasium_standin, run_program, scalars_written

pytest.importorskip("tensorboard")

PPO_ATARI_LSTM = """
# docs and experiment results can be found at https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_atari_lstmpy
import os
import random
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical
from torch.utils.tensorboard import SummaryWriter

from cleanrl_utils.atari_wrappers import (  # isort:skip
    ClipRewardEnv,
    EpisodicLifeEnv,
    FireResetEnv,
    MaxAndSkipEnv,
    NoopResetEnv,
)


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
    env_id: str = "BreakoutNoFrameskip-v4"
    \"\"\"the id of the environment\"\"\"
    total_timesteps: int = 10000000
    \"\"\"total timesteps of the experiments\"\"\"
    learning_rate: float = 2.5e-4
    \"\"\"the learning rate of the optimizer\"\"\"
    num_envs: int = 8
    \"\"\"the number of parallel game environments\"\"\"
    num_steps: int = 128
    \"\"\"the number of steps to run in each environment per policy rollout\"\"\"
    anneal_lr: bool = True
    \"\"\"Toggle learning rate annealing for policy and value networks\"\"\"
    gamma: float = 0.99
    \"\"\"the discount factor gamma\"\"\"
    gae_lambda: float = 0.95
    \"\"\"the lambda for the general advantage estimation\"\"\"
    num_minibatches: int = 4
    \"\"\"the number of mini-batches\"\"\"
    update_epochs: int = 4
    \"\"\"the K epochs to update the policy\"\"\"
    norm_adv: bool = True
    \"\"\"Toggles advantages normalization\"\"\"
    clip_coef: float = 0.1
    \"\"\"the surrogate clipping coefficient\"\"\"
    clip_vloss: bool = True
    \"\"\"Toggles whether or not to use a clipped loss for the value function, as per the paper.\"\"\"
    ent_coef: float = 0.01
    \"\"\"coefficient of the entropy\"\"\"
    vf_coef: float = 0.5
    \"\"\"coefficient of the value function\"\"\"
    max_grad_norm: float = 0.5
    \"\"\"the maximum norm for the gradient clipping\"\"\"
    target_kl: float = None
    \"\"\"the target KL divergence threshold\"\"\"

    # to be filled in runtime
    batch_size: int = 0
    \"\"\"the batch size (computed in runtime)\"\"\"
    minibatch_size: int = 0
    \"\"\"the mini-batch size (computed in runtime)\"\"\"
    num_iterations: int = 0
    \"\"\"the number of iterations (computed in runtime)\"\"\"


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        env = EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        env = ClipRewardEnv(env)
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayScaleObservation(env)
        env = gym.wrappers.FrameStack(env, 1)
        return env

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(1, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, 128)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0)
            elif "weight" in name:
                nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(128, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1)

    def get_states(self, x, lstm_state, done):
        hidden = self.network(x / 255.0)

        # LSTM logic
        batch_size = lstm_state[0].shape[1]
        hidden = hidden.reshape((-1, batch_size, self.lstm.input_size))
        done = done.reshape((-1, batch_size))
        new_hidden = []
        for h, d in zip(hidden, done):
            h, lstm_state = self.lstm(
                h.unsqueeze(0),
                (
                    (1.0 - d).view(1, -1, 1) * lstm_state[0],
                    (1.0 - d).view(1, -1, 1) * lstm_state[1],
                ),
            )
            new_hidden += [h]
        new_hidden = torch.flatten(torch.cat(new_hidden), 0, 1)
        return new_hidden, lstm_state

    def get_value(self, x, lstm_state, done):
        hidden, _ = self.get_states(x, lstm_state, done)
        return self.critic(hidden)

    def get_action_and_value(self, x, lstm_state, done, action=None):
        hidden, lstm_state = self.get_states(x, lstm_state, done)
        logits = self.actor(hidden)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden), lstm_state


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
        [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)],
    )
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete action space is supported"

    agent = Agent(envs).to(device)
    initialize(agent)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    next_lstm_state = (
        torch.zeros(agent.lstm.num_layers, args.num_envs, agent.lstm.hidden_size).to(device),
        torch.zeros(agent.lstm.num_layers, args.num_envs, agent.lstm.hidden_size).to(device),
    )  # hidden and cell states (see https://youtu.be/8HyCNIVRbSU)

    for iteration in range(1, args.num_iterations + 1):
        initial_lstm_state = (next_lstm_state[0].clone(), next_lstm_state[1].clone())
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value, next_lstm_state = agent.get_action_and_value(next_obs, next_lstm_state, next_done)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

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

        # bootstrap value if not done
        with torch.no_grad():
            next_value = agent.get_value(
                next_obs,
                next_lstm_state,
                next_done,
            ).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_dones = dones.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # Optimizing the policy and value network
        assert args.num_envs % args.num_minibatches == 0
        envsperbatch = args.num_envs // args.num_minibatches
        envinds = np.arange(args.num_envs)
        flatinds = np.arange(args.batch_size).reshape(args.num_steps, args.num_envs)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(envinds)
            for start in range(0, args.num_envs, envsperbatch):
                end = start + envsperbatch
                mbenvinds = envinds[start:end]
                mb_inds = flatinds[:, mbenvinds].ravel()  # be really careful about the index

                _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
                    b_obs[mb_inds],
                    (initial_lstm_state[0][:, mbenvinds], initial_lstm_state[1][:, mbenvinds]),
                    b_dones[mb_inds],
                    b_actions.long()[mb_inds],
                )
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # calculate approx_kl http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss
                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds],
                        -args.clip_coef,
                        args.clip_coef,
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                    v_loss = 0.5 * v_loss_max.mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", np.mean(clipfracs), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        print("SPS:", int(global_step / (time.time() - start_time)))
        writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)

    envs.close()
    writer.close()
"""

STEPS = [
    ("import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
     "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n"),
    ("                loss.backward()\n                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)\n                optimizer.step()",
     "                grads = loss.backward()\n                nn.utils.clip_grad_norm_(grads, agent.parameters(), args.max_grad_norm)\n                optimizer.step(grads)"),
]  # fmt: skip

SIZES = dict(total_timesteps=16, num_envs=2, num_steps=4, num_minibatches=2, update_epochs=2,
             learning_rate=2.5e-3, cuda=False)  # fmt: skip


class PaddleGame:
    """An Atari stand-in with gymnasium's API: a paddle moved by actions 2 and 3 (``RIGHT``,
    ``LEFT``) and a falling ball, drawn in a ``(1, 84, 84)`` uint8 frame; rewarded for keeping
    the paddle under the ball; 3 steps an episode."""

    def __init__(self):
        self.observation_space = Box(0, 255, (1, 84, 84), dtype=np.uint8)
        self.action_space = Discrete(4)
        self.unwrapped = self

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def frame(self):
        image = np.zeros((1, 84, 84), np.uint8)
        image[0, 74:78, self.paddle : self.paddle + 12] = 200
        image[0, 20 * self.t + 4 : 20 * self.t + 8, 40:44] = 255
        return image

    def reset(self, seed=None):
        self.t, self.paddle = 0, 10
        return self.frame(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + {2: 9, 3: -9}.get(int(action), 0), 0, 72))
        self.t += 1
        reward = 1.0 - abs(self.paddle + 6 - 42) / 42.0
        return self.frame(), reward, self.t >= 3, False, {}


class Identity:
    """A wrapper that changes nothing (the frames are already what the real one makes)."""

    def __init__(self, env, *args, **kwargs):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, **kwargs):
        return self.env.reset(**kwargs)

    def step(self, action):
        return self.env.step(action)


def modules(run):
    wrappers = types.ModuleType("cleanrl_utils.atari_wrappers")
    for name in (
        "ClipRewardEnv",
        "EpisodicLifeEnv",
        "FireResetEnv",
        "MaxAndSkipEnv",
        "NoopResetEnv",
    ):
        setattr(wrappers, name, Identity)
    gym = gymnasium_standin(lambda env_id: PaddleGame(), ResizeObservation=Identity,
                            GrayScaleObservation=Identity, FrameStack=Identity)  # fmt: skip
    tyro = types.ModuleType("tyro")
    tyro.cli = lambda cls: cls(**SIZES)
    return {"gymnasium": gym, "tyro": tyro, "cleanrl_utils": types.ModuleType("cleanrl_utils"),
            "cleanrl_utils.atari_wrappers": wrappers}  # fmt: skip


def test_cleanrl_ppo_atari_lstm_trains_and_logs_as_torch(monkeypatch, capsys, tmp_path):
    theirs, ours = run_program(
        monkeypatch, PPO_ATARI_LSTM, STEPS, None, seed=385, modules_of=modules,
        workdir=tmp_path, __name__="__main__", __file__="ppo_atari_lstm.py",
    )  # fmt: skip
    printed = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("global_step=")
    ]
    assert printed[: len(printed) // 2] == printed[len(printed) // 2 :]
    assert len(printed) == 2 * 4  # two episodes ended in each of the two copies
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    torch_scalars, port_scalars = (
        scalars_written(tmp_path / lib) for lib in ("torch", "retrograd")
    )
    assert list(port_scalars) == list(torch_scalars)
    assert len(torch_scalars) == 10
    for tag, points in torch_scalars.items():
        assert [step for step, _ in port_scalars[tag]] == [step for step, _ in points], tag
        np.testing.assert_allclose([v for _, v in port_scalars[tag]], [v for _, v in points],
                                   rtol=2e-4, atol=2e-5, err_msg=tag)  # fmt: skip
