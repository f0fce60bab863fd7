"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of PyTorch tutorials and public repositories, each run on torch and, ported, on retrograd
from the same weights and draws, every record compared.

- A spatial-transformer digit classifier in the style of the PyTorch spatial transformer
  tutorial: a localization net of ``nn.ReLU(True)`` layers, ``self.theta_head[2].weight.data
  .zero_()`` and ``bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))``,
  ``F.affine_grid(theta, img.size())`` and ``F.grid_sample`` (their defaults),
  ``nn.Dropout2d`` and ``F.dropout(h, training=self.training)``, ``F.nll_loss(...,
  size_average=False)`` in the evaluation loop, ``log_probs.max(1, keepdim=True)[1]``.
- A RealNVP flow on two moons in the style of senya-ashukha/real-nvp-pytorch: masks held as
  ``nn.Parameter(masks, requires_grad=False)``, ``ModuleList``s of ``lambda``-built
  ``Sequential``s, ``x.new_zeros``, ``log_det -= s.sum(dim=1)``,
  ``distributions.MultivariateNormal(torch.zeros(2), torch.eye(2)).log_prob``, Adam over
  ``[p for p in flow.parameters() if p.requires_grad == True]``,
  ``nll.backward(retain_graph=True)``, and the inverse ``g``.
- A mixture density network in the style of hardmaru's ``pytorch_notebooks``:
  ``torch.reciprocal``, ``y.expand_as(mu)``, a NumPy-float normalizer, the loss as
  ``-torch.log(torch.sum(...))``, and the same fit through ``torch.distributions``'
  ``MixtureSameFamily(Categorical(logits=), Normal(mu, sigma))``; Gumbel-max draws from the
  fitted weights.
- A physics-informed network for Burgers' equation in the style of the PINN tutorials:
  ``torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u), retain_graph=True,
  create_graph=True)[0]`` for ``u_x``, ``u_t`` and ``u_xx`` of inputs made with
  ``requires_grad=True``, ``xavier_normal_(layer.weight.data, gain=1.0)``, Adam, then
  ``LBFGS(..., history_size=50, tolerance_change=1.0 * np.finfo(float).eps,
  line_search_fn="strong_wolfe")`` with a closure.
- A char-RNN surname classifier in the style of the PyTorch char-RNN classification tutorial:
  one-hot names written by ``out[pos][0][LETTERS.find(ch)] = 1``, ``torch.cat((letter,
  hidden), 1)``, the update ``p.data.add_(p.grad.data, alpha=-lr)`` by hand,
  ``log_probs.topk(1)``, ``index[0].item()``, a confusion matrix by ``confusion[a][b] += 1``
  and ``confusion[row] = confusion[row] / confusion[row].sum()``, and the top guesses by
  ``topk(n, 1, True)``.
- A ConvLSTM next-frame predictor in the style of ndrplz/ConvLSTM_pytorch: the gates by
  ``torch.split(conv_out, self.n_hidden, dim=1)``, ``torch.zeros(..., device=self.gates.weight
  .device)``, ``seq.permute(1, 0, 2, 3, 4)``, ``seq[:, t, :, :, :]``, ``torch.stack(hs,
  dim=1)``, kernel sizes checked by ``isinstance`` over a list of tuples, RMSprop.
- Hierarchical NeRF rendering in the style of yenchenlin/nerf-pytorch: Fourier features of
  ``lambda x, fn=fn, freq=freq: fn(x * freq)`` over ``2.0 ** torch.linspace`` (0-d tensor
  frequencies) with ``[torch.sin, torch.cos]``, the skip-connected MLP with view directions
  (``torch.split(x, [a, b], dim=-1)``), chunked queries, compositing
  (``torch.Tensor([1e10]).expand(gaps[..., :1].shape)``, ``torch.norm(rays_d[..., None, :],
  dim=-1)``, the exclusive ``torch.cumprod`` of ``torch.cat([torch.ones(...), 1.0 - alpha +
  1e-10], -1)``, ``torch.max``/``torch.min`` of two tensors), inverse-CDF sampling
  (``torch.searchsorted(cdf, u, right=True)``, ``torch.gather`` of ``unsqueeze(1).expand``ed
  rows, ``torch.where``), ``torch.sort`` of the merged samples, ``torch.std(...,
  unbiased=False)``, a PSNR with ``torch.log(torch.Tensor([10.0]))`` and an exponential
  learning-rate decay through ``param_groups``.
- Pruning in the style of the PyTorch pruning tutorial, on a small LeNet:
  ``prune.random_unstructured``, ``l1_unstructured`` of a bias by a count, ``ln_structured`` on
  top of a random mask (the ``PruningContainer`` read back from ``module._forward_pre_hooks``),
  the ``weight_orig``/``weight_mask`` state dict keys, ``prune.remove``, ``prune.is_pruned``,
  pruning every conv and linear layer, ``global_unstructured`` with ``prune.L1Unstructured``,
  a ``BasePruningMethod`` subclass of our own, and training the globally pruned model.

The programs change only their gradient lines (and the pruning module's import) in the port.
The defect the pruning program found when first ported: there was no
``torch.nn.utils.prune`` (nor ``Module._forward_pre_hooks``); it is now there
(``nn/utils/prune.py``), torch's methods and names.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_13 import SharedDraws


class SharedFunctionalDropout:
    """``F.dropout`` and ``nn.Dropout2d`` in training mode drawing their masks from one seeded
    stream, the same for both libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)
        original = lib.nn.functional.dropout

        def dropout(x, p=0.5, training=True, inplace=False):
            if not training or p == 0.0:
                return original(x, p, training)
            keep = rng.uniform(size=tuple(x.shape)) >= p
            return x * lib.tensor(keep / (1.0 - p), dtype=x.dtype)

        def dropout2d(self, x):
            if not self.training or self.p == 0.0:
                return x
            keep = rng.uniform(size=tuple(x.shape[:2]) + (1,) * (x.ndim - 2)) >= self.p
            return x * lib.tensor(keep / (1.0 - self.p), dtype=x.dtype)

        monkeypatch.setattr(lib.nn.functional, "dropout", dropout)
        monkeypatch.setattr(lib.nn.Dropout2d, "forward", dropout2d)


def _run(monkeypatch, source, step, seed, build, go):
    """``go(names, lib, models)`` in torch and in the port with shared draws; the port's
    modules (``build(names)``, a tuple) loaded with torch's initial states."""
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(seed).patch(patch, lib)
            SharedFunctionalDropout(seed + 1).patch(patch, lib)
            names = both(source, step)[0 if lib is torch else 1]
            torch.manual_seed(0)
            np.random.seed(seed)
            random.seed(seed)
            models = build(names)
            if initial is None:
                initial = [
                    {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                    for m in models
                ]
            else:
                for m, state in zip(models, initial):
                    m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            records.append(go(names, lib, models))
    return records


# -- spatial transformer ---------------------------------------------------------------------------
STN_SOURCE = """
# A digit classifier that first resamples its input through a learned affine warp (a spatial
# transformer), in the style of the PyTorch spatial transformer tutorial.
class WarpThenClassify(nn.Module):
    def __init__(self):
        super().__init__()
        # the localization network regresses the 2 x 3 warp from the raw image
        self.locate = nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
            nn.Conv2d(6, 8, kernel_size=3), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
        )
        self.theta_head = nn.Sequential(nn.Linear(8 * 5 * 5, 24), nn.ReLU(True), nn.Linear(24, 6))
        # start from the identity warp
        self.theta_head[2].weight.data.zero_()
        self.theta_head[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

        self.conv_a = nn.Conv2d(1, 8, kernel_size=5)
        self.conv_b = nn.Conv2d(8, 12, kernel_size=5)
        self.drop_b = nn.Dropout2d()
        self.hidden = nn.Linear(12 * 4 * 4, 32)
        self.out = nn.Linear(32, 10)

    def warp(self, img):
        theta = self.theta_head(self.locate(img).view(-1, 8 * 5 * 5)).view(-1, 2, 3)
        grid = F.affine_grid(theta, img.size())
        return F.grid_sample(img, grid)

    def forward(self, img):
        h = F.relu(F.max_pool2d(self.conv_a(self.warp(img)), 2))
        h = F.relu(F.max_pool2d(self.drop_b(self.conv_b(h)), 2))
        h = F.relu(self.hidden(h.view(-1, 12 * 4 * 4)))
        h = F.dropout(h, training=self.training)
        return F.log_softmax(self.out(h), dim=1)


def fit_epoch(model, optimizer, loader, log):
    model.train()
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()
        log.append(loss.item())


def evaluate(model, loader, log):
    total, hits = 0.0, 0
    with torch.no_grad():
        model.eval()
        for images, labels in loader:
            log_probs = model(images)
            total += F.nll_loss(log_probs, labels, size_average=False).item()
            guess = log_probs.max(1, keepdim=True)[1]
            hits += guess.eq(labels.view_as(guess)).sum().item()
        log.append([total / len(loader.dataset), hits])
        log.append(model.warp(images).numpy().copy())


def main(model, train_batches, test_batches):
    optimizer = optim.SGD(model.parameters(), lr=5e-2)
    log = []
    for _ in range(2):
        fit_epoch(model, optimizer, train_batches, log)
        evaluate(model, test_batches, log)
    log.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return log
"""

STN_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


def test_spatial_transformer_tutorial_matches_torch(monkeypatch):
    rng = np.random.default_rng(20)
    x, y = rng.uniform(0, 1, (8, 1, 28, 28)), rng.integers(0, 10, 8)

    def go(names, lib, models):
        data = lib.utils.data.TensorDataset(lib.tensor(x, dtype=lib.float32), lib.tensor(y))
        loader = lib.utils.data.DataLoader(data, batch_size=4)
        return names["main"](models[0], loader, loader)

    records = _run(
        monkeypatch, STN_SOURCE, STN_STEP, 21, lambda names: (names["WarpThenClassify"](),), go
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- RealNVP ---------------------------------------------------------------------------------------
REALNVP_SOURCE = """
# A RealNVP flow of alternating affine coupling layers fitted to two moons by maximum
# likelihood, in the style of senya-ashukha/real-nvp-pytorch.
from torch import distributions as dists


class CouplingFlow(nn.Module):
    def __init__(self, make_scale, make_shift, masks, base):
        super().__init__()
        self.base = base
        # the masks ride along as frozen parameters
        self.mask = nn.Parameter(masks, requires_grad=False)
        self.scale = torch.nn.ModuleList([make_scale() for _ in range(len(masks))])
        self.shift = torch.nn.ModuleList([make_shift() for _ in range(len(masks))])

    def g(self, z):  # latent -> data
        x = z
        for k in range(len(self.shift)):
            keep = self.mask[k]
            fixed = x * keep
            s = self.scale[k](fixed) * (1 - keep)
            t = self.shift[k](fixed) * (1 - keep)
            x = fixed + (1 - keep) * (x * torch.exp(s) + t)
        return x

    def f(self, x):  # data -> latent, with log |det J|
        log_det, z = x.new_zeros(x.shape[0]), x
        for k in reversed(range(len(self.shift))):
            keep = self.mask[k]
            fixed = keep * z
            s = self.scale[k](fixed) * (1 - keep)
            t = self.shift[k](fixed) * (1 - keep)
            z = fixed + (1 - keep) * (z - t) * torch.exp(-s)
            log_det -= s.sum(dim=1)
        return z, log_det

    def log_prob(self, x):
        z, log_det = self.f(x)
        return self.base.log_prob(z) + log_det


def mlp(final=None):
    layers = [nn.Linear(2, 16), nn.LeakyReLU(), nn.Linear(16, 16), nn.LeakyReLU(), nn.Linear(16, 2)]
    return nn.Sequential(*layers, *([final] if final is not None else []))


make_scale = lambda: mlp(nn.Tanh())
make_shift = lambda: mlp()
checker = torch.from_numpy(np.array([[0, 1], [1, 0]] * 3).astype(np.float32))
base = dists.MultivariateNormal(torch.zeros(2), torch.eye(2))


def build():
    return CouplingFlow(make_scale, make_shift, checker, base)


def main(flow, batches, z):
    log = []
    trainable = [p for p in flow.parameters() if p.requires_grad == True]  # noqa: E712
    optimizer = torch.optim.Adam(trainable, lr=1e-3)
    for batch in batches:
        nll = -flow.log_prob(torch.from_numpy(batch)).mean()
        optimizer.zero_grad()
        nll.backward(retain_graph=True)
        optimizer.step()
        log.append(nll.item())
    log.append(flow.g(torch.from_numpy(z)).detach().numpy().copy())
    log.append({n: p.detach().numpy().copy() for n, p in flow.named_parameters()})
    return log
"""

REALNVP_STEP = [
    (
        "        nll.backward(retain_graph=True)\n        optimizer.step()",
        "        grads = nll.backward(retain_graph=True)\n        optimizer.step(grads)",
    ),
    ("from torch import distributions", "from retrograd import distributions"),
]


def test_realnvp_on_two_moons_matches_torch(monkeypatch):
    rng = np.random.default_rng(22)
    angles = rng.uniform(0, np.pi, (5, 32))
    upper = rng.random((5, 32)) < 0.5
    moons = np.stack(
        [
            np.where(upper, np.cos(angles), 1 - np.cos(angles)),
            np.where(upper, np.sin(angles), 0.5 - np.sin(angles)),
        ],
        -1,
    )
    moons = (moons + 0.05 * rng.standard_normal(moons.shape)).astype(np.float32)
    z = rng.standard_normal((6, 2)).astype(np.float32)
    records = _run(
        monkeypatch,
        REALNVP_SOURCE,
        REALNVP_STEP,
        23,
        lambda names: (names["build"](),),
        lambda names, lib, models: names["main"](models[0], list(moons), z),
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- mixture density network -----------------------------------------------------------------------
MDN_SOURCE = """
# A mixture density network for the inverse sine problem (one x, several plausible y), in the
# style of hardmaru's pytorch_notebooks: the Gaussian mixture likelihood by hand, or through
# torch.distributions.
class MixtureNet(nn.Module):
    def __init__(self, n_hidden, n_components):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, n_hidden), nn.Tanh())
        self.logits = nn.Linear(n_hidden, n_components)
        self.log_sigma = nn.Linear(n_hidden, n_components)
        self.mu = nn.Linear(n_hidden, n_components)

    def forward(self, x):
        h = self.body(x)
        weights = nn.functional.softmax(self.logits(h), -1)
        return weights, torch.exp(self.log_sigma(h)), self.mu(h)


INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)  # a NumPy float


def normal_density(y, mu, sigma):
    z = (y.expand_as(mu) - mu) * torch.reciprocal(sigma)
    return torch.exp(-0.5 * (z * z)) * torch.reciprocal(sigma) * INV_SQRT_2PI


def nll_by_hand(weights, sigma, mu, y):
    likelihood = torch.sum(normal_density(y, mu, sigma) * weights, dim=1)
    return torch.mean(-torch.log(likelihood))


def nll_by_distributions(weights, sigma, mu, y):
    which = torch.distributions.Categorical(logits=torch.log(weights))
    parts = torch.distributions.Normal(mu, sigma)
    mixture = torch.distributions.MixtureSameFamily(which, parts)
    return -mixture.log_prob(y.squeeze(-1)).mean()


def pick_components(weights):
    # the Gumbel-max trick over the mixture weights
    return (np.log(weights) + np.random.gumbel(loc=0, scale=1, size=weights.shape)).argmax(axis=1)


def main(net, x_data, y_data, x_test, use_distributions):
    x, y = torch.from_numpy(x_data), torch.from_numpy(y_data)
    criterion = nll_by_distributions if use_distributions else nll_by_hand
    optimizer = torch.optim.Adam(net.parameters())
    log = []
    for epoch in range(30):
        loss = criterion(*net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if epoch % 5 == 0:
            log.append(loss.item())
    weights, sigma, mu = (t.data.numpy() for t in net(torch.from_numpy(x_test)))
    rows = np.arange(len(x_test))
    k = pick_components(weights)
    draws = np.random.randn(len(x_test)) * sigma[rows, k] + mu[rows, k]
    log.extend([weights.copy(), sigma.copy(), mu.copy(), draws])
    return log
"""

MDN_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


@pytest.mark.parametrize("use_distributions", [False, True])
def test_mixture_density_network_matches_torch(monkeypatch, use_distributions):
    rng = np.random.default_rng(24)
    y = rng.uniform(-10.5, 10.5, (64, 1)).astype(np.float32)
    x = (7.0 * np.sin(0.75 * y) + 0.5 * y + rng.standard_normal(y.shape)).astype(np.float32)
    x_test = np.linspace(-15, 15, 12, dtype=np.float32).reshape(-1, 1)
    records = _run(
        monkeypatch,
        MDN_SOURCE,
        MDN_STEP,
        25,
        lambda names: (names["MixtureNet"](n_hidden=12, n_components=3),),
        lambda names, lib, models: names["main"](models[0], x, y, x_test, use_distributions),
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- physics-informed network ----------------------------------------------------------------------
PINN_SOURCE = """
# A physics-informed network for the viscous Burgers equation u_t + u u_x = nu u_xx: boundary
# and initial values fitted together with the PDE residual at collocation points (derivatives
# by autograd), Adam first, then L-BFGS with a strong-Wolfe line search.
class BurgersNet(nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        for layer in self.layers:
            nn.init.xavier_normal_(layer.weight.data, gain=1.0)
            nn.init.zeros_(layer.bias.data)

    def forward(self, x, t):
        h = torch.cat([x, t], dim=1)
        for layer in self.layers[:-1]:
            h = torch.tanh(layer(h))
        return self.layers[-1](h)


def d(out, wrt):
    ones = torch.ones_like(out)
    return torch.autograd.grad(out, wrt, grad_outputs=ones, retain_graph=True, create_graph=True)[0]


def pde_residual(net, x, t, nu):
    u = net(x, t)
    u_x, u_t = d(u, x), d(u, t)
    u_xx = d(u_x, x)
    return u_t + u_x * u - nu * u_xx


def main(net, x_f, t_f, x_b, t_b, u_b):
    nu = 0.01 / np.pi
    as_input = lambda a, grad=False: torch.tensor(a, dtype=torch.float32, requires_grad=grad)
    x_f, t_f = as_input(x_f, True), as_input(t_f, True)
    x_b, t_b, u_b = as_input(x_b), as_input(t_b), as_input(u_b)
    mse = nn.MSELoss()
    log = []

    def objective():
        res = pde_residual(net, x_f, t_f, nu)
        return mse(net(x_b, t_b), u_b) + mse(res, torch.zeros_like(res))

    adam = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(5):
        adam.zero_grad()
        loss = objective()
        loss.backward()
        adam.step()
        log.append(loss.item())

    lbfgs = torch.optim.LBFGS(
        net.parameters(), lr=1, max_iter=6, max_eval=10, history_size=50, tolerance_grad=1e-5,
        tolerance_change=1.0 * np.finfo(float).eps, line_search_fn="strong_wolfe",
    )

    def closure():
        lbfgs.zero_grad()
        loss = objective()
        loss.backward()
        log.append(loss.item())
        return loss

    lbfgs.step(closure)
    log.append({n: p.detach().numpy().copy() for n, p in net.named_parameters()})
    return log
"""

PINN_STEP = [
    (
        "        loss.backward()\n        adam.step()",
        "        grads = loss.backward()\n        adam.step(grads)",
    ),
    (
        "        loss.backward()\n        log.append(loss.item())\n        return loss",
        "        grads = loss.backward()\n"
        "        log.append(loss.item())\n"
        "        return loss, grads",
    ),
]


def test_burgers_pinn_with_adam_then_strong_wolfe_lbfgs_matches_torch(monkeypatch):
    rng = np.random.default_rng(26)
    x_f, t_f = rng.uniform(-1, 1, (24, 1)), rng.uniform(0, 1, (24, 1))
    x_b = np.concatenate([rng.uniform(-1, 1, (6, 1)), -np.ones((3, 1)), np.ones((3, 1))])
    t_b = np.concatenate([np.zeros((6, 1)), rng.uniform(0, 1, (6, 1))])
    u_b = np.where(t_b == 0, -np.sin(np.pi * x_b), 0.0)
    records = _run(
        monkeypatch,
        PINN_SOURCE,
        PINN_STEP,
        27,
        lambda names: (names["BurgersNet"]([2, 10, 10, 1]),),
        lambda names, lib, models: names["main"](models[0], x_f, t_f, x_b, t_b, u_b),
    )
    assert_records_agree(records[1][:-1], records[0][:-1], rtol=5e-4, atol=5e-5)  # the losses
    # the parameters after the strong-Wolfe L-BFGS stage, which amplifies the float32 rounding
    # of the PINN's second derivatives: on the torch backend, whose Adam steps are torch's own
    # bits since the update phase's round 2, a few end 1.6e-4 away (before, within 1.3e-4)
    assert_records_agree(records[1][-1:], records[0][-1:], rtol=5e-4, atol=5e-4)


# -- char-RNN name classification ------------------------------------------------------------------
NAMES_SOURCE = """
# Which language is a surname from? A character-level Elman RNN over one-hot letters, trained
# one random name at a time with a hand-written SGD step, in the style of the PyTorch
# char-RNN classification tutorial.
import random
import string

LETTERS = string.ascii_letters + " .,;'"
N_LETTERS = len(LETTERS)
SURNAMES = {
    "Italian": ["Rossi", "Bianchi", "Esposito"],
    "Polish": ["Nowak", "Kowalski", "Wojcik", "Lewandowski"],
    "Korean": ["Kim", "Park", "Choi", "Jung"],
}
LANGUAGES = list(SURNAMES)
N_LANGUAGES = len(LANGUAGES)


def one_hot_name(name):
    # <length x 1 x N_LETTERS>: one row per character
    out = torch.zeros(len(name), 1, N_LETTERS)
    for pos, ch in enumerate(name):
        out[pos][0][LETTERS.find(ch)] = 1
    return out


class ElmanRNN(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.n_hidden = n_hidden
        self.to_hidden = nn.Linear(n_in + n_hidden, n_hidden)
        self.to_output = nn.Linear(n_in + n_hidden, n_out)
        self.log_softmax = nn.LogSoftmax(dim=1)

    def forward(self, letter, hidden):
        both = torch.cat((letter, hidden), 1)
        return self.log_softmax(self.to_output(both)), self.to_hidden(both)

    def read(self, name_tensor):
        hidden = torch.zeros(1, self.n_hidden)
        for pos in range(name_tensor.size()[0]):
            out, hidden = self(name_tensor[pos], hidden)
        return out


def best_guess(log_probs):
    _, index = log_probs.topk(1)
    k = index[0].item()
    return LANGUAGES[k], k


def random_example():
    language = LANGUAGES[random.randint(0, N_LANGUAGES - 1)]
    names = SURNAMES[language]
    name = names[random.randint(0, len(names) - 1)]
    target = torch.tensor([LANGUAGES.index(language)], dtype=torch.long)
    return language, name, target, one_hot_name(name)


nll = nn.NLLLoss()
lr = 0.005


def sgd_on_one_name(rnn, target, name_tensor):
    rnn.zero_grad()
    log_probs = rnn.read(name_tensor)
    loss = nll(log_probs, target)
    loss.backward()
    for p in rnn.parameters():
        p.data.add_(p.grad.data, alpha=-lr)
    return log_probs, loss.item()


def top_languages(rnn, name, n=3):
    with torch.no_grad():
        values, indices = rnn.read(one_hot_name(name)).topk(n, 1, True)
    return [[values[0][j].item(), LANGUAGES[indices[0][j].item()]] for j in range(n)]


def main(rnn):
    log = []
    for _ in range(40):
        _, _, target, name_tensor = random_example()
        log_probs, loss = sgd_on_one_name(rnn, target, name_tensor)
        log += [loss, best_guess(log_probs)[0]]
    confusion = torch.zeros(N_LANGUAGES, N_LANGUAGES)
    for _ in range(30):
        language, _, _, name_tensor = random_example()
        confusion[LANGUAGES.index(language)][best_guess(rnn.read(name_tensor))[1]] += 1
    for row in range(N_LANGUAGES):  # each row a distribution over the guesses
        confusion[row] = confusion[row] / confusion[row].sum()
    log.append(confusion.numpy().copy())
    for guess in top_languages(rnn, "Kovalenko") + top_languages(rnn, "Parisi"):
        log.extend(guess)
    return log
"""

NAMES_STEP = [
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    (
        "        p.data.add_(p.grad.data, alpha=-lr)",
        "        p.data.add_(p.grad(grads).data, alpha=-lr)",
    ),
]


def test_char_rnn_name_classification_tutorial_matches_torch(monkeypatch):
    records = _run(
        monkeypatch,
        NAMES_SOURCE,
        NAMES_STEP,
        28,
        lambda names: (names["ElmanRNN"](names["N_LETTERS"], 16, names["N_LANGUAGES"]),),
        lambda names, lib, models: names["main"](models[0]),
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- ConvLSTM --------------------------------------------------------------------------------------
CONVLSTM_SOURCE = """
# Next-frame prediction with a two-layer convolutional LSTM (gates by one convolution over the
# input and hidden maps), in the style of ndrplz/ConvLSTM_pytorch.
class GatedConvCell(nn.Module):
    def __init__(self, n_in, n_hidden, kernel, bias=True):
        super().__init__()
        self.n_hidden = n_hidden
        pad = kernel[0] // 2, kernel[1] // 2
        self.gates = nn.Conv2d(n_in + n_hidden, 4 * n_hidden, kernel, padding=pad, bias=bias)

    def forward(self, x, state):
        h, c = state
        i, f, o, g = torch.split(self.gates(torch.cat([x, h], dim=1)), self.n_hidden, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def zero_state(self, batch, height, width):
        where = self.gates.weight.device
        shape = (batch, self.n_hidden, height, width)
        return torch.zeros(*shape, device=where), torch.zeros(*shape, device=where)


def per_layer(value, n):
    return value if isinstance(value, list) else [value] * n


class ConvLSTM(nn.Module):
    def __init__(self, n_in, hidden, kernels, n_layers, batch_first=False):
        super().__init__()
        tuples = isinstance(kernels, list) and all([isinstance(k, tuple) for k in kernels])
        if not (isinstance(kernels, tuple) or tuples):
            raise ValueError("kernels: a tuple or a list of tuples")
        hidden, kernels = per_layer(hidden, n_layers), per_layer(kernels, n_layers)
        self.batch_major = batch_first
        n_ins = [n_in] + hidden[:-1]
        self.cells = nn.ModuleList([GatedConvCell(*args) for args in zip(n_ins, hidden, kernels)])

    def forward(self, seq):
        if not self.batch_major:  # (time, batch, ...) -> (batch, time, ...)
            seq = seq.permute(1, 0, 2, 3, 4)
        batch, steps, _, height, width = seq.size()
        outputs, finals = [], []
        for cell in self.cells:
            h, c = cell.zero_state(batch, height, width)
            hs = []
            for t in range(steps):
                h, c = cell(seq[:, t, :, :, :], (h, c))
                hs.append(h)
            seq = torch.stack(hs, dim=1)
            outputs.append(seq)
            finals.append((h, c))
        return outputs, finals


class NextFrame(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = ConvLSTM(1, [4, 6], [(3, 3), (3, 3)], 2)
        self.readout = nn.Conv2d(6, 1, 1)

    def forward(self, frames):
        outputs, finals = self.rnn(frames)
        return self.readout(finals[-1][0]), outputs


def main(net, frames, target):
    optimizer = optim.RMSprop(net.parameters(), alpha=0.9, lr=1e-3)
    log = []
    for _ in range(4):
        optimizer.zero_grad()
        guess, outputs = net(frames)
        loss = F.mse_loss(guess, target)
        loss.backward()
        optimizer.step()
        log.append(loss.item())
    log.append([tuple(o.shape) for o in outputs])
    log.append({n: p.detach().numpy().copy() for n, p in net.named_parameters()})
    return log
"""

CONVLSTM_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


def test_convlstm_next_frame_prediction_matches_torch(monkeypatch):
    rng = np.random.default_rng(29)
    frames, target = rng.standard_normal((4, 2, 1, 6, 6)), rng.standard_normal((2, 1, 6, 6))
    records = _run(
        monkeypatch,
        CONVLSTM_SOURCE,
        CONVLSTM_STEP,
        30,
        lambda names: (names["NextFrame"](),),
        lambda names, lib, models: names["main"](
            models[0], lib.tensor(frames, dtype=lib.float32), lib.tensor(target, dtype=lib.float32)
        ),
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- NeRF ------------------------------------------------------------------------------------------
NERF_SOURCE = """
# Hierarchical volume rendering in the NeRF style: Fourier features of points and view
# directions, a coarse and a fine MLP (a skip connection, a view-dependent colour head), alpha
# compositing along each ray, and fine samples placed by inverting the coarse weights' CDF.
to_mse = lambda a, b: torch.mean((a - b) ** 2)
to_psnr = lambda mse: -10.0 * torch.log(mse) / torch.log(torch.Tensor([10.0]))


class FourierFeatures:
    def __init__(self, n_freqs, dims=3, periodic=None):
        periodic = periodic or [torch.sin, torch.cos]
        bands = 2.0 ** torch.linspace(0.0, n_freqs - 1, steps=n_freqs)
        self.fns = [lambda x: x]
        for freq in bands:  # 0-d tensors
            for fn in periodic:
                self.fns.append(lambda x, fn=fn, freq=freq: fn(x * freq))
        self.out_dim = dims * len(self.fns)

    def __call__(self, x):
        return torch.cat([fn(x) for fn in self.fns], -1)


class RadianceMLP(nn.Module):
    def __init__(self, depth, width, n_pts, n_dirs, skips=(2,)):
        super().__init__()
        self.n_pts, self.n_dirs, self.skips = n_pts, n_dirs, skips
        self.trunk = nn.ModuleList([nn.Linear(n_pts, width)])
        for k in range(depth - 1):  # the layer after a skip also sees the encoded point
            self.trunk.append(nn.Linear(width + (n_pts if k in skips else 0), width))
        self.density = nn.Linear(width, 1)
        self.feature = nn.Linear(width, width)
        self.view = nn.Linear(width + n_dirs, width // 2)
        self.colour = nn.Linear(width // 2, 3)

    def forward(self, x):
        pts, dirs = torch.split(x, [self.n_pts, self.n_dirs], dim=-1)
        h = pts
        for k, layer in enumerate(self.trunk):
            h = F.relu(layer(h))
            if k in self.skips:
                h = torch.cat([pts, h], -1)
        density = self.density(h)
        h = F.relu(self.view(torch.cat([self.feature(h), dirs], -1)))
        return torch.cat([self.colour(h), density], -1)


def in_chunks(fn, size):
    if size is None:
        return fn
    return lambda x: torch.cat([fn(x[i : i + size]) for i in range(0, x.shape[0], size)], 0)


def query(points, viewdirs, net, encode_pts, encode_dirs, chunk=16):
    flat = torch.reshape(points, [-1, points.shape[-1]])
    dirs = viewdirs[:, None].expand(points.shape)
    dirs = torch.reshape(dirs, [-1, dirs.shape[-1]])
    raw = in_chunks(net, chunk)(torch.cat([encode_pts(flat), encode_dirs(dirs)], -1))
    return torch.reshape(raw, list(points.shape[:-1]) + [raw.shape[-1]])


def composite(raw, z, rays_d):
    gaps = z[..., 1:] - z[..., :-1]
    gaps = torch.cat([gaps, torch.Tensor([1e10]).expand(gaps[..., :1].shape)], -1)
    gaps = gaps * torch.norm(rays_d[..., None, :], dim=-1)
    alpha = 1.0 - torch.exp(-F.relu(raw[..., 3]) * gaps)
    # transmittance: the exclusive cumulative product of (1 - alpha)
    ones = torch.ones((alpha.shape[0], 1))
    passed = torch.cumprod(torch.cat([ones, 1.0 - alpha + 1e-10], -1), -1)
    weights = alpha * passed[:, :-1]
    rgb = torch.sum(weights[..., None] * torch.sigmoid(raw[..., :3]), -2)
    depth, acc = torch.sum(weights * z, -1), torch.sum(weights, -1)
    disp = 1.0 / torch.max(1e-10 * torch.ones_like(depth), depth / acc)
    return rgb, disp, acc, weights


def invert_cdf(bins, weights, n):
    weights = weights + 1e-5
    cdf = torch.cumsum(weights / torch.sum(weights, -1, keepdim=True), -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    u = torch.linspace(0.0, 1.0, steps=n).expand(list(cdf.shape[:-1]) + [n]).contiguous()
    idx = torch.searchsorted(cdf, u, right=True)
    lo = torch.max(torch.zeros_like(idx - 1), idx - 1)
    hi = torch.min((cdf.shape[-1] - 1) * torch.ones_like(idx), idx)
    pair = torch.stack([lo, hi], -1)
    shape = [pair.shape[0], pair.shape[1], cdf.shape[-1]]
    cdf_at = torch.gather(cdf.unsqueeze(1).expand(shape), 2, pair)
    bins_at = torch.gather(bins.unsqueeze(1).expand(shape), 2, pair)
    span = cdf_at[..., 1] - cdf_at[..., 0]
    span = torch.where(span < 1e-5, torch.ones_like(span), span)
    return bins_at[..., 0] + (u - cdf_at[..., 0]) / span * (bins_at[..., 1] - bins_at[..., 0])


def render(rays, coarse, fine, ask, n_coarse, n_fine):
    origins, dirs, viewdirs = rays[:, 0:3], rays[:, 3:6], rays[:, -3:]
    near, far = rays[:, 6:7], rays[:, 7:8]
    steps = torch.linspace(0.0, 1.0, steps=n_coarse)
    z = (near * (1.0 - steps) + far * steps).expand([rays.shape[0], n_coarse])
    along = lambda z: origins[..., None, :] + dirs[..., None, :] * z[..., :, None]
    rgb0, disp0, _, weights = composite(ask(along(z), viewdirs, coarse), z, dirs)
    extra = invert_cdf(0.5 * (z[..., 1:] + z[..., :-1]), weights[..., 1:-1], n_fine).detach()
    z, _ = torch.sort(torch.cat([z, extra], -1), -1)
    rgb, disp, _, _ = composite(ask(along(z), viewdirs, fine), z, dirs)
    spread = torch.std(extra, dim=-1, unbiased=False)
    return {"rgb": rgb, "disp": disp, "rgb0": rgb0, "disp0": disp0, "spread": spread}


def build_models(n_freqs=4, n_dir_freqs=2):
    encode_pts, encode_dirs = FourierFeatures(n_freqs), FourierFeatures(n_dir_freqs)
    make = lambda: RadianceMLP(4, 16, encode_pts.out_dim, encode_dirs.out_dim)
    ask = lambda pts, viewdirs, net: query(pts, viewdirs, net, encode_pts, encode_dirs)
    return make(), make(), ask


def main(coarse, fine, ask, rays, target, lr=5e-3, decay_every=1000):
    params = list(coarse.parameters()) + list(fine.parameters())
    optimizer = torch.optim.Adam(params=params, lr=lr, betas=(0.9, 0.999))
    log = []
    for step in range(4):
        out = render(rays, coarse, fine, ask, 8, 8)
        optimizer.zero_grad()
        fine_mse, coarse_mse = to_mse(out["rgb"], target), to_mse(out["rgb0"], target)
        loss = fine_mse + coarse_mse
        loss.backward()
        optimizer.step()
        for group in optimizer.param_groups:  # exponential decay
            group["lr"] = lr * 0.1 ** (step / decay_every)
        log.append([loss.item(), to_psnr(fine_mse).item(), to_psnr(coarse_mse).item()])
        log.append(out["spread"].detach().numpy().copy())
        log.append(out["disp"].detach().numpy().copy())
    log.append({f"{i}.{n}": p.detach().numpy().copy() for i, m in enumerate((coarse, fine))
                for n, p in m.named_parameters()})
    return log
"""

NERF_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


def test_nerf_hierarchical_volume_rendering_matches_torch(monkeypatch):
    rng = np.random.default_rng(31)
    origins = rng.standard_normal((6, 3)) * 0.1
    directions = rng.standard_normal((6, 3))
    viewdirs = directions / np.linalg.norm(directions, axis=-1, keepdims=True)
    bounds = np.stack([np.full(6, 2.0), np.full(6, 6.0)], -1)
    rays = np.concatenate([origins, directions, bounds, viewdirs], -1)
    target = rng.uniform(0, 1, (6, 3))

    def go(names, lib, models):
        return names["main"](
            models[0],
            models[1],
            models[2],
            lib.tensor(rays, dtype=lib.float32),
            lib.tensor(target, dtype=lib.float32),
        )

    records = _run(monkeypatch, NERF_SOURCE, NERF_STEP, 32, lambda names: _nerf(names), go)
    assert_records_agree(records[1], records[0], rtol=5e-4, atol=5e-5)


class _Query:
    """The query function, carried beside the two models (no state of its own)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _nerf(names):
    model, fine, query = names["build_models"]()
    return model, fine, _Query(query)


# -- pruning ---------------------------------------------------------------------------------------
PRUNING_SOURCE = '''
# The ways torch.nn.utils.prune prunes a small LeNet (random, L1 by a count, structured pruning
# on top of an earlier mask, a method of our own, global L1), in the style of the PyTorch
# pruning tutorial; then the globally pruned network is trained.
from torch.nn.utils import prune

device = torch.device("cpu" if not torch.cuda.is_available() else "cuda")


class SmallLeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 5)
        self.conv2 = nn.Conv2d(4, 8, 5)
        self.fc1 = nn.Linear(8 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        h = h.view(-1, int(h.nelement() / h.shape[0]))  # flatten whatever the image size
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(h)))))


class EveryThirdPruning(prune.BasePruningMethod):
    """Zero every third entry of the flattened tensor."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, values, default_mask):
        mask = default_mask.clone()
        mask.view(-1)[::3] = 0
        return mask


def names_of(pairs):
    return [n for n, _ in pairs]


def snapshot(module, log, attr=None):
    log.append(names_of(module.named_parameters()))
    log.append(names_of(module.named_buffers()))
    if attr is not None:
        log.append(getattr(module, attr).detach().numpy().copy())


def tutorial(model, log):
    conv = model.conv1
    snapshot(conv, log)
    prune.random_unstructured(conv, name="weight", amount=0.3)
    snapshot(conv, log, "weight")
    log.append(len(conv._forward_pre_hooks))
    prune.l1_unstructured(conv, name="bias", amount=3)  # a count, not a fraction
    snapshot(conv, log, "bias")
    log.append(len(conv._forward_pre_hooks))

    # whole output channels by their L2 norm, combined with the random mask already there
    prune.ln_structured(conv, name="weight", amount=0.5, n=2, dim=0)
    log.append(conv.weight.detach().numpy().copy())
    hooks = [h for h in conv._forward_pre_hooks.values() if h._tensor_name == "weight"]
    log.append([type(method).__name__ for method in hooks[0]])
    log.append(list(model.state_dict().keys()))  # weight_orig and weight_mask

    prune.remove(conv, "weight")
    snapshot(conv, log, "weight")
    log.append(prune.is_pruned(model))

    other = SmallLeNet()
    for _, module in other.named_modules():
        if isinstance(module, nn.Conv2d):
            prune.l1_unstructured(module, name="weight", amount=0.2)
        elif isinstance(module, nn.Linear):
            prune.l1_unstructured(module, name="weight", amount=0.4)
    log.append(list(dict(other.named_buffers()).keys()))

    EveryThirdPruning.apply(model.fc3, "bias")
    log.append(model.fc3.bias_mask.numpy().copy())
    return log


def prune_globally_then_train(model, data, target, log):
    layers = ("conv1", "conv2", "fc1", "fc2", "fc3")
    weights = tuple((getattr(model, name), "weight") for name in layers)
    prune.global_unstructured(weights, pruning_method=prune.L1Unstructured, amount=0.2)
    for module, name in weights:
        w = getattr(module, name)
        zeros = 100.0 * float(torch.sum(w == 0)) / float(w.nelement())
        log.append("{}: {:.2f}% zero".format(name, zeros))
    optimizer = optim.SGD(model.parameters(), momentum=0.9, lr=0.05)
    for _ in range(3):
        optimizer.zero_grad()
        logits = model(data)
        loss = F.cross_entropy(logits, target)
        loss.backward()
        optimizer.step()
        log.append(loss.item())
    log.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    for module, name in weights:
        prune.remove(module, name)
    log.append(names_of(model.named_parameters()))
    log.append(float(torch.sum(model.fc1.weight == 0)))
    return log
'''

PRUNING_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


class SharedRandomPruning:
    """``prune.RandomUnstructured`` of a library ranking the entries by one seeded stream of
    uniform draws (torch's ranks by ``torch.rand_like``), the same for both libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)
        prune = lib.nn.utils.prune

        def compute_mask(self, scores, default_mask):
            count = (
                round(self.amount * scores.numel())
                if isinstance(self.amount, float)
                else self.amount
            )
            mask = default_mask.clone()
            if count:
                order = np.argsort(-rng.random(scores.numel()), kind="stable")[:count]
                mask.view(-1)[lib.tensor(order)] = 0
            return mask

        monkeypatch.setattr(prune.RandomUnstructured, "compute_mask", compute_mask)


def test_pruning_tutorial_and_training_of_a_pruned_model_match_torch(monkeypatch):
    rng = np.random.default_rng(33)
    data, target = rng.standard_normal((4, 1, 32, 32)), rng.integers(0, 10, 4)

    def go(names, lib, models):
        with monkeypatch.context() as patch:
            SharedRandomPruning(34).patch(patch, lib)
            records = names["tutorial"](models[0], [])
        return names["prune_globally_then_train"](
            models[1], lib.tensor(data, dtype=lib.float32), lib.tensor(target), records
        )

    records = _run(
        monkeypatch,
        PRUNING_SOURCE,
        PRUNING_STEP,
        35,
        lambda names: (names["SmallLeNet"](), names["SmallLeNet"]()),
        go,
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_pruned_gradients_remove_and_refusals_as_torch_s():
    """The gradient of ``weight_orig`` is the masked one; ``remove`` keeps the parameter object
    (an optimizer built before pruning still steps it); importance scores rank the entries;
    a count larger than the tensor and a structured pruning of a vector are refused."""
    weights = np.array([[0.5, -1.0, 0.1], [2.0, -0.05, 0.3]])
    scores = np.array([[9.0, 1.0, 8.0], [7.0, 6.0, 2.0]])
    results = []
    for lib in (torch, rg):
        prune = lib.nn.utils.prune
        layer = lib.nn.Linear(3, 2)
        with lib.no_grad():
            layer.weight.copy_(lib.tensor(weights, dtype=lib.float32))
            layer.bias.zero_()
        original = layer.weight
        optimizer = lib.optim.SGD(layer.parameters(), lr=0.1)
        prune.l1_unstructured(layer, "weight", amount=2, importance_scores=lib.tensor(scores))
        loss = layer(lib.ones(1, 3)).square().sum()
        if lib is torch:
            loss.backward()
            grad = layer.weight_orig.grad.numpy().copy()
            optimizer.step()
        else:
            grads = loss.backward()
            grad = layer.weight_orig.grad(grads).numpy().copy()
            optimizer.step(grads)
        assert layer.weight_orig is original
        prune.remove(layer, "weight")
        assert layer.weight is original and not prune.is_pruned(layer)
        results.append([layer.weight.detach().numpy().copy(), grad])
        with pytest.raises(ValueError, match="amount"):
            prune.l1_unstructured(lib.nn.Linear(2, 2), "weight", amount=5)
        with pytest.raises((ValueError, IndexError), match="multidimensional"):
            prune.ln_structured(lib.nn.Linear(2, 2), "bias", amount=1, n=2, dim=0)
    for mine, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-6)
    assert (results[1][1][[0, 1], [1, 2]] == 0).all()  # the two lowest scores are pruned
