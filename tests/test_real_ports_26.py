"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- PixelCNN as jzbontar/pixelcnn-pytorch writes it (``main.py``), smaller (8 feature maps, 6x6
  images, four masked layers): ``MaskedConv2d(nn.Conv2d)`` taking ``mask_type, *args,
  **kwargs``, its mask made by ``register_buffer('mask', self.weight.data.clone())``,
  ``fill_(1)`` and slice writes whose bound adds a bool (``kW // 2 + (mask_type == 'B')``),
  ``self.weight.data *= self.mask`` before every ``super(...).forward(x)``, ``nn.ReLU(True)``,
  the target ``(input.data[:,0] * 255).long()``, ``F.cross_entropy`` over 256 intensity
  classes, Adam, ``net.train(False)``, and sampling pixel by pixel with
  ``F.softmax(out[:, :, i, j])`` (no dim: torch's implicit dim 1) and ``sample[:, :, i, j] =
  torch.multinomial(probs, 1).float() / 255.`` into a ``fill_(0)``-ed tensor. The script's
  Python 2 era lines are today's: ``.item()`` for ``loss.data[0]`` (a 0-d index torch refuses),
  no ``.cuda(async=True)`` (a syntax error since Python 3.7) and ``torch.no_grad()`` for
  ``Variable(sample, volatile=True)``.

- the Gumbel-softmax VAE of YongfeiYan/Gumbel_Softmax_VAE (``gumbel_softmax_vae.py``), smaller
  (6x6 images, narrower layers): ``sample_gumbel`` by ``-torch.log(-torch.log(U + eps) + eps)``
  of ``torch.rand(shape)`` with a ``torch.Size``, the straight-through ``hard`` sample
  (``torch.zeros_like(y).view(-1, shape[-1])``, ``scatter_(1, ind.view(-1, 1), 1)``, ``(y_hard -
  y).detach() + y``), ``F.softmax(q_y, dim=-1).reshape(*q.size())``,
  ``F.binary_cross_entropy(..., size_average=False)``, the KL term through ``torch.log(qy *
  categorical_dim + 1e-20)``, and the temperature annealed by ``np.maximum(temp *
  np.exp(-ANNEAL_RATE * batch_idx), temp_min)`` (a NumPy float dividing the logits).

``torch.multinomial`` and ``torch.rand`` draw from one seeded stream for both libraries (the
sample by the inverse CDF of the same uniforms).

Both ran unchanged but for the gradient lines. A sweep of the training utilities beside it found
one defect: ``clip_grad_norm_``/``clip_grad_value_`` refused torch's ``foreach`` argument
(positional fifth in ``clip_grad_norm_``, as torch's since 2.0); it is accepted now and, as in
torch, changes nothing in the result.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

PIXELCNN_SOURCE = """
from torch.autograd import Variable

class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type, *args, **kwargs):
        super(MaskedConv2d, self).__init__(*args, **kwargs)
        assert mask_type in {'A', 'B'}
        self.register_buffer('mask', self.weight.data.clone())
        _, _, kH, kW = self.weight.size()
        self.mask.fill_(1)
        self.mask[:, :, kH // 2, kW // 2 + (mask_type == 'B'):] = 0
        self.mask[:, :, kH // 2 + 1:] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super(MaskedConv2d, self).forward(x)

fm = 8
def build():
    net = nn.Sequential(
        MaskedConv2d('A', 1,  fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        MaskedConv2d('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        MaskedConv2d('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        MaskedConv2d('B', fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        nn.Conv2d(fm, 256, 1))
    return net

def main(net, tr, te, epochs=2, size=6):
    records = []
    sample = torch.Tensor(2, 1, size, size)
    optimizer = optim.Adam(net.parameters())
    for epoch in range(epochs):
        # train
        err_tr = []
        net.train(True)
        for input, _ in tr:
            input = Variable(input)
            target = Variable((input.data[:,0] * 255).long())
            loss = F.cross_entropy(net(input), target)
            err_tr.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        # compute error on test set
        err_te = []
        net.train(False)
        for input, _ in te:
            input = Variable(input)
            target = Variable((input.data[:,0] * 255).long())
            loss = F.cross_entropy(net(input), target)
            err_te.append(loss.item())
        records.append([np.mean(err_tr), np.mean(err_te)])

        # sample
        sample.fill_(0)
        net.train(False)
        with torch.no_grad():
            for i in range(size):
                for j in range(size):
                    out = net(Variable(sample))
                    probs = F.softmax(out[:, :, i, j]).data
                    sample[:, :, i, j] = torch.multinomial(probs, 1).float() / 255.
        records.append(sample.numpy().copy())
    records.append({n: v.detach().numpy().copy() for n, v in net.state_dict().items()})
    return records
"""

PIXELCNN_STEP = [
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    ),
]


def test_pixelcnn_training_and_sampling_match_torch(monkeypatch):
    rng = np.random.default_rng(80)
    tr = [(rng.integers(0, 256, (2, 1, 6, 6)) / 255.0, None) for _ in range(2)]
    te = [(rng.integers(0, 256, (2, 1, 6, 6)) / 255.0, None)]
    theirs, ours = both(PIXELCNN_SOURCE, PIXELCNN_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        draws = np.random.default_rng(81)

        def multinomial(
            probs, num_samples, replacement=False, generator=None, lib=lib, draws=draws
        ):
            p = np.asarray(probs.numpy(), dtype=np.float64)
            cdf = np.cumsum(p / p.sum(-1, keepdims=True), -1)
            u = draws.uniform(size=p.shape[:-1] + (1,))
            return lib.tensor(np.minimum((u > cdf).sum(-1, keepdims=True), p.shape[-1] - 1))

        with monkeypatch.context() as patch:
            patch.setattr(lib, "multinomial", multinomial)
            torch.manual_seed(0)
            net = names["build"]()
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
            else:
                net.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            batches = [
                [(lib.tensor(x, dtype=lib.float32), y) for x, y in part] for part in (tr, te)
            ]
            records.append(names["main"](net, *batches))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_gradient_clipping_takes_torch_s_foreach_switch():
    """``clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, foreach)`` and
    ``clip_grad_value_(params, clip_value, foreach=True)``, torch's signatures since 2.0 (the
    multi-tensor kernels give the same result): the same norms and gradients as torch's."""
    w = np.array([[3.0, -4.0], [0.5, 2.0]])
    theirs = torch.tensor(w, requires_grad=True)
    ((theirs * theirs).sum() * 2).backward()
    norm = torch.nn.utils.clip_grad_norm_([theirs], 1.0, 2.0, False, True)
    torch.nn.utils.clip_grad_value_([theirs], 0.3, foreach=True)

    ours = rg.tensor(w).requires_grad_()
    grads = ((ours * ours).sum() * 2).backward()
    our_norm = rg.nn.utils.clip_grad_norm_(grads, [ours], 1.0, 2.0, False, True)
    rg.nn.utils.clip_grad_value_(grads, [ours], 0.3, foreach=True)
    np.testing.assert_allclose(our_norm, norm.item(), rtol=1e-12)
    np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-12)


# -- Gumbel-softmax VAE ----------------------------------------------------------------------------
GUMBEL_SOURCE = """
latent_dim = 3
categorical_dim = 4  # one-of-K vector
temp_min = 0.5
ANNEAL_RATE = 0.1
is_cuda = False


def sample_gumbel(shape, eps=1e-20):
    U = torch.rand(shape)
    if is_cuda:
        U = U.cuda()
    return -torch.log(-torch.log(U + eps) + eps)


def gumbel_softmax_sample(logits, temperature):
    y = logits + sample_gumbel(logits.size())
    return F.softmax(y / temperature, dim=-1)


def gumbel_softmax(logits, temperature, hard=False):
    y = gumbel_softmax_sample(logits, temperature)

    if not hard:
        return y.view(-1, latent_dim * categorical_dim)

    shape = y.size()
    _, ind = y.max(dim=-1)
    y_hard = torch.zeros_like(y).view(-1, shape[-1])
    y_hard.scatter_(1, ind.view(-1, 1), 1)
    y_hard = y_hard.view(*shape)
    # Set gradients w.r.t. y_hard gradients w.r.t. y
    y_hard = (y_hard - y).detach() + y
    return y_hard.view(-1, latent_dim * categorical_dim)


class VAE_gumbel(nn.Module):
    def __init__(self, temp):
        super(VAE_gumbel, self).__init__()

        self.fc1 = nn.Linear(36, 16)
        self.fc2 = nn.Linear(16, 12)
        self.fc3 = nn.Linear(12, latent_dim * categorical_dim)

        self.fc4 = nn.Linear(latent_dim * categorical_dim, 12)
        self.fc5 = nn.Linear(12, 16)
        self.fc6 = nn.Linear(16, 36)

        self.relu = nn.ReLU()
        self.sigmoid = nn.Sigmoid()

    def encode(self, x):
        h1 = self.relu(self.fc1(x))
        h2 = self.relu(self.fc2(h1))
        return self.relu(self.fc3(h2))

    def decode(self, z):
        h4 = self.relu(self.fc4(z))
        h5 = self.relu(self.fc5(h4))
        return self.sigmoid(self.fc6(h5))

    def forward(self, x, temp, hard):
        q = self.encode(x.view(-1, 36))
        q_y = q.view(q.size(0), latent_dim, categorical_dim)
        z = gumbel_softmax(q_y, temp, hard)
        return self.decode(z), F.softmax(q_y, dim=-1).reshape(*q.size())


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, qy):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 36), size_average=False) / x.shape[0]

    log_ratio = torch.log(qy * categorical_dim + 1e-20)
    KLD = torch.sum(qy * log_ratio, dim=-1).mean()

    return BCE + KLD


def train(model, optimizer, train_loader, args, records):
    model.train()
    train_loss = 0
    temp = args.temp
    for batch_idx, (data, _) in enumerate(train_loader):
        optimizer.zero_grad()
        recon_batch, qy = model(data, temp, args.hard)
        loss = loss_function(recon_batch, data, qy)
        loss.backward()
        train_loss += loss.item() * len(data)
        optimizer.step()
        if batch_idx % 2 == 1:
            temp = np.maximum(temp * np.exp(-ANNEAL_RATE * batch_idx), temp_min)
        records.append([loss.item(), float(temp)])
    records.append(train_loss / len(train_loader))


def main(model, train_loader, args):
    records = []
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(1, args.epochs + 1):
        train(model, optimizer, train_loader, args, records)
    records.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    return records
"""

GUMBEL_STEP = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


@pytest.mark.parametrize("hard", [False, True])
def test_gumbel_softmax_vae_matches_torch(monkeypatch, hard):
    import types

    args = types.SimpleNamespace(temp=1.0, hard=hard, epochs=2)
    rng = np.random.default_rng(90)
    batches = [(rng.uniform(0, 1, (4, 1, 6, 6)), None) for _ in range(4)]
    theirs, ours = both(GUMBEL_SOURCE, GUMBEL_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        draws = np.random.default_rng(91)

        def rand(*shape, lib=lib, draws=draws, **_):
            size = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
            return lib.tensor(draws.uniform(size=tuple(size)), dtype=lib.float32)

        with monkeypatch.context() as patch:
            patch.setattr(lib, "rand", rand)
            torch.manual_seed(0)
            model = names["VAE_gumbel"](args.temp)
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            loader = [(lib.tensor(x, dtype=lib.float32), y) for x, y in batches]
            records.append(names["main"](model, loader, args))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
