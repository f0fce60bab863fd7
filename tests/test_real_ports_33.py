"""Real ports, continued (the harness: ``tests/real_ports.py``): a TRPO update, a program
written here in the style of ikostrikov/pytorch-trpo (Gaussian policy and value networks, a
natural-gradient step by conjugate gradients on Fisher-vector products, a backtracking line
search, the value net fitted by SciPy's L-BFGS), on a fixed batch of transitions.

The surface it exercises: conjugate gradients on 0-d ratios (``x += alpha * p``, ``r -= alpha
* Ap``, ``if rr < tol``) from ``torch.zeros(b.size())``; the Fisher-vector product by two
``torch.autograd.grad`` calls (``create_graph=True``, then the gradient of ``(flat_kl_grad *
Variable(v)).sum()``, ``grad.contiguous().view(-1)``); flat parameters through
``param.data.view(-1)`` and ``param.data.copy_(flat[a:b].view(param.size()))`` with
``int(np.prod(list(param.size())))``; the line search over ``.5 ** np.arange(n)`` (NumPy floats
times tensors) with ``.item()`` comparisons; ``torch.sqrt(shs / max_kl)`` and ``step / lm[0]``;
the GAE loop writing ``returns[i] = rewards[i] + gamma * prev * masks[i]`` into
``torch.Tensor(n, 1)`` (uninitialised, then every row written) with ``prev = returns[i, 0]``;
the value net fitted by ``scipy.optimize.fmin_l_bfgs_b`` through a closure returning
``(loss.data.double().numpy(), flat_grad.data.double().numpy())`` with ``loss += p.pow(2).sum()
* l2`` and ``p.grad.data.fill_(0)``; Gaussian log densities and the KL against
``Variable(mean.data)``; ``weight.data.mul_(0.1)``, ``nn.Parameter(torch.zeros(1, n))``
``expand_as``'d; ``torch.Tensor`` of a tuple of floats, of a tuple of NumPy rows and of a NumPy
array.

Regressions guarded: in-place ``+=``/``-=`` of tensors by 0-d tensors, ``torch.Tensor(n, 1)``
rows written from 0-d values, NumPy floats times tensors, second-order ``autograd.grad``
through ``tanh`` networks. The run is in float64 (``torch.set_default_dtype``): L-BFGS and the
line search decide on differences that float32 rounding could flip. Only the gradient lines
differ: the value closure reads ``p.grad(grads)`` (and has no stale ``.grad`` to zero first).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import scipy.optimize
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

TRPO_SOURCE = """
Variable = torch.autograd.Variable  # the pre-0.4 wrapper these scripts still use


def gaussian_log_prob(x, mean, log_std, std):
    per_dim = -(x - mean).pow(2) / (2 * std.pow(2)) - log_std - 0.5 * math.log(2 * math.pi)
    return per_dim.sum(1, keepdim=True)


def gaussian_entropy(std):
    return (0.5 + 0.5 * torch.log(2 * math.pi * std.pow(2))).sum(1, keepdim=True)


def flat_params(net):
    return torch.cat([p.data.view(-1) for p in net.parameters()])


def load_flat(net, flat):
    start = 0
    for p in net.parameters():
        size = int(np.prod(list(p.size())))
        p.data.copy_(flat[start : start + size].view(p.size()))
        start += size


def flat_grad(net):
    return torch.cat([p.grad.view(-1) for p in net.parameters()])


class Actor(nn.Module):
    def __init__(self, n_obs, n_act, width=12):
        super(Actor, self).__init__()
        self.l1, self.l2 = nn.Linear(n_obs, width), nn.Linear(width, width)
        self.mu = nn.Linear(width, n_act)
        self.mu.weight.data.mul_(0.1)  # start close to a zero-mean policy
        self.mu.bias.data.mul_(0.0)
        self.log_std = nn.Parameter(torch.zeros(1, n_act))

    def forward(self, s):
        h = torch.tanh(self.l2(torch.tanh(self.l1(s))))
        mean = self.mu(h)
        log_std = self.log_std.expand_as(mean)
        return mean, log_std, torch.exp(log_std)


class Critic(nn.Module):
    def __init__(self, n_obs, width=12):
        super(Critic, self).__init__()
        self.body = nn.Sequential(nn.Linear(n_obs, width), nn.Tanh(), nn.Linear(width, 1))
        self.body[2].weight.data.mul_(0.1)
        self.body[2].bias.data.mul_(0.0)

    def forward(self, s):
        return self.body(s)


def solve_cg(mat_vec, b, iters, tol=1e-10):
    x = torch.zeros(b.size())
    r, p = b.clone(), b.clone()
    rr = torch.dot(r, r)
    for _ in range(iters):
        Ap = mat_vec(p)
        alpha = rr / torch.dot(p, Ap)
        x += alpha * p
        r -= alpha * Ap
        rr_next = torch.dot(r, r)
        p = r + (rr_next / rr) * p
        rr = rr_next
        if rr < tol:
            break
    return x


def backtrack(net, surrogate, start, full_step, slope, tries=8, accept=0.1):
    before = surrogate(True).data
    print("surrogate", before.item())
    for frac in 0.5 ** np.arange(tries):
        candidate = start + frac * full_step
        load_flat(net, candidate)
        gain = before - surrogate(True).data
        ratio = gain / (slope * frac)
        print("try", frac, gain.item(), ratio.item())
        if ratio.item() > accept and gain.item() > 0:
            print("accepted")
            return candidate
    return start


def natural_step(net, surrogate, kl_of, max_kl, damping):
    g = torch.autograd.grad(surrogate(), net.parameters())
    g = torch.cat([t.view(-1) for t in g]).data

    def fisher_times(v):
        kl = kl_of().mean()
        first = torch.autograd.grad(kl, net.parameters(), create_graph=True)
        first = torch.cat([t.view(-1) for t in first])
        second = torch.autograd.grad((first * Variable(v)).sum(), net.parameters())
        return torch.cat([t.contiguous().view(-1) for t in second]).data + damping * v

    direction = solve_cg(fisher_times, -g, 8)
    shs = 0.5 * (direction * fisher_times(direction)).sum(0, keepdim=True)
    lm = torch.sqrt(shs / max_kl)
    slope = (-g * direction).sum(0, keepdim=True) / lm[0]
    load_flat(net, backtrack(net, surrogate, flat_params(net), direction / lm[0], slope))


def update(batch, actor, critic, cfg):
    rewards, masks = torch.Tensor(batch.reward), torch.Tensor(batch.mask)
    actions = torch.Tensor(np.concatenate(batch.action, axis=0))
    obs = torch.Tensor(batch.state)
    values = critic(Variable(obs))
    n = actions.size(0)
    returns, advantages = torch.Tensor(n, 1), torch.Tensor(n, 1)
    next_return = next_value = next_adv = 0
    for i in reversed(range(n)):
        returns[i] = rewards[i] + cfg.gamma * next_return * masks[i]
        delta = rewards[i] + cfg.gamma * next_value * masks[i] - values.data[i]
        advantages[i] = delta + cfg.gamma * cfg.lam * next_adv * masks[i]
        next_return, next_value = returns[i, 0], values.data[i, 0]
        next_adv = advantages[i, 0]

    def critic_loss(flat):
        load_flat(critic, torch.Tensor(flat))
        for p in critic.parameters():
            if p.grad is not None:
                p.grad.data.fill_(0)
        loss = (critic(Variable(obs)) - Variable(returns)).pow(2).mean()
        for p in critic.parameters():
            loss += p.pow(2).sum() * cfg.l2
        loss.backward()
        return loss.data.double().numpy(), flat_grad(critic).data.double().numpy()

    start = flat_params(critic).double().numpy()
    best, _, info = scipy.optimize.fmin_l_bfgs_b(critic_loss, start, maxiter=20)
    load_flat(critic, torch.Tensor(best))

    scaled = (advantages - advantages.mean()) / advantages.std()
    mean, log_std, std = actor(Variable(obs))
    old_log_prob = gaussian_log_prob(Variable(actions), mean, log_std, std).data.clone()

    def surrogate(evaluating=False):
        if evaluating:
            with torch.no_grad():
                m, ls, sd = actor(Variable(obs))
        else:
            m, ls, sd = actor(Variable(obs))
        ratio = torch.exp(gaussian_log_prob(Variable(actions), m, ls, sd) - Variable(old_log_prob))
        return (-Variable(scaled) * ratio).mean()

    def kl_of():
        m1, ls1, sd1 = actor(Variable(obs))
        m0, ls0, sd0 = Variable(m1.data), Variable(ls1.data), Variable(sd1.data)
        kl = ls1 - ls0 + (sd0.pow(2) + (m0 - m1).pow(2)) / (2.0 * sd1.pow(2)) - 0.5
        return kl.sum(dim=1, keepdim=True)

    natural_step(actor, surrogate, kl_of, cfg.max_kl, cfg.damping)
    return info["nit"], scaled.numpy(), gaussian_entropy(std).mean().item()
"""

TRPO_STEP = [
    (
        "        for p in critic.parameters():\n            if p.grad is not None:\n"
        "                p.grad.data.fill_(0)\n",
        "",
    ),
    (
        "        loss.backward()\n        return loss.data.double().numpy(), flat_grad(critic)",
        "        grads = loss.backward()\n        return loss.data.double().numpy(), "
        "torch.cat([p.grad(grads).view(-1) for p in critic.parameters()])",
    ),
]


def test_trpo_update_matches_torch(capsys):
    theirs, ours = both(TRPO_SOURCE, TRPO_STEP, scipy=scipy)
    rng = np.random.default_rng(33)
    n, obs, act = 20, 4, 2
    batch = SimpleNamespace(
        state=tuple(rng.standard_normal((n, obs))),
        action=tuple(rng.standard_normal((1, act)) for _ in range(n)),
        reward=tuple(rng.standard_normal(n)),
        mask=tuple(float(i % 8 != 7) for i in range(n)),
    )
    args = SimpleNamespace(gamma=0.995, lam=0.97, l2=1e-3, max_kl=1e-2, damping=1e-1)
    records, initial, logs = [], None, []
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    try:
        for lib, names in ((torch, theirs), (rg, ours)):
            lib.set_default_dtype(lib.float64)
            torch.manual_seed(0)
            policy_net, value_net = names["Actor"](obs, act), names["Critic"](obs)
            if initial is None:
                initial = [
                    {k: v.numpy().copy() for k, v in m.state_dict().items()}
                    for m in (policy_net, value_net)
                ]
            else:
                for m, state in zip((policy_net, value_net), initial):
                    m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            record = []
            for _ in range(2):
                nit, advantages, entropy = names["update"](batch, policy_net, value_net, args)
                record += [nit, advantages, entropy]
                record.append({k: v.numpy().copy() for k, v in policy_net.state_dict().items()})
                record.append({k: v.numpy().copy() for k, v in value_net.state_dict().items()})
            records.append(record)
            logs.append(capsys.readouterr().out)
    finally:
        torch.set_default_dtype(previous)
        rg.set_default_dtype(our_previous)
    assert "accepted" in logs[0]  # the line search accepted a step
    assert [line for line in logs[1].splitlines() if line.startswith("try")][:1]
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-9)
