# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
OpenAI Spinning Up's proximal policy optimization as written (``spinup/algos/pytorch/ppo/
core.py`` and ``ppo.py``), small, with a discrete and a continuous action space:

- ``core.py``: ``combined_shape`` (``np.isscalar`` of an empty shape), ``mlp`` of
  ``nn.Identity``-ended ``nn.Sequential`` layers, ``count_vars``, ``discount_cumsum`` by
  ``scipy.signal.lfilter`` of the reversed rewards, ``Actor.forward`` returning the
  distribution and ``logp_a``, ``MLPCategoricalActor`` (``Categorical(logits=...)`` whose
  ``log_prob`` takes the float32 actions of the buffer), ``MLPGaussianActor`` (a
  ``torch.nn.Parameter(torch.as_tensor(log_std))`` of a NumPy array, ``Normal(mu,
  torch.exp(self.log_std))``, ``log_prob(act).sum(axis=-1)``), ``MLPCritic`` with
  ``torch.squeeze(..., -1)``, ``MLPActorCritic.step`` under ``torch.no_grad()`` returning
  ``a.numpy(), v.numpy(), logp_a.numpy()``, ``isinstance`` of gym's ``Box``/``Discrete``;
- ``ppo.py``: the ``PPOBuffer`` (GAE-Lambda by ``discount_cumsum`` of the deltas, the
  rewards-to-go, the normalized advantages handed out by ``torch.as_tensor(v,
  dtype=torch.float32)``), the clipped objective (``torch.exp(logp - logp_old)``,
  ``torch.clamp``, ``torch.min``), the approximate KL, ``pi.entropy().mean().item()``, the
  clip fraction by ``torch.as_tensor(clipped, dtype=torch.float32)`` of ``ratio.gt(...) |
  ratio.lt(...)``, early stopping on the KL, the value loss, two ``Adam`` optimizers imported by
  ``from torch.optim import Adam``, and the epoch loop with its cut-off trajectories
  bootstrapped by ``ac.step``.

What stands in: ``gym`` (a deterministic point-mass environment with gym's old four-value
``step``), Spinning Up's ``EpochLogger`` (its ``store``d values and ``log_tabular`` statistics
are the records), its MPI helpers for one process (``mpi_statistics_scalar`` the NumPy mean
and standard deviation), the import of ``core`` (the program's own definitions); the long
docstring of ``ppo`` is left out. The gradient lines change (``grads = loss.backward()``,
``optimizer.step(grads)``) and the import lines naming ``torch``. ``initialize(ac)`` gives the
port torch's initial weights; ``Normal.sample`` and ``Categorical.sample`` draw from one stream
shared by both runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree
from rl_standins import Box, Discrete, PointMassEnv, run_program

PPO_CORE = """
import numpy as np
import scipy.signal
from gym.spaces import Box, Discrete

import torch
import torch.nn as nn
from torch.distributions.normal import Normal
from torch.distributions.categorical import Categorical


def combined_shape(length, shape=None):
    if shape is None:
        return (length,)
    return (length, shape) if np.isscalar(shape) else (length, *shape)


def mlp(sizes, activation, output_activation=nn.Identity):
    layers = []
    for j in range(len(sizes)-1):
        act = activation if j < len(sizes)-2 else output_activation
        layers += [nn.Linear(sizes[j], sizes[j+1]), act()]
    return nn.Sequential(*layers)


def count_vars(module):
    return sum([np.prod(p.shape) for p in module.parameters()])


def discount_cumsum(x, discount):
    \"\"\"
    magic from rllab for computing discounted cumulative sums of vectors.

    input:
        vector x,
        [x0,
         x1,
         x2]

    output:
        [x0 + discount * x1 + discount^2 * x2,
         x1 + discount * x2,
         x2]
    \"\"\"
    return scipy.signal.lfilter([1], [1, float(-discount)], x[::-1], axis=0)[::-1]


class Actor(nn.Module):

    def _distribution(self, obs):
        raise NotImplementedError

    def _log_prob_from_distribution(self, pi, act):
        raise NotImplementedError

    def forward(self, obs, act=None):
        # Produce action distributions for given observations, and
        # optionally compute the log likelihood of given actions under
        # those distributions.
        pi = self._distribution(obs)
        logp_a = None
        if act is not None:
            logp_a = self._log_prob_from_distribution(pi, act)
        return pi, logp_a


class MLPCategoricalActor(Actor):

    def __init__(self, obs_dim, act_dim, hidden_sizes, activation):
        super().__init__()
        self.logits_net = mlp([obs_dim] + list(hidden_sizes) + [act_dim], activation)

    def _distribution(self, obs):
        logits = self.logits_net(obs)
        return Categorical(logits=logits)

    def _log_prob_from_distribution(self, pi, act):
        return pi.log_prob(act)


class MLPGaussianActor(Actor):

    def __init__(self, obs_dim, act_dim, hidden_sizes, activation):
        super().__init__()
        log_std = -0.5 * np.ones(act_dim, dtype=np.float32)
        self.log_std = torch.nn.Parameter(torch.as_tensor(log_std))
        self.mu_net = mlp([obs_dim] + list(hidden_sizes) + [act_dim], activation)

    def _distribution(self, obs):
        mu = self.mu_net(obs)
        std = torch.exp(self.log_std)
        return Normal(mu, std)

    def _log_prob_from_distribution(self, pi, act):
        return pi.log_prob(act).sum(axis=-1)    # Last axis sum needed for Torch Normal distribution


class MLPCritic(nn.Module):

    def __init__(self, obs_dim, hidden_sizes, activation):
        super().__init__()
        self.v_net = mlp([obs_dim] + list(hidden_sizes) + [1], activation)

    def forward(self, obs):
        return torch.squeeze(self.v_net(obs), -1) # Critical to ensure v has right shape.



class MLPActorCritic(nn.Module):


    def __init__(self, observation_space, action_space,
                 hidden_sizes=(64,64), activation=nn.Tanh):
        super().__init__()

        obs_dim = observation_space.shape[0]

        # policy builder depends on action space
        if isinstance(action_space, Box):
            self.pi = MLPGaussianActor(obs_dim, action_space.shape[0], hidden_sizes, activation)
        elif isinstance(action_space, Discrete):
            self.pi = MLPCategoricalActor(obs_dim, action_space.n, hidden_sizes, activation)

        # build value function
        self.v  = MLPCritic(obs_dim, hidden_sizes, activation)

    def step(self, obs):
        with torch.no_grad():
            pi = self.pi._distribution(obs)
            a = pi.sample()
            logp_a = self.pi._log_prob_from_distribution(pi, a)
            v = self.v(obs)
        return a.numpy(), v.numpy(), logp_a.numpy()

    def act(self, obs):
        return self.step(obs)[0]
"""

PPO_MAIN = """
import numpy as np
import torch
from torch.optim import Adam
import gym
import time
core = types.SimpleNamespace(combined_shape=combined_shape, count_vars=count_vars, discount_cumsum=discount_cumsum, MLPActorCritic=MLPActorCritic)


class PPOBuffer:
    \"\"\"
    A buffer for storing trajectories experienced by a PPO agent interacting
    with the environment, and using Generalized Advantage Estimation (GAE-Lambda)
    for calculating the advantages of state-action pairs.
    \"\"\"

    def __init__(self, obs_dim, act_dim, size, gamma=0.99, lam=0.95):
        self.obs_buf = np.zeros(core.combined_shape(size, obs_dim), dtype=np.float32)
        self.act_buf = np.zeros(core.combined_shape(size, act_dim), dtype=np.float32)
        self.adv_buf = np.zeros(size, dtype=np.float32)
        self.rew_buf = np.zeros(size, dtype=np.float32)
        self.ret_buf = np.zeros(size, dtype=np.float32)
        self.val_buf = np.zeros(size, dtype=np.float32)
        self.logp_buf = np.zeros(size, dtype=np.float32)
        self.gamma, self.lam = gamma, lam
        self.ptr, self.path_start_idx, self.max_size = 0, 0, size

    def store(self, obs, act, rew, val, logp):
        \"\"\"
        Append one timestep of agent-environment interaction to the buffer.
        \"\"\"
        assert self.ptr < self.max_size     # buffer has to have room so you can store
        self.obs_buf[self.ptr] = obs
        self.act_buf[self.ptr] = act
        self.rew_buf[self.ptr] = rew
        self.val_buf[self.ptr] = val
        self.logp_buf[self.ptr] = logp
        self.ptr += 1

    def finish_path(self, last_val=0):
        \"\"\"
        Call this at the end of a trajectory, or when one gets cut off
        by an epoch ending. This looks back in the buffer to where the
        trajectory started, and uses rewards and value estimates from
        the whole trajectory to compute advantage estimates with GAE-Lambda,
        as well as compute the rewards-to-go for each state, to use as
        the targets for the value function.

        The "last_val" argument should be 0 if the trajectory ended
        because the agent reached a terminal state (died), and otherwise
        should be V(s_T), the value function estimated for the last state.
        This allows us to bootstrap the reward-to-go calculation to account
        for timesteps beyond the arbitrary episode horizon (or epoch cutoff).
        \"\"\"

        path_slice = slice(self.path_start_idx, self.ptr)
        rews = np.append(self.rew_buf[path_slice], last_val)
        vals = np.append(self.val_buf[path_slice], last_val)

        # the next two lines implement GAE-Lambda advantage calculation
        deltas = rews[:-1] + self.gamma * vals[1:] - vals[:-1]
        self.adv_buf[path_slice] = core.discount_cumsum(deltas, self.gamma * self.lam)

        # the next line computes rewards-to-go, to be targets for the value function
        self.ret_buf[path_slice] = core.discount_cumsum(rews, self.gamma)[:-1]

        self.path_start_idx = self.ptr

    def get(self):
        \"\"\"
        Call this at the end of an epoch to get all of the data from
        the buffer, with advantages appropriately normalized (shifted to have
        mean zero and std one). Also, resets some pointers in the buffer.
        \"\"\"
        assert self.ptr == self.max_size    # buffer has to be full before you can get
        self.ptr, self.path_start_idx = 0, 0
        # the next two lines implement the advantage normalization trick
        adv_mean, adv_std = mpi_statistics_scalar(self.adv_buf)
        self.adv_buf = (self.adv_buf - adv_mean) / adv_std
        data = dict(obs=self.obs_buf, act=self.act_buf, ret=self.ret_buf,
                    adv=self.adv_buf, logp=self.logp_buf)
        return {k: torch.as_tensor(v, dtype=torch.float32) for k,v in data.items()}



def ppo(env_fn, actor_critic=core.MLPActorCritic, ac_kwargs=dict(), seed=0,
        steps_per_epoch=4000, epochs=50, gamma=0.99, clip_ratio=0.2, pi_lr=3e-4,
        vf_lr=1e-3, train_pi_iters=80, train_v_iters=80, lam=0.97, max_ep_len=1000,
        target_kl=0.01, logger_kwargs=dict(), save_freq=10):

    # Special function to avoid certain slowdowns from PyTorch + MPI combo.
    setup_pytorch_for_mpi()

    # Set up logger and save configuration
    logger = EpochLogger(**logger_kwargs)
    logger.save_config(locals())

    # Random seed
    seed += 10000 * proc_id()
    torch.manual_seed(seed)
    np.random.seed(seed)

    # Instantiate environment
    env = env_fn()
    obs_dim = env.observation_space.shape
    act_dim = env.action_space.shape

    # Create actor-critic module
    ac = actor_critic(env.observation_space, env.action_space, **ac_kwargs)
    initialize(ac)

    # Sync params across processes
    sync_params(ac)

    # Count variables
    var_counts = tuple(core.count_vars(module) for module in [ac.pi, ac.v])
    logger.log('\\nNumber of parameters: \\t pi: %d, \\t v: %d\\n'%var_counts)

    # Set up experience buffer
    local_steps_per_epoch = int(steps_per_epoch / num_procs())
    buf = PPOBuffer(obs_dim, act_dim, local_steps_per_epoch, gamma, lam)

    # Set up function for computing PPO policy loss
    def compute_loss_pi(data):
        obs, act, adv, logp_old = data['obs'], data['act'], data['adv'], data['logp']

        # Policy loss
        pi, logp = ac.pi(obs, act)
        ratio = torch.exp(logp - logp_old)
        clip_adv = torch.clamp(ratio, 1-clip_ratio, 1+clip_ratio) * adv
        loss_pi = -(torch.min(ratio * adv, clip_adv)).mean()

        # Useful extra info
        approx_kl = (logp_old - logp).mean().item()
        ent = pi.entropy().mean().item()
        clipped = ratio.gt(1+clip_ratio) | ratio.lt(1-clip_ratio)
        clipfrac = torch.as_tensor(clipped, dtype=torch.float32).mean().item()
        pi_info = dict(kl=approx_kl, ent=ent, cf=clipfrac)

        return loss_pi, pi_info

    # Set up function for computing value loss
    def compute_loss_v(data):
        obs, ret = data['obs'], data['ret']
        return ((ac.v(obs) - ret)**2).mean()

    # Set up optimizers for policy and value function
    pi_optimizer = Adam(ac.pi.parameters(), lr=pi_lr)
    vf_optimizer = Adam(ac.v.parameters(), lr=vf_lr)

    # Set up model saving
    logger.setup_pytorch_saver(ac)

    def update():
        data = buf.get()

        pi_l_old, pi_info_old = compute_loss_pi(data)
        pi_l_old = pi_l_old.item()
        v_l_old = compute_loss_v(data).item()

        # Train policy with multiple steps of gradient descent
        for i in range(train_pi_iters):
            pi_optimizer.zero_grad()
            loss_pi, pi_info = compute_loss_pi(data)
            kl = mpi_avg(pi_info['kl'])
            if kl > 1.5 * target_kl:
                logger.log('Early stopping at step %d due to reaching max kl.'%i)
                break
            loss_pi.backward()
            mpi_avg_grads(ac.pi)    # average grads across MPI processes
            pi_optimizer.step()

        logger.store(StopIter=i)

        # Value function learning
        for i in range(train_v_iters):
            vf_optimizer.zero_grad()
            loss_v = compute_loss_v(data)
            loss_v.backward()
            mpi_avg_grads(ac.v)    # average grads across MPI processes
            vf_optimizer.step()

        # Log changes from update
        kl, ent, cf = pi_info['kl'], pi_info_old['ent'], pi_info['cf']
        logger.store(LossPi=pi_l_old, LossV=v_l_old,
                     KL=kl, Entropy=ent, ClipFrac=cf,
                     DeltaLossPi=(loss_pi.item() - pi_l_old),
                     DeltaLossV=(loss_v.item() - v_l_old))

    # Prepare for interaction with environment
    start_time = time.time()
    o, ep_ret, ep_len = env.reset(), 0, 0

    # Main loop: collect experience in env and update/log each epoch
    for epoch in range(epochs):
        for t in range(local_steps_per_epoch):
            a, v, logp = ac.step(torch.as_tensor(o, dtype=torch.float32))

            next_o, r, d, _ = env.step(a)
            ep_ret += r
            ep_len += 1

            # save and log
            buf.store(o, a, r, v, logp)
            logger.store(VVals=v)

            # Update obs (critical!)
            o = next_o

            timeout = ep_len == max_ep_len
            terminal = d or timeout
            epoch_ended = t==local_steps_per_epoch-1

            if terminal or epoch_ended:
                if epoch_ended and not(terminal):
                    print('Warning: trajectory cut off by epoch at %d steps.'%ep_len, flush=True)
                # if trajectory didn't reach terminal state, bootstrap value target
                if timeout or epoch_ended:
                    _, v, _ = ac.step(torch.as_tensor(o, dtype=torch.float32))
                else:
                    v = 0
                buf.finish_path(v)
                if terminal:
                    # only save EpRet / EpLen if trajectory finished
                    logger.store(EpRet=ep_ret, EpLen=ep_len)
                o, ep_ret, ep_len = env.reset(), 0, 0


        # Save model
        if (epoch % save_freq == 0) or (epoch == epochs-1):
            logger.save_state({'env': env}, None)

        # Perform PPO update!
        update()

        # Log info about epoch
        logger.log_tabular('Epoch', epoch)
        logger.log_tabular('EpRet', with_min_and_max=True)
        logger.log_tabular('EpLen', average_only=True)
        logger.log_tabular('VVals', with_min_and_max=True)
        logger.log_tabular('TotalEnvInteracts', (epoch+1)*steps_per_epoch)
        logger.log_tabular('LossPi', average_only=True)
        logger.log_tabular('LossV', average_only=True)
        logger.log_tabular('DeltaLossPi', average_only=True)
        logger.log_tabular('DeltaLossV', average_only=True)
        logger.log_tabular('Entropy', average_only=True)
        logger.log_tabular('KL', average_only=True)
        logger.log_tabular('ClipFrac', average_only=True)
        logger.log_tabular('StopIter', average_only=True)
        logger.log_tabular('Time', time.time()-start_time)
        logger.dump_tabular()
        record.append(params_of(ac))


ppo(lambda : gym.make('PointMass-v0'), actor_critic=core.MLPActorCritic,
    ac_kwargs=dict(hidden_sizes=[8]*2), gamma=0.99, seed=5, steps_per_epoch=10,
    epochs=3, pi_lr=1e-2, vf_lr=1e-2, train_pi_iters=8, train_v_iters=4, target_kl=0.02)
"""

PPO_STEPS = [
    ("import torch\nimport torch.nn as nn\n", "import retrograd as torch\nimport retrograd.nn as nn\n"),
    ("import numpy as np\nimport torch\nfrom torch.optim", "import numpy as np\nimport retrograd as torch\nfrom torch.optim"),
    ("            loss_pi.backward()\n            mpi_avg_grads(ac.pi)    # average grads across MPI processes\n            pi_optimizer.step()",
     "            grads = loss_pi.backward()\n            mpi_avg_grads(ac.pi)    # average grads across MPI processes\n            pi_optimizer.step(grads)"),
    ("            loss_v.backward()\n            mpi_avg_grads(ac.v)    # average grads across MPI processes\n            vf_optimizer.step()",
     "            grads = loss_v.backward()\n            mpi_avg_grads(ac.v)    # average grads across MPI processes\n            vf_optimizer.step(grads)"),
]  # fmt: skip

#: Spinning Up's MPI helpers (``spinup/utils/mpi_tools.py``, ``mpi_pytorch.py``) in one process.
MPI_FOR_ONE_PROCESS = dict(
    setup_pytorch_for_mpi=lambda: None,
    sync_params=lambda module: None,
    mpi_avg_grads=lambda module: None,
    mpi_avg=lambda x: x,
    proc_id=lambda: 0,
    num_procs=lambda: 1,
    mpi_statistics_scalar=lambda x: (np.mean(x), np.std(x)),
)


@pytest.mark.parametrize("space", ["discrete", "continuous"])
def test_spinning_up_ppo_trains_as_torch(monkeypatch, capsys, space):
    action_space = Discrete(3) if space == "discrete" else Box(-1.0, 1.0, (2,))
    theirs, ours = run_program(
        monkeypatch,
        PPO_CORE + PPO_MAIN,
        PPO_STEPS,
        lambda name, run: PointMassEnv(action_space),
        seed=381,
        **MPI_FOR_ONE_PROCESS,
    )
    torch_log, port_log = capsys.readouterr().out.split("\nNumber of parameters")[1:]
    assert torch_log == port_log
    assert torch_log.count("Warning: trajectory cut off by epoch at 2 steps.") == 3
    assert "due to reaching max kl." in torch_log  # the early stop is taken
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
