"""Stand-ins for the reinforcement-learning ports (``tests/test_real_ports_38*.py``): gym's
spaces and a deterministic point-mass environment, Spinning Up's ``EpochLogger``, one shared
stream of Gaussian noise for ``Normal.rsample``, and :func:`run_program`, which runs a program
under torch and its port under retrograd with them."""

from __future__ import annotations

import random
import sys
import types

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, initializer, params_of, port, run_source


class Box:
    """``gym.spaces.Box``: bounds, shape and ``sample`` from NumPy's global stream."""

    def __init__(self, low, high, shape, dtype=np.float32):
        self.low = np.full(shape, low, dtype=dtype)
        self.high = np.full(shape, high, dtype=dtype)
        self.shape = tuple(shape)
        self.dtype = dtype

    def sample(self):
        return np.random.uniform(self.low, self.high).astype(self.dtype)


class Discrete:
    """``gym.spaces.Discrete``: ``sample`` from NumPy's global stream, or from the space's own
    once ``seed`` has been called."""

    def __init__(self, n):
        self.n = n
        self.shape = ()
        self.dtype = np.dtype(np.int64)
        self.rng = np.random

    def seed(self, seed=None):
        self.rng = np.random.RandomState(seed)
        return [seed]

    def sample(self):
        return self.rng.randint(self.n)


class PointMassEnv:
    """A deterministic point mass with gym's old API (``reset() -> obs``, ``step(a) -> (obs,
    reward, done, info)``) or, with ``new_api``, gymnasium's (``reset() -> (obs, info)``, a
    five-value ``step``); episodes end after ``episode_length`` steps. A ``Discrete`` action
    ``k`` pushes by ``k - 1``; a ``Box`` action by its mean. Each action taken is appended to
    ``actions`` when one is given."""

    START = np.array([0.3, -0.2, 0.1, 0.25, -0.35], np.float32)
    DRIFT = np.array([0.1, -0.15, 0.05, -0.05, 0.12])

    def __init__(self, action_space, episode_length=4, obs_dim=3, new_api=False, actions=None):
        self.observation_space = Box(-np.inf, np.inf, (obs_dim,))
        self.action_space = action_space
        self.episode_length = episode_length
        self.obs_dim, self.new_api, self.actions = obs_dim, new_api, actions

    def reset(self, seed=None):
        self.t = 0
        self.state = self.START[: self.obs_dim].copy()
        return (self.state.copy(), {}) if self.new_api else self.state.copy()

    def step(self, action):
        if self.actions is not None:
            self.actions.append(np.array(action, np.float64))
        push = np.asarray(action, np.float64).mean()
        if isinstance(self.action_space, Discrete):
            push = push - 1.0
        self.state = np.tanh(self.state + 0.4 * push + self.DRIFT[: self.obs_dim]).astype(
            np.float32
        )
        self.t += 1
        reward = float(-np.abs(self.state).sum() + 0.1 * push)
        done = self.t >= self.episode_length
        if self.new_api:
            return self.state.copy(), reward, done, False, {}
        return self.state.copy(), reward, done, {}

    def close(self):
        pass


def fake_gym(make) -> types.ModuleType:
    """A ``gym`` module whose ``make(name)`` is ``make(name)`` and whose ``spaces`` holds
    :class:`Box` and :class:`Discrete`."""
    gym = types.ModuleType("gym")
    gym.make = make
    gym.spaces = types.ModuleType("gym.spaces")
    gym.spaces.Box, gym.spaces.Discrete = Box, Discrete
    return gym


class RecordEpisodeStatistics:
    """``gymnasium.wrappers.RecordEpisodeStatistics``: ``info["episode"]`` holds the return
    ``r`` and length ``l`` of the episode that just ended."""

    def __init__(self, env):
        self.env = env
        self.action_space, self.observation_space = env.action_space, env.observation_space

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, seed=None):
        self.episode_return, self.episode_length = 0.0, 0
        return self.env.reset(seed=seed)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += reward
        self.episode_length += 1
        if terminated or truncated:
            info = dict(info, episode={"r": np.array([self.episode_return], np.float32),
                                       "l": np.array([self.episode_length], np.int32)})  # fmt: skip
        return obs, reward, terminated, truncated, info


class SyncVectorEnv:
    """``gymnasium.vector.SyncVectorEnv`` as gymnasium 0.29 has it: stacked observations,
    autoreset, and ``infos["final_info"]``/``["final_observation"]`` when an episode ends.
    Copy ``i``'s episodes end terminated for even ``i``, truncated for odd ``i``."""

    def __init__(self, env_fns):
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space

    def reset(self, seed=None):
        return np.stack([env.reset(seed=seed)[0] for env in self.envs]), {}

    def step(self, actions):
        observations, rewards, terminations, truncations = [], [], [], []
        final_obs, final_info, infos = [None] * self.num_envs, [None] * self.num_envs, {}
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            obs, reward, done, _, info = env.step(action)
            terminated, truncated = (done, False) if i % 2 == 0 else (False, done)
            if done:
                final_obs[i], final_info[i] = obs, info
                obs, _ = env.reset()
                infos = {"final_observation": np.array(final_obs, dtype=object),
                         "final_info": np.array(final_info, dtype=object)}  # fmt: skip
            observations.append(obs)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
        return (np.stack(observations), np.array(rewards), np.array(terminations),
                np.array(truncations), infos)  # fmt: skip

    def close(self):
        pass


def gymnasium_standin(make, **wrappers):
    """A ``gymnasium`` module: ``make(env_id)``, ``wrappers.RecordEpisodeStatistics`` (and the
    ``wrappers`` given), ``vector.SyncVectorEnv``, ``spaces.Box``/``Discrete``."""
    gym = types.ModuleType("gymnasium")
    gym.make = lambda env_id, **kwargs: make(env_id)
    gym.wrappers = types.SimpleNamespace(
        RecordEpisodeStatistics=RecordEpisodeStatistics, **wrappers
    )
    gym.vector = types.SimpleNamespace(SyncVectorEnv=SyncVectorEnv)
    gym.spaces = types.SimpleNamespace(Box=Box, Discrete=Discrete)
    return gym


def scalars_written(folder):
    """``{tag: [(step, value), ...]}`` of the event file under ``folder/runs``."""
    (run,) = (folder / "runs").iterdir()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in sorted(events.Tags()["scalars"]) if tag != "charts/SPS"}  # fmt: skip


def epoch_logger(record: list):
    """Spinning Up's ``EpochLogger`` as the algorithms call it: each ``store`` and each
    ``log_tabular`` statistic goes into ``record`` (the wall time left out)."""

    class EpochLogger:
        def __init__(self, **kwargs):
            self.epoch_dict = {}

        def save_config(self, config):
            pass

        def setup_pytorch_saver(self, what):
            pass

        def save_state(self, state, itr=None):
            pass

        def log(self, msg):
            print(msg)

        def store(self, **kwargs):
            for k, v in kwargs.items():
                self.epoch_dict.setdefault(k, []).append(v)
            record.append({k: np.asarray(v, np.float64) for k, v in kwargs.items()})

        def log_tabular(self, key, val=None, with_min_and_max=False, average_only=False):
            if key == "Time":
                return
            if val is None:
                v = np.concatenate([np.ravel(x) for x in self.epoch_dict[key]])
                val = [v.mean()] if average_only else [v.mean(), v.std()]
                if with_min_and_max:
                    val += [v.min(), v.max()]
                self.epoch_dict[key] = []
            record.append({key: np.asarray(val, np.float64)})

        def dump_tabular(self):
            print("-" * 10)

    return EpochLogger


class SharedPolicyDraws:
    """``Normal.rsample``/``sample`` of a library as ``loc + scale * eps`` and
    ``Categorical.sample`` by the inverse CDF of a uniform draw, ``eps`` and the uniforms from
    one seeded stream: the same draws in both runs."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def patch(self, monkeypatch, lib):
        rng = self.rng

        def rsample(self, sample_shape=()):
            eps = lib.tensor(rng.standard_normal(tuple(self.loc.shape)), dtype=self.loc.dtype)
            return self.loc + self.scale * eps

        def sample(self, sample_shape=()):
            with lib.no_grad():
                return rsample(self, sample_shape).detach()

        def categorical(self, sample_shape=()):
            p = self.probs.detach().numpy().astype(np.float64)
            u = rng.random(p.shape[:-1] + (1,))
            index = (np.cumsum(p, -1) < u).sum(-1).clip(0, p.shape[-1] - 1)
            return lib.tensor(index, dtype=lib.int64)

        monkeypatch.setattr(lib.distributions.Normal, "rsample", rsample)
        monkeypatch.setattr(lib.distributions.Normal, "sample", sample)
        monkeypatch.setattr(lib.distributions.Categorical, "sample", categorical)


def run_program(
    monkeypatch, source, steps, make_gym_env, seed, modules_of=None, workdir=None, **names
):
    """The records of ``source`` run under torch and of its port under retrograd, each with its
    own ``gym`` stand-in (``gym.make(name)`` is ``make_gym_env(name, run)``), ``EpochLogger`` and
    policy draws seeded by ``seed``, ``torch.rand``/``randn``/``randint`` drawing from one
    stream (:class:`real_ports.SharedDraws`), and Python's, NumPy's and the library's global
    streams seeded by it. ``modules_of(run)`` names the stand-in modules to import (``{name:
    module}``); a name given as ``<name>_of`` is bound to ``<name>_of(run)`` in each run, where
    ``run.lib`` is the library, ``run.record`` that run's record and ``run.initialize`` the
    :func:`initializer` shared by both runs (``initialize`` in the program). The parameters of
    the modules given to ``initialize`` close each record. Given a ``workdir``, each run works
    in its own folder of it, ``torch`` or ``retrograd``."""
    records, shared_initialize = [], initializer()
    for lib in (torch, rg):
        record, modules = [], []

        def initialize(module, modules=modules):
            modules.append(module)
            shared_initialize(module)

        run = types.SimpleNamespace(lib=lib, record=record, initialize=initialize)
        with monkeypatch.context() as patch, SharedDraws(lib, seed):
            gym = fake_gym(lambda name, run=run: make_gym_env(name, run))
            patch.setitem(sys.modules, "gym", gym)
            patch.setitem(sys.modules, "gym.spaces", gym.spaces)
            for name, module in (modules_of(run) if modules_of else {}).items():
                patch.setitem(sys.modules, name, module)
            if workdir is not None:
                folder = workdir / lib.__name__
                folder.mkdir()
                patch.chdir(folder)
            SharedPolicyDraws(seed).patch(patch, lib)
            random.seed(seed)
            np.random.seed(seed)
            lib.manual_seed(seed)
            text = source if lib is torch else port(source, steps)
            text = text.replace("from torch.", "from retrograd." if lib is rg else "from torch.")
            made = {
                k.removesuffix("_of") if k.endswith("_of") else k: v(run)
                if k.endswith("_of")
                else v
                for k, v in names.items()
            }
            run_source(
                text, lib, types=types, record=record, EpochLogger=epoch_logger(record),
                initialize=initialize, params_of=params_of, **made,
            )  # fmt: skip
        if modules:
            record.append(params_of(*modules))
        records.append(record)
    return records
