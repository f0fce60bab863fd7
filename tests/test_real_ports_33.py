# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- TRPO as ikostrikov/pytorch-trpo writes it (``trpo.py``, ``utils.py``, ``models.py`` and
  ``update_params`` of ``main.py``), on a fixed batch of transitions for the MuJoCo rollout,
  smaller networks: ``conjugate_gradients`` (``x += alpha * p``, ``r -= alpha * _Avp`` on 0-d
  ratios, ``if rdotr < residual_tol``), the Fisher-vector product by two
  ``torch.autograd.grad`` calls (``create_graph=True``, then the gradient of ``(flat_grad_kl *
  Variable(v)).sum()``), ``get_flat_params_from``/``set_flat_params_to`` through
  ``param.data.view(-1)`` and ``param.data.copy_(flat_params[prev_ind:prev_ind +
  flat_size].view(param.size()))`` with ``int(np.prod(list(param.size())))``, the backtracking
  ``linesearch`` over ``.5**np.arange(max_backtracks)`` (NumPy floats times tensors) with
  ``.item()`` comparisons, ``lm = torch.sqrt(shs / max_kl)`` and ``stepdir / lm[0]``; the
  GAE loop writing ``returns[i] = rewards[i] + args.gamma * prev_return * masks[i]`` into
  ``torch.Tensor(actions.size(0),1)`` (uninitialized, then every row written) with
  ``prev_return = returns[i, 0]``; the value net fitted by SciPy's ``fmin_l_bfgs_b`` through a
  closure returning ``(value_loss.data.double().numpy(), flat_grad.data.double().numpy())``
  with the L2 penalty added by ``value_loss += param.pow(2).sum() * args.l2_reg``;
  ``normal_log_density`` and the KL of ``get_kl`` against ``Variable(mean1.data)``;
  ``self.action_mean.weight.data.mul_(0.1)``, ``nn.Parameter(torch.zeros(1, num_outputs))``
  expanded by ``expand_as``; ``torch.Tensor(batch.state)`` of a tuple of NumPy rows.

The run is in float64 (``torch.set_default_dtype``), as L-BFGS and the line search decide on
differences that float32 rounding could flip. Only the gradient lines differ: the value closure
reads ``p.grad(grads)`` where the original reads ``param.grad`` (and has no stale ``.grad`` to
zero first).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import scipy.optimize
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

TRPO_SOURCE = """
from torch.autograd import Variable


# utils.py
def normal_entropy(std):
    var = std.pow(2)
    entropy = 0.5 + 0.5 * torch.log(2 * var * math.pi)
    return entropy.sum(1, keepdim=True)


def normal_log_density(x, mean, log_std, std):
    var = std.pow(2)
    log_density = -(x - mean).pow(2) / (
        2 * var) - 0.5 * math.log(2 * math.pi) - log_std
    return log_density.sum(1, keepdim=True)


def get_flat_params_from(model):
    params = []
    for param in model.parameters():
        params.append(param.data.view(-1))

    flat_params = torch.cat(params)
    return flat_params


def set_flat_params_to(model, flat_params):
    prev_ind = 0
    for param in model.parameters():
        flat_size = int(np.prod(list(param.size())))
        param.data.copy_(
            flat_params[prev_ind:prev_ind + flat_size].view(param.size()))
        prev_ind += flat_size


def get_flat_grad_from(net, grad_grad=False):
    grads = []
    for param in net.parameters():
        if grad_grad:
            grads.append(param.grad.grad.view(-1))
        else:
            grads.append(param.grad.view(-1))

    flat_grad = torch.cat(grads)
    return flat_grad


# models.py
class Policy(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(num_inputs, 16)
        self.affine2 = nn.Linear(16, 16)

        self.action_mean = nn.Linear(16, num_outputs)
        self.action_mean.weight.data.mul_(0.1)
        self.action_mean.bias.data.mul_(0.0)

        self.action_log_std = nn.Parameter(torch.zeros(1, num_outputs))

        self.saved_actions = []
        self.rewards = []
        self.final_value = 0

    def forward(self, x):
        x = torch.tanh(self.affine1(x))
        x = torch.tanh(self.affine2(x))

        action_mean = self.action_mean(x)
        action_log_std = self.action_log_std.expand_as(action_mean)
        action_std = torch.exp(action_log_std)

        return action_mean, action_log_std, action_std


class Value(nn.Module):
    def __init__(self, num_inputs):
        super(Value, self).__init__()
        self.affine1 = nn.Linear(num_inputs, 16)
        self.affine2 = nn.Linear(16, 16)
        self.value_head = nn.Linear(16, 1)
        self.value_head.weight.data.mul_(0.1)
        self.value_head.bias.data.mul_(0.0)

    def forward(self, x):
        x = torch.tanh(self.affine1(x))
        x = torch.tanh(self.affine2(x))

        state_values = self.value_head(x)
        return state_values


# trpo.py
def conjugate_gradients(Avp, b, nsteps, residual_tol=1e-10):
    x = torch.zeros(b.size())
    r = b.clone()
    p = b.clone()
    rdotr = torch.dot(r, r)
    for i in range(nsteps):
        _Avp = Avp(p)
        alpha = rdotr / torch.dot(p, _Avp)
        x += alpha * p
        r -= alpha * _Avp
        new_rdotr = torch.dot(r, r)
        betta = new_rdotr / rdotr
        p = r + betta * p
        rdotr = new_rdotr
        if rdotr < residual_tol:
            break
    return x


def linesearch(model,
               f,
               x,
               fullstep,
               expected_improve_rate,
               max_backtracks=10,
               accept_ratio=.1):
    fval = f(True).data
    print("fval before", fval.item())
    for (_n_backtracks, stepfrac) in enumerate(.5**np.arange(max_backtracks)):
        xnew = x + stepfrac * fullstep
        set_flat_params_to(model, xnew)
        newfval = f(True).data
        actual_improve = fval - newfval
        expected_improve = expected_improve_rate * stepfrac
        ratio = actual_improve / expected_improve
        print("a/e/r", actual_improve.item(), expected_improve.item(), ratio.item())

        if ratio.item() > accept_ratio and actual_improve.item() > 0:
            print("fval after", newfval.item())
            return True, xnew
    return False, x


def trpo_step(model, get_loss, get_kl, max_kl, damping):
    loss = get_loss()
    grads = torch.autograd.grad(loss, model.parameters())
    loss_grad = torch.cat([grad.view(-1) for grad in grads]).data

    def Fvp(v):
        kl = get_kl()
        kl = kl.mean()

        grads = torch.autograd.grad(kl, model.parameters(), create_graph=True)
        flat_grad_kl = torch.cat([grad.view(-1) for grad in grads])

        kl_v = (flat_grad_kl * Variable(v)).sum()
        grads = torch.autograd.grad(kl_v, model.parameters())
        flat_grad_grad_kl = torch.cat([grad.contiguous().view(-1) for grad in grads]).data

        return flat_grad_grad_kl + v * damping

    stepdir = conjugate_gradients(Fvp, -loss_grad, 10)

    shs = 0.5 * (stepdir * Fvp(stepdir)).sum(0, keepdim=True)

    lm = torch.sqrt(shs / max_kl)
    fullstep = stepdir / lm[0]

    neggdotstepdir = (-loss_grad * stepdir).sum(0, keepdim=True)
    print(("lagrange multiplier:", lm[0], "grad_norm:", loss_grad.norm()))

    prev_params = get_flat_params_from(model)
    success, new_params = linesearch(model, get_loss, prev_params, fullstep,
                                     neggdotstepdir / lm[0])
    set_flat_params_to(model, new_params)

    return loss


# main.py
def update_params(batch, policy_net, value_net, args):
    rewards = torch.Tensor(batch.reward)
    masks = torch.Tensor(batch.mask)
    actions = torch.Tensor(np.concatenate(batch.action, 0))
    states = torch.Tensor(batch.state)
    values = value_net(Variable(states))

    returns = torch.Tensor(actions.size(0),1)
    deltas = torch.Tensor(actions.size(0),1)
    advantages = torch.Tensor(actions.size(0),1)

    prev_return = 0
    prev_value = 0
    prev_advantage = 0
    for i in reversed(range(rewards.size(0))):
        returns[i] = rewards[i] + args.gamma * prev_return * masks[i]
        deltas[i] = rewards[i] + args.gamma * prev_value * masks[i] - values.data[i]
        advantages[i] = deltas[i] + args.gamma * args.tau * prev_advantage * masks[i]

        prev_return = returns[i, 0]
        prev_value = values.data[i, 0]
        prev_advantage = advantages[i, 0]

    targets = Variable(returns)

    # Original code uses the same LBFGS to optimize the value loss
    def get_value_loss(flat_params):
        set_flat_params_to(value_net, torch.Tensor(flat_params))
        for param in value_net.parameters():
            if param.grad is not None:
                param.grad.data.fill_(0)

        values_ = value_net(Variable(states))

        value_loss = (values_ - targets).pow(2).mean()

        # weight decay
        for param in value_net.parameters():
            value_loss += param.pow(2).sum() * args.l2_reg
        value_loss.backward()
        return (value_loss.data.double().numpy(), get_flat_grad_from(value_net).data.double().numpy())

    flat_params, _, opt_info = scipy.optimize.fmin_l_bfgs_b(get_value_loss, get_flat_params_from(value_net).double().numpy(), maxiter=25)
    set_flat_params_to(value_net, torch.Tensor(flat_params))

    advantages = (advantages - advantages.mean()) / advantages.std()

    action_means, action_log_stds, action_stds = policy_net(Variable(states))
    fixed_log_prob = normal_log_density(Variable(actions), action_means, action_log_stds, action_stds).data.clone()

    def get_loss(volatile=False):
        if volatile:
            with torch.no_grad():
                action_means, action_log_stds, action_stds = policy_net(Variable(states))
        else:
            action_means, action_log_stds, action_stds = policy_net(Variable(states))

        log_prob = normal_log_density(Variable(actions), action_means, action_log_stds, action_stds)
        action_loss = -Variable(advantages) * torch.exp(log_prob - Variable(fixed_log_prob))
        return action_loss.mean()


    def get_kl():
        mean1, log_std1, std1 = policy_net(Variable(states))

        mean0 = Variable(mean1.data)
        log_std0 = Variable(log_std1.data)
        std0 = Variable(std1.data)
        kl = log_std1 - log_std0 + (std0.pow(2) + (mean0 - mean1).pow(2)) / (2.0 * std1.pow(2)) - 0.5
        return kl.sum(1, keepdim=True)

    trpo_step(policy_net, get_loss, get_kl, args.max_kl, args.damping)
    return opt_info["nit"], advantages.numpy(), normal_entropy(action_stds).mean().item()
"""

TRPO_STEP = [
    (
        "        for param in value_net.parameters():\n            if param.grad is not None:\n                param.grad.data.fill_(0)\n",
        "",
    ),
    (
        "        value_loss.backward()\n        return (value_loss.data.double().numpy(), get_flat_grad_from(value_net).data.double().numpy())",
        "        grads = value_loss.backward()\n        return (value_loss.data.double().numpy(), torch.cat([p.grad(grads).view(-1) for p in value_net.parameters()]).data.double().numpy())",
    ),
]


def test_trpo_update_matches_torch(capsys):
    theirs, ours = both(TRPO_SOURCE, TRPO_STEP, scipy=scipy)
    rng = np.random.default_rng(33)
    n, obs, act = 24, 5, 2
    batch = SimpleNamespace(
        state=tuple(rng.standard_normal((n, obs))),
        action=tuple(rng.standard_normal((1, act)) for _ in range(n)),
        reward=tuple(rng.standard_normal(n)),
        mask=tuple(float(i % 8 != 7) for i in range(n)),
    )
    args = SimpleNamespace(gamma=0.995, tau=0.97, l2_reg=1e-3, max_kl=1e-2, damping=1e-1)
    records, initial, logs = [], None, []
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    try:
        for lib, names in ((torch, theirs), (rg, ours)):
            lib.set_default_dtype(lib.float64)
            torch.manual_seed(0)
            policy_net, value_net = names["Policy"](obs, act), names["Value"](obs)
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
                nit, advantages, entropy = names["update_params"](
                    batch, policy_net, value_net, args
                )
                record += [nit, advantages, entropy]
                record.append({k: v.numpy().copy() for k, v in policy_net.state_dict().items()})
                record.append({k: v.numpy().copy() for k, v in value_net.state_dict().items()})
            records.append(record)
            logs.append(capsys.readouterr().out)
    finally:
        torch.set_default_dtype(previous)
        rg.set_default_dtype(our_previous)
    assert "fval after" in logs[0]  # the line search accepted a step
    assert [line for line in logs[1].splitlines() if line.startswith("a/e/r")][:1]
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-9)
