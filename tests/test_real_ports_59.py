# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_58.py`` (the
harness: ``tests/real_ports.py``):

- word2vec as Andras7/word2vec-pytorch writes it (``word2vec/data_reader.py``,
  ``model.py``, ``trainer.py``): subsampling and the negatives table by NumPy draws (its size
  ``1e8`` set to ``1e3``), a ``Dataset`` reading lines from an open file with a
  ``collate`` of ``torch.LongTensor`` lists, ``DataLoader(collate_fn=...)``, the skip-gram
  model (``init.uniform_``/``constant_`` of ``weight.data``, ``torch.bmm(emb_neg_v,
  emb_u.unsqueeze(2)).squeeze()``, ``torch.clamp(..., max=10, min=-10)``, ``F.logsigmoid``),
  ``optim.SparseAdam`` with ``CosineAnnealingLR`` stepped before the optimizer, and
  ``save_embedding``'s text file read back. ``sparse=True`` is changed to ``False`` in the two
  embeddings (retrograd has no sparse gradients, by design; ``SparseAdam`` steps the dense
  ones as torch's steps the sparse ones).
- the forward-forward example of pytorch/examples (``mnist_forward_forward/main.py``, MNIST
  random images, the layers narrower): ``Layer(nn.Linear)`` calling
  ``super().__init__(in_features, out_features, bias, device, dtype)`` and owning its Adam,
  ``Module.train`` overridden with another signature by both classes, layers in a plain list,
  ``x_[:, :classes] *= 0.0``, ``x_[range(x.shape[0]), y] = x.max()``, ``get_y_neg``'s
  ``torch.tensor(allowed_indices)[torch.randint(n, size=(1,))].item()``, ``self.weight.T``,
  ``sum(goodness)`` of tensors and ``argmax`` predictions.
- torchvision 0.9's MobileNetV3 (``models/mobilenetv3.py`` over ``mobilenetv2.py``'s
  ``_make_divisible`` and ``ConvBNActivation``), ``mobilenet_v3_small`` with the non-public
  ``_width_mult``, ``_reduced_tail`` and ``_dilated`` (dilated depthwise convolutions),
  trained a few SGD steps on 32x32 images and evaluated: the ``nn.Sequential`` subclass calling
  ``super(ConvBNReLU, self).__init__(...)`` through its alias, ``activation_layer(
  inplace=True)`` of ``nn.Hardswish``, ``nn.ReLU`` and ``nn.Identity``, ``partial(
  nn.BatchNorm2d, eps=0.001, momentum=0.01)``, the squeeze-excitation by
  ``F.adaptive_avg_pool2d(input, 1)`` and ``F.hardsigmoid(scale, inplace=True)``, ``result +=
  input``, ``InvertedResidualConfig.adjust_channels`` as a ``partial`` of a static method, the
  ``isinstance(..., Sequence)`` check, and the init loop over ``self.modules()``; the
  classifier's dropout is set to 0 (its masks are each library's own).
- pytorch/examples' vision transformer (``vision_transformer/main.py``, CIFAR10 random images,
  its argument parser given small sizes, ``shuffle=False``): ``PatchExtractor`` by
  ``input_data.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).contiguous().view``
  (the backslash-continued chain as written), ``nn.Parameter(torch.randn(...).to(device))``
  class and position tokens, ``linear_projection += pos_embed``, ``nn.MultiheadAttention``
  fed ``[batch, tokens, dim]`` as written (read as sequence-first by both), ``nn.GELU``,
  Adam with ``weight_decay``, ``from torch.hub import tqdm`` with ``set_postfix``, and
  ``torch.save`` of the best state dict (the fix below).

- minGRU as lucidrains/minGRU-pytorch writes it (``minGRU_pytorch/minGRU.py`` and
  ``minGRULM.py``) under ``train.py``'s loop (random tokens for enwik8, whose uint8 bytes and
  ``.cuda()`` calls are left out; sizes smaller): the log-space parallel scan
  (``log_coeffs.cumsum(dim = 1)``, ``(log_values - a_star).logcumsumexp(dim = 1)``),
  ``torch.where(x >= 0, x + 0.5, x.sigmoid())``, ``-F.softplus(-x)``, the sequential step by
  ``torch.lerp(prev_hidden, hidden, gate)``, ``F.pad(log_coeffs, (0, 0, 1, 0))`` for a
  continued sequence, ``RMSNorm`` by ``F.normalize``, ``ModuleList`` of ``ModuleList``s
  unpacked in the loop, ``F.cross_entropy(logits.transpose(1, 2), labels)``, gradient
  accumulation over ``(loss / GRAD_ACCUM_EVERY).backward()`` (the gradients added),
  ``clip_grad_norm_``, Adam, a ``Dataset`` drawing ``torch.randint(0, n, (1,))`` slice bounds
  through ``cycle(DataLoader(...))``; the parallel scan checked against the sequential steps in
  both.
- stand-alone self-attention as leaderj1001/Stand-Alone-Self-Attention writes it
  (``attention.py``'s ``AttentionConv`` and ``AttentionStem``, ``model.py``'s ``Bottleneck``) in a
  small network of a stem and two bottlenecks (``model.py``'s ``Model`` takes 64 to 2,048
  channels) trained a few SGD steps: ``F.pad(x, [p, p, p, p])`` of a list, key/value windows by
  ``unfold(2, k, s).unfold(3, k, s)``, relative embeddings added to the two halves of
  ``v_out.split(...)``, six-dimensional ``contiguous().view``s, ``torch.einsum('bnchwk,bnchwk ->
  bnchw', ...)`` with a space in its equation, the stem's ``einsum('bnchwk,cw->bnchwk')``
  mixtures and two softmaxes, ``F.avg_pool2d(out, (stride, stride))`` and ``out +=
  self.shortcut(x)`` through an empty ``nn.Sequential()``.

Defect found and fixed: ``from torch.hub import tqdm`` failed (there was no
``retrograd.hub``): ``rg.hub`` has ``tqdm`` (tqdm's own, as torch's; a quiet stand-in without
it), ``get_dir``/``set_dir``, and errors that say retrograd downloads nothing for ``load``,
``list``, ``help``, ``load_state_dict_from_url`` and ``download_url_to_file``.

The lines changed: the gradient lines (``grads = loss.backward()``, ``clip_grad_norm_(grads,
...)``, ``optimizer.step(grads)``) and the ``import`` lines naming ``torch``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    """Every test from fixed seeds (torch's initial weights, which both runs start from, and
    the programs' draws): unseeded, they followed whatever the xdist worker ran before."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


# -- word2vec ------------------------------------------------------------------------------------------
W2V_SOURCE = '''
# -- word2vec/data_reader.py --
import numpy as np
import torch
from torch.utils.data import Dataset

np.random.seed(12345)


class DataReader:
    NEGATIVE_TABLE_SIZE = 1e8

    def __init__(self, inputFileName, min_count):

        self.negatives = []
        self.discards = []
        self.negpos = 0

        self.word2id = dict()
        self.id2word = dict()
        self.sentences_count = 0
        self.token_count = 0
        self.word_frequency = dict()

        self.inputFileName = inputFileName
        self.read_words(min_count)
        self.initTableNegatives()
        self.initTableDiscards()

    def read_words(self, min_count):
        word_frequency = dict()
        for line in open(self.inputFileName, encoding="utf8"):
            line = line.split()
            if len(line) > 1:
                self.sentences_count += 1
                for word in line:
                    if len(word) > 0:
                        self.token_count += 1
                        word_frequency[word] = word_frequency.get(word, 0) + 1

                        if self.token_count % 1000000 == 0:
                            print("Read " + str(int(self.token_count / 1000000)) + "M words.")

        wid = 0
        for w, c in word_frequency.items():
            if c < min_count:
                continue
            self.word2id[w] = wid
            self.id2word[wid] = w
            self.word_frequency[wid] = c
            wid += 1
        print("Total embeddings: " + str(len(self.word2id)))

    def initTableDiscards(self):
        t = 0.0001
        f = np.array(list(self.word_frequency.values())) / self.token_count
        self.discards = np.sqrt(t / f) + (t / f)

    def initTableNegatives(self):
        pow_frequency = np.array(list(self.word_frequency.values())) ** 0.5
        words_pow = sum(pow_frequency)
        ratio = pow_frequency / words_pow
        count = np.round(ratio * DataReader.NEGATIVE_TABLE_SIZE)
        for wid, c in enumerate(count):
            self.negatives += [wid] * int(c)
        self.negatives = np.array(self.negatives)
        np.random.shuffle(self.negatives)

    def getNegatives(self, target, size):  # TODO check equality with target
        response = self.negatives[self.negpos:self.negpos + size]
        self.negpos = (self.negpos + size) % len(self.negatives)
        if len(response) != size:
            return np.concatenate((response, self.negatives[0:self.negpos]))
        return response


# -----------------------------------------------------------------------------------------------------------------

class Word2vecDataset(Dataset):
    def __init__(self, data, window_size):
        self.data = data
        self.window_size = window_size
        self.input_file = open(data.inputFileName, encoding="utf8")

    def __len__(self):
        return self.data.sentences_count

    def __getitem__(self, idx):
        while True:
            line = self.input_file.readline()
            if not line:
                self.input_file.seek(0, 0)
                line = self.input_file.readline()

            if len(line) > 1:
                words = line.split()

                if len(words) > 1:
                    word_ids = [self.data.word2id[w] for w in words if
                                w in self.data.word2id and np.random.rand() < self.data.discards[self.data.word2id[w]]]

                    boundary = np.random.randint(1, self.window_size)
                    return [(u, v, self.data.getNegatives(v, 5)) for i, u in enumerate(word_ids) for j, v in
                            enumerate(word_ids[max(i - boundary, 0):i + boundary]) if u != v]

    @staticmethod
    def collate(batches):
        all_u = [u for batch in batches for u, _, _ in batch if len(batch) > 0]
        all_v = [v for batch in batches for _, v, _ in batch if len(batch) > 0]
        all_neg_v = [neg_v for batch in batches for _, _, neg_v in batch if len(batch) > 0]

        return torch.LongTensor(all_u), torch.LongTensor(all_v), torch.LongTensor(all_neg_v)


DataReader.NEGATIVE_TABLE_SIZE = 1e3  # (the one change: a table of 1e8 words takes a minute)

# -- word2vec/model.py --
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import init

"""
    u_embedding: Embedding for center word.
    v_embedding: Embedding for neighbor words.
"""


class SkipGramModel(nn.Module):

    def __init__(self, emb_size, emb_dimension):
        super(SkipGramModel, self).__init__()
        self.emb_size = emb_size
        self.emb_dimension = emb_dimension
        self.u_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=True)
        self.v_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=True)

        initrange = 1.0 / self.emb_dimension
        init.uniform_(self.u_embeddings.weight.data, -initrange, initrange)
        init.constant_(self.v_embeddings.weight.data, 0)

    def forward(self, pos_u, pos_v, neg_v):
        emb_u = self.u_embeddings(pos_u)
        emb_v = self.v_embeddings(pos_v)
        emb_neg_v = self.v_embeddings(neg_v)

        score = torch.sum(torch.mul(emb_u, emb_v), dim=1)
        score = torch.clamp(score, max=10, min=-10)
        score = -F.logsigmoid(score)

        neg_score = torch.bmm(emb_neg_v, emb_u.unsqueeze(2)).squeeze()
        neg_score = torch.clamp(neg_score, max=10, min=-10)
        neg_score = -torch.sum(F.logsigmoid(-neg_score), dim=1)

        return torch.mean(score + neg_score)

    def save_embedding(self, id2word, file_name):
        embedding = self.u_embeddings.weight.cpu().data.numpy()
        with open(file_name, 'w') as f:
            f.write('%d %d\\n' % (len(id2word), self.emb_dimension))
            for wid, w in id2word.items():
                e = ' '.join(map(lambda x: str(x), embedding[wid]))
                f.write('%s %s\\n' % (w, e))

# -- word2vec/trainer.py --
import torch
import torch.optim as optim
from torch.utils.data import DataLoader
from tqdm import tqdm


class Word2VecTrainer:
    def __init__(self, input_file, output_file, emb_dimension=100, batch_size=32, window_size=5, iterations=3,
                 initial_lr=0.001, min_count=12):

        self.data = DataReader(input_file, min_count)
        dataset = Word2vecDataset(self.data, window_size)
        self.dataloader = DataLoader(dataset, batch_size=batch_size,
                                     shuffle=False, num_workers=0, collate_fn=dataset.collate)

        self.output_file_name = output_file
        self.emb_size = len(self.data.word2id)
        self.emb_dimension = emb_dimension
        self.batch_size = batch_size
        self.iterations = iterations
        self.initial_lr = initial_lr
        self.skip_gram_model = SkipGramModel(self.emb_size, self.emb_dimension)
        initialize(self.skip_gram_model)  # (the harness: torch's initial weights in both runs)

        self.use_cuda = torch.cuda.is_available()
        self.device = torch.device("cuda" if self.use_cuda else "cpu")
        if self.use_cuda:
            self.skip_gram_model.cuda()

    def train(self):

        for iteration in range(self.iterations):

            print("\\n\\n\\nIteration: " + str(iteration + 1))
            optimizer = optim.SparseAdam(self.skip_gram_model.parameters(), lr=self.initial_lr)
            scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, len(self.dataloader))

            running_loss = 0.0
            for i, sample_batched in enumerate(tqdm(self.dataloader, disable=True)):

                if len(sample_batched[0]) > 1:
                    pos_u = sample_batched[0].to(self.device)
                    pos_v = sample_batched[1].to(self.device)
                    neg_v = sample_batched[2].to(self.device)

                    scheduler.step()
                    optimizer.zero_grad()
                    loss = self.skip_gram_model.forward(pos_u, pos_v, neg_v)
                    loss.backward()
                    optimizer.step()

                    running_loss = running_loss * 0.9 + loss.item() * 0.1
                    if i > 0 and i % 2 == 0:
                        print(" Loss: " + str(running_loss))
                    record.append(loss.item())

            self.skip_gram_model.save_embedding(self.data.id2word, self.output_file_name)


w2v = Word2VecTrainer(input_file=input_file, output_file=output_file, emb_dimension=8, batch_size=2, iterations=2, initial_lr=0.01, min_count=2)
w2v.train()
record.append(np.loadtxt(output_file, skiprows=1, usecols=range(1, 9)))  # (the embeddings saved)
record.append(params_of(w2v.skip_gram_model))
'''

W2V_STEPS = [
    (
        "                    loss.backward()\n                    optimizer.step()\n",
        "                    grads = loss.backward()\n                    optimizer.step(grads)\n",
    ),
    (
        "import torch\nfrom torch.utils.data import Dataset\n",
        "import retrograd as torch\nfrom retrograd.utils.data import Dataset\n",
    ),
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.nn import init\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.nn import init\n",
    ),
    (
        "import torch\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.optim as optim\n",
    ),
    # retrograd has no sparse gradients (a refusal by design, see test_real_ports_52's DLRM);
    # SparseAdam steps the dense ones as torch's steps the sparse ones
    (
        "        self.u_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=True)\n        self.v_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=True)\n",
        "        self.u_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=False)\n        self.v_embeddings = nn.Embedding(emb_size, emb_dimension, sparse=False)\n",
    ),
]


def test_word2vec_skip_gram_trains_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(86)
    # word2vec's subsampling keeps a word of frequency f with probability sqrt(1e-4 / f) + 1e-4
    # / f: 1,000 words of frequency about 1e-3 keep about 40% (a few short sentences of a small
    # vocabulary would keep almost none); 8 long sentences, 4 batches of 2
    words = [f"w{i}" for i in range(1000)]
    corpus = tmp_path / "input.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(words, 300)) for _ in range(8)) + "\n")
    weights = initializer()
    records, logs = runs_with_draws(
        W2V_SOURCE,
        W2V_STEPS,
        capsys,
        seed=86,
        params_of=params_of,
        input_file=str(corpus),
        make_initialize=lambda lib: weights,
        make_output_file=lambda lib: str(tmp_path / f"{lib.__name__}.vec"),
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("Iteration") == logs[1].count("Iteration") == 2
    assert logs[0].count(" Loss: ") == logs[1].count(" Loss: ") == 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)


# -- the forward-forward algorithm ---------------------------------------------------------------------
FF_SOURCE = """
# This code is based on the implementation of Mohammad Pezeshki available at
# https://github.com/mohammadpz/pytorch_forward_forward and licensed under the MIT License.
# Modifications/Improvements to the original code have been made by Vivek V Patel.

import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torch.optim import Adam


def get_y_neg(y):
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(y_samp.item())
        y_neg[idx] = torch.tensor(allowed_indices)[
            torch.randint(len(allowed_indices), size=(1,))
        ].item()
    return y_neg.to(device)


def overlay_y_on_x(x, y, classes=10):
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):
    def __init__(self, dims):

        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers = self.layers + [Layer(dims[d], dims[d + 1]).to(device)]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            print("training layer: ", i)
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        initialize(self)  # (the harness: torch's initial weights in both runs)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(
                torch.exp(
                    torch.cat([-g_pos + self.threshold, g_neg - self.threshold])
                )
            ).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            if i % args.log_interval == 0:
                print("Loss: ", loss.item())
                record.append(loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


# the __main__ block: its argument parser a namespace of smaller sizes, MNIST random images
args = argparse.Namespace(epochs=6, lr=0.03, no_cuda=True, no_xpu=True, no_mps=True, seed=1,
                          save_model=True, train_size=64, threshold=2, test_size=32, log_interval=2)
use_cuda = not args.no_cuda and torch.cuda.is_available()
if use_cuda:
    device = torch.device("cuda")
else:
    device = torch.device("cpu")

train_kwargs = {"batch_size": args.train_size}
test_kwargs = {"batch_size": args.test_size}

train_loader = DataLoader(
    torch.utils.data.TensorDataset(torch.tensor(images[:64]), torch.tensor(labels[:64])), **train_kwargs
)
test_loader = DataLoader(
    torch.utils.data.TensorDataset(torch.tensor(images[64:]), torch.tensor(labels[64:])), **test_kwargs
)
net = Net([784, 24, 24])
x, y = next(iter(train_loader))
x, y = x.to(device), y.to(device)
x_pos = overlay_y_on_x(x, y)
y_neg = get_y_neg(y)
x_neg = overlay_y_on_x(x, y_neg)
record.append(x_neg.numpy())
net.train(x_pos, x_neg)
print("train error:", 1.0 - net.predict(x).eq(y).float().mean().item())
x_te, y_te = next(iter(test_loader))
x_te, y_te = x_te.to(device), y_te.to(device)
if args.save_model:
    torch.save(net.state_dict(), model_file)
print("test error:", 1.0 - net.predict(x_te).eq(y_te).float().mean().item())
record.append(params_of(*net.layers))
record.append(net.predict(x_te).tolist())
"""

FF_STEPS = [
    (
        "            self.opt.zero_grad()\n            loss.backward()\n            self.opt.step()\n",
        "            self.opt.zero_grad()\n            grads = loss.backward()\n            self.opt.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_forward_forward_trains_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(87)
    images = ((rng.uniform(size=(96, 784)) - 0.1307) / 0.3081).astype(np.float32)
    labels = rng.integers(0, 10, 96)
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
    assert logs[0].count("Loss: ") == logs[1].count("Loss: ") == 6
    assert [line for line in logs[0].splitlines() if "error" in line] == [
        line for line in logs[1].splitlines() if "error" in line
    ]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- MobileNetV3 ---------------------------------------------------------------------------------------
# torchvision 0.9's models/mobilenetv3.py (its own SqueezeExcitation with an in-place
# F.hardsigmoid) over mobilenetv2.py's _make_divisible and ConvBNActivation of that release
MOBILENETV3_SOURCE = '''
import torch

from functools import partial
from torch import nn, Tensor
from torch.nn import functional as F
from typing import Any, Callable, Dict, List, Optional, Sequence


# -- torchvision/models/mobilenetv2.py (0.9) --
def _make_divisible(v: float, divisor: int, min_value: Optional[int] = None) -> int:
    """
    This function is taken from the original tf repo.
    It ensures that all layers have a channel number that is divisible by 8
    It can be seen here:
    https://github.com/tensorflow/models/blob/master/research/slim/nets/mobilenet/mobilenet.py
    """
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    # Make sure that round down does not go down by more than 10%.
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNActivation(nn.Sequential):
    def __init__(
        self,
        in_planes: int,
        out_planes: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
        norm_layer: Optional[Callable[..., nn.Module]] = None,
        activation_layer: Optional[Callable[..., nn.Module]] = None,
        dilation: int = 1,
    ) -> None:
        padding = (kernel_size - 1) // 2 * dilation
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if activation_layer is None:
            activation_layer = nn.ReLU6
        super(ConvBNReLU, self).__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, dilation=dilation, groups=groups,
                      bias=False),
            norm_layer(out_planes),
            activation_layer(inplace=True)
        )
        self.out_channels = out_planes


# necessary for backwards compatibility
ConvBNReLU = ConvBNActivation


# -- torchvision/models/mobilenetv3.py (0.9) --
__all__ = ["MobileNetV3", "mobilenet_v3_large", "mobilenet_v3_small"]


model_urls = {
    "mobilenet_v3_large": "https://download.pytorch.org/models/mobilenet_v3_large-8738ca79.pth",
    "mobilenet_v3_small": "https://download.pytorch.org/models/mobilenet_v3_small-047dcff4.pth",
}


class SqueezeExcitation(nn.Module):

    def __init__(self, input_channels: int, squeeze_factor: int = 4):
        super().__init__()
        squeeze_channels = _make_divisible(input_channels // squeeze_factor, 8)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)

    def _scale(self, input: Tensor, inplace: bool) -> Tensor:
        scale = F.adaptive_avg_pool2d(input, 1)
        scale = self.fc1(scale)
        scale = self.relu(scale)
        scale = self.fc2(scale)
        return F.hardsigmoid(scale, inplace=inplace)

    def forward(self, input: Tensor) -> Tensor:
        scale = self._scale(input, True)
        return scale * input


class InvertedResidualConfig:

    def __init__(self, input_channels: int, kernel: int, expanded_channels: int, out_channels: int, use_se: bool,
                 activation: str, stride: int, dilation: int, width_mult: float):
        self.input_channels = self.adjust_channels(input_channels, width_mult)
        self.kernel = kernel
        self.expanded_channels = self.adjust_channels(expanded_channels, width_mult)
        self.out_channels = self.adjust_channels(out_channels, width_mult)
        self.use_se = use_se
        self.use_hs = activation == "HS"
        self.stride = stride
        self.dilation = dilation

    @staticmethod
    def adjust_channels(channels: int, width_mult: float):
        return _make_divisible(channels * width_mult, 8)


class InvertedResidual(nn.Module):

    def __init__(self, cnf: InvertedResidualConfig, norm_layer: Callable[..., nn.Module],
                 se_layer: Callable[..., nn.Module] = SqueezeExcitation):
        super().__init__()
        if not (1 <= cnf.stride <= 2):
            raise ValueError('illegal stride value')

        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels

        layers: List[nn.Module] = []
        activation_layer = nn.Hardswish if cnf.use_hs else nn.ReLU

        # expand
        if cnf.expanded_channels != cnf.input_channels:
            layers.append(ConvBNActivation(cnf.input_channels, cnf.expanded_channels, kernel_size=1,
                                           norm_layer=norm_layer, activation_layer=activation_layer))

        # depthwise
        stride = 1 if cnf.dilation > 1 else cnf.stride
        layers.append(ConvBNActivation(cnf.expanded_channels, cnf.expanded_channels, kernel_size=cnf.kernel,
                                       stride=stride, dilation=cnf.dilation, groups=cnf.expanded_channels,
                                       norm_layer=norm_layer, activation_layer=activation_layer))
        if cnf.use_se:
            layers.append(se_layer(cnf.expanded_channels))

        # project
        layers.append(ConvBNActivation(cnf.expanded_channels, cnf.out_channels, kernel_size=1, norm_layer=norm_layer,
                                       activation_layer=nn.Identity))

        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels
        self._is_cn = cnf.stride > 1

    def forward(self, input: Tensor) -> Tensor:
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


class MobileNetV3(nn.Module):

    def __init__(
            self,
            inverted_residual_setting: List[InvertedResidualConfig],
            last_channel: int,
            num_classes: int = 1000,
            block: Optional[Callable[..., nn.Module]] = None,
            norm_layer: Optional[Callable[..., nn.Module]] = None
    ) -> None:
        """
        MobileNet V3 main class
        """
        super().__init__()

        if not inverted_residual_setting:
            raise ValueError("The inverted_residual_setting should not be empty")
        elif not (isinstance(inverted_residual_setting, Sequence) and
                  all([isinstance(s, InvertedResidualConfig) for s in inverted_residual_setting])):
            raise TypeError("The inverted_residual_setting should be List[InvertedResidualConfig]")

        if block is None:
            block = InvertedResidual

        if norm_layer is None:
            norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)

        layers: List[nn.Module] = []

        # building first layer
        firstconv_output_channels = inverted_residual_setting[0].input_channels
        layers.append(ConvBNActivation(3, firstconv_output_channels, kernel_size=3, stride=2, norm_layer=norm_layer,
                                       activation_layer=nn.Hardswish))

        # building inverted residual blocks
        for cnf in inverted_residual_setting:
            layers.append(block(cnf, norm_layer))

        # building last several layers
        lastconv_input_channels = inverted_residual_setting[-1].out_channels
        lastconv_output_channels = 6 * lastconv_input_channels
        layers.append(ConvBNActivation(lastconv_input_channels, lastconv_output_channels, kernel_size=1,
                                       norm_layer=norm_layer, activation_layer=nn.Hardswish))

        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(lastconv_output_channels, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=0.2, inplace=True),
            nn.Linear(last_channel, num_classes),
        )

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out')
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def _forward_impl(self, x: Tensor) -> Tensor:
        x = self.features(x)

        x = self.avgpool(x)
        x = torch.flatten(x, 1)

        x = self.classifier(x)

        return x

    def forward(self, x: Tensor) -> Tensor:
        return self._forward_impl(x)


def _mobilenet_v3_conf(arch: str, params: Dict[str, Any]):
    # non-public config parameters
    reduce_divider = 2 if params.pop('_reduced_tail', False) else 1
    dilation = 2 if params.pop('_dilated', False) else 1
    width_mult = params.pop('_width_mult', 1.0)

    bneck_conf = partial(InvertedResidualConfig, width_mult=width_mult)
    adjust_channels = partial(InvertedResidualConfig.adjust_channels, width_mult=width_mult)

    if arch == "mobilenet_v3_large":
        inverted_residual_setting = [
            bneck_conf(16, 3, 16, 16, False, "RE", 1, 1),
            bneck_conf(16, 3, 64, 24, False, "RE", 2, 1),  # C1
            bneck_conf(24, 3, 72, 24, False, "RE", 1, 1),
            bneck_conf(24, 5, 72, 40, True, "RE", 2, 1),  # C2
            bneck_conf(40, 5, 120, 40, True, "RE", 1, 1),
            bneck_conf(40, 5, 120, 40, True, "RE", 1, 1),
            bneck_conf(40, 3, 240, 80, False, "HS", 2, 1),  # C3
            bneck_conf(80, 3, 200, 80, False, "HS", 1, 1),
            bneck_conf(80, 3, 184, 80, False, "HS", 1, 1),
            bneck_conf(80, 3, 184, 80, False, "HS", 1, 1),
            bneck_conf(80, 3, 480, 112, True, "HS", 1, 1),
            bneck_conf(112, 3, 672, 112, True, "HS", 1, 1),
            bneck_conf(112, 5, 672, 160 // reduce_divider, True, "HS", 2, dilation),  # C4
            bneck_conf(160 // reduce_divider, 5, 960 // reduce_divider, 160 // reduce_divider, True, "HS", 1, dilation),
            bneck_conf(160 // reduce_divider, 5, 960 // reduce_divider, 160 // reduce_divider, True, "HS", 1, dilation),
        ]
        last_channel = adjust_channels(1280 // reduce_divider)  # C5
    elif arch == "mobilenet_v3_small":
        inverted_residual_setting = [
            bneck_conf(16, 3, 16, 16, True, "RE", 2, 1),  # C1
            bneck_conf(16, 3, 72, 24, False, "RE", 2, 1),  # C2
            bneck_conf(24, 3, 88, 24, False, "RE", 1, 1),
            bneck_conf(24, 5, 96, 40, True, "HS", 2, 1),  # C3
            bneck_conf(40, 5, 240, 40, True, "HS", 1, 1),
            bneck_conf(40, 5, 240, 40, True, "HS", 1, 1),
            bneck_conf(40, 5, 120, 48, True, "HS", 1, 1),
            bneck_conf(48, 5, 144, 48, True, "HS", 1, 1),
            bneck_conf(48, 5, 288, 96 // reduce_divider, True, "HS", 2, dilation),  # C4
            bneck_conf(96 // reduce_divider, 5, 576 // reduce_divider, 96 // reduce_divider, True, "HS", 1, dilation),
            bneck_conf(96 // reduce_divider, 5, 576 // reduce_divider, 96 // reduce_divider, True, "HS", 1, dilation),
        ]
        last_channel = adjust_channels(1024 // reduce_divider)  # C5
    else:
        raise ValueError("Unsupported model type {}".format(arch))

    return inverted_residual_setting, last_channel


def _mobilenet_v3_model(
    arch: str,
    inverted_residual_setting: List[InvertedResidualConfig],
    last_channel: int,
    pretrained: bool,
    progress: bool,
    **kwargs: Any
):
    model = MobileNetV3(inverted_residual_setting, last_channel, **kwargs)
    if pretrained:
        raise ValueError("no download here")
    return model


def mobilenet_v3_small(pretrained: bool = False, progress: bool = True, **kwargs: Any) -> MobileNetV3:
    arch = "mobilenet_v3_small"
    inverted_residual_setting, last_channel = _mobilenet_v3_conf(arch, kwargs)
    return _mobilenet_v3_model(arch, inverted_residual_setting, last_channel, pretrained, progress, **kwargs)


# -- a few steps of training (the test's), then evaluation --
model = mobilenet_v3_small(num_classes=5, _width_mult=0.25, _reduced_tail=True, _dilated=dilated)
model.classifier[2].p = 0.0  # (the dropout masks would be each library's own)
initialize(model)  # (the harness: torch's initial weights in both runs)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5)
for images, target in batches:
    output = model(images)
    loss = criterion(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
model.eval()
with torch.no_grad():
    record.append(model(batches[0][0]).numpy())
record.append(params_of(model))
record.append({k: v.numpy() for k, v in model.state_dict().items() if "running" in k})
'''

MOBILENETV3_STEPS = [
    (
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n",
        "    optimizer.zero_grad()\n    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    (
        "from torch import nn, Tensor\nfrom torch.nn import functional as F\n",
        "from retrograd import nn, Tensor\nfrom retrograd.nn import functional as F\n",
    ),
]


def test_torchvision_mobilenet_v3_trains_as_torch(capsys):
    dilated = True  # (the last stage dilated; the stages before it are the default blocks)
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


# -- pytorch/examples' vision transformer --------------------------------------------------------------
VIT_SOURCE = """
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torch import optim
import numpy as np
from torch.hub import tqdm


class PatchExtractor(nn.Module):
    def __init__(self, patch_size=16):
        super().__init__()
        self.patch_size = patch_size

    def forward(self, input_data):
        batch_size, channels, height, width = input_data.size()
        assert height % self.patch_size == 0 and width % self.patch_size == 0, \\
            f"Input height ({height}) and width ({width}) must be divisible by patch size ({self.patch_size})"

        num_patches_h = height // self.patch_size
        num_patches_w = width // self.patch_size
        num_patches = num_patches_h * num_patches_w

        patches = input_data.unfold(2, self.patch_size, self.patch_size). \\
            unfold(3, self.patch_size, self.patch_size). \\
            permute(0, 2, 3, 1, 4, 5). \\
            contiguous(). \\
            view(batch_size, num_patches, -1)

        # Expected shape of a patch on default settings is (4, 196, 768)

        return patches


class InputEmbedding(nn.Module):

    def __init__(self, args):
        super(InputEmbedding, self).__init__()
        self.patch_size = args.patch_size
        self.n_channels = args.n_channels
        self.latent_size = args.latent_size
        use_cuda = not args.no_cuda and torch.cuda.is_available()
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.batch_size = args.batch_size
        self.input_size = self.patch_size * self.patch_size * self.n_channels

        # Linear projection
        self.LinearProjection = nn.Linear(self.input_size, self.latent_size)
        # Class token
        self.class_token = nn.Parameter(torch.randn(self.batch_size, 1, self.latent_size).to(self.device))
        # Positional embedding
        self.pos_embedding = nn.Parameter(torch.randn(self.batch_size, 1, self.latent_size).to(self.device))

    def forward(self, input_data):
        input_data = input_data.to(self.device)
        # Patchifying the Image
        patchify = PatchExtractor(patch_size=self.patch_size)
        patches = patchify(input_data)

        linear_projection = self.LinearProjection(patches).to(self.device)
        b, n, _ = linear_projection.shape
        linear_projection = torch.cat((self.class_token, linear_projection), dim=1)
        pos_embed = self.pos_embedding[:, :n + 1, :]
        linear_projection += pos_embed

        return linear_projection


class EncoderBlock(nn.Module):

    def __init__(self, args):
        super(EncoderBlock, self).__init__()

        self.latent_size = args.latent_size
        self.num_heads = args.num_heads
        self.dropout = args.dropout
        self.norm = nn.LayerNorm(self.latent_size)
        self.attention = nn.MultiheadAttention(self.latent_size, self.num_heads, dropout=self.dropout)
        self.enc_MLP = nn.Sequential(
            nn.Linear(self.latent_size, self.latent_size * 4),
            nn.GELU(),
            nn.Dropout(self.dropout),
            nn.Linear(self.latent_size * 4, self.latent_size),
            nn.Dropout(self.dropout)
        )

    def forward(self, emb_patches):
        first_norm = self.norm(emb_patches)
        attention_out = self.attention(first_norm, first_norm, first_norm)[0]
        first_added = attention_out + emb_patches
        second_norm = self.norm(first_added)
        mlp_out = self.enc_MLP(second_norm)
        output = mlp_out + first_added

        return output


class ViT(nn.Module):
    def __init__(self, args):
        super(ViT, self).__init__()

        self.num_encoders = args.num_encoders
        self.latent_size = args.latent_size
        self.num_classes = args.num_classes
        self.dropout = args.dropout

        self.embedding = InputEmbedding(args)
        # Encoder Stack
        self.encoders = nn.ModuleList([EncoderBlock(args) for _ in range(self.num_encoders)])
        self.MLPHead = nn.Sequential(
            nn.LayerNorm(self.latent_size),
            nn.Linear(self.latent_size, self.latent_size),
            nn.Linear(self.latent_size, self.num_classes),
        )

    def forward(self, test_input):
        enc_output = self.embedding(test_input)
        for enc_layer in self.encoders:
            enc_output = enc_layer(enc_output)

        class_token_embed = enc_output[:, 0]
        return self.MLPHead(class_token_embed)


class TrainEval:

    def __init__(self, args, model, train_dataloader, val_dataloader, optimizer, criterion, device):
        self.model = model
        self.train_dataloader = train_dataloader
        self.val_dataloader = val_dataloader
        self.optimizer = optimizer
        self.criterion = criterion
        self.epoch = args.epochs
        self.device = device
        self.args = args

    def train_fn(self, current_epoch):
        self.model.train()
        total_loss = 0.0
        tk = tqdm(self.train_dataloader, desc="EPOCH" + "[TRAIN]" + str(current_epoch + 1) + "/" + str(self.epoch))

        for t, data in enumerate(tk):
            images, labels = data
            images, labels = images.to(self.device), labels.to(self.device)
            self.optimizer.zero_grad()
            logits = self.model(images)
            loss = self.criterion(logits, labels)
            loss.backward()
            self.optimizer.step()

            total_loss += loss.item()
            tk.set_postfix({"Loss": "%6f" % float(total_loss / (t + 1))})
            if self.args.dry_run:
                break

        return total_loss / len(self.train_dataloader)

    def eval_fn(self, current_epoch):
        self.model.eval()
        total_loss = 0.0
        tk = tqdm(self.val_dataloader, desc="EPOCH" + "[VALID]" + str(current_epoch + 1) + "/" + str(self.epoch))

        for t, data in enumerate(tk):
            images, labels = data
            images, labels = images.to(self.device), labels.to(self.device)

            logits = self.model(images)
            loss = self.criterion(logits, labels)

            total_loss += loss.item()
            tk.set_postfix({"Loss": "%6f" % float(total_loss / (t + 1))})
            if self.args.dry_run:
                break

        return total_loss / len(self.val_dataloader)

    def train(self):
        best_valid_loss = np.inf
        best_train_loss = np.inf
        for i in range(self.epoch):
            train_loss = self.train_fn(i)
            val_loss = self.eval_fn(i)
            record.append((train_loss, val_loss))

            if val_loss < best_valid_loss:
                torch.save(self.model.state_dict(), "best-weights.pt")
                print("Saved Best Weights")
                best_valid_loss = val_loss
                best_train_loss = train_loss
        print(f"Training Loss : {best_train_loss}")
        print(f"Valid Loss : {best_valid_loss}")


def main():
    parser = argparse.ArgumentParser(description='Vision Transformer in PyTorch')
    parser.add_argument('--no-cuda', action='store_true', default=False,
                        help='disables CUDA training')
    parser.add_argument('--patch-size', type=int, default=16,
                        help='patch size for images (default : 16)')
    parser.add_argument('--latent-size', type=int, default=768,
                        help='latent size (default : 768)')
    parser.add_argument('--n-channels', type=int, default=3,
                        help='number of channels in images (default : 3 for RGB)')
    parser.add_argument('--num-heads', type=int, default=12,
                        help='(default : 16)')
    parser.add_argument('--num-encoders', type=int, default=12,
                        help='number of encoders (default : 12)')
    parser.add_argument('--dropout', type=int, default=0.1,
                        help='dropout value (default : 0.1)')
    parser.add_argument('--img-size', type=int, default=224,
                        help='image size to be reshaped to (default : 224')
    parser.add_argument('--num-classes', type=int, default=10,
                        help='number of classes in dataset (default : 10 for CIFAR10)')
    parser.add_argument('--epochs', type=int, default=10,
                        help='number of epochs (default : 10)')
    parser.add_argument('--lr', type=float, default=1e-2,
                        help='base learning rate (default : 0.01)')
    parser.add_argument('--weight-decay', type=int, default=3e-2,
                        help='weight decay value (default : 0.03)')
    parser.add_argument('--batch-size', type=int, default=4,
                        help='batch size (default : 4)')
    parser.add_argument('--dry-run', action='store_true', default=False,
                        help='quickly check a single pass')
    args = parser.parse_args(argv)

    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    # (CIFAR10 resized: random images; shuffle=True would draw each library's own order)
    train_data = torch.utils.data.TensorDataset(torch.tensor(images[:8]), torch.tensor(labels[:8]))
    valid_data = torch.utils.data.TensorDataset(torch.tensor(images[8:]), torch.tensor(labels[8:]))
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=False)
    valid_loader = DataLoader(valid_data, batch_size=args.batch_size, shuffle=False)

    model = ViT(args).to(device)
    initialize(model)  # (the harness: torch's initial weights in both runs)

    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    criterion = nn.CrossEntropyLoss()

    TrainEval(args, model, train_loader, valid_loader, optimizer, criterion, device).train()
    record.append(params_of(model))


if __name__ == "__main__":
    main()
"""

VIT_STEPS = [
    (
        "            loss.backward()\n            self.optimizer.step()\n",
        "            grads = loss.backward()\n            self.optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("from torch import optim\n", "from retrograd import optim\n"),
]


def test_examples_vision_transformer_trains_as_torch(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (it saves best-weights.pt where it runs)
    rng = np.random.default_rng(89)
    images = rng.uniform(size=(12, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 10, 12)
    argv = "--patch-size 8 --latent-size 16 --num-heads 2 --num-encoders 2 --dropout 0 --img-size 32 --epochs 2 --lr 0.001"
    weights = initializer()
    records, logs = runs_with_draws(
        VIT_SOURCE,
        VIT_STEPS,
        capsys,
        seed=89,
        params_of=params_of,
        argv=argv.split(),
        images=images,
        labels=labels,
        __name__="__main__",
        make_initialize=lambda lib: weights,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("Saved Best Weights") == logs[1].count("Saved Best Weights") >= 1
    # the key bias (in_proj_bias[16:32]) adds the same q . b_k to every score of a row, which the
    # softmax removes: its true gradient is 0 and Adam's steps follow the rounding noise
    biases = [f"0.encoders.{i}.attention.in_proj_bias" for i in range(2)]
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


# -- minGRU --------------------------------------------------------------------------------------------
MINGRU_SOURCE = """
# -- minGRU_pytorch/minGRU.py --
# https://arxiv.org/abs/2410.01201v1

import torch
import torch.nn.functional as F
from torch.nn import Linear, Identity, Module

def exists(v):
    return v is not None

# appendix B
# https://github.com/glassroom/heinsen_sequence

def heinsen_associative_scan_log(log_coeffs, log_values):
    a_star = log_coeffs.cumsum(dim = 1)
    log_h0_plus_b_star = (log_values - a_star).logcumsumexp(dim = 1)
    log_h = a_star + log_h0_plus_b_star
    return log_h.exp()

# appendix B.3

def g(x):
    return torch.where(x >= 0, x + 0.5, x.sigmoid())

def log_g(x):
    return torch.where(x >= 0, (F.relu(x) + 0.5).log(), -F.softplus(-x))

# log-space version of minGRU - B.3.1
# they enforce the hidden states to be positive

class minGRU(Module):
    def __init__(self, dim, expansion_factor = 1.):
        super().__init__()

        dim_inner = int(dim * expansion_factor)
        self.to_hidden_and_gate = Linear(dim, dim_inner * 2, bias = False)
        self.to_out = Linear(dim_inner, dim, bias = False) if expansion_factor != 1. else Identity()

    def forward(self, x, prev_hidden = None):
        seq_len = x.shape[1]
        hidden, gate = self.to_hidden_and_gate(x).chunk(2, dim = -1)

        if seq_len == 1:
            # handle sequential

            hidden = g(hidden)
            gate = gate.sigmoid()
            out = torch.lerp(prev_hidden, hidden, gate) if exists(prev_hidden) else (hidden * gate)
        else:
            # parallel

            log_coeffs = -F.softplus(gate)

            log_z = -F.softplus(-gate)
            log_tilde_h = log_g(hidden)
            log_values = log_z + log_tilde_h

            if exists(prev_hidden):
                log_values = torch.cat((log_g(prev_hidden), log_values), dim = 1)
                log_coeffs = F.pad(log_coeffs, (0, 0, 1, 0))

            out = heinsen_associative_scan_log(log_coeffs, log_values)
            out = out[:, -seq_len:]

        return self.to_out(out)

# -- minGRU_pytorch/minGRULM.py --
import torch
from torch import nn
import torch.nn.functional as F
from torch.nn import Module, ModuleList

# classes

class RMSNorm(Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return F.normalize(x, dim = -1) * self.scale * (self.gamma + 1)

def FeedForward(dim, mult = 4):
    dim_inner = int(dim * mult)
    return nn.Sequential(
        nn.Linear(dim, dim_inner),
        nn.GELU(),
        nn.Linear(dim_inner, dim)
    )

# main class

class minGRULM(Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        depth,
        ff_mult = 4,
        min_gru_expansion = 1.5
    ):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)

        self.layers = ModuleList([])

        for _ in range(depth):
            self.layers.append(ModuleList([
                RMSNorm(dim),
                minGRU(dim, expansion_factor = min_gru_expansion),
                RMSNorm(dim),
                FeedForward(dim, mult = ff_mult)
            ]))

        self.norm = RMSNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens, bias = False)

    def forward(
        self,
        x,
        return_loss = False
    ):

        if return_loss:
            x, labels = x[:, :-1], x[:, 1:]

        x = self.token_emb(x)

        for norm, mingru, ff_norm, ff in self.layers:

            x = mingru(norm(x)) + x

            x = ff(ff_norm(x)) + x

        embed = self.norm(x)
        logits = self.to_logits(embed)

        if not return_loss:
            return logits

        loss = F.cross_entropy(
            logits.transpose(1, 2),
            labels
        )

        return loss

# -- train.py's loop (its later version), smaller: random tokens for enwik8 (whose uint8 bytes and
# .cuda() calls are left out), gradient accumulation, clipping, validation --
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

NUM_BATCHES = 3
BATCH_SIZE = 2
GRAD_ACCUM_EVERY = 2
LEARNING_RATE = 1e-3
VALIDATE_EVERY = 2
SEQ_LEN = 12

def cycle(loader):
    while True:
        for data in loader:
            yield data

model = minGRULM(
    num_tokens = 32,
    dim = 16,
    depth = 2
)
initialize(model)  # (the harness: torch's initial weights in both runs)

data_train, data_val = torch.tensor(tokens[:200]), torch.tensor(tokens[200:])

class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        super().__init__()
        self.data = data
        self.seq_len = seq_len

    def __len__(self):
        return self.data.size(0) // self.seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq

train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
train_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
val_loader = DataLoader(val_dataset, batch_size = BATCH_SIZE)

optim = Adam(model.parameters(), lr = LEARNING_RATE)

train_loader = cycle(train_loader)
val_loader = cycle(val_loader)

for i in range(NUM_BATCHES):
    model.train()

    for _ in range(GRAD_ACCUM_EVERY):
        data = next(train_loader)

        loss = model(data, return_loss = True)

        (loss / GRAD_ACCUM_EVERY).backward()

    print(f"training loss: {loss.item():.3f}")
    record.append(loss.item())

    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)

    optim.step()
    optim.zero_grad()

    if i % VALIDATE_EVERY == 0:
        model.eval()
        with torch.no_grad():
            valid_data = next(val_loader)

            loss = model(valid_data, return_loss = True)
            print(f"validation loss: {loss.item():.3f}")
            record.append(loss.item())
record.append(params_of(model))

# the parallel scan against the sequential steps (README: one token at a time with prev_hidden)
mingru = minGRU(16)
initialize(mingru)
x = torch.randn(2, 6, 16)
parallel = mingru(x)
h, steps = None, []
for t in range(6):
    h = mingru(x[:, t:t + 1], prev_hidden = h)
    steps.append(h)
sequential = torch.cat(steps, dim = 1)
continued = mingru(x[:, 3:], prev_hidden = steps[2])
record.append(parallel.detach().numpy())
record.append(float((parallel - sequential).abs().max()))
record.append(continued.detach().numpy())
"""

MINGRU_STEPS = [
    (
        "        (loss / GRAD_ACCUM_EVERY).backward()\n",
        "        step_grads = (loss / GRAD_ACCUM_EVERY).backward()\n        grads = step_grads if _ == 0 else grads + step_grads\n",
    ),
    (
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n\n    optim.step()\n",
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.5)\n\n    optim.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\n",
    ),
    (
        "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\nimport retrograd.nn.functional as F\n",
    ),
]


def test_min_gru_language_model_trains_as_torch(capsys):
    tokens = np.random.default_rng(90).integers(0, 32, 300)
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
    assert logs[0] == logs[1] and logs[0].count("training loss") == 3
    assert theirs[-2] < 1e-5 and ours[-2] < 1e-5  # the scan is the recurrence, in both
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- stand-alone self-attention ------------------------------------------------------------------------
SASA_SOURCE = """
# -- attention.py --
import torch
import torch.nn as nn
import torch.nn.functional as F


class AttentionConv(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, groups=1, bias=False):
        super(AttentionConv, self).__init__()
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.groups = groups

        assert self.out_channels % self.groups == 0, "out_channels should be divided by groups. (example: out_channels: 40, groups: 4)"

        self.rel_h = nn.Parameter(torch.randn(out_channels // 2, 1, 1, kernel_size, 1))
        self.rel_w = nn.Parameter(torch.randn(out_channels // 2, 1, 1, 1, kernel_size))

        self.key_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)
        self.query_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)
        self.value_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)

    def forward(self, x):
        batch, channels, height, width = x.size()

        padded_x = F.pad(x, [self.padding, self.padding, self.padding, self.padding])
        q_out = self.query_conv(x)
        k_out = self.key_conv(padded_x)
        v_out = self.value_conv(padded_x)

        k_out = k_out.unfold(2, self.kernel_size, self.stride).unfold(3, self.kernel_size, self.stride)
        v_out = v_out.unfold(2, self.kernel_size, self.stride).unfold(3, self.kernel_size, self.stride)

        v_out_h, v_out_w = v_out.split(self.out_channels // 2, dim=1)
        v_out = torch.cat((v_out_h + self.rel_h, v_out_w + self.rel_w), dim=1)

        k_out = k_out.contiguous().view(batch, self.groups, self.out_channels // self.groups, height, width, -1)
        v_out = v_out.contiguous().view(batch, self.groups, self.out_channels // self.groups, height, width, -1)

        q_out = q_out.view(batch, self.groups, self.out_channels // self.groups, height, width, 1)

        out = q_out * k_out
        out = F.softmax(out, dim=-1)
        out = torch.einsum('bnchwk,bnchwk -> bnchw', out, v_out).view(batch, -1, height, width)

        return out


class AttentionStem(nn.Module):
    def __init__(self, img_size, in_channels, out_channels, kernel_size, stride=1, padding=0, groups=1, bias=False):
        super(AttentionStem, self).__init__()
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.groups = groups

        assert self.out_channels % self.groups == 0, "out_channels should be divided by groups. (example: out_channels: 40, groups: 4)"

        self.emb_a = nn.Parameter(torch.randn(self.out_channels // self.groups, img_size))
        self.emb_b = nn.Parameter(torch.randn(self.out_channels // self.groups, img_size))
        self.emb_mix = nn.Parameter(torch.randn(self.out_channels // self.groups, img_size, img_size))

        self.key_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)
        self.query_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)
        self.value_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias)

    def forward(self, x):
        batch, channels, height, width = x.size()

        padded_x = F.pad(x, [self.padding, self.padding, self.padding, self.padding])

        q_out = self.query_conv(x)
        k_out = self.key_conv(padded_x)
        v_out = self.value_conv(padded_x)

        k_out = k_out.unfold(2, self.kernel_size, self.stride).unfold(3, self.kernel_size, self.stride)
        v_out = v_out.unfold(2, self.kernel_size, self.stride).unfold(3, self.kernel_size, self.stride)

        k_out = k_out[:, :, :height, :width, :, :]
        v_out = v_out[:, :, :height, :width, :, :]

        k_out = k_out.contiguous().view(batch, self.groups, self.out_channels // self.groups, height, width, -1)
        v_out = v_out.contiguous().view(batch, self.groups, self.out_channels // self.groups, height, width, -1)

        emb_logit_a = torch.einsum('bnchwk,cw->bnchwk', v_out, self.emb_a)
        emb_logit_b = torch.einsum('bnchwk,ch->bnchwk', v_out, self.emb_b)
        emb_logit_mix = torch.einsum('bnchwk,chw->bnchwk', v_out, self.emb_mix)

        embedding = (emb_logit_a + emb_logit_b) * emb_logit_mix
        embedding = F.softmax(embedding, dim=-1)

        q_out = q_out.view(batch, self.groups, self.out_channels // self.groups, height, width, 1)

        out = q_out * k_out * embedding
        out = F.softmax(out, dim=-1)
        out = torch.einsum('bnchwk,bnchwk -> bnchw', out, v_out).view(batch, -1, height, width)

        return out


# -- model.py's Bottleneck --
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels, out_channels, stride=1, groups=1, base_width=64):
        super(Bottleneck, self).__init__()
        self.stride = stride
        width = int(out_channels * (base_width / 64.)) * groups

        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
        )
        self.conv2 = nn.Sequential(
            AttentionConv(width, width, kernel_size=7, padding=3, groups=8),
            nn.BatchNorm2d(width),
            nn.ReLU(),
        )
        self.conv3 = nn.Sequential(
            nn.Conv2d(width, self.expansion * out_channels, kernel_size=1, bias=False),
            nn.BatchNorm2d(self.expansion * out_channels),
        )

        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != self.expansion * out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, self.expansion * out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * out_channels)
            )

    def forward(self, x):
        out = self.conv1(x)
        out = self.conv2(out)
        out = self.conv3(out)
        if self.stride >= 2:
            out = F.avg_pool2d(out, (self.stride, self.stride))

        out += self.shortcut(x)
        out = F.relu(out)

        return out


# -- a small network of them (model.py's Model takes 64 to 2048 channels), a few SGD steps --
model = nn.Sequential(
    AttentionStem(img_size=8, in_channels=3, out_channels=16, kernel_size=4, stride=1, padding=2, groups=2),
    nn.BatchNorm2d(16),
    nn.ReLU(),
    Bottleneck(16, 8, stride=1),
    Bottleneck(32, 8, stride=2),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(32, 10),
)
initialize(model)  # (the harness: torch's initial weights in both runs)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
for data, target in batches:
    optimizer.zero_grad()
    output = model(data)
    loss = criterion(output, target)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
model.eval()
with torch.no_grad():
    record.append(model(batches[0][0]).numpy())
record.append(params_of(model))
"""

SASA_STEPS = [
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
]


def test_stand_alone_self_attention_trains_as_torch(capsys):
    rng = np.random.default_rng(91)
    images = rng.standard_normal((2, 4, 3, 8, 8)).astype(np.float32)
    targets = rng.integers(0, 10, (2, 4))
    weights = initializer()
    records, _ = runs_with_draws(
        SASA_SOURCE,
        SASA_STEPS,
        capsys,
        seed=91,
        params_of=params_of,
        make_initialize=lambda lib: weights,
        make_batches=lambda lib: [(lib.tensor(x), lib.tensor(y)) for x, y in zip(images, targets)],
    )
    ours, theirs = records[1], records[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
