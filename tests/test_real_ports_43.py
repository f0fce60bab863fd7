# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
three programs of pytorch/examples, as written, on small data:

- the variational autoencoder (``vae/main.py``): ``fc21``/``fc22`` heads, ``reparameterize``
  by ``torch.exp(0.5*logvar)`` and ``torch.randn_like(std)``, ``torch.sigmoid`` decoder,
  ``F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')`` plus the KL term
  ``-0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())``, the train/test loops with their
  log lines (``len(train_loader.dataset)``, ``100. * batch_idx / len(train_loader)``), the
  ``torch.cat([data[:n], recon_batch.view(args.batch_size, 1, 28, 28)[:n]])`` comparison and
  ``model.decode(torch.randn(64, 20))`` samples handed to ``save_image``;
- REINFORCE (``reinforcement_learning/reinforce.py``): ``nn.Dropout(p=0.6)`` in the policy,
  ``torch.from_numpy(state).float().unsqueeze(0)``, ``Categorical(probs)``,
  ``m.log_prob(action)`` kept in a list, ``eps = np.finfo(np.float32).eps.item()``, returns
  built by ``deque.appendleft`` and ``torch.tensor(returns)`` of that deque, normalized by
  ``(returns - returns.mean()) / (returns.std() + eps)``, ``torch.cat(policy_loss).sum()``,
  ``del policy.rewards[:]``, ``main`` over ``itertools.count(1)`` with ``env.spec.reward_threshold``;
- actor-critic (``reinforcement_learning/actor_critic.py``): ``SavedAction = namedtuple(...)``,
  a two-headed policy, ``returns.insert(0, R)``, ``advantage = R - value.item()``,
  ``F.smooth_l1_loss(value, torch.tensor([R]))`` (a list of a 0-d tensor),
  ``torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()``.

``gym``'s CartPole is a small NumPy CartPole with the same dynamics; the random draws
(``randn``/``randn_like``, dropout masks, ``Categorical.sample``) are one seeded stream both
libraries read. Only the gradient lines differ.
"""

from __future__ import annotations

import math
import types
from collections import deque, namedtuple
from itertools import count

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

VAE_SOURCE = """
class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=1e-3)


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader),
                loss.item() / len(data)))

    print('====> Epoch: {} Average loss: {:.4f}'.format(
          epoch, train_loss / len(train_loader.dataset)))
    record.append(train_loss)


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            data = data.to(device)
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data[:n],
                                      recon_batch.view(args.batch_size, 1, 28, 28)[:n]])
                save_image(comparison.cpu(),
                         'results/reconstruction_' + str(epoch) + '.png', nrow=n)

    test_loss /= len(test_loader.dataset)
    print('====> Test set loss: {:.4f}'.format(test_loss))
    record.append(test_loss)

if __name__ == "__main__":
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test(epoch)
        with torch.no_grad():
            sample = torch.randn(64, 20).to(device)
            sample = model.decode(sample).cpu()
            save_image(sample.view(64, 1, 28, 28),
                       'results/sample_' + str(epoch) + '.png')
"""

VAE_STEP = [
    (
        "        loss.backward()\n        train_loss += loss.item()\n        optimizer.step()",
        "        grads = loss.backward()\n        train_loss += loss.item()\n        optimizer.step(grads)",
    )
]

REINFORCE_SOURCE = """
class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


policy = Policy()
initialize(policy)
optimizer = optim.Adam(policy.parameters(), lr=1e-2)
eps = np.finfo(np.float32).eps.item()


def select_action(state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = deque()
    for r in policy.rewards[::-1]:
        R = r + args.gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    record.append(policy_loss.item())
    del policy.rewards[:]
    del policy.saved_log_probs[:]


def main():
    running_reward = 10
    for i_episode in count(1):
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 10000):  # Don't infinite loop while learning
            action = select_action(state)
            state, reward, done, _, _ = env.step(action)
            if args.render:
                env.render()
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break

        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()
        if i_episode % args.log_interval == 0:
            print('Episode {}\\tLast reward: {:.2f}\\tAverage reward: {:.2f}'.format(
                  i_episode, ep_reward, running_reward))
        if running_reward > env.spec.reward_threshold:
            print("Solved! Running reward is now {} and "
                  "the last episode runs to {} time steps!".format(running_reward, t))
            break


if __name__ == '__main__':
    main()
"""

REINFORCE_STEP = [
    (
        "    policy_loss.backward()\n    optimizer.step()",
        "    grads = policy_loss.backward()\n    optimizer.step(grads)",
    )
]

ACTOR_CRITIC_SOURCE = """
SavedAction = namedtuple('SavedAction', ['log_prob', 'value'])


class Policy(nn.Module):
    \"\"\"
    implements both actor and critic in one model
    \"\"\"
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)

        # actor's layer
        self.action_head = nn.Linear(128, 2)

        # critic's layer
        self.value_head = nn.Linear(128, 1)

        # action & reward buffer
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        \"\"\"
        forward of both actor and critic
        \"\"\"
        x = F.relu(self.affine1(x))

        # actor: choses action to take from state s_t
        # by returning probability of each action
        action_prob = F.softmax(self.action_head(x), dim=-1)

        # critic: evaluates being in the state s_t
        state_values = self.value_head(x)

        # return values for both actor and critic as a tuple of 2 values:
        # 1. a list with the probability of each action over the action space
        # 2. the value from state s_t
        return action_prob, state_values


model = Policy()
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=3e-2)
eps = np.finfo(np.float32).eps.item()


def select_action(state):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)

    # create a categorical distribution over the list of probabilities of actions
    m = Categorical(probs)

    # and sample an action using the distribution
    action = m.sample()

    # save to action buffer
    model.saved_actions.append(SavedAction(m.log_prob(action), state_value))

    # the action to take (left or right)
    return action.item()


def finish_episode():
    \"\"\"
    Training code. Calculates actor and critic loss and performs backprop.
    \"\"\"
    R = 0
    saved_actions = model.saved_actions
    policy_losses = [] # list to save actor (policy) loss
    value_losses = [] # list to save critic (value) loss
    returns = [] # list to save the true values

    # calculate the true value using rewards returned from the environment
    for r in model.rewards[::-1]:
        # calculate the discounted value
        R = r + args.gamma * R
        returns.insert(0, R)

    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)

    for (log_prob, value), R in zip(saved_actions, returns):
        advantage = R - value.item()

        # calculate actor (policy) loss
        policy_losses.append(-log_prob * advantage)

        # calculate critic (value) loss using L1 smooth loss
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))

    # reset gradients
    optimizer.zero_grad()

    # sum up all the values of policy_losses and value_losses
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()

    # perform backprop
    loss.backward()
    optimizer.step()
    record.append(loss.item())

    # reset rewards and action buffer
    del model.rewards[:]
    del model.saved_actions[:]


def main():
    running_reward = 10

    # run infinitely many episodes
    for i_episode in count(1):

        # reset environment and episode reward
        state, _ = env.reset()
        ep_reward = 0

        # for each episode, only run 9999 steps so that we don't
        # infinite loop while learning
        for t in range(1, 10000):

            # select action from policy
            action = select_action(state)

            # take the action
            state, reward, done, _, _ = env.step(action)

            if args.render:
                env.render()

            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break

        # update cumulative reward
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward

        # perform backprop
        finish_episode()

        # log results
        if i_episode % args.log_interval == 0:
            print('Episode {}\\tLast reward: {:.2f}\\tAverage reward: {:.2f}'.format(
                  i_episode, ep_reward, running_reward))

        # check if we have "solved" the cart pole problem
        if running_reward > env.spec.reward_threshold:
            print("Solved! Running reward is now {} and "
                  "the last episode runs to {} time steps!".format(running_reward, t))
            break


if __name__ == '__main__':
    main()
"""

ACTOR_CRITIC_STEP = [
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    )
]


class CartPole:
    """gym's ``CartPole-v1`` dynamics (Euler), reset from a seeded stream; ``spec.
    reward_threshold`` small so that ``main`` ends after a few episodes."""

    def __init__(self, seed, reward_threshold):
        self.rng = np.random.default_rng(seed)
        self.spec = types.SimpleNamespace(reward_threshold=reward_threshold)

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, 4)
        self.t = 0
        return np.array(self.state, dtype=np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sintheta) / 1.1
        thetaacc = (9.8 * sintheta - costheta * temp) / (
            0.5 * (4.0 / 3.0 - 0.1 * costheta**2 / 1.1)
        )
        xacc = temp - 0.05 * thetaacc * costheta / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * xacc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.t += 1
        done = bool(abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360 or self.t >= 30)
        return np.array(self.state, dtype=np.float32), 1.0, done, False, {}


class SharedDraws:
    """One seeded stream for both libraries: ``randn``/``randn_like``, the masks of
    ``F.dropout``/``nn.Dropout`` (Bernoulli by uniforms, scaled by ``1 / (1 - p)``) and
    ``Categorical.sample`` (inverse CDF)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def randn(self, *size, **_):
        return self.lib.tensor(self.rng.standard_normal(size), dtype=self.lib.float32)

    def randn_like(self, t, **_):
        return self.lib.tensor(self.rng.standard_normal(tuple(t.shape)), dtype=t.dtype)

    def patch(self, monkeypatch):
        lib, rng = self.lib, self.rng

        def dropout(x, p=0.5, training=True, inplace=False):
            if not training or p == 0:
                return x
            keep = rng.random(tuple(x.shape)) >= p
            return x * lib.tensor(keep / (1 - p), dtype=x.dtype)

        def sample(self, sample_shape=()):
            probs = self.probs.detach().numpy().astype(np.float64)
            u = rng.random(probs.shape[:-1] + (1,))
            index = (np.cumsum(probs, -1) < u).sum(-1).clip(0, probs.shape[-1] - 1)
            return lib.tensor(index, dtype=lib.int64)

        monkeypatch.setattr(lib.nn.functional, "dropout", dropout)
        if lib is rg:  # retrograd's Dropout holds the function it calls
            monkeypatch.setattr(rg.nn.Dropout, "_fn", staticmethod(dropout))
        monkeypatch.setattr(lib.distributions.Categorical, "sample", sample)


class Library:
    """``lib`` with ``randn``/``randn_like`` read from :class:`SharedDraws`."""

    def __init__(self, lib, draws):
        self._lib, self.randn, self.randn_like = lib, draws.randn, draws.randn_like

    def __getattr__(self, name):
        return getattr(self._lib, name)


def _run(source, step, lib, monkeypatch, **shared):
    draws = SharedDraws(lib, 7)
    draws.patch(monkeypatch)
    names = {
        "__name__": "__main__",
        "torch": Library(lib, draws),
        "nn": lib.nn,
        "F": lib.nn.functional,
        "optim": lib.optim,
        "np": np,
        "Categorical": lib.distributions.Categorical,
        "namedtuple": namedtuple,
        "deque": deque,
        "count": count,
        **shared,
    }
    exec(
        compile(source if lib is torch else port(source, step), f"<{lib.__name__} port>", "exec"),
        names,
    )
    return names


def _initializer(state):
    def initialize(model):
        if not state:
            state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

    return initialize


def test_pytorch_examples_vae_matches_torch(monkeypatch, capsys):
    rng = np.random.default_rng(43)
    train_images = rng.uniform(0, 1, (8, 1, 28, 28)).astype(np.float32)
    test_images = rng.uniform(0, 1, (4, 1, 28, 28)).astype(np.float32)
    args = types.SimpleNamespace(batch_size=4, epochs=2, log_interval=2)
    records, logs, state = [], [], {}
    for lib in (torch, rg):
        torch.manual_seed(0)
        record = []

        def save_image(tensor, filename, nrow=8, record=record):
            record.append([filename, nrow])
            record.append(tensor.numpy().copy())

        data = lib.utils.data
        _run(
            VAE_SOURCE, VAE_STEP, lib, monkeypatch,
            args=args, device=lib.device("cpu"), record=record, save_image=save_image,
            initialize=_initializer(state),
            train_loader=data.DataLoader(data.TensorDataset(lib.tensor(train_images), lib.zeros(8)), batch_size=4),
            test_loader=data.DataLoader(data.TensorDataset(lib.tensor(test_images), lib.zeros(4)), batch_size=4),
        )  # fmt: skip
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("Train Epoch") == 2 and logs[0].count("Test set loss") == 2
    assert records[0][2].shape == (8, 1, 28, 28) and records[0][5].shape == (64, 1, 28, 28)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize(
    "source, step, name, threshold",
    [
        (REINFORCE_SOURCE, REINFORCE_STEP, "policy", 11.4),
        (ACTOR_CRITIC_SOURCE, ACTOR_CRITIC_STEP, "model", 10.8),
    ],
    ids=["reinforce", "actor_critic"],
)
def test_pytorch_examples_reinforcement_learning_matches_torch(
    monkeypatch, capsys, source, step, name, threshold
):
    args = types.SimpleNamespace(gamma=0.99, render=False, log_interval=2)
    records, logs, state = [], [], {}
    for lib in (torch, rg):
        torch.manual_seed(0)
        record = []
        names = _run(
            source, step, lib, monkeypatch,
            args=args, env=CartPole(5, reward_threshold=threshold), record=record,
            initialize=_initializer(state),
        )  # fmt: skip
        record.append({k: v.detach().numpy().copy() for k, v in names[name].state_dict().items()})
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert "Solved!" in logs[0] and len(records[0]) >= 3
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
