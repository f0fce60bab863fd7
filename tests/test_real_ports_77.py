# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- an imbalanced text classifier fed through ``torch.utils.data`` machinery as its libraries
  write it: ufoym/imbalanced-dataset-sampler's ``ImbalancedDatasetSampler`` (v0.1,
  ``torchsampler/imbalanced.py``: a ``torch.utils.data.sampler.Sampler`` counting labels
  through ``callback_get_label``, ``torch.DoubleTensor`` of inverse counts, and ``__iter__``
  returning ``(self.indices[i] for i in torch.multinomial(self.weights, self.num_samples,
  replacement=True))``, a list indexed by 0-d tensors) or, the other way the forums give,
  ``WeightedRandomSampler(samples_weight, len(samples_weight))`` of ``torch.tensor([(target ==
  t).sum() for t in torch.unique(target, sorted=True)])`` counts and ``torch.tensor([weight[t]
  for t in target])``; PyTorch-NLP's ``SortedSampler`` and ``BucketBatchSampler``
  (``torchnlp/samplers``: a ``BatchSampler`` subclass calling ``super().__init__``, batching
  its sampler into buckets by an inner ``BatchSampler``, sorting each bucket by length and
  shuffling the bucket's batches through ``SubsetRandomSampler(list(BatchSampler(...)))``, its
  own ``__len__``) as the ``DataLoader``'s ``batch_sampler`` (``SortedSampler``'s
  ``super().__init__(data)`` made ``super().__init__()``: torch 2.2 dropped the argument); two datasets joined by
  ``ConcatDataset`` and a validation ``Subset`` of a ``range``; the ``pad_collate`` of the
  "pad pack sequences" recipe (``zip(*batch)``, ``pad_sequence(xx, batch_first=True,
  padding_value=0)``, lengths as a Python list); a bidirectional LSTM over
  ``pack_padded_sequence(..., enforce_sorted=False)`` whose ``h_n[-2]``/``h_n[-1]`` and a
  length-masked mean of ``pad_packed_sequence``'s output feed the classifier; gradient
  accumulation over ``(i + 1) % accumulation_steps == 0 or (i + 1) == len(train_loader)``
  (ported as a sum of ``Gradients``) with ``clip_grad_norm_``; evaluation under
  ``@torch.no_grad()``. The samplers' draws (``torch.multinomial``, ``torch.randperm``) come
  from one seeded stream in both runs.
"""

from __future__ import annotations

import functools
import importlib
import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


IMBALANCED_SOURCE = """
import math
import torch
import torch.nn as nn
import torch.utils.data
from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence, pad_packed_sequence
from torch.utils.data import Dataset, DataLoader, ConcatDataset, Subset
from torch.utils.data.sampler import Sampler, BatchSampler, SubsetRandomSampler, WeightedRandomSampler


# -- ufoym/imbalanced-dataset-sampler: torchsampler/imbalanced.py (v0.1) -------------------------
class ImbalancedDatasetSampler(torch.utils.data.sampler.Sampler):
    \"\"\"Samples elements randomly from a given list of indices for imbalanced dataset
    Arguments:
        indices (list, optional): a list of indices
        num_samples (int, optional): number of samples to draw
        callback_get_label func: a callback-like function which takes two arguments - dataset and index
    \"\"\"

    def __init__(self, dataset, indices=None, num_samples=None, callback_get_label=None):

        # if indices is not provided,
        # all elements in the dataset will be considered
        self.indices = list(range(len(dataset))) \\
            if indices is None else indices

        # define custom callback
        self.callback_get_label = callback_get_label

        # if num_samples is not provided,
        # draw `len(indices)` samples in each iteration
        self.num_samples = len(self.indices) \\
            if num_samples is None else num_samples

        # distribution of classes in the dataset
        label_to_count = {}
        for idx in self.indices:
            label = self._get_label(dataset, idx)
            if label in label_to_count:
                label_to_count[label] += 1
            else:
                label_to_count[label] = 1

        # weight for each sample
        weights = [1.0 / label_to_count[self._get_label(dataset, idx)]
                   for idx in self.indices]
        self.weights = torch.DoubleTensor(weights)

    def _get_label(self, dataset, idx):
        if self.callback_get_label:
            return self.callback_get_label(dataset, idx)
        elif isinstance(dataset, torchvision.datasets.MNIST):
            return dataset.train_labels[idx].item()
        elif isinstance(dataset, torchvision.datasets.ImageFolder):
            return dataset.imgs[idx][1]
        elif isinstance(dataset, torch.utils.data.Subset):
            return dataset.dataset.imgs[idx][1]
        else:
            raise NotImplementedError

    def __iter__(self):
        return (self.indices[i] for i in torch.multinomial(
            self.weights, self.num_samples, replacement=True))

    def __len__(self):
        return self.num_samples


# -- PyTorch-NLP: torchnlp/utils.py, torchnlp/samplers/sorted_sampler.py, bucket_batch_sampler.py --
def identity(x):
    return x


class SortedSampler(Sampler):
    \"\"\" Samples elements sequentially, always in the same order.

    Args:
        data (iterable): Iterable data.
        sort_key (callable): Specifies a function of one argument that is used to extract a
            numerical comparison key from each list element.
    \"\"\"

    def __init__(self, data, sort_key=identity):
        super().__init__()
        self.data = data
        self.sort_key = sort_key
        zip_ = [(i, self.sort_key(row)) for i, row in enumerate(self.data)]
        zip_ = sorted(zip_, key=lambda r: r[1])
        self.sorted_indexes = [item[0] for item in zip_]

    def __iter__(self):
        return iter(self.sorted_indexes)

    def __len__(self):
        return len(self.data)


class BucketBatchSampler(BatchSampler):
    \"\"\" `BucketBatchSampler` toggles between `sampler` batches and sorted batches.

    Typically, the `sampler` will be a `RandomSampler` allowing the user to toggle between
    random batches and sorted batches. A larger `bucket_size_multiplier` is more sorted and vice
    versa.
    \"\"\"

    def __init__(self,
                 sampler,
                 batch_size,
                 drop_last,
                 sort_key=identity,
                 bucket_size_multiplier=100):
        super().__init__(sampler, batch_size, drop_last)
        self.sort_key = sort_key
        _bucket_size = batch_size * bucket_size_multiplier
        if hasattr(sampler, "__len__"):
            _bucket_size = min(_bucket_size, len(sampler))
        self.bucket_sampler = BatchSampler(sampler, _bucket_size, False)

    def __iter__(self):
        for bucket in self.bucket_sampler:
            sorted_sampler = SortedSampler(bucket, self.sort_key)
            for batch in SubsetRandomSampler(
                    list(BatchSampler(sorted_sampler, self.batch_size, self.drop_last))):
                yield [bucket[i] for i in batch]

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        else:
            return math.ceil(len(self.sampler) / self.batch_size)


# -- the classifier --------------------------------------------------------------------------------
class ReviewDataset(Dataset):
    def __init__(self, sequences, labels):
        self.sequences = [torch.LongTensor(s) for s in sequences]
        self.labels = labels

    def __len__(self):
        return len(self.sequences)

    def __getitem__(self, idx):
        return self.sequences[idx], self.labels[idx]


def pad_collate(batch):
  (xx, yy) = zip(*batch)
  x_lens = [len(x) for x in xx]

  xx_pad = pad_sequence(xx, batch_first=True, padding_value=0)

  return xx_pad, torch.tensor(yy), x_lens


class LSTMClassifier(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_classes):
        super(LSTMClassifier, self).__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(4 * hidden_dim, num_classes)

    def forward(self, x, x_lens):
        x_embed = self.embedding(x)
        x_packed = pack_padded_sequence(x_embed, x_lens, batch_first=True, enforce_sorted=False)
        output_packed, (h_n, c_n) = self.lstm(x_packed)
        output_padded, output_lengths = pad_packed_sequence(output_packed, batch_first=True)
        # the last hidden state of each direction
        last = torch.cat((h_n[-2, :, :], h_n[-1, :, :]), dim=1)
        # and the mean over the real (unpadded) steps
        mask = (torch.arange(output_padded.size(1))[None, :] < output_lengths[:, None]).unsqueeze(-1)
        mean = (output_padded * mask).sum(1) / output_lengths.unsqueeze(1).float()
        return self.fc(torch.cat([last, mean], dim=1))


@torch.no_grad()
def evaluate(model, loader, criterion):
    model.eval()
    total_loss, correct, n = 0.0, 0, 0
    for xx_pad, yy, x_lens in loader:
        logits = model(xx_pad, x_lens)
        total_loss += criterion(logits, yy).item() * yy.size(0)
        correct += (logits.argmax(1) == yy).sum().item()
        n += yy.size(0)
    model.train()
    return total_loss / n, correct / n


def main(sources, val_data, sampler_kind, vocab_size, epochs=2, batch_size=4, accumulation_steps=2, lr=0.02):
    train_set = ConcatDataset([ReviewDataset(*source) for source in sources])
    if sampler_kind == 'imbalanced':
        sampler = ImbalancedDatasetSampler(train_set, callback_get_label=lambda dataset, idx: dataset[idx][1])
    else:
        target = torch.tensor([train_set[i][1] for i in range(len(train_set))])
        class_sample_count = torch.tensor([(target == t).sum() for t in torch.unique(target, sorted=True)])
        weight = 1. / class_sample_count.float()
        samples_weight = torch.tensor([weight[t] for t in target])
        sampler = WeightedRandomSampler(samples_weight, len(samples_weight))
    lengths = [len(seq) for seq, _ in train_set]
    batch_sampler = BucketBatchSampler(sampler, batch_size=batch_size, drop_last=False,
                                       sort_key=lambda i: lengths[i], bucket_size_multiplier=2)
    train_loader = DataLoader(train_set, batch_sampler=batch_sampler, collate_fn=pad_collate)
    val_set = Subset(ReviewDataset(*val_data), range(0, len(val_data[0]), 2))
    val_loader = DataLoader(val_set, batch_size=batch_size, shuffle=False, collate_fn=pad_collate)

    model = LSTMClassifier(vocab_size, embedding_dim=6, hidden_dim=5, num_classes=3)
    initialize(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    optimizer.zero_grad()
    for epoch in range(epochs):
        for i, (xx_pad, yy, x_lens) in enumerate(train_loader):
            record.append(yy.tolist())
            record.append(list(x_lens))
            logits = model(xx_pad, x_lens)
            loss = criterion(logits, yy) / accumulation_steps
            loss.backward()
            if (i + 1) % accumulation_steps == 0 or (i + 1) == len(train_loader):
                nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                optimizer.step()
                optimizer.zero_grad()
                record.append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})
            record.append(loss.item())
        val_loss, val_acc = evaluate(model, val_loader, criterion)
        record.append([val_loss, val_acc])
        print(f"epoch {epoch}: val loss {val_loss:.4f} acc {val_acc:.3f}")
"""

IMBALANCED_STEPS = [
    (
        "    optimizer.zero_grad()\n    for epoch in range(epochs):\n",
        "    optimizer.zero_grad()\n    grads = None\n    for epoch in range(epochs):\n",
    ),
    (
        "            loss.backward()\n            if (i + 1) % accumulation_steps == 0 or (i + 1) == len(train_loader):\n                nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n                optimizer.step()\n                optimizer.zero_grad()\n",
        "            g = loss.backward()\n            grads = g if grads is None else grads + g\n            if (i + 1) % accumulation_steps == 0 or (i + 1) == len(train_loader):\n                nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=1.0)\n                optimizer.step(grads)\n                optimizer.zero_grad()\n                grads = None\n",
    ),
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.utils.data\n",
        "import retrograd.nn as nn\nimport retrograd.utils.data\n",
    ),
]


class SharedSampling:
    """``torch.multinomial`` (1-d weights, with replacement) and ``torch.randperm`` of a
    library drawing from one seeded stream, also where its samplers look them up (torch's
    through the module ``torch``, retrograd's as names imported into its sampler module)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)
        self.homes = [lib] if lib is torch else [lib, rg_sampler]

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(int(n)), dtype=lib.int64)

        def multinomial(weights, num_samples, replacement=False, generator=None):
            assert replacement and weights.ndim == 1
            w = np.asarray(weights.numpy(), dtype=np.float64)
            cumulative = np.cumsum(w / w.sum())
            picks = (cumulative[None, :] < rng.uniform(size=(num_samples, 1))).sum(-1)
            return lib.tensor(np.minimum(picks, len(w) - 1), dtype=lib.int64)

        self.saved = [(home, home.randperm, home.multinomial) for home in self.homes]
        for home in self.homes:
            home.randperm, home.multinomial = randperm, multinomial
        return self

    def __exit__(self, *exc):
        for home, saved_randperm, saved_multinomial in self.saved:
            home.randperm, home.multinomial = saved_randperm, saved_multinomial
        return False


def _reviews(rng, counts, vocab_size):
    """Token sequences of lengths 2..7 (0 is the padding index), class ``c`` leaning on
    token ``c + 1``, ``counts[c]`` of each class in a shuffled order."""
    labels = [c for c, n in enumerate(counts) for _ in range(n)]
    rng.shuffle(labels)
    sequences = []
    for label in labels:
        tokens = rng.integers(1, vocab_size, rng.integers(2, 8)).tolist()
        tokens[rng.integers(0, len(tokens))] = label + 1
        sequences.append(tokens)
    return sequences, labels


@pytest.mark.parametrize("sampler_kind", ["imbalanced", "weighted"])
def test_imbalanced_bucketed_padded_lstm_classifier_matches_torch(capsys, sampler_kind):
    rng = np.random.default_rng(7701)
    vocab_size = 12
    sources = [_reviews(rng, (10, 3, 0), vocab_size), _reviews(rng, (3, 0, 2), vocab_size)]
    val_data = _reviews(rng, (4, 3, 3), vocab_size)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            IMBALANCED_SOURCE
            if lib is torch
            else port(IMBALANCED_SOURCE, IMBALANCED_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedSampling(lib, 7702):
            names["main"](sources, val_data, sampler_kind, vocab_size)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0].count("val loss") == 2
    # 18 samples drawn, buckets of 8, 8 and 2: five batches (the last one of 2) an epoch,
    # accumulated in pairs: three steps an epoch
    assert sum(isinstance(r, dict) for r in records[0]) == 6
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


MAMBA2_SOURCE = '''
"""
mamba2-minimal
==============

A minimal, single-file implementation of the Mamba-2 model in PyTorch.

> **Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured State Space Duality**
> Authors: Tri Dao, Albert Gu
> Paper: https://arxiv.org/abs/2405.21060
"""

import json
from dataclasses import dataclass
from typing import Iterable, NamedTuple, TypeAlias, cast

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import LongTensor, Tensor, nn

Device: TypeAlias = str | torch.device | None


@dataclass
class Mamba2Config:
    d_model: int  # model dimension (D)
    n_layer: int = 24  # number of Mamba-2 layers in the language model
    d_state: int = 128  # state dimension (N)
    d_conv: int = 4  # convolution kernel size
    expand: int = 2  # expansion factor (E)
    headdim: int = 64  # head dimension (P)
    chunk_size: int = 64  # matrix partition size (Q)
    vocab_size: int = 50277
    pad_vocab_size_multiple: int = 16

    def __post_init__(self):
        self.d_inner = self.expand * self.d_model
        assert self.d_inner % self.headdim == 0
        self.nheads = self.d_inner // self.headdim
        if self.vocab_size % self.pad_vocab_size_multiple != 0:
            self.vocab_size += (
                self.pad_vocab_size_multiple
                - self.vocab_size % self.pad_vocab_size_multiple
            )


class InferenceCache(NamedTuple):
    conv_state: Tensor  # (batch, d_inner + 2 * d_state, d_conv)
    ssm_state: Tensor  # (batch, nheads, headdim, d_state)

    @staticmethod
    def alloc(batch_size: int, args: Mamba2Config, device: Device = None):
        return InferenceCache(
            torch.zeros(
                batch_size, args.d_inner + 2 * args.d_state, args.d_conv, device=device
            ),
            torch.zeros(
                batch_size, args.nheads, args.headdim, args.d_state, device=device
            ),
        )


class Mamba2LMHeadModel(nn.Module):
    def __init__(self, args: Mamba2Config, device: Device = None):
        super().__init__()
        self.args = args
        self.device = device

        self.backbone = nn.ModuleDict(
            dict(
                embedding=nn.Embedding(args.vocab_size, args.d_model, device=device),
                layers=nn.ModuleList(
                    [
                        nn.ModuleDict(
                            dict(
                                mixer=Mamba2(args, device=device),
                                norm=RMSNorm(args.d_model, device=device),
                            )
                        )
                        for _ in range(args.n_layer)
                    ]
                ),
                norm_f=RMSNorm(args.d_model, device=device),
            )
        )
        self.lm_head = nn.Linear(
            args.d_model, args.vocab_size, bias=False, device=device
        )
        self.lm_head.weight = self.backbone.embedding.weight

    def forward(
        self, input_ids: LongTensor, h: list[InferenceCache] | list[None] | None = None
    ) -> tuple[LongTensor, list[InferenceCache]]:
        """
        Arguments
            input_ids: (batch, seqlen) tokens from `EleutherAI/gpt-neox-20b` tokenizer
            h: hidden states for inference step. If present the constant-time
               (wrt sequence length) inference path will be taken, input_ids
               should have shape (batch, 1) containing the next batch of prompt
               token.

        Return (logits, h)
            logits: (batch, seqlen, vocab_size)
            h: updated inference cache after processing `input_ids`
        """
        seqlen = input_ids.shape[1]

        if h is None:
            h = [None for _ in range(self.args.n_layer)]

        x = self.backbone.embedding(input_ids)
        for i, layer in enumerate(self.backbone.layers):
            y, h[i] = layer.mixer(layer.norm(x), h[i])
            x = y + x

        x = self.backbone.norm_f(x)
        logits = self.lm_head(x)
        return logits[:, :seqlen], cast(list[InferenceCache], h)

    def generate(
        self,
        input_ids: LongTensor,
        max_new_length: int = 20,
        temperature: float = 1.0,
        top_k: int = 50,
        top_p: float = 1.0,
        eos_token_id: int = 0,
    ) -> Iterable[tuple[int, list[InferenceCache]]]:
        prefix, tokens = input_ids[:-1], input_ids[-1:].unsqueeze(0)

        # Process prompt
        # The input sequence to forward (non-inference path) must have length multiple that of chunk_size.
        # We split out excess tokens so that n_chunked tokens can be processed by one forward call and
        # process the rest in multiple inference steps.
        n_chunked = (prefix.shape[0] // self.args.chunk_size) * self.args.chunk_size
        if n_chunked > 0:
            _, h = self(prefix[:n_chunked].unsqueeze(0), None)
        else:
            h = [
                InferenceCache.alloc(1, self.args, device=self.device)
                for _ in range(self.args.n_layer)
            ]
        for i in range(n_chunked, prefix.shape[0]):
            _, h = self(prefix[i : i + 1].unsqueeze(0), h)

        # Generate
        for _ in range(max_new_length):
            with torch.no_grad():
                out, h = self(tokens, h)
            logits = out[0, -1]
            if temperature != 1.0:
                logits = logits / temperature
            if top_k > 0:
                indices_to_remove = logits < torch.topk(logits, k=top_k)[0][-1]
                logits[indices_to_remove] = -torch.inf
            if top_p < 1.0:
                sorted_logits, sorted_indices = torch.sort(logits, descending=True)
                cum_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
                sorted_indices_to_remove = cum_probs > 0.5
                sorted_indices_to_remove[1:] = sorted_indices_to_remove[:-1].clone()
                sorted_indices_to_remove[0] = False
                indices_to_remove = sorted_indices[sorted_indices_to_remove]
                logits[indices_to_remove] = -torch.inf
            probs = F.softmax(logits, dim=-1)
            next_token = torch.multinomial(probs, num_samples=1)
            if next_token.item() == eos_token_id:
                return
            tokens = next_token.unsqueeze(0)
            yield cast(int, next_token.item()), h


class Mamba2(nn.Module):
    def __init__(self, args: Mamba2Config, device: Device = None):
        super().__init__()
        self.args = args
        self.device = device

        # Order: (z, x, B, C, dt)
        d_in_proj = 2 * args.d_inner + 2 * args.d_state + args.nheads
        self.in_proj = nn.Linear(args.d_model, d_in_proj, bias=False, device=device)

        conv_dim = args.d_inner + 2 * args.d_state
        self.conv1d = nn.Conv1d(
            in_channels=conv_dim,
            out_channels=conv_dim,
            kernel_size=args.d_conv,
            groups=conv_dim,
            padding=args.d_conv - 1,
            device=device,
        )

        self.dt_bias = nn.Parameter(torch.empty(args.nheads, device=device))
        self.A_log = nn.Parameter(torch.empty(args.nheads, device=device))
        self.D = nn.Parameter(torch.empty(args.nheads, device=device))
        self.norm = RMSNorm(args.d_inner, device=device)
        self.out_proj = nn.Linear(args.d_inner, args.d_model, bias=False, device=device)

    def forward(self, u: Tensor, h: InferenceCache | None = None):
        """
        Arguments
            u: (batch, seqlen, d_model) input. seqlen should be a multiple of chunk_size.
            h: hidden states for inference step. Initialized to 0s if not present.

        Return (y, h)
            y: (batch, seqlen, d_model) output
            h: updated inference cache after processing `u`
        """
        if h:
            return self.step(u, h)

        A = -torch.exp(self.A_log)  # (nheads,)
        zxbcdt = self.in_proj(u)  # (batch, seqlen, d_in_proj)
        z, xBC, dt = torch.split(
            zxbcdt,
            [
                self.args.d_inner,
                self.args.d_inner + 2 * self.args.d_state,
                self.args.nheads,
            ],
            dim=-1,
        )
        dt = F.softplus(dt + self.dt_bias)  # (batch, seqlen, nheads)

        # Pad or truncate xBC seqlen to d_conv
        conv_state = F.pad(
            rearrange(xBC, "b l d -> b d l"), (self.args.d_conv - u.shape[1], 0)
        )

        xBC = silu(
            self.conv1d(xBC.transpose(1, 2)).transpose(1, 2)[:, : u.shape[1], :]
        )  # (batch, seqlen, d_inner + 2 * d_state))
        x, B, C = torch.split(
            xBC, [self.args.d_inner, self.args.d_state, self.args.d_state], dim=-1
        )
        x = rearrange(x, "b l (h p) -> b l h p", p=self.args.headdim)
        y, ssm_state = ssd(
            x * dt.unsqueeze(-1),
            A * dt,
            rearrange(B, "b l n -> b l 1 n"),
            rearrange(C, "b l n -> b l 1 n"),
            self.args.chunk_size,
            device=self.device,
        )
        y = y + x * self.D.unsqueeze(-1)
        y = rearrange(y, "b l h p -> b l (h p)")
        y = self.norm(y, z)
        y = self.out_proj(y)

        h = InferenceCache(conv_state, ssm_state)
        return y, h

    def step(self, u: Tensor, h: InferenceCache) -> tuple[Tensor, InferenceCache]:
        """Take a single inference step for the current input and hidden state

        Unlike attention-based models, RNN-based models (eg Mamba) does not need
        to look back at all the past tokens to generate a new token. Instead a
        hidden state (initialized to 0s initially) is updated for each input and
        passed to the next inference step. This means that the total inference
        time is linear with respect to the sequence length instead of quadratic
        in attention's case.

        Arguments
            u: (batch, 1, d_model)
            h: initial/running hidden state

        Return (y, h)
            y: (batch, 1, d_model)
            h: updated hidden state
        """
        assert u.shape[1] == 1, "Only one token can be decoded per inference step"

        zxbcdt = self.in_proj(u.squeeze(1))  # (batch, d_in_proj)
        z, xBC, dt = torch.split(
            zxbcdt,
            [
                self.args.d_inner,
                self.args.d_inner + 2 * self.args.d_state,
                self.args.nheads,
            ],
            dim=-1,
        )

        # Advance convolution input
        h.conv_state.copy_(torch.roll(h.conv_state, shifts=-1, dims=-1))
        h.conv_state[:, :, -1] = xBC
        # Convolution step
        xBC = torch.sum(
            h.conv_state * rearrange(self.conv1d.weight, "d 1 w -> d w"), dim=-1
        )
        xBC += self.conv1d.bias
        xBC = silu(xBC)

        x, B, C = torch.split(
            xBC, [self.args.d_inner, self.args.d_state, self.args.d_state], dim=-1
        )
        A = -torch.exp(self.A_log)  # (nheads,)

        # SSM step
        dt = F.softplus(dt + self.dt_bias)  # (batch, nheads)
        dA = torch.exp(dt * A)  # (batch, nheads)
        x = rearrange(x, "b (h p) -> b h p", p=self.args.headdim)
        dBx = torch.einsum("bh, bn, bhp -> bhpn", dt, B, x)
        h.ssm_state.copy_(h.ssm_state * rearrange(dA, "b h -> b h 1 1") + dBx)
        y = torch.einsum("bhpn, bn -> bhp", h.ssm_state, C)
        y = y + rearrange(self.D, "h -> h 1") * x
        y = rearrange(y, "b h p -> b (h p)")
        y = self.norm(y, z)
        y = self.out_proj(y)

        return y.unsqueeze(1), h


def segsum(x: Tensor, device: Device = None) -> Tensor:
    """Stable segment sum calculation.

    `exp(segsum(A))` produces a 1-semiseparable matrix, which is equivalent to a scalar SSM.

    Source: https://github.com/state-spaces/mamba/blob/219f03c840d5a44e7d42e4e728134834fddccf45/mamba_ssm/modules/ssd_minimal.py#L23-L32
    """
    T = x.size(-1)
    x = repeat(x, "... d -> ... d e", e=T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=-1)
    x = x.masked_fill(~mask, 0)
    x_segsum = torch.cumsum(x, dim=-2)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=0)
    x_segsum = x_segsum.masked_fill(~mask, -torch.inf)
    return x_segsum


def ssd(x, A, B, C, chunk_size, initial_states=None, device: Device = None):
    """Structed State Space Duality (SSD) - the core of Mamba-2

    This is almost the exact same minimal SSD code from the blog post.

    Arguments
        x: (batch, seqlen, n_heads, d_head)
        A: (batch, seqlen, n_heads)
        B: (batch, seqlen, n_heads, d_state)
        C: (batch, seqlen, n_heads, d_state)

    Return
        y: (batch, seqlen, n_heads, d_head)

    Source
     1. https://tridao.me/blog/2024/mamba2-part3-algorithm/
     2. https://github.com/state-spaces/mamba/blob/219f03c840d5a44e7d42e4e728134834fddccf45/mamba_ssm/modules/ssd_minimal.py#L34-L78
    """
    assert x.shape[1] % chunk_size == 0

    # Rearrange into chunks
    # Step 1, 2 and 4 of SSD can be computed in parallel for each chunk across devices (sequence parallel)
    # This is not implemented and left as an exercise for the reader
    x, A, B, C = [
        rearrange(m, "b (c l) ... -> b c l ...", l=chunk_size) for m in (x, A, B, C)
    ]

    A = rearrange(A, "b c l h -> b h c l")
    A_cumsum = torch.cumsum(A, dim=-1)

    # 1. Compute the output for each intra-chunk (diagonal blocks)
    L = torch.exp(segsum(A, device=device))
    Y_diag = torch.einsum("bclhn, bcshn, bhcls, bcshp -> bclhp", C, B, L, x)

    # 2. Compute the state for each intra-chunk
    # (right term of low-rank factorization of off-diagonal blocks; B terms)
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
    states = torch.einsum("bclhn, bhcl, bclhp -> bchpn", B, decay_states, x)

    # 3. Compute the inter-chunk SSM recurrence; produces correct SSM states at chunk boundaries
    # (middle term of factorization of off-diag blocks; A terms)
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    states = torch.cat([initial_states, states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cumsum[:, :, :, -1], (1, 0)), device=device))
    new_states = torch.einsum("bhzc, bchpn -> bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]

    # 4. Compute state -> output conversion per chunk
    # (left term of low-rank factorization of off-diagonal blocks; C terms)
    state_decay_out = torch.exp(A_cumsum)
    Y_off = torch.einsum("bclhn, bchpn, bhcl -> bclhp", C, states, state_decay_out)

    # Add output of intra-chunk and inter-chunk terms (diagonal and off-diagonal blocks)
    Y = rearrange(Y_diag + Y_off, "b c l h p -> b (c l) h p")

    return Y, final_state


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5, device: Device = None):
        """Gated Root Mean Square Layer Normalization

        Paper: https://arxiv.org/abs/1910.07467
        """
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d, device=device))

    def forward(self, x, z=None):
        if z is not None:
            x = x * silu(z)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def silu(x):
    """Applies the Sigmoid Linear Unit (SiLU), element-wise.

    Define this manually since torch's version doesn't seem to work on MPS.
    """
    return x * F.sigmoid(x)


# -- training from scratch: the three torch.empty parameters initialised as mamba_ssm's
# -- Mamba2Simple initialises them, then a character model trained and sampled -----------------
def train(text, steps=3, batch_size=2, seqlen=8, lr=1e-2):
    chars = sorted(set(text))
    stoi = {c: i + 1 for i, c in enumerate(chars)}  # 0 is the end of text
    config = Mamba2Config(d_model=8, n_layer=2, d_state=4, d_conv=3, expand=2, headdim=4,
                          chunk_size=4, vocab_size=len(chars) + 1, pad_vocab_size_multiple=8)
    model = Mamba2LMHeadModel(config)
    for layer in model.backbone.layers:
        mixer = layer.mixer
        with torch.no_grad():
            dt = torch.exp(
                torch.rand(config.nheads) * (math.log(0.1) - math.log(0.001))
                + math.log(0.001)
            )
            dt = torch.clamp(dt, min=1e-4)
            # Inverse of softplus: https://github.com/pytorch/pytorch/issues/72759
            inv_dt = dt + torch.log(-torch.expm1(-dt))
            mixer.dt_bias.copy_(inv_dt)
            A = torch.empty(config.nheads, dtype=torch.float32).uniform_(1, 16)
            mixer.A_log.copy_(torch.log(A))
            mixer.D.fill_(1.0)
    initialize(model)
    record.append(config.vocab_size)

    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    for step in range(steps):
        ix = torch.randint(len(data) - seqlen - 1, (batch_size,))
        x = torch.stack([data[i:i + seqlen] for i in ix])
        y = torch.stack([data[i + 1:i + seqlen + 1] for i in ix])
        logits, _ = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        record.append(loss.item())
        record.append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})

    model.eval()
    prompt = torch.tensor([stoi[c] for c in text[:6]], dtype=torch.long)
    generated = []
    for token, h in model.generate(prompt, max_new_length=6, temperature=3.0, top_k=5, top_p=0.9):
        generated.append(token)
        record.append([cache.ssm_state.detach().numpy().copy() for cache in h])
        record.append([cache.conv_state.detach().numpy().copy() for cache in h])
    record.append(generated)
'''

MAMBA2_STEPS = [
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        optimizer.step()\n",
        "        grads = loss.backward()\n        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n        optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\n",
    ),
    (
        "from torch import LongTensor, Tensor, nn\n",
        "from retrograd import LongTensor, Tensor, nn\n",
    ),
]


class SharedMultinomial:
    """``torch.multinomial(probs, 1)`` of a 1-d ``probs`` drawing from one seeded stream (the
    inverse of the cumulative sums)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def multinomial(probs, num_samples, replacement=False, generator=None):
            assert num_samples == 1 and probs.ndim == 1
            p = np.asarray(probs.detach().numpy(), dtype=np.float64)
            pick = int((np.cumsum(p / p.sum()) < rng.uniform()).sum())
            return lib.tensor([min(pick, len(p) - 1)], dtype=lib.int64)

        self.saved = lib.multinomial
        lib.multinomial = multinomial
        return self

    def __exit__(self, *exc):
        self.lib.multinomial = self.saved
        return False


def test_mamba2_minimal_trains_by_chunked_ssd_and_samples_by_its_recurrent_step_as_torch():
    text = "the cat sat on the mat and the cat ran to the hat. "
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = MAMBA2_SOURCE if lib is torch else port(MAMBA2_SOURCE, MAMBA2_STEPS)
        with SharedDraws(lib, 7711), SharedMultinomial(lib, 7712):
            names = run_source(source, lib, record=record, initialize=initialize)
            names["train"](text)
        records.append(record)
    assert len(set(records[0][-1])) > 1 and len(records[0][-1]) == 6  # no end of text
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


RTDL_SOURCE = '''
import enum
import math
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union, cast

import scipy.special
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

ModuleType = Union[str, Callable[..., nn.Module]]
_INTERNAL_ERROR_MESSAGE = 'Internal error. Please, open an issue.'


# -- rtdl/modules.py (rtdl 0.0.13) ---------------------------------------------------------------
def _is_glu_activation(activation: ModuleType):
    return (
        isinstance(activation, str)
        and activation.endswith('GLU')
        or activation in [ReGLU, GEGLU]
    )


def _all_or_none(values):
    return all(x is None for x in values) or all(x is not None for x in values)


def reglu(x: Tensor) -> Tensor:
    """The ReGLU activation function from [shazeer2020glu]."""
    assert x.shape[-1] % 2 == 0
    a, b = x.chunk(2, dim=-1)
    return a * F.relu(b)


def geglu(x: Tensor) -> Tensor:
    """The GEGLU activation function from [shazeer2020glu]."""
    assert x.shape[-1] % 2 == 0
    a, b = x.chunk(2, dim=-1)
    return a * F.gelu(b)


class ReGLU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return reglu(x)


class GEGLU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return geglu(x)


class _TokenInitialization(enum.Enum):
    UNIFORM = 'uniform'
    NORMAL = 'normal'

    @classmethod
    def from_str(cls, initialization: str) -> '_TokenInitialization':
        try:
            return cls(initialization)
        except ValueError:
            valid_values = [x.value for x in _TokenInitialization]
            raise ValueError(f'initialization must be one of {valid_values}')

    def apply(self, x: Tensor, d: int) -> None:
        d_sqrt_inv = 1 / math.sqrt(d)
        if self == _TokenInitialization.UNIFORM:
            # used in the paper "Revisiting Deep Learning Models for Tabular Data";
            # is equivalent to `nn.init.kaiming_uniform_(x, a=math.sqrt(5))` (which is
            # used by torch to initialize nn.Linear.weight, for example)
            nn.init.uniform_(x, a=-d_sqrt_inv, b=d_sqrt_inv)
        elif self == _TokenInitialization.NORMAL:
            nn.init.normal_(x, std=d_sqrt_inv)


class NumericalFeatureTokenizer(nn.Module):
    """Transforms continuous features to tokens (embeddings)."""

    def __init__(
        self,
        n_features: int,
        d_token: int,
        bias: bool,
        initialization: str,
    ) -> None:
        super().__init__()
        initialization_ = _TokenInitialization.from_str(initialization)
        self.weight = nn.Parameter(Tensor(n_features, d_token))
        self.bias = nn.Parameter(Tensor(n_features, d_token)) if bias else None
        for parameter in [self.weight, self.bias]:
            if parameter is not None:
                initialization_.apply(parameter, d_token)

    @property
    def n_tokens(self) -> int:
        """The number of tokens."""
        return len(self.weight)

    @property
    def d_token(self) -> int:
        """The size of one token."""
        return self.weight.shape[1]

    def forward(self, x: Tensor) -> Tensor:
        x = self.weight[None] * x[..., None]
        if self.bias is not None:
            x = x + self.bias[None]
        return x


class CategoricalFeatureTokenizer(nn.Module):
    """Transforms categorical features to tokens (embeddings)."""

    category_offsets: Tensor

    def __init__(
        self,
        cardinalities: List[int],
        d_token: int,
        bias: bool,
        initialization: str,
    ) -> None:
        super().__init__()
        assert cardinalities, 'cardinalities must be non-empty'
        assert d_token > 0, 'd_token must be positive'
        initialization_ = _TokenInitialization.from_str(initialization)

        category_offsets = torch.tensor([0] + cardinalities[:-1]).cumsum(0)
        self.register_buffer('category_offsets', category_offsets, persistent=False)
        self.embeddings = nn.Embedding(sum(cardinalities), d_token)
        self.bias = nn.Parameter(Tensor(len(cardinalities), d_token)) if bias else None

        for parameter in [self.embeddings.weight, self.bias]:
            if parameter is not None:
                initialization_.apply(parameter, d_token)

    @property
    def n_tokens(self) -> int:
        """The number of tokens."""
        return len(self.category_offsets)

    @property
    def d_token(self) -> int:
        """The size of one token."""
        return self.embeddings.embedding_dim

    def forward(self, x: Tensor) -> Tensor:
        x = self.embeddings(x + self.category_offsets[None])
        if self.bias is not None:
            x = x + self.bias[None]
        return x


class FeatureTokenizer(nn.Module):
    """Combines `NumericalFeatureTokenizer` and `CategoricalFeatureTokenizer`."""

    def __init__(
        self,
        n_num_features: int,
        cat_cardinalities: List[int],
        d_token: int,
    ) -> None:
        super().__init__()
        assert n_num_features >= 0, 'n_num_features must be non-negative'
        assert (
            n_num_features or cat_cardinalities
        ), 'at least one of n_num_features or cat_cardinalities must be positive/non-empty'
        self.initialization = 'uniform'
        self.num_tokenizer = (
            NumericalFeatureTokenizer(
                n_features=n_num_features,
                d_token=d_token,
                bias=True,
                initialization=self.initialization,
            )
            if n_num_features
            else None
        )
        self.cat_tokenizer = (
            CategoricalFeatureTokenizer(
                cat_cardinalities, d_token, True, self.initialization
            )
            if cat_cardinalities
            else None
        )

    @property
    def n_tokens(self) -> int:
        """The number of tokens."""
        return sum(
            x.n_tokens
            for x in [self.num_tokenizer, self.cat_tokenizer]
            if x is not None
        )

    @property
    def d_token(self) -> int:
        """The size of one token."""
        return (
            self.cat_tokenizer.d_token  # type: ignore
            if self.num_tokenizer is None
            else self.num_tokenizer.d_token
        )

    def forward(self, x_num: Optional[Tensor], x_cat: Optional[Tensor]) -> Tensor:
        assert (
            x_num is not None or x_cat is not None
        ), 'At least one of x_num and x_cat must be presented'
        assert _all_or_none(
            [self.num_tokenizer, x_num]
        ), 'If self.num_tokenizer is (not) None, then x_num must (not) be None'
        assert _all_or_none(
            [self.cat_tokenizer, x_cat]
        ), 'If self.cat_tokenizer is (not) None, then x_cat must (not) be None'
        x = []
        if self.num_tokenizer is not None:
            x.append(self.num_tokenizer(x_num))
        if self.cat_tokenizer is not None:
            x.append(self.cat_tokenizer(x_cat))
        return x[0] if len(x) == 1 else torch.cat(x, dim=1)


class CLSToken(nn.Module):
    """[CLS]-token for BERT-like inference."""

    def __init__(self, d_token: int, initialization: str) -> None:
        super().__init__()
        initialization_ = _TokenInitialization.from_str(initialization)
        self.weight = nn.Parameter(Tensor(d_token))
        initialization_.apply(self.weight, d_token)

    def expand(self, *leading_dimensions: int) -> Tensor:
        if not leading_dimensions:
            return self.weight
        new_dims = (1,) * (len(leading_dimensions) - 1)
        return self.weight.view(*new_dims, -1).expand(*leading_dimensions, -1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x, self.expand(len(x), 1)], dim=1)


def _make_nn_module(module_type: ModuleType, *args) -> nn.Module:
    if isinstance(module_type, str):
        if module_type == 'ReGLU':
            return ReGLU()
        elif module_type == 'GEGLU':
            return GEGLU()
        else:
            try:
                cls = getattr(nn, module_type)
            except AttributeError as err:
                raise ValueError(
                    f'Failed to construct the module {module_type} with the arguments {args}'
                ) from err
            return cls(*args)
    else:
        return module_type(*args)


class MultiheadAttention(nn.Module):
    """Multihead Attention (self-/cross-) with optional 'linear' attention."""

    def __init__(
        self,
        *,
        d_token: int,
        n_heads: int,
        dropout: float,
        bias: bool,
        initialization: str,
    ) -> None:
        super().__init__()
        if n_heads > 1:
            assert d_token % n_heads == 0, 'd_token must be a multiple of n_heads'
        assert initialization in ['kaiming', 'xavier']

        self.W_q = nn.Linear(d_token, d_token, bias)
        self.W_k = nn.Linear(d_token, d_token, bias)
        self.W_v = nn.Linear(d_token, d_token, bias)
        self.W_out = nn.Linear(d_token, d_token, bias) if n_heads > 1 else None
        self.n_heads = n_heads
        self.dropout = nn.Dropout(dropout) if dropout else None

        for m in [self.W_q, self.W_k, self.W_v]:
            # the "xavier" branch tries to follow torch.nn.MultiheadAttention;
            # the second condition checks if W_v plays the role of W_out; the latter one
            # is initialized with Kaiming in torch
            if initialization == 'xavier' and (
                m is not self.W_v or self.W_out is not None
            ):
                # gain is needed since W_qkv is represented with 3 separate layers (it
                # implies different fan_out)
                nn.init.xavier_uniform_(m.weight, gain=1 / math.sqrt(2))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        if self.W_out is not None:
            nn.init.zeros_(self.W_out.bias)

    def _reshape(self, x: Tensor) -> Tensor:
        batch_size, n_tokens, d = x.shape
        d_head = d // self.n_heads
        return (
            x.reshape(batch_size, n_tokens, self.n_heads, d_head)
            .transpose(1, 2)
            .reshape(batch_size * self.n_heads, n_tokens, d_head)
        )

    def forward(
        self,
        x_q: Tensor,
        x_kv: Tensor,
        key_compression: Optional[nn.Linear],
        value_compression: Optional[nn.Linear],
    ) -> Tuple[Tensor, Dict[str, Tensor]]:
        assert _all_or_none(
            [key_compression, value_compression]
        ), 'If key_compression is (not) None, then value_compression must (not) be None'
        q, k, v = self.W_q(x_q), self.W_k(x_kv), self.W_v(x_kv)
        for tensor in [q, k, v]:
            assert tensor.shape[-1] % self.n_heads == 0, _INTERNAL_ERROR_MESSAGE
        if key_compression is not None:
            k = key_compression(k.transpose(1, 2)).transpose(1, 2)
            v = value_compression(v.transpose(1, 2)).transpose(1, 2)  # type: ignore

        batch_size = len(q)
        d_head_key = k.shape[-1] // self.n_heads
        d_head_value = v.shape[-1] // self.n_heads
        n_q_tokens = q.shape[1]

        q = self._reshape(q)
        k = self._reshape(k)
        attention_logits = q @ k.transpose(1, 2) / math.sqrt(d_head_key)
        attention_probs = F.softmax(attention_logits, dim=-1)
        if self.dropout is not None:
            attention_probs = self.dropout(attention_probs)
        x = attention_probs @ self._reshape(v)
        x = (
            x.reshape(batch_size, self.n_heads, n_q_tokens, d_head_value)
            .transpose(1, 2)
            .reshape(batch_size, n_q_tokens, self.n_heads * d_head_value)
        )
        if self.W_out is not None:
            x = self.W_out(x)
        return x, {
            'attention_logits': attention_logits,
            'attention_probs': attention_probs,
        }


class Transformer(nn.Module):
    """Transformer with extra features.

    This module is the backbone of `FTTransformer`."""

    WARNINGS = {'first_prenormalization': True, 'prenormalization': True}

    class FFN(nn.Module):
        """The Feed-Forward Network module used in every `Transformer` block."""

        def __init__(
            self,
            *,
            d_token: int,
            d_hidden: int,
            bias_first: bool,
            bias_second: bool,
            dropout: float,
            activation: ModuleType,
        ):
            super().__init__()
            self.linear_first = nn.Linear(
                d_token,
                d_hidden * (2 if _is_glu_activation(activation) else 1),
                bias_first,
            )
            self.activation = _make_nn_module(activation)
            self.dropout = nn.Dropout(dropout)
            self.linear_second = nn.Linear(d_hidden, d_token, bias_second)

        def forward(self, x: Tensor) -> Tensor:
            x = self.linear_first(x)
            x = self.activation(x)
            x = self.dropout(x)
            x = self.linear_second(x)
            return x

    class Head(nn.Module):
        """The final module of the `Transformer` that performs BERT-like inference."""

        def __init__(
            self,
            *,
            d_in: int,
            bias: bool,
            activation: ModuleType,
            normalization: ModuleType,
            d_out: int,
        ):
            super().__init__()
            self.normalization = _make_nn_module(normalization, d_in)
            self.activation = _make_nn_module(activation)
            self.linear = nn.Linear(d_in, d_out, bias)

        def forward(self, x: Tensor) -> Tensor:
            x = x[:, -1]
            x = self.normalization(x)
            x = self.activation(x)
            x = self.linear(x)
            return x

    def __init__(
        self,
        *,
        d_token: int,
        n_blocks: int,
        attention_n_heads: int,
        attention_dropout: float,
        attention_initialization: str,
        attention_normalization: str,
        ffn_d_hidden: int,
        ffn_dropout: float,
        ffn_activation: str,
        ffn_normalization: str,
        residual_dropout: float,
        prenormalization: bool,
        first_prenormalization: bool,
        last_layer_query_idx: Union[None, List[int], slice],
        n_tokens: Optional[int],
        kv_compression_ratio: Optional[float],
        kv_compression_sharing: Optional[str],
        head_activation: ModuleType,
        head_normalization: ModuleType,
        d_out: int,
    ) -> None:
        super().__init__()
        if isinstance(last_layer_query_idx, int):
            raise ValueError(
                'last_layer_query_idx must be None, list[int] or slice. '
                f'Do you mean last_layer_query_idx=[{last_layer_query_idx}] ?'
            )
        if not prenormalization:
            assert (
                not first_prenormalization
            ), 'If `prenormalization` is False, then `first_prenormalization` must be False'
        assert _all_or_none([n_tokens, kv_compression_ratio, kv_compression_sharing]), (
            'If any of the following arguments is (not) None, then all of them must (not) be None: '
            'n_tokens, kv_compression_ratio, kv_compression_sharing'
        )
        assert kv_compression_sharing in [None, 'headwise', 'key-value', 'layerwise']
        if not prenormalization:
            if self.WARNINGS['prenormalization']:
                warnings.warn(
                    'prenormalization is set to False. Are you sure about this? '
                    'The training can become less stable. '
                    'You can turn off this warning by tweaking the '
                    'rtdl.Transformer.WARNINGS dictionary.',
                    UserWarning,
                )
            assert (
                not first_prenormalization
            ), 'If prenormalization is False, then first_prenormalization is ignored and must be set to False'
        if (
            prenormalization
            and first_prenormalization
            and self.WARNINGS['first_prenormalization']
        ):
            warnings.warn(
                'first_prenormalization is set to True. Are you sure about this? '
                'For example, the vanilla FTTransformer with '
                'first_prenormalization=True performs SIGNIFICANTLY worse. '
                'You can turn off this warning by tweaking the '
                'rtdl.Transformer.WARNINGS dictionary.',
                UserWarning,
            )
            time.sleep(3)

        def make_kv_compression():
            assert (
                n_tokens and kv_compression_ratio
            ), _INTERNAL_ERROR_MESSAGE  # for mypy
            # https://github.com/pytorch/fairseq/blob/1bba712622b8ae4efb3eb793a8a40da386fe11d0/examples/linformer/linformer_src/modules/multihead_linear_attention.py#L83
            return nn.Linear(n_tokens, int(n_tokens * kv_compression_ratio), bias=False)

        self.shared_kv_compression = (
            make_kv_compression()
            if kv_compression_ratio and kv_compression_sharing == 'layerwise'
            else None
        )

        self.prenormalization = prenormalization
        self.last_layer_query_idx = last_layer_query_idx

        self.blocks = nn.ModuleList([])
        for layer_idx in range(n_blocks):
            layer = nn.ModuleDict(
                {
                    'attention': MultiheadAttention(
                        d_token=d_token,
                        n_heads=attention_n_heads,
                        dropout=attention_dropout,
                        bias=True,
                        initialization=attention_initialization,
                    ),
                    'ffn': Transformer.FFN(
                        d_token=d_token,
                        d_hidden=ffn_d_hidden,
                        bias_first=True,
                        bias_second=True,
                        dropout=ffn_dropout,
                        activation=ffn_activation,
                    ),
                    'attention_residual_dropout': nn.Dropout(residual_dropout),
                    'ffn_residual_dropout': nn.Dropout(residual_dropout),
                    'output': nn.Identity(),  # for hooks-based introspection
                }
            )
            if layer_idx or not prenormalization or first_prenormalization:
                layer['attention_normalization'] = _make_nn_module(
                    attention_normalization, d_token
                )
            layer['ffn_normalization'] = _make_nn_module(ffn_normalization, d_token)
            if kv_compression_ratio and self.shared_kv_compression is None:
                layer['key_compression'] = make_kv_compression()
                if kv_compression_sharing == 'headwise':
                    layer['value_compression'] = make_kv_compression()
                else:
                    assert (
                        kv_compression_sharing == 'key-value'
                    ), _INTERNAL_ERROR_MESSAGE
            self.blocks.append(layer)

        self.head = Transformer.Head(
            d_in=d_token,
            d_out=d_out,
            bias=True,
            activation=head_activation,  # type: ignore
            normalization=head_normalization if prenormalization else 'Identity',
        )

    def _get_kv_compressions(self, layer):
        return (
            (self.shared_kv_compression, self.shared_kv_compression)
            if self.shared_kv_compression is not None
            else (layer['key_compression'], layer['value_compression'])
            if 'key_compression' in layer and 'value_compression' in layer
            else (layer['key_compression'], layer['key_compression'])
            if 'key_compression' in layer
            else (None, None)
        )

    def _start_residual(self, layer, stage, x):
        assert stage in ['attention', 'ffn'], _INTERNAL_ERROR_MESSAGE
        x_residual = x
        if self.prenormalization:
            norm_key = f'{stage}_normalization'
            if norm_key in layer:
                x_residual = layer[norm_key](x_residual)
        return x_residual

    def _end_residual(self, layer, stage, x, x_residual):
        assert stage in ['attention', 'ffn'], _INTERNAL_ERROR_MESSAGE
        x_residual = layer[f'{stage}_residual_dropout'](x_residual)
        x = x + x_residual
        if not self.prenormalization:
            x = layer[f'{stage}_normalization'](x)
        return x

    def forward(self, x: Tensor) -> Tensor:
        assert (
            x.ndim == 3
        ), 'The input must have 3 dimensions: (n_objects, n_tokens, d_token)'
        for layer_idx, layer in enumerate(self.blocks):
            layer = cast(nn.ModuleDict, layer)

            query_idx = (
                self.last_layer_query_idx if layer_idx + 1 == len(self.blocks) else None
            )
            x_residual = self._start_residual(layer, 'attention', x)
            x_residual, _ = layer['attention'](
                x_residual if query_idx is None else x_residual[:, query_idx],
                x_residual,
                *self._get_kv_compressions(layer),
            )
            if query_idx is not None:
                x = x[:, query_idx]
            x = self._end_residual(layer, 'attention', x, x_residual)

            x_residual = self._start_residual(layer, 'ffn', x)
            x_residual = layer['ffn'](x_residual)
            x = self._end_residual(layer, 'ffn', x, x_residual)
            x = layer['output'](x)

        x = self.head(x)
        return x


class FTTransformer(nn.Module):
    """The FT-Transformer model proposed in [gorishniy2021revisiting]."""

    def __init__(
        self, feature_tokenizer: FeatureTokenizer, transformer: Transformer
    ) -> None:
        super().__init__()
        if transformer.prenormalization:
            assert 'attention_normalization' not in transformer.blocks[0], (
                'In the prenormalization setting, FT-Transformer does not '
                'allow using the first normalization layer '
                'in the first transformer block'
            )
        self.feature_tokenizer = feature_tokenizer
        self.cls_token = CLSToken(
            feature_tokenizer.d_token, feature_tokenizer.initialization
        )
        self.transformer = transformer

    @classmethod
    def get_baseline_transformer_subconfig(
        cls: Type['FTTransformer'],
    ) -> Dict[str, Any]:
        """Get the baseline subset of parameters for the backbone."""
        return {
            'attention_n_heads': 8,
            'attention_initialization': 'kaiming',
            'ffn_activation': 'ReGLU',
            'attention_normalization': 'LayerNorm',
            'ffn_normalization': 'LayerNorm',
            'prenormalization': True,
            'first_prenormalization': False,
            'last_layer_query_idx': None,
            'n_tokens': None,
            'kv_compression_ratio': None,
            'kv_compression_sharing': None,
            'head_activation': 'ReLU',
            'head_normalization': 'LayerNorm',
        }

    @classmethod
    def _make(
        cls,
        n_num_features,
        cat_cardinalities,
        transformer_config,
    ):
        feature_tokenizer = FeatureTokenizer(
            n_num_features=n_num_features,
            cat_cardinalities=cat_cardinalities,
            d_token=transformer_config['d_token'],
        )
        if transformer_config['d_out'] is None:
            transformer_config['head_activation'] = None
        if transformer_config['kv_compression_ratio'] is not None:
            transformer_config['n_tokens'] = feature_tokenizer.n_tokens + 1
        return FTTransformer(
            feature_tokenizer,
            Transformer(**transformer_config),
        )

    @classmethod
    def make_baseline(
        cls: Type['FTTransformer'],
        *,
        n_num_features: int,
        cat_cardinalities: Optional[List[int]],
        d_token: int,
        n_blocks: int,
        attention_dropout: float,
        ffn_d_hidden: int,
        ffn_dropout: float,
        residual_dropout: float,
        last_layer_query_idx: Union[None, List[int], slice] = None,
        kv_compression_ratio: Optional[float] = None,
        kv_compression_sharing: Optional[str] = None,
        d_out: int,
    ) -> 'FTTransformer':
        transformer_config = cls.get_baseline_transformer_subconfig()
        for arg_name in [
            'n_blocks',
            'd_token',
            'attention_dropout',
            'ffn_d_hidden',
            'ffn_dropout',
            'residual_dropout',
            'last_layer_query_idx',
            'kv_compression_ratio',
            'kv_compression_sharing',
            'd_out',
        ]:
            transformer_config[arg_name] = locals()[arg_name]
        return cls._make(n_num_features, cat_cardinalities, transformer_config)

    def optimization_param_groups(self) -> List[Dict[str, Any]]:
        """The replacement for :code:`.parameters()` when creating optimizers."""
        no_wd_names = ['feature_tokenizer', 'normalization', '.bias']
        assert isinstance(
            getattr(self, no_wd_names[0], None), FeatureTokenizer
        ), _INTERNAL_ERROR_MESSAGE
        assert (
            sum(1 for name, _ in self.named_modules() if no_wd_names[1] in name)
            == len(self.transformer.blocks) * 2
            - int('attention_normalization' not in self.transformer.blocks[0])  # type: ignore
            + 1
        ), _INTERNAL_ERROR_MESSAGE

        def needs_wd(name):
            return all(x not in name for x in no_wd_names)

        return [
            {'params': [v for k, v in self.named_parameters() if needs_wd(k)]},
            {
                'params': [v for k, v in self.named_parameters() if not needs_wd(k)],
                'weight_decay': 0.0,
            },
        ]

    def make_default_optimizer(self) -> torch.optim.AdamW:
        """Make the optimizer for the default FT-Transformer."""
        return torch.optim.AdamW(
            self.optimization_param_groups(),
            lr=1e-4,
            weight_decay=1e-5,
        )

    def forward(self, x_num: Optional[Tensor], x_cat: Optional[Tensor]) -> Tensor:
        x = self.feature_tokenizer(x_num, x_cat)
        x = self.cls_token(x)
        x = self.transformer(x)
        return x


# -- examples/rtdl.ipynb, the FT-Transformer over numerical and categorical features ---------------
def main(X, y, task_type, n_classes, cat_cardinalities, kv_compression_ratio, kv_compression_sharing, n_epochs=2, batch_size=4):
    device = torch.device('cpu')
    X = {k: {kk: torch.tensor(vv, device=device) for kk, vv in v.items()} for k, v in X.items()}
    y = {k: torch.tensor(v, device=device) for k, v in y.items()}

    # !!! CRUCIAL for neural networks when solving regression problems !!!
    if task_type == 'regression':
        y_mean = y['train'].mean().item()
        y_std = y['train'].std().item()
        y = {k: (v - y_mean) / y_std for k, v in y.items()}
    else:
        y_std = y_mean = None

    if task_type != 'multiclass':
        y = {k: v.float() for k, v in y.items()}

    d_out = n_classes or 1

    model = FTTransformer.make_baseline(
        n_num_features=X['train']['num'].shape[1],
        cat_cardinalities=cat_cardinalities,
        d_token=8,
        n_blocks=2,
        attention_dropout=0.0,
        ffn_d_hidden=6,
        ffn_dropout=0.0,
        residual_dropout=0.0,
        last_layer_query_idx=[-1],  # it makes the model faster and does NOT affect its output
        kv_compression_ratio=kv_compression_ratio,
        kv_compression_sharing=kv_compression_sharing,
        d_out=d_out,
    )
    initialize(model)
    model.to(device)
    optimizer = model.make_default_optimizer()
    for group in optimizer.param_groups:
        group['lr'] = 3e-3
    loss_fn = (
        F.binary_cross_entropy_with_logits
        if task_type == 'binclass'
        else F.cross_entropy
        if task_type == 'multiclass'
        else F.mse_loss
    )

    def apply_model(x_num, x_cat=None):
        if isinstance(model, FTTransformer):
            return model(x_num, x_cat)
        else:
            raise NotImplementedError(
                f'Looks like you are using a custom model: {type(model)}.'
                ' Then you have to implement this branch first.'
            )

    @torch.no_grad()
    def evaluate(part):
        model.eval()
        prediction = []
        for batch_num, batch_cat in zip(*(zero.iter_batches(X[part][key], 1024) for key in ('num', 'cat'))):
            prediction.append(apply_model(batch_num, batch_cat))
        prediction = torch.cat(prediction).squeeze(1).cpu().numpy()
        target = y[part].cpu().numpy()

        if task_type == 'binclass':
            prediction = np.round(scipy.special.expit(prediction))
            score = sklearn.metrics.accuracy_score(target, prediction)
        elif task_type == 'multiclass':
            prediction = prediction.argmax(1)
            score = sklearn.metrics.accuracy_score(target, prediction)
        else:
            assert task_type == 'regression'
            score = sklearn.metrics.mean_squared_error(target, prediction) ** 0.5 * y_std
        return score

    # Create a dataloader for batches of indices
    # Docs: https://yura52.github.io/zero/reference/api/zero.data.IndexLoader.html
    train_loader = zero.data.IndexLoader(len(X['train']['num']), batch_size, device=device)

    # Create a progress tracker for early stopping
    # Docs: https://yura52.github.io/zero/reference/api/zero.ProgressTracker.html
    progress = zero.ProgressTracker(patience=100)

    print(f'Test score before training: {evaluate("test"):.4f}')

    report_frequency = len(X['train']['num']) // batch_size // 5
    for epoch in range(1, n_epochs + 1):
        for iteration, batch_idx in enumerate(train_loader):
            model.train()
            optimizer.zero_grad()
            x_batch = X['train']['num'][batch_idx]
            x_cat_batch = X['train']['cat'][batch_idx]
            y_batch = y['train'][batch_idx]
            loss = loss_fn(apply_model(x_batch, x_cat_batch).squeeze(1), y_batch)
            loss.backward()
            optimizer.step()
            if iteration % report_frequency == 0:
                print(f'(epoch) {epoch} (batch) {iteration} (loss) {loss.item():.4f}')
            record.append(loss.item())

        val_score = evaluate('val')
        test_score = evaluate('test')
        print(f'Epoch {epoch:03d} | Validation score: {val_score:.4f} | Test score: {test_score:.4f}', end='')
        progress.update((-1 if task_type == 'regression' else 1) * val_score)
        if progress.success:
            print(' <<< BEST VALIDATION EPOCH', end='')
        print()
        if progress.fail:
            break
        record.append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})
'''

RTDL_STEPS = [
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch import Tensor\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd import Tensor\n",
    ),
]


def zero_standin(lib, rng):
    """libzero's ``iter_batches``, ``data.IndexLoader`` (shuffled batches of indices, the
    permutation drawn from ``rng``) and ``ProgressTracker``, as the notebook uses them."""

    class IndexLoader:
        def __init__(self, size, batch_size, device="cpu"):
            self.size, self.batch_size = size, batch_size

        def __len__(self):
            return -(-self.size // self.batch_size)

        def __iter__(self):
            order = lib.tensor(rng.permutation(self.size), dtype=lib.int64)
            return iter(order.split(self.batch_size))

    class ProgressTracker:
        def __init__(self, patience, min_delta=0.0):
            self.patience, self.min_delta = patience, min_delta
            self.best_score, self.bad_updates, self.success = None, 0, False

        @property
        def fail(self):
            return self.bad_updates > self.patience

        def update(self, score):
            self.success = self.best_score is None or score > self.best_score + self.min_delta
            if self.success:
                self.best_score, self.bad_updates = score, 0
            else:
                self.bad_updates += 1

    return types.SimpleNamespace(
        iter_batches=lambda data, batch_size: data.split(batch_size),
        data=types.SimpleNamespace(IndexLoader=IndexLoader),
        ProgressTracker=ProgressTracker,
    )


SKLEARN_STANDIN = types.SimpleNamespace(
    metrics=types.SimpleNamespace(
        accuracy_score=lambda target, prediction: float(np.mean(target == prediction)),
        mean_squared_error=lambda target, prediction: float(np.mean((target - prediction) ** 2)),
    )
)


@pytest.mark.parametrize(
    "task_type, kv_compression_ratio, kv_compression_sharing",
    [("multiclass", None, None), ("regression", 0.5, "headwise"), ("binclass", 0.7, "layerwise")],
)
def test_rtdl_ft_transformer_tokenizes_features_and_trains_as_torch(
    capsys, task_type, kv_compression_ratio, kv_compression_sharing
):
    rng = np.random.default_rng(7721)
    cardinalities = [3, 5]
    n_classes = 3 if task_type == "multiclass" else None
    features, targets = {}, {}
    for part, n in (("train", 20), ("val", 6), ("test", 6)):
        num = rng.standard_normal((n, 4)).astype(np.float32)
        cat = np.stack([rng.integers(0, c, n) for c in cardinalities], 1)
        features[part] = {"num": num, "cat": cat}
        score = num[:, 0] - num[:, 1] + (cat[:, 0] == 1)
        targets[part] = (
            np.digitize(score, [-0.5, 0.5]) if task_type == "multiclass"
            else (score > 0).astype(np.int64) if task_type == "binclass"
            else score.astype(np.float32)
        )  # fmt: skip
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = RTDL_SOURCE if lib is torch else port(RTDL_SOURCE, RTDL_STEPS)
        names = run_source(
            source,
            lib,
            record=record,
            initialize=initialize,
            zero=zero_standin(lib, np.random.default_rng(7722)),
            sklearn=SKLEARN_STANDIN,
        )
        names["main"](features, targets, task_type, n_classes, cardinalities, kv_compression_ratio, kv_compression_sharing)  # fmt: skip
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "<<< BEST VALIDATION EPOCH" in logs[0]
    # without key compression the keys' bias adds the same logit to every key of a query,
    # which the softmax takes away: its true gradient is zero, so Adam steps it by the noise
    skip = [] if kv_compression_ratio else [f"transformer.blocks.{i}.attention.W_k.bias" for i in range(2)]  # fmt: skip
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=skip)


def test_a_dataloaders_iterator_has_the_loaders_len_as_torch():
    # the domain-adaptation loops: ``data_iter = iter(loader)`` then ``for i in
    # range(len(data_iter)): x, y = next(data_iter)`` (and ``tqdm(iter(loader))``'s total)
    for lib in (torch, rg):
        data = lib.utils.data
        dataset = data.TensorDataset(lib.arange(10.0), lib.arange(10))
        loaders = [
            data.DataLoader(dataset, batch_size=3),
            data.DataLoader(dataset, batch_size=3, drop_last=True),
            data.DataLoader(dataset, batch_sampler=[[0, 1], [2], [3, 4, 5]]),
            data.DataLoader(dataset, batch_size=None, sampler=[4, 2]),
        ]
        lengths = []
        for loader in loaders:
            data_iter = iter(loader)
            lengths.append(len(data_iter))
            labels = [next(data_iter)[1].tolist() for _ in range(len(data_iter))]
            lengths.append(len(data_iter))  # the sampler's length, however far it has gone
            assert len(labels) == len(loader)
        assert lengths == [4, 4, 3, 3, 3, 3, 2, 2], lib.__name__

    class Stream(rg.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(rg.errors.DTypeError, match="IterableDataset"):
        len(iter(rg.utils.data.DataLoader(Stream(), batch_size=2)))


def test_collate_with_a_map_of_a_programs_own_types_extends_default_collate_as_torch():
    # torch's documented way to extend default_collate (its docstring and data.html):
    # ``collate(batch, collate_fn_map={**default_collate_fn_map, MyType: fn})`` with fn called as
    # ``fn(batch, collate_fn_map=...)``; retrograd had no collate nor default_collate_fn_map
    class Sentence:
        def __init__(self, tokens):
            self.tokens = tokens

    results = []
    for lib in (torch, rg):
        from_collate = importlib.import_module(f"{lib.__name__}.utils.data._utils.collate")

        def collate_sentence_fn(batch, *, collate_fn_map=None, lib=lib):
            return lib.nn.utils.rnn.pad_sequence(
                [lib.tensor(s.tokens) for s in batch], batch_first=True
            )

        collate_map = {**from_collate.default_collate_fn_map, Sentence: collate_sentence_fn}
        batch = [
            {"text": Sentence([3, 1]), "label": 0, "weight": np.float32(0.5), "id": "a"},
            {"text": Sentence([4, 1, 5]), "label": 1, "weight": np.float32(2.0), "id": "b"},
        ]
        out = from_collate.collate(batch, collate_fn_map=collate_map)
        loader = lib.utils.data.DataLoader(
            batch,
            batch_size=2,
            collate_fn=functools.partial(from_collate.collate, collate_fn_map=collate_map),
        )
        assert next(iter(loader))["text"].tolist() == out["text"].tolist()
        results.append(
            [
                out["text"].tolist(),
                out["label"].tolist(),
                str(out["weight"].dtype).rpartition(".")[2],
                out["id"],
                from_collate.default_collate([np.str_("x"), np.str_("y")]),
            ]
        )
        with pytest.raises(TypeError):  # a type no function of the map takes
            from_collate.collate([Sentence([1]), Sentence([2])])
    assert results[1] == results[0]


def test_a_loader_remade_like_another_with_a_new_sampler_as_torch():
    # the training libraries' way to swap a loader's sampler (accelerate's prepare_data_loader,
    # Lightning's re-instantiation): a new DataLoader built from the old one's attributes;
    # retrograd's had no prefetch_factor, persistent_workers, multiprocessing_context
    results = []
    for lib in (torch, rg):
        data = lib.utils.data
        dataset = data.TensorDataset(lib.arange(6.0), lib.arange(6))
        dl = data.DataLoader(dataset, batch_size=4, shuffle=False, drop_last=False)
        remade = data.DataLoader(
            dl.dataset,
            batch_size=dl.batch_size,
            sampler=[5, 1, 3],
            num_workers=dl.num_workers,
            collate_fn=dl.collate_fn,
            pin_memory=dl.pin_memory,
            drop_last=dl.drop_last,
            timeout=dl.timeout,
            worker_init_fn=dl.worker_init_fn,
            multiprocessing_context=dl.multiprocessing_context,
            generator=dl.generator,
            prefetch_factor=dl.prefetch_factor,
            persistent_workers=dl.persistent_workers,
        )
        with_workers = data.DataLoader(dataset, batch_size=2, num_workers=1)
        results.append(
            [[b[1].tolist() for b in remade], dl.prefetch_factor, with_workers.prefetch_factor]
        )
        # what the batches are made from cannot change afterwards: torch raises ValueError
        for name, value in (("batch_size", 2), ("sampler", [0]), ("drop_last", True)):
            with pytest.raises(ValueError, match=f"{name} attribute should not be set"):
                setattr(dl, name, value)
        dl.collate_fn = lambda batch: len(batch)  # this one may change, as torch's
        assert list(dl) == [4, 2]
    assert results[1] == results[0] == [[[5, 1, 3]], None, 2]


def test_a_subset_reads_its_batches_through_the_datasets_getitems_as_torch():
    # a dataset with batched reading (``__getitems__``, as Hugging Face's datasets have) seen
    # through random_split's Subset: torch's Subset hands the batch's indices to it
    for lib in (torch, rg):
        data = lib.utils.data

        class Rows(data.Dataset):
            def __init__(self, lib):
                self.lib, self.calls = lib, []

            def __len__(self):
                return 6

            def __getitem__(self, i):
                return self.lib.tensor(i)

            def __getitems__(self, indices):
                self.calls.append(list(indices))
                return [self.lib.tensor(10 * i) for i in indices]

        rows = Rows(lib)
        subset = data.Subset(rows, [5, 3, 1])
        batches = [b.tolist() for b in data.DataLoader(subset, batch_size=2)]
        assert batches == [[50, 30], [10]], lib.__name__
        assert rows.calls == [[5, 3], [1]], lib.__name__
        assert subset[0].tolist() == 5  # one sample still through __getitem__


def test_a_concat_dataset_subclass_recomputes_its_sizes_by_cumsum_as_torch():
    # continual-learning replay buffers grow a ConcatDataset: ``self.datasets.append(d)`` then
    # ``self.cumulative_sizes = self.cumsum(self.datasets)`` (torch's static method)
    results = []
    for lib in (torch, rg):
        data = lib.utils.data

        class Replay(data.ConcatDataset):
            def add(self, dataset):
                self.datasets.append(dataset)
                self.cumulative_sizes = self.cumsum(self.datasets)

        replay = Replay([data.TensorDataset(lib.arange(2))])
        replay.add(data.TensorDataset(lib.arange(10, 13)))
        sampler = data.WeightedRandomSampler([1.0] * len(replay), len(replay))
        with pytest.warns(FutureWarning, match="renamed to `cumulative_sizes`"):
            misspelt = replay.cummulative_sizes
        results.append(
            [
                len(replay),
                replay.cumulative_sizes,
                misspelt,
                replay[3][0].tolist(),
                data.ConcatDataset.cumsum([[1], [2, 3]]),
                sampler.generator,  # read when remaking samplers
            ]
        )
    assert results[1] == results[0] == [5, [2, 5], [2, 5], 11, [1, 3], None]


def test_packing_by_lengths_summed_from_a_float_mask_and_packed_conversions_as_torch():
    # ``lengths = mask.sum(1)`` of a float mask, handed on as ``lengths.cpu()``: torch reads
    # them as int64; retrograd refused float lengths. And the packed batch's own conversions
    # (``packed.cpu()``, ``.long()``, ``.is_pinned()``), which retrograd's lacked
    tokens = np.array([[3, 1, 4, 0], [1, 5, 0, 0], [9, 2, 6, 5]])
    results = []
    for lib in (torch, rg):
        rnn = lib.nn.utils.rnn
        ids = lib.tensor(tokens)
        mask = (ids != 0).float()
        lengths = mask.sum(1)
        packed = rnn.pack_padded_sequence(
            ids.float().unsqueeze(-1), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        moved = packed.cpu().long()
        padded, out_lengths = rnn.pad_packed_sequence(moved, batch_first=True)
        results.append(
            [
                packed.batch_sizes.tolist(),
                str(moved.data.dtype).rpartition(".")[2],
                padded.squeeze(-1).tolist(),
                out_lengths.tolist(),
                packed.is_pinned(),
                lib.ones(2).is_pinned(),
            ]
        )
    assert results[1] == results[0]
    with pytest.raises(rg.errors.InvalidArgumentError, match="whole numbers"):
        rg.nn.utils.rnn.pack_padded_sequence(rg.ones(3, 2, 1), rg.tensor([2.5, 1.0]))
