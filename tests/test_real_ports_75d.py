"""Real ports, round 75 (the harness: ``tests/real_ports.py``): factorised softmax output layers
for word prediction, a program written here in the style of the PyTorch word2vec
implementations with hierarchical softmax (a CBOW model whose output is word2vec's binary
Huffman tree: the inner nodes on a word's path, scored by sigmoids, the label ``1 - code``)
and of the class-based two-level softmax of RNNLM-era language models (words grouped by
frequency rank, ``log p(w) = log p(class) + log p(w | class)``); two configurations
(``huffman``, ``class``), each run under torch and, ported, under retrograd from the same
weights and draws, every record compared.

It reaches:

- the corpus: Zipfian tokens by inverse-CDF sampling (``probs /= probs.sum()`` in place,
  ``torch.cumsum``, ``torch.searchsorted`` of ``torch.rand`` draws, ``clamp_(max=...)``), a
  boolean mask from ``torch.roll`` assigning ``tokens[follows] = ...`` from a second roll,
  ``torch.bincount(minlength=...)``, CBOW windows by ``Tensor.unfold`` and ``torch.cat`` of
  column slices;
- the Huffman tree: ``heapq`` over ``counts.tolist()``, the paths padded into ``torch.zeros(...,
  dtype=torch.long)``, float and ``torch.bool`` tensors by row-slice assignments of
  ``torch.tensor`` lists;
- hierarchical softmax: ``nn.EmbeddingBag(mode="mean", sparse=True)`` over a flattened
  context with ``offsets`` from ``torch.arange(0, n, step)``, ``nn.Embedding(sparse=True)`` of
  the inner nodes indexed by a buffer gathered by the targets (``self.points[target]``),
  ``weight.data.uniform_``/``zero_`` in ``__init__``, ``torch.einsum("bd,bkd->bk", ...)``,
  ``F.binary_cross_entropy_with_logits(weight=path_mask.float(), reduction="sum")``; the full
  distribution over the vocabulary by indexing ``weight[self.points]`` (a 2-d integer index),
  ``einsum("bd,vkd->bvk", ...)`` and masked ``F.logsigmoid`` sums; ``SparseAdam``;
- the class-based softmax: a word's class by ``torch.argsort(descending=True, stable=True)``
  and an index assignment into ``torch.empty(dtype=torch.long)``, the in-class softmax by
  ``masked_fill(outside, float("-inf"))`` of a broadcast comparison, ``gather`` of class and
  word log-probabilities; the normaliser per class by ``torch.full(-inf).scatter_reduce(...,
  reduce="amax")``, ``scatter_add_`` of shifted exponentials, ``gather`` back, advanced indexing
  ``class_logp[:, self.word_class]``; ``Adagrad(lr_decay=..., initial_accumulator_value=...)``;
- training: a linearly decaying ``LambdaLR`` stepped per batch, two epochs of batches sliced
  from the windows; evaluation under ``torch.no_grad()``: ``torch.logsumexp`` of the full
  log-distribution (zero: normalised), perplexity, ``topk(3).indices``, ``argmax`` accuracy,
  cosine similarities of normalised embeddings (``norm(dim=1, keepdim=True).clamp_min``); the
  ``state_dict`` with its buffers through ``torch.save``/``torch.load``, a model rebuilt from the
  saved buffers and ``load_state_dict``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

SOFTMAX_SOURCE = """import heapq
import io

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, WINDOW, DIM = 12, 2, 8


def zipf_corpus(n_tokens, vocab):
    ranks = torch.arange(1, vocab + 1, dtype=torch.float32)
    probs = 1.0 / ranks
    probs /= probs.sum()
    cdf = torch.cumsum(probs, dim=0)
    tokens = torch.searchsorted(cdf, torch.rand(n_tokens))
    tokens.clamp_(max=vocab - 1)
    # a little structure: every word after a 0 is its predecessor's successor
    follows = torch.roll(tokens, 1) == 0
    tokens[follows] = (torch.roll(tokens, 2)[follows] + 1) % vocab
    return tokens


def huffman_tree(counts):
    # word2vec's binary Huffman tree: for every word, the inner nodes on its path from the root
    # (points) and the branch taken at each (codes), padded to the deepest word
    heap = [(c, i, i) for i, c in enumerate(counts)]
    heapq.heapify(heap)
    parent, branch = {}, {}
    next_id = len(counts)
    while len(heap) > 1:
        c1, _, a = heapq.heappop(heap)
        c2, _, b = heapq.heappop(heap)
        parent[a], branch[a] = next_id, 0
        parent[b], branch[b] = next_id, 1
        heapq.heappush(heap, (c1 + c2, next_id, next_id))
        next_id += 1
    root = next_id - 1
    paths = []
    for word in range(len(counts)):
        points, codes, node = [], [], word
        while node != root:
            codes.append(branch[node])
            points.append(parent[node] - len(counts))
            node = parent[node]
        paths.append((points[::-1], codes[::-1]))
    depth = max(len(p) for p, _ in paths)
    points = torch.zeros(len(counts), depth, dtype=torch.long)
    codes = torch.zeros(len(counts), depth)
    mask = torch.zeros(len(counts), depth, dtype=torch.bool)
    for word, (p, c) in enumerate(paths):
        points[word, :len(p)] = torch.tensor(p)
        codes[word, :len(c)] = torch.tensor(c, dtype=torch.float32)
        mask[word, :len(p)] = True
    return points, codes, mask


class CBOWHierarchicalSoftmax(nn.Module):
    def __init__(self, vocab, dim, points, codes, mask):
        super().__init__()
        self.u_embeddings = nn.EmbeddingBag(vocab, dim, mode="mean", sparse=True)
        self.v_nodes = nn.Embedding(vocab - 1, dim, sparse=True)
        initrange = 0.5 / dim
        self.u_embeddings.weight.data.uniform_(-initrange, initrange)
        self.v_nodes.weight.data.zero_()
        self.register_buffer("points", points)
        self.register_buffer("codes", codes)
        self.register_buffer("path_mask", mask)

    def hidden(self, context):
        flat = context.reshape(-1)
        offsets = torch.arange(0, flat.numel(), context.size(1))
        return self.u_embeddings(flat, offsets)

    def forward(self, context, target):
        h = self.hidden(context)
        nodes = self.v_nodes(self.points[target])  # (batch, depth, dim)
        logits = torch.einsum("bd,bkd->bk", h, nodes)
        weight = self.path_mask[target].float()
        # word2vec's label is 1 - code
        return F.binary_cross_entropy_with_logits(logits, 1.0 - self.codes[target], weight=weight,
                                                  reduction="sum") / target.size(0)

    def log_prob_all(self, context):
        h = self.hidden(context)
        nodes = self.v_nodes.weight[self.points]  # (vocab, depth, dim)
        logits = torch.einsum("bd,vkd->bvk", h, nodes)
        sign = 1.0 - 2.0 * self.codes
        return (F.logsigmoid(sign * logits) * self.path_mask).sum(-1)


class CBOWClassSoftmax(nn.Module):
    # a two-level (class-based) softmax, a word's class by its frequency rank:
    # log p(w) = log p(class(w)) + log p(w | class(w))

    def __init__(self, vocab, dim, counts, n_classes=3):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, dim)
        order = torch.argsort(counts, descending=True, stable=True)
        word_class = torch.empty(vocab, dtype=torch.long)
        word_class[order] = torch.arange(vocab) * n_classes // vocab
        self.register_buffer("word_class", word_class)
        self.n_classes = n_classes
        self.class_out = nn.Linear(dim, n_classes)
        self.word_out = nn.Linear(dim, vocab)

    def hidden(self, context):
        return torch.tanh(self.embeddings(context).mean(dim=1))

    def forward(self, context, target):
        h = self.hidden(context)
        class_logp = F.log_softmax(self.class_out(h), dim=-1)
        cls = self.word_class[target]
        word_logits = self.word_out(h)
        outside = self.word_class.unsqueeze(0) != cls.unsqueeze(1)
        word_logp = F.log_softmax(word_logits.masked_fill(outside, float("-inf")), dim=-1)
        logp = class_logp.gather(1, cls.unsqueeze(1)).squeeze(1) + word_logp.gather(
            1, target.unsqueeze(1)).squeeze(1)
        return -logp.mean()

    def log_prob_all(self, context):
        h = self.hidden(context)
        class_logp = F.log_softmax(self.class_out(h), dim=-1)
        logits = self.word_out(h)
        index = self.word_class.expand_as(logits)
        class_max = torch.full((h.size(0), self.n_classes), float("-inf")).scatter_reduce(
            1, index, logits, reduce="amax")
        shifted = torch.exp(logits - class_max.gather(1, index))
        sums = torch.zeros(h.size(0), self.n_classes).scatter_add_(1, index, shifted)
        log_norm = class_max + torch.log(sums)
        return class_logp[:, self.word_class] + logits - log_norm.gather(1, index)


def windows(tokens, window):
    spans = tokens.unfold(0, 2 * window + 1, 1)
    context = torch.cat([spans[:, :window], spans[:, window + 1:]], dim=1)
    return context, spans[:, window]


tokens = zipf_corpus(160, VOCAB)
counts = torch.bincount(tokens, minlength=VOCAB)
context, target = windows(tokens[:120], WINDOW)
val_context, val_target = windows(tokens[120:], WINDOW)

if OUTPUT == "huffman":
    points, codes, mask = huffman_tree(counts.tolist())
    record.append([points.tolist(), codes.long().tolist()])
    model = CBOWHierarchicalSoftmax(VOCAB, DIM, points, codes, mask)
    initialize(model)
    optimizer = torch.optim.SparseAdam(list(model.parameters()), lr=0.05)
else:
    model = CBOWClassSoftmax(VOCAB, DIM, counts)
    initialize(model)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, lr_decay=0.01,
                                    initial_accumulator_value=0.1)
total = 6
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / total)

batch_size = 29
for epoch in range(2):
    for start in range(0, target.size(0), batch_size * 2):
        model.train()
        loss = model(context[start:start + batch_size * 2], target[start:start + batch_size * 2])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        record.append([loss.item(), scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("epoch {} loss {:.4f}".format(epoch, loss.item()))

model.eval()
with torch.no_grad():
    log_probs = model.log_prob_all(val_context)
    # a normalised distribution over the whole vocabulary
    record.append(torch.logsumexp(log_probs, dim=-1).numpy().copy())
    nll = -log_probs.gather(1, val_target[:, None]).mean()
    record.append([nll.item(), torch.exp(nll).item(), model(val_context, val_target).item()])
    top = log_probs.topk(3, dim=-1)
    record.append(top.indices.tolist())
    accuracy = (log_probs.argmax(-1) == val_target).float().mean()
    record.append(accuracy.item())
    embeddings = (model.u_embeddings.weight if OUTPUT == "huffman" else model.embeddings.weight)
    normed = embeddings / embeddings.norm(dim=1, keepdim=True).clamp_min(1e-8)
    record.append((normed @ normed.T).numpy().copy())

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
state = torch.load(buffer)
if OUTPUT == "huffman":
    restored = CBOWHierarchicalSoftmax(VOCAB, DIM, state["points"], state["codes"],
                                       state["path_mask"])
else:
    restored = CBOWClassSoftmax(VOCAB, DIM, counts)
restored.load_state_dict(state)
with torch.no_grad():
    record.append(restored.log_prob_all(val_context[:3]).numpy().copy())
"""

SOFTMAX_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("output", ["huffman", "class"])
def test_factorised_softmax_word_prediction_as_torch(capsys, output):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SOFTMAX_SOURCE,
        SOFTMAX_STEPS,
        capsys,
        7504,
        initialize=initializer(),
        params_of=params_of,
        OUTPUT=output,
    )
    offset = 1 if output == "huffman" else 0  # the Huffman paths, recorded first
    assert len(theirs) == offset + 2 * 3 + 6
    assert theirs[offset + 4][0] < theirs[offset][0]  # training lowered the loss
    assert their_log == our_log and their_log.count("\n") == 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
