"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_67.py`` (the
harness: ``tests/real_ports.py``). The programs are written here in the style of
lyakaap/VAT-pytorch, YU1ut/MixMatch-pytorch and atulkum/pointer_summarizer:

- virtual adversarial training over a small convolutional classifier: batch normalisation's
  ``track_running_stats`` flipped by ``module.track_running_stats ^= True`` through
  ``model.apply`` inside a ``contextlib`` context manager (the perturbed passes use the batch's
  statistics and leave the running ones alone), ``torch.rand(x.shape).sub(0.5).to(x.device)``,
  ``d.view(d.shape[0], -1, *(1 for _ in range(d.dim() - 2)))``, ``d /= norms + 1e-8`` in place
  after ``torch.norm(..., dim=1, keepdim=True)``, ``d.requires_grad_()`` and the adversarial
  direction read from ``d.grad`` (ported as ``d.grad(grads)``), ``F.kl_div(...,
  reduction='batchmean')``, ``model.zero_grad()``; ``DataLoader``/``TensorDataset`` of
  ``torch.from_numpy`` arrays, top-k accuracy by ``topk(k, 1, True, True)``, ``.t()``,
  ``eq(...expand_as(...))`` and ``mul_(100.0 / n)``, a printed log compared line for line.
- MixMatch over a small network with batch normalisation: the EMA model's parameters detached
  in place by ``p.detach_()``, an EMA writing both models through the tensors of their
  ``state_dict().values()`` (``live.data.copy_``, ``avg.mul_``, ``avg.add_(live * (1.0 -
  alpha))``, the weight decay ``live.mul_(1 - decay)`` on the trained model's parameters) and
  skipping ``num_batches_tracked`` by ``dtype == torch.float32``, one-hot targets by
  ``torch.zeros(n, 10).scatter_(1, y.view(-1, 1).long(), 1)``, two augmented views collated as
  ``((u1, u2), _)``, loaders restarted on ``StopIteration``, sharpening by ``guess ** (1 /
  T)``, mixup with ``np.random.beta`` and ``torch.randperm``, ``list(torch.split(mixed_x,
  n))`` interleaved so that each batch-normalised batch mixes labelled and unlabelled samples,
  and the swaps ``pieces[0][i], pieces[i][i] = pieces[i][i], pieces[0][i]``.
- a pointer-generator summariser with coverage: forget-gate biases through
  ``lstm._all_weights`` and ``tensor.data[quarter:2 * quarter].fill_(1.)``, weights by
  ``.data.uniform_``/``.data.normal_(std=...)``, a bidirectional ``nn.LSTM`` over
  ``rnn.pack_padded_sequence`` of int32 NumPy lengths and ``rnn.pad_packed_sequence``, the
  embedding shared by ``decoder.embedding.weight = encoder.embedding.weight``,
  ``Variable(torch.from_numpy(...)).float()``, the coverage fed through ``nn.Linear(1, ...)``,
  ``F.tanh``/``F.sigmoid``, ``torch.bmm``, the copy distribution ``generated.scatter_add(1,
  extended_ids, ...)`` over the vocabulary extended by ``extra_zeros``, ``torch.gather(final,
  1, target.unsqueeze(1)).squeeze()``, the coverage loss ``torch.sum(torch.min(weights,
  coverage), 1)``, three ``nn.utils.clip_grad_norm_`` calls and ``torch.optim.Adagrad(...,
  initial_accumulator_value=...)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


class SharedRandperm:
    """``torch.randperm`` of a library drawing from one seeded stream."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, dtype=None, device=None, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=dtype or lib.int64)

        self.saved = lib.randperm
        lib.randperm = randperm
        return self

    def __exit__(self, *exc):
        self.lib.randperm = self.saved
        return False


VAT_SOURCE = """
import contextlib

import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.utils.data import TensorDataset, DataLoader


@contextlib.contextmanager
def frozen_bn_stats(model):
    # the perturbed passes normalise by their own batch but leave the running statistics alone
    def flip(module):
        if hasattr(module, "track_running_stats"):
            module.track_running_stats ^= True

    model.apply(flip)
    try:
        yield
    finally:
        model.apply(flip)


def unit_rows(d):
    norms = torch.norm(
        d.view(d.shape[0], -1, *(1 for _ in range(d.dim() - 2))), dim=1, keepdim=True
    )
    d /= norms + 1e-8
    return d


class VirtualAdversarialLoss(nn.Module):
    # KL between the prediction at x and at x moved along the most sensitive direction
    def __init__(self, xi=10.0, radius=1.0, power_iterations=1):
        super().__init__()
        self.xi, self.radius, self.power_iterations = xi, radius, power_iterations

    def forward(self, model, x):
        with torch.no_grad():
            target = F.softmax(model(x), dim=1)
        d = unit_rows(torch.rand(x.shape).sub(0.5).to(x.device))
        with frozen_bn_stats(model):
            for _ in range(self.power_iterations):
                d.requires_grad_()
                divergence = F.kl_div(
                    F.log_softmax(model(x + self.xi * d), dim=1), target, reduction="batchmean"
                )
                divergence.backward()
                d = unit_rows(d.grad)
                model.zero_grad()
            moved = F.log_softmax(model(x + self.radius * d), dim=1)
            return F.kl_div(moved, target, reduction="batchmean")


class SmallConvNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        # bias-free layers before each batch norm: Adam would follow a bias's rounding noise
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.hidden = nn.Linear(16, 16, bias=False)
        self.norm = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        x = self.features(x).flatten(1)
        return self.head(F.relu(self.norm(self.hidden(x))))


def top_k_accuracy(logits, labels, ks=(1,)):
    _, best = logits.topk(max(ks), 1, True, True)
    hits = best.t().eq(labels.view(1, -1).expand_as(best.t()))
    scores = [
        hits[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / labels.size(0)) for k in ks
    ]
    return scores[0] if len(scores) == 1 else scores


def run(cfg, x_labeled, y_labeled, x_unlabeled):
    device = torch.device("cpu")
    labeled = iter(
        DataLoader(
            TensorDataset(torch.from_numpy(x_labeled), torch.from_numpy(y_labeled)), batch_size=4
        )
    )
    unlabeled = iter(DataLoader(TensorDataset(torch.from_numpy(x_unlabeled)), batch_size=6))
    net = SmallConvNet().to(device)
    initialize(net)
    optimizer = optim.Adam(net.parameters(), lr=cfg.lr)
    vat = VirtualAdversarialLoss(xi=cfg.xi, radius=cfg.eps, power_iterations=cfg.ip)
    ce = nn.CrossEntropyLoss()
    net.train()
    for it in range(cfg.iters):
        xb, yb = (t.to(device) for t in next(labeled))
        (ub,) = next(unlabeled)
        optimizer.zero_grad()
        smoothness = vat(net, ub.to(device))
        logits = net(xb)
        supervised = ce(logits, yb)
        loss = supervised + cfg.alpha * smoothness
        loss.backward()
        optimizer.step()
        numbers = [supervised.item(), smoothness.item(), top_k_accuracy(logits, yb).item()]
        record.append(numbers)
        print("it {}: ce {:.4f}, vat {:.4f}, acc {:.1f}".format(it, *numbers))
    record.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
"""

VAT_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "                divergence.backward()\n                d = unit_rows(d.grad)\n",
        "                grads = divergence.backward()\n"
        "                d = unit_rows(d.grad(grads))\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        optimizer.step(loss.backward())\n",
    ),
]


class _VatArgs:
    iters = 2
    xi = 10.0
    eps = 1.0
    ip = 1
    alpha = 1.0
    lr = 0.01


def test_virtual_adversarial_training_as_torch(capsys):
    rng = np.random.default_rng(6801)
    x_labeled = rng.standard_normal((8, 1, 6, 6)).astype(np.float32)
    y_labeled = rng.integers(0, 3, 8)
    x_unlabeled = rng.standard_normal((12, 1, 6, 6)).astype(np.float32)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = VAT_SOURCE if lib is torch else ported_imports(port(VAT_SOURCE, VAT_STEPS))
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedDraws(lib, 6801):
            names["run"](_VatArgs(), x_labeled, y_labeled, x_unlabeled)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "it 1: ce" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


MIXMATCH_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils import data
from torch.nn import functional as F


class Classifier(nn.Module):
    def __init__(self, n_in=6, classes=10):
        super().__init__()
        self.fc = nn.Linear(n_in, 12, bias=False)  # as the convolutions ahead of a batch norm
        self.bn = nn.BatchNorm1d(12, momentum=0.001)
        self.out = nn.Linear(12, classes)

    def forward(self, x):
        return self.out(F.leaky_relu(self.bn(self.fc(x)), negative_slope=0.1))


def build(ema=False):
    net = Classifier()
    initialize(net)
    if use_cuda:
        net = net.cuda()
    if ema:  # the averaged copy is never trained: its parameters leave the graph for good
        for p in net.parameters():
            p.detach_()
    return net


class TwoAugmentations(data.Dataset):
    # an unlabelled point, seen under two noises (the label slot is unused)
    def __init__(self, points, noises):
        self.points, self.noise = points, noises

    def __len__(self):
        return len(self.points)

    def __getitem__(self, i):
        return (self.points[i] + self.noise[0][i], self.points[i] + self.noise[1][i]), -1


def ramp(progress, length=16):
    return 1.0 if length == 0 else float(np.clip(progress / length, 0.0, 1.0))


def semi_supervised_loss(logits_x, targets_x, logits_u, targets_u, progress):
    supervised = -torch.mean(torch.sum(F.log_softmax(logits_x, dim=1) * targets_x, dim=1))
    consistency = torch.mean((torch.softmax(logits_u, dim=1) - targets_u) ** 2)
    return supervised, consistency, cfg.lambda_u * ramp(progress)


class EMAWithDecay(object):
    # averages every float entry of the state dict, and decays the trained weights a little
    def __init__(self, net, ema_net, alpha=0.999):
        self.alpha, self.decay = alpha, 0.02 * cfg.lr
        self.live = list(net.state_dict().values())
        self.averaged = list(ema_net.state_dict().values())
        for live, avg in zip(self.live, self.averaged):
            live.data.copy_(avg.data)

    def step(self):
        for live, avg in zip(self.live, self.averaged):
            if avg.dtype == torch.float32:  # not num_batches_tracked
                avg.mul_(self.alpha)
                avg.add_(live * (1.0 - self.alpha))
                live.mul_(1 - self.decay)


def split_points(batch, parts):
    sizes = [batch // parts] * parts
    for i in range(batch - sum(sizes)):
        sizes[-i - 1] += 1
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    return bounds


def interleave(chunks, batch):
    # swap slices so that each batch-normalised pass sees labelled and unlabelled samples
    n = len(chunks)
    bounds = split_points(batch, n)
    pieces = [[c[bounds[j] : bounds[j + 1]] for j in range(n)] for c in chunks]
    for i in range(1, n):
        pieces[0][i], pieces[i][i] = pieces[i][i], pieces[0][i]
    return [torch.cat(p, dim=0) for p in pieces]


def next_batch(loader, it):
    try:
        return next(it), it
    except StopIteration:
        it = iter(loader)
        return next(it), it


def train_epoch(labeled_loader, unlabeled_loader, net, optimizer, ema, epoch):
    net.train()
    lab_it, unl_it = iter(labeled_loader), iter(unlabeled_loader)
    for b in range(cfg.train_iteration):
        (x, y), lab_it = next_batch(labeled_loader, lab_it)
        ((u1, u2), _), unl_it = next_batch(unlabeled_loader, unl_it)
        n = x.size(0)
        y = torch.zeros(n, 10).scatter_(1, y.view(-1, 1).long(), 1)
        if use_cuda:
            x, y, u1, u2 = x.cuda(), y.cuda(non_blocking=True), u1.cuda(), u2.cuda()
        with torch.no_grad():  # guess the unlabelled labels, then sharpen
            guess = (torch.softmax(net(u1), dim=1) + torch.softmax(net(u2), dim=1)) / 2
            sharp = guess ** (1 / cfg.T)
            guess = (sharp / sharp.sum(dim=1, keepdim=True)).detach()
        inputs = torch.cat([x, u1, u2], dim=0)
        targets = torch.cat([y, guess, guess], dim=0)
        lam = np.random.beta(cfg.alpha, cfg.alpha)
        lam = max(lam, 1 - lam)
        order = torch.randperm(inputs.size(0))
        mixed_x = lam * inputs + (1 - lam) * inputs[order]
        mixed_y = lam * targets + (1 - lam) * targets[order]
        chunks = interleave(list(torch.split(mixed_x, n)), n)
        logits = interleave([net(c) for c in chunks], n)
        lx, lu, w = semi_supervised_loss(
            logits[0],
            mixed_y[:n],
            torch.cat(logits[1:], dim=0),
            mixed_y[n:],
            epoch + b / cfg.train_iteration,
        )
        loss = lx + w * lu
        record.append([loss.item(), lx.item(), lu.item(), w])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ema.step()


def evaluate(loader, net, criterion, name):
    net.eval()
    total_loss, hits, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            if use_cuda:
                x, y = x.cuda(), y.cuda(non_blocking=True)
            logits = net(x)
            total_loss += criterion(logits, y).item() * x.size(0)
            hits += (logits.max(1)[1] == y).sum().item()
            seen += x.size(0)
    print(f"{name}: loss {total_loss / seen:.4f}, {hits} of {seen} right")


def run(labeled, unlabeled, noise, validation):
    labeled_loader = data.DataLoader(
        data.TensorDataset(*labeled), batch_size=cfg.batch_size, shuffle=False, drop_last=True
    )
    unlabeled_loader = data.DataLoader(
        TwoAugmentations(torch.from_numpy(unlabeled), noise),
        batch_size=cfg.batch_size,
        shuffle=False,
        drop_last=True,
    )
    validation_loader = data.DataLoader(
        data.TensorDataset(*validation), batch_size=5, shuffle=False
    )
    net, ema_net = build(), build(ema=True)
    optimizer = optim.Adam(net.parameters(), lr=cfg.lr)
    ema = EMAWithDecay(net, ema_net, alpha=cfg.ema_decay)
    for epoch in range(cfg.epochs):
        train_epoch(labeled_loader, unlabeled_loader, net, optimizer, ema, epoch)
        evaluate(validation_loader, ema_net, nn.CrossEntropyLoss(), "validation (EMA)")
    for m in (net, ema_net):
        record.append({k: v.detach().numpy().copy() for k, v in m.state_dict().items()})
"""

MIXMATCH_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        optimizer.step(loss.backward())\n",
    ),
]


class _MixMatchArgs:
    train_iteration = 3
    batch_size = 4
    T = 0.5
    alpha = 0.75
    lambda_u = 75
    lr = 0.002
    ema_decay = 0.999
    epochs = 2


def test_mixmatch_trains_as_torch(capsys):
    rng = np.random.default_rng(6802)
    labeled_x = rng.standard_normal((8, 6)).astype(np.float32)
    labeled_y = rng.integers(0, 10, 8)
    unlabeled = rng.standard_normal((8, 6)).astype(np.float32)
    noise = 0.1 * rng.standard_normal((2, 8, 6)).astype(np.float32)
    validation_x = rng.standard_normal((10, 6)).astype(np.float32)
    validation_y = rng.integers(0, 10, 10)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        np.random.seed(6802)  # the mixup coefficients
        text = (
            MIXMATCH_SOURCE
            if lib is torch
            else ported_imports(port(MIXMATCH_SOURCE, MIXMATCH_STEPS))
        )
        names = run_source(
            text, lib, record=record, initialize=initialize, cfg=_MixMatchArgs(), use_cuda=False
        )
        tensors = [
            (lib.from_numpy(x), lib.from_numpy(y))
            for x, y in ((labeled_x, labeled_y), (validation_x, validation_y))
        ]
        with SharedRandperm(lib, 6802):
            names["run"](tensors[0], unlabeled, lib.from_numpy(noise), tensors[1])
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0].count("validation (EMA): loss") == 2
    assert_records_agree(
        records[1],
        records[0],
        rtol=1e-4,
        atol=1e-5,
    )


def test_state_dict_values_kept_across_steps_read_and_write_the_current_parameters():
    """A MixMatch-style EMA keeps ``list(model.state_dict().values())`` from before training
    and updates through them after every optimizer step. torch's values share the parameters'
    storage; retrograd's read the values of when ``state_dict()`` was called, so ``param.mul_``
    wrote a stale copy over the step the optimizer had just made."""
    results = []
    reference = torch.nn.Linear(3, 2)
    initial = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    for lib in (torch, rg):
        model = reference if lib is torch else rg.nn.Linear(3, 2)
        if lib is rg:
            model.load_state_dict(initial)
        weight, bias = model.state_dict().values()
        optimizer = lib.optim.SGD(model.parameters(), lr=0.5)
        loss = model(lib.ones(4, 3)).square().sum()
        if lib is rg:
            optimizer.step(loss.backward())
        else:
            loss.backward()
            optimizer.step()
        after_step = (bias * 1.0).numpy().copy()  # a read: the stepped values
        weight.mul_(0.5)
        bias += 1.0
        bias.data.copy_(bias.data * 2.0)
        results.append(
            [after_step, model.weight.detach().numpy().copy(), model.bias.detach().numpy().copy()]
        )
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


POINTER_GENERATOR_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable as V
from torch.nn import functional as F
from torch.nn.utils import rnn


def lstm_init(lstm):
    # uniform weights; biases zero except the forget gate's quarter, set to one
    for layer_names in lstm._all_weights:
        for name in layer_names:
            tensor = getattr(lstm, name)
            if name.startswith("weight_"):
                tensor.data.uniform_(-cfg.rand_unif_init_mag, cfg.rand_unif_init_mag)
            elif name.startswith("bias_"):
                quarter = tensor.size(0) // 4
                tensor.data.fill_(0.0)
                tensor.data[quarter : 2 * quarter].fill_(1.0)


def normal_init(*tensors):
    for t in tensors:
        if t is not None:
            t.data.normal_(std=cfg.trunc_norm_init_std)


class ArticleEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        normal_init(self.embedding.weight)
        self.lstm = nn.LSTM(
            cfg.emb_dim, cfg.hidden_dim, num_layers=1, batch_first=True, bidirectional=True
        )
        lstm_init(self.lstm)
        self.key_proj = nn.Linear(2 * cfg.hidden_dim, 2 * cfg.hidden_dim, bias=False)

    def forward(self, tokens, lengths):  # lengths: descending, an int32 NumPy array
        packed = rnn.pack_padded_sequence(self.embedding(tokens), lengths, batch_first=True)
        packed_out, state = self.lstm(packed)
        states, _ = rnn.pad_packed_sequence(packed_out, batch_first=True)
        states = states.contiguous()
        keys = self.key_proj(states.view(-1, 2 * cfg.hidden_dim))
        return states, keys, state


class Bridge(nn.Module):
    # the two directions' final states, folded into the decoder's first state
    def __init__(self):
        super().__init__()
        self.h = nn.Linear(2 * cfg.hidden_dim, cfg.hidden_dim)
        self.c = nn.Linear(2 * cfg.hidden_dim, cfg.hidden_dim)
        normal_init(self.h.weight, self.h.bias, self.c.weight, self.c.bias)

    def forward(self, state):
        h, c = (s.transpose(0, 1).contiguous().view(-1, 2 * cfg.hidden_dim) for s in state)
        return F.relu(self.h(h)).unsqueeze(0), F.relu(self.c(c)).unsqueeze(0)


class CoverageAttention(nn.Module):
    def __init__(self):
        super().__init__()
        n = 2 * cfg.hidden_dim
        self.query_proj = nn.Linear(n, n)
        self.coverage_proj = nn.Linear(1, n, bias=False) if cfg.is_coverage else None
        self.score = nn.Linear(n, 1, bias=False)

    def forward(self, query, states, keys, mask, coverage):
        b, t_k, n = list(states.size())
        q = self.query_proj(query).unsqueeze(1).expand(b, t_k, n).contiguous().view(-1, n)
        features = keys + q
        if cfg.is_coverage:
            features = features + self.coverage_proj(coverage.view(-1, 1))
        weights = F.softmax(self.score(F.tanh(features)).view(-1, t_k), dim=1) * mask
        weights = weights / weights.sum(1, keepdim=True)  # renormalised over the real tokens
        context = torch.bmm(weights.unsqueeze(1), states).view(-1, n)
        if cfg.is_coverage:
            coverage = coverage.view(-1, t_k) + weights
        return context, weights, coverage


class CopyDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        h, e = cfg.hidden_dim, cfg.emb_dim
        self.attention = CoverageAttention()
        self.embedding = nn.Embedding(cfg.vocab_size, e)
        normal_init(self.embedding.weight)
        self.mix_in = nn.Linear(2 * h + e, e)
        self.lstm = nn.LSTM(e, h, num_layers=1, batch_first=True, bidirectional=False)
        lstm_init(self.lstm)
        self.gen_gate = nn.Linear(4 * h + e, 1) if cfg.pointer_gen else None
        self.hidden_out = nn.Linear(3 * h, h)
        self.vocab_out = nn.Linear(h, cfg.vocab_size)
        normal_init(self.vocab_out.weight, self.vocab_out.bias)

    def forward(
        self, prev_token, state, states, keys, mask, context, extra_zeros, extended_ids, coverage
    ):
        x = self.mix_in(torch.cat((context, self.embedding(prev_token)), 1))
        out, state = self.lstm(x.unsqueeze(1), state)
        query = torch.cat((state[0].view(-1, cfg.hidden_dim), state[1].view(-1, cfg.hidden_dim)), 1)
        context, weights, new_coverage = self.attention(query, states, keys, mask, coverage)
        vocab = F.softmax(
            self.vocab_out(self.hidden_out(torch.cat((out.view(-1, cfg.hidden_dim), context), 1))),
            dim=1,
        )
        if not cfg.pointer_gen:
            return vocab, state, context, weights, new_coverage
        p_gen = F.sigmoid(self.gen_gate(torch.cat((context, query, x), 1)))
        generated = p_gen * vocab
        if extra_zeros is not None:  # room for the article's own out-of-vocabulary words
            generated = torch.cat([generated, extra_zeros], 1)
        final = generated.scatter_add(1, extended_ids, (1 - p_gen) * weights)
        return final, state, context, weights, new_coverage


def as_tensors(batch):
    size = len(batch.enc_lens)
    tokens = V(torch.from_numpy(batch.enc_batch).long())
    mask = V(torch.from_numpy(batch.enc_padding_mask)).float()
    extended_ids, extra_zeros = None, None
    if cfg.pointer_gen:
        extended_ids = V(torch.from_numpy(batch.enc_batch_extend_vocab).long())
        if batch.max_art_oovs > 0:
            extra_zeros = V(torch.zeros((size, batch.max_art_oovs)))
    context = V(torch.zeros((size, 2 * cfg.hidden_dim)))
    coverage = V(torch.zeros(tokens.size())) if cfg.is_coverage else None
    decoder_in = V(torch.from_numpy(batch.dec_batch).long())
    decoder_mask = V(torch.from_numpy(batch.dec_padding_mask)).float()
    lengths = V(torch.from_numpy(batch.dec_lens)).float()
    targets = V(torch.from_numpy(batch.target_batch)).long()
    return (
        tokens,
        mask,
        extended_ids,
        extra_zeros,
        context,
        coverage,
        decoder_in,
        decoder_mask,
        lengths,
        targets,
    )


class Summarizer(object):
    def __init__(self):
        self.encoder, self.decoder, self.bridge = ArticleEncoder(), CopyDecoder(), Bridge()
        self.decoder.embedding.weight = self.encoder.embedding.weight  # one table for both sides
        for m in (self.encoder, self.decoder, self.bridge):
            initialize(m)
        params = [p for m in (self.encoder, self.decoder, self.bridge) for p in m.parameters()]
        self.optimizer = torch.optim.Adagrad(
            params,
            lr=cfg.lr_coverage if cfg.is_coverage else cfg.lr,
            initial_accumulator_value=cfg.adagrad_init_acc,
        )

    def step(self, batch):
        (
            tokens,
            mask,
            extended_ids,
            extra_zeros,
            context,
            coverage,
            decoder_in,
            decoder_mask,
            lengths,
            targets,
        ) = as_tensors(batch)
        self.optimizer.zero_grad()
        states, keys, encoder_state = self.encoder(tokens, batch.enc_lens)
        state = self.bridge(encoder_state)
        per_step = []
        for t in range(min(np.max(batch.dec_lens), cfg.max_dec_steps)):  # teacher forcing
            final, state, context, weights, next_coverage = self.decoder(
                decoder_in[:, t],
                state,
                states,
                keys,
                mask,
                context,
                extra_zeros,
                extended_ids,
                coverage,
            )
            nll = -torch.log(torch.gather(final, 1, targets[:, t].unsqueeze(1)).squeeze() + cfg.eps)
            if cfg.is_coverage:  # penalise attending again where attention has already been
                nll = nll + cfg.cov_loss_wt * torch.sum(torch.min(weights, coverage), 1)
                coverage = next_coverage
            per_step.append(nll * decoder_mask[:, t])
        loss = torch.mean(torch.sum(torch.stack(per_step, 1), 1) / lengths)
        loss.backward()
        self.grad_norm = nn.utils.clip_grad_norm_(self.encoder.parameters(), cfg.max_grad_norm)
        nn.utils.clip_grad_norm_(self.decoder.parameters(), cfg.max_grad_norm)
        nn.utils.clip_grad_norm_(self.bridge.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        return loss.item()

    def train(self, n_steps, batches):
        for i in range(n_steps):
            loss = self.step(batches[i % len(batches)])
            record.append([loss, float(self.grad_norm)])
            print(f"step {i + 1}: loss {loss:.6f}")
        for m in (self.encoder, self.decoder, self.bridge):
            record.append({k: v.detach().numpy().copy() for k, v in m.state_dict().items()})
"""

POINTER_GENERATOR_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("loss.backward()\n        self.grad_norm", "grads = loss.backward()\n        self.grad_norm"),
    ("clip_grad_norm_(self.", "clip_grad_norm_(grads, self."),
    ("        self.optimizer.step()\n", "        self.optimizer.step(grads)\n"),
]


class _PointerGeneratorConfig:
    vocab_size = 12
    emb_dim = 6
    hidden_dim = 4
    # wider than the repository's 0.02 and 1e-4: with those the first attentions are uniform
    # and equal the coverage, and ``torch.min``'s gradient at those ties follows the rounding
    rand_unif_init_mag = 0.5
    trunc_norm_init_std = 0.5
    pointer_gen = True
    is_coverage = True
    lr = 0.15
    lr_coverage = 0.15
    adagrad_init_acc = 0.1
    cov_loss_wt = 1.0
    max_grad_norm = 2.0
    max_dec_steps = 4
    eps = 1e-12


class _SummaryBatch:
    """What the data pipeline's ``Batch`` hands ``train_one_batch``: articles as in-vocabulary
    ids (out-of-vocabulary words as UNK, 0) and as extended ids (the article's OOVs numbered
    from the vocabulary's size), lengths in descending order, padding 1."""

    def __init__(self, rng, enc_lens, dec_lens, vocab_size=12, oovs=2):
        batch_size, t_k, t_d = len(enc_lens), max(enc_lens), max(dec_lens)
        extended = rng.integers(2, vocab_size + oovs, (batch_size, t_k))
        positions = np.arange(t_k)[None, :] < np.array(enc_lens)[:, None]
        self.enc_batch_extend_vocab = np.where(positions, extended, 1).astype(np.int64)
        self.enc_batch = np.where(extended >= vocab_size, 0, self.enc_batch_extend_vocab)
        self.enc_padding_mask = positions.astype(np.float32)
        self.enc_lens = np.array(enc_lens, dtype=np.int32)
        self.max_art_oovs = oovs
        decoded = rng.integers(2, vocab_size + oovs, (batch_size, t_d + 1))
        steps = np.arange(t_d)[None, :] < np.array(dec_lens)[:, None]
        self.dec_batch = np.where(steps, np.where(decoded >= vocab_size, 0, decoded)[:, :-1], 1)
        self.target_batch = np.where(steps, decoded[:, 1:], 1)
        self.dec_padding_mask = steps.astype(np.float32)
        self.dec_lens = np.array(dec_lens, dtype=np.int32)


@pytest.mark.filterwarnings("ignore:optimizer contains a parameter group with duplicate")
def test_pointer_generator_with_coverage_trains_as_torch(capsys):
    rng = np.random.default_rng(6803)
    batches = [_SummaryBatch(rng, [5, 4, 2], [4, 2, 3])]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            POINTER_GENERATOR_SOURCE
            if lib is torch
            else ported_imports(port(POINTER_GENERATOR_SOURCE, POINTER_GENERATOR_STEPS))
        )
        names = run_source(
            text, lib, record=record, initialize=initialize, cfg=_PointerGeneratorConfig()
        )
        names["Summarizer"]().train(1, batches)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "step 1: loss" in logs[0]
    # One step: the shared embedding is in the optimizer's list twice (the encoder's and the
    # decoder's parameters); torch warns and steps it twice, retrograd once (a tied parameter
    # is one parameter), so the tables part after the first step. The gradients (the norm),
    # the loss and every other parameter's Adagrad step agree.
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6, skip=("embedding.weight",))
