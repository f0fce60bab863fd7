"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of the Annotated Transformer, the PyTorch NLP tutorials (the BiLSTM-CRF tagger and the
attention seq2seq translator), bentrevett/pytorch-sentiment-analysis, zalandoresearch's VQ-VAE
notebook and PyTorch Geometric's scatter utilities:

- an encoder-decoder Transformer on the copy task: layers replicated by ``copy.deepcopy`` into
  an ``nn.ModuleList``, a hand-written layer norm over ``x.std(-1, keepdim=True)``, the causal
  mask by ``torch.triu(...).type(torch.uint8) == 0``, ``masked_fill(mask == 0, -1e9)``, the
  list comprehension of ``layer(t).view(b, -1, heads, d).transpose(1, 2)`` over ``zip`` of the
  projections and ``(q, k, v)``, the positional table written by ``table[:, 0::2] =
  torch.sin(...)`` and read as ``self.pe[:, : x.size(1)].requires_grad_(False)``, the batch
  masks (``(tgt != pad).unsqueeze(-2) & causal_mask(...).type_as(visible.data)``), a smoothed
  KL loss (``x.data.clone().fill_``, ``scatter_`` of a float, ``target[:, pad] = 0``,
  ``torch.nonzero`` and ``index_fill_`` of its ``squeeze()``, ``nn.KLDivLoss(reduction=
  "sum")``), the Noam schedule through ``LambdaLR``, Adam with ``betas``/``eps``, a progress
  record summing ``ntokens`` 0-d tensors, and greedy decoding (``torch.zeros(1, 1)
  .fill_(start).type_as(src.data)``, ``best.data[0]`` filled into a new column);
- a BiLSTM-CRF tagger: ``nn.Parameter(torch.randn(...))`` with ``trans.data[i, :] = -10000``,
  the forward algorithm's ``torch.full((1, n), -10000.)`` written by ``alpha[0][i] = 0.``, a
  log-sum-exp through ``row[0, best_index(row)]`` and ``peak.view(1, -1).expand``,
  ``torch.cat`` of ``.view(1)`` scores, ``self.trans[tags[t + 1], tags[t]]`` indexed by 0-d
  tensors, a bidirectional ``nn.LSTM`` whose state is drawn by ``torch.randn``, SGD with
  ``weight_decay`` and Viterbi decoding under ``no_grad``;
- a GRU translator with additive attention: vocabularies built from unicode-normalised
  sentence pairs, ``np.zeros(..., dtype=np.int32)`` into ``torch.LongTensor``,
  ``TensorDataset``/``RandomSampler``/``DataLoader``, a ``GRU(batch_first=True)`` encoder,
  ``e.squeeze(2).unsqueeze(1)`` and ``torch.bmm``, ``torch.empty(b, 1, dtype=torch.long)
  .fill_(BOS)``, teacher forcing by ``forced[:, t].unsqueeze(1)``, ``h.permute(1, 0, 2)``,
  greedy decoding by ``topk(1)`` and ``top.squeeze(-1).detach()``, ``NLLLoss`` on ``view(-1,
  size(-1))``, two Adam optimizers stepped with one backward;
- an LSTM sentiment classifier: ``Embedding(padding_idx=)``, a two-layer bidirectional
  ``LSTM(dropout=, batch_first=True)`` over ``pack_padded_sequence(..., enforce_sorted=False)``
  of unsorted lengths, ``pad_packed_sequence``, ``torch.cat([h[-1], h[-2]], dim=-1)``,
  ``model.apply(init_weights)`` over the LSTM's ``named_parameters`` (``orthogonal_``),
  ``model.embedding.weight.data = <pretrained>``, a ``collate_fn`` over dict samples with
  ``pad_sequence(padding_value=, batch_first=True)`` and ``torch.stack``, and one review
  classified (with an unknown word);
- a VQ-VAE with a learned and with an EMA codebook: distances by ``torch.sum(x**2, dim=1,
  keepdim=True) + ... - 2 * torch.matmul``, ``torch.argmin(...).unsqueeze(1)``, one-hot by
  ``scatter_(1, idx, 1)``, the straight-through ``z + (zq - z).detach()``, the perplexity of
  code use; the EMA codebook assigns a tensor to a registered buffer's name, ``self.sums =
  nn.Parameter(<graph tensor>)`` and ``self.codebook.weight = nn.Parameter(...)`` in
  ``forward``, from ``nn.Parameter(torch.Tensor(k, d))`` and ``.data.normal_()``;
  ``ConvTranspose2d`` decoders, ``nn.ReLU(True)``, ``next(iter(loader))``;
- graph networks over PyTorch Geometric-style helpers (self-loops by ``arange(...)
  .unsqueeze(0).repeat(2, 1)``, degrees by ``scatter_add_`` of ones, ``deg.pow(-0.5)`` with
  ``inv[inv == float("inf")] = 0``, segment reductions by ``new_zeros(shape).scatter_add_`` /
  ``scatter_reduce_(reduce="amax", include_self=False)`` over ``index.view(shape)
  .expand_as(src)``, a segment softmax with ``index_select``, ``index_add_`` aggregation, a
  mean readout whose counts are ``clamp(min=1)``): a GCN, a GAT layer and a max-pooling
  GraphSAGE layer trained on a batch of small graphs, one node with no incoming edge.

The defects found:

- ``scatter_reduce(_)`` refused ``reduce="amax"``/``"amin"`` (the max aggregation of graph
  networks); they now reduce, and split the gradient among tied values as torch does.

The causal mask's ``.type(torch.uint8)`` runs as written since retrograd has uint8 tensors (4
December; it was ported as ``torch.long`` before). Not fixed, changed in the port instead:
the VQ-VAE's ``x + self.body(x)`` behind ``nn.ReLU(True)``: in torch the ReLU rectifies ``x``
itself, so the sum adds the rectified ``x``; API.md section 8 fixes ``inplace=True`` as
accepted with nothing modified in place, so the port writes ``torch.relu(x) + self.body(x)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both


class SharedDraws:
    """``randn``/``randint``/``randperm`` and training-mode ``nn.Dropout`` of a library drawing
    from one seeded stream, and ``RandomSampler`` permuting by it: the same draws for both
    libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def randn(*size, generator=None, dtype=None, device=None, **_):
            shape = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
            return lib.tensor(rng.standard_normal(tuple(shape)), dtype=dtype or lib.float32)

        def randint(low, high=None, size=None, generator=None, dtype=None, device=None, **_):
            if size is None:  # torch's randint(high, size)
                low, high, size = 0, low, high
            return lib.tensor(rng.integers(low, high, tuple(size)), dtype=dtype or lib.int64)

        def randperm(n, generator=None, dtype=None, device=None, **_):
            return lib.tensor(rng.permutation(n), dtype=dtype or lib.int64)

        original = lib.nn.Dropout.forward

        def dropout(self, x):
            if not self.training or self.p == 0.0:
                return original(self, x)
            keep = rng.uniform(size=tuple(x.shape)) >= self.p
            return x * lib.tensor(keep / (1.0 - self.p), dtype=x.dtype)

        def sampler(self):
            yield from rng.permutation(len(self.data_source)).tolist()

        monkeypatch.setattr(lib, "randn", randn)
        monkeypatch.setattr(lib, "randint", randint)
        monkeypatch.setattr(lib, "randperm", randperm)
        monkeypatch.setattr(lib.nn.Dropout, "forward", dropout)
        monkeypatch.setattr(lib.utils.data.RandomSampler, "__iter__", sampler)


def run_both(monkeypatch, source, step, seed, build, go):
    """``go(names, lib, model)`` run in torch and in the port, with shared draws; the port's
    model (``build(names)``) loaded with torch's initial state."""
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(seed).patch(patch, lib)
            names = both(source, step)[0 if lib is torch else 1]
            torch.manual_seed(0)
            model = build(names)
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            records.append(go(names, lib, model))
    return records


# -- an encoder-decoder Transformer on the copy task -----------------------------------------------
COPY_TASK_SOURCE = """
import copy
from torch.nn.functional import log_softmax
from torch.optim import lr_scheduler


def replicate(layer, n):
    "n independent deep copies of one layer (each gets its own weights)."
    return nn.ModuleList([copy.deepcopy(layer) for _ in range(n)])


class Norm(nn.Module):
    "Layer normalisation by the unbiased standard deviation, with a learned gain and shift."

    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width))
        self.shift = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.gain * centred / (x.std(-1, keepdim=True) + self.eps) + self.shift


def causal_mask(n):
    "(1, n, n), True where query i may read key j, i.e. j <= i."
    above = torch.triu(torch.ones((1, n, n)), diagonal=1).type(torch.uint8)
    return above == 0


def scaled_attention(q, k, v, mask=None, drop=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # a large negative, not -inf
    weights = scores.softmax(dim=-1)
    if drop is not None:
        weights = drop(weights)
    return torch.matmul(weights, v), weights


class MultiHead(nn.Module):
    def __init__(self, heads, width, p=0.1):
        super().__init__()
        assert width % heads == 0
        self.heads, self.per_head = heads, width // heads
        self.proj = replicate(nn.Linear(width, width), 4)  # q, k, v and the output
        self.drop = nn.Dropout(p=p)
        self.weights = None

    def forward(self, q, k, v, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        b = q.size(0)
        q, k, v = [
            layer(t).view(b, -1, self.heads, self.per_head).transpose(1, 2)
            for layer, t in zip(self.proj, (q, k, v))
        ]
        mixed, self.weights = scaled_attention(q, k, v, mask=mask, drop=self.drop)
        mixed = mixed.transpose(1, 2).contiguous().view(b, -1, self.heads * self.per_head)
        return self.proj[-1](mixed)


class FeedForward(nn.Module):
    def __init__(self, width, hidden, p=0.1):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.down(self.drop(self.up(x).relu()))


class PreNormResidual(nn.Module):
    "x + dropout(f(norm(x))) for any sublayer f."

    def __init__(self, width, p):
        super().__init__()
        self.norm = Norm(width)
        self.drop = nn.Dropout(p)

    def forward(self, x, f):
        return x + self.drop(f(self.norm(x)))


class EncoderBlock(nn.Module):
    def __init__(self, width, attn, ff, p):
        super().__init__()
        self.width = width
        self.attn, self.ff = attn, ff
        self.res = replicate(PreNormResidual(width, p), 2)

    def forward(self, x, mask):
        x = self.res[0](x, lambda h: self.attn(h, h, h, mask))
        return self.res[1](x, self.ff)


class DecoderBlock(nn.Module):
    def __init__(self, width, self_attn, cross_attn, ff, p):
        super().__init__()
        self.width = width
        self.self_attn, self.cross_attn, self.ff = self_attn, cross_attn, ff
        self.res = replicate(PreNormResidual(width, p), 3)

    def forward(self, x, mem, mem_mask, causal):
        x = self.res[0](x, lambda h: self.self_attn(h, h, h, causal))
        x = self.res[1](x, lambda h: self.cross_attn(h, mem, mem, mem_mask))
        return self.res[2](x, self.ff)


class Stack(nn.Module):
    "n copies of one block and a closing norm."

    def __init__(self, block, n):
        super().__init__()
        self.blocks = replicate(block, n)
        self.norm = Norm(block.width)

    def forward(self, x, *context):
        for block in self.blocks:
            x = block(x, *context)
        return self.norm(x)


class TokenEmbedding(nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.table = nn.Embedding(vocab, width)
        self.width = width

    def forward(self, ids):
        return self.table(ids) * math.sqrt(self.width)


class SinusoidalPositions(nn.Module):
    def __init__(self, width, p, max_len=64):
        super().__init__()
        self.drop = nn.Dropout(p=p)
        table = torch.zeros(max_len, width)
        where = torch.arange(0, max_len).unsqueeze(1)
        freq = torch.exp(torch.arange(0, width, 2) * -(math.log(10000.0) / width))
        table[:, 0::2] = torch.sin(where * freq)
        table[:, 1::2] = torch.cos(where * freq)
        self.register_buffer("pe", table.unsqueeze(0))

    def forward(self, x):
        return self.drop(x + self.pe[:, : x.size(1)].requires_grad_(False))


class LogProbHead(nn.Module):
    def __init__(self, width, vocab):
        super().__init__()
        self.proj = nn.Linear(width, vocab)

    def forward(self, h):
        return log_softmax(self.proj(h), dim=-1)


class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder, src_embed, tgt_embed, head):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_embed, self.tgt_embed = src_embed, tgt_embed
        self.head = head

    def encode(self, ids, ids_mask):
        return self.encoder(self.src_embed(ids), ids_mask)

    def decode(self, memory, ids_mask, out_ids, out_mask):
        return self.decoder(self.tgt_embed(out_ids), memory, ids_mask, out_mask)

    def forward(self, ids, out_ids, ids_mask, out_mask):
        memory = self.encode(ids, ids_mask)
        return self.decode(memory, ids_mask, out_ids, out_mask)


def build_transformer(src_vocab, tgt_vocab, layers=2, width=32, hidden=64, heads=4, p=0.1):
    dup = copy.deepcopy
    attn = MultiHead(heads, width)
    ff = FeedForward(width, hidden, p)
    pos = SinusoidalPositions(width, p)
    model = Seq2Seq(
        Stack(EncoderBlock(width, dup(attn), dup(ff), p), layers),
        Stack(DecoderBlock(width, dup(attn), dup(attn), dup(ff), p), layers),
        nn.Sequential(TokenEmbedding(src_vocab, width), dup(pos)),
        nn.Sequential(TokenEmbedding(tgt_vocab, width), dup(pos)),
        LogProbHead(width, tgt_vocab),
    )
    for w in model.parameters():  # Glorot for every matrix
        if w.dim() > 1:
            nn.init.xavier_uniform_(w)
    return model


class CopyBatch:
    "Source, shifted target and their masks; pad positions are masked out."

    def __init__(self, src, tgt, pad):
        self.src = src
        self.src_mask = (src != pad).unsqueeze(-2)  # (B, 1, S)
        self.tgt_in, self.tgt_out = tgt[:, :-1], tgt[:, 1:]
        visible = (self.tgt_in != pad).unsqueeze(-2)
        self.tgt_mask = visible & causal_mask(self.tgt_in.size(-1)).type_as(visible.data)
        self.ntokens = (self.tgt_out != pad).data.sum()


class Progress:
    def __init__(self):
        self.steps = 0
        self.updates = 0
        self.examples = 0
        self.tokens = 0  # becomes a 0-d tensor: the batches count their tokens as tensors


def copy_batches(vocab, rows, count):
    for _ in range(count):
        seq = torch.randint(1, vocab, size=(rows, 10))
        seq[:, 0] = 1
        seq = seq.requires_grad_(False).clone().detach()
        yield CopyBatch(seq, seq.clone(), 0)


class SmoothedKL(nn.Module):
    "KL divergence to a smoothed one-hot target; pad columns and pad rows get no mass."

    def __init__(self, classes, pad, smoothing=0.0):
        super().__init__()
        self.kl = nn.KLDivLoss(reduction="sum")
        self.classes, self.pad, self.smoothing = classes, pad, smoothing
        self.target = None

    def forward(self, logp, gold):
        assert logp.size(1) == self.classes
        target = logp.data.clone()
        target.fill_(self.smoothing / (self.classes - 2))
        target.scatter_(1, gold.data.unsqueeze(1), 1.0 - self.smoothing)
        target[:, self.pad] = 0
        pad_rows = torch.nonzero(gold.data == self.pad)
        if pad_rows.dim() > 0:
            target.index_fill_(0, pad_rows.squeeze(), 0.0)
        self.target = target
        return self.kl(logp, target.clone().detach())


class TokenLoss:
    def __init__(self, head, criterion):
        self.head, self.criterion = head, criterion

    def __call__(self, hidden, gold, norm):
        logp = self.head(hidden)
        flat = logp.contiguous().view(-1, logp.size(-1))
        loss = self.criterion(flat, gold.contiguous().view(-1)) / norm
        return loss.data * norm, loss


def noam(step, width, factor, warmup):
    step = max(step, 1)  # LambdaLR asks for step 0 first: 0 ** -0.5 would fail
    return factor * width ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def one_epoch(batches, model, loss_fn, opt=None, sched=None):
    progress = Progress()
    summed, tokens = 0, 0
    for batch in batches:
        hidden = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss_sum, loss = loss_fn(hidden, batch.tgt_out, batch.ntokens)
        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            progress.steps += 1
            progress.updates += 1
            progress.examples += batch.src.shape[0]
            progress.tokens += batch.ntokens
        summed += loss_sum
        tokens += batch.ntokens
    return summed / tokens, progress


def greedy(model, src, src_mask, steps, start):
    mem = model.encode(src, src_mask)
    out = torch.zeros(1, 1).fill_(start).type_as(src.data)
    for _ in range(steps - 1):
        h = model.decode(mem, src_mask, out, causal_mask(out.size(1)).type_as(src.data))
        _, best = torch.max(model.head(h[:, -1]), dim=1)
        best = best.data[0]
        out = torch.cat([out, torch.zeros(1, 1).type_as(src.data).fill_(best)], dim=1)
    return out


def train_copy(model, smoothing, records):
    vocab = 11
    criterion = SmoothedKL(vocab, pad=0, smoothing=smoothing)
    opt = torch.optim.Adam(model.parameters(), lr=0.5, betas=(0.9, 0.98), eps=1e-9)
    width = model.src_embed[0].width
    sched = lr_scheduler.LambdaLR(optimizer=opt, lr_lambda=lambda s: noam(s, width, 1.0, 400))
    for epoch in range(2):
        model.train()
        loss_fn = TokenLoss(model.head, criterion)
        mean, progress = one_epoch(copy_batches(vocab, 6, 3), model, loss_fn, opt, sched)
        lr = sched.get_last_lr()[0]
        records.append([mean.item(), int(progress.tokens), progress.updates, lr])
        model.eval()
        records.append(one_epoch(copy_batches(vocab, 6, 1), model, loss_fn)[0].item())
    src = torch.LongTensor([list(range(10))])
    records.append(greedy(model, src, torch.ones(1, 1, 10), steps=10, start=0).tolist())
    records.append({n: w.detach().numpy().copy() for n, w in model.named_parameters()})
    # a batch holding a pad target: its row of the smoothed target is zeroed
    logp = log_softmax(torch.arange(0.0, 22.0).view(2, 11) / 7, dim=-1)
    records.append(SmoothedKL(11, 0, 0.4)(logp, torch.LongTensor([3, 0])).item())
    return records
"""

COPY_TASK_STEP = [
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    ),
]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_transformer_copy_task_matches_torch(monkeypatch, smoothing):
    records = run_both(
        monkeypatch,
        COPY_TASK_SOURCE,
        COPY_TASK_STEP,
        3,
        lambda names: names["build_transformer"](11, 11, layers=1, width=16, hidden=32, heads=2),
        lambda names, lib, model: names["train_copy"](model, smoothing, []),
    )
    # the key projections' biases shift every score of a row alike: their true gradient is 0
    keys = [
        "encoder.blocks.0.attn.proj.1.bias",
        "decoder.blocks.0.self_attn.proj.1.bias",
        "decoder.blocks.0.cross_attn.proj.1.bias",
    ]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=keys)


# -- a BiLSTM-CRF tagger ---------------------------------------------------------------------------
CRF_SOURCE = """
BEGIN, END = "<bos>", "<eos>"


def best_index(row):
    "Where a (1, n) row peaks, as a Python int."
    _, where = torch.max(row, 1)
    return where.item()


def stable_logsumexp(row):
    peak = row[0, best_index(row)]
    spread = peak.view(1, -1).expand(1, row.size()[1])
    return peak + torch.log(torch.sum(torch.exp(row - spread)))


def as_ids(tokens, index):
    return torch.tensor([index[t] for t in tokens], dtype=torch.long)


class CRFTagger(nn.Module):
    def __init__(self, n_words, tags, emb, hidden):
        super().__init__()
        self.tags, self.n_tags, self.hidden = tags, len(tags), hidden
        self.embed = nn.Embedding(n_words, emb)
        self.rnn = nn.LSTM(emb, hidden // 2, num_layers=1, bidirectional=True)
        self.emit = nn.Linear(hidden, self.n_tags)
        # trans[i, j] scores the move from tag j to tag i
        self.trans = nn.Parameter(torch.randn(self.n_tags, self.n_tags))
        self.trans.data[tags[BEGIN], :] = -10000  # nothing moves into BEGIN
        self.trans.data[:, tags[END]] = -10000  # nothing leaves END

    def fresh_state(self):
        half = self.hidden // 2
        return torch.randn(2, 1, half), torch.randn(2, 1, half)

    def emissions(self, ids):
        seq = self.embed(ids).view(len(ids), 1, -1)
        out, _ = self.rnn(seq, self.fresh_state())
        return self.emit(out.view(len(ids), self.hidden))

    def log_partition(self, feats):
        alpha = torch.full((1, self.n_tags), -10000.)
        alpha[0][self.tags[BEGIN]] = 0.
        for feat in feats:
            column = []
            for tag in range(self.n_tags):
                emit = feat[tag].view(1, -1).expand(1, self.n_tags)
                column.append(stable_logsumexp(alpha + self.trans[tag].view(1, -1) + emit).view(1))
            alpha = torch.cat(column).view(1, -1)
        return stable_logsumexp(alpha + self.trans[self.tags[END]])

    def gold_score(self, feats, tags):
        total = torch.zeros(1)
        tags = torch.cat([torch.tensor([self.tags[BEGIN]], dtype=torch.long), tags])
        for t, feat in enumerate(feats):
            total = total + self.trans[tags[t + 1], tags[t]] + feat[tags[t + 1]]
        return total + self.trans[self.tags[END], tags[-1]]

    def viterbi(self, feats):
        score = torch.full((1, self.n_tags), -10000.)
        score[0][self.tags[BEGIN]] = 0
        pointers = []
        for feat in feats:
            came_from, kept = [], []
            for tag in range(self.n_tags):
                via = score + self.trans[tag]
                j = best_index(via)
                came_from.append(j)
                kept.append(via[0][j].view(1))
            score = (torch.cat(kept) + feat).view(1, -1)
            pointers.append(came_from)
        final = score + self.trans[self.tags[END]]
        last = best_index(final)
        best = final[0][last]
        path = [last]
        for came_from in reversed(pointers):
            last = came_from[last]
            path.append(last)
        assert path.pop() == self.tags[BEGIN]
        return best, path[::-1]

    def nll(self, ids, tags):
        feats = self.emissions(ids)
        return self.log_partition(feats) - self.gold_score(feats, tags)

    def forward(self, ids):
        return self.viterbi(self.emissions(ids))


EMB, HIDDEN = 5, 4
corpus = [
    ("maria lives in new york city since may".split(), "B O O B I I O O".split()),
    ("the bank of england raised rates".split(), "O B I I O O".split()),
]
vocab = {}
for words, _ in corpus:
    for w in words:
        vocab.setdefault(w, len(vocab))
tag_index = {"B": 0, "I": 1, "O": 2, BEGIN: 3, END: 4}


def fit(model, records):
    opt = optim.SGD(model.parameters(), lr=0.05, weight_decay=1e-4)
    probe = as_ids(corpus[0][0], vocab)
    with torch.no_grad():
        best, path = model(probe)
        records.extend([best.item(), [path]])
    for epoch in range(3):
        for words, tags in corpus:
            model.zero_grad()
            loss = model.nll(as_ids(words, vocab), as_ids(tags, tag_index))
            loss.backward()
            opt.step()
            records.append(loss.item())
    with torch.no_grad():
        best, path = model(probe)
        records.extend([best.item(), [path]])
    records.append({name: w.detach().numpy().copy() for name, w in model.named_parameters()})
    return records
"""

CRF_STEP = [
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    ),
]


def test_bilstm_crf_tagger_matches_torch(monkeypatch):
    records = run_both(
        monkeypatch,
        CRF_SOURCE,
        CRF_STEP,
        5,
        lambda names: names["CRFTagger"](
            len(names["vocab"]), names["tag_index"], names["EMB"], names["HIDDEN"]
        ),
        lambda names, lib, model: names["fit"](model, []),
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-4)


# -- a GRU encoder-decoder with additive attention for translation --------------------------------
SEQ2SEQ_SOURCE = """
import re
import unicodedata

from torch.utils.data import DataLoader, RandomSampler, TensorDataset

device = torch.device("cpu")

BOS, EOS = 0, 1
MAX_LEN = 6


class Vocabulary:
    def __init__(self, name):
        self.name = name
        self.index = {}
        self.counts = {}
        self.words = {BOS: "<bos>", EOS: "<eos>"}

    def __len__(self):
        return len(self.words)

    def add(self, sentence):
        for w in sentence.split(" "):
            if w in self.index:
                self.counts[w] += 1
            else:
                self.index[w] = len(self.words)
                self.counts[w] = 1
                self.words[self.index[w]] = w


def clean(text):
    "Lower case, accents stripped, punctuation split off, everything else dropped."
    text = "".join(
        ch for ch in unicodedata.normalize("NFD", text.lower().strip())
        if unicodedata.category(ch) != "Mn"
    )
    text = re.sub(r"([.!?])", r" \\1", text)
    return re.sub(r"[^a-z!?.]+", " ", text).strip()


def read_pairs(lines):
    "Tab-separated (english, german) lines as [german, english] pairs and both vocabularies."
    pairs = [[clean(side) for side in line.split("\\t")][::-1] for line in lines]
    src, tgt = Vocabulary("deu"), Vocabulary("eng")
    for de, en in pairs:
        src.add(de)
        tgt.add(en)
    return src, tgt, pairs


def ids_of(vocab, sentence):
    return [vocab.index[w] for w in sentence.split(" ")] + [EOS]


class Encoder(nn.Module):
    def __init__(self, n_words, hidden, p=0.1):
        super().__init__()
        self.embed = nn.Embedding(n_words, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.drop = nn.Dropout(p)

    def forward(self, ids):
        return self.rnn(self.drop(self.embed(ids)))


class AdditiveAttention(nn.Module):
    "score(q, k) = v . tanh(W q + U k)"

    def __init__(self, hidden):
        super().__init__()
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.score = nn.Linear(hidden, 1)

    def forward(self, q, keys):
        e = self.score(torch.tanh(self.query(q) + self.key(keys)))  # (B, T, 1)
        w = F.softmax(e.squeeze(2).unsqueeze(1), dim=-1)  # (B, 1, T)
        return torch.bmm(w, keys), w


class AttentionDecoder(nn.Module):
    def __init__(self, hidden, n_words, p=0.1):
        super().__init__()
        self.embed = nn.Embedding(n_words, hidden)
        self.attn = AdditiveAttention(hidden)
        self.rnn = nn.GRU(2 * hidden, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, n_words)
        self.drop = nn.Dropout(p)

    def step(self, token, h, keys):
        context, w = self.attn(h.permute(1, 0, 2), keys)
        x = torch.cat((self.drop(self.embed(token)), context), dim=2)
        out, h = self.rnn(x, h)
        return self.proj(out), h, w

    def forward(self, keys, h, forced=None):
        token = torch.empty(keys.size(0), 1, dtype=torch.long, device=device).fill_(BOS)
        logits, weights = [], []
        for t in range(MAX_LEN):
            out, h, w = self.step(token, h, keys)
            logits.append(out)
            weights.append(w)
            if forced is None:  # feed back the model's own guess
                _, top = out.topk(1)
                token = top.squeeze(-1).detach()
            else:  # teacher forcing
                token = forced[:, t].unsqueeze(1)
        logp = F.log_softmax(torch.cat(logits, dim=1), dim=-1)
        return logp, h, torch.cat(weights, dim=1)


def make_loader(lines, batch_size):
    src, tgt, pairs = read_pairs(lines)
    x = np.zeros((len(pairs), MAX_LEN), dtype=np.int32)
    y = np.zeros((len(pairs), MAX_LEN), dtype=np.int32)
    for row, (de, en) in enumerate(pairs):
        a, b = ids_of(src, de), ids_of(tgt, en)
        x[row, : len(a)] = a
        y[row, : len(b)] = b
    data = TensorDataset(torch.LongTensor(x).to(device), torch.LongTensor(y).to(device))
    loader = DataLoader(data, sampler=RandomSampler(data), batch_size=batch_size)
    return src, tgt, pairs, loader


def fit(loader, encoder, decoder, epochs, lr):
    enc_opt = optim.Adam(encoder.parameters(), lr=lr)
    dec_opt = optim.Adam(decoder.parameters(), lr=lr)
    nll = nn.NLLLoss()
    history = []
    for epoch in range(epochs):
        running = 0.0
        for x, y in loader:
            enc_opt.zero_grad()
            dec_opt.zero_grad()
            keys, h = encoder(x)
            logp, _, _ = decoder(keys, h, y)
            loss = nll(logp.view(-1, logp.size(-1)), y.view(-1))
            loss.backward()
            enc_opt.step()
            dec_opt.step()
            running += loss.item()
        history.append(running / len(loader))
    return history


def translate(encoder, decoder, sentence, src, tgt):
    with torch.no_grad():
        x = torch.tensor(ids_of(src, sentence), dtype=torch.long, device=device).view(1, -1)
        keys, h = encoder(x)
        logp, _, weights = decoder(keys, h)
        _, top = logp.topk(1)
        words = []
        for i in top.squeeze():
            if i.item() == EOS:
                words.append("<eos>")
                break
            words.append(tgt.words[i.item()])
    return words, weights


LINES = [
    "Hi.\\tHallo!",
    "Run!\\tLauf!",
    "Wait!\\tWarte!",
    "I'm fine.\\tMir geht's gut.",
    "Cheers!\\tZum Wohl!",
    "Go away!\\tGeh weg!",
    "He ran.\\tEr rannte.",
    "I lost.\\tIch habe verloren.",
]


def setup(hidden=8, batch_size=3):
    src, tgt, pairs, loader = make_loader(LINES, batch_size)
    encoder = Encoder(len(src), hidden).to(device)
    decoder = AttentionDecoder(hidden, len(tgt)).to(device)
    return src, tgt, pairs, loader, encoder, decoder


def run(records, src, tgt, pairs, loader, encoder, decoder):
    records.append(fit(loader, encoder, decoder, 3, lr=0.01))
    encoder.eval()
    decoder.eval()
    for de, _ in pairs[:3]:
        words, weights = translate(encoder, decoder, de, src, tgt)
        records.extend([words, weights.numpy().copy()])
    records.append(
        {n: p.detach().numpy().copy() for m in (encoder, decoder) for n, p in m.named_parameters()}
    )
    return records
"""

SEQ2SEQ_STEP = [
    (
        "            loss.backward()\n            enc_opt.step()\n            dec_opt.step()",
        "            grads = loss.backward()\n            enc_opt.step(grads)\n"
        "            dec_opt.step(grads)",
    ),
]


def test_gru_attention_translation_matches_torch(monkeypatch):
    initial = None
    records = []
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(7).patch(patch, lib)
            names = both(SEQ2SEQ_SOURCE, SEQ2SEQ_STEP)[0 if lib is torch else 1]
            torch.manual_seed(0)
            built = names["setup"]()
            encoder, decoder = built[-2], built[-1]
            if initial is None:
                initial = [
                    {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                    for m in (encoder, decoder)
                ]
            else:
                for m, state in zip((encoder, decoder), initial):
                    m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            records.append(names["run"]([], *built))
    # the score layer's bias shifts every score of a row alike: its true gradient is 0
    skip = ["attn.score.bias"]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=skip)


# -- a bidirectional LSTM sentiment classifier over packed batches ---------------------------------
SENTIMENT_SOURCE = """
import collections


class SentimentLSTM(nn.Module):
    def __init__(self, n_words, emb, hidden, n_classes, layers, bidirectional, p, pad):
        super().__init__()
        self.embedding = nn.Embedding(n_words, emb, padding_idx=pad)
        self.lstm = nn.LSTM(
            emb, hidden, layers, bidirectional=bidirectional, dropout=p, batch_first=True
        )
        self.fc = nn.Linear(2 * hidden if bidirectional else hidden, n_classes)
        self.drop = nn.Dropout(p)

    def forward(self, ids, lengths):
        x = self.drop(self.embedding(ids))  # (batch, time, emb)
        packed = nn.utils.rnn.pack_padded_sequence(
            x, lengths, batch_first=True, enforce_sorted=False
        )
        packed_out, (h, c) = self.lstm(packed)
        out, out_lengths = nn.utils.rnn.pad_packed_sequence(packed_out)
        # h: (layers * directions, batch, hidden); the last layer's two directions
        if self.lstm.bidirectional:
            last = torch.cat([h[-1], h[-2]], dim=-1)
        else:
            last = h[-1]
        return self.fc(self.drop(last))


def init_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.xavier_normal_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LSTM):
        for name, w in module.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(w)
            elif "bias" in name:
                nn.init.zeros_(w)


def trainable(model):
    return sum(w.numel() for w in model.parameters() if w.requires_grad)


def tokenize(text):
    return text.lower().split()


class Vocab:
    def __init__(self, counts, specials):
        self.itos = list(specials) + sorted(counts)
        self.stoi = {word: i for i, word in enumerate(self.itos)}
        self.unk = None

    def __len__(self):
        return len(self.itos)

    def __getitem__(self, word):
        return self.stoi.get(word, self.unk)

    def lookup_indices(self, words):
        return [self[w] for w in words]


def collate_with(pad):
    def collate(samples):
        ids = nn.utils.rnn.pad_sequence(
            [s["ids"] for s in samples], padding_value=pad, batch_first=True
        )
        return {
            "ids": ids,
            "length": torch.stack([s["length"] for s in samples]),
            "label": torch.stack([s["label"] for s in samples]),
        }

    return collate


def loader(samples, batch_size, pad, shuffle=False):
    return torch.utils.data.DataLoader(
        samples, batch_size=batch_size, collate_fn=collate_with(pad), shuffle=shuffle
    )


def accuracy(logits, label):
    return logits.argmax(dim=-1).eq(label).sum() / logits.shape[0]


def one_pass(batches, model, criterion, optimizer=None):
    losses, accs = [], []
    for batch in batches:
        logits = model(batch["ids"], batch["length"])
        loss = criterion(logits, batch["label"])
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
        accs.append(accuracy(logits, batch["label"]).item())
    return np.mean(losses), np.mean(accs)


def classify(text, model, vocab):
    ids = vocab.lookup_indices(tokenize(text))
    logits = model(torch.LongTensor(ids).unsqueeze(dim=0), torch.LongTensor([len(ids)]))
    logits = logits.squeeze(dim=0)
    label = logits.argmax(dim=-1).item()
    return label, torch.softmax(logits, dim=-1)[label].item()


REVIEWS = [
    ("a warm and clever story", 1),
    ("dull", 0),
    ("we enjoyed every minute", 1),
    ("the plot drags and the jokes never land at all", 0),
    ("easily the most moving film of the decade", 1),
    ("wooden dialogue weak ending", 0),
    ("superb", 1),
    ("i checked my watch constantly", 0),
]


def build():
    counts = collections.Counter(w for text, _ in REVIEWS for w in tokenize(text))
    vocab = Vocab(counts, ["<unk>", "<pad>"])
    vocab.unk = vocab["<unk>"]
    pad = vocab["<pad>"]
    model = SentimentLSTM(len(vocab), 6, 5, 2, layers=2, bidirectional=True, p=0.0, pad=pad)
    model.apply(init_weights)
    return model, vocab, pad


def fit(model, vocab, pad, vectors, records):
    model.embedding.weight.data = torch.tensor(vectors, dtype=torch.float32)
    records.append(trainable(model))
    samples = []
    for text, label in REVIEWS:
        ids = vocab.lookup_indices(tokenize(text))
        length, label = torch.tensor(len(ids)), torch.tensor(label)
        samples.append({"ids": torch.tensor(ids), "length": length, "label": label})
    train_batches = loader(samples[:6], 3, pad, shuffle=True)
    valid_batches = loader(samples[6:], 3, pad)
    optimizer = optim.Adam(model.parameters(), lr=5e-3)
    criterion = nn.CrossEntropyLoss(reduction="mean")
    history = collections.defaultdict(list)
    for epoch in range(3):
        model.train()
        loss, acc = one_pass(train_batches, model, criterion, optimizer)
        history["train loss"].append(loss)
        history["train accuracy"].append(acc)
        model.eval()
        with torch.no_grad():
            loss, acc = one_pass(valid_batches, model, criterion)
        history["valid loss"].append(loss)
        history["valid accuracy"].append(acc)
    records.extend(history.values())
    records.append(list(classify("Dull and weak!", model, vocab)))
    records.append(list(classify("a clever and moving story", model, vocab)))
    records.append({name: w.detach().numpy().copy() for name, w in model.named_parameters()})
    return records
"""

SENTIMENT_STEP = [
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    ),
]


VOCAB_SIZE = 36  # two specials and the 34 words of REVIEWS


def test_lstm_sentiment_classifier_with_unsorted_packed_batches_matches_torch(monkeypatch):
    vectors = np.random.default_rng(11).standard_normal((VOCAB_SIZE, 6))
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(8).patch(patch, lib)
            names = both(SENTIMENT_SOURCE, SENTIMENT_STEP)[0 if lib is torch else 1]
            torch.manual_seed(0)
            model, vocab, pad = names["build"]()
            assert len(vocab) == VOCAB_SIZE
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            records.append(names["fit"](model, vocab, pad, vectors, []))
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- a VQ-VAE with a learned or an EMA codebook ----------------------------------------------------
VQVAE_SOURCE = """
def nearest_codes(flat, codebook):
    "One-hot (N, K) rows picking the nearest code of each row of flat, by squared distance."
    d = (
        torch.sum(flat**2, dim=1, keepdim=True)
        + torch.sum(codebook**2, dim=1)
        - 2 * torch.matmul(flat, codebook.t())
    )
    idx = torch.argmin(d, dim=1).unsqueeze(1)
    onehot = torch.zeros(idx.shape[0], codebook.shape[0], device=flat.device)
    onehot.scatter_(1, idx, 1)
    return onehot


def code_perplexity(onehot):
    usage = torch.mean(onehot, dim=0)
    return torch.exp(-torch.sum(usage * torch.log(usage + 1e-10)))


class Quantizer(nn.Module):
    "Codebook learned by gradient: codebook loss plus beta times the commitment loss."

    def __init__(self, n_codes, dim, beta):
        super().__init__()
        self.dim, self.n_codes, self.beta = dim, n_codes, beta
        self.codebook = nn.Embedding(n_codes, dim)
        self.codebook.weight.data.uniform_(-1 / n_codes, 1 / n_codes)

    def forward(self, z):
        z = z.permute(0, 2, 3, 1).contiguous()  # channels last
        flat = z.view(-1, self.dim)
        onehot = nearest_codes(flat, self.codebook.weight)
        zq = torch.matmul(onehot, self.codebook.weight).view(z.shape)
        loss = F.mse_loss(zq, z.detach()) + self.beta * F.mse_loss(zq.detach(), z)
        zq = z + (zq - z).detach()  # straight through
        return loss, zq.permute(0, 3, 1, 2).contiguous(), code_perplexity(onehot), onehot


class EMAQuantizer(nn.Module):
    "Codebook kept as running means of the vectors assigned to each code."

    def __init__(self, n_codes, dim, beta, decay, eps=1e-5):
        super().__init__()
        self.dim, self.n_codes, self.beta = dim, n_codes, beta
        self.decay, self.eps = decay, eps
        self.codebook = nn.Embedding(n_codes, dim)
        self.codebook.weight.data.normal_()
        self.register_buffer("counts", torch.zeros(n_codes))
        self.sums = nn.Parameter(torch.Tensor(n_codes, dim))
        self.sums.data.normal_()

    def forward(self, z):
        z = z.permute(0, 2, 3, 1).contiguous()
        flat = z.view(-1, self.dim)
        onehot = nearest_codes(flat, self.codebook.weight)
        zq = torch.matmul(onehot, self.codebook.weight).view(z.shape)
        if self.training:
            # a plain tensor assigned to the registered buffer's name
            self.counts = self.decay * self.counts + (1 - self.decay) * torch.sum(onehot, 0)
            total = torch.sum(self.counts.data)
            # Laplace smoothing keeps an unused code from dividing by zero
            self.counts = (self.counts + self.eps) / (total + self.n_codes * self.eps) * total
            self.sums = nn.Parameter(
                self.decay * self.sums + (1 - self.decay) * torch.matmul(onehot.t(), flat)
            )
            self.codebook.weight = nn.Parameter(self.sums / self.counts.unsqueeze(1))
        loss = self.beta * F.mse_loss(zq.detach(), z)
        zq = z + (zq - z).detach()
        return loss, zq.permute(0, 3, 1, 2).contiguous(), code_perplexity(onehot), onehot


class ResBlock(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self.body = nn.Sequential(
            nn.ReLU(True),
            nn.Conv2d(channels, hidden, 3, stride=1, padding=1, bias=False),
            nn.ReLU(True),
            nn.Conv2d(hidden, channels, 1, stride=1, bias=False),
        )

    def forward(self, x):
        return x + self.body(x)


def res_stack(channels, hidden, depth):
    return nn.Sequential(*[ResBlock(channels, hidden) for _ in range(depth)], nn.ReLU())


class Encoder(nn.Module):
    def __init__(self, channels, res_hidden, depth):
        super().__init__()
        self.down1 = nn.Conv2d(3, channels // 2, 4, stride=2, padding=1)
        self.down2 = nn.Conv2d(channels // 2, channels, 4, stride=2, padding=1)
        self.mix = nn.Conv2d(channels, channels, 3, stride=1, padding=1)
        self.res = res_stack(channels, res_hidden, depth)

    def forward(self, x):
        x = F.relu(self.down1(x))
        x = F.relu(self.down2(x))
        return self.res(self.mix(x))


class Decoder(nn.Module):
    def __init__(self, in_channels, channels, res_hidden, depth):
        super().__init__()
        self.mix = nn.Conv2d(in_channels, channels, 3, stride=1, padding=1)
        self.res = res_stack(channels, res_hidden, depth)
        self.up1 = nn.ConvTranspose2d(channels, channels // 2, 4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(channels // 2, 3, 4, stride=2, padding=1)

    def forward(self, z):
        x = self.res(self.mix(z))
        return self.up2(F.relu(self.up1(x)))


class VQVAE(nn.Module):
    def __init__(self, channels, depth, res_hidden, n_codes, code_dim, beta, decay=0.0):
        super().__init__()
        self.encoder = Encoder(channels, res_hidden, depth)
        self.to_codes = nn.Conv2d(channels, code_dim, 1, stride=1)
        if decay > 0.0:
            self.vq = EMAQuantizer(n_codes, code_dim, beta, decay)
        else:
            self.vq = Quantizer(n_codes, code_dim, beta)
        self.decoder = Decoder(code_dim, channels, res_hidden, depth)

    def forward(self, x):
        vq_loss, zq, perplexity, _ = self.vq(self.to_codes(self.encoder(x)))
        return vq_loss, self.decoder(zq), perplexity


def fit(model, batches, variance, records, updates=4, lr=1e-3):
    opt = optim.Adam(model.parameters(), lr=lr, amsgrad=False)
    model.train()
    recon_errors, perplexities = [], []
    for step in range(updates):
        images, _ = next(iter(batches))
        opt.zero_grad()
        vq_loss, recon, perplexity = model(images)
        recon_error = F.mse_loss(recon, images) / variance
        loss = recon_error + vq_loss
        loss.backward()
        opt.step()
        recon_errors.append(recon_error.item())
        perplexities.append(perplexity.item())
    records.extend([recon_errors, perplexities])
    model.eval()
    images, _ = next(iter(batches))
    _, zq, _, _ = model.vq(model.to_codes(model.encoder(images)))
    records.append(model.decoder(zq).detach().numpy().copy())
    records.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
    return records
"""

VQVAE_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
    # The block opens with nn.ReLU(True), which in torch rectifies ``x`` itself before the
    # sum reads it; retrograd's inplace=True modifies nothing (API.md section 8), so the port
    # writes out what torch computes.
    ("        return x + self.body(x)", "        return torch.relu(x) + self.body(x)"),
]


@pytest.mark.parametrize("decay", [0.0, 0.9])
def test_vq_vae_with_and_without_ema_codebook_matches_torch(monkeypatch, decay):
    images = np.random.default_rng(2).uniform(-0.5, 0.5, (4, 3, 8, 8))
    records = run_both(
        monkeypatch,
        VQVAE_SOURCE,
        VQVAE_STEP,
        1,
        lambda names: names["VQVAE"](8, 2, 4, 6, 4, 0.25, decay),
        lambda names, lib, model: names["fit"](
            model,
            lib.utils.data.DataLoader(
                lib.utils.data.TensorDataset(
                    lib.tensor(images, dtype=lib.float32), lib.zeros(4, dtype=lib.int64)
                ),
                batch_size=2,
            ),
            float(np.var(images)),
            [],
        ),
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- message-passing graph networks ----------------------------------------------------------------
GNN_SOURCE = """
def with_self_loops(edge_index, num_nodes):
    loops = torch.arange(0, num_nodes, dtype=torch.long, device=edge_index.device)
    return torch.cat([edge_index, loops.unsqueeze(0).repeat(2, 1)], dim=1)


def in_degree(index, num_nodes=None, dtype=None):
    n = int(index.max()) + 1 if num_nodes is None else num_nodes
    deg = torch.zeros((n,), dtype=dtype, device=index.device)
    return deg.scatter_add_(0, index, torch.ones((index.size(0),), dtype=deg.dtype))


def spread(index, like, dim):
    "index (E,) viewed along dim of like and expanded to its shape."
    shape = [1] * like.dim()
    shape[dim] = -1
    return index.view(shape).expand_as(like)


def segment_reduce(src, index, dim_size, reduce="sum", dim=0):
    shape = list(src.size())
    shape[dim] = dim_size
    full = spread(index, src, dim)
    if reduce == "sum":
        return src.new_zeros(shape).scatter_add_(dim, full, src)
    if reduce == "mean":
        count = src.new_zeros(dim_size).scatter_add_(0, index, src.new_ones(src.size(dim)))
        total = src.new_zeros(shape).scatter_add_(dim, full, src)
        return total / spread(count.clamp(min=1), total, dim)
    if reduce == "max":
        return src.new_zeros(shape).scatter_reduce_(
            dim, full, src, reduce="amax", include_self=False
        )
    raise ValueError(reduce)


def segment_softmax(score, index, num_nodes):
    peak = segment_reduce(score.detach(), index, num_nodes, "max")
    e = (score - peak.index_select(0, index)).exp()
    return e / (segment_reduce(e, index, num_nodes, "sum") + 1e-16).index_select(0, index)


def mean_readout(x, graph_of, num_graphs=None):
    num_graphs = int(graph_of.max().item() + 1) if num_graphs is None else num_graphs
    return segment_reduce(x, graph_of, num_graphs, "mean")


class GraphConv(nn.Module):
    "Symmetrically normalised neighbourhood sum (Kipf and Welling)."

    def __init__(self, n_in, n_out):
        super().__init__()
        self.lin = nn.Linear(n_in, n_out, bias=False)
        self.bias = nn.Parameter(torch.empty(n_out))
        self.lin.reset_parameters()
        self.bias.data.zero_()

    def forward(self, feats, edge_index):
        x = feats
        src, dst = with_self_loops(edge_index, x.size(0))
        h = self.lin(x)
        deg = in_degree(dst, x.size(0), dtype=h.dtype)
        inv = deg.pow(-0.5)
        inv[inv == float("inf")] = 0
        coef = (inv[src] * inv[dst]).view(-1, 1)
        out = torch.zeros_like(h).index_add_(0, dst, coef * h[src])
        return out + self.bias


class GraphAttention(nn.Module):
    def __init__(self, n_in, n_out, heads=2, slope=0.2):
        super().__init__()
        self.heads, self.n_out, self.slope = heads, n_out, slope
        self.lin = nn.Linear(n_in, heads * n_out, bias=False)
        self.a_src = nn.Parameter(torch.empty(1, heads, n_out))
        self.a_dst = nn.Parameter(torch.empty(1, heads, n_out))
        self.bias = nn.Parameter(torch.empty(heads * n_out))
        nn.init.xavier_uniform_(self.a_src)
        nn.init.xavier_uniform_(self.a_dst)
        nn.init.zeros_(self.bias)

    def forward(self, x, edges):
        n = x.size(0)
        h = self.lin(x).view(-1, self.heads, self.n_out)
        src, dst = with_self_loops(edges, n)
        logits = (h * self.a_src).sum(dim=-1).index_select(0, src)
        logits = logits + (h * self.a_dst).sum(dim=-1).index_select(0, dst)
        alpha = segment_softmax(F.leaky_relu(logits, self.slope), dst, n)
        msgs = h.index_select(0, src) * alpha.unsqueeze(-1)
        out = segment_reduce(msgs, dst, n, "sum")
        return out.view(-1, self.heads * self.n_out) + self.bias


class MaxSAGE(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.neigh = nn.Linear(n_in, n_out)
        self.root = nn.Linear(n_in, n_out, bias=False)

    def forward(self, x, edges):
        src, dst = edges
        pooled = segment_reduce(x[src], dst, x.size(0), "max")
        return F.normalize(self.neigh(pooled) + self.root(x), p=2.0, dim=-1)


class GraphClassifier(nn.Module):
    def __init__(self, n_features, hidden, n_classes):
        super().__init__()
        self.gcn = GraphConv(n_features, hidden)
        self.gat = GraphAttention(hidden, hidden // 2, heads=2)
        self.sage = MaxSAGE(hidden, hidden)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x, edge_index, graph_of):
        x = F.relu(self.gcn(x, edge_index))
        x = F.elu(self.gat(x, edge_index))
        x = mean_readout(self.sage(x, edge_index), graph_of)
        x = F.dropout(x, p=0.0, training=self.training)  # off, as tuned
        return F.log_softmax(self.out(x), dim=-1)


def batch_graphs(graphs):
    "One disjoint union: node features, shifted edges, the graph of each node, the labels."
    xs, edges, owner, labels, shift = [], [], [], [], 0
    for g, (x, edge_index, label) in enumerate(graphs):
        xs.append(x)
        edges.append(edge_index + shift)
        owner.append(torch.full((x.size(0),), g, dtype=torch.long))
        labels.append(label)
        shift += x.size(0)
    return torch.cat(xs, 0), torch.cat(edges, 1), torch.cat(owner), torch.tensor(labels)


def fit(model, graphs, records):
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    batches = [batch_graphs(graphs[:3]), batch_graphs(graphs[3:])]
    for epoch in range(3):
        model.train()
        seen = 0.0
        for x, edge_index, owner, y in batches:
            opt.zero_grad()
            loss = F.nll_loss(model(x, edge_index, owner), y)
            loss.backward()
            opt.step()
            seen += float(loss) * y.size(0)
        records.append(seen / len(graphs))
    model.eval()
    right = sum(int((model(x, e, o).argmax(dim=1) == y).sum()) for x, e, o, y in batches)
    records.append(right)
    x, edge_index, _, _ = batches[0]
    records.append(in_degree(edge_index[1], x.size(0)).numpy().copy())
    records.append({name: w.detach().numpy().copy() for name, w in model.named_parameters()})
    return records
"""

GNN_STEP = [
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    ),
]


def _graphs(lib, rng):
    graphs = []
    for n, extra in ((4, 1), (5, 2), (3, 0), (6, 3), (4, 2)):
        ring = [(i, (i + 1) % n) for i in range(n)] + [
            tuple(rng.choice(n, 2, replace=False)) for _ in range(extra)
        ]
        edges = np.array(ring + [(b, a) for a, b in ring]).T
        if n == 6:  # a node no edge points at: its degree is 0 before the self-loop
            edges = edges[:, edges[1] != 5]
        graphs.append(
            (
                lib.tensor(rng.standard_normal((n, 3)), dtype=lib.float32),
                lib.tensor(edges, dtype=lib.int64),
                n % 2,
            )
        )
    return graphs


def test_message_passing_gnns_with_scatter_and_index_add_match_torch(monkeypatch):
    records = run_both(
        monkeypatch,
        GNN_SOURCE,
        GNN_STEP,
        0,
        lambda names: names["GraphClassifier"](3, 8, 2),
        lambda names, lib, model: names["fit"](model, _graphs(lib, np.random.default_rng(4)), []),
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- the defects found -----------------------------------------------------------------------------
IN_PLACE_LAYERS = {
    "ReLU": lambda nn: nn.ReLU(True),
    "LeakyReLU": lambda nn: nn.LeakyReLU(0.2, inplace=True),
    "ReLU6": lambda nn: nn.ReLU6(inplace=True),
    "Hardtanh": lambda nn: nn.Hardtanh(-0.5, 0.5, inplace=True),
    "ELU": lambda nn: nn.ELU(inplace=True),
    "CELU": lambda nn: nn.CELU(0.5, inplace=True),
    "SELU": lambda nn: nn.SELU(inplace=True),
    "SiLU": lambda nn: nn.SiLU(inplace=True),
    "Mish": lambda nn: nn.Mish(inplace=True),
    "Hardswish": lambda nn: nn.Hardswish(inplace=True),
    "Hardsigmoid": lambda nn: nn.Hardsigmoid(inplace=True),
    "Threshold": lambda nn: nn.Threshold(0.1, -1.0, inplace=True),
    "RReLU": lambda nn: nn.RReLU(inplace=True).eval(),
    "Dropout": lambda nn: nn.Dropout(1.0, inplace=True),
    "Dropout2d": lambda nn: nn.Dropout2d(1.0, inplace=True),
}


@pytest.mark.parametrize("name", list(IN_PLACE_LAYERS))
def test_in_place_activations_are_accepted_and_modify_nothing(name):
    """API.md section 8: ``inplace=True`` is accepted and nothing is modified in place; the
    result is torch's result."""
    values = np.array([[-2.0, -0.3, 0.0], [0.2, 0.7, 3.0]])
    expected = IN_PLACE_LAYERS[name](torch.nn)(torch.tensor(values)).numpy()
    layer = IN_PLACE_LAYERS[name](rg.nn)
    w = rg.tensor(values, requires_grad=True)
    x = w * 1.0
    y = layer(x)
    np.testing.assert_allclose(y.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x.detach().numpy(), values)
    leaf_out = layer(w)  # a leaf that requires grad: accepted (torch refuses it)
    np.testing.assert_allclose(leaf_out.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(w.detach().numpy(), values)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_amax_and_amin_with_torch_s_values_and_gradients(reduce, include_self, dim):
    rng = np.random.default_rng(dim)
    # small integers, so that many values tie (the gradient is split among them)
    base = rng.integers(0, 3, (4, 4)).astype(np.float64)
    src = rng.integers(0, 3, (5, 4) if dim == 0 else (4, 5)).astype(np.float64)
    index = rng.integers(0, 4, src.shape)
    weights = np.arange(16.0).reshape(4, 4)
    results = []
    for lib in (torch, rg):
        a = lib.tensor(base, requires_grad=True)
        b = lib.tensor(src, requires_grad=True)
        out = (a * 1.0).scatter_reduce(
            dim, lib.tensor(index), b * 1.0, reduce, include_self=include_self
        )
        loss = (out * lib.tensor(weights)).sum()
        if lib is torch:
            loss.backward()
            grads = (a.grad, b.grad)
        else:
            found = loss.backward()
            grads = (a.grad(found), b.grad(found))
        results.append([out.detach().numpy()] + [g.numpy() for g in grads])
    for mine, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-12, atol=1e-12)


def test_scatter_reduce_amax_of_a_part_of_src_and_in_place_as_torch_s():
    for lib in (torch, rg):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        src = lib.tensor([[9.0, -1.0], [0.0, 7.0]])
        out = x.scatter_reduce(1, lib.tensor([[2, 2]]), src, "amax", include_self=False)
        assert out.tolist() == [[1.0, 2.0, 9.0], [4.0, 5.0, 6.0]]
        ints = lib.tensor([[1, 2], [3, 4]])
        out = ints.scatter_reduce(0, lib.tensor([[1, 1]]), lib.tensor([[7, 0]]), "amin")
        assert out.tolist() == [[1, 2], [3, 0]]
        y = lib.zeros(3)
        y.scatter_reduce_(
            0, lib.tensor([0, 0]), lib.tensor([-2.0, -5.0]), reduce="amax", include_self=False
        )
        assert y.tolist() == [-2.0, 0.0, 0.0]
    with pytest.raises(rg.errors.InvalidArgumentError, match="median"):
        rg.zeros(2).scatter_reduce(0, rg.tensor([0]), rg.ones(1), "median")
