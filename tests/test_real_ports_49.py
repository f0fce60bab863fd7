"""Real ports, continued (the harness: ``tests/real_ports.py``): scientific machine learning,
programs written here in the style of vsitzmann/siren's ``explore_siren`` notebook, of VAEs
built on ``torch.distributions``, and of manzilzaheer/DeepSets' point-cloud classifier.

- SIREN style: a coordinate grid by ``torch.stack(torch.meshgrid(*tensors), dim=-1)``, sine
  layers initialised under ``torch.no_grad()`` by ``weight.uniform_(-bound, bound)``,
  ``coords.clone().detach().requires_grad_(True)``, the output's input gradient and Laplacian
  (a divergence summing ``torch.autograd.grad(y[..., i], x, torch.ones_like(y[..., i]),
  create_graph=True)[0][..., i:i+1]``), activations gathered into an ``OrderedDict`` keyed by
  ``str(layer.__class__)``, a one-item ``Dataset`` of a dict of targets read by
  ``next(iter(DataLoader(..., pin_memory=True)))``, ``"%0.6f" % loss`` formatting a 0-d
  tensor, and a Poisson fit to ``scipy.ndimage.sobel`` gradients trained through the
  network's input gradient (the image is made by the test);
- a VAE: an ``Independent(Normal(mu, sigma), 1)`` posterior, an ``Independent(Bernoulli(
  logits=...), 1)`` likelihood, ``rsample()`` and ``rsample((k,))`` for an importance-weighted
  bound with ``torch.logsumexp``, ``kl_divergence`` of ``Independent`` pairs and of a ``Normal``
  against ``Normal(0.0, 1.0)`` (numbers broadcast), ``entropy()``, ``.mean``/``.stddev``/
  ``.base_dist``/``batch_shape``/``event_shape``, ``OneCycleLR`` with ``get_last_lr`` and
  ``clip_grad_value_``; then a ``Categorical(logits=...)`` policy head's ``log_prob``,
  ``entropy``, ``probs`` and ``kl_divergence`` against ``Categorical(probs=...)``.
  ``Normal.rsample`` draws its noise from one seeded stream in both runs;
- Deep Sets style: permutation-equivariant layers pooling by ``x.max(1, keepdim=True)`` or
  ``x.mean(1, keepdim=True)`` (a bias-free ``Lambda`` map of the summary, or the summary
  subtracted first), ``nn.ELU(inplace=True)`` and ``nn.Tanh`` networks read out by mean or
  by ``h.max(1)[0]``, ``print(self)``, a hand-written gradient clip (``p.grad.data.norm(2)``,
  ``p.grad.data.mul_(factor)``, which must reach the optimizer's step),
  ``Variable(torch.FloatTensor(x))``, ``torch.LongTensor``, ``loss.data.cpu().numpy()``,
  ``optimizer.param_groups[0]['lr'] *= 0.5`` and accuracy by ``(f.max(dim=1)[1] ==
  Y).float().sum()``. The dropout masks are one seeded stream in both runs.

Only the gradient lines differ (``grads = loss.backward()``, ``step(grads)``, and
``p.grad(grads)`` for ``p.grad``).
"""

from __future__ import annotations

import numpy as np
import scipy.ndimage
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source


def _runs(source, steps, capsys, patch=None, **names):
    """The records and logs of ``source`` under torch and of its port under retrograd; each
    run's ``initialize(module)`` gives it torch's weights (in the order made), and ``patch(lib)``
    (a context manager) holds while it runs."""
    states, records, logs = [], [], []
    for lib in (torch, rg):
        made = iter(range(len(states)))

        def initialize(module, lib=lib, made=made):
            if lib is torch:
                states.append(
                    {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
                )
            else:
                module.load_state_dict(states[next(made)])

        record = []
        torch.manual_seed(0)  # torch's initial weights, whatever ran before
        text = source if lib is torch else port(source, steps)
        text = text.replace("from torch.", f"from {lib.__name__}.").replace(
            "import torch.", f"import {lib.__name__}."
        )
        shared = {
            k: v(lib) if callable(v) and k.startswith("make_") else v for k, v in names.items()
        }
        shared = {k.removeprefix("make_"): v for k, v in shared.items()}
        with patch(lib) if patch else _nothing():
            run_source(text, lib, record=record, initialize=initialize, **shared)
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


class _nothing:  # noqa: N801
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- SIREN ----------------------------------------------------------------------------------------
SIREN_SOURCE = """
import collections

from torch.utils.data import Dataset, DataLoader


def coord_grid(n, dim=2):
    axes = tuple(dim * [torch.linspace(-1, 1, steps=n)])
    return torch.stack(torch.meshgrid(*axes), dim=-1).reshape(-1, dim)


class Sine(nn.Module):
    # sin(w0 (Wx + b)), its weights drawn so that activations keep their spread through depth
    def __init__(self, n_in, n_out, first=False, w0=30.0):
        super().__init__()
        self.w0 = w0
        self.linear = nn.Linear(n_in, n_out)
        bound = 1 / n_in if first else np.sqrt(6 / n_in) / w0
        with torch.no_grad():
            self.linear.weight.uniform_(-bound, bound)

    def forward(self, x):
        return torch.sin(self.w0 * self.linear(x))

    def with_pre_activation(self, x):
        pre = self.w0 * self.linear(x)
        return torch.sin(pre), pre


class SirenNet(nn.Module):
    def __init__(self, n_in, width, depth, n_out, w0=30.0):
        super().__init__()
        sines = [Sine(n_in, width, first=True, w0=w0)]
        sines += [Sine(width, width, w0=w0) for _ in range(depth)]
        head = nn.Linear(width, n_out)
        with torch.no_grad():
            head.weight.uniform_(-np.sqrt(6 / width) / w0, np.sqrt(6 / width) / w0)
        self.net = nn.Sequential(*sines, head)

    def forward(self, coords):
        coords = coords.clone().detach().requires_grad_(True)  # the output is differentiated by it
        return self.net(coords), coords

    def activations(self, coords):
        x = coords.detach().clone().requires_grad_(True)
        acts = collections.OrderedDict(input=x)
        for i, layer in enumerate(self.net.children()):
            if isinstance(layer, Sine):
                x, pre = layer.with_pre_activation(x)
                acts["_".join((str(layer.__class__), "%d" % (2 * i)))] = pre
            else:
                x = layer(x)
            acts["_".join((str(layer.__class__), "%d" % (2 * i + 1)))] = x
        return acts


def input_grad(y, x, seed=None):
    seed = torch.ones_like(y) if seed is None else seed
    return torch.autograd.grad(y, [x], grad_outputs=seed, create_graph=True)[0]


def div(field, x):
    total = 0.0
    for i in range(field.shape[-1]):
        part = field[..., i]
        d_part = torch.autograd.grad(part, x, torch.ones_like(part), create_graph=True)[0]
        total += d_part[..., i : i + 1]
    return total


def laplacian(y, x):
    return div(input_grad(y, x), x)


class OneImage(Dataset):
    def __init__(self, n, with_derivatives=False):
        super().__init__()
        img = get_cameraman_tensor(n)
        self.coords = coord_grid(n)
        self.targets = {"pixels": img.permute(1, 2, 0).view(-1, 1)}
        if with_derivatives:  # the Poisson problem: only the image's gradients are given
            pixels = img.numpy()
            dx, dy = (scipy.ndimage.sobel(pixels, axis=a).squeeze(0)[..., None] for a in (1, 2))
            grads = torch.stack((torch.from_numpy(dx), torch.from_numpy(dy)), dim=-1)
            self.targets["grads"] = grads.view(-1, 2)
            lap = scipy.ndimage.laplace(pixels).squeeze(0)[..., None]
            self.targets["laplace"] = torch.from_numpy(lap)

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        if idx > 0:
            raise IndexError
        return self.coords, self.targets


def fit(dataset, loss_of, steps=6, every=2):
    siren = SirenNet(2, hidden, 2, 1)
    initialize(siren)  # the test's: torch's weights in both runs
    opt = torch.optim.Adam(lr=1e-4, params=siren.parameters())
    loader = DataLoader(dataset, batch_size=1, pin_memory=True, num_workers=0)
    coords, targets = next(iter(loader))
    losses = []
    for step in range(steps):
        out, x = siren(coords)
        loss = loss_of(out, x, targets)
        if step % every == 0:
            print("Step %d, loss %0.6f" % (step, loss))
            record.append(input_grad(out, x).norm(dim=-1).detach().numpy())
            record.append(laplacian(out, x).detach().numpy())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    record.append(losses)
    return siren, coords


image_net, coords = fit(OneImage(sidelength), lambda out, x, t: ((out - t["pixels"]) ** 2).mean())
acts = image_net.activations(coords)
record.append([k.split("'")[1].rsplit(".", 1)[-1] + k.split("'")[-1] for k in acts if k != "input"])
record.append(torch.cat([a.flatten() for a in acts.values()]).detach().numpy())

poisson_net, _ = fit(
    OneImage(sidelength, with_derivatives=True),
    lambda out, x, t: torch.mean((input_grad(out, x) - t["grads"]).pow(2).sum(-1)),
)
record.append({k: v.detach().numpy() for k, v in poisson_net.state_dict().items()})
"""

SIREN_STEPS = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]


def _cameraman(lib):
    """The notebook's ``get_cameraman_tensor`` (a normalized ``[1, s, s]`` image), made here
    from a smooth pattern rather than skimage's photograph."""

    def get_cameraman_tensor(sidelength):
        y, x = np.mgrid[0:sidelength, 0:sidelength] / sidelength
        img = (np.sin(6 * x) * np.cos(4 * y) + x * y).astype(np.float32)
        return lib.tensor((img - 0.5) / 0.5).unsqueeze(0)

    return get_cameraman_tensor


def test_siren_fits_an_image_and_its_gradients_as_torch(capsys):
    records, logs = _runs(
        SIREN_SOURCE,
        SIREN_STEPS,
        capsys,
        make_get_cameraman_tensor=_cameraman,
        scipy=scipy,
        sidelength=8,
        hidden=16,
    )
    assert "Step 4, loss" in logs[0]
    # the logs' losses to float32's rounding (the Poisson loss is near 622: the sixth decimal
    # is float32's last bit)
    ours, theirs = ([float(line.split()[-1]) for line in log.splitlines()] for log in logs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert records[0][-2][-1] < records[0][-2][0]  # the Poisson fit's loss went down
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=1e-5)


# -- a VAE with torch.distributions ----------------------------------------------------------------
VAE_SOURCE = """
import torch.distributions as td
from torch.distributions import Bernoulli, Independent, Normal, kl_divergence


class BernoulliVAE(nn.Module):
    def __init__(self, n_pixels=12, width=16, n_latent=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_pixels, width), nn.ReLU())
        self.loc, self.log_scale = nn.Linear(width, n_latent), nn.Linear(width, n_latent)
        self.dec = nn.Sequential(nn.Linear(n_latent, width), nn.ReLU(), nn.Linear(width, n_pixels))
        self.prior = Independent(Normal(torch.zeros(n_latent), torch.ones(n_latent)), 1)

    def posterior(self, x):  # q(z | x), a diagonal Gaussian over the whole latent vector
        h = self.body(x)
        return Independent(Normal(self.loc(h), self.log_scale(h).exp()), 1)

    def likelihood(self, z):
        return Independent(Bernoulli(logits=self.dec(z)), 1)

    def elbo(self, x):
        q = self.posterior(x)
        fit = self.likelihood(q.rsample()).log_prob(x)
        kl = kl_divergence(q, self.prior)
        return (fit - kl).mean(), fit.mean(), kl.mean()

    def importance_bound(self, x, k=5):
        q = self.posterior(x)
        z = q.rsample((k,))
        log_w = self.likelihood(z).log_prob(x) + self.prior.log_prob(z) - q.log_prob(z)
        bound = torch.logsumexp(log_w, dim=0) - math.log(k)  # log of the mean weight
        return bound.mean()


vae = BernoulliVAE()
initialize(vae)
opt = torch.optim.Adam(vae.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-2, total_steps=10)
for _ in range(10):
    opt.zero_grad()
    elbo, fit, kl = vae.elbo(data)
    (-elbo).backward()
    torch.nn.utils.clip_grad_value_(vae.parameters(), 1.0)
    opt.step()
    sched.step()
    record.append([-elbo.item(), fit.item(), kl.item(), sched.get_last_lr()[0]])

with torch.no_grad():
    q = vae.posterior(data)
    px = vae.likelihood(q.mean)
    record += [
        vae.importance_bound(data).item(),
        q.entropy().numpy(), q.mean.numpy(), q.stddev.numpy(), q.base_dist.scale.numpy(),
        list(q.batch_shape) + list(q.event_shape), px.mean.numpy(), px.entropy().numpy(),
        td.kl_divergence(q.base_dist, Normal(0.0, 1.0)).sum(-1).numpy(),
    ]

# a policy head over 4 actions, as policy-gradient code reads a categorical
policy = td.Categorical(logits=vae.dec(q.mean)[:, :4])
taken = torch.tensor([3, 2, 1, 0, 3, 2])
reference = td.Categorical(probs=torch.softmax(policy.logits.flip(-1), -1))
record += [
    policy.log_prob(taken).detach().numpy(), policy.entropy().detach().numpy(),
    policy.probs.detach().numpy(), td.kl_divergence(policy, reference).detach().numpy(),
]
"""

VAE_STEPS = [
    (
        "    (-elbo).backward()\n"
        "    torch.nn.utils.clip_grad_value_(vae.parameters(), 1.0)\n"
        "    opt.step()",
        "    grads = (-elbo).backward()\n"
        "    torch.nn.utils.clip_grad_value_(grads, vae.parameters(), 1.0)\n"
        "    opt.step(grads)",
    )
]


class _SharedNormal:
    """``Normal.rsample`` of a library as ``loc + scale * eps``, ``eps`` from one seeded
    stream in both runs (``sample_shape`` in front, as torch's)."""

    def __init__(self, seed):
        self.seed = seed

    def __call__(self, lib):
        self.lib, self.rng = lib, np.random.default_rng(self.seed)
        return self

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def rsample(self, sample_shape=()):
            shape = tuple(sample_shape) + tuple(self.loc.shape)
            return self.loc + self.scale * lib.tensor(
                rng.standard_normal(shape), dtype=self.loc.dtype
            )

        self.saved = lib.distributions.Normal.rsample
        lib.distributions.Normal.rsample = rsample
        return self

    def __exit__(self, *exc):
        self.lib.distributions.Normal.rsample = self.saved
        return False


def test_vae_with_torch_distributions_matches_torch(capsys):
    data = (np.random.default_rng(49).uniform(size=(6, 12)) > 0.5).astype(np.float32)
    records, _ = _runs(
        VAE_SOURCE,
        VAE_STEPS,
        capsys,
        patch=_SharedNormal(5),
        make_data=lambda lib: lib.tensor(data),
    )
    theirs = records[0]
    assert theirs[9][0] < theirs[0][0]  # the bound improved
    assert_records_agree(records[1], theirs, rtol=1e-5, atol=1e-6)


# -- Deep Sets ------------------------------------------------------------------------------------
DEEPSETS_SOURCE = """
import torch.autograd as autograd


class SetLayer(nn.Module):
    # permutation-equivariant: each point minus a pooled summary of its set, either
    # before the map (one weight) or as a second, bias-free map of the summary
    def __init__(self, n_in, n_out, pool="mean", separate=True):
        super(SetLayer, self).__init__()
        self.pool, self.separate = pool, separate
        self.Gamma = nn.Linear(n_in, n_out)
        if separate:
            self.Lambda = nn.Linear(n_in, n_out, bias=False)

    def forward(self, x):
        if self.pool == "max":
            summary, _ = x.max(1, keepdim=True)
        else:
            summary = x.mean(1, keepdim=True)
        if self.separate:
            return self.Gamma(x) - self.Lambda(summary)
        return self.Gamma(x - summary)


class SetClassifier(nn.Module):
    def __init__(self, width, n_classes=40, pool="mean", separate=True, smooth=False,
                 readout="mean"):
        super(SetClassifier, self).__init__()
        act = nn.Tanh if smooth else (lambda: nn.ELU(inplace=True))
        dims = [3, width, width, width]
        stages = [(SetLayer(a, b, pool, separate), act()) for a, b in zip(dims, dims[1:])]
        self.phi = nn.Sequential(*[m for stage in stages for m in stage])
        self.rho = nn.Sequential(
            nn.Dropout(p=0.5), nn.Linear(width, width), act(),
            nn.Dropout(p=0.5), nn.Linear(width, n_classes),
        )
        self.readout = readout
        print(self)

    def forward(self, x):
        h = self.phi(x)
        pooled = h.mean(1) if self.readout == "mean" else h.max(1)[0]
        return self.rho(pooled)


def rescale_grads(model, max_norm):
    # the norm over all parameters, written out by hand; the gradients are scaled in place
    total = 0
    for p in model.parameters():
        total += p.grad.data.norm(2) ** 2
    total = total ** 0.5
    factor = max_norm / (total + 1e-6)
    if factor < 1:
        for p in model.parameters():
            p.grad.data.mul_(factor)
    return total


configs = [
    dict(pool="mean", separate=True),
    dict(pool="max", separate=False, smooth=True, readout="max"),
    dict(pool="max", separate=True),
    dict(pool="mean", separate=False, smooth=True, readout="max"),
]
for config in configs:
    net = SetClassifier(width, **config)
    initialize(net)  # the test's: torch's weights in both runs
    opt = optim.Adam([{"params": net.parameters()}], lr=1e-3, weight_decay=1e-7, eps=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        running = 0
        for x, _, y in clouds.next_batch():
            X, Y = autograd.Variable(torch.FloatTensor(x)), autograd.Variable(torch.LongTensor(y))
            loss = loss_fn(net(X), Y)
            running += loss.data.cpu().numpy()
            opt.zero_grad()
            loss.backward()
            norm = rescale_grads(net, 5)
            opt.step()
            record.append([loss.item(), float(norm)])
        net.eval()
        hits, seen = 0.0, 0
        for x, _, y in clouds.next_batch():
            X, Y = autograd.Variable(torch.FloatTensor(x)), autograd.Variable(torch.LongTensor(y))
            hits += (net(X).max(dim=1)[1] == Y).float().sum().data.cpu().numpy()
            seen += len(y)
        net.train()
        record.append(float(hits / seen))
        if epoch % 2 == 1:
            opt.param_groups[0]["lr"] *= 0.5
        print("epoch {0}: loss {1:0.3f}, accuracy {2:0.3f}".format(epoch + 1, running, hits / seen))
    record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})
"""

DEEPSETS_STEPS = [
    (
        "            loss.backward()\n"
        "            norm = rescale_grads(net, 5)\n"
        "            opt.step()",
        "            grads = loss.backward()\n"
        "            norm = rescale_grads(net, 5)\n"
        "            opt.step(grads)",
    ),
    ("p.grad.data", "p.grad(grads).data"),
]


class _SharedDropout:
    """``nn.Dropout``'s masks (Bernoulli by uniforms, scaled by ``1 / (1 - p)``) from one
    seeded stream in both runs."""

    def __init__(self, seed):
        self.seed = seed

    def __call__(self, lib):
        self.lib, self.rng = lib, np.random.default_rng(self.seed)
        return self

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def forward(module, x):
            if not module.training or module.p == 0:
                return x
            keep = rng.random(tuple(x.shape)) >= module.p
            return x * lib.tensor(keep / (1 - module.p), dtype=x.dtype)

        self.saved = lib.nn.Dropout.forward
        lib.nn.Dropout.forward = forward
        return self

    def __exit__(self, *exc):
        self.lib.nn.Dropout.forward = self.saved
        return False


class _PointClouds:
    """``train_data``: ``next_batch()`` yields ``(x, _, y)`` NumPy batches of point clouds."""

    def __init__(self, seed, scale, count=12, points=10, batch=4):
        rng = np.random.default_rng(seed)
        self.x = (rng.standard_normal((count, points, 3)) * scale).astype(np.float32)
        self.y = rng.integers(0, 40, count)
        self.batch = batch

    def next_batch(self):
        for i in range(0, len(self.y), self.batch):
            yield self.x[i : i + self.batch], None, self.y[i : i + self.batch]


def test_deep_sets_point_cloud_classifier_matches_torch(capsys):
    records, logs = _runs(
        DEEPSETS_SOURCE,
        DEEPSETS_STEPS,
        capsys,
        patch=_SharedDropout(49),
        width=8,
        epochs=2,
        clouds=_PointClouds(49, scale=20.0),
    )
    assert "(0): SetLayer(" in logs[0] and "epoch 2: loss" in logs[0]
    assert logs[1] == logs[0]
    clipped = [norm for item in records[0] if isinstance(item, list) for _, norm in [item]]
    assert max(clipped) > 5  # clip_grad's mul_ ran: the steps differ from unclipped ones
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)
