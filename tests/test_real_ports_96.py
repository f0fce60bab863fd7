"""Real-port tests (the harness: ``tests/real_ports.py``): uncertainty estimation, each program
written here in the style of a public project (none is copied from it) and trained a few steps
against torch's run of the same program from the same weights and draws.

- SWAG written here in the style of wjmaddox/swa_gaussian: every parameter popped out of
  ``module._parameters`` (a ``None`` bias skipped) and replaced by ``{name}_mean``,
  ``{name}_sq_mean`` and ``{name}_dev`` buffers from ``w.new(w.size()).zero_()`` and
  ``w.new_empty((0, w.numel())).zero_()``, through ``self.base.apply``; ``collect_model``
  reading and replacing them by ``module.__getattr__``/``module.__setattr__``, ``torch.cat`` onto
  the empty deviation matrix, ``dev[1:, :]`` past the rank, ``self.n_collected.add_(1)`` of a long
  buffer; a joint diagonal sample by ``torch.randn_like(var, requires_grad=False)`` over
  ``flat``/``like`` (``contiguous().view``, ``row[:, a:b].view(shape)``), a low-rank term by
  ``devs.t().matmul(torch.randn(k))``, a per-layer sample by ``torch.randn_like``, the sampled
  weights set as plain attributes; BatchNorm statistics recomputed through ``issubclass(m.__class__,
  torch.nn.modules.batchnorm._BatchNorm)``, buffers replaced by ``torch.zeros_like``/``ones_like``,
  ``momentum = b / (n + b)``, ``itertools.islice`` and ``torch.autograd.Variable``; an SWA
  learning-rate schedule written into ``param_groups``; SGD with momentum and weight decay.
- concrete dropout written here in the style of yaringal/ConcreteDropout's PyTorch notebook:
  ``nn.Parameter(torch.empty(1).uniform_(lo, hi))`` of a logit, the relaxed Bernoulli mask from
  ``torch.rand_like``, ``x /= 1 - p``, the weight term summed over ``layer.parameters()`` onto
  ``0``, ``rate_term += ...``/``*=``; each layer's penalty written into ``torch.empty(4)`` by
  ``h, penalties[i] = ...``; a heteroscedastic Gaussian NLL, ``torch.autograd.Variable``
  minibatches, the MC passes ``.view(...).cpu().data.numpy()`` and
  ``torch.sigmoid(m.p_logit).cpu().data.numpy()[0]`` over ``net.modules()``. ``torch.rand_like``
  draws from one seeded stream in both runs.
- DUQ written here in the style of y0ast/deterministic-uncertainty-quantification's two-moons
  notebook: ``nn.Parameter(torch.normal(torch.zeros(...), 1))``, the ``N`` and ``m`` buffers
  replaced by assignment (in ``__init__`` and in the centroid update), ``torch.einsum("ij,mnj->imn",
  ...)`` and ``torch.einsum("ijk,ik->jk", ...)``; a gradient penalty by ``torch.autograd.grad(...,
  grad_outputs=torch.ones_like(scores), create_graph=True)`` of an input made
  ``requires_grad_(True)``, ``flatten(start_dim=1).norm(2, dim=1)``; ``F.binary_cross_entropy`` of
  ``F.one_hot(y, classes).float()``, ``loss +=`` the penalty, SGD with momentum and weight decay,
  the centroids updated under ``torch.no_grad()``.
- deep evidential regression written here in the style of aamini/evidential-deep-learning's
  PyTorch ports: a Normal-Inverse-Gamma head by ``torch.split`` and ``F.softplus`` evidence, its
  NLL (``torch.log(np.pi / nu)``, ``torch.lgamma``), the plain evidence regulariser and the KL one
  (``torch.square``, ``torch.abs``, ``torch.digamma``; the prior made a tensor first, since
  ``torch.lgamma`` of a float is a ``TypeError``), then ``torch.minimum(..., torch.tensor(1e3))``
  of the epistemic and the aleatoric variances under ``torch.no_grad()``.
- temperature scaling written here in the style of gpleiss/temperature_scaling: one temperature
  ``unsqueeze(1).expand(...)`` over the logits, the logits gathered under ``torch.no_grad()``,
  ``optim.LBFGS([T], lr=0.01, max_iter=50)`` with a closure; an ECE by ``torch.linspace`` bins,
  ``torch.max(softmax, 1)``, ``gt``/``le`` of ``.item()`` bounds multiplied as masks,
  ``right[inside].float().mean()`` and ``total +=`` onto ``torch.zeros(1)``; printed logs compared.
- DUE's feature extractor written here in the style of y0ast/DUE: a soft spectral norm subclassing
  ``torch.nn.utils.spectral_norm.SpectralNorm``, its ``compute_weight`` with the power iteration
  ``normalize(torch.mv(mat.t(), u), dim=0, eps=self.eps, out=v)`` into the module's buffers,
  ``u.clone(memory_format=torch.contiguous_format)``, ``torch.max(torch.ones(1).to(...), sigma /
  self.coeff)`` and ``.copy_(sigma.detach())``; its ``apply`` reading ``module._forward_pre_hooks``,
  ``delattr``, ``register_parameter``, ``setattr(module, name, w.data)``,
  ``module._register_state_dict_hook(SpectralNormStateDictHook(fn))`` and
  ``module._register_load_state_dict_pre_hook(SpectralNormLoadStateDictPreHook(fn))`` (imported
  under another name); a residual MLP of such layers (ELU) trained on a noisy sine, its buffers
  compared after each step. The hook class could not be imported, and the ``out=`` of
  ``normalize`` was ignored (the buffers never moved): both are checked on their own below.
- DUE's SNGP head written here in the style of its ``sngp.py``: random Fourier features from
  ``torch.linalg.qr`` blocks with ``feature_scale``/``W``/``b`` buffers, a ``torch.normal(0, 0.05,
  size)`` projection through ``nn.functional.linear`` and ``LayerNorm``, the precision buffer grown
  by ``self.precision += phi.t() @ phi`` in training, ``self.n_seen += x.shape[0]`` of a 0-d
  int64 buffer asserted against the data size, the buffers replaced at each epoch's start, the
  covariance by ``torch.linalg.cholesky_ex`` and ``torch.cholesky_inverse(chol, out=
  self.covariance)`` under ``torch.no_grad()``, mean-field logits by ``torch.diag(cov)``; over the
  spectral-normalized MLP, for regression and for classification. The ``out=`` of
  ``cholesky_inverse`` was refused: checked on its own below.

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns
the gradients, ``step`` takes them; the LBFGS closure returns the loss and its gradients).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
    state_of,
)

IMPORTS = (
    "\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\n\nF = nn.functional\n",
    "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n"
    "\nF = nn.functional\n",
)


# -- SWAG ------------------------------------------------------------------------------------------
SWAG_SOURCE = """
import itertools

import torch
import torch.nn as nn
import torch.optim as optim

F = nn.functional

# SWA-Gaussian in the style of swa_gaussian: the moments of the weights along an SGD trajectory
# live as buffers of a copy of the model whose parameters were removed; sampling writes plain
# tensors where the parameters were.
BatchNormBase = torch.nn.modules.batchnorm._BatchNorm


def flat(tensors):
    return torch.cat([t.contiguous().view(-1, 1) for t in tensors]).view(-1)


def like(row, templates):
    # row: [1, total] -> one view per template, in order
    out, start = [], 0
    for t in templates:
        out.append(row[:, start : start + t.numel()].view(t.shape))
        start += t.numel()
    return out


def set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr
    return lr


def swa_schedule(epoch, base=0.1, final=0.05, start=3):
    frac = epoch / start
    if frac <= 0.5:
        return base
    if frac <= 0.9:
        return base * (1.0 - (1.0 - final / base) * (frac - 0.5) / 0.4)
    return final


def refresh_bn(batches, net, subset=None):
    # sampled weights need their own BatchNorm statistics: one pass, averaged cumulatively
    saved = {}
    net.apply(
        lambda m: (
            saved.__setitem__(m, m.momentum) if issubclass(m.__class__, BatchNormBase) else None
        )
    )
    if not saved:
        return

    def restart(m):
        if issubclass(m.__class__, BatchNormBase):
            m.running_mean = torch.zeros_like(m.running_mean)
            m.running_var = torch.ones_like(m.running_var)

    net.train()
    net.apply(restart)
    if subset is not None:
        batches = itertools.islice(batches, int(len(batches) * subset))
    seen = 0
    with torch.no_grad():
        for xb, _ in batches:
            xb = torch.autograd.Variable(xb)
            size = xb.data.size(0)
            for m in saved:
                m.momentum = size / (seen + size)
            net(xb)
            seen += size
    for m, momentum in saved.items():
        m.momentum = momentum


def to_moment_buffers(module, slots, keep_deviations):
    for name in list(module._parameters):
        if module._parameters[name] is None:  # e.g. a Linear without bias
            continue
        w = module._parameters[name].data
        module._parameters.pop(name)
        module.register_buffer(f"{name}_mean", w.new(w.size()).zero_())
        module.register_buffer(f"{name}_sq_mean", w.new(w.size()).zero_())
        if keep_deviations:
            module.register_buffer(f"{name}_dev", w.new_empty((0, w.numel())).zero_())
        slots.append((module, name))


class SWAG(nn.Module):
    def __init__(self, make_base, rank=0, var_floor=1e-30, **base_kwargs):
        super().__init__()
        self.register_buffer("n_collected", torch.zeros([1], dtype=torch.long))
        self.rank, self.var_floor, self.slots = rank, var_floor, []
        self.base = make_base(**base_kwargs)
        self.base.apply(lambda m: to_moment_buffers(m, self.slots, rank > 0))

    def forward(self, x):
        return self.base(x)

    def moments(self, module, name):
        return module.__getattr__(f"{name}_mean"), module.__getattr__(f"{name}_sq_mean")

    def collect_model(self, net):
        n = self.n_collected.item()
        for (module, name), p in zip(self.slots, net.parameters()):
            mean, sq_mean = self.moments(module, name)
            mean = mean * n / (n + 1.0) + p.data / (n + 1.0)
            sq_mean = sq_mean * n / (n + 1.0) + p.data**2 / (n + 1.0)
            if self.rank:
                dev = module.__getattr__(f"{name}_dev")
                dev = torch.cat((dev, (p.data - mean).view(-1, 1).t()), dim=0)
                if n + 1 > self.rank:  # keep only the latest `rank` deviations
                    dev = dev[1:, :]
                module.__setattr__(f"{name}_dev", dev)
            module.__setattr__(f"{name}_mean", mean)
            module.__setattr__(f"{name}_sq_mean", sq_mean)
        self.n_collected.add_(1)

    def sample(self, scale=1.0, low_rank=False, per_layer=False):
        if per_layer:
            self.sample_per_layer(scale)
        else:
            self.sample_joint(scale, low_rank)

    def sample_per_layer(self, scale):
        for module, name in self.slots:
            mean, sq_mean = self.moments(module, name)
            std = torch.sqrt(torch.clamp(sq_mean - mean**2, self.var_floor))
            module.__setattr__(name, mean + scale * std * torch.randn_like(mean))

    def sample_joint(self, scale, low_rank):
        pairs = [self.moments(module, name) for module, name in self.slots]
        means = [m.cpu() for m, _ in pairs]
        mean, sq_mean = flat(means), flat([s.cpu() for _, s in pairs])
        var = torch.clamp(sq_mean - mean**2, self.var_floor)
        noise = var.sqrt() * torch.randn_like(var, requires_grad=False)
        if low_rank:
            devs = torch.cat(
                [module.__getattr__(f"{name}_dev").cpu() for module, name in self.slots], dim=1
            )
            z = torch.randn(devs.size(0))
            noise = noise + devs.t().matmul(z) / (self.rank - 1) ** 0.5
        row = (mean + scale**0.5 * noise).unsqueeze(0)
        for (module, name), w in zip(self.slots, like(row, means)):
            module.__setattr__(name, w)


class SmallNet(nn.Module):
    def __init__(self, classes=3, width=8):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(4, width, bias=False),
            nn.BatchNorm1d(width),
            nn.ReLU(inplace=True),
            nn.Linear(width, classes),
        )

    def forward(self, x):
        return self.body(x)


loader = [(torch.tensor(xb), torch.tensor(yb)) for xb, yb in batches]
net = SmallNet()
initialize(net)
swag = SWAG(SmallNet, rank=2, classes=3)
sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
for epoch in range(5):
    set_lr(sgd, swa_schedule(epoch))
    net.train()
    for xb, yb in loader:
        loss = F.cross_entropy(net(xb), yb)
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        record.append(loss.item())
    if epoch >= 3:
        swag.collect_model(net)
        record.append(state_of(swag))
record.append(params_of(net))

probe = loader[1][0]
for scale, low_rank, per_layer, subset in [
    (0.0, False, False, None),
    (1.0, True, False, 1.0),
    (0.5, False, True, None),
]:
    swag.sample(scale, low_rank=low_rank, per_layer=per_layer)
    refresh_bn(loader, swag, subset=subset)
    swag.eval()
    record.append(F.softmax(swag(probe), dim=1).detach().numpy())
    record.append(state_of(swag))
    record.append(swag.base.body[0].weight.numpy())
"""

SWAG_STEPS = [
    IMPORTS,
    (
        "        loss.backward()\n        sgd.step()\n",
        "        grads = loss.backward()\n        sgd.step(grads)\n",
    ),
]


def test_swa_gaussian_swag_collects_and_samples_as_torch(capsys):
    rng = np.random.default_rng(9601)
    batches = [
        (rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(2)
    ]
    (theirs, ours), _ = runs_with_draws(
        SWAG_SOURCE,
        SWAG_STEPS,
        capsys,
        9601,
        batches=batches,
        initialize=initializer(),
        params_of=params_of,
        state_of=state_of,
    )
    assert len(theirs) == 10 + 2 + 1 + 9
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- concrete dropout ------------------------------------------------------------------------------
CONCRETE_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim

F = nn.functional

# Concrete dropout in the style of yaringal/ConcreteDropout's PyTorch notebook: each layer learns
# its own dropout rate through a relaxed Bernoulli mask, with a weight and an entropy regulariser.


def logit(p):
    return np.log(p) - np.log(1.0 - p)


class LearntDropout(nn.Module):
    def __init__(self, weight_reg=1e-6, rate_reg=1e-5, p_low=0.1, p_high=0.1, temperature=0.1):
        super().__init__()
        self.weight_reg, self.rate_reg, self.temperature = weight_reg, rate_reg, temperature
        self.p_logit = nn.Parameter(torch.empty(1).uniform_(logit(p_low), logit(p_high)))

    def relaxed_mask(self, x, p, eps=1e-7):
        u = torch.rand_like(x)
        z = (
            torch.log(p + eps)
            - torch.log(1 - p + eps)
            + torch.log(u + eps)
            - torch.log(1 - u + eps)
        )
        kept = 1 - torch.sigmoid(z / self.temperature)
        x = torch.mul(x, kept)
        x /= 1 - p  # rescale by the keep probability
        return x

    def forward(self, x, layer):
        p = self.p_logit.sigmoid()
        y = layer(self.relaxed_mask(x, p))
        squares = 0
        for w in layer.parameters():
            squares += torch.sum(torch.pow(w, 2))
        rate_term = p * torch.log(p)
        rate_term += (1.0 - p) * torch.log(1.0 - p)
        rate_term *= self.rate_reg * x[0].numel()  # scaled by one example's input size
        return y, self.weight_reg * squares / (1 - p) + rate_term


class MeanAndVariance(nn.Module):
    def __init__(self, width, weight_reg, rate_reg):
        super().__init__()
        self.hidden = nn.ModuleList([nn.Linear(1, width), nn.Linear(width, width)])
        self.head_mean = nn.Linear(width, 1)
        self.head_log_var = nn.Linear(width, 1)
        self.drops = nn.ModuleList([LearntDropout(weight_reg, rate_reg) for _ in range(4)])
        self.act = nn.ReLU()

    def forward(self, x):
        penalties = torch.empty(4, device=x.device)
        h = x
        for i, layer in enumerate(self.hidden):
            h, penalties[i] = self.drops[i](h, nn.Sequential(layer, self.act))
        mean, penalties[2] = self.drops[2](h, self.head_mean)
        log_var, penalties[3] = self.drops[3](h, self.head_log_var)
        return mean, log_var, penalties.sum()


def gaussian_nll(target, mean, log_var):
    return torch.mean(torch.sum(torch.exp(-log_var) * (target - mean) ** 2 + log_var, 1), 0)


xs, ys = torch.tensor(data_x), torch.tensor(data_y)
n_points, batch, length_scale, draws = xs.shape[0], 4, 1e-4, 4
net = MeanAndVariance(12, length_scale**2.0 / n_points, 2.0 / n_points)
initialize(net)
adam = optim.Adam(net.parameters())
for epoch in range(3):
    for start in range(0, n_points, batch):
        xb = torch.autograd.Variable(xs[start : start + batch])
        yb = torch.autograd.Variable(ys[start : start + batch])
        mean, log_var, penalty = net(xb)
        loss = gaussian_nll(yb, mean, log_var) + penalty
        adam.zero_grad()
        loss.backward()
        adam.step()
        record.append(loss.item())
record.append(params_of(net))

# Monte Carlo predictions: every pass draws new masks
passes = [net(xs) for _ in range(draws)]
record.append(torch.stack([m for m, _, _ in passes]).view(draws, n_points).cpu().data.numpy())
record.append(torch.stack([v for _, v, _ in passes]).view(draws, n_points).cpu().data.numpy())
rates = [
    torch.sigmoid(m.p_logit).cpu().data.numpy()[0] for m in net.modules() if hasattr(m, "p_logit")
]
record.append(np.array(rates))
"""

CONCRETE_STEPS = [
    IMPORTS,
    (
        "        loss.backward()\n        adam.step()\n",
        "        grads = loss.backward()\n        adam.step(grads)\n",
    ),
]


def _rand_like_from(seed):
    """``make_rand_like``: each library's ``rand_like`` drawing from one stream seeded by
    ``seed`` (the same numbers in both runs)."""

    def make(lib):
        rng = np.random.default_rng(seed)

        def rand_like(t, **_):
            return lib.tensor(rng.uniform(size=tuple(t.shape)), dtype=t.dtype)

        lib.rand_like = rand_like
        return rand_like

    return make


def test_concrete_dropout_trains_and_samples_as_torch(capsys):
    rng = np.random.default_rng(9602)
    data_x = rng.standard_normal((8, 1)).astype(np.float32)
    data_y = (2 * data_x + 0.3 * rng.standard_normal((8, 1))).astype(np.float32)
    saved = torch.rand_like, rg.rand_like
    try:
        (theirs, ours), _ = runs_with_draws(
            CONCRETE_SOURCE,
            CONCRETE_STEPS,
            capsys,
            9602,
            data_x=data_x,
            data_y=data_y,
            initialize=initializer(),
            params_of=params_of,
            make_rand_like=_rand_like_from(9602),
        )
    finally:
        torch.rand_like, rg.rand_like = saved
    assert len(theirs) == 6 + 1 + 3
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- deterministic uncertainty quantification ------------------------------------------------------
DUQ_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim

F = nn.functional

# DUQ in the style of y0ast/deterministic-uncertainty-quantification's two-moons notebook: an RBF
# kernel between a per-class embedding and class centroids kept as exponential moving sums, a
# BCE loss on the kernel values and a two-sided gradient penalty on the inputs.


class CentroidNet(nn.Module):
    def __init__(self, hidden, classes, emb=8, length_scale=0.3, decay=0.99):
        super().__init__()
        self.length_scale, self.decay = length_scale, decay
        self.trunk = nn.Sequential(
            nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.W = nn.Parameter(torch.normal(torch.zeros(emb, classes, hidden), 1))
        self.register_buffer("N", torch.ones(classes) * 12)
        self.register_buffer("m", torch.normal(torch.zeros(emb, classes), 1))
        self.m = self.m * self.N.unsqueeze(0)  # sums, not means: divided by N when used

    def embed(self, x):
        return torch.einsum("ij,mnj->imn", self.trunk(x), self.W)  # [batch, emb, class]

    def forward(self, x):
        z = self.embed(x)
        centroids = (self.m / self.N.unsqueeze(0)).unsqueeze(0)
        return z, (-((z - centroids) ** 2)).mean(1).div(2 * self.length_scale**2).exp()

    def update_centroids(self, x, onehot):
        z = self.embed(x)
        self.N = torch.max(
            self.decay * self.N + (1 - self.decay) * onehot.sum(0), torch.ones_like(self.N)
        )
        self.m = self.decay * self.m + (1 - self.decay) * torch.einsum("ijk,ik->jk", z, onehot)


def input_gradient_penalty(x, scores):
    grad = torch.autograd.grad(
        outputs=scores, inputs=x, grad_outputs=torch.ones_like(scores), create_graph=True
    )[0]
    norms = grad.flatten(start_dim=1).norm(2, dim=1)
    return ((norms - 1) ** 2).mean()


np.random.seed(1)
torch.manual_seed(1)
classes, penalty_weight = 2, 0.5
net = CentroidNet(16, classes)
initialize(net)
sgd = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)


def train_on(x, y):
    net.train()
    sgd.zero_grad()
    x.requires_grad_(True)
    _, scores = net(x)
    onehot = F.one_hot(y, classes).float()
    loss = F.binary_cross_entropy(scores, onehot)
    loss += penalty_weight * input_gradient_penalty(x, scores)
    x.requires_grad_(False)
    loss.backward()
    sgd.step()
    with torch.no_grad():
        net.update_centroids(x, onehot)
    return loss.item()


for xb, yb in batches:
    record.append(train_on(torch.tensor(xb), torch.tensor(yb)))
    record.append(state_of(net))

net.eval()
x = torch.tensor(batches[-1][0]).requires_grad_(True)
_, scores = net(x)
onehot = F.one_hot(torch.tensor(batches[-1][1]), classes).float()
record.append(scores.detach().numpy())
record.append(F.binary_cross_entropy(scores, onehot).item())
record.append(input_gradient_penalty(x, scores).item())
"""

DUQ_STEPS = [
    IMPORTS,
    (
        "    loss.backward()\n    sgd.step()\n",
        "    grads = loss.backward()\n    sgd.step(grads)\n",
    ),
]


def test_duq_trains_with_its_gradient_penalty_as_torch(capsys):
    rng = np.random.default_rng(9603)
    batches = [
        (rng.standard_normal((6, 2)).astype(np.float32), rng.integers(0, 2, 6)) for _ in range(3)
    ]
    (theirs, ours), _ = runs_with_draws(
        DUQ_SOURCE,
        DUQ_STEPS,
        capsys,
        9603,
        batches=batches,
        initialize=initializer(),
        state_of=state_of,
    )
    assert len(theirs) == 6 + 3
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- deep evidential regression --------------------------------------------------------------------
EVIDENTIAL_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim

F = nn.functional

# Deep evidential regression in the style of aamini/evidential-deep-learning's PyTorch ports: a
# Normal-Inverse-Gamma head, its negative log likelihood and an evidence regulariser (plain, or
# the KL to a weak prior).


class EvidentialHead(nn.Module):
    def __init__(self, d_in, d_out=1):
        super().__init__()
        self.d_out = d_out
        self.proj = nn.Linear(d_in, 4 * d_out)

    def forward(self, x):
        gamma, nu, alpha, beta = torch.split(self.proj(x), self.d_out, dim=-1)
        return torch.cat([gamma, F.softplus(nu), F.softplus(alpha) + 1, F.softplus(beta)], dim=-1)


def nig_nll(y, gamma, nu, alpha, beta):
    omega = 2 * beta * (1 + nu)
    per_point = (
        0.5 * torch.log(np.pi / nu)
        - alpha * torch.log(omega)
        + (alpha + 0.5) * torch.log(nu * (y - gamma) ** 2 + omega)
        + torch.lgamma(alpha)
        - torch.lgamma(alpha + 0.5)
    )
    return torch.mean(per_point)


def nig_kl(mu_p, nu_p, a_p, b_p, mu_q, nu_q, a_q, b_q):
    return (
        0.5 * (a_p - 1) / b_p * (nu_q * torch.square(mu_q - mu_p))
        + 0.5 * nu_q / nu_p
        - 0.5 * torch.log(torch.abs(nu_q) / torch.abs(nu_p))
        - 0.5
        + a_q * torch.log(b_p / b_q)
        - (torch.lgamma(a_p) - torch.lgamma(a_q))
        + (a_p - a_q) * torch.digamma(a_p)
        - (b_p - b_q) * a_p / b_p
    )


def evidence_penalty(y, gamma, nu, alpha, beta, prior=0.01, kl=False):
    miss = torch.abs(y - gamma)
    if kl:
        prior = torch.tensor(prior)  # torch.abs and torch.lgamma take tensors, not floats
        return torch.mean(miss * nig_kl(gamma, nu, alpha, beta, gamma, prior, 1 + prior, beta))
    return torch.mean(miss * (2 * nu + alpha))


def evidential_loss(y, out, weight, kl):
    parts = torch.split(out, 1, dim=-1)
    return nig_nll(y, *parts) + weight * evidence_penalty(y, *parts, kl=kl)


xs, ys = torch.tensor(data_x), torch.tensor(data_y)
for kl in (False, True):
    net = nn.Sequential(
        nn.Linear(1, 12), nn.ReLU(), nn.Linear(12, 12), nn.ReLU(), EvidentialHead(12)
    )
    initialize(net)
    adam = optim.Adam(net.parameters(), 5e-3)
    for step in range(3):
        loss = evidential_loss(ys, net(xs), 1e-2, kl)
        adam.zero_grad()
        loss.backward()
        adam.step()
        record.append(loss.item())
    record.append(params_of(net))
    with torch.no_grad():
        gamma, nu, alpha, beta = torch.split(net(xs), 1, dim=-1)
        epistemic = torch.sqrt(beta / (nu * (alpha - 1)))
        record.append(gamma[:, 0].numpy())
        record.append(torch.minimum(epistemic, torch.tensor(1e3))[:, 0].numpy())
        record.append((beta / (alpha - 1))[:, 0].numpy())  # aleatoric
"""

EVIDENTIAL_STEPS = [
    IMPORTS,
    (
        "        loss.backward()\n        adam.step()\n",
        "        grads = loss.backward()\n        adam.step(grads)\n",
    ),
]


def test_deep_evidential_regression_trains_as_torch(capsys):
    rng = np.random.default_rng(9604)
    data_x = rng.uniform(-2, 2, (10, 1)).astype(np.float32)
    data_y = (data_x**3 / 4 + 0.2 * rng.standard_normal((10, 1))).astype(np.float32)
    (theirs, ours), _ = runs_with_draws(
        EVIDENTIAL_SOURCE,
        EVIDENTIAL_STEPS,
        capsys,
        9604,
        data_x=data_x,
        data_y=data_y,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 2 * (3 + 1 + 3)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- temperature scaling ---------------------------------------------------------------------------
TEMPERATURE_SOURCE = """
import torch
from torch import nn, optim

F = nn.functional

# Temperature scaling in the style of gpleiss/temperature_scaling: one scalar divides the logits of
# a trained classifier, tuned by LBFGS on held-out NLL; the expected calibration error over
# equal-width confidence bins before and after.


class ECE(nn.Module):
    def __init__(self, bins=10):
        super().__init__()
        edges = torch.linspace(0, 1, bins + 1)
        self.lows, self.highs = edges[:-1], edges[1:]

    def forward(self, logits, targets):
        confidence, guess = torch.max(F.softmax(logits, dim=1), 1)
        right = guess.eq(targets)
        total = torch.zeros(1, device=logits.device)
        for lo, hi in zip(self.lows, self.highs):
            inside = confidence.gt(lo.item()) * confidence.le(hi.item())
            share = inside.float().mean()
            if share.item() > 0:
                gap = confidence[inside].mean() - right[inside].float().mean()
                total += torch.abs(gap) * share
        return total


class Calibrated(nn.Module):
    def __init__(self, classifier, start=1.5):
        super().__init__()
        self.classifier = classifier
        self.temperature = nn.Parameter(torch.ones(1) * start)

    def scale(self, logits):
        return logits / self.temperature.unsqueeze(1).expand(logits.size(0), logits.size(1))

    def forward(self, x):
        return self.scale(self.classifier(x))

    def fit(self, batches):
        with torch.no_grad():  # the classifier is fixed: its logits once
            logits = torch.cat([self.classifier(x) for x, _ in batches])
            labels = torch.cat([y for _, y in batches])
        nll, ece = nn.CrossEntropyLoss(), ECE()
        before = nll(logits, labels).item(), ece(logits, labels).item()
        print("before: nll %.4f ece %.4f" % before)
        lbfgs = optim.LBFGS([self.temperature], lr=0.01, max_iter=50)

        def closure():
            lbfgs.zero_grad()
            loss = nll(self.scale(logits), labels)
            loss.backward()
            return loss

        lbfgs.step(closure)
        after = nll(self.scale(logits), labels).item(), ece(self.scale(logits), labels).item()
        print("T = %.4f, after: nll %.4f ece %.4f" % (self.temperature.item(), *after))
        return before, (self.temperature.item(), *after)


# an overconfident classifier first: a few large SGD steps
net = nn.Sequential(nn.Linear(5, 24), nn.ReLU(), nn.Linear(24, 4))
initialize(net)
sgd = optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
xs, ys = torch.tensor(train_data[0]), torch.tensor(train_data[1])
for step in range(4):
    loss = F.cross_entropy(net(xs), ys)
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    record.append(loss.item())

held_out = [(torch.tensor(x), torch.tensor(y)) for x, y in valid_batches]
calibrated = Calibrated(net)
record.extend(calibrated.fit(held_out))
record.append(calibrated(held_out[0][0]).detach().numpy())
"""

TEMPERATURE_STEPS = [
    (
        "\nimport torch\nfrom torch import nn, optim\n",
        "\nimport retrograd as torch\nfrom retrograd import nn, optim\n",
    ),
    (
        "    loss.backward()\n    sgd.step()\n",
        "    grads = loss.backward()\n    sgd.step(grads)\n",
    ),
    (
        "            loss.backward()\n            return loss\n",
        "            grads = loss.backward()\n            return loss, grads\n",
    ),
]


def test_temperature_scaling_calibrates_as_torch(capsys):
    rng = np.random.default_rng(9605)
    train_data = (rng.standard_normal((16, 5)).astype(np.float32), rng.integers(0, 4, 16))
    valid_batches = [
        (rng.standard_normal((8, 5)).astype(np.float32), rng.integers(0, 4, 8)) for _ in range(2)
    ]
    (theirs, ours), logs = runs_with_draws(
        TEMPERATURE_SOURCE,
        TEMPERATURE_STEPS,
        capsys,
        9605,
        train_data=train_data,
        valid_batches=valid_batches,
        initialize=initializer(),
    )
    assert len(theirs) == 4 + 2 + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert logs[0] == logs[1]


# -- DUE -------------------------------------------------------------------------------------------
DUE_LAYERS = """
import torch
import torch.nn as nn
import torch.optim as optim

F = nn.functional
normalize = F.normalize

from torch.nn.utils.spectral_norm import SpectralNorm, SpectralNormStateDictHook
from torch.nn.utils.spectral_norm import SpectralNormLoadStateDictPreHook as LoadHook

# DUE's feature extractor in the style of y0ast/DUE: a residual MLP whose linear layers carry a
# *soft* spectral norm (weights are divided by sigma / coeff only when sigma exceeds coeff), built
# on torch's own SpectralNorm hook class.


class SoftSpectralNorm(SpectralNorm):
    def compute_weight(self, module, do_power_iteration):
        w = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = self.reshape_weight_to_matrix(w)
        if do_power_iteration:
            with torch.no_grad():
                for _sweep in range(self.n_power_iterations):
                    # written into the module's buffers in place, as torch's own hook does
                    v = normalize(torch.mv(mat.t(), u), dim=0, eps=self.eps, out=v)
                    u = normalize(torch.mv(mat, v), dim=0, eps=self.eps, out=u)
                if self.n_power_iterations > 0:  # the buffers may change under autograd: copies
                    u, v = (
                        u.clone(memory_format=torch.contiguous_format),
                        v.clone(memory_format=torch.contiguous_format),
                    )
        sigma = torch.dot(u, torch.mv(mat, v))
        getattr(module, self.name + "_sigma").copy_(sigma.detach())  # logged
        return w / torch.max(torch.ones(1).to(w.device), sigma / self.coeff)

    @staticmethod
    def apply(module, coeff, name, n_power_iterations, dim, eps):
        if any(
            isinstance(h, SpectralNorm) and h.name == name
            for h in module._forward_pre_hooks.values()
        ):
            raise RuntimeError(f"{name} already has a spectral norm")
        fn = SoftSpectralNorm(name, n_power_iterations, dim, eps)
        fn.coeff = coeff
        w = module._parameters[name]
        with torch.no_grad():
            rows, cols = fn.reshape_weight_to_matrix(w).size()
            u = normalize(w.new_empty(rows).normal_(0, 1), dim=0, eps=fn.eps)
            v = normalize(w.new_empty(cols).normal_(0, 1), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", w)
        setattr(module, fn.name, w.data)  # a plain attribute until the first forward
        for suffix, buf in (("_u", u), ("_v", v), ("_sigma", torch.ones(1).to(w.device))):
            module.register_buffer(fn.name + suffix, buf)
        _ = module.register_forward_pre_hook(fn)
        saving, loading = SpectralNormStateDictHook(fn), LoadHook(fn)
        module._register_state_dict_hook(saving)  # saves version metadata
        module._register_load_state_dict_pre_hook(loading)  # solves v from old state dicts
        return fn


def soft_spectral_norm(module, coeff, n_power_iterations=1, name="weight", eps=1e-12, dim=None):
    if dim is None:
        transposed = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
        dim = 1 if isinstance(module, transposed) else 0
    SoftSpectralNorm.apply(module, coeff, name, n_power_iterations, dim, eps)
    return module


class ResidualMLP(nn.Module):
    def __init__(
        self,
        d_in,
        width,
        depth,
        coeff=0.95,
        n_power_iterations=1,
        dropout=0.0,
        d_out=None,
        activation="relu",
    ):
        super().__init__()
        sn = lambda layer: soft_spectral_norm(
            layer, coeff=coeff, n_power_iterations=n_power_iterations
        )
        self.first = sn(nn.Linear(d_in, width))
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
        for i in range(depth):
            self.blocks[i] = sn(self.blocks[i])
        self.dropout = nn.Dropout(dropout)
        self.act = {"relu": F.relu, "elu": F.elu}[activation]
        self.last = nn.Linear(width, d_out) if d_out is not None else None

    def forward(self, x):
        h = self.first(x)
        for block in self.blocks:
            h = h + self.dropout(self.act(block(h)))
        return h if self.last is None else self.last(h)
"""

DUE_SOURCE = (
    DUE_LAYERS
    + """

# a deterministic regression on a noisy sine (no GP on top)
net = ResidualMLP(1, 12, 2, d_out=1, activation="elu")
initialize(net)
record.append(list(net.state_dict()))
adam = torch.optim.Adam(net.parameters(), lr=1e-2)
xs, ys = torch.tensor(data_x), torch.tensor(data_y)
for step in range(4):
    net.train()
    adam.zero_grad()
    loss = F.mse_loss(net(xs), ys)
    loss.backward()
    adam.step()
    record.append(loss.item())
    record.append({k: b.numpy().copy() for k, b in net.named_buffers()})
record.append(params_of(net))
net.eval()
with torch.no_grad():
    record.append(net(xs).numpy())
record.append({k: b.numpy().copy() for k, b in net.named_buffers()})
"""
)

DUE_STEPS = [
    IMPORTS,
    (
        "    loss.backward()\n    adam.step()\n",
        "    grads = loss.backward()\n    adam.step(grads)\n",
    ),
]


def test_due_spectral_norm_fc_resnet_trains_as_torch(capsys):
    rng = np.random.default_rng(9606)
    data_x = rng.uniform(-3, 3, (12, 1)).astype(np.float32)
    data_y = (np.sin(data_x) + 0.1 * rng.standard_normal((12, 1))).astype(np.float32)
    (theirs, ours), _ = runs_with_draws(
        DUE_SOURCE,
        DUE_STEPS,
        capsys,
        9606,
        data_x=data_x,
        data_y=data_y,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 1 + 4 * 2 + 1 + 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- the defects the DUE port met ------------------------------------------------------------------
def test_normalize_writes_its_out_argument_as_torch():
    # DUE's power iteration keeps its vectors by ``normalize(..., out=v)`` into the module's
    # buffers; the out= argument was accepted and ignored, so the buffers never moved
    rng = np.random.default_rng(9607)
    matrix = rng.standard_normal((3, 4)).astype(np.float32)
    results = []
    for lib in (torch, rg):
        layer = lib.nn.Linear(4, 3)
        layer.register_buffer("weight_u", lib.ones(3))
        layer.register_buffer("weight_v", lib.ones(2))  # resized, as torch resizes out
        with lib.no_grad():
            u = layer.weight_u
            v = lib.nn.functional.normalize(lib.tensor(matrix).t().mv(u), dim=0, out=layer.weight_v)
            assert v is layer.weight_v
        results.append(np.array(layer.weight_v.numpy(), copy=True))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)
    # as torch's, not where the result would need a graph; the out tensor is left as it was
    x = rg.tensor(matrix[0], requires_grad=True)
    out = rg.zeros(4)
    with pytest.raises(rg.AutodiffError, match=r"normalize: .*out="):
        rg.nn.functional.normalize(x, dim=0, out=out)
    assert out.tolist() == [0.0] * 4
    with pytest.raises(RuntimeError, match=r"out=\.\.\. arguments don't support automatic"):
        torch.nn.functional.normalize(
            torch.tensor(matrix[0], requires_grad=True), dim=0, out=torch.zeros(4)
        )
    with pytest.raises(rg.DTypeError, match="normalize: out must be a tensor"):
        rg.nn.functional.normalize(x.detach(), dim=0, out=np.zeros(4))


def test_spectral_norm_hook_class_loads_a_version_0_state_dict_as_torch():
    # ``torch.nn.utils.spectral_norm.SpectralNorm`` and its state-dict hooks (registered by
    # ``_register_load_state_dict_pre_hook``) could not be imported: a state dict of
    # version 0 (``weight`` and ``weight_u`` saved, no ``weight_v``) gets its ``v`` solved
    from torch.nn.utils.spectral_norm import SpectralNorm as TorchSpectralNorm

    from retrograd.nn.utils.spectral_norm import SpectralNorm as RgSpectralNorm

    rng = np.random.default_rng(9608)
    weight = rng.standard_normal((4, 1, 2)).astype(np.float32)  # (a 4x2 matrix: full rank)
    u = rng.standard_normal(4).astype(np.float32)
    u /= np.linalg.norm(u)
    sigma = 1.7
    legacy = {"weight_orig": weight, "weight": weight / sigma, "weight_u": u, "bias": np.zeros(4)}
    loaded = []
    for lib, spectral in ((torch, TorchSpectralNorm), (rg, RgSpectralNorm)):
        conv = lib.nn.Conv1d(1, 4, 2)
        spectral.apply(conv, "weight", 1, 0, 1e-12)
        conv.load_state_dict({k: lib.tensor(v, dtype=lib.float32) for k, v in legacy.items()})
        conv.eval()
        out = conv(lib.tensor(np.ones((1, 1, 3), np.float32)))
        loaded.append((conv.weight_v.numpy().copy(), conv.weight.detach().numpy().copy()))
        # the module still pickles whole (torch.save of a model), its hooks with it
        clone = pickle.loads(pickle.dumps(conv))
        np.testing.assert_array_equal(
            clone(lib.ones(1, 1, 3)).detach().numpy(), conv(lib.ones(1, 1, 3)).detach().numpy()
        )
        assert sorted(conv.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
        assert conv.state_dict()._metadata[""]["spectral_norm"] == {"weight.version": 1}
        assert tuple(out.shape) == (1, 4, 2)
    for mine, reference in zip(loaded[1], loaded[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-5)
    with pytest.raises(rg.InvalidArgumentError, match="Cannot register two spectral_norm"):
        layer = rg.nn.Linear(2, 2)
        RgSpectralNorm.apply(layer, "weight", 1, 0, 1e-12)
        RgSpectralNorm.apply(layer, "weight", 1, 0, 1e-12)


# -- DUE's SNGP ------------------------------------------------------------------------------------
SNGP_SOURCE = (
    DUE_LAYERS
    + """
import math

# DUE's SNGP head in the style of its sngp.py: random Fourier features of a (projected, normalized)
# feature vector, a linear output, and a Laplace precision accumulated over each epoch whose
# inverse gives the predictive covariance (mean-field logits for classification).


def orthonormal_columns(n, m):
    return torch.linalg.qr(torch.randn(n, m))[0]


class FourierFeatures(nn.Module):
    def __init__(self, d_in, n_features, scale=None):
        super().__init__()
        self.register_buffer("feature_scale", torch.tensor(scale or math.sqrt(n_features / 2)))
        blocks, left = [], n_features
        while left > d_in:  # orthonormal blocks of d_in columns, then the rest
            blocks.append(orthonormal_columns(d_in, d_in))
            left -= d_in
        blocks.append(orthonormal_columns(d_in, left))
        W = torch.cat(blocks, 1)
        W = W * (torch.randn(W.shape) ** 2).sum(0).sqrt()  # chi-distributed column norms
        self.register_buffer("W", W)
        self.register_buffer("b", torch.empty(n_features).uniform_(0, 2 * math.pi))

    def forward(self, x):
        return torch.cos(x @ self.W + self.b) / self.feature_scale


class LaplaceHead(nn.Module):
    def __init__(self, features, d_deep, d_gp, n_random, d_out, n_data, batch_size, ridge=1.0,
                 mean_field=None):
        super().__init__()
        self.features, self.ridge, self.mean_field = features, ridge, mean_field
        self.n_data, self.batch_size = n_data, batch_size
        self.register_buffer("random_matrix", torch.normal(0, 0.05, (d_gp, d_deep)))
        self.project = lambda f: nn.functional.linear(f, self.random_matrix)
        self.norm = nn.LayerNorm(d_gp)
        self.rff = FourierFeatures(d_gp, n_random)
        self.beta = nn.Linear(n_random, d_out)
        self.register_buffer("n_seen", torch.tensor(0))
        self.register_buffer("precision", torch.eye(n_random) * ridge)
        self.register_buffer("covariance", torch.eye(n_random))
        self.stale = True

    def reset_precision_matrix(self):  # at each epoch's start
        eye = torch.eye(self.precision.shape[0], device=self.precision.device)
        self.precision = eye * self.ridge
        self.n_seen = torch.tensor(0)
        self.stale = True

    def forward(self, x):
        phi = self.rff(self.norm(self.project(self.features(x))))
        out = self.beta(phi)
        if self.training:
            self.precision += phi.t() @ phi
            self.n_seen += x.shape[0]
            assert self.n_seen <= self.n_data, "reset the precision each epoch"
            return out
        assert self.n_seen > self.n_data - self.batch_size, "a whole epoch is needed first"
        if self.stale:
            with torch.no_grad():
                jitter = 1e-7 * torch.eye(self.precision.shape[1], device=self.precision.device)
                chol, info = torch.linalg.cholesky_ex(self.precision + jitter)
                assert (info == 0).all()
                torch.cholesky_inverse(chol, out=self.covariance)
            self.stale = False
        with torch.no_grad():
            cov = phi @ ((self.covariance @ phi.t()) * self.ridge)
        if self.mean_field is None:
            return out, cov
        return out / torch.sqrt(1.0 + torch.diag(cov) * self.mean_field).unsqueeze(-1)


for d_out, mean_field in ((1, None), (3, math.pi / 8)):
    body = ResidualMLP(2, 8, 1)
    net = LaplaceHead(body, 8, 4, 10, d_out, n_data=12, batch_size=6, mean_field=mean_field)
    initialize(net)
    adam = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=5e-4)
    if mean_field is None:
        targets = [torch.tensor(v) for v in values]
        objective = lambda out, y: F.mse_loss(out[:, 0], y)
    else:
        targets, objective = [torch.tensor(c) for c in labels], F.cross_entropy
    for epoch in range(2):
        net.reset_precision_matrix()
        for xb, yb in zip(inputs, targets):
            net.train()
            adam.zero_grad()
            loss = objective(net(torch.tensor(xb)), yb)
            loss.backward()
            adam.step()
            record.append(loss.item())
        record.append(state_of(net))
    net.eval()
    with torch.no_grad():
        out = net(torch.tensor(inputs[1]))
    if mean_field is None:
        record.extend([out[0].numpy(), out[1].numpy()])
    else:
        record.append(F.softmax(out, dim=-1).numpy())
    record.append(state_of(net))
"""
)


SNGP_STEPS = [
    IMPORTS,
    (
        "            loss.backward()\n            adam.step()\n",
        "            grads = loss.backward()\n            adam.step(grads)\n",
    ),
]


def test_due_sngp_laplace_head_trains_and_predicts_as_torch(capsys):
    rng = np.random.default_rng(9609)
    inputs = [rng.standard_normal((6, 2)).astype(np.float32) for _ in range(2)]
    values = [np.sin(x.sum(1)).astype(np.float32) for x in inputs]
    labels = [rng.integers(0, 3, 6) for _ in range(2)]
    (theirs, ours), _ = runs_with_draws(
        SNGP_SOURCE,
        SNGP_STEPS,
        capsys,
        9609,
        inputs=inputs,
        values=values,
        labels=labels,
        initialize=initializer(),
        state_of=state_of,
    )
    assert len(theirs) == 2 * 2 * 3 + 3 + 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


def test_cholesky_inverse_writes_its_out_argument_as_torch():
    # SNGP's ``torch.cholesky_inverse(u, out=self.covariance)`` was refused ("out= is not
    # supported"); it now writes the buffer, as torch's
    rng = np.random.default_rng(9610)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    precision = a.T @ a + np.eye(3, dtype=np.float32)
    results = []
    for lib in (torch, rg):
        head = lib.nn.Module()
        head.register_buffer("covariance", lib.eye(3))
        u, info = lib.linalg.cholesky_ex(lib.tensor(precision))
        assert (info == 0).all()
        assert lib.cholesky_inverse(u, out=head.covariance) is head.covariance
        results.append(head.covariance.numpy().copy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[1], np.linalg.inv(precision), rtol=1e-4, atol=1e-5)
    # the functions torch gives no out= still refuse it, by name
    with pytest.raises(rg.InvalidArgumentError, match="flip: out= is not supported"):
        rg.flip(rg.ones(2), [0], out=rg.zeros(2))
