"""Programs written here in the style of three pytorch/examples programs, run under torch and,
ported, under retrograd from the same weights and draws, on small data:

- a variational autoencoder in the style of ``vae/main.py``: two linear heads for ``mu`` and
  ``logvar``, ``reparameterize`` by ``torch.exp(0.5 * logvar)`` and ``torch.randn_like``, a
  ``torch.sigmoid`` decoder, ``F.binary_cross_entropy(..., x.view(-1, pixels),
  reduction="sum")`` plus the KL term ``-0.5 * torch.sum(1 + logvar - mu.pow(2) -
  logvar.exp())``, train/test loops with ``.format`` log lines (``len(loader.dataset)``,
  ``100.0 * batch_idx / len(loader)``), a ``torch.cat([data[:n], recon.view(batch_size, 1,
  h, w)[:n]])`` comparison and ``model.decode(torch.randn(k, latent))`` samples handed to
  ``save_image``, under ``if __name__ == "__main__"``;
- REINFORCE in the style of ``reinforcement_learning/reinforce.py``: ``nn.Dropout(p=0.6)`` in
  the policy, ``torch.from_numpy(state).float().unsqueeze(0)``, ``Categorical(probs)``,
  ``m.log_prob(action)`` kept in a list, ``eps_f32 = np.finfo(np.float32).eps.item()``, returns
  built by ``deque.appendleft`` and ``torch.tensor`` of that deque, normalised by
  ``(returns - returns.mean()) / (returns.std() + eps)``, ``torch.cat(losses).sum()``, ``del
  policy.rewards[:]``, episodes over ``itertools.count(1)`` until
  ``env.spec.reward_threshold``;
- actor-critic in the style of ``reinforcement_learning/actor_critic.py``: a ``namedtuple`` of
  saved actions, a two-headed model, ``returns.insert(0, R)``, ``advantage = R -
  value.item()``, ``F.smooth_l1_loss(value, torch.tensor([R]))`` (a list of a 0-d tensor),
  ``torch.stack(actor).sum() + torch.stack(critic).sum()``.

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
SIDE = 10
PIXELS = SIDE * SIDE
LATENT = 3


class TinyVAE(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.enc = nn.Linear(PIXELS, hidden)
        self.to_mu = nn.Linear(hidden, LATENT)
        self.to_logvar = nn.Linear(hidden, LATENT)
        self.dec = nn.Linear(LATENT, hidden)
        self.out = nn.Linear(hidden, PIXELS)

    def encode(self, x):
        h = F.relu(self.enc(x))
        return self.to_mu(h), self.to_logvar(h)

    def sample_latent(self, mu, logvar):
        sigma = torch.exp(0.5 * logvar)
        return mu + sigma * torch.randn_like(sigma)

    def decode(self, z):
        return torch.sigmoid(self.out(F.relu(self.dec(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, PIXELS))
        return self.decode(self.sample_latent(mu, logvar)), mu, logvar


def elbo_loss(recon, x, mu, logvar):
    # reconstruction in bits of Bernoulli pixels, plus KL(q(z|x) || N(0, I)) in closed form
    bce = F.binary_cross_entropy(recon, x.view(-1, PIXELS), reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kl


vae = TinyVAE().to(device)
initialize(vae)
opt = optim.Adam(vae.parameters(), lr=2e-3)


def run_epoch(epoch):
    vae.train()
    total = 0
    for batch_idx, (x, _) in enumerate(train_loader):
        x = x.to(device)
        opt.zero_grad()
        recon, mu, logvar = vae(x)
        loss = elbo_loss(recon, x, mu, logvar)
        loss.backward()
        opt.step()
        total += loss.item()
        if not batch_idx % args.log_interval:
            print("epoch {} [{}/{} {:.0f}%] loss/img {:.5f}".format(
                epoch, batch_idx * len(x), len(train_loader.dataset),
                100.0 * batch_idx / len(train_loader), loss.item() / len(x)))
    print("epoch {} mean train loss {:.4f}".format(epoch, total / len(train_loader.dataset)))
    record.append(total)


def evaluate(epoch):
    vae.eval()
    total = 0
    with torch.no_grad():
        for i, (x, _) in enumerate(test_loader):
            x = x.to(device)
            recon, mu, logvar = vae(x)
            total += elbo_loss(recon, x, mu, logvar).item()
            if i == 0:
                n = min(x.size(0), 3)
                side_by_side = torch.cat([x[:n], recon.view(args.batch_size, 1, SIDE, SIDE)[:n]])
                save_image(side_by_side.cpu(), "recon_%d.png" % epoch, nrow=n)
    total /= len(test_loader.dataset)
    print("epoch {} test loss {:.4f}".format(epoch, total))
    record.append(total)


if __name__ == "__main__":
    for epoch in range(1, 1 + args.epochs):
        run_epoch(epoch)
        evaluate(epoch)
        with torch.no_grad():
            dreams = vae.decode(torch.randn(6, LATENT).to(device)).cpu()
            save_image(dreams.view(6, 1, SIDE, SIDE), "dream_%d.png" % epoch)
"""

VAE_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    )
]

REINFORCE_SOURCE = """
class Stochastic(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.body = nn.Linear(4, hidden)
        self.drop = nn.Dropout(p=0.6)
        self.logits = nn.Linear(hidden, 2)
        self.log_probs, self.rewards = [], []

    def forward(self, obs):
        return F.softmax(self.logits(F.relu(self.drop(self.body(obs)))), dim=1)


policy = Stochastic()
initialize(policy)
adam = optim.Adam(policy.parameters(), lr=2e-2)
eps_f32 = np.finfo(np.float32).eps.item()


def act(obs):
    probs = policy(torch.from_numpy(obs).float().unsqueeze(0))
    m = Categorical(probs)
    action = m.sample()
    policy.log_probs.append(m.log_prob(action))
    return action.item()


def learn():
    running, returns = 0.0, deque()
    for reward in reversed(policy.rewards):
        running = reward + args.gamma * running
        returns.appendleft(running)
    g = torch.tensor(returns)
    g = (g - g.mean()) / (g.std() + eps_f32)
    losses = [-lp * gain for lp, gain in zip(policy.log_probs, g)]
    adam.zero_grad()
    total = torch.cat(losses).sum()
    total.backward()
    adam.step()
    record.append(total.item())
    del policy.rewards[:]
    del policy.log_probs[:]


def main():
    smoothed = 10.0
    for episode in count(1):
        obs, _ = env.reset()
        for t in range(1, 500):
            obs, reward, done, _, _ = env.step(act(obs))
            policy.rewards.append(reward)
            if done:
                break
        smoothed = 0.05 * t + 0.95 * smoothed
        learn()
        if episode % args.log_interval == 0:
            print("episode {} length {} smoothed {:.2f}".format(episode, t, smoothed))
        if smoothed > env.spec.reward_threshold:
            print("Solved after {} episodes (smoothed {:.3f})".format(episode, smoothed))
            break


if __name__ == "__main__":
    main()
"""

REINFORCE_STEP = [
    ("    total.backward()\n    adam.step()", "    grads = total.backward()\n    adam.step(grads)")
]

ACTOR_CRITIC_SOURCE = """
Step = namedtuple("Step", ["log_prob", "value"])


class ActorCritic(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.shared = nn.Linear(4, hidden)
        self.actor = nn.Linear(hidden, 2)  # action probabilities
        self.critic = nn.Linear(hidden, 1)  # state value
        self.steps, self.rewards = [], []

    def forward(self, obs):
        h = F.relu(self.shared(obs))
        return F.softmax(self.actor(h), dim=-1), self.critic(h)


net = ActorCritic()
initialize(net)
adam = optim.Adam(net.parameters(), lr=2e-2)
eps_f32 = np.finfo(np.float32).eps.item()


def act(obs):
    probs, value = net(torch.from_numpy(obs).float())
    m = Categorical(probs)
    action = m.sample()
    net.steps.append(Step(m.log_prob(action), value))
    return action.item()


def learn():
    R, returns = 0, []
    for reward in net.rewards[::-1]:
        R = reward + args.gamma * R
        returns.insert(0, R)
    g = torch.tensor(returns)
    g = (g - g.mean()) / (g.std() + eps_f32)
    actor, critic = [], []
    for (log_prob, value), R in zip(net.steps, g):
        advantage = R - value.item()
        actor.append(-log_prob * advantage)
        critic.append(F.smooth_l1_loss(value, torch.tensor([R])))
    adam.zero_grad()
    loss = torch.stack(actor).sum() + torch.stack(critic).sum()
    loss.backward()
    adam.step()
    record.append(loss.item())
    del net.rewards[:]
    del net.steps[:]


def main():
    smoothed = 10.0
    for episode in count(1):
        obs, _ = env.reset()
        for t in range(1, 500):
            obs, reward, done, _, _ = env.step(act(obs))
            net.rewards.append(reward)
            if done:
                break
        smoothed = 0.05 * t + 0.95 * smoothed
        learn()
        if episode % args.log_interval == 0:
            print("episode {} length {} smoothed {:.2f}".format(episode, t, smoothed))
        if smoothed > env.spec.reward_threshold:
            print("Solved after {} episodes (smoothed {:.3f})".format(episode, smoothed))
            break


if __name__ == "__main__":
    main()
"""

ACTOR_CRITIC_STEP = [
    ("    loss.backward()\n    adam.step()", "    grads = loss.backward()\n    adam.step(grads)")
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
    train_images = rng.uniform(0, 1, (6, 1, 10, 10)).astype(np.float32)
    test_images = rng.uniform(0, 1, (3, 1, 10, 10)).astype(np.float32)
    args = types.SimpleNamespace(batch_size=3, epochs=2, log_interval=2)
    records, logs, state = [], [], {}
    for lib in (torch, rg):
        torch.manual_seed(0)
        record = []

        def save_image(tensor, filename, nrow=8, record=record):
            record.append([filename, nrow])
            record.append(tensor.numpy().copy())

        data = lib.utils.data

        def loader(images, lib=lib, data=data):
            unlabelled = data.TensorDataset(lib.tensor(images), lib.zeros(len(images)))
            return data.DataLoader(unlabelled, batch_size=args.batch_size)

        _run(
            VAE_SOURCE, VAE_STEP, lib, monkeypatch,
            args=args, device=lib.device("cpu"), record=record, save_image=save_image,
            initialize=_initializer(state),
            train_loader=loader(train_images), test_loader=loader(test_images),
        )  # fmt: skip
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("] loss/img") == 2 and logs[0].count("test loss") == 2
    assert records[0][2].shape == (6, 1, 10, 10) and records[0][5].shape == (6, 1, 10, 10)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize(
    "source, step, name, threshold",
    [
        (REINFORCE_SOURCE, REINFORCE_STEP, "policy", 11.4),
        (ACTOR_CRITIC_SOURCE, ACTOR_CRITIC_STEP, "net", 10.8),
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
    assert "Solved after" in logs[0] and len(records[0]) >= 3
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
