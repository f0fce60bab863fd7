# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
item2vec by skip-gram with negative sampling.

- theeluwin/pytorch-sgns's ``model.py`` as written (``import torch as t``, ``from torch import
  LongTensor as LT``/``FloatTensor as FT``): ``Item2Vec``, two ``nn.Embedding(...,
  padding_idx=0)`` whose weights are replaced by ``nn.Parameter(t.cat([t.zeros(1, d), FT(n -
  1, d).uniform_(...)]))`` and set ``requires_grad = True`` again, ``data.long()`` and the
  ``weight.is_cuda`` test; ``SGNS``, negatives drawn by ``t.multinomial(self.weights, k,
  replacement=True).view(batch_size, -1)`` from the unigram counts to the 0.75 (``FT(wf)`` of a
  NumPy array), the losses by ``t.bmm(...).squeeze(dim=-1).sigmoid().log()`` means and sums,
  its shape ``assert``s;
- trained as its ``train.py`` trains it (``Adam`` over the ``SGNS``, two epochs over baskets
  padded with the padding item, whose row must stay zero); then the item vectors.

The lines changed: the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``); ``torch.multinomial`` draws one shared stream in both runs.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

SGNS_SOURCE = """
# -*- coding: utf-8 -*-

import numpy as np
import torch as t
import torch.nn as nn

from torch import LongTensor as LT
from torch import FloatTensor as FT


class Bundler(nn.Module):

    def forward(self, data):
        raise NotImplementedError

    def forward_i(self, data):
        raise NotImplementedError

    def forward_o(self, data):
        raise NotImplementedError


class Item2Vec(Bundler):

    def __init__(self, vocab_size=20000, embedding_size=300, padding_idx=0):
        super(Item2Vec, self).__init__()
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.ivectors = nn.Embedding(self.vocab_size, self.embedding_size, padding_idx=padding_idx)
        self.ovectors = nn.Embedding(self.vocab_size, self.embedding_size, padding_idx=padding_idx)
        self.ivectors.weight = nn.Parameter(t.cat([t.zeros(1, self.embedding_size), FT(self.vocab_size - 1, self.embedding_size).uniform_(-0.5 / self.embedding_size, 0.5 / self.embedding_size)]))
        self.ovectors.weight = nn.Parameter(t.cat([t.zeros(1, self.embedding_size), FT(self.vocab_size - 1, self.embedding_size).uniform_(-0.5 / self.embedding_size, 0.5 / self.embedding_size)]))
        self.ivectors.weight.requires_grad = True
        self.ovectors.weight.requires_grad = True

    def forward(self, data):
        return self.forward_i(data)

    def forward_i(self, data):
        # v = LT(data)
        v = data.long()
        v = v.cuda() if self.ivectors.weight.is_cuda else v
        return self.ivectors(v)

    def forward_o(self, data):
        # v = LT(data)
        v = data.long()
        v = v.cuda() if self.ovectors.weight.is_cuda else v
        return self.ovectors(v)


class SGNS(nn.Module):

    def __init__(self, embedding, vocab_size=20000, n_negs=20, weights=None):
        super(SGNS, self).__init__()
        self.embedding = embedding
        self.vocab_size = vocab_size
        self.n_negs = n_negs
        self.weights = None
        if weights is not None:
            wf = np.power(weights, 0.75)
            wf = wf / wf.sum()
            self.weights = FT(wf)

    def forward(self, iitem, oitems):
        batch_size = iitem.size()[0]
        context_size = oitems.size()[1]
        if self.weights is not None:
            nitems = t.multinomial(self.weights, batch_size * context_size * self.n_negs, replacement=True).view(batch_size, -1)
        else:
            nitems = FT(batch_size, context_size * self.n_negs).uniform_(0, self.vocab_size - 1).long()
        ivectors = self.embedding.forward_i(iitem).unsqueeze(2)
        # print('ivectors', ivectors.shape)
        ovectors = self.embedding.forward_o(oitems)
        # print('ovectors', ovectors.shape)
        nvectors = self.embedding.forward_o(nitems).neg()
        # print('nvectors', nvectors.shape)
        # print('mult o and i', t.bmm(ovectors, ivectors).shape)
        oloss = t.bmm(ovectors, ivectors).squeeze(dim=-1).sigmoid().log().mean(1)
        # print('oloss', oloss.shape)
        assert oloss.shape[0] == batch_size, 'oloss vector shape is different than batch size'
        nloss = t.bmm(nvectors, ivectors).squeeze(dim=-1).sigmoid().log().view(-1, context_size, self.n_negs).sum(2).mean(1)
        # print('mult n and i', t.bmm(nvectors, ivectors).shape)
        # print('nloss', nloss.shape)
        assert nloss.shape[0] == batch_size, 'nloss vector shape is different than batch size'
        return -(oloss + nloss).mean()


# train.py's loop, small: item counts for the unigram^0.75 negatives, Adam over the SGNS
# (whose embedding is the Item2Vec), baskets of items as (item, context) pairs padded with 0
model = Item2Vec(vocab_size=vocab_size, embedding_size=8)
sgns = SGNS(embedding=model, vocab_size=vocab_size, n_negs=5, weights=item_counts)
initialize(sgns)
optim = t.optim.Adam(sgns.parameters(), lr=0.05)
for epoch in range(2):
    for iitem, oitems in batches:
        loss = sgns(LT(iitem), LT(oitems))
        optim.zero_grad()
        loss.backward()
        optim.step()
        record.append(loss.item())
    record.append(params_of(sgns))
record.append([sorted(sgns.state_dict()), model.ivectors.weight.is_cuda])
with t.no_grad():
    vectors = model.forward_i(t.arange(vocab_size))
    record.append(vectors.numpy())
"""

SGNS_STEPS = [
    (
        "import torch as t\nimport torch.nn as nn\n\nfrom torch import LongTensor as LT\nfrom torch import FloatTensor as FT\n",
        "import retrograd as t\nimport retrograd.nn as nn\n\nfrom retrograd import LongTensor as LT\nfrom retrograd import FloatTensor as FT\n",
    ),
    (
        "        loss.backward()\n        optim.step()\n",
        "        grads = loss.backward()\n        optim.step(grads)\n",
    ),
]


def drawn_baskets(seed: int, vocab_size: int = 12, n_batches: int = 3):
    """Batches of (item, its basket's other items) with two item clusters; the contexts are
    padded with the padding item 0."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n_batches):
        iitem, oitems = [], []
        for _ in range(6):
            cluster = rng.integers(0, 2)
            items = rng.choice(
                np.arange(1, 6) if cluster == 0 else np.arange(6, vocab_size), 4, replace=False
            )
            iitem.append(items[0])
            context = list(items[1 : 1 + rng.integers(1, 4)])
            oitems.append(context + [0] * (3 - len(context)))
        batches.append((np.array(iitem), np.array(oitems)))
    counts = np.bincount(
        np.concatenate([np.concatenate([i, o.ravel()]) for i, o in batches]), minlength=vocab_size
    )
    counts[0] = 0
    return batches, counts.astype(np.float64)


def test_sgns_item2vec_trains_as_torch(monkeypatch):
    batches, counts = drawn_baskets(327)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        rng = np.random.default_rng(3270)

        def multinomial(probs, num_samples, replacement=False, lib=lib, rng=rng, **_):
            p = np.asarray(probs.numpy(), dtype=np.float64)
            drawn = rng.choice(len(p), size=num_samples, replace=replacement, p=p / p.sum())
            return lib.tensor(drawn, dtype=lib.int64)

        monkeypatch.setattr(lib, "multinomial", multinomial)
        record = []
        text = SGNS_SOURCE if lib is torch else port(SGNS_SOURCE, SGNS_STEPS)
        with torch.random.fork_rng():
            run_source(text, lib, record=record, vocab_size=12, item_counts=counts, batches=batches,
                       initialize=initialize, params_of=params_of)  # fmt: skip
        records.append(record)
    theirs, ours = records
    assert theirs[-2] == [["embedding.ivectors.weight", "embedding.ovectors.weight"], False]
    for record in (theirs, ours):  # the padding item's rows never move
        for name in ("0.embedding.ivectors.weight", "0.embedding.ovectors.weight"):
            assert not np.any(record[3][name][0]) and not np.any(record[7][name][0])
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
