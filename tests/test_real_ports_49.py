# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
scientific machine learning, continued.

- SIREN as vsitzmann/siren's ``explore_siren.ipynb`` writes it: ``get_mgrid`` by
  ``torch.stack(torch.meshgrid(*tensors), dim=-1)``, ``SineLayer`` initialised under
  ``torch.no_grad()`` by ``self.linear.weight.uniform_(-np.sqrt(6 / self.in_features) /
  self.omega_0, ...)``, ``coords.clone().detach().requires_grad_(True)``, the image's
  ``gradient`` and ``laplace`` (a ``divergence`` summing ``torch.autograd.grad(y[..., i], x,
  torch.ones_like(y[..., i]), create_graph=True)[0][..., i:i+1]``), ``forward_with_activations``
  into an ``OrderedDict`` keyed by ``str(layer.__class__)``, a ``Dataset`` of one item read by
  ``next(iter(DataLoader(..., pin_memory=True)))`` (a dict of targets collated), ``"Step %d,
  Total loss %0.6f" % (step, loss)`` formatting a 0-d tensor, and the Poisson fit from
  ``scipy.ndimage.sobel`` gradients, trained through the network's input gradient. The image
  (``get_cameraman_tensor``: skimage, PIL and torchvision transforms) is made by the test.
- a VAE written with ``torch.distributions``: ``Independent(Normal(mu, sigma), 1)`` posterior,
  ``Independent(Bernoulli(logits=...), 1)`` likelihood, ``rsample()`` and ``rsample((k,))`` for
  an importance-weighted bound with ``torch.logsumexp``, ``kl_divergence`` of ``Independent``
  pairs and of a ``Normal`` against ``Normal(0.0, 1.0)`` (numbers broadcast), ``entropy()``,
  ``.mean``/``.stddev``/``.base_dist``/``batch_shape``/``event_shape``, ``OneCycleLR`` and
  ``clip_grad_value_``; then a ``Categorical(logits=...)`` policy head's ``log_prob``,
  ``entropy`` and ``kl_divergence`` against ``Categorical(probs=...)``. ``Normal.rsample`` draws
  its noise from one seeded stream in both runs.
- Deep Sets as manzilzaheer/DeepSets writes its point-cloud classifier (``PointClouds/
  classifier.py`` and ``run.py``'s loop): the four permutation-equivariant layers (``x.max(1,
  keepdim=True)`` and ``x.mean(1, keepdim=True)``, ``Lambda`` without bias), ``nn.ELU(inplace=
  True)`` and ``nn.Tanh`` networks pooled by mean or by ``phi_output.max(1)``, ``print(self)``,
  the hand-written ``clip_grad`` (``p.grad.data.norm(2)``, ``p.grad.data.mul_(clip_coef)``,
  which must reach the optimizer's step), ``Variable(torch.FloatTensor(x))``,
  ``torch.LongTensor``, ``loss.data.cpu().numpy()``, ``optimizer.param_groups[0]['lr'] *= 0.5``
  and the accuracy by ``(f_X.max(dim=1)[1] == Y).float().sum()``. The dropout masks are one
  seeded stream in both runs.

The lines changed: the gradient lines only (``grads = loss.backward()``, ``optim.step(grads)``,
and ``p.grad(grads)`` for ``p.grad``).
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
from collections import OrderedDict
from torch.utils.data import DataLoader, Dataset


def get_mgrid(sidelen, dim=2):
    '''Generates a flattened grid of (x,y,...) coordinates in a range of -1 to 1.
    sidelen: int
    dim: int'''
    tensors = tuple(dim * [torch.linspace(-1, 1, steps=sidelen)])
    mgrid = torch.stack(torch.meshgrid(*tensors), dim=-1)
    mgrid = mgrid.reshape(-1, dim)
    return mgrid


class SineLayer(nn.Module):
    # See paper sec. 3.2, final paragraph, and supplement Sec. 1.5 for discussion of omega_0.

    # If is_first=True, omega_0 is a frequency factor which simply multiplies the activations before the
    # nonlinearity. Different signals may require different omega_0 in the first layer - this is a
    # hyperparameter.

    # If is_first=False, then the weights will be divided by omega_0 so as to keep the magnitude of
    # activations constant, but boost gradients to the weight matrix (see supplement Sec. 1.5)

    def __init__(self, in_features, out_features, bias=True,
                 is_first=False, omega_0=30):
        super().__init__()
        self.omega_0 = omega_0
        self.is_first = is_first

        self.in_features = in_features
        self.linear = nn.Linear(in_features, out_features, bias=bias)

        self.init_weights()

    def init_weights(self):
        with torch.no_grad():
            if self.is_first:
                self.linear.weight.uniform_(-1 / self.in_features,
                                             1 / self.in_features)
            else:
                self.linear.weight.uniform_(-np.sqrt(6 / self.in_features) / self.omega_0,
                                             np.sqrt(6 / self.in_features) / self.omega_0)

    def forward(self, input):
        return torch.sin(self.omega_0 * self.linear(input))

    def forward_with_intermediate(self, input):
        # For visualization of activation distributions
        intermediate = self.omega_0 * self.linear(input)
        return torch.sin(intermediate), intermediate


class Siren(nn.Module):
    def __init__(self, in_features, hidden_features, hidden_layers, out_features, outermost_linear=False,
                 first_omega_0=30, hidden_omega_0=30.):
        super().__init__()

        self.net = []
        self.net.append(SineLayer(in_features, hidden_features,
                                  is_first=True, omega_0=first_omega_0))

        for i in range(hidden_layers):
            self.net.append(SineLayer(hidden_features, hidden_features,
                                      is_first=False, omega_0=hidden_omega_0))

        if outermost_linear:
            final_linear = nn.Linear(hidden_features, out_features)

            with torch.no_grad():
                final_linear.weight.uniform_(-np.sqrt(6 / hidden_features) / hidden_omega_0,
                                              np.sqrt(6 / hidden_features) / hidden_omega_0)

            self.net.append(final_linear)
        else:
            self.net.append(SineLayer(hidden_features, out_features,
                                      is_first=False, omega_0=hidden_omega_0))

        self.net = nn.Sequential(*self.net)

    def forward(self, coords):
        coords = coords.clone().detach().requires_grad_(True) # allows to take derivative w.r.t. input
        output = self.net(coords)
        return output, coords

    def forward_with_activations(self, coords, retain_grad=False):
        '''Returns not only model output, but also intermediate activations.
        Only used for visualizing activations later!'''
        activations = OrderedDict()

        activation_count = 0
        x = coords.clone().detach().requires_grad_(True)
        activations['input'] = x
        for i, layer in enumerate(self.net):
            if isinstance(layer, SineLayer):
                x, intermed = layer.forward_with_intermediate(x)

                if retain_grad:
                    x.retain_grad()
                    intermed.retain_grad()

                activations['_'.join((str(layer.__class__), "%d" % activation_count))] = intermed
                activation_count += 1
            else:
                x = layer(x)

                if retain_grad:
                    x.retain_grad()

            activations['_'.join((str(layer.__class__), "%d" % activation_count))] = x
            activation_count += 1

        return activations


def laplace(y, x):
    grad = gradient(y, x)
    return divergence(grad, x)


def divergence(y, x):
    div = 0.
    for i in range(y.shape[-1]):
        div += torch.autograd.grad(y[..., i], x, torch.ones_like(y[..., i]), create_graph=True)[0][..., i:i+1]
    return div


def gradient(y, x, grad_outputs=None):
    if grad_outputs is None:
        grad_outputs = torch.ones_like(y)
    grad = torch.autograd.grad(y, [x], grad_outputs=grad_outputs, create_graph=True)[0]
    return grad


class ImageFitting(Dataset):
    def __init__(self, sidelength):
        super().__init__()
        img = get_cameraman_tensor(sidelength)
        self.pixels = img.permute(1, 2, 0).view(-1, 1)
        self.coords = get_mgrid(sidelength, 2)

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        if idx > 0: raise IndexError

        return self.coords, self.pixels


cameraman = ImageFitting(sidelength)
dataloader = DataLoader(cameraman, batch_size=1, pin_memory=True, num_workers=0)

img_siren = Siren(in_features=2, out_features=1, hidden_features=hidden,
                  hidden_layers=2, outermost_linear=True)
initialize(img_siren)  # the test's: torch's weights in both runs

total_steps = 6 # Since the whole image is our dataset, this just means 500 gradient descent steps.
steps_til_summary = 2

optim = torch.optim.Adam(lr=1e-4, params=img_siren.parameters())

model_input, ground_truth = next(iter(dataloader))

for step in range(total_steps):
    model_output, coords = img_siren(model_input)
    loss = ((model_output - ground_truth)**2).mean()

    if not step % steps_til_summary:
        print("Step %d, Total loss %0.6f" % (step, loss))
        img_grad = gradient(model_output, coords)
        img_laplacian = laplace(model_output, coords)
        record.append(img_grad.norm(dim=-1).detach().numpy())
        record.append(img_laplacian.detach().numpy())

    optim.zero_grad()
    loss.backward()
    optim.step()
    record.append(loss.item())

activations = img_siren.forward_with_activations(model_input)
record.append([name.split("'")[-1] for name in activations])
record.append(torch.cat([a.flatten() for a in activations.values()]).detach().numpy())


# the Poisson equation: fit the image from its gradients
class PoissonEqn(Dataset):
    def __init__(self, sidelength):
        super().__init__()
        img = get_cameraman_tensor(sidelength)

        # Compute gradient and laplacian
        grads_x = scipy.ndimage.sobel(img.numpy(), axis=1).squeeze(0)[..., None]
        grads_y = scipy.ndimage.sobel(img.numpy(), axis=2).squeeze(0)[..., None]
        grads_x, grads_y = torch.from_numpy(grads_x), torch.from_numpy(grads_y)

        self.grads = torch.stack((grads_x, grads_y), dim=-1).view(-1, 2)
        self.laplace = scipy.ndimage.laplace(img.numpy()).squeeze(0)[..., None]
        self.laplace = torch.from_numpy(self.laplace)

        self.pixels = img.permute(1, 2, 0).view(-1, 1)
        self.coords = get_mgrid(sidelength, 2)

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        return self.coords, {'pixels':self.pixels, 'grads':self.grads, 'laplace':self.laplace}


cameraman_poisson = PoissonEqn(sidelength)
dataloader = DataLoader(cameraman_poisson, batch_size=1, pin_memory=True, num_workers=0)

poisson_siren = Siren(in_features=2, out_features=1, hidden_features=hidden,
                      hidden_layers=2, outermost_linear=True)
initialize(poisson_siren)

optim = torch.optim.Adam(lr=1e-4, params=poisson_siren.parameters())

model_input, gt = next(iter(dataloader))
gt = {key: value for key, value in gt.items()}


def gradients_mse(model_output, coords, gt_gradients):
    # compute gradients on the model
    gradients = gradient(model_output, coords)
    # compare them with the ground-truth
    gradients_loss = torch.mean((gradients - gt_gradients).pow(2).sum(-1))
    return gradients_loss


for step in range(total_steps):
    model_output, coords = poisson_siren(model_input)
    train_loss = gradients_mse(model_output, coords, gt['grads'])

    if not step % steps_til_summary:
        print("Step %d, Total loss %0.6f" % (step, train_loss))

    optim.zero_grad()
    train_loss.backward()
    optim.step()
    record.append(train_loss.item())
record.append({k: v.detach().numpy() for k, v in poisson_siren.state_dict().items()})
"""

SIREN_STEPS = [
    ("    loss.backward()\n    optim.step()", "    grads = loss.backward()\n    optim.step(grads)"),
    (
        "    train_loss.backward()\n    optim.step()",
        "    grads = train_loss.backward()\n    optim.step(grads)",
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
    assert "Step 4, Total loss" in logs[0]
    # the logs' losses to float32's rounding (the Poisson loss is near 622: the sixth decimal
    # is float32's last bit)
    ours, theirs = ([float(line.split()[-1]) for line in log.splitlines()] for log in logs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert records[0][-2] < records[0][-7]  # the Poisson fit's loss went down
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=1e-5)


# -- a VAE with torch.distributions ----------------------------------------------------------------
VAE_SOURCE = """
import torch.distributions as D
from torch.distributions import Normal, Independent, Bernoulli, kl_divergence


class Encoder(nn.Module):
    def __init__(self, x_dim, h_dim, z_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(x_dim, h_dim), nn.ReLU())
        self.mu = nn.Linear(h_dim, z_dim)
        self.log_sigma = nn.Linear(h_dim, z_dim)

    def forward(self, x):
        h = self.net(x)
        return Independent(Normal(self.mu(h), self.log_sigma(h).exp()), 1)


class Decoder(nn.Module):
    def __init__(self, z_dim, h_dim, x_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(z_dim, h_dim), nn.ReLU(), nn.Linear(h_dim, x_dim))

    def forward(self, z):
        return Independent(Bernoulli(logits=self.net(z)), 1)


class VAE(nn.Module):
    def __init__(self, x_dim=12, h_dim=16, z_dim=3):
        super().__init__()
        self.encoder = Encoder(x_dim, h_dim, z_dim)
        self.decoder = Decoder(z_dim, h_dim, x_dim)
        self.prior = Independent(Normal(torch.zeros(z_dim), torch.ones(z_dim)), 1)

    def forward(self, x):
        q_z = self.encoder(x)
        z = q_z.rsample()
        p_x = self.decoder(z)
        return q_z, p_x, z

    def elbo(self, x):
        q_z, p_x, z = self(x)
        rec = p_x.log_prob(x)
        kl = kl_divergence(q_z, self.prior)
        return (rec - kl).mean(), rec.mean(), kl.mean()

    def iwae(self, x, k=5):
        q_z = self.encoder(x)
        z = q_z.rsample((k,))
        log_w = self.decoder(z).log_prob(x) + self.prior.log_prob(z) - q_z.log_prob(z)
        return (torch.logsumexp(log_w, dim=0) - math.log(k)).mean()


model = VAE()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-2, total_steps=12)
for step in range(12):
    optimizer.zero_grad()
    elbo, rec, kl = model.elbo(data)
    loss = -elbo
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), rec.item(), kl.item(), scheduler.get_last_lr()[0]])

with torch.no_grad():
    record.append(model.iwae(data).item())
    q_z = model.encoder(data)
    record.append(q_z.entropy().numpy())
    record.append(q_z.mean.numpy())
    record.append(q_z.stddev.numpy())
    record.append(q_z.base_dist.scale.numpy())
    record.append(list(q_z.batch_shape) + list(q_z.event_shape))
    p = model.decoder(q_z.mean)
    record.append(p.mean.numpy())
    record.append(p.entropy().numpy())
    record.append(D.kl_divergence(q_z.base_dist, Normal(0.0, 1.0)).sum(-1).numpy())

# a categorical policy head as the policy-gradient codes write it
logits = model.decoder.net(q_z.mean)[:, :4]
dist = D.Categorical(logits=logits)
action = torch.tensor([0, 1, 2, 3, 0, 1])
record.append(dist.log_prob(action).detach().numpy())
record.append(dist.entropy().detach().numpy())
record.append(dist.probs.detach().numpy())
other = D.Categorical(probs=torch.softmax(logits.flip(-1), -1))
record.append(D.kl_divergence(dist, other).detach().numpy())
"""

VAE_STEPS = [
    (
        "    loss.backward()\n    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)\n    optimizer.step()",
        "    grads = loss.backward()\n    torch.nn.utils.clip_grad_value_(grads, model.parameters(), 1.0)\n    optimizer.step(grads)",
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
    assert theirs[11][0] < theirs[0][0]
    assert_records_agree(records[1], theirs, rtol=1e-5, atol=1e-6)


# -- Deep Sets ------------------------------------------------------------------------------------
DEEPSETS_SOURCE = """
from torch.autograd import Variable


class PermEqui1_max(nn.Module):
  def __init__(self, in_dim, out_dim):
    super(PermEqui1_max, self).__init__()
    self.Gamma = nn.Linear(in_dim, out_dim)

  def forward(self, x):
    xm, _ = x.max(1, keepdim=True)
    x = self.Gamma(x-xm)
    return x

class PermEqui1_mean(nn.Module):
  def __init__(self, in_dim, out_dim):
    super(PermEqui1_mean, self).__init__()
    self.Gamma = nn.Linear(in_dim, out_dim)

  def forward(self, x):
    xm = x.mean(1, keepdim=True)
    x = self.Gamma(x-xm)
    return x

class PermEqui2_max(nn.Module):
  def __init__(self, in_dim, out_dim):
    super(PermEqui2_max, self).__init__()
    self.Gamma = nn.Linear(in_dim, out_dim)
    self.Lambda = nn.Linear(in_dim, out_dim, bias=False)

  def forward(self, x):
    xm, _ = x.max(1, keepdim=True)
    xm = self.Lambda(xm)
    x = self.Gamma(x)
    x = x - xm
    return x

class PermEqui2_mean(nn.Module):
  def __init__(self, in_dim, out_dim):
    super(PermEqui2_mean, self).__init__()
    self.Gamma = nn.Linear(in_dim, out_dim)
    self.Lambda = nn.Linear(in_dim, out_dim, bias=False)

  def forward(self, x):
    xm = x.mean(1, keepdim=True)
    xm = self.Lambda(xm)
    x = self.Gamma(x)
    x = x - xm
    return x


class D(nn.Module):

  def __init__(self, d_dim, x_dim=3, pool = 'mean'):
    super(D, self).__init__()
    self.d_dim = d_dim
    self.x_dim = x_dim

    if pool == 'max':
        self.phi = nn.Sequential(
          PermEqui2_max(self.x_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui2_max(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui2_max(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
        )
    elif pool == 'max1':
        self.phi = nn.Sequential(
          PermEqui1_max(self.x_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui1_max(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui1_max(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
        )
    elif pool == 'mean':
        self.phi = nn.Sequential(
          PermEqui2_mean(self.x_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui2_mean(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui2_mean(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
        )
    elif pool == 'mean1':
        self.phi = nn.Sequential(
          PermEqui1_mean(self.x_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui1_mean(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
          PermEqui1_mean(self.d_dim, self.d_dim),
          nn.ELU(inplace=True),
        )

    self.ro = nn.Sequential(
       nn.Dropout(p=0.5),
       nn.Linear(self.d_dim, self.d_dim),
       nn.ELU(inplace=True),
       nn.Dropout(p=0.5),
       nn.Linear(self.d_dim, 40),
    )
    print(self)

  def forward(self, x):
    phi_output = self.phi(x)
    sum_output = phi_output.mean(1)
    ro_output = self.ro(sum_output)
    return ro_output


class DTanh(nn.Module):

  def __init__(self, d_dim, x_dim=3, pool = 'mean'):
    super(DTanh, self).__init__()
    self.d_dim = d_dim
    self.x_dim = x_dim

    if pool == 'max':
        self.phi = nn.Sequential(
          PermEqui2_max(self.x_dim, self.d_dim),
          nn.Tanh(),
          PermEqui2_max(self.d_dim, self.d_dim),
          nn.Tanh(),
          PermEqui2_max(self.d_dim, self.d_dim),
          nn.Tanh(),
        )
    elif pool == 'max1':
        self.phi = nn.Sequential(
          PermEqui1_max(self.x_dim, self.d_dim),
          nn.Tanh(),
          PermEqui1_max(self.d_dim, self.d_dim),
          nn.Tanh(),
          PermEqui1_max(self.d_dim, self.d_dim),
          nn.Tanh(),
        )
    elif pool == 'mean':
        self.phi = nn.Sequential(
          PermEqui2_mean(self.x_dim, self.d_dim),
          nn.Tanh(),
          PermEqui2_mean(self.d_dim, self.d_dim),
          nn.Tanh(),
          PermEqui2_mean(self.d_dim, self.d_dim),
          nn.Tanh(),
        )
    elif pool == 'mean1':
        self.phi = nn.Sequential(
          PermEqui1_mean(self.x_dim, self.d_dim),
          nn.Tanh(),
          PermEqui1_mean(self.d_dim, self.d_dim),
          nn.Tanh(),
          PermEqui1_mean(self.d_dim, self.d_dim),
          nn.Tanh(),
        )

    self.ro = nn.Sequential(
       nn.Dropout(p=0.5),
       nn.Linear(self.d_dim, self.d_dim),
       nn.Tanh(),
       nn.Dropout(p=0.5),
       nn.Linear(self.d_dim, 40),
    )
    print(self)

  def forward(self, x):
    phi_output = self.phi(x)
    sum_output, _ = phi_output.max(1)
    ro_output = self.ro(sum_output)
    return ro_output


def clip_grad(model, max_norm):
    total_norm = 0
    for p in model.parameters():
        param_norm = p.grad.data.norm(2)
        total_norm += param_norm ** 2
    total_norm = total_norm ** (0.5)
    clip_coef = max_norm / (total_norm + 1e-6)
    if clip_coef < 1:
        for p in model.parameters():
            p.grad.data.mul_(clip_coef)
    return total_norm


# run.py, the training of one network
for kind, pool in (('D', 'mean'), ('DTanh', 'max1'), ('D', 'max'), ('DTanh', 'mean1')):
  G = (D if kind == 'D' else DTanh)(network_dim, pool = pool)
  initialize(G)  # the test's: torch's weights in both runs
  optimizer = optim.Adam([{'params':G.parameters()}], lr=1e-3, weight_decay=1e-7, eps=1e-3)
  criterion = nn.CrossEntropyLoss()
  for j in range(num_epochs):
    loss_val = 0
    for x, _, y in train_data.next_batch():
      X = Variable(torch.FloatTensor(x))
      Y = Variable(torch.LongTensor(y))
      f_X = G(X)
      loss = criterion(f_X, Y)
      loss_val += loss.data.cpu().numpy()
      optimizer.zero_grad()
      loss.backward()
      norm = clip_grad(G, 5)
      optimizer.step()
      record.append([loss.item(), norm.item()])
      del X,Y,f_X,loss

    train_acc = 0
    G.eval()
    counts = 0
    sum_acc = 0.0
    for x, _, y in train_data.next_batch():
      X = Variable(torch.FloatTensor(x))
      Y = Variable(torch.LongTensor(y))
      f_X = G(X)
      sum_acc += (f_X.max(dim=1)[1] == Y).float().sum().data.cpu().numpy()
      counts += len(y)
    train_acc = sum_acc / counts
    G.train()
    record.append(float(train_acc))
    if j%10==9:
      optimizer.param_groups[0]['lr'] *= 0.5
    print('After epoch {0} Train Loss: {1:0.3f} Train Acc: {2:0.3f}'.format(j+1, loss_val, train_acc))
  record.append({k: v.detach().numpy() for k, v in G.state_dict().items()})
"""

DEEPSETS_STEPS = [
    (
        "      loss.backward()\n      norm = clip_grad(G, 5)\n      optimizer.step()",
        "      grads = loss.backward()\n      norm = clip_grad(G, 5)\n      optimizer.step(grads)",
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
        network_dim=8,
        num_epochs=2,
        train_data=_PointClouds(49, scale=20.0),
    )
    assert "(0): PermEqui2_mean(" in logs[0] and "After epoch 2 Train Loss" in logs[0]
    assert logs[1] == logs[0]
    clipped = [norm for item in records[0] if isinstance(item, list) for _, norm in [item]]
    assert max(clipped) > 5  # clip_grad's mul_ ran: the steps differ from unclipped ones
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)
