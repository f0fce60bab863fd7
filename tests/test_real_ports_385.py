"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of cleanrl's single-file recurrent PPO for Atari (a ``@dataclass`` ``Args`` read by
``tyro.cli``, a ``SummaryWriter``, the ``if __name__ == "__main__":`` body), on small sizes:

- the agent: a conv trunk (``nn.Conv2d(..., stride=...)``, ``nn.Flatten``, ``nn.Linear``)
  over ``x / 255.0``, an ``nn.LSTM`` initialised by name from ``named_parameters()``
  (``constant_`` biases, ``orthogonal_`` weights), stepped one time step at a time by
  iterating ``zip(hidden, done)`` over tensors, its state zeroed where an episode ended by
  ``(1.0 - d).view(1, -1, 1) * state``, the steps joined by ``torch.flatten(torch.cat(outs),
  0, 1)``; ``Categorical(logits=...)`` heads;
- the rollout: the LSTM state carried across steps and ``clone()``d per iteration, storage
  tensors filled by ``obs[step] = ...``, ``torch.Tensor(ndarray)``, GAE under
  ``torch.no_grad()`` with a ``(1, N)`` bootstrap value;
- the update over minibatches of whole environments: ``index[:, mb_envs].ravel()`` (NumPy
  fancy indexing) into the flattened batch and ``rollout_state[0][:, mb_envs]`` (a NumPy
  index array on the second axis of a tensor), ``b_actions.long()[mb]``, the clipped policy
  and value losses, the entropy bonus, ``clip_grad_norm_(..., max_norm=...)``, Adam with
  ``eps=1e-5`` and an annealed learning rate; the explained variance and the logged scalars.

What stands in: ``gymnasium`` (``SyncVectorEnv``, ``RecordEpisodeStatistics``, identity
``ResizeObservation``/``GrayScaleObservation``/``FrameStack``: the game already gives
``(1, 36, 36)`` frames), cleanrl's ``atari_wrappers`` (identity wrappers), the Atari game (a
deterministic paddle-and-ball drawing, 4 actions with ``FIRE`` among their meanings, episodes
of 3 steps), ``tyro``. The event files each library's ``SummaryWriter`` wrote are read back and
compared, and so are the printed returns and the final weights. ``initialize(agent)`` gives
the port torch's initial weights; ``Categorical.sample`` draws from one stream shared by both
runs. The port changes the gradient lines and the import lines naming ``torch``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from real_ports import assert_records_agree
from rl_standins import Box, Discrete, gymnasium_standin, run_program, scalars_written

pytest.importorskip("tensorboard")

RECURRENT_PPO = """
# recurrent PPO on pixels, one file
import os
import random
import time
import dataclasses

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions import Categorical
from torch.utils import tensorboard

from cleanrl_utils.atari_wrappers import ClipRewardEnv, FireResetEnv  # isort:skip


@dataclasses.dataclass
class Args:
    exp_name: str = os.path.basename(__file__).removesuffix(".py")
    seed: int = 7
    env_id: str = "PaddleNoFrameskip-v4"
    cuda: bool = False
    total_timesteps: int = 100_000
    learning_rate: float = 3e-4
    num_envs: int = 4
    num_steps: int = 64
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 2
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float = None
    # set at run time
    batch_size: int = 0
    num_iterations: int = 0


def make_env(env_id):
    def thunk():
        env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
        if "FIRE" in env.unwrapped.get_action_meanings():  # some games wait for FIRE
            env = FireResetEnv(env)
        env = ClipRewardEnv(env)
        env = gym.wrappers.ResizeObservation(env, (36, 36))
        return gym.wrappers.FrameStack(gym.wrappers.GrayScaleObservation(env), 1)

    return thunk


def ortho(layer, gain=np.sqrt(2), bias=0.0):
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


class RecurrentAgent(nn.Module):
    def __init__(self, envs, memory=32):
        super().__init__()
        self.trunk = nn.Sequential(
            ortho(nn.Conv2d(1, 8, 8, stride=4)),
            nn.ReLU(),
            ortho(nn.Conv2d(8, 16, 4, stride=2)),
            nn.ReLU(),
            nn.Flatten(),
            ortho(nn.Linear(16 * 3 * 3, 64)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(64, memory)
        for name, p in self.lstm.named_parameters():
            if name.startswith("bias"):
                nn.init.constant_(p, 0)
            else:
                nn.init.orthogonal_(p, 1.0)
        self.pi = ortho(nn.Linear(memory, envs.single_action_space.n), gain=0.01)
        self.v = ortho(nn.Linear(memory, 1), gain=1)

    def remember(self, frames, state, done):
        feats = self.trunk(frames / 255.0)
        n_envs = state[0].shape[1]
        feats = feats.reshape((-1, n_envs, self.lstm.input_size))
        done = done.reshape((-1, n_envs))
        outs = []
        for x_t, d_t in zip(feats, done):
            keep = (1.0 - d_t).view(1, -1, 1)  # an episode that just ended starts from zeros
            out, state = self.lstm(x_t.unsqueeze(0), (keep * state[0], keep * state[1]))
            outs.append(out)
        return torch.flatten(torch.cat(outs), 0, 1), state

    def value(self, frames, state, done):
        return self.v(self.remember(frames, state, done)[0])

    def act(self, frames, state, done, action=None):
        h, state = self.remember(frames, state, done)
        dist = Categorical(logits=self.pi(h))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.v(h), state


if __name__ == "__main__":
    args = tyro.cli(Args)
    args.batch_size = args.num_envs * args.num_steps
    args.num_iterations = args.total_timesteps // (args.num_envs * args.num_steps)
    run_name = "__".join([args.env_id, args.exp_name, str(args.seed), str(int(time.time()))])
    writer = tensorboard.SummaryWriter(os.path.join("runs", run_name))
    table = "\\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
    writer.add_text("hyperparameters", "|param|value|\\n|-|-|\\n" + table)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    use_gpu = args.cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_gpu else "cpu")

    envs = gym.vector.SyncVectorEnv([make_env(args.env_id) for _ in range(args.num_envs)])
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "discrete actions only"
    agent = RecurrentAgent(envs).to(device)
    initialize(agent)
    optimizer = optim.Adam(agent.parameters(), eps=1e-5, lr=args.learning_rate)

    T, N = args.num_steps, args.num_envs
    obs = torch.zeros((T, N) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((T, N) + envs.single_action_space.shape).to(device)
    logprobs, rewards, dones, values = (torch.zeros((T, N)).to(device) for _ in range(4))

    global_step, started = 0, time.time()
    frames, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(frames).to(device)
    next_done = torch.zeros(N).to(device)
    shape = (agent.lstm.num_layers, N, agent.lstm.hidden_size)
    next_state = (torch.zeros(shape).to(device), torch.zeros(shape).to(device))

    for iteration in range(args.num_iterations):
        rollout_state = (next_state[0].clone(), next_state[1].clone())
        if args.anneal_lr:
            left = 1.0 - iteration / args.num_iterations
            optimizer.param_groups[0]["lr"] = left * args.learning_rate

        for step in range(T):
            global_step += N
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value, next_state = agent.act(next_obs, next_state, next_done)
            values[step] = value.flatten()  # (N, 1) -> (N,)
            actions[step], logprobs[step] = action, logprob
            frames, reward, term, trunc, infos = envs.step(action.cpu().numpy())
            rewards[step] = torch.tensor(reward).to(device).view(-1)  # (N,) floats
            next_obs = torch.Tensor(frames).to(device)
            next_done = torch.Tensor(np.logical_or(term, trunc)).to(device)
            for info in infos.get("final_info", []):
                if info is not None and "episode" in info:
                    ret, length = info["episode"]["r"], info["episode"]["l"]
                    print(f"global_step={global_step}, episodic_return={ret}")
                    writer.add_scalar("charts/episodic_return", ret, global_step)
                    writer.add_scalar("charts/episodic_length", length, global_step)

        with torch.no_grad():  # generalised advantage estimation, bootstrapped from the last state
            last_value = agent.value(next_obs, next_state, next_done).reshape(1, -1)
            running, advantages = 0, torch.zeros_like(rewards).to(device)
            for t in reversed(range(T)):
                alive = 1.0 - (next_done if t == T - 1 else dones[t + 1])
                ahead = last_value if t == T - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * ahead * alive - values[t]
                advantages[t] = running = delta + args.gamma * args.gae_lambda * alive * running
            returns = advantages + values

        obs_shape, act_shape = envs.single_observation_space.shape, envs.single_action_space.shape
        b_obs, b_actions = obs.reshape((-1, *obs_shape)), actions.reshape((-1, *act_shape))
        b_logprobs, b_dones = logprobs.reshape(-1), dones.reshape(-1)
        b_adv, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)

        # minibatches of whole environments, so each sequence replays from its start state
        envs_per_mb = N // args.num_minibatches
        env_order = np.arange(N)
        by_time_env = np.arange(args.batch_size).reshape(T, N)
        clipfracs = []
        for _ in range(args.update_epochs):
            np.random.shuffle(env_order)
            for first in range(0, N, envs_per_mb):
                mb_envs = env_order[first : first + envs_per_mb]
                mb = by_time_env[:, mb_envs].ravel()
                start = (rollout_state[0][:, mb_envs], rollout_state[1][:, mb_envs])
                _, newlogprob, entropy, newvalue, _ = agent.act(
                    b_obs[mb], start, b_dones[mb], b_actions.long()[mb]
                )
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()
                with torch.no_grad():
                    old_approx_kl = -logratio.mean()
                    approx_kl = (ratio - 1 - logratio).mean()  # the low-variance estimator
                    clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())

                adv = b_adv[mb]
                if args.norm_adv:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clipped_ratio = torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(-adv * ratio, -adv * clipped_ratio).mean()

                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    moved = torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                    far = (newvalue - b_returns[mb]) ** 2
                    near = (b_values[mb] + moved - b_returns[mb]) ** 2
                    v_loss = 0.5 * torch.max(far, near).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), max_norm=args.max_grad_norm)
                optimizer.step()
            if args.target_kl is not None and approx_kl > args.target_kl:  # stop early
                break

        predicted, target = b_values.cpu().numpy(), b_returns.cpu().numpy()
        spread = np.var(target)
        explained = np.nan if spread == 0 else 1 - np.var(target - predicted) / spread
        logged = {
            "charts/learning_rate": optimizer.param_groups[0]["lr"],
            "losses/value_loss": v_loss.item(),
            "losses/policy_loss": pg_loss.item(),
            "losses/entropy": entropy_loss.item(),
            "losses/old_approx_kl": old_approx_kl.item(),
            "losses/approx_kl": approx_kl.item(),
            "losses/clipfrac": np.mean(clipfracs),
            "losses/explained_variance": explained,
        }
        for tag, scalar in logged.items():
            writer.add_scalar(tag, scalar, global_step)
        sps = int(global_step / (time.time() - started))
        print("SPS:", sps)
        writer.add_scalar("charts/SPS", sps, global_step)

    envs.close()
    writer.close()
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("                loss.backward()\n", "                grads = loss.backward()\n"),
    ("clip_grad_norm_(agent.parameters(),", "clip_grad_norm_(grads, agent.parameters(),"),
    ("                optimizer.step()", "                optimizer.step(grads)"),
]

SIZES = dict(total_timesteps=16, num_envs=2, num_steps=4, num_minibatches=2, update_epochs=2,
             learning_rate=2.5e-3, clip_coef=0.1)  # fmt: skip


class PaddleGame:
    """An Atari stand-in with gymnasium's API: a paddle moved by actions 2 and 3 (``RIGHT``,
    ``LEFT``) under a falling ball, drawn in a ``(1, 36, 36)`` uint8 frame; rewarded for
    keeping the paddle under the ball; 3 steps an episode."""

    def __init__(self):
        self.observation_space = Box(0, 255, (1, 36, 36), dtype=np.uint8)
        self.action_space = Discrete(4)
        self.unwrapped = self

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def frame(self):
        image = np.zeros((1, 36, 36), np.uint8)
        image[0, 31:33, self.paddle : self.paddle + 6] = 200
        image[0, 9 * self.t + 2 : 9 * self.t + 4, 17:19] = 255
        return image

    def reset(self, seed=None):
        self.t, self.paddle = 0, 4
        return self.frame(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + {2: 4, 3: -4}.get(int(action), 0), 0, 30))
        self.t += 1
        reward = 1.0 - abs(self.paddle + 3 - 18) / 18.0
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
    for name in ("ClipRewardEnv", "FireResetEnv"):
        setattr(wrappers, name, Identity)
    gym = gymnasium_standin(lambda env_id: PaddleGame(), ResizeObservation=Identity,
                            GrayScaleObservation=Identity, FrameStack=Identity)  # fmt: skip
    tyro = types.ModuleType("tyro")
    tyro.cli = lambda cls: cls(**SIZES)
    return {"gymnasium": gym, "tyro": tyro, "cleanrl_utils": types.ModuleType("cleanrl_utils"),
            "cleanrl_utils.atari_wrappers": wrappers}  # fmt: skip


def test_recurrent_pixel_ppo_trains_and_logs_as_torch(monkeypatch, capsys, tmp_path):
    theirs, ours = run_program(
        monkeypatch, RECURRENT_PPO, STEPS, None, seed=385, modules_of=modules,
        workdir=tmp_path, __name__="__main__", __file__="recurrent_ppo.py",
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
