"""Real ports, continued (the harness: ``tests/real_ports.py``): item2vec by skip-gram with
negative sampling, a program written here in the style of theeluwin/pytorch-sgns (an
embedding "bundle" module wrapped by a negative-sampling loss, trained on shopping baskets).

The surface it exercises: ``import torch as t`` with ``from torch import LongTensor as LT`` and
``FloatTensor as FT``; two ``nn.Embedding(..., padding_idx=0)`` whose weights are replaced by
``nn.Parameter(t.cat([t.zeros(1, d), FT(n - 1, d).uniform_(a, b)]))`` and marked
``requires_grad = True`` again; ``ids.long()`` and the ``weight.is_cuda`` test before
``.cuda()``; a noise distribution ``FT(numpy array)`` of the counts to the 0.75 and negatives by
``t.multinomial(noise, k, replacement=True).view(rows, -1)``; the loss by
``t.bmm(...).squeeze(dim=-1).sigmoid().log()`` with ``mean(1)``, ``view(-1, w, k).sum(2)`` and
``neg()``; ``size()[0]`` and shape ``assert``s; ``Adam`` over the loss module, two epochs over
baskets padded with item 0 (whose rows must stay zero), ``sorted(state_dict())`` and the item
vectors under ``t.no_grad()`` from ``t.arange``.

Regressions guarded: the legacy ``LongTensor``/``FloatTensor`` constructors (of a size and of
a NumPy array), an ``Embedding`` weight replaced by a new ``Parameter`` keeping its
``padding_idx`` row's gradient zero, ``is_cuda`` on a parameter. The weights are torch's
(``initialize``); ``torch.multinomial`` draws one shared stream in both runs.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

BASKET2VEC_SOURCE = """
import numpy as np
import torch as t
import torch.nn as nn
from torch import FloatTensor as FT, LongTensor as LT


class ItemTables(nn.Module):
    # centre and context vectors; row `pad` is the padding item: zero, and kept zero
    def __init__(self, n_items, dim, pad=0):
        super().__init__()
        bound = 0.5 / dim
        self.centre = nn.Embedding(n_items, dim, padding_idx=pad)
        self.context = nn.Embedding(n_items, dim, padding_idx=pad)
        for table in (self.centre, self.context):
            fresh = FT(n_items - 1, dim).uniform_(-bound, bound)
            table.weight = nn.Parameter(t.cat([t.zeros(1, dim), fresh]))
            table.weight.requires_grad = True

    def look_up(self, table, ids):
        ids = ids.long()
        if table.weight.is_cuda:  # (never here: the script runs on the CPU)
            ids = ids.cuda()
        return table(ids)

    def forward(self, ids):
        return self.look_up(self.centre, ids)


class NegativeSampling(nn.Module):
    def __init__(self, tables, n_items, negatives, counts=None):
        super().__init__()
        self.tables = tables
        self.n_items = n_items
        self.negatives = negatives
        self.noise = None
        if counts is not None:  # word2vec's smoothed unigram distribution
            smoothed = np.power(counts, 0.75)
            self.noise = FT(smoothed / smoothed.sum())

    def draw(self, rows, per_row):
        if self.noise is None:
            return FT(rows, per_row).uniform_(0, self.n_items - 1).long()
        return t.multinomial(self.noise, rows * per_row, replacement=True).view(rows, -1)

    def forward(self, centre, context):
        rows, width = centre.size()[0], context.size()[1]
        noise_ids = self.draw(rows, width * self.negatives)
        anchor = self.tables(centre).unsqueeze(2)
        seen = self.tables.look_up(self.tables.context, context)
        unseen = self.tables.look_up(self.tables.context, noise_ids).neg()
        seen_term = t.bmm(seen, anchor).squeeze(dim=-1).sigmoid().log().mean(1)
        unseen_term = t.bmm(unseen, anchor).squeeze(dim=-1).sigmoid().log()
        unseen_term = unseen_term.view(-1, width, self.negatives).sum(2).mean(1)
        assert seen_term.shape[0] == rows, "one positive term per row"
        assert unseen_term.shape[0] == rows, "one negative term per row"
        return -(seen_term + unseen_term).mean()


tables = ItemTables(n_items, 8)
objective = NegativeSampling(tables, n_items, negatives=5, counts=counts)
initialize(objective)
opt = t.optim.Adam(objective.parameters(), lr=0.05)
for epoch in range(2):
    for centre, context in baskets:
        loss = objective(LT(centre), LT(context))
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.append(loss.item())
    record.append(params_of(objective))
record.append([sorted(objective.state_dict()), tables.centre.weight.is_cuda])
with t.no_grad():
    record.append(tables(t.arange(n_items)).numpy())
"""

BASKET2VEC_STEPS = [
    (
        "import torch as t\nimport torch.nn as nn\nfrom torch import FloatTensor as FT, Long",
        "import retrograd as t\nimport retrograd.nn as nn\n"
        "from retrograd import FloatTensor as FT, Long",
    ),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def drawn_baskets(seed: int, n_items: int = 12, n_batches: int = 3):
    """Batches of (an item, the other items of its basket), the baskets drawn from two
    clusters of items; contexts padded with the padding item 0."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n_batches):
        centres, contexts = [], []
        for _ in range(6):
            pool = np.arange(1, 6) if rng.integers(0, 2) == 0 else np.arange(6, n_items)
            items = rng.choice(pool, 4, replace=False)
            centres.append(items[0])
            context = list(items[1 : 1 + rng.integers(1, 4)])
            contexts.append(context + [0] * (3 - len(context)))
        batches.append((np.array(centres), np.array(contexts)))
    seen = np.concatenate([np.concatenate([c, o.ravel()]) for c, o in batches])
    counts = np.bincount(seen, minlength=n_items)
    counts[0] = 0  # the padding item is never a negative
    return batches, counts.astype(np.float64)


def test_basket2vec_negative_sampling_trains_as_torch(monkeypatch):
    torch.manual_seed(327)
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
        text = BASKET2VEC_SOURCE if lib is torch else port(BASKET2VEC_SOURCE, BASKET2VEC_STEPS)
        with torch.random.fork_rng():
            run_source(text, lib, record=record, n_items=12, counts=counts, baskets=batches,
                       initialize=initialize, params_of=params_of)  # fmt: skip
        records.append(record)
    theirs, ours = records
    assert theirs[-2] == [["tables.centre.weight", "tables.context.weight"], False]
    for record in (theirs, ours):  # the padding item's rows never move
        for name in ("0.tables.centre.weight", "0.tables.context.weight"):
            assert not np.any(record[3][name][0]) and not np.any(record[7][name][0])
        assert not np.any(record[-1][0])
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
