# ruff: noqa: E501  (the embedded programs and the port steps replacing their import lines run past 100 columns)
"""Programs written here in the style of eight research repositories, each run under torch and,
ported, under retrograd from the same weights and draws (the harness: ``tests/real_ports.py``;
continued from ``tests/test_real_ports_65.py``):

- deep embedded clustering in the style of vlukiyanov/pt-dec, over a small encoder: a
  Student's t soft assignment of ``(z.unsqueeze(1) - self.cluster_centers) ** 2`` raised by
  ``kernel ** power``, the centres written through
  ``model.state_dict()["assignment.cluster_centers"].copy_(...)`` under ``torch.no_grad()``
  from a k-means fit of the detached features, ``nn.KLDivLoss(size_average=False)`` of
  ``q.log()`` against the sharpened target, ``optimizer.step(closure=None)``,
  ``default_collate`` given as a ``collate_fn``, batches of ``(features, label)`` lists,
  ``torch.cat(labels).long()``, ``torch.cat(assignments).max(1)[1]`` and the share of changed
  labels ``(current != previous).float().sum().item()``, scored by a Hungarian matching.
- a DeepAR-style Gaussian LSTM in the style of zhykoties/TimeSeries, small: the forget-gate
  biases opened through ``self.lstm._all_weights`` and ``getattr(self.lstm, name)``'s
  ``b.data[quarter:2 * quarter].fill_(1.)``, ``torch.cat((step, embedded), dim=2)``,
  ``h.permute(1, 2, 0).contiguous().view(...)``, ``nn.Softplus``,
  ``torch.distributions.normal.Normal`` over the observed targets only (``mu[observed]``),
  gaps in the history filled from the model's own mean by ``inputs[t, gaps, 0] = mu[gaps]``,
  ``inputs[t].unsqueeze_(0).clone()``, ``loss += ...`` onto ``torch.zeros(1)`` and the
  one-element loss's ``backward()``, then a rolling forecast writing ``x[start + t + 1, :, 0]
  = mu`` into the window under ``torch.no_grad()``.
- an end-to-end memory network in the style of nmhkahn/MemN2N-pytorch, small: embedding
  tables registered by ``add_module("T{}".format(k), table)`` and reached through an index
  proxy's ``__getitem__``, ``torch.autograd.Variable(torch.FloatTensor(...), requires_grad=False)``,
  ``shape + (flat.size(-1),)`` as a view shape, ``expand_as``, ``nn.Softmax()`` without
  ``dim``, ``state[-1] @ self.T[k].weight.transpose(0, 1)``,
  ``nn.CrossEntropyLoss(size_average=False)``, the deprecated ``nn.utils.clip_grad_norm`` of
  ``filter(lambda p: p.grad is not None, ...)`` and ``p.grad.data.add_(noise)`` (ported on
  the gradients ``backward()`` returned), the rate decayed through ``param_groups``.
- a DeepFM click model in the style of chenxijun1029/DeepFM_with_PyTorch, small:
  ``nn.ModuleList`` of ``nn.Embedding`` tables, ``(torch.sum(table(index[:, i, :]), 1).t() *
  value[:, i]).t()``, Python's ``sum`` of tensors, layers made by ``setattr`` and reached by
  ``getattr``, ``nn.BatchNorm1d``, ``self.bias = torch.nn.Parameter(torch.randn(1))``, int32
  arrays from ``torch.from_numpy`` cast by ``.to(device=..., dtype=...)`` (bool labels too), a
  ``sampler.SubsetRandomSampler(range(n))``, ``F.binary_cross_entropy_with_logits``,
  ``F.sigmoid``, ``'%d' % hits`` of a 0-d tensor.
- a hierarchical attention network in the style of
  uvipen/Hierarchical-attention-networks-pytorch, small: ``nn.Embedding(...).from_pretrained
  (table)`` called on an instance with a float64 table (frozen, so ``filter(lambda p:
  p.requires_grad, ...)`` leaves it out), ``nn.Parameter(torch.Tensor(n, m))`` filled by
  ``.data.normal_``, ``isinstance(bias, torch.nn.parameter.Parameter)``, bidirectional
  ``nn.GRU`` layers whose states are kept on the module from one sentence to the next,
  ``F.softmax`` without ``dim``, iterating a permuted batch, ``.squeeze()`` of the stacked
  steps, a ``DataLoader(shuffle=True, drop_last=True)`` over numpy documents, the loss
  formatted by ``"{:.4f}".format(loss)`` of a 0-d tensor, scikit-learn's ``accuracy_score``.
- a character-aware language model in the style of FengZiYjun/CharLM, small and without
  dropout: convolutions kept in a plain Python list (so neither registered nor trained),
  ``torch.transpose(x.view(n, 1, w, -1), 2, 3)``, ``torch.max(F.tanh(conv(x)), 3)[0].squeeze()``,
  ``nn.BatchNorm1d(..., affine=False)``, highway layers of ``torch.mul``, the LSTM's state
  detached as a list (``[s.detach() for s in state]``) and passed back as one,
  ``torch.exp(loss.data)``, generators' ``__next__()``, a fresh ``optim.SGD`` each epoch at a
  halved rate, the deprecated ``clip_grad_norm(..., norm_type=2)``.
- Bayes by Backprop in the style of nitarshan/bayes-by-backprop, small:
  ``torch.distributions.Normal(0, 1).sample(self.rho.size())`` (one seeded stream in both
  runs), a scale-mixture prior of ``Normal(0, sigma)`` with ``sigma`` a one-element
  ``torch.FloatTensor``, ``nn.Parameter(torch.Tensor(o, i).uniform_(-5, -4))``, samples written
  into ``torch.zeros`` by ``outputs[i] = self(...)`` and ``log_priors[i], log_posts[i] = ...``
  in the graph, ``F.nll_loss(..., size_average=False)``, the ensemble's ``hits +=
  guesses.eq(...).sum(dim=1).squeeze().cpu().numpy()`` into a NumPy array.
- a recurrent attention model in the style of kevinzakka/recurrent-visual-attention, small:
  glimpses cut by slices whose bounds are 0-d int64 tensors (``padded[i, :, corner[i, 1] :
  corner[i, 1] + side, ...]`` after ``F.pad``), ``F.avg_pool2d`` of the wider crops, the next
  location drawn by ``torch.distributions.Normal(mu, std).rsample()`` (one seeded noise stream
  in both runs) and scored by ``Normal(mu, std).log_prob``, a state made by ``torch.zeros(...,
  requires_grad=True)`` and a location by ``torch.FloatTensor(n, 2).uniform_(-1, 1)`` with
  ``loc.requires_grad = True``, REINFORCE with a learned baseline over
  ``torch.stack(...).transpose(1, 0)``, the hybrid loss of ``nll_loss``, ``mse_loss`` and the
  policy term.

Two regressions are guarded on their own: ``optimizer.step(closure=None)`` (a closure given by
keyword), and the in-place view ops (``unsqueeze_`` and kin) keeping a view of what they view.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


class SharedPermutations:
    """``torch.randperm`` of a library drawing from one seeded stream (the samplers' order)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, dtype=None, device=None, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=dtype or lib.int64)

        # torch's samplers call ``torch.randperm``; retrograd's, the name they imported
        self.modules = [lib] + ([lib.utils.data.sampler] if lib is rg else [])
        self.saved = [module.randperm for module in self.modules]
        for module in self.modules:
            module.randperm = randperm
        return self

    def __exit__(self, *exc):
        for module, saved in zip(self.modules, self.saved):
            module.randperm = saved
        return False


class TinyKMeans:
    """A deterministic stand-in for scikit-learn's ``KMeans`` (Lloyd's iterations from the
    first points): the same centres in both runs."""

    def __init__(self, n_clusters, n_init=20):
        self.n_clusters = n_clusters

    def fit_predict(self, features):
        centers = features[: self.n_clusters].astype(np.float64)
        for _ in range(10):
            labels = ((features[:, None, :] - centers[None]) ** 2).sum(-1).argmin(1)
            centers = np.stack(
                [
                    features[labels == k].mean(0) if (labels == k).any() else centers[k]
                    for k in range(self.n_clusters)
                ]
            )
        self.cluster_centers_ = centers
        return labels


DEC_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data.dataloader import DataLoader, default_collate as collate


class SoftAssignment(nn.Module):
    # q_ij: a Student's t kernel between embedded point i and centroid j
    def __init__(self, n_clusters, dim, dof=1.0):
        super().__init__()
        self.dof = dof
        start = torch.zeros(n_clusters, dim, dtype=torch.float)
        nn.init.xavier_uniform_(start)
        self.cluster_centers = nn.Parameter(start)

    def forward(self, z):
        sq_dist = torch.sum((z.unsqueeze(1) - self.cluster_centers) ** 2, 2)
        kernel = 1.0 / (1.0 + sq_dist / self.dof)
        power = (self.dof + 1.0) / 2.0
        kernel = kernel ** power
        return kernel / torch.sum(kernel, dim=1, keepdim=True)


class Clusterer(nn.Module):
    def __init__(self, encoder, n_clusters, dim):
        super().__init__()
        self.encoder = encoder
        self.n_clusters = n_clusters
        self.assignment = SoftAssignment(n_clusters, dim)

    def forward(self, x):
        return self.assignment(self.encoder(x))


def sharpen(q):
    # p_ij proportional to q_ij^2 / f_j, with f_j the soft cluster frequency
    p = q ** 2 / torch.sum(q, 0)
    return (p.t() / torch.sum(p, 1)).t()


def matched_accuracy(truth, guess, k):
    counts = np.zeros((k, k), dtype=np.int64)
    for g, t in zip(guess, truth):
        counts[g, t] += 1
    rows, cols = linear_sum_assignment(-counts)
    return counts[rows, cols].sum() / len(guess)


def assign(model, data):
    model.eval()
    assignments, labels = [], []
    for batch in DataLoader(data, batch_size=64, collate_fn=collate, shuffle=False):
        x, y = batch  # default_collate gives a list [inputs, labels]
        assignments.append(model(x).detach().cpu())
        labels.append(y)
    return torch.cat(assignments).max(1)[1], torch.cat(labels).long()


def fit(model, data, optimizer, epochs, batch_size):
    features, labels = [], []
    for x, y in DataLoader(data, batch_size=batch_size, collate_fn=collate, shuffle=False):
        features.append(model.encoder(x).detach().cpu())
        labels.append(y)
    truth = torch.cat(labels).long()
    kmeans = KMeans(n_clusters=model.n_clusters, n_init=20)
    first = kmeans.fit_predict(torch.cat(features).numpy())
    previous = torch.tensor(np.copy(first), dtype=torch.long)
    print("k-means acc %.4f" % matched_accuracy(truth.numpy(), first, model.n_clusters))
    found = torch.tensor(kmeans.cluster_centers_, dtype=torch.float, requires_grad=True)
    with torch.no_grad():
        model.state_dict()["assignment.cluster_centers"].copy_(found)
    divergence = nn.KLDivLoss(size_average=False)
    shuffled = DataLoader(data, batch_size=batch_size, collate_fn=collate, shuffle=True)
    for epoch in range(epochs):
        model.train()
        for x, _ in shuffled:
            q = model(x)
            loss = divergence(q.log(), sharpen(q).detach()) / q.shape[0]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step(closure=None)
            record.append(float(loss.item()))
        current, truth = assign(model, data)
        changed = (current != previous).float().sum().item() / previous.shape[0]
        previous = current
        acc = matched_accuracy(truth.numpy(), current.numpy(), model.n_clusters)
        print("epoch", epoch, "acc %.4f" % acc, "changed %.4f" % changed)


def main(points, classes):
    data = [(torch.from_numpy(x), int(c)) for x, c in zip(points, classes)]
    encoder = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))  # a 3-d embedding
    model = Clusterer(encoder, n_clusters=3, dim=3)
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    fit(model, data, optimizer, epochs=2, batch_size=4)
    record.append(assign(model, data)[0].numpy().tolist())
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

DEC_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data.dataloader import DataLoader, default_collate as collate\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.utils.data.dataloader import DataLoader, default_collate as collate\n",
    ),
    (
        "            loss.backward()\n            optimizer.step(closure=None)\n",
        "            grads = loss.backward()\n            optimizer.step(grads, closure=None)\n",
    ),
]


def test_deep_embedded_clustering_trains_as_torch(capsys):
    rng = np.random.default_rng(6601)
    means = np.array([[2, 0, 0, 1, 0, 0], [0, 2, 0, 0, 1, 0], [0, 0, 2, 0, 0, 1]])
    labels = np.repeat(np.arange(3), 4)
    points = (means[labels] + 0.3 * rng.standard_normal((12, 6))).astype(np.float32)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEC_SOURCE if lib is torch else port(DEC_SOURCE, DEC_STEPS)
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            KMeans=TinyKMeans,
            linear_sum_assignment=linear_sum_assignment,
        )
        with SharedPermutations(lib, 6601):
            names["main"](points, labels)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "epoch 1 acc" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


DEEPAR_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader, RandomSampler


class GaussianLSTM(nn.Module):
    # an autoregressive LSTM that emits a Gaussian (mean, softplus scale) per step
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.series_embed = nn.Embedding(cfg.num_class, cfg.embedding_dim)
        width = 1 + cfg.cov_dim + cfg.embedding_dim
        self.lstm = nn.LSTM(width, cfg.lstm_hidden_dim, num_layers=cfg.lstm_layers, dropout=cfg.lstm_dropout)
        # open the forget gates at the start: the second quarter of each bias vector
        for layer in self.lstm._all_weights:
            for name in [n for n in layer if n.startswith("bias")]:
                b = getattr(self.lstm, name)
                quarter = b.size(0) // 4
                b.data[quarter:2 * quarter].fill_(1.)
        flat = cfg.lstm_hidden_dim * cfg.lstm_layers
        self.mean_head = nn.Linear(flat, 1)
        self.scale_head = nn.Linear(flat, 1)
        self.positive = nn.Softplus()

    def forward(self, step, series, h, c):
        embedded = self.series_embed(series)
        _, (h, c) = self.lstm(torch.cat((step, embedded), dim=2), (h, c))
        # every layer's newest state, side by side per series
        states = h.permute(1, 2, 0).contiguous().view(h.shape[1], -1)
        mu = self.mean_head(states)
        sigma = self.positive(self.scale_head(states))
        return torch.squeeze(mu), torch.squeeze(sigma), h, c

    def zero_state(self, n):
        return torch.zeros(self.cfg.lstm_layers, n, self.cfg.lstm_hidden_dim, device=self.cfg.device)

    def roll_forward(self, x, scale, series, h, c):
        cfg = self.cfg
        n = x.shape[1]
        means = torch.zeros(n, cfg.predict_steps)
        spreads = torch.zeros(n, cfg.predict_steps)
        for t in range(cfg.predict_steps):
            mu, sigma, h, c = self(x[cfg.predict_start + t].unsqueeze(0), series, h, c)
            means[:, t] = mu * scale[:, 0] + scale[:, 1]
            spreads[:, t] = sigma * scale[:, 0]
            if t + 1 < cfg.predict_steps:
                x[cfg.predict_start + t + 1, :, 0] = mu
        return means, spreads


def gaussian_nll(mu: torch.Tensor, sigma: torch.Tensor, z: torch.Tensor):
    observed = (z != 0)  # a zero target is a missing one
    dist = torch.distributions.normal.Normal(mu[observed], sigma[observed])
    return -torch.mean(dist.log_prob(z[observed]))


def train_epoch(model, optimizer, loader, cfg):
    model.train()
    per_batch = np.zeros(len(loader))
    for b, (inputs, series, targets) in enumerate(loader):
        optimizer.zero_grad()
        n = inputs.shape[0]
        inputs = inputs.permute(1, 0, 2).to(torch.float32)  # time first
        targets = targets.permute(1, 0).to(torch.float32)
        series = series.unsqueeze(0)
        h, c = model.zero_state(n), model.zero_state(n)
        loss = torch.zeros(1)
        for t in range(cfg.train_window):
            gaps = (inputs[t, :, 0] == 0)
            if t > 0 and torch.sum(gaps) > 0:
                inputs[t, gaps, 0] = mu[gaps]  # feed the last step's mean into the gap
            mu, sigma, h, c = model(inputs[t].unsqueeze_(0).clone(), series, h, c)
            loss += gaussian_nll(mu, sigma, targets[t])
        loss.backward()
        optimizer.step()
        per_batch[b] = loss.item() / cfg.train_window
        record.append(per_batch[b])
    return per_batch


def evaluate(model, loader, cfg):
    model.eval()
    with torch.no_grad():
        for inputs, series, scale, targets in loader:
            inputs = inputs.permute(1, 0, 2).to(torch.float32)
            series = series.unsqueeze(0)
            scale = scale.to(torch.float32)
            n = inputs.shape[1]
            fitted = torch.zeros(n, cfg.test_predict_start)
            h, c = model.zero_state(n), model.zero_state(n)
            for t in range(cfg.test_predict_start):
                gaps = (inputs[t, :, 0] == 0)
                if t > 0 and torch.sum(gaps) > 0:
                    inputs[t, gaps, 0] = mu[gaps]
                mu, sigma, h, c = model(inputs[t].unsqueeze(0), series, h, c)
                fitted[:, t] = scale[:, 0] * mu + scale[:, 1]
            means, spreads = model.roll_forward(inputs, scale, series, h, c)
            for out in (fitted, means, spreads):
                record.append(out.numpy().copy())


class Windows(Dataset):
    # (history with covariates, series id[, scale], targets); the id is the last column
    def __init__(self, windows, targets, scale=None):
        self.windows, self.targets, self.scale = windows, targets, scale

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, i):
        item = (self.windows[i, :, :-1], int(self.windows[i, 0, -1]))
        if self.scale is not None:
            item += (self.scale[i],)
        return item + (self.targets[i],)


def main(cfg, train_windows, train_targets, test_windows, test_scale, test_targets):
    train_set = Windows(train_windows, train_targets)
    test_set = Windows(test_windows, test_targets, test_scale)
    train_loader = DataLoader(train_set, batch_size=cfg.batch_size, sampler=RandomSampler(train_set))
    test_loader = DataLoader(test_set, batch_size=cfg.predict_batch, sampler=RandomSampler(test_set))
    model = GaussianLSTM(cfg)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    for epoch in range(cfg.num_epochs):
        per_batch = train_epoch(model, optimizer, train_loader, cfg)
        print('epoch {}: nll per step {:.5f}'.format(epoch, per_batch.mean()))
    evaluate(model, test_loader, cfg)
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

DEEPAR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import Dataset, DataLoader, RandomSampler\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.utils.data import Dataset, DataLoader, RandomSampler\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class _DeepARConfig:
    num_class = 3
    embedding_dim = 2
    cov_dim = 2
    lstm_hidden_dim = 5
    lstm_layers = 2
    lstm_dropout = 0.0
    device = "cpu"
    train_window = 6
    predict_steps = 2
    predict_start = 4
    test_predict_start = 4
    learning_rate = 1e-2
    num_epochs = 2
    batch_size = 5
    predict_batch = 3


def test_deepar_trains_and_forecasts_as_torch(capsys):
    rng = np.random.default_rng(6602)
    series = np.abs(rng.standard_normal((5, 7))).astype(np.float32) + 0.5
    series[1, 3] = 0.0  # missing values, filled from the model's own mean
    series[3, 2] = 0.0
    covariates = rng.standard_normal((5, 6, 2)).astype(np.float32)
    ids = np.array([0, 1, 2, 0, 1], dtype=np.float32)
    # a window's columns: z_{t-1}, the covariates, the series id
    windows = np.concatenate(
        [series[:, :-1, None], covariates, np.broadcast_to(ids[:, None, None], (5, 6, 1))], 2
    )
    targets = series[:, 1:]
    scale = np.array([[1.5, 0.2], [0.8, -0.1], [1.0, 0.0]], dtype=np.float32)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPAR_SOURCE if lib is torch else port(DEEPAR_SOURCE, DEEPAR_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedPermutations(lib, 6602):
            names["main"](_DeepARConfig, windows, targets, windows[:3], scale, targets[:3])
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


MEMN2N_SOURCE = """
import numpy as np
import torch
import torch.nn as nn


def position_weights(words, dim):
    # l_kj = (1 - j/J) - (k/d)(1 - 2j/J) for word j of J and dimension k of d (1-based)
    j = np.arange(1, words + 1)[:, None] / words
    k = np.arange(1, dim + 1)[None, :] / dim
    weights = (1 - j) - k * (1 - 2 * j)
    weights[-1, :] = 1.0  # the time word keeps its embedding as it is
    return weights.astype(np.float32)


class Tables(object):
    # index access to the submodules registered as <prefix><i>
    def __init__(self, owner, prefix):
        self.owner, self.prefix = owner, prefix

    def __getitem__(self, i):
        return getattr(self.owner, "{}{}".format(self.prefix, i))


class MemoryNetwork(nn.Module):
    def __init__(self, vocab, dim, words, hops):
        super(MemoryNetwork, self).__init__()
        self.hops = hops
        # adjacent tying: hop k reads its memories with table k and its outputs with k + 1
        for k in range(hops + 1):
            table = nn.Embedding(vocab, dim, padding_idx=0)
            table.weight.data.normal_(0, 0.1)
            self.add_module("T{}".format(k), table)
        self.T = Tables(self, "T")
        self.attend = nn.Softmax()
        self.pe = torch.autograd.Variable(torch.FloatTensor(position_weights(words, dim)), requires_grad=False)

    def memories(self, table, story):
        shape = story.size()
        flat = table(story.view(shape[0], -1))
        embedded = flat.view(shape + (flat.size(-1),))
        weights = self.pe.unsqueeze(0).unsqueeze(1).expand_as(embedded)
        return torch.sum(embedded * weights, 2)

    def forward(self, story, question):
        asked = self.T[0](question)
        state = [torch.sum(asked * self.pe.unsqueeze(0).expand_as(asked), 1)]
        for k in range(self.hops):
            keys = self.memories(self.T[k], story)
            values = self.memories(self.T[k + 1], story)
            match = torch.sum(keys * state[-1].unsqueeze(1).expand_as(keys), 2)
            p = self.attend(match).unsqueeze(2).expand_as(values)
            state.append(state[-1] + torch.sum(values * p, 1))
        logits = state[-1] @ self.T[self.hops].weight.transpose(0, 1)
        return logits, self.attend(logits)


class Trainer():
    def __init__(self, cfg, batches):
        self.cfg, self.batches = cfg, batches
        self.mem_n2n = MemoryNetwork(cfg.num_vocab, 6, cfg.sentence_size, cfg.max_hops)
        initialize(self.mem_n2n)
        self.criterion = nn.CrossEntropyLoss(size_average=False)
        self.opt = torch.optim.SGD(self.mem_n2n.parameters(), lr=cfg.lr)

    def fit(self):
        cfg = self.cfg
        for epoch in range(cfg.max_epochs):
            for story, question, answer in self.batches:
                story, question, answer = (torch.autograd.Variable(v) for v in (story, question, answer))
                self.opt.zero_grad()
                logits, _ = self.mem_n2n(story, question)
                loss = self.criterion(logits, answer)
                loss.backward()
                self.perturb(self.mem_n2n.parameters())
                self.opt.step()
            lr = cfg.lr * cfg.decay_ratio ** (epoch // cfg.decay_interval)
            for group in self.opt.param_groups:
                group["lr"] = lr
            print("epoch {} loss {:.3f} next lr {:.5f}".format(epoch, loss.item(), lr))
            record.append(loss.item())

    def perturb(self, params, scale=1e-3):
        # clip the gradients' norm, then add Gaussian noise to them
        live = list(filter(lambda p: p.grad is not None, params))
        nn.utils.clip_grad_norm(live, self.cfg.max_clip)
        for p in live:
            p.grad.data.add_(torch.randn(p.size()) * scale)
"""

MEMN2N_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "                loss.backward()\n                self.perturb(self.mem_n2n.parameters())\n                self.opt.step()\n",
        "                grads = loss.backward()\n                self.perturb(grads, self.mem_n2n.parameters())\n                self.opt.step(grads)\n",
    ),
    (
        "    def perturb(self, params, scale=1e-3):\n",
        "    def perturb(self, grads, params, scale=1e-3):\n",
    ),
    (
        "filter(lambda p: p.grad is not None, params)",
        "filter(lambda p: p.grad(grads) is not None, params)",
    ),
    ("nn.utils.clip_grad_norm(live, ", "nn.utils.clip_grad_norm(grads, live, "),
    ("            p.grad.data.add_(", "            p.grad(grads).data.add_("),
]


class _MemN2NConfig:
    num_vocab = 10
    sentence_size = 4
    max_hops = 3
    lr = 0.05
    max_clip = 0.5
    max_epochs = 3
    decay_interval = 2
    decay_ratio = 0.5


def test_end_to_end_memory_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6603)
    stories = rng.integers(0, 9, (2, 3, 5, 4))  # two batches of 3 stories of 5 sentences
    stories[:, :, :, -1] = np.arange(1, 6)  # the time word ends each sentence
    questions = rng.integers(1, 9, (2, 3, 4))
    answers = rng.integers(1, 10, (2, 3))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = MEMN2N_SOURCE if lib is torch else port(MEMN2N_SOURCE, MEMN2N_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        batches = [
            (lib.tensor(s), lib.tensor(q), lib.tensor(a))
            for s, q, a in zip(stories, questions, answers)
        ]
        trainer = names["Trainer"](_MemN2NConfig, batches)
        with SharedDraws(lib, 6603):
            trainer.fit()
        record.append(
            {k: v.detach().numpy().copy() for k, v in trainer.mem_n2n.state_dict().items()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "next lr 0.02500" in logs[0]  # decayed once, after the second epoch
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


DEEPFM_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.optim as optim
from torch.utils.data import Dataset, DataLoader, sampler

N_DENSE = 3  # the first columns are counts; the others are category ids


class ClickLog(Dataset):
    # per row: every field's index (0 for a dense field) and value (1 for a category)
    def __init__(self, rows, clicks, train=True):
        self.rows, self.clicks, self.train = rows, clicks, train

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        index = np.concatenate([np.zeros(N_DENSE, dtype=row.dtype), row[N_DENSE:]])
        value = np.concatenate([row[:N_DENSE], np.ones_like(row[N_DENSE:])])
        index = torch.from_numpy(index.astype(np.int32)).unsqueeze(-1)
        value = torch.from_numpy(value.astype(np.int32))
        return index, value, self.clicks[i]


class FMNet(nn.Module):
    def __init__(self, field_dims, k=4, hidden=(32, 32), use_cuda=False):
        super().__init__()
        self.hidden = list(hidden)
        self.device = torch.device('cuda' if use_cuda and torch.cuda.is_available() else 'cpu')
        self.linear_terms = nn.ModuleList([nn.Embedding(n, 1) for n in field_dims])
        self.factors = nn.ModuleList([nn.Embedding(n, k) for n in field_dims])
        widths = [len(field_dims) * k] + self.hidden
        for i in range(1, len(widths)):
            setattr(self, 'dense_%d' % i, nn.Linear(widths[i - 1], widths[i]))
            setattr(self, 'norm_%d' % i, nn.BatchNorm1d(widths[i]))
        self.offset = torch.nn.Parameter(torch.randn(1))

    def field(self, table, index, value, i):
        # field i's embedding, each row scaled by the field's value
        return (torch.sum(table(index[:, i, :]), 1).t() * value[:, i]).t()

    def forward(self, index, value):
        first = torch.cat([self.field(t, index, value, i) for i, t in enumerate(self.linear_terms)], 1)
        embedded = [self.field(t, index, value, i) for i, t in enumerate(self.factors)]
        total = sum(embedded)
        squares = sum([e * e for e in embedded])
        pairs = 0.5 * (total * total - squares)  # sum over i < j of <v_i, v_j>
        deep = torch.cat(embedded, 1)
        for i in range(1, len(self.hidden) + 1):
            deep = getattr(self, 'norm_%d' % i)(getattr(self, 'dense_%d' % i)(deep))
        return torch.sum(first, 1) + torch.sum(pairs, 1) + torch.sum(deep, 1) + self.offset


def train(model, loader, optimizer, epochs):
    model = model.train().to(device=model.device)
    for epoch in range(epochs):
        for index, value, click in loader:
            index = index.to(device=model.device, dtype=torch.long)
            value = value.to(device=model.device, dtype=torch.float)
            click = click.to(device=model.device, dtype=torch.float)
            loss = F.binary_cross_entropy_with_logits(model(index, value), click)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            record.append(loss.item())


def accuracy(model, loader):
    print('on held-out rows' if loader.dataset.train else 'on test rows')
    model.eval()
    hits, seen = 0, 0
    with torch.no_grad():
        for index, value, click in loader:
            index = index.to(device=model.device, dtype=torch.long)
            value = value.to(device=model.device, dtype=torch.float)
            click = click.to(device=model.device, dtype=torch.bool)
            guess = F.sigmoid(model(index, value)) > 0.5
            hits += (guess == click).sum()
            seen += guess.size(0)
    print('%d of %d correct (%.1f%%)' % (hits, seen, 100.0 * float(hits) / seen))


def main(rows, clicks):
    n_train = 12
    train_loader = DataLoader(ClickLog(rows[:n_train], clicks[:n_train]), batch_size=4,
                              sampler=sampler.SubsetRandomSampler(range(n_train)))
    held_out = DataLoader(ClickLog(rows, clicks), batch_size=4,
                          sampler=sampler.SubsetRandomSampler(range(n_train, len(rows))))
    model = FMNet([1, 1, 1, 5, 4, 6], k=3, hidden=(8, 6))
    initialize(model)
    optimizer = optim.Adam(model.parameters(), weight_decay=0.0, lr=1e-4)
    train(model, train_loader, optimizer, epochs=2)
    accuracy(model, held_out)
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

DEEPFM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\nimport torch.optim as optim\nfrom torch.utils.data import Dataset, DataLoader, sampler\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nfrom retrograd.utils.data import Dataset, DataLoader, sampler\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


def test_deepfm_trains_as_torch(capsys):
    rng = np.random.default_rng(6604)
    count = 20
    dense = rng.integers(0, 4, (count, 3))
    categories = np.stack([rng.integers(0, n, count) for n in (5, 4, 6)], axis=1)
    rows = np.concatenate([dense, categories], axis=1)
    clicks = (categories[:, 0] % 2).astype(np.float64)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPFM_SOURCE if lib is torch else port(DEEPFM_SOURCE, DEEPFM_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedPermutations(lib, 6604):
            names["main"](rows, clicks)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "of 8 correct" in logs[0]
    # the biases before a batch norm (and the first norm's shift, which the second norm
    # removes again) have a true gradient of zero, so Adam's steps on them follow the
    # rounding noise (lr-sized, either sign), and the running means follow those biases
    noisy = (
        "dense_1.bias",
        "norm_1.bias",
        "dense_2.bias",
        "norm_1.running_mean",
        "norm_2.running_mean",
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=noisy)
    for name in noisy:
        np.testing.assert_allclose(records[1][-1][name], records[0][-1][name], atol=2e-3)


def test_optimizer_step_takes_torch_s_closure_keyword():
    """``optimizer.step(closure=None)`` (pt-dec's spelling) was a TypeError; a closure given by
    keyword is evaluated as one given by position."""
    weight = rg.nn.Parameter(rg.tensor([1.0, -2.0]))
    optimizer = rg.optim.SGD([weight], lr=0.5)
    grads = (weight * weight).sum().backward()
    assert optimizer.step(grads, closure=None) is None
    np.testing.assert_allclose(weight.detach().numpy(), [0.0, 0.0])

    def closure():
        loss = ((weight - 1.0) ** 2).sum()
        return loss, loss.backward()

    loss = optimizer.step(closure=closure)
    assert float(loss) == pytest.approx(2.0)
    np.testing.assert_allclose(weight.detach().numpy(), [1.0, 1.0])
    with pytest.raises(rg.InvalidArgumentError, match="both gradients and a closure"):
        optimizer.step(grads, closure=closure)


def test_in_place_view_ops_reshape_a_view_that_still_aliases_its_base_as_torch_s():
    """``train_batch[t].unsqueeze_(0)`` (DeepAR's loop) had no ``unsqueeze_``; the in-place
    view ops keep the tensor a view of what it viewed, as torch's do."""
    for lib in (torch, rg):
        base = lib.zeros(3, 4)
        row = base[1]
        earlier = row[1:3]
        assert row.unsqueeze_(0) is row
        assert tuple(row.shape) == (1, 4)
        row[0, 2] = 5.0  # through the reshaped view, to the base
        earlier[0] = 7.0  # through a view taken before, to both
        assert base.numpy().tolist() == [[0, 0, 0, 0], [0, 7, 5, 0], [0, 0, 0, 0]]
        assert row.numpy().tolist() == [[0, 7, 5, 0]]
        base[1, 0] = 2.0  # a write to the base, seen by the view
        assert row.numpy().tolist() == [[2, 7, 5, 0]]
        grid = lib.arange(6.0).reshape(2, 3)
        grid.t_()
        assert grid.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
        grid.transpose_(0, 1).unsqueeze_(1).squeeze_()
        assert grid.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
        column = lib.ones(1, 3)
        assert tuple(column.squeeze_(dim=0).shape) == (3,)
        assert tuple(column.squeeze_().shape) == (3,)  # no dimension of size 1 left
        assert tuple(lib.ones(1, 3, 1).squeeze_((0, 2)).shape) == (3,)
    # a refused dimension leaves the view as it was, still aliasing its base
    base = rg.zeros(3, 4)
    row = base[2]
    with pytest.raises(rg.ShapeError, match="dimension 5 is out of range"):
        row.unsqueeze_(5)
    base[2, 0] = 1.0
    assert row.numpy().tolist() == [1, 0, 0, 0]
    # in the graph: the gradient reaches what the reshaped tensor was taken from
    weight = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    first = (weight * 2.0)[0]
    first.unsqueeze_(0)
    grads = (first * rg.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    np.testing.assert_allclose(weight.grad(grads).numpy(), [[2, 4, 6], [0, 0, 0]])
    with pytest.raises(rg.AutodiffError, match="unsqueeze_: a leaf tensor that requires grad"):
        weight.unsqueeze_(0)
    assert tuple(weight.shape) == (2, 3)
    with rg.no_grad():
        weight.unsqueeze_(0)
    assert tuple(weight.shape) == (1, 2, 3) and weight.requires_grad and weight.is_leaf


HAN_SOURCE = """
import csv

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import Dataset, DataLoader
from sklearn.metrics import accuracy_score


def project(steps, weight, bias=None):
    # tanh(x W + b) for each step of a (time, batch, features) sequence
    out = []
    for x in steps:
        y = torch.mm(x, weight)
        has_bias = isinstance(bias, torch.nn.parameter.Parameter)
        if has_bias:
            y = y + bias.expand(y.size()[0], bias.size()[1])
        out.append(torch.tanh(y).unsqueeze(0))
    return torch.cat(out, 0).squeeze()


def pool(steps, weights):
    # the steps summed over time, each scaled by its attention weight
    scaled = [(x * a.unsqueeze(1).expand_as(x)).unsqueeze(0) for x, a in zip(steps, weights)]
    return torch.sum(torch.cat(scaled, 0), 0).unsqueeze(0)


class Documents(Dataset):
    # a document as a fixed (sentences, words) grid of ids; 0 pads (and is the unknown word)
    def __init__(self, docs, labels, n_sent=3, n_word=4):
        self.docs, self.labels = docs, labels
        self.n_sent, self.n_word = n_sent, n_word
        self.num_classes = len(set(labels))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        grid = np.full((self.n_sent, self.n_word), -1, dtype=np.int64)
        for s, sentence in enumerate(self.docs[i][:self.n_sent]):
            words = sentence[:self.n_word]
            grid[s, :len(words)] = words
        return grid + 1, self.labels[i]


class AttentiveGRU(nn.Module):
    # a bidirectional GRU whose steps are pooled by attention against a learned context
    def __init__(self, in_size, hidden):
        super().__init__()
        self.gru = nn.GRU(in_size, hidden, bidirectional=True)
        self.W = nn.Parameter(torch.Tensor(2 * hidden, 2 * hidden))
        self.b = nn.Parameter(torch.Tensor(1, 2 * hidden))
        self.context = nn.Parameter(torch.Tensor(2 * hidden, 1))
        self.W.data.normal_(0.0, 0.05)
        self.context.data.normal_(0.0, 0.05)

    def attend(self, x, h0):
        steps, h = self.gru(x, h0)
        scores = project(project(steps, self.W, self.b), self.context).permute(1, 0)
        weights = F.softmax(scores)  # over the steps
        return pool(steps, weights.permute(1, 0)), h


class WordLevel(AttentiveGRU):
    def __init__(self, vectors_path, hidden):
        table = pd.read_csv(filepath_or_buffer=vectors_path, header=None, sep=" ", quoting=csv.QUOTE_NONE).values[:, 1:]
        table = np.concatenate([np.zeros((1, table.shape[1])), table], 0).astype(np.float64)
        super().__init__(table.shape[1], hidden)
        self.lookup = nn.Embedding(table.shape[0], table.shape[1]).from_pretrained(torch.from_numpy(table))

    def forward(self, words, h0):
        return self.attend(self.lookup(words).float(), h0)


class SentenceLevel(AttentiveGRU):
    def __init__(self, in_size, hidden, n_classes):
        super().__init__(in_size, hidden)
        self.out = nn.Linear(2 * hidden, n_classes)

    def forward(self, sentences, h0):
        doc, h = self.attend(sentences, h0)
        return self.out(doc.squeeze(0)), h


class HierarchicalAttention(nn.Module):
    def __init__(self, opt, n_classes):
        super().__init__()
        self.opt = opt
        self.words = WordLevel(opt.word2vec_path, opt.word_hidden_size)
        self.sentences = SentenceLevel(2 * opt.word_hidden_size, opt.sent_hidden_size, n_classes)
        self.reset_state()

    def reset_state(self):
        # the GRUs' states live on the module: each sentence starts from the last one's
        self.word_h = torch.zeros(2, self.opt.batch_size, self.opt.word_hidden_size)
        self.sent_h = torch.zeros(2, self.opt.batch_size, self.opt.sent_hidden_size)

    def forward(self, docs):
        vectors = []
        for sentence in docs.permute(1, 0, 2):
            vector, self.word_h = self.words(sentence.permute(1, 0), self.word_h)
            vectors.append(vector)
        logits, self.sent_h = self.sentences(torch.cat(vectors, 0), self.sent_h)
        return logits


def train(opt, docs, labels):
    data = Documents(docs, labels, opt.max_sent_length, opt.max_word_length)
    batches = DataLoader(data, batch_size=opt.batch_size, shuffle=True, drop_last=True)
    model = HierarchicalAttention(opt, data.num_classes)
    initialize(model)
    loss_fn = nn.CrossEntropyLoss()
    trainable = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = torch.optim.SGD(trainable, lr=opt.lr, momentum=opt.momentum)
    model.train()
    for epoch in range(opt.epochs):
        for step, (doc, label) in enumerate(batches):
            optimizer.zero_grad()
            model.reset_state()
            logits = model(doc)
            loss = loss_fn(logits, label)
            loss.backward()
            optimizer.step()
            acc = accuracy_score(label.numpy(), np.argmax(logits.detach().numpy(), -1))
            print("epoch {} step {}: loss {:.4f}, accuracy {}".format(epoch + 1, step + 1, loss, acc))
            record.append(loss.item())
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

HAN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\nfrom torch.utils.data import Dataset, DataLoader\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.utils.data import Dataset, DataLoader\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


class _Word2VecTable:
    """``pd.read_csv(...)`` of a GloVe text file, as the program reads it: ``.values`` is the
    word column then the vector."""

    def __init__(self, vectors):
        self.vectors = vectors

    def read_csv(self, filepath_or_buffer, header, sep, quoting):
        words = np.array([[f"w{i}"] for i in range(len(self.vectors))], dtype=object)
        return type("Frame", (), {"values": np.concatenate([words, self.vectors], 1)})()


class _HANOptions:
    batch_size = 2
    max_sent_length = 3
    max_word_length = 4
    word_hidden_size = 4
    sent_hidden_size = 3
    word2vec_path = "glove.6B.50d.txt"
    lr = 0.1
    momentum = 0.9
    epochs = 2


def test_hierarchical_attention_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6605)
    vectors = rng.standard_normal((7, 5))
    # documents of sentences of word ids, of any length (the dataset pads and cuts them)
    texts = [
        [[0, 1, 2], [3, 4, 5, 6]],
        [[6, 5], [4, 3, 2], [1, 0, 0, 2]],
        [[2, 2, 3, 1, 5]],
        [[1], [2, 3], [4, 5, 6]],
        [[0, 6, 1], [5, 2]],
        [[3, 3, 4], [1, 2, 6], [0]],
    ]
    labels = [0, 1, 2, 0, 1, 2]
    records, logs = [], []
    from test_real_ports_65 import defined_initializer

    initialize = defined_initializer(6605)  # the biases are torch.Tensor's uninitialised memory
    for lib in (torch, rg):
        record = []
        text = HAN_SOURCE if lib is torch else port(HAN_SOURCE, HAN_STEPS)
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            pd=_Word2VecTable(vectors),
        )
        with SharedPermutations(lib, 6605):
            names["train"](_HANOptions, texts, labels)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0].count(": loss ") == 6
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


CHAR_LM_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.optim as optim


class Highway(nn.Module):
    def __init__(self, size):
        nn.Module.__init__(self)
        self.gate = nn.Linear(size, size)
        self.transform = nn.Linear(size, size)

    def forward(self, x):
        g = F.sigmoid(self.gate(x))
        return torch.mul(g, F.relu(self.transform(x))) + torch.mul(1 - g, x)


class CharCNNLM(nn.Module):
    # words spelled as characters -> max-over-time CNN features -> highways -> word LSTM
    def __init__(self, char_dim, hidden, vocab, n_chars, filters=((2, 1), (3, 2), (4, 3))):
        super(CharCNNLM, self).__init__()
        self.embed = nn.Embedding(n_chars, char_dim)
        # a plain list: the module never registers these convolutions, nor trains them
        self.filters = [nn.Conv2d(1, n, kernel_size=(char_dim, w)) for n, w in filters]
        width = sum(n for n, _ in filters)
        self.norm = nn.BatchNorm1d(width, affine=False)
        self.highways = nn.Sequential(Highway(width), Highway(width))
        self.lstm = nn.LSTM(width, hidden, num_layers=2, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, chars, state):
        seqs, steps, letters = chars.size()
        x = self.embed(chars.contiguous().view(-1, letters))
        x = torch.transpose(x.view(x.size(0), 1, letters, -1), 2, 3)
        pooled = [torch.max(F.tanh(conv(x)), 3)[0].squeeze() for conv in self.filters]
        x = self.highways(self.norm(torch.cat(pooled, 1)))
        x, state = self.lstm(x.contiguous().view(seqs, steps, -1), state)
        return self.decoder(x.contiguous().view(seqs * steps, -1)), state


def chunks(x, size):
    for start in range(0, x.size()[0] - size + 1, size):
        yield x[start:start + size]


def train(net, data, opt):
    torch.manual_seed(1024)
    loss_fn = nn.CrossEntropyLoss()
    lr, last_ppl = opt.init_lr, float("inf")
    zeros = torch.zeros(2, opt.lstm_batch_size, opt.word_embed_dim)
    state = (torch.autograd.Variable(zeros), torch.autograd.Variable(zeros.clone()))
    words_per_batch = opt.lstm_batch_size * opt.lstm_seq_len
    for epoch in range(opt.epochs):
        net.eval()
        inputs = chunks(data.valid_input, opt.lstm_batch_size)
        targets = chunks(data.valid_label, words_per_batch)
        ppls = []
        for _ in range(data.valid_input.size()[0] // opt.lstm_batch_size):
            state = [s.detach() for s in state]
            out, state = net(inputs.__next__(), state)
            loss = loss_fn(out, targets.__next__())
            ppls.append(float(torch.exp(loss.data)))
        ppl = np.mean(ppls)
        print("epoch {}: validation perplexity {}".format(epoch, round(ppl, 3)))
        record.append(ppl)
        if last_ppl - ppl <= 1.0:
            lr /= 2
            print("lr halved to {}".format(lr))
        last_ppl = ppl
        net.train()
        optimizer = optim.SGD(net.parameters(), lr=lr, momentum=0.85)
        inputs = chunks(data.train_input, opt.lstm_batch_size)
        targets = chunks(data.train_label, words_per_batch)
        for _ in range(data.train_input.size()[0] // opt.lstm_batch_size):
            state = [s.detach() for s in state]
            out, state = net(inputs.__next__(), state)
            loss = loss_fn(out, targets.__next__())
            net.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm(net.parameters(), 5, norm_type=2)
            optimizer.step()
            record.append(loss.item())
"""

CHAR_LM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "            loss.backward()\n            nn.utils.clip_grad_norm(net.parameters(), 5, norm_type=2)\n            optimizer.step()\n",
        "            grads = loss.backward()\n            nn.utils.clip_grad_norm(grads, net.parameters(), 5, norm_type=2)\n            optimizer.step(grads)\n",
    ),
]


class _CharLMOptions:
    word_embed_dim = 5
    lstm_seq_len = 3
    lstm_batch_size = 2
    epochs = 2
    init_lr = 0.5


def test_character_aware_language_model_with_highway_layers_trains_as_torch(capsys):
    rng = np.random.default_rng(6606)
    max_word_len = 6  # with the start and end characters
    words = rng.integers(0, 9, (8, 3, max_word_len))  # 8 sequences of 3 words of characters
    labels = rng.integers(0, 7, 8 * 3)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = CHAR_LM_SOURCE if lib is torch else port(CHAR_LM_SOURCE, CHAR_LM_STEPS)
        names = run_source(text, lib, record=record)
        net = names["CharCNNLM"](4, _CharLMOptions.word_embed_dim, 7, 9)
        initialize(net)
        for conv in net.filters:  # a plain list: not the model's, trained by no one
            initialize(conv)
        data = type(
            "Data",
            (),
            {
                "train_input": lib.tensor(words[:4]),
                "train_label": lib.tensor(labels[:12]),
                "valid_input": lib.tensor(words[4:]),
                "valid_label": lib.tensor(labels[12:]),
            },
        )
        names["train"](net, data, _CharLMOptions)
        record.append(
            {key: value.detach().numpy().copy() for key, value in net.state_dict().items()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "lr halved" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


BAYES_BY_BACKPROP_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.optim as optim

BATCH, CLASSES, N_BATCHES = 4, 3, 2
TRAIN_DRAWS, TEST_DRAWS = 2, 3
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Posterior(object):
    # a diagonal Gaussian over a weight tensor, sigma = softplus(rho)
    def __init__(self, mu, rho):
        self.mu, self.rho = mu, rho
        self.eps = torch.distributions.Normal(0, 1)

    def sigma(self):
        return torch.log1p(torch.exp(self.rho))  # softplus

    def draw(self):
        return self.mu + self.sigma() * self.eps.sample(self.rho.size())

    def log_density(self, w):
        s = self.sigma()
        return (-HALF_LOG_2PI - torch.log(s) - (w - self.mu) ** 2 / (2 * s ** 2)).sum()


class MixturePrior(object):
    # pi N(0, wide^2) + (1 - pi) N(0, narrow^2), per weight
    def __init__(self, pi, wide, narrow):
        self.pi = pi
        self.wide = torch.distributions.Normal(0, wide)
        self.narrow = torch.distributions.Normal(0, narrow)

    def log_density(self, w):
        density = self.pi * torch.exp(self.wide.log_prob(w)) + (1 - self.pi) * torch.exp(self.narrow.log_prob(w))
        return torch.log(density).sum()


PRIOR = MixturePrior(0.25, torch.FloatTensor([math.exp(-1)]), torch.FloatTensor([math.exp(-6)]))


class BayesLinear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.w_mu = nn.Parameter(torch.Tensor(n_out, n_in).uniform_(-0.2, 0.2))
        self.w_rho = nn.Parameter(torch.Tensor(n_out, n_in).uniform_(-5, -4))
        self.b_mu = nn.Parameter(torch.Tensor(n_out).uniform_(-0.2, 0.2))
        self.b_rho = nn.Parameter(torch.Tensor(n_out).uniform_(-5, -4))
        self.w_post = Posterior(self.w_mu, self.w_rho)
        self.b_post = Posterior(self.b_mu, self.b_rho)
        self.log_terms = (0, 0)

    def forward(self, x, draw=False):
        if self.training or draw:
            w, b = self.w_post.draw(), self.b_post.draw()
        else:
            w, b = self.w_mu, self.b_mu
        if self.training:
            prior = PRIOR.log_density(w) + PRIOR.log_density(b)
            posterior = self.w_post.log_density(w) + self.b_post.log_density(b)
            self.log_terms = (prior, posterior)
        return F.linear(x, w, b)


class BayesMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([BayesLinear(36, 8), BayesLinear(8, 8), BayesLinear(8, CLASSES)])

    def forward(self, x, draw=False):
        x = x.view(-1, 36)
        for layer in self.layers[:-1]:
            x = F.relu(layer(x, draw))
        return F.log_softmax(self.layers[-1](x, draw), dim=1)

    def log_terms(self):
        prior = sum(layer.log_terms[0] for layer in self.layers)
        posterior = sum(layer.log_terms[1] for layer in self.layers)
        return prior, posterior

    def elbo_loss(self, x, y, draws=TRAIN_DRAWS):
        outputs = torch.zeros(draws, BATCH, CLASSES)
        log_priors = torch.zeros(draws)
        log_posts = torch.zeros(draws)
        for i in range(draws):
            outputs[i] = self(x, draw=True)
            log_priors[i], log_posts[i] = self.log_terms()
        nll = F.nll_loss(outputs.mean(0), y, size_average=False)
        complexity = (log_posts.mean() - log_priors.mean()) / N_BATCHES
        return complexity + nll, complexity, nll


def fit(net, optimizer, batches):
    net.train()
    for x, y in batches:
        net.zero_grad()
        loss, complexity, nll = net.elbo_loss(x, y)
        loss.backward()
        optimizer.step()
        record.append([loss.item(), complexity.item(), nll.item()])


def evaluate(net, batches):
    net.eval()
    hits = np.zeros(TEST_DRAWS + 1, dtype=int)
    ensemble_hits = 0
    with torch.no_grad():
        for x, y in batches:
            outputs = torch.zeros(TEST_DRAWS + 1, BATCH, CLASSES)
            for i in range(TEST_DRAWS):
                outputs[i] = net(x, draw=True)
            outputs[TEST_DRAWS] = net(x)  # the posterior means
            ensemble = outputs.mean(0).max(1, keepdim=True)[1]
            guesses = outputs.max(2, keepdim=True)[1]
            hits += guesses.eq(y.view_as(ensemble)).sum(dim=1).squeeze().cpu().numpy()
            ensemble_hits += ensemble.eq(y.view_as(ensemble)).sum().item()
    n = len(batches.dataset)
    for i, count in enumerate(hits):
        print("{}: {}/{}".format("draw %d" % i if i < TEST_DRAWS else "mean weights", count, n))
    print("ensemble: {}/{}".format(ensemble_hits, n))
    record.append(hits.tolist())


def main(train_batches, test_batches):
    net = BayesMLP()
    initialize(net)
    optimizer = optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(2):
        fit(net, optimizer, train_batches)
    evaluate(net, test_batches)
    record.append({name: t.detach().numpy().copy() for name, t in net.state_dict().items()})
"""

BAYES_BY_BACKPROP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class SharedNormalSample:
    """``Normal.sample(shape)`` of a library's standard normal drawing from one seeded
    stream (Bayes by Backprop's weight noise)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        normal = lib.distributions.Normal
        self.saved = normal.__dict__.get("sample")

        def sample(distribution, sample_shape=()):
            shape = tuple(sample_shape) + tuple(distribution.batch_shape)
            noise = lib.tensor(rng.standard_normal(shape), dtype=lib.float32)
            return distribution.loc + distribution.scale * noise

        normal.sample = sample
        return self

    def __exit__(self, *exc):
        normal = self.lib.distributions.Normal
        if self.saved is None:
            del normal.sample
        else:
            normal.sample = self.saved
        return False


def test_bayes_by_backprop_trains_as_torch(capsys):
    rng = np.random.default_rng(6607)
    images = rng.uniform(size=(3, 4, 1, 6, 6)).astype(np.float32)
    targets = rng.integers(0, 3, (3, 4))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            BAYES_BY_BACKPROP_SOURCE
            if lib is torch
            else port(BAYES_BY_BACKPROP_SOURCE, BAYES_BY_BACKPROP_STEPS)
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        batches = [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, targets)]
        test_batches = type("Loader", (list,), {"dataset": range(4)})(batches[2:])
        with SharedNormalSample(lib, 6607):
            names["main"](batches[:2], test_batches)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "ensemble: " in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


RAM_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.distributions as D


def glimpse(images, where, size, scales, factor):
    # `scales` square crops centred on `where` (in [-1, 1]), each `factor` times wider than
    # the last, pooled down to size x size and flattened together
    n, _, height, _ = images.shape
    corner = (0.5 * (where + 1.0) * height).long()
    crops = []
    for s in range(scales):
        side = size * factor ** s
        padded = F.pad(images, (side // 2,) * 4)
        crop = torch.stack([
            padded[i, :, corner[i, 1]:corner[i, 1] + side, corner[i, 0]:corner[i, 0] + side]
            for i in range(n)
        ])
        if s > 0:
            crop = F.avg_pool2d(crop, side // size)
        crops.append(crop)
    return torch.cat(crops, 1).view(n, -1)


class Sensor(nn.Module):
    # "what" (the glimpse) and "where" (the location) embedded and mixed
    def __init__(self, size, scales, factor, channels, what, where):
        super().__init__()
        self.size, self.scales, self.factor = size, scales, factor
        self.what = nn.Linear(scales * size * size * channels, what)
        self.where = nn.Linear(2, where)
        self.mix_what = nn.Linear(what, what + where)
        self.mix_where = nn.Linear(where, what + where)

    def forward(self, images, loc):
        seen = F.relu(self.what(glimpse(images, loc, self.size, self.scales, self.factor)))
        place = F.relu(self.where(loc.view(loc.size(0), -1)))
        return F.relu(self.mix_what(seen) + self.mix_where(place))


class Agent(nn.Module):
    def __init__(self, cfg, n_classes):
        super().__init__()
        hidden = cfg.hidden_size
        self.std = cfg.std
        self.sensor = Sensor(cfg.patch_size, cfg.num_patches, cfg.glimpse_scale, 1, cfg.glimpse_hidden, cfg.loc_hidden)
        self.core_in = nn.Linear(hidden, hidden)
        self.core_rec = nn.Linear(hidden, hidden)
        self.policy_hidden = nn.Linear(hidden, hidden // 2)
        self.policy_mean = nn.Linear(hidden // 2, 2)
        self.critic = nn.Linear(hidden, 1)
        self.classify = nn.Linear(hidden, n_classes)

    def step(self, images, loc, h):
        h = F.relu(self.core_in(self.sensor(images, loc)) + self.core_rec(h))
        # the policy and the baseline see the state, but do not train the core
        mu = torch.tanh(self.policy_mean(F.relu(self.policy_hidden(h.detach()))))
        nxt = torch.distributions.Normal(mu, self.std).rsample().detach()
        log_pi = D.Normal(mu, self.std).log_prob(nxt).sum(dim=1)
        baseline = self.critic(h.detach()).squeeze()
        return h, torch.clamp(nxt, -1, 1), baseline, log_pi


class Trainer:
    def __init__(self, cfg, batches):
        self.cfg, self.batches = cfg, batches
        self.model = Agent(cfg, n_classes=3)
        initialize(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.init_lr)

    def start(self, n):
        h = torch.zeros(n, self.cfg.hidden_size, dtype=torch.float, requires_grad=True)
        loc = torch.FloatTensor(n, 2).uniform_(-1, 1)
        loc.requires_grad = True
        return h, loc

    def epoch(self, number):
        self.model.train()
        T = self.cfg.num_glimpses
        for b, (x, y) in enumerate(self.batches):
            self.optimizer.zero_grad()
            h, loc = self.start(x.shape[0])
            path, log_pis, baselines = [], [], []
            for t in range(T):
                h, loc, baseline, log_pi = self.model.step(x, loc, h)
                path.append(loc)
                log_pis.append(log_pi)
                baselines.append(baseline)
            log_probs = F.log_softmax(self.model.classify(h), dim=1)
            baselines = torch.stack(baselines).transpose(1, 0)  # (batch, T)
            log_pis = torch.stack(log_pis).transpose(1, 0)
            guess = torch.max(log_probs, 1)[1]
            reward = (guess.detach() == y).float().unsqueeze(1).repeat(1, T)
            advantage = reward - baselines.detach()
            reinforce = torch.mean(torch.sum(-log_pis * advantage, dim=1), dim=0)
            loss = F.nll_loss(log_probs, y) + F.mse_loss(baselines, reward) + 0.01 * reinforce
            loss.backward()
            self.optimizer.step()
            acc = 100 * ((guess == y).float().sum() / len(y))
            print("epoch {} batch {}: loss {:.3f}, acc {:.1f}".format(number, b, loss.item(), acc.item()))
            record.append([loss.item(), reinforce.item()])
            record.append(torch.stack(path).numpy().copy())
"""

RAM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\nimport torch.distributions as D\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.distributions as D\n",
    ),
    (
        "            loss.backward()\n            self.optimizer.step()\n",
        "            grads = loss.backward()\n            self.optimizer.step(grads)\n",
    ),
]


class SharedNormalRsample:
    """``Normal.rsample()`` of a library drawing its noise from one seeded stream."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        normal = lib.distributions.Normal
        self.saved = normal.__dict__.get("rsample")

        def rsample(distribution, sample_shape=()):
            shape = tuple(sample_shape) + tuple(distribution.batch_shape)
            noise = lib.tensor(rng.standard_normal(shape), dtype=lib.float32)
            return distribution.loc + distribution.scale * noise

        normal.rsample = rsample
        return self

    def __exit__(self, *exc):
        normal = self.lib.distributions.Normal
        if self.saved is None:
            del normal.rsample
        else:
            normal.rsample = self.saved
        return False


class _RAMConfig:
    patch_size = 2
    glimpse_scale = 2
    num_patches = 2
    loc_hidden = 6
    glimpse_hidden = 6
    num_glimpses = 3
    hidden_size = 12  # glimpse_hidden + loc_hidden
    std = 0.05
    init_lr = 3e-3


def test_recurrent_attention_model_trains_as_torch(capsys):
    from test_real_ports_65 import SharedUniformFill

    rng = np.random.default_rng(6608)
    images = rng.uniform(size=(2, 4, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 3, (2, 4))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = RAM_SOURCE if lib is torch else port(RAM_SOURCE, RAM_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        batches = [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, labels)]
        trainer = names["Trainer"](_RAMConfig, batches)
        with SharedUniformFill(lib, 6608), SharedNormalRsample(lib, 6608):
            for epoch in range(2):
                trainer.epoch(epoch)
        record.append({k: v.detach().numpy().copy() for k, v in trainer.model.state_dict().items()})
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)
