"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_58.py`` (the
harness: ``tests/real_ports.py``):

- a skip-gram word2vec written here in the style of Andras7/word2vec-pytorch: subsampling and a
  negatives table by NumPy draws, a ``Dataset`` reading lines from an open file with a
  ``collate`` of ``torch.LongTensor`` lists, ``DataLoader(collate_fn=...)``,
  ``nn.init.uniform_``/``constant_`` of ``weight.data``, ``torch.bmm(neg, u.unsqueeze(2)).
  squeeze()``, ``torch.clamp(..., max=10, min=-10)``, ``F.logsigmoid``, ``optim.SparseAdam``
  with ``CosineAnnealingLR`` stepped before the optimizer, and the embeddings written to a text
  file and read back. ``sparse=True`` is changed to ``False`` in the two embeddings (retrograd
  has no sparse gradients, by design; ``SparseAdam`` steps the dense ones as torch's steps the
  sparse ones).
- forward-forward training written here in the style of pytorch/examples'
  ``mnist_forward_forward`` (random images): an ``nn.Linear`` subclass calling
  ``super().__init__(n_in, n_out, bias, device, dtype)`` and owning its Adam,
  ``Module.train`` overridden with another signature by both classes, layers in a plain list
  (an empty ``state_dict`` saved), ``x[:, :n] *= 0.0``, ``x[range(b), y] = x.max()``,
  ``torch.tensor(others)[torch.randint(n, size=(1,))].item()``, ``self.weight.T``,
  ``sum(goodness)`` of tensors and ``argmax`` predictions.
- a small MobileNetV3 written here in the style of torchvision 0.9's ``mobilenetv3.py`` (a
  dilated last stage), trained a few SGD steps on 32x32 images and evaluated: an
  ``nn.Sequential`` subclass calling ``super(Alias, self).__init__(...)`` through its alias,
  ``act(inplace=True)`` of ``nn.Hardswish``, ``nn.ReLU`` and ``nn.Identity``,
  ``partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)``, squeeze-excitation by
  ``F.adaptive_avg_pool2d(t, 1)`` and ``F.hardsigmoid(..., inplace=True)``, ``out += t``, a
  ``partial`` of a class with a static method, the ``isinstance(..., Sequence)`` check,
  ``nn.Dropout(inplace=True)`` with its ``p`` set to 0 afterwards (its masks are each
  library's own), and the init loop over ``self.modules()``.
- a vision transformer written here in the style of pytorch/examples'
  ``vision_transformer`` (random images, ``argparse`` options): patches by
  ``images.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).contiguous().view`` (a
  backslash-continued chain), ``nn.Parameter(torch.randn(...).to(device))`` class and
  position tokens, ``tokens += pos``, ``nn.MultiheadAttention`` fed ``[batch, tokens, dim]``
  (read as sequence-first by both), ``nn.GELU``, Adam with ``weight_decay``, ``from torch.hub
  import tqdm`` with ``set_postfix``, ``model.train(False)``, and ``torch.save`` of the best
  state dict (the fix below).
- a minGRU language model written here in the style of lucidrains/minGRU-pytorch (random
  tokens): the log-space parallel scan (``cumsum(dim=1)``, ``logcumsumexp(dim=1)``),
  ``torch.where(x >= 0, x + 0.5, x.sigmoid())``, ``-F.softplus(-x)``, the single step by
  ``torch.lerp(h0, h, z)``, ``F.pad(log_a, (0, 0, 1, 0))`` for a continued sequence, a norm by
  ``F.normalize``, a ``ModuleList`` of ``ModuleList``s unpacked in the loop,
  ``F.cross_entropy(logits.transpose(1, 2), labels)``, gradient accumulation over ``(loss /
  k).backward()`` (the gradients added), ``clip_grad_norm_``, Adam, a ``Dataset`` drawing
  ``torch.randint(0, n, (1,))`` slice bounds through an endless ``DataLoader`` generator; the
  parallel scan checked against the sequential steps in both.
- stand-alone self-attention written here in the style of
  leaderj1001/Stand-Alone-Self-Attention, in a small network of an attention stem and two
  attention bottlenecks trained a few SGD steps: ``F.pad(x, [p, p, p, p])`` of a list, windows
  by ``unfold(2, k, s).unfold(3, k, s)``, offsets added to the two halves of ``v.split(...)``,
  six-dimensional ``contiguous().view``s, ``torch.einsum('bnchwk,bnchwk -> bnchw', ...)`` with a
  space in its equation, the stem's ``einsum('bnchwk,cw->bnchwk')`` mixtures and two softmaxes,
  ``F.avg_pool2d(out, (s, s))`` and ``out += self.skip(x)`` through an empty
  ``nn.Sequential()``.

Defect found and fixed: ``from torch.hub import tqdm`` failed (there was no
``retrograd.hub``): ``rg.hub`` has ``tqdm`` (tqdm's own, as torch's; a quiet stand-in without
it), ``get_dir``/``set_dir``, and errors that say retrograd downloads nothing for ``load``,
``list``, ``help``, ``load_state_dict_from_url`` and ``download_url_to_file``.

The lines changed: the gradient lines (``grads = loss.backward()``, ``clip_grad_norm_(grads,
...)``, ``optimizer.step(grads)``) and the ``import`` lines naming ``torch``.
"""

from __future__ import annotations

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
)

# -- word2vec -------------------------------------------------------------------------------------
W2V_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import Dataset, DataLoader

F = nn.functional


class Vocabulary:
    # counts words, keeps the frequent ones, and builds the tables both samplers draw from
    def __init__(self, path, min_count, table_size=1000):
        counts = {}
        self.n_lines = 0
        with open(path, encoding="utf8") as f:
            for line in f:
                words = line.split()
                if len(words) > 1:
                    self.n_lines += 1
                    for word in words:
                        counts[word] = counts.get(word, 0) + 1
        kept = [w for w, c in counts.items() if c >= min_count]
        self.index = {w: i for i, w in enumerate(kept)}
        self.words = dict(enumerate(kept))
        freq = np.array([counts[w] for w in kept], dtype=np.float64)
        share = freq / freq.sum()
        self.keep_prob = np.sqrt(1e-3 / share) + 1e-3 / share  # frequent words dropped more
        weights = freq ** 0.75
        slots = np.round(weights / weights.sum() * table_size).astype(int)
        self.table = np.repeat(np.arange(len(kept)), slots)
        np.random.shuffle(self.table)
        self.cursor = 0

    def negatives(self, n):
        picked = self.table[self.cursor:self.cursor + n]
        self.cursor = (self.cursor + n) % len(self.table)
        if len(picked) < n:
            picked = np.concatenate((picked, self.table[:self.cursor]))
        return picked


class SkipGramPairs(Dataset):
    # each item: one line's (center, context, negatives) triples, read from the open file
    def __init__(self, vocab, window):
        self.vocab, self.window = vocab, window
        self.file = open(path, encoding="utf8")

    def __len__(self):
        return self.vocab.n_lines

    def __getitem__(self, i):
        while True:
            line = self.file.readline()
            if not line:
                self.file.seek(0, 0)
                continue
            index, keep = self.vocab.index, self.vocab.keep_prob
            known = [index[w] for w in line.split() if w in index]
            ids = [i for i in known if np.random.rand() < keep[i]]
            if len(ids) < 2:
                continue
            reach = np.random.randint(1, self.window)
            return [(c, o, self.vocab.negatives(4)) for k, c in enumerate(ids)
                    for o in ids[max(k - reach, 0):k + reach] if c != o]

    @staticmethod
    def collate(items):
        triples = [t for item in items for t in item]
        return tuple(torch.LongTensor([t[j] for t in triples]) for j in range(3))


class SkipGram(nn.Module):
    def __init__(self, n_words, dim):
        super().__init__()
        self.dim = dim
        self.center = nn.Embedding(n_words, dim, sparse=True)
        self.context = nn.Embedding(n_words, dim, sparse=True)
        nn.init.uniform_(self.center.weight.data, -1.0 / dim, 1.0 / dim)
        nn.init.constant_(self.context.weight.data, 0)

    def forward(self, c, o, neg):
        u = self.center(c)
        pos = torch.clamp(torch.sum(torch.mul(u, self.context(o)), dim=1), max=10, min=-10)
        negs = torch.bmm(self.context(neg), u.unsqueeze(2)).squeeze()
        negs = torch.clamp(negs, max=10, min=-10)
        return torch.mean(-F.logsigmoid(pos) - torch.sum(F.logsigmoid(-negs), dim=1))

    def write(self, words, out):
        vectors = self.center.weight.cpu().data.numpy()
        with open(out, 'w') as f:
            f.write('%d %d\\n' % (len(words), self.dim))
            for i, w in words.items():
                f.write(w + ' ' + ' '.join(str(v) for v in vectors[i]) + '\\n')


np.random.seed(7)
vocab = Vocabulary(path, min_count=3)
pairs = SkipGramPairs(vocab, window=4)
loader = DataLoader(pairs, batch_size=2, shuffle=False, num_workers=0, collate_fn=pairs.collate)
model = SkipGram(len(vocab.index), 8)
initialize(model)
for epoch in range(2):
    print('epoch', epoch + 1)
    optimizer = optim.SparseAdam(model.parameters(), lr=0.01)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, len(loader))
    smooth = 0.0
    for i, (c, o, neg) in enumerate(loader):
        scheduler.step()  # (before the optimizer, as written there)
        optimizer.zero_grad()
        loss = model(c, o, neg)
        loss.backward()
        optimizer.step()
        smooth = 0.9 * smooth + 0.1 * loss.item()
        if i % 2 == 1:
            print('smoothed loss', smooth)
        record.append(loss.item())
    model.write(vocab.words, out)
record.append(np.loadtxt(out, skiprows=1, usecols=range(1, 9)))
record.append(params_of(model))  # (after both epochs)
"""

W2V_STEPS = [
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        self.center = nn.Embedding(n_words, dim, sparse=True)\n"
        "        self.context = nn.Embedding(n_words, dim, sparse=True)\n",
        "        self.center = nn.Embedding(n_words, dim, sparse=False)\n"
        "        self.context = nn.Embedding(n_words, dim, sparse=False)\n",
    ),
]


def test_word2vec_skip_gram_trains_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(86)
    words = [f"w{i}" for i in range(60)]
    corpus = tmp_path / "input.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(words, 40)) for _ in range(4)) + "\n")
    weights = initializer()
    records, logs = runs_with_draws(
        W2V_SOURCE,
        W2V_STEPS,
        capsys,
        seed=86,
        params_of=params_of,
        path=str(corpus),
        make_initialize=lambda lib: weights,
        make_out=lambda lib: str(tmp_path / f"{lib.__name__}.vec"),
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("epoch") == logs[1].count("epoch") == 2
    assert logs[0].count("smoothed loss") == logs[1].count("smoothed loss") == 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)


# -- the forward-forward algorithm ----------------------------------------------------------------
FF_SOURCE = """
import types

import torch
import torch.nn as nn
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset


def wrong_labels(y, n_classes):
    # for each sample, a label drawn uniformly among the other classes
    out = y.clone()
    for i, label in enumerate(y):
        others = [c for c in range(n_classes) if c != label.item()]
        out[i] = torch.tensor(others)[torch.randint(len(others), size=(1,))].item()
    return out


def stamp(x, y, n_classes):
    # write the label into the first pixels: one-hot at the brightest value
    marked = x.clone()
    marked[:, :n_classes] *= 0.0
    marked[range(x.shape[0]), y] = x.max()
    return marked


class GoodnessLayer(nn.Linear):
    # trained on its own: high goodness (mean squared activity) for real pairs, low for fake
    def __init__(self, n_in, n_out, bias=True, device=None, dtype=None):
        super().__init__(n_in, n_out, bias, device, dtype)
        initialize(self)
        self.act = nn.ReLU()
        self.opt = Adam(self.parameters(), lr=cfg.lr)

    def forward(self, x):
        unit = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.act(torch.mm(unit, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, real, fake):  # (not Module.train: a local training loop)
        for epoch in range(cfg.epochs):
            good = self.forward(real).pow(2).mean(1)
            bad = self.forward(fake).pow(2).mean(1)
            margins = torch.cat([cfg.threshold - good, bad - cfg.threshold])
            loss = torch.log1p(torch.exp(margins)).mean()  # softplus of the margins
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            if epoch % 2 == 0:
                print('layer loss', loss.item())
                record.append(loss.item())
        return self.forward(real).detach(), self.forward(fake).detach()


class GoodnessNet(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = [GoodnessLayer(a, b) for a, b in zip(sizes[:-1], sizes[1:])]  # (a plain list)

    def train(self, real, fake):
        for layer in self.layers:
            real, fake = layer.train(real, fake)

    def predict(self, x):
        scores = []
        for c in range(cfg.classes):
            h, total = stamp(x, c, cfg.classes), []
            for layer in self.layers:
                h = layer(h)
                total = total + [h.pow(2).mean(1)]
            scores.append(sum(total).unsqueeze(1))
        return torch.cat(scores, 1).argmax(1)


cfg = types.SimpleNamespace(lr=0.03, epochs=4, threshold=2.0, classes=6)
as_set = lambda rows: TensorDataset(torch.tensor(images[rows]), torch.tensor(labels[rows]))
train_loader = DataLoader(as_set(slice(0, 32)), batch_size=32)
test_loader = DataLoader(as_set(slice(32, None)), batch_size=16)
net = GoodnessNet([images.shape[1], 16, 16])
x, y = next(iter(train_loader))  # (one batch: all of it)
fake = stamp(x, wrong_labels(y, cfg.classes), cfg.classes)
record.append(fake.numpy())
net.train(stamp(x, y, cfg.classes), fake)
print('train error', 1.0 - net.predict(x).eq(y).float().mean().item())
x_te, y_te = next(iter(test_loader))  # (likewise)
torch.save(net.state_dict(), model_file)  # (empty: the layers are not registered)
print('test error', 1.0 - net.predict(x_te).eq(y_te).float().mean().item())
record.extend([params_of(*net.layers), net.predict(x_te).tolist()])
"""

FF_STEPS = [
    (
        "            loss.backward()\n            self.opt.step()\n",
        "            grads = loss.backward()\n            self.opt.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_forward_forward_trains_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(87)
    images = ((rng.uniform(size=(48, 64)) - 0.1307) / 0.3081).astype(np.float32)
    labels = rng.integers(0, 6, 48)
    weights = initializer()
    records, logs = runs_with_draws(
        FF_SOURCE,
        FF_STEPS,
        capsys,
        seed=87,
        params_of=params_of,
        images=images,
        labels=labels,
        make_initialize=lambda lib: weights,
        make_model_file=lambda lib: str(tmp_path / f"{lib.__name__}.pt"),
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("layer loss") == logs[1].count("layer loss") == 4
    assert [line for line in logs[0].splitlines() if "error" in line] == [
        line for line in logs[1].splitlines() if "error" in line
    ]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- MobileNetV3 ----------------------------------------------------------------------------------
MOBILENETV3_SOURCE = """
import torch
from functools import partial
from typing import Callable, List, Optional, Sequence

from torch import nn

F = nn.functional


def round_channels(v: float, divisor: int = 8) -> int:
    # nearest multiple of divisor, never more than 10% below v
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


class ConvNormAct(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, k: int = 3, stride: int = 1, groups: int = 1,
                 norm: Optional[Callable[..., nn.Module]] = None,
                 act: Optional[Callable[..., nn.Module]] = None, dilation: int = 1) -> None:
        norm = norm or nn.BatchNorm2d
        act = act or nn.ReLU6
        pad = (k - 1) // 2 * dilation
        super(ConvBNReLU, self).__init__(  # (through the alias below)
            nn.Conv2d(c_in, c_out, k, stride, pad, dilation=dilation, groups=groups, bias=False),
            norm(c_out),
            act(inplace=True),
        )


ConvBNReLU = ConvNormAct


class Excite(nn.Module):
    def __init__(self, c: int, squeeze: int = 4) -> None:
        super().__init__()
        mid = round_channels(c // squeeze)
        self.reduce = nn.Conv2d(c, mid, 1)
        self.expand = nn.Conv2d(mid, c, 1)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        w = F.relu(self.reduce(F.adaptive_avg_pool2d(t, 1)), inplace=True)
        return F.hardsigmoid(self.expand(w), inplace=True) * t


class BlockSpec:
    def __init__(self, c_in, k, c_mid, c_out, excite, act, stride, dilation, width):
        self.c_in, self.c_mid = self.scale(c_in, width), self.scale(c_mid, width)
        self.c_out, self.k = self.scale(c_out, width), k
        self.excite, self.hard, self.stride, self.dilation = excite, act == 'HS', stride, dilation

    @staticmethod
    def scale(c: int, width: float) -> int:
        return round_channels(c * width)


class Bottleneck(nn.Module):
    def __init__(self, spec: BlockSpec, norm: Callable[..., nn.Module]) -> None:
        super().__init__()
        self.residual = spec.stride == 1 and spec.c_in == spec.c_out
        act = nn.Hardswish if spec.hard else nn.ReLU
        layers: List[nn.Module] = []
        if spec.c_mid != spec.c_in:
            layers.append(ConvNormAct(spec.c_in, spec.c_mid, 1, norm=norm, act=act))
        stride = 1 if spec.dilation > 1 else spec.stride
        layers.append(ConvNormAct(spec.c_mid, spec.c_mid, spec.k, stride, groups=spec.c_mid,
                                  norm=norm, act=act, dilation=spec.dilation))
        if spec.excite:
            layers.append(Excite(spec.c_mid))
        layers.append(ConvNormAct(spec.c_mid, spec.c_out, 1, norm=norm, act=nn.Identity))
        self.body = nn.Sequential(*layers)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        out = self.body(t)
        if self.residual:
            out += t
        return out


class TinyMobileNetV3(nn.Module):
    def __init__(self, specs: List[BlockSpec], last: int, classes: int, dropout: float = 0.2):
        super().__init__()
        if not (isinstance(specs, Sequence) and all(isinstance(s, BlockSpec) for s in specs)):
            raise TypeError('specs should be a list of BlockSpec')
        norm = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers = [ConvNormAct(3, specs[0].c_in, 3, 2, norm=norm, act=nn.Hardswish)]
        layers += [Bottleneck(s, norm) for s in specs]
        c_last = specs[-1].c_out
        layers.append(ConvNormAct(c_last, 6 * c_last, 1, norm=norm, act=nn.Hardswish))
        self.body = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(
            nn.Linear(6 * specs[-1].c_out, last), nn.Hardswish(inplace=True),
            nn.Dropout(p=dropout, inplace=True), nn.Linear(last, classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif type(m) is nn.Linear:
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.body(t)), 1))


spec = partial(BlockSpec, width=0.5)
dil = 2 if dilated else 1
specs = [
    spec(16, 3, 16, 16, True, 'RE', 2, 1),
    spec(16, 3, 72, 24, False, 'RE', 2, 1),
    spec(24, 3, 88, 24, False, 'RE', 1, 1),
    spec(24, 5, 96, 40, True, 'HS', 2, dil),
    spec(40, 5, 120, 40, True, 'HS', 1, dil),
]
model = TinyMobileNetV3(specs, last=32, classes=5)
model.head[2].p = 0.0  # (its masks would be each library's own draws)
initialize(model)
xent = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=4e-5, momentum=0.9)
for images, labels in batches:
    loss = xent(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
model.eval()
with torch.no_grad():
    record.append(model(batches[0][0]).numpy())  # evaluated
record.append(params_of(model))  # trained
state = model.state_dict()
record.append({k: state[k].numpy() for k in state if 'running' in k})
"""

MOBILENETV3_STEPS = [
    (
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n",
        "    optimizer.zero_grad()\n    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
]


@pytest.mark.parametrize("dilated", [True])
def test_torchvision_mobilenet_v3_trains_as_torch(capsys, dilated):
    rng = np.random.default_rng(88)
    images = rng.standard_normal((2, 4, 3, 32, 32)).astype(np.float32)
    targets = rng.integers(0, 5, (2, 4))
    weights = initializer()
    records, _ = runs_with_draws(
        MOBILENETV3_SOURCE,
        MOBILENETV3_STEPS,
        capsys,
        seed=88,
        params_of=params_of,
        dilated=dilated,
        make_initialize=lambda lib: weights,
        make_batches=lambda lib: [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, targets)],
    )
    ours, theirs = records[1], records[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- pytorch/examples' vision transformer ---------------------------------------------------------
VIT_SOURCE = """
import argparse

import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.hub import tqdm
from torch.utils.data import DataLoader, TensorDataset


def to_patches(images, p):
    b, c, h, w = images.size()
    assert h % p == 0 and w % p == 0, f"{h}x{w} images do not split into {p}x{p} patches"
    return images.unfold(2, p, p).unfold(3, p, p) \\
        .permute(0, 2, 3, 1, 4, 5) \\
        .contiguous() \\
        .view(b, (h // p) * (w // p), -1)


class PatchEmbedding(nn.Module):
    def __init__(self, cfg, device):
        super().__init__()
        self.p = cfg.patch
        self.proj = nn.Linear(cfg.channels * self.p * self.p, cfg.width)
        # one learned token and one position vector per batch slot, as that example has them
        self.cls = nn.Parameter(torch.randn(cfg.batch_size, 1, cfg.width).to(device))
        self.pos = nn.Parameter(torch.randn(cfg.batch_size, 1, cfg.width).to(device))

    def forward(self, images):
        tokens = self.proj(to_patches(images, self.p))
        tokens = torch.cat((self.cls, tokens), dim=1)
        tokens += self.pos[:, :tokens.size(1), :]
        return tokens


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.width)  # (one norm used twice)
        self.attn = nn.MultiheadAttention(cfg.width, cfg.heads, dropout=cfg.dropout)
        w, p = cfg.width, cfg.dropout
        self.mlp = nn.Sequential(
            nn.Linear(w, 2 * w), nn.GELU(), nn.Dropout(p), nn.Linear(2 * w, w), nn.Dropout(p)
        )

    def forward(self, x):
        # (batch-first tokens fed to a sequence-first attention: batch slots attend to each other)
        h = self.norm(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.norm(x))


class PatchClassifier(nn.Module):
    def __init__(self, cfg, device):
        super().__init__()
        self.embed = PatchEmbedding(cfg, device)
        self.blocks = nn.ModuleList([Encoder(cfg) for _ in range(cfg.depth)])
        self.head = nn.Sequential(nn.LayerNorm(cfg.width), nn.Linear(cfg.width, cfg.classes))

    def forward(self, images):
        x = self.embed(images)
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, 0])


def run_epoch(model, loader, opt, loss_fn, tag, training):
    model.train(training)
    total = 0.0
    bar = tqdm(loader, desc=tag)
    for n, (images, labels) in enumerate(bar):
        loss = loss_fn(model(images), labels)
        if training:
            opt.zero_grad()
            loss.backward()
            opt.step()
        total += loss.item()
        bar.set_postfix({"loss": "%.5f" % (total / (n + 1))})
    return total / len(loader)


parser = argparse.ArgumentParser()
options = {'--patch': 8, '--width': 16, '--heads': 2, '--depth': 2, '--channels': 3,
           '--classes': 10, '--epochs': 2, '--lr': 1e-3, '--weight-decay': 3e-2,
           '--batch-size': 4, '--dropout': 0.0}
for flag, default in options.items():
    parser.add_argument(flag, type=type(default), default=default)
cfg = parser.parse_args(argv)
device = torch.device('cpu')
as_set = lambda rows: TensorDataset(torch.tensor(images[rows]), torch.tensor(labels[rows]))
train = DataLoader(as_set(slice(0, 8)), batch_size=cfg.batch_size)
valid = DataLoader(as_set(slice(8, None)), batch_size=cfg.batch_size)
model = PatchClassifier(cfg, device).to(device)
initialize(model)
opt = optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
loss_fn = nn.CrossEntropyLoss()
best = np.inf
for epoch in range(cfg.epochs):
    seen = run_epoch(model, train, opt, loss_fn, 'train %d' % epoch, True)
    held = run_epoch(model, valid, opt, loss_fn, 'valid %d' % epoch, False)
    record.append((seen, held))
    if held < best:
        best = held
        torch.save(model.state_dict(), 'best.pt')
        print('saved the best weights')
record.append(params_of(model))  # (the last, not the best)
"""

VIT_STEPS = [
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_examples_vision_transformer_trains_as_torch(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (it saves best.pt where it runs)
    rng = np.random.default_rng(89)
    images = rng.uniform(size=(12, 3, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 10, 12)
    weights = initializer()
    records, logs = runs_with_draws(
        VIT_SOURCE,
        VIT_STEPS,
        capsys,
        seed=89,
        params_of=params_of,
        argv=["--epochs", "2", "--lr", "0.001"],
        images=images,
        labels=labels,
        make_initialize=lambda lib: weights,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("saved the best") == logs[1].count("saved the best") >= 1
    # the keys' thirds of the attention biases: softmax ignores them, so their gradients are
    # rounding noise that Adam scales up; the queries' and values' thirds are compared
    biases = [f"0.blocks.{i}.attn.in_proj_bias" for i in range(2)]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=set(biases))
    for name in biases:
        for part in (slice(0, 16), slice(32, 48)):
            np.testing.assert_allclose(
                ours[2][name][part], theirs[2][name][part], rtol=1e-4, atol=1e-5
            )


def test_regression_torch_hub_names_exist():
    """pytorch/examples' vision transformer runs ``from torch.hub import tqdm``: there was no
    ``retrograd.hub``."""
    import importlib
    import sys

    from retrograd.hub import tqdm

    assert tqdm is torch.hub.tqdm  # the progress bar torch re-exports: tqdm's own
    assert rg.hub.get_dir().endswith("hub")
    saved = rg.hub.get_dir()
    try:
        rg.hub.set_dir("/tmp/somewhere")
        assert rg.hub.get_dir() == "/tmp/somewhere"
    finally:
        rg.hub.set_dir(saved)
    for name in ("load", "list", "help", "load_state_dict_from_url", "download_url_to_file"):
        with pytest.raises(
            rg.errors.InvalidArgumentError, match=f"hub.{name}: .*does not download"
        ):
            getattr(rg.hub, name)("pytorch/vision", "resnet18")
    # without tqdm installed: a quiet stand-in that iterates and takes tqdm's methods
    real = sys.modules.get("tqdm")
    sys.modules["tqdm"] = None
    try:
        fallback = importlib.reload(rg.hub).tqdm
        bar = fallback([1, 2, 3], desc="EPOCH")
        bar.set_postfix({"Loss": "1.0"})
        assert list(bar) == [1, 2, 3] and bar.n == 3 and bar.total == len(bar) == 3
    finally:
        sys.modules["tqdm"] = real
        importlib.reload(rg.hub)
    assert rg.hub.tqdm is torch.hub.tqdm


# -- minGRU ---------------------------------------------------------------------------------------
MINGRU_SOURCE = """
import torch
from torch import nn
from torch.optim import Adam
from torch.utils.data import Dataset, DataLoader

F = nn.functional


def scan_in_log_space(log_a, log_b):
    # h_t = a_t h_{t-1} + b_t for all t at once: cumulative sums of logs, then a log-sum-exp
    a_cum = log_a.cumsum(dim=1)
    return (a_cum + (log_b - a_cum).logcumsumexp(dim=1)).exp()


def positive(x):
    # a positive activation, linear above 0: the scan needs logs
    return torch.where(x >= 0, x + 0.5, torch.sigmoid(x))


def log_positive(x):
    return torch.where(x >= 0, torch.log(F.relu(x) + 0.5), -F.softplus(-x))


class MinimalGRU(nn.Module):
    # h_t = (1 - z_t) h_{t-1} + z_t g(h~_t), with z and h~ from x_t alone
    def __init__(self, dim, expand=1.0):
        super().__init__()
        inner = int(dim * expand)
        self.to_hz = nn.Linear(dim, 2 * inner, bias=False)
        self.out = nn.Linear(inner, dim, bias=False) if expand != 1.0 else nn.Identity()

    def forward(self, x, h0=None):
        n = x.shape[1]
        cand, z = self.to_hz(x).chunk(2, dim=-1)
        if n == 1:  # one step: a plain interpolation
            h = positive(cand)
            z = z.sigmoid()
            out = h * z if h0 is None else torch.lerp(h0, h, z)
        else:
            log_a, log_b = -F.softplus(z), -F.softplus(-z) + log_positive(cand)
            if h0 is not None:  # the previous state enters as a first value with no decay
                log_b = torch.cat((log_positive(h0), log_b), dim=1)
                log_a = F.pad(log_a, (0, 0, 1, 0))
            out = scan_in_log_space(log_a, log_b)[:, -n:]
        return self.out(out)


class ScaleNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.g = nn.Parameter(torch.zeros(dim))
        self.root = dim ** 0.5

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.root * (1 + self.g)


def mlp(dim):
    return nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))


class GRULanguageModel(nn.Module):
    def __init__(self, n_tokens, dim, depth, expand=1.5):
        super().__init__()
        self.embed = nn.Embedding(n_tokens, dim)
        self.blocks = nn.ModuleList(
            nn.ModuleList([ScaleNorm(dim), MinimalGRU(dim, expand), ScaleNorm(dim), mlp(dim)])
            for _ in range(depth)
        )
        self.final = ScaleNorm(dim)
        self.logits = nn.Linear(dim, n_tokens, bias=False)

    def forward(self, seq, with_loss=False):
        if with_loss:
            seq, nxt = seq[:, :-1], seq[:, 1:]
        x = self.embed(seq)
        for n1, gru, n2, mlp in self.blocks:
            x = x + gru(n1(x))
            x = x + mlp(n2(x))
        out = self.logits(self.final(x))
        return F.cross_entropy(out.transpose(1, 2), nxt) if with_loss else out


class RandomWindows(Dataset):
    def __init__(self, data, length):
        super().__init__()
        self.data, self.length = data, length

    def __len__(self):
        return self.data.size(0) // self.length

    def __getitem__(self, i):
        start = torch.randint(0, self.data.size(0) - self.length, (1,))
        return self.data[start:start + self.length + 1].long()


def forever(loader):
    while True:
        yield from loader


ACCUM = 2
model = GRULanguageModel(24, 12, 2)
initialize(model)
train = forever(DataLoader(RandomWindows(torch.tensor(tokens[:150]), 10), batch_size=2))
valid = forever(DataLoader(RandomWindows(torch.tensor(tokens[150:]), 10), batch_size=2))
opt = Adam(model.parameters(), lr=1e-3)
for step in range(3):
    model.train()
    for k in range(ACCUM):
        loss = model(next(train), with_loss=True)
        (loss / ACCUM).backward()
    print(f"train {loss.item():.3f}")
    record.append(loss.item())
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    opt.zero_grad()
    if step % 2 == 0:
        model.eval()
        with torch.no_grad():
            held = model(next(valid), with_loss=True)
        print(f"valid {held.item():.3f}")
        record.append(held.item())
record.append(params_of(model))  # (after the accumulated steps)

cell = MinimalGRU(12)
initialize(cell)
x = torch.randn(2, 5, 12)
whole = cell(x)
h, outs = None, []
for t in range(5):
    h = cell(x[:, t:t + 1], h0=h)
    outs.append(h)
resumed = cell(x[:, 2:], h0=outs[1])
record.append(whole.detach().numpy())
record.append(float((whole - torch.cat(outs, dim=1)).abs().max()))
record.append(resumed.detach().numpy())
"""

MINGRU_STEPS = [
    (
        "        (loss / ACCUM).backward()\n",
        "        part = (loss / ACCUM).backward()\n"
        "        grads = part if k == 0 else grads + part\n",
    ),
    (
        "    nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n    opt.step()\n",
        "    nn.utils.clip_grad_norm_(grads, model.parameters(), 0.5)\n    opt.step(grads)\n",
    ),
    ("import torch\n", "import retrograd as torch\n"),
]


def test_min_gru_language_model_trains_as_torch(capsys):
    tokens = np.random.default_rng(90).integers(0, 24, 220)
    weights = initializer()
    records, logs = runs_with_draws(
        MINGRU_SOURCE,
        MINGRU_STEPS,
        capsys,
        seed=90,
        params_of=params_of,
        tokens=tokens,
        make_initialize=lambda lib: weights,
    )
    ours, theirs = records[1], records[0]
    assert logs[0] == logs[1] and logs[0].count("train") == 3
    assert theirs[-2] < 1e-5 and ours[-2] < 1e-5  # the scan is the recurrence, in both
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- stand-alone self-attention -------------------------------------------------------------------
SASA_SOURCE = """
import torch
import torch.nn as nn

F = nn.functional


def windows(t, k, stride):
    # every k x k neighbourhood as two trailing axes: (b, c, h, w, k, k)
    return t.unfold(2, k, stride).unfold(3, k, stride)


class LocalAttention2d(nn.Module):
    # each pixel attends over its k x k window; the values carry learned row and column
    # offsets on the two halves of the channels
    def __init__(self, c_in, c_out, k, pad, heads):
        super().__init__()
        assert c_out % heads == 0, "channels must split evenly over the heads"
        self.c, self.k, self.pad, self.heads = c_out, k, pad, heads
        self.row_off = nn.Parameter(torch.randn(c_out // 2, 1, 1, k, 1))
        self.col_off = nn.Parameter(torch.randn(c_out // 2, 1, 1, 1, k))
        self.q, self.key, self.v = (nn.Conv2d(c_in, c_out, 1, bias=False) for _ in range(3))

    def forward(self, x):
        b, _, h, w = x.size()
        around = F.pad(x, [self.pad, self.pad, self.pad, self.pad])
        keys = windows(self.key(around), self.k, 1)
        vals = windows(self.v(around), self.k, 1)
        top, bottom = vals.split(self.c // 2, dim=1)
        vals = torch.cat((top + self.row_off, bottom + self.col_off), dim=1)
        shape = (b, self.heads, self.c // self.heads, h, w, -1)
        keys, vals = keys.contiguous().view(*shape), vals.contiguous().view(*shape)
        q = self.q(x).view(b, self.heads, self.c // self.heads, h, w, 1)
        weights = F.softmax(q * keys, dim=-1)
        return torch.einsum('bnchwk,bnchwk -> bnchw', weights, vals).view(b, -1, h, w)


class AttentionStem2d(nn.Module):
    # the first layer: value-dependent mixtures of row, column and joint position embeddings
    def __init__(self, size, c_in, c_out, k, pad, heads):
        super().__init__()
        self.c, self.k, self.pad, self.heads = c_out, k, pad, heads
        per_head = c_out // heads
        self.by_col = nn.Parameter(torch.randn(per_head, size))
        self.by_row = nn.Parameter(torch.randn(per_head, size))
        self.by_both = nn.Parameter(torch.randn(per_head, size, size))
        self.q, self.key, self.v = (nn.Conv2d(c_in, c_out, 1, bias=False) for _ in range(3))

    def forward(self, x):
        b, _, h, w = x.size()
        around = F.pad(x, [self.pad, self.pad, self.pad, self.pad])
        keys = windows(self.key(around), self.k, 1)[:, :, :h, :w]  # (an even k overhangs)
        vals = windows(self.v(around), self.k, 1)[:, :, :h, :w]
        shape = (b, self.heads, self.c // self.heads, h, w, -1)
        keys, vals = keys.contiguous().view(*shape), vals.contiguous().view(*shape)
        mix = torch.einsum('bnchwk,cw->bnchwk', vals, self.by_col)
        mix = mix + torch.einsum('bnchwk,ch->bnchwk', vals, self.by_row)
        mix = F.softmax(mix * torch.einsum('bnchwk,chw->bnchwk', vals, self.by_both), dim=-1)
        q = self.q(x).view(b, self.heads, self.c // self.heads, h, w, 1)
        weights = F.softmax(q * keys * mix, dim=-1)
        return torch.einsum('bnchwk,bnchwk -> bnchw', weights, vals).view(b, -1, h, w)


class AttentionBottleneck(nn.Module):
    def __init__(self, c_in, c_mid, stride=1, grow=2):
        super().__init__()
        self.stride = stride
        c_out = grow * c_mid
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_mid, 1, bias=False), nn.BatchNorm2d(c_mid), nn.ReLU(),
            LocalAttention2d(c_mid, c_mid, 5, 2, heads=4), nn.BatchNorm2d(c_mid), nn.ReLU(),
            nn.Conv2d(c_mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out),
        )
        self.skip = nn.Sequential()  # (empty: the identity)
        if stride != 1 or c_in != c_out:
            self.skip = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x):
        out = self.body(x)
        if self.stride > 1:
            out = F.avg_pool2d(out, (self.stride,) * 2)
        out += self.skip(x)
        return F.relu(out)


net = nn.Sequential(
    AttentionStem2d(size=6, c_in=3, c_out=8, k=4, pad=2, heads=2),
    nn.BatchNorm2d(8),
    nn.ReLU(),
    AttentionBottleneck(8, 8),
    AttentionBottleneck(16, 8, stride=2),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(16, 5),
)
initialize(net)
xent = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
for images, labels in batches:
    optimizer.zero_grad()
    loss = xent(net(images), labels)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
net.eval()
with torch.no_grad():
    record.append(net(batches[0][0]).numpy())  # evaluated
record.append(params_of(net))
"""

SASA_STEPS = [
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_stand_alone_self_attention_trains_as_torch(capsys):
    rng = np.random.default_rng(91)
    images = rng.standard_normal((2, 4, 3, 6, 6)).astype(np.float32)
    labels = rng.integers(0, 5, (2, 4))
    weights = initializer()
    records, _ = runs_with_draws(
        SASA_SOURCE,
        SASA_STEPS,
        capsys,
        seed=91,
        params_of=params_of,
        make_initialize=lambda lib: weights,
        make_batches=lambda lib: [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, labels)],
    )
    ours, theirs = records[1], records[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
