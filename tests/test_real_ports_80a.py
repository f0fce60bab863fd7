# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 80 (the harness: ``tests/real_ports.py``): a two-tower retrieval
recommender, a program written here in the style of the two-tower examples of TorchRec and of
the sampling-bias-corrected in-batch softmax of YouTube's retrieval paper (a user tower over the
user id and a padded watch history, an item tower over the item id and weighted tag bags), trained
with in-batch negatives under a logQ correction plus a BPR term over popularity-sampled
negatives, then evaluated by recall@k over the whole catalogue; run under torch and, ported,
under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: a ground-truth affinity ``torch.randn`` of users and items, interactions drawn by
  ``torch.multinomial(F.softmax(...), num_samples=, replacement=True)``, item tags of varying
  count ``torch.randint`` with tf-idf-like weights ``torch.rand``, the histories padded by
  ``nn.utils.rnn.pad_sequence(..., batch_first=True, padding_value=0)`` (id 0 is padding: items
  shifted by one), a ``Dataset`` subclass and a ``DataLoader`` with a ``collate_fn`` building a
  flat tag list ``torch.cat``, its ``offsets`` by ``torch.cumsum`` of lengths and the
  per-tag weights;
- the towers: ``nn.Embedding``; ``nn.EmbeddingBag(mode="mean", padding_idx=0)`` over the 2-D
  padded histories; ``F.embedding_bag(flat, weight, offsets, mode="sum",
  per_sample_weights=...)`` over the weighted tags; ``nn.EmbeddingBag(mode="max")`` with
  ``offsets`` and ``include_last_offset=True``; ``nn.Sequential`` MLPs; outputs
  ``F.normalize(..., dim=-1)``; a learned temperature ``nn.Parameter`` of a log, clamped by
  ``.clamp(min=, max=)`` and ``.exp()``;
- the losses: the in-batch softmax ``u @ v.T / t`` minus ``torch.log`` of each item's sampling
  probability gathered by index, accidental hits (the same item twice in a batch, off the
  diagonal) masked by ``masked_fill(..., torch.finfo(logits.dtype).min)`` of an ``eq``
  outer comparison ``& ~torch.eye(n, dtype=torch.bool)``, ``F.cross_entropy`` on
  ``torch.arange`` labels; BPR ``-F.logsigmoid(pos - neg).mean()`` over ``num_neg`` negatives
  per user drawn by ``torch.multinomial(popularity ** 0.75, n * k, replacement=True)`` and
  ``.view(n, k)``, scored by ``torch.einsum("bd,bkd->bk", ...)``;
- training: ``AdamW`` with two parameter groups (embeddings and the temperature without weight
  decay, the MLPs with it, split by ``named_parameters`` names), ``clip_grad_norm_``,
  ``CosineAnnealingLR``;
- evaluation under ``torch.no_grad()`` with ``model.eval()``: the catalogue's embeddings, scores
  ``user_emb @ item_emb.T``, seen items masked by ``index_put_((rows, cols),
  torch.tensor(float("-inf")))``, ``torch.topk(scores, k, dim=1).indices``, recall@k by
  ``(topk == target.unsqueeze(1)).any(dim=1).float().mean()``, the top lists by ``.tolist()``.

``torch.multinomial`` draws for both libraries from one seeded stream (by the inverse CDF).

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

TWO_TOWER_SOURCE = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

NUM_USERS, NUM_ITEMS, NUM_TAGS, DIM, HIST = 12, 20, 9, 8, 4


# -- the synthetic interaction log -------------------------------------------------------------
true_users = torch.randn(NUM_USERS, 4)
true_items = torch.randn(NUM_ITEMS, 4)
affinity = F.softmax(true_users @ true_items.T * 2.0, dim=1)
interactions = torch.multinomial(affinity, num_samples=HIST + 2, replacement=True)
item_tags = [torch.randint(0, NUM_TAGS, (int(n),)) for n in torch.randint(1, 4, (NUM_ITEMS,))]
item_tag_weights = [torch.rand(len(t)) + 0.5 for t in item_tags]
counts = torch.zeros(NUM_ITEMS).index_add_(0, interactions.reshape(-1),
                                            torch.ones(interactions.numel()))
popularity = (counts + 1.0) / (counts + 1.0).sum()


class InteractionDataset(Dataset):
    def __init__(self, interactions, start):
        self.rows = []
        for user, items in enumerate(interactions.tolist()):
            for position in range(start, len(items) - 1 if start == 1 else len(items)):
                history = torch.tensor(items[max(0, position - HIST):position]) + 1
                self.rows.append((user, items[position], history))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, idx):
        return self.rows[idx]


def item_features(items):
    tags = [item_tags[i] for i in items.tolist()]
    lengths = torch.tensor([len(t) for t in tags])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, dim=0)[:-1]])
    weights = torch.cat([item_tag_weights[i] for i in items.tolist()])
    return torch.cat(tags), offsets, weights


def collate(batch):
    users = torch.tensor([row[0] for row in batch])
    items = torch.tensor([row[1] for row in batch])
    histories = pad_sequence([row[2] for row in batch], batch_first=True, padding_value=0)
    return users, histories, items, *item_features(items)


# -- the towers ----------------------------------------------------------------------------------
class UserTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user_embedding = nn.Embedding(NUM_USERS, DIM)
        self.history_bag = nn.EmbeddingBag(NUM_ITEMS + 1, DIM, mode="mean", padding_idx=0)
        self.mlp = nn.Sequential(nn.Linear(2 * DIM, 16), nn.ReLU(), nn.Linear(16, DIM))

    def forward(self, users, histories):
        features = torch.cat([self.user_embedding(users), self.history_bag(histories)], dim=1)
        return F.normalize(self.mlp(features), dim=-1)


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.item_embedding = nn.Embedding(NUM_ITEMS, DIM)
        self.tag_table = nn.Parameter(torch.randn(NUM_TAGS, DIM) * 0.1)
        self.tag_max = nn.EmbeddingBag(NUM_TAGS, DIM, mode="max", include_last_offset=True)
        self.mlp = nn.Sequential(nn.Linear(3 * DIM, 16), nn.Tanh(), nn.Linear(16, DIM))

    def forward(self, items, tags, offsets, weights):
        weighted = F.embedding_bag(tags, self.tag_table, offsets, mode="sum",
                                   per_sample_weights=weights)
        last = torch.tensor([len(tags)], dtype=offsets.dtype)
        strongest = self.tag_max(tags, torch.cat([offsets, last]))
        features = torch.cat([self.item_embedding(items), weighted, strongest], dim=1)
        return F.normalize(self.mlp(features), dim=-1)


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user_tower = UserTower()
        self.item_tower = ItemTower()
        self.log_temperature = nn.Parameter(torch.tensor(math.log(0.2)))

    def temperature(self):
        return self.log_temperature.clamp(min=math.log(0.05), max=math.log(1.0)).exp()

    def forward(self, users, histories, items, tags, offsets, weights):
        return self.user_tower(users, histories), self.item_tower(items, tags, offsets, weights)


def in_batch_softmax_loss(user_emb, item_emb, items, temperature):
    logits = user_emb @ item_emb.T / temperature
    logits = logits - torch.log(popularity[items]).unsqueeze(0)
    accidental = items.unsqueeze(0).eq(items.unsqueeze(1)) & ~torch.eye(len(items), dtype=torch.bool)
    logits = logits.masked_fill(accidental, torch.finfo(logits.dtype).min)
    labels = torch.arange(len(items))
    return F.cross_entropy(logits, labels)


def bpr_loss(model, user_emb, item_emb, num_neg):
    n = user_emb.shape[0]
    negatives = torch.multinomial(popularity ** 0.75, n * num_neg, replacement=True).view(n, num_neg)
    neg_emb = model.item_tower(negatives.reshape(-1), *item_features(negatives.reshape(-1)))
    pos = (user_emb * item_emb).sum(dim=-1, keepdim=True)
    neg = torch.einsum("bd,bkd->bk", user_emb, neg_emb.view(n, num_neg, DIM))
    return -F.logsigmoid(pos - neg).mean(), negatives


# -- training ------------------------------------------------------------------------------------
model = TwoTower()
initialize(model)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if "embedding" in name or "tag" in name or "temperature" in name else decay).append(p)
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-2},
                               {"params": no_decay, "weight_decay": 0.0}], lr=2e-2)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6, eta_min=1e-3)
train = DataLoader(InteractionDataset(interactions, start=1), batch_size=16, shuffle=False,
                   collate_fn=collate)

for epoch in range(2):
    model.train()
    for users, histories, items, tags, offsets, weights in train:
        user_emb, item_emb = model(users, histories, items, tags, offsets, weights)
        softmax_loss = in_batch_softmax_loss(user_emb, item_emb, items, model.temperature())
        pair_loss, negatives = bpr_loss(model, user_emb, item_emb, num_neg=3)
        loss = softmax_loss + 0.5 * pair_loss
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)
        optimizer.step()
        scheduler.step()
        record.append([softmax_loss.item(), pair_loss.item(), norm.item(),
                       model.temperature().item(), scheduler.get_last_lr()[0]])
        record.append(negatives.tolist())
    record.append(params_of(model))
    print(f"epoch {epoch} loss {loss.item():.4f}")

# -- recall@k over the whole catalogue -----------------------------------------------------------
model.eval()
with torch.no_grad():
    all_items = torch.arange(NUM_ITEMS)
    catalogue = model.item_tower(all_items, *item_features(all_items))
    users = torch.arange(NUM_USERS)
    histories = interactions[:, -HIST - 1:-1] + 1
    scores = model.user_tower(users, histories) @ catalogue.T
    seen_rows = users.unsqueeze(1).expand(-1, HIST).reshape(-1)
    seen_cols = interactions[:, -HIST - 1:-1].reshape(-1)
    scores.index_put_((seen_rows, seen_cols), torch.tensor(float("-inf")))
    target = interactions[:, -1]
    for k in (1, 5):
        topk = torch.topk(scores, k, dim=1).indices
        recall = (topk == target.unsqueeze(1)).any(dim=1).float().mean()
        record.append([k, recall.item()])
    record.append(torch.topk(scores, 3, dim=1).indices.tolist())
    record.append(scores.masked_fill(torch.isinf(scores), 0.0).numpy().copy())
"""

TWO_TOWER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=2.0)\n"
        "        optimizer.step(grads)\n",
    ),
]


def shared_multinomial(lib, rng):
    """``torch.multinomial`` with replacement by the inverse CDF of one seeded stream of
    uniforms (rows of ``probs`` normalised as torch normalises them)."""

    def multinomial(probs, num_samples, replacement=False, generator=None):
        assert replacement
        p = np.asarray(probs.detach().numpy(), dtype=np.float64)
        p = np.atleast_2d(p)
        cdf = np.cumsum(p / p.sum(axis=-1, keepdims=True), axis=-1)
        u = rng.uniform(size=(p.shape[0], num_samples))
        drawn = np.stack([np.searchsorted(row, draws, side="right") for row, draws in zip(cdf, u)])
        drawn = np.minimum(drawn, p.shape[-1] - 1)
        return lib.tensor(drawn if probs.dim() == 2 else drawn[0], dtype=lib.int64)

    return multinomial


def test_two_tower_retrieval_with_in_batch_and_bpr_losses_as_torch(capsys, monkeypatch):
    streams = {}
    for lib in (torch, rg):
        streams[lib] = shared_multinomial(lib, np.random.default_rng(8001))
    with monkeypatch.context() as patch:
        for lib, multinomial in streams.items():
            patch.setattr(lib, "multinomial", multinomial)
        (theirs, ours), (their_log, our_log) = runs_with_draws(
            TWO_TOWER_SOURCE,
            TWO_TOWER_STEPS,
            capsys,
            8001,
            initialize=initializer(),
            params_of=params_of,
        )
    assert their_log == our_log and their_log.count("\n") == 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
