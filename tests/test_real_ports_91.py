# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
programs that differentiate through derivatives or differentiate with respect to their inputs,
each trained a few steps against torch's run of the same code from the same weights and draws.

- a Lagrangian neural network as the PyTorch ports of MilesCranmer/lagrangian_nns write it: the
  analytic double pendulum's ``equation_of_motion`` (``torch.linalg.pinv`` of
  ``torch.autograd.functional.hessian`` in the velocities, times the ``jacobian`` in the
  positions minus the mixed ``jacobian(... jacobian(..., create_graph=True) ...)`` times the
  velocities) gives the targets; the learned Lagrangian (a softplus MLP) gives the
  accelerations by ``hessian``/``jacobian`` of the whole state with ``create_graph=True`` and
  by the tuple form ``hessian(self.lagrangian, (q, q_t), create_graph=True)``, and Adam trains
  it through the pseudo-inverse and the second derivatives.
- score-based generative modeling as ermongroup/ncsn writes it (``losses/dsm.py``'s
  ``anneal_dsm_score_estimation``, ``losses/sliced_sm.py``'s ``sliced_score_estimation`` and
  ``sliced_score_estimation_vr``: ``dup_samples.requires_grad_(True)``,
  ``autograd.grad(gradv, dup_samples, create_graph=True)``), the Hutchinson trace estimator
  with Rademacher probes as FFJORD's ``divergence_approx`` writes it (``torch.autograd.grad(f,
  y, e, create_graph=True)``), and ``runners/anneal_runner.py``'s (annealed) Langevin dynamics
  under ``torch.no_grad()``.
- JEM as wgrathwohl/JEM writes it (``train_wrn_ebm.py``: ``F``/``CCF`` with the energy
  ``logits.logsumexp(1)`` and ``t.gather(logits, 1, y[:, None])``, ``get_sample_q``'s replay
  buffer drawn by ``t.randint``/``t.rand``, SGLD on ``t.autograd.Variable(init_sample,
  requires_grad=True)`` by ``t.autograd.grad(f(x_k, y=y).sum(), [x_k], retain_graph=True)``
  and ``x_k.data += ...``, the buffer written back by ``replay_buffer[buffer_inds] =
  final_samples.cpu()``; the loss of ``p(x)`` and ``p(y|x)``), the Wide-ResNet made a two-
  convolution stand-in; class-conditional and unconditional. ``init_random``'s
  ``t.FloatTensor(...).uniform_(-1, 1)`` draws from torch's own generator, which the port
  cannot share: it is written ``t.rand(...) * 2 - 1`` in both runs. The SGLD chain stopped on
  its second step: a leaf made from a view of the buffer (``Variable(buffer[inds],
  requires_grad=True)``) lost its ``requires_grad`` at the write through ``.data``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import random
import re
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


# -- lagrangian_nns ---------------------------------------------------------------------------------
LNN_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
from torch.autograd.functional import jacobian, hessian


# -- the analytic double pendulum of lagrangian_nns' physics.py, as its PyTorch ports write it --
def lagrangian_fn(q, q_dot, m1=1, m2=1, l1=1, l2=1, g=9.8):
    t1, t2 = q     # theta 1 and theta 2
    w1, w2 = q_dot # omega 1 and omega 2

    # kinetic energy (T)
    T1 = 0.5 * m1 * (l1 * w1)**2
    T2 = 0.5 * m2 * ((l1 * w1)**2 + (l2 * w2)**2 +
                    2 * l1 * l2 * w1 * w2 * torch.cos(t1 - t2))
    T = T1 + T2

    # potential energy (V)
    y1 = -l1 * torch.cos(t1)
    y2 = y1 - l2 * torch.cos(t2)
    V = m1 * g * y1 + m2 * g * y2

    return T - V


def equation_of_motion(lagrangian, state, t=None):
    q, q_t = torch.split(state, 2)
    q_tt = (torch.linalg.pinv(hessian(lambda q_t: lagrangian(q, q_t), q_t))
            @ (jacobian(lambda q: lagrangian(q, q_t), q)
               - jacobian(lambda q: jacobian(lambda q_t: lagrangian(q, q_t), q_t, create_graph=True), q) @ q_t))
    return torch.cat([q_t, q_tt])


# -- the learned Lagrangian --
class MLP(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_dim, hidden_dim),
            nn.Softplus(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.Softplus(),
            nn.Linear(hidden_dim, output_dim),
        )

    def forward(self, x):
        return self.layers(x)


class LNN(nn.Module):
    def __init__(self, hidden_dim=16):
        super().__init__()
        self.mlp = MLP(4, hidden_dim, 1)

    def lagrangian(self, q, q_t):
        return self.mlp(torch.cat([q, q_t], dim=-1)).squeeze(-1)

    def forward(self, x):
        n = x.shape[-1] // 2
        L = lambda state: self.lagrangian(state[:n], state[n:])
        accels = []
        for state in x:
            H = hessian(L, state, create_graph=True)
            J = jacobian(L, state, create_graph=True)
            A = J[:n]
            B = H[n:, n:]
            C = H[n:, :n]
            q_t = state[n:]
            q_tt = torch.linalg.pinv(B) @ (A - C @ q_t)
            accels.append(q_tt)
        return torch.stack(accels)

    def forward_tuple(self, x):
        n = x.shape[-1] // 2
        accels = []
        for state in x:
            q, q_t = state[:n], state[n:]
            (H_qq, H_qqt), (H_qtq, H_qtqt) = hessian(self.lagrangian, (q, q_t), create_graph=True)
            J_q, J_qt = jacobian(self.lagrangian, (q, q_t), create_graph=True)
            q_tt = torch.linalg.pinv(H_qtqt) @ (J_q - H_qtq @ q_t)
            accels.append(q_tt)
        return torch.stack(accels)


states = torch.tensor(data, dtype=torch.float32)
targets = torch.stack([equation_of_motion(lagrangian_fn, s)[2:] for s in states])
record.append(targets)

model = LNN(hidden_dim=16)
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    forward = model.forward_tuple if step % 2 else model
    preds = forward(states)
    loss = ((preds - targets) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
"""

LNN_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_lagrangian_neural_network_trains_as_torch(capsys):
    states = np.random.default_rng(9101).uniform(-1, 1, (2, 4))
    (theirs, ours), _ = runs_with_draws(
        LNN_SOURCE,
        LNN_STEPS,
        capsys,
        9101,
        data=states,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 7
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- ncsn -------------------------------------------------------------------------------------------
NCSN_SOURCE = '''
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.autograd as autograd


# -- losses/dsm.py --
def anneal_dsm_score_estimation(scorenet, samples, labels, sigmas, anneal_power=2.):
    used_sigmas = sigmas[labels].view(samples.shape[0], *([1] * len(samples.shape[1:])))
    perturbed_samples = samples + torch.randn_like(samples) * used_sigmas
    target = - 1 / (used_sigmas ** 2) * (perturbed_samples - samples)
    scores = scorenet(perturbed_samples, labels)
    target = target.view(target.shape[0], -1)
    scores = scores.view(scores.shape[0], -1)
    loss = 1 / 2. * ((scores - target) ** 2).sum(dim=-1) * used_sigmas.squeeze() ** anneal_power

    return loss.mean(dim=0)


# -- losses/sliced_sm.py --
def sliced_score_estimation(score_net, samples, n_particles=1):
    dup_samples = samples.unsqueeze(0).expand(n_particles, *samples.shape).contiguous().view(-1, *samples.shape[1:])
    dup_samples.requires_grad_(True)
    vectors = torch.randn_like(dup_samples)
    vectors = vectors / torch.norm(vectors, dim=-1, keepdim=True)

    grad1 = score_net(dup_samples)
    gradv = torch.sum(grad1 * vectors)
    loss1 = torch.sum(grad1 * vectors, dim=-1) ** 2 * 0.5
    grad2 = autograd.grad(gradv, dup_samples, create_graph=True)[0]
    loss2 = torch.sum(vectors * grad2, dim=-1)

    loss1 = loss1.view(n_particles, -1).mean(dim=0)
    loss2 = loss2.view(n_particles, -1).mean(dim=0)
    loss = loss1 + loss2
    return loss.mean(), loss1.mean(), loss2.mean()


def sliced_score_estimation_vr(score_net, samples, n_particles=1):
    """
    Be careful if the shape of samples is not B x x_dim!!!!
    """
    dup_samples = samples.unsqueeze(0).expand(n_particles, *samples.shape).contiguous().view(-1, *samples.shape[1:])
    dup_samples.requires_grad_(True)
    vectors = torch.randn_like(dup_samples)

    grad1 = score_net(dup_samples)
    gradv = torch.sum(grad1 * vectors)
    grad2 = autograd.grad(gradv, dup_samples, create_graph=True)[0]

    grad1 = grad1.view(dup_samples.shape[0], -1)
    loss1 = torch.sum(grad1 * grad1, dim=-1) / 2.

    loss2 = torch.sum((vectors * grad2).view(dup_samples.shape[0], -1), dim=-1)

    loss1 = loss1.view(n_particles, -1).mean(dim=0)
    loss2 = loss2.view(n_particles, -1).mean(dim=0)

    loss = loss1 + loss2
    return loss.mean(), loss1.mean(), loss2.mean()


# -- the Hutchinson trace estimator with Rademacher probes (FFJORD's divergence_approx) --
def divergence_approx(f, y, e=None):
    e_dzdx = torch.autograd.grad(f, y, e, create_graph=True)[0]
    e_dzdx_e = e_dzdx * e
    approx_tr_dzdx = e_dzdx_e.view(y.shape[0], -1).sum(dim=1)
    return approx_tr_dzdx


def sample_rademacher_like(y):
    return torch.randint(0, 2, y.shape).to(y) * 2 - 1


def hutchinson_ssm(score_net, samples):
    samples = samples.clone().requires_grad_()
    v = sample_rademacher_like(samples)
    score = score_net(samples)
    trace = divergence_approx(score, samples, e=v)
    return (0.5 * (score ** 2).sum(dim=1) + trace).mean()


# -- models: a toy conditional score network (NCSN's embedding of the noise level) --
class ConditionalScoreNet(nn.Module):
    def __init__(self, dim, hidden, num_classes):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.embed = nn.Embedding(num_classes, hidden)
        self.embed.weight.data.uniform_()
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, dim)

    def forward(self, x, y):
        h = F.softplus(self.fc1(x)) * self.embed(y)
        h = F.elu(self.fc2(h))
        return self.fc3(h)


class ScoreNet(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Softplus(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, dim))

    def forward(self, x):
        return self.net(x)


# -- Langevin dynamics as runners/anneal_runner.py writes them --
def anneal_Langevin_dynamics(x_mod, scorenet, sigmas, n_steps_each=100, step_lr=0.00002):
    images = []

    with torch.no_grad():
        for c, sigma in enumerate(sigmas):
            labels = torch.ones(x_mod.shape[0], device=x_mod.device) * c
            labels = labels.long()
            step_size = step_lr * (sigma / sigmas[-1]) ** 2
            for s in range(n_steps_each):
                images.append(torch.clamp(x_mod, 0.0, 1.0).to('cpu'))
                noise = torch.randn_like(x_mod) * np.sqrt(step_size * 2)
                grad = scorenet(x_mod, labels)
                x_mod = x_mod + step_size * grad + noise
                # print("class: {}, step_size: {}, mean {}, max {}".format(c, step_size, grad.abs().mean(),
                #                                                          grad.abs().max()))

        return images


def Langevin_dynamics(x_mod, scorenet, n_steps=1000, step_lr=0.00002):
    images = []

    with torch.no_grad():
        for _ in range(n_steps):
            images.append(torch.clamp(x_mod, 0.0, 1.0).to('cpu'))
            noise = torch.randn_like(x_mod) * np.sqrt(step_lr * 2)
            grad = scorenet(x_mod)
            x_mod = x_mod + step_lr * grad + noise
            print("modulus of grad components: mean {}, max {}".format(grad.abs().mean(), grad.abs().max()))

        return images


# -- the runners' training loops, made small --
sigma_begin, sigma_end, num_classes = 1.0, 0.01, 4
sigmas = torch.tensor(np.exp(np.linspace(np.log(sigma_begin), np.log(sigma_end), num_classes))).float()
data = torch.tensor(points, dtype=torch.float32)

score = ConditionalScoreNet(2, 16, num_classes)
initialize(score)
optimizer = optim.Adam(score.parameters(), lr=1e-3, weight_decay=0.000, betas=(0.9, 0.999), amsgrad=False)
for step, X in enumerate(data.split(8)):
    labels = torch.randint(0, len(sigmas), (X.shape[0],), device=X.device)
    loss = anneal_dsm_score_estimation(score, X, labels, sigmas, 2.)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(score))
images = anneal_Langevin_dynamics(torch.rand(4, 2), score, sigmas, n_steps_each=3, step_lr=0.01)
record.append(torch.stack(images).numpy())

for loss_name in ["ssm", "ssm_vr", "hutchinson"]:
    score = ScoreNet(2, 16)
    initialize(score)
    optimizer = optim.Adam(score.parameters(), lr=1e-3)
    for step, X in enumerate(data.split(8)):
        if loss_name == "ssm":
            loss, *_ = sliced_score_estimation(score, X, n_particles=2)
        elif loss_name == "ssm_vr":
            loss, *_ = sliced_score_estimation_vr(score, X, n_particles=1)
        else:
            loss = hutchinson_ssm(score, X)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(score))
    images = Langevin_dynamics(torch.rand(4, 2), score, n_steps=2, step_lr=0.01)
    record.append(torch.stack(images).numpy())
'''

NCSN_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\nimport torch.autograd as autograd\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nimport retrograd.autograd as autograd\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_score_matching_losses_and_langevin_sampling_run_as_torch(capsys):
    points = np.random.default_rng(9102).standard_normal((16, 2))
    (theirs, ours), logs = runs_with_draws(
        NCSN_SOURCE,
        NCSN_STEPS,
        capsys,
        9102,
        points=points,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 16
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert (
        logs[0].count("modulus of grad components")
        == logs[1].count("modulus of grad components")
        == 6
    )


# -- JEM --------------------------------------------------------------------------------------------
JEM_SOURCE = '''
import torch as t, torch.nn as nn, torch.nn.functional as tnnF
import numpy as np


# -- a small stand-in for JEM's wideresnet backbone (models/wideresnet.py's interface: last_dim) --
class Wide_ResNet(nn.Module):
    def __init__(self, depth, widen_factor, num_classes=10, input_channels=3, sum_pool=False, norm=None, leak=.2, dropout_rate=0.0):
        super(Wide_ResNet, self).__init__()
        self.leak = leak
        self.conv1 = nn.Conv2d(input_channels, widen_factor, 3, padding=1)
        self.conv2 = nn.Conv2d(widen_factor, widen_factor, 3, padding=1, stride=2)
        self.lrelu = nn.LeakyReLU(leak)
        self.last_dim = widen_factor

    def forward(self, x, vx=None):
        out = self.lrelu(self.conv1(x))
        out = self.lrelu(self.conv2(out))
        out = tnnF.avg_pool2d(out, out.shape[2])
        return out.view(out.size(0), -1)


# -- train_wrn_ebm.py --
class F(nn.Module):
    def __init__(self, depth=28, width=2, norm=None, dropout_rate=0.0, n_classes=10):
        super(F, self).__init__()
        self.f = Wide_ResNet(depth, width, norm=norm, dropout_rate=dropout_rate)
        self.energy_output = nn.Linear(self.f.last_dim, 1)
        self.class_output = nn.Linear(self.f.last_dim, n_classes)

    def forward(self, x, y=None):
        penult_z = self.f(x)
        return self.energy_output(penult_z).squeeze()

    def classify(self, x):
        penult_z = self.f(x)
        return self.class_output(penult_z).squeeze()


class CCF(F):
    def __init__(self, depth=28, width=2, norm=None, dropout_rate=0.0, n_classes=10):
        super(CCF, self).__init__(depth, width, norm=norm, dropout_rate=dropout_rate, n_classes=n_classes)

    def forward(self, x, y=None):
        logits = self.classify(x)
        if y is None:
            return logits.logsumexp(1)
        else:
            return t.gather(logits, 1, y[:, None])


def init_random(args, bs):
    return t.FloatTensor(bs, n_ch, im_sz, im_sz).uniform_(-1, 1)


def get_model_and_buffer(args, device, sample_q):
    model_cls = F if args.uncond else CCF
    f = model_cls(args.depth, args.width, args.norm, dropout_rate=args.dropout_rate, n_classes=args.n_classes)
    if not args.uncond:
        assert args.buffer_size % args.n_classes == 0, "Buffer size must be divisible by args.n_classes"
    if args.load_path is None:
        # make replay buffer
        replay_buffer = init_random(args, args.buffer_size)
    else:
        print(f"loading model from {args.load_path}")
        ckpt_dict = t.load(args.load_path)
        f.load_state_dict(ckpt_dict["model_state_dict"])
        replay_buffer = ckpt_dict["replay_buffer"]

    f = f.to(device)
    return f, replay_buffer


def get_sample_q(args, device):
    def sample_p_0(replay_buffer, bs, y=None):
        if len(replay_buffer) == 0:
            return init_random(args, bs), []
        buffer_size = len(replay_buffer) if y is None else len(replay_buffer) // args.n_classes
        inds = t.randint(0, buffer_size, (bs,))
        # if cond, convert inds to class conditional inds
        if y is not None:
            inds = y.cpu() * buffer_size + inds
            assert not args.uncond, "Can't drawn conditional samples without giving me y"
        buffer_samples = replay_buffer[inds]
        random_samples = init_random(args, bs)
        choose_random = (t.rand(bs) < args.reinit_freq).float()[:, None, None, None]
        samples = choose_random * random_samples + (1 - choose_random) * buffer_samples
        return samples.to(device), inds

    def sample_q(f, replay_buffer, y=None, n_steps=args.n_steps):
        """this func takes in replay_buffer now so we have the option to sample from
        scratch (i.e. replay_buffer==[]).  See test_wrn_ebm.py for example.
        """
        f.eval()
        # get batch size
        bs = args.batch_size if y is None else y.size(0)
        # generate initial samples and buffer inds of those samples (if buffer is used)
        init_sample, buffer_inds = sample_p_0(replay_buffer, bs=bs, y=y)
        x_k = t.autograd.Variable(init_sample, requires_grad=True)
        # sgld
        for k in range(n_steps):
            f_prime = t.autograd.grad(f(x_k, y=y).sum(), [x_k], retain_graph=True)[0]
            x_k.data += args.sgld_lr * f_prime + args.sgld_std * t.randn_like(x_k)
        f.train()
        final_samples = x_k.detach()
        # update replay buffer
        if len(replay_buffer) > 0:
            replay_buffer[buffer_inds] = final_samples.cpu()
        return final_samples
    return sample_q


# -- main(), made small: the labelled and unlabelled loaders are lists of batches --
device = t.device('cpu')
sample_q = get_sample_q(args, device)
f, replay_buffer = get_model_and_buffer(args, device, sample_q)
initialize(f)
params = f.class_output.parameters() if args.clf_only else f.parameters()
if args.optimizer == "adam":
    optim = t.optim.Adam(params, lr=args.lr, betas=[.9, .999], weight_decay=args.weight_decay)
else:
    optim = t.optim.SGD(params, lr=args.lr, momentum=.9, weight_decay=args.weight_decay)

cur_iter = 0
for epoch in range(args.n_epochs):
    for i, (x_p_d, _) in enumerate(dload_train):
        x_p_d = t.tensor(x_p_d, dtype=t.float32)
        x_lab, y_lab = dload_train_labeled[i]
        x_lab, y_lab = t.tensor(x_lab, dtype=t.float32), t.tensor(y_lab)
        L = 0.
        if args.p_x_weight > 0:  # maximize log p(x)
            if args.class_cond_p_x_sample:
                assert not args.uncond, "can only draw class-conditional samples if EBM is class-cond"
                y_q = t.randint(0, args.n_classes, (args.batch_size,)).to(device)
                x_q = sample_q(f, replay_buffer, y=y_q)
            else:
                x_q = sample_q(f, replay_buffer)  # sample from log-sumexp

            fp_all = f(x_p_d)
            fq_all = f(x_q)
            fp = fp_all.mean()
            fq = fq_all.mean()

            l_p_x = -(fp - fq)
            if cur_iter % args.print_every == 0:
                print('P(x) | {}:{:>d} f(x_p_d)={:>14.9f} f(x_q)={:>14.9f} d={:>14.9f}'.format(epoch, i, fp, fq,
                                                                                               fp - fq))
            L += args.p_x_weight * l_p_x

        if args.p_y_given_x_weight > 0:  # maximize log p(y | x)
            logits = f.classify(x_lab)
            l_p_y_given_x = nn.CrossEntropyLoss()(logits, y_lab)
            if cur_iter % args.print_every == 0:
                acc = (logits.max(1)[1] == y_lab).float().mean()
                print('P(y|x) {}:{:>d} loss={:>14.9f}, acc={:>14.9f}'.format(epoch,
                                                                             cur_iter,
                                                                             l_p_y_given_x.item(),
                                                                             acc.item()))
            L += args.p_y_given_x_weight * l_p_y_given_x

        # break if the loss diverged...easier for poppa to run experiments this way
        if L.abs().item() > 1e8:
            print("BAD BOIIIIIIIIII")
            1/0

        optim.zero_grad()
        L.backward()
        optim.step()
        cur_iter += 1
        record.append(L.item())
        record.append(params_of(f))
        record.append(replay_buffer.numpy().copy())
'''

JEM_STEPS = [
    (
        "\nimport torch as t, torch.nn as nn, torch.nn.functional as tnnF\n",
        "\nimport retrograd as t, retrograd.nn as nn, retrograd.nn.functional as tnnF\n",
    ),
    (
        "        L.backward()\n        optim.step()\n",
        "        grads = L.backward()\n        optim.step(grads)\n",
    ),
]

#: ``init_random``'s draw from torch's own generator, made one the two runs share
JEM_INIT_RANDOM = (
    "    return t.FloatTensor(bs, n_ch, im_sz, im_sz).uniform_(-1, 1)\n",
    "    return t.rand(bs, n_ch, im_sz, im_sz) * 2 - 1\n",
)


def _masked(log: str) -> str:
    return re.sub(r"-?\d+\.\d+", "#", log)


def _jem_args(uncond):
    return types.SimpleNamespace(
        depth=28, width=4, norm=None, dropout_rate=0.0, n_classes=3, uncond=uncond, buffer_size=6,
        load_path=None, n_steps=2, batch_size=4, reinit_freq=0.25, sgld_lr=1.0, sgld_std=0.01,
        clf_only=False, optimizer="adam", lr=1e-3, weight_decay=0.0, n_epochs=1, p_x_weight=1.0,
        p_y_given_x_weight=1.0, class_cond_p_x_sample=not uncond, print_every=1,
    )  # fmt: skip


@pytest.mark.parametrize("uncond", [False, True])
def test_jem_sgld_and_replay_buffer_train_as_torch(capsys, uncond):
    rng = np.random.default_rng(9103)
    dload_train = [(rng.uniform(-1, 1, (4, 3, 4, 4)), None) for _ in range(2)]
    dload_train_labeled = [
        (rng.uniform(-1, 1, (4, 3, 4, 4)), rng.integers(0, 3, 4)) for _ in range(2)
    ]
    source = JEM_SOURCE.replace(*JEM_INIT_RANDOM)
    (theirs, ours), logs = runs_with_draws(
        source, JEM_STEPS, capsys, 9103, args=_jem_args(uncond), n_ch=3, im_sz=4,
        dload_train=dload_train, dload_train_labeled=dload_train_labeled,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 6
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert _masked(logs[1]) == _masked(logs[0])  # (the numbers: in the records)
