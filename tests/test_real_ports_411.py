"""Real ports, continued (the harness: ``tests/real_ports.py``): German-to-English
translation on the legacy torchtext pipeline, written here in the style of the last two
notebooks of bentrevett/pytorch-seq2seq (shared data and training cells, one model cell each):

- a convolutional sequence-to-sequence model: token and position embeddings (``torch.
  arange(0, length).unsqueeze(0).repeat(n, 1)``), ``nn.Conv1d`` blocks with ``F.glu(...,
  dim=1)`` and residuals scaled by ``torch.sqrt(torch.FloatTensor([0.5])).to(device)``, the
  decoder's causal padding ``torch.zeros(n, hid, kernel - 1).fill_(pad)`` joined by
  ``torch.cat((front, x), dim=2)``, attention by ``torch.matmul`` against
  ``keys.permute(0, 2, 1)``, ``logits.contiguous().view(-1, vocab)``, a clip of 0.1;
- a post-norm Transformer written out by hand (a ``torch.relu`` feed-forward): multi-head
  attention by ``x.view(n, -1, heads, head_width).permute(0, 2, 1, 3)`` and
  ``scores.masked_fill(mask == 0, -1e10)``, masks
  ``(src != pad).unsqueeze(1).unsqueeze(2)`` and ``pad_mask & torch.tril(torch.ones((length,
  length), device=device)).bool()``, embeddings scaled by ``torch.sqrt(torch.FloatTensor(
  [width]))``, ``nn.LayerNorm`` after each residual, ``model.apply`` of ``xavier_uniform_``
  where ``m.weight.dim() > 1``, Adam at ``lr=5e-4``;

each trained two epochs with ``CrossEntropyLoss(ignore_index=pad)`` and ``clip_grad_norm_``
(evaluation under ``torch.no_grad()``), the best model kept by ``torch.save``/``torch.load``
for the test loss, and a training example translated greedily (``logits.argmax(2)[:,
-1].item()`` over the re-decoded prefix, ``torch.LongTensor(ids).unsqueeze(0)``) with its
attention; the seeding cell calls ``torch.cuda.manual_seed`` and sets
``torch.backends.cudnn.deterministic``.

What stands in: ``torchtext.legacy`` (``Field`` with ``tokenize``, ``init_token``,
``eos_token``, ``lower``, ``batch_first`` and ``build_vocab(min_freq=)``; ``Multi30k.splits``;
``BucketIterator.splits``, here batching the examples in order) and ``spacy`` are stand-in
modules serving the synthetic corpus of ``tests/test_real_ports_410.py``. Dropout is 0 (each
library draws its own masks); ``initialize(model)`` gives the port torch's weights. The port
changes the import lines naming ``torch`` and the gradient lines.
"""

from __future__ import annotations

import collections
import importlib.machinery
import sys
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source
from test_real_ports_410 import Language, synthetic_multi30k

DATA_CELLS = """
import math
import random
import time

import numpy as np
import spacy
import torch
import torch.nn as nn
import torch.optim as optim
from torchtext.legacy import data, datasets

# German to English on a Multi30k-like corpus, with the legacy torchtext pipeline.
random.seed(0)
np.random.seed(0)
torch.manual_seed(0)
torch.cuda.manual_seed(0)
torch.backends.cudnn.deterministic = True  # (a no-op on CPU)

german, english = spacy.load("de_core_news_sm"), spacy.load("en_core_web_sm")


def words_of(nlp):
    return lambda text: [tok.text for tok in nlp.tokenizer(text)]


framing = dict(init_token="<sos>", eos_token="<eos>", lower=True, batch_first=True)
SRC = data.Field(tokenize=words_of(german), **framing)
TRG = data.Field(tokenize=words_of(english), **framing)
train_data, valid_data, test_data = datasets.Multi30k.splits(exts=(".de", ".en"), fields=(SRC, TRG))
for field in (SRC, TRG):
    field.build_vocab(train_data, min_freq=2)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
train_it, valid_it, test_it = data.BucketIterator.splits(
    (train_data, valid_data, test_data), batch_size=4, device=device
)
SRC_PAD, TRG_PAD = SRC.vocab.stoi[SRC.pad_token], TRG.vocab.stoi[TRG.pad_token]


def positions(tokens):
    # [0, 1, ..., len - 1] for every row of the batch
    n, length = tokens.shape
    return torch.arange(0, length).unsqueeze(0).repeat(n, 1).to(device)
"""

CONV_MODEL_CELLS = """
from torch.nn import functional as F

# A convolutional sequence-to-sequence model (Gehring et al.): gated convolutions over token
# plus position embeddings, and in the decoder, causal padding and attention at every layer.
HALF = torch.sqrt(torch.FloatTensor([0.5])).to(device)  # keeps residual sums' variance


class ConvEncoder(nn.Module):
    def __init__(self, vocab, emb, hid, layers, kernel, dropout, max_len=100):
        super().__init__()
        assert kernel % 2 == 1, "a centred kernel must be odd"
        self.tokens, self.places = nn.Embedding(vocab, emb), nn.Embedding(max_len, emb)
        self.up, self.down = nn.Linear(emb, hid), nn.Linear(hid, emb)
        self.convs = nn.ModuleList(
            nn.Conv1d(hid, 2 * hid, kernel, padding=(kernel - 1) // 2) for _ in range(layers)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, src):
        embedded = self.drop(self.tokens(src) + self.places(positions(src)))
        x = self.up(embedded).permute(0, 2, 1)  # channels first for Conv1d
        for conv in self.convs:
            x = (F.glu(conv(self.drop(x)), dim=1) + x) * HALF
        keys = self.down(x.permute(0, 2, 1))
        return keys, (keys + embedded) * HALF  # attention keys, attention values


class ConvDecoder(nn.Module):
    def __init__(self, vocab, emb, hid, layers, kernel, dropout, pad, max_len=100):
        super().__init__()
        self.kernel, self.pad = kernel, pad
        self.tokens, self.places = nn.Embedding(vocab, emb), nn.Embedding(max_len, emb)
        self.up, self.down = nn.Linear(emb, hid), nn.Linear(hid, emb)
        self.attn_down, self.attn_up = nn.Linear(hid, emb), nn.Linear(emb, hid)
        self.convs = nn.ModuleList(nn.Conv1d(hid, 2 * hid, kernel) for _ in range(layers))
        self.head = nn.Linear(emb, vocab)
        self.drop = nn.Dropout(dropout)

    def attend(self, embedded, h, keys, values):
        query = (self.attn_down(h.permute(0, 2, 1)) + embedded) * HALF
        weights = F.softmax(torch.matmul(query, keys.permute(0, 2, 1)), dim=2)
        context = self.attn_up(torch.matmul(weights, values))
        return weights, (h + context.permute(0, 2, 1)) * HALF

    def forward(self, trg, memory):
        keys, values = memory
        embedded = self.drop(self.tokens(trg) + self.places(positions(trg)))
        x = self.up(embedded).permute(0, 2, 1)
        n, hid = x.shape[0], x.shape[1]
        for conv in self.convs:
            x = self.drop(x)
            # kernel - 1 pad columns in front: position t sees nothing after t
            front = torch.zeros(n, hid, self.kernel - 1).fill_(self.pad).to(device)
            h = F.glu(conv(torch.cat((front, x), dim=2)), dim=1)
            weights, h = self.attend(embedded, h, keys, values)
            x = (h + x) * HALF
        return self.head(self.drop(self.down(x.permute(0, 2, 1)))), weights


class Translator(nn.Module):
    def __init__(self, enc, dec):
        super().__init__()
        self.encoder, self.decoder = enc, dec

    def encode(self, src):
        return self.encoder(src)

    def decode(self, trg, src, memory):
        return self.decoder(trg, memory)

    def forward(self, src, trg):
        return self.decode(trg, src, self.encode(src))


model = Translator(
    ConvEncoder(len(SRC.vocab), emb=8, hid=12, layers=2, kernel=3, dropout=0.0),
    ConvDecoder(len(TRG.vocab), emb=8, hid=12, layers=2, kernel=3, dropout=0.0, pad=TRG_PAD),
).to(device)
initialize(model)
optimizer = optim.Adam(model.parameters())  # lr 1e-3
CLIP, EXAMPLE = 0.1, 2
"""

TRANSFORMER_MODEL_CELLS = """
# A post-norm Transformer written out by hand: multi-head attention by view/permute, padding
# and causal masks as boolean tensors, learned positions added to sqrt(d)-scaled tokens.
class Attention(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        assert width % heads == 0
        self.width, self.heads, self.head_width = width, heads, width // heads
        self.q_proj, self.k_proj = nn.Linear(width, width), nn.Linear(width, width)
        self.v_proj, self.o_proj = nn.Linear(width, width), nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)
        self.temperature = torch.sqrt(torch.FloatTensor([self.head_width])).to(device)

    def split(self, x):  # (n, len, width) -> (n, heads, len, head width)
        return x.view(x.shape[0], -1, self.heads, self.head_width).permute(0, 2, 1, 3)

    def forward(self, q, k, v, mask=None):
        n = q.shape[0]
        q, k, v = self.split(self.q_proj(q)), self.split(self.k_proj(k)), self.split(self.v_proj(v))
        scores = torch.matmul(q, k.permute(0, 1, 3, 2)) / self.temperature
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e10)
        weights = torch.softmax(scores, dim=-1)
        mixed = torch.matmul(self.drop(weights), v).permute(0, 2, 1, 3).contiguous()
        return self.o_proj(mixed.view(n, -1, self.width)), weights


class FeedForward(nn.Module):
    def __init__(self, width, inner, dropout):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, inner), nn.Linear(inner, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


class EncoderBlock(nn.Module):
    def __init__(self, width, heads, inner, dropout):
        super().__init__()
        self.attn, self.ff = Attention(width, heads, dropout), FeedForward(width, inner, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.norm1(x + self.drop(self.attn(x, x, x, mask)[0]))
        return self.norm2(x + self.drop(self.ff(x)))


class DecoderBlock(nn.Module):
    def __init__(self, width, heads, inner, dropout):
        super().__init__()
        self.self_attn = Attention(width, heads, dropout)
        self.cross_attn = Attention(width, heads, dropout)
        self.ff = FeedForward(width, inner, dropout)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def forward(self, y, memory, trg_mask, src_mask):
        y = self.norms[0](y + self.drop(self.self_attn(y, y, y, trg_mask)[0]))
        mixed, weights = self.cross_attn(y, memory, memory, src_mask)
        y = self.norms[1](y + self.drop(mixed))
        return self.norms[2](y + self.drop(self.ff(y))), weights


class Embed(nn.Module):
    def __init__(self, vocab, width, dropout, max_len=100):
        super().__init__()
        self.tokens, self.places = nn.Embedding(vocab, width), nn.Embedding(max_len, width)
        self.drop = nn.Dropout(dropout)
        self.scale = torch.sqrt(torch.FloatTensor([width])).to(device)

    def forward(self, ids):
        return self.drop(self.tokens(ids) * self.scale + self.places(positions(ids)))


class Translator(nn.Module):
    def __init__(self, src_vocab, trg_vocab, width, heads, inner, layers, dropout):
        super().__init__()
        self.src_embed = Embed(src_vocab, width, dropout)
        self.trg_embed = Embed(trg_vocab, width, dropout)
        shape = (width, heads, inner, dropout)
        self.encoder = nn.ModuleList(EncoderBlock(*shape) for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderBlock(*shape) for _ in range(layers))
        self.head = nn.Linear(width, trg_vocab)

    @staticmethod
    def src_mask(src):
        return (src != SRC_PAD).unsqueeze(1).unsqueeze(2)  # (n, 1, 1, src len)

    @staticmethod
    def trg_mask(trg):
        length = trg.shape[1]
        causal = torch.tril(torch.ones((length, length), device=device)).bool()
        return (trg != TRG_PAD).unsqueeze(1).unsqueeze(2) & causal

    def encode(self, src):
        x, mask = self.src_embed(src), self.src_mask(src)
        for block in self.encoder:
            x = block(x, mask)
        return x

    def decode(self, trg, src, memory):
        y, trg_mask, src_mask = self.trg_embed(trg), self.trg_mask(trg), self.src_mask(src)
        for block in self.decoder:
            y, weights = block(y, memory, trg_mask, src_mask)
        return self.head(y), weights

    def forward(self, src, trg):
        return self.decode(trg, src, self.encode(src))


def xavier_matrices(m):
    if hasattr(m, "weight") and m.weight.dim() > 1:
        nn.init.xavier_uniform_(m.weight.data)  # matrices only: not biases or norms


sizes = dict(width=16, heads=4, inner=24, layers=2, dropout=0.0)
model = Translator(len(SRC.vocab), len(TRG.vocab), **sizes).to(device)
model.apply(xavier_matrices)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
CLIP, EXAMPLE = 1, 8
"""

LOOP_CELLS = """
trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
print(f"{trainable:,} trainable parameters")
criterion = nn.CrossEntropyLoss(ignore_index=TRG_PAD)


def shifted_loss(batch):
    # predict trg[1:] from trg[:-1]
    logits, _ = model(batch.src, batch.trg[:, :-1])
    target = batch.trg[:, 1:].contiguous().view(-1)
    return criterion(logits.contiguous().view(-1, logits.shape[-1]), target)


def run_epoch(iterator, clip=None):
    model.train(clip is not None)
    total = 0.0
    for batch in iterator:
        if clip is None:
            with torch.no_grad():
                loss = shifted_loss(batch)
        else:
            optimizer.zero_grad()
            loss = shifted_loss(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
            optimizer.step()
        total += loss.item()
    return total / len(iterator)


best = float("inf")
for epoch in range(2):
    began = time.time()
    train_loss, valid_loss = run_epoch(train_it, CLIP), run_epoch(valid_it)
    minutes = int((time.time() - began) / 60)
    if valid_loss < best:
        best = valid_loss
        torch.save(model.state_dict(), "best-model.pt")
    ppl = math.exp(train_loss)
    print(f"epoch {epoch + 1:02} ({minutes}m): train {train_loss:.3f} (ppl {ppl:7.3f})")
    print(f"\\t  valid {valid_loss:.3f} (ppl {math.exp(valid_loss):7.3f})")
    record.append([train_loss, valid_loss])  # per epoch

model.load_state_dict(torch.load("best-model.pt"))
test_loss = run_epoch(test_it)
print(f"test {test_loss:.3f} (ppl {math.exp(test_loss):7.3f})")
record.append(test_loss)
record.append({name: t.detach().numpy() for name, t in model.state_dict().items()})


def greedy_translate(words, max_len=50):
    model.eval()
    tokens = [SRC.init_token, *(w.lower() for w in words), SRC.eos_token]
    src = torch.LongTensor([SRC.vocab.stoi[t] for t in tokens]).unsqueeze(0).to(device)
    with torch.no_grad():
        memory = model.encode(src)
    out = [TRG.vocab.stoi[TRG.init_token]]
    for _ in range(max_len):  # re-decode the whole prefix at each step
        with torch.no_grad():
            prefix = torch.LongTensor(out).unsqueeze(0).to(device)
            logits, weights = model.decode(prefix, src, memory)
        out.append(logits.argmax(2)[:, -1].item())
        if out[-1] == TRG.vocab.stoi[TRG.eos_token]:
            break
    return [TRG.vocab.itos[i] for i in out][1:], weights


example = vars(train_data.examples[EXAMPLE])
print(f"src = {example['src']}")
translation, weights = greedy_translate(example["src"])
print(f"predicted = {translation}")
record.append(translation)
record.append(weights.numpy())
"""

CONVOLUTIONAL_SEQ2SEQ_SOURCE = DATA_CELLS + CONV_MODEL_CELLS + LOOP_CELLS
TRANSFORMER_SEQ2SEQ_SOURCE = DATA_CELLS + TRANSFORMER_MODEL_CELLS + LOOP_CELLS

LEGACY_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "            loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)\n"
        "            optimizer.step()\n",
        "            grads = loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=clip)\n"
        "            optimizer.step(grads)\n",
    ),
]
FUNCTIONAL_STEP = (
    "from torch.nn import functional as F\n",
    "from retrograd.nn import functional as F\n",
)

# -- the stand-ins for torchtext.legacy --


class Example:
    def __init__(self, src: list[str], trg: list[str]):
        self.src, self.trg = src, trg


class LegacyVocab:
    """``torchtext.legacy.vocab.Vocab``: the specials first, then the tokens by falling
    frequency (ties alphabetical), those seen fewer than ``min_freq`` times left out; unknown
    tokens look up the index of ``<unk>``."""

    def __init__(self, counts: collections.Counter, specials: list[str], min_freq: int):
        ordered = sorted(counts.items(), key=lambda item: item[0])
        ordered.sort(key=lambda item: item[1], reverse=True)
        self.itos = specials + [t for t, n in ordered if n >= min_freq and t not in specials]
        self.stoi = collections.defaultdict(lambda: 0, {t: i for i, t in enumerate(self.itos)})

    def __len__(self) -> int:
        return len(self.itos)


class Field:
    def __init__(self, tokenize, init_token=None, eos_token=None, lower=False, batch_first=False):
        self.tokenize, self.init_token, self.eos_token = tokenize, init_token, eos_token
        self.lower, self.batch_first = lower, batch_first
        self.unk_token, self.pad_token = "<unk>", "<pad>"

    def preprocess(self, text: str) -> list[str]:
        tokens = self.tokenize(text)
        return [t.lower() for t in tokens] if self.lower else tokens

    def build_vocab(self, dataset, min_freq: int = 1) -> None:
        name = "src" if self is dataset.fields[0] else "trg"
        counts = collections.Counter(t for e in dataset.examples for t in getattr(e, name))
        specials = [self.unk_token, self.pad_token, self.init_token, self.eos_token]
        self.vocab = LegacyVocab(counts, specials, min_freq)

    def process(self, batch: list[list[str]], lib):
        framed = [[self.init_token, *tokens, self.eos_token] for tokens in batch]
        longest = max(map(len, framed))
        padded = [t + [self.pad_token] * (longest - len(t)) for t in framed]
        ids = lib.tensor(
            [[self.vocab.stoi[t] for t in tokens] for tokens in padded], dtype=lib.int64
        )
        return ids if self.batch_first else ids.t().contiguous()


class TranslationDataset:
    def __init__(self, pairs: list[dict[str, str]], fields):
        self.fields = fields
        self.examples = [
            Example(fields[0].preprocess(p["de"]), fields[1].preprocess(p["en"])) for p in pairs
        ]


class BucketIterator:
    """Batches of ``batch_size`` examples in order, each ``batch.src``/``batch.trg`` framed by
    the field's tokens, padded and numericalized."""

    def __init__(self, dataset: TranslationDataset, batch_size: int, lib):
        self.dataset, self.batch_size, self.lib = dataset, batch_size, lib

    def __len__(self) -> int:
        return -(-len(self.dataset.examples) // self.batch_size)

    def __iter__(self):
        src_field, trg_field = self.dataset.fields
        examples = self.dataset.examples
        for start in range(0, len(examples), self.batch_size):
            chunk = examples[start : start + self.batch_size]
            yield types.SimpleNamespace(
                src=src_field.process([e.src for e in chunk], self.lib),
                trg=trg_field.process([e.trg for e in chunk], self.lib),
            )


def legacy_modules(lib, corpus) -> dict[str, types.ModuleType]:
    names = (
        "spacy",
        "torchtext",
        "torchtext.legacy",
        "torchtext.legacy.datasets",
        "torchtext.legacy.data",
    )
    modules = {name: types.ModuleType(name) for name in names}
    for name, module in modules.items():  # (torch's dynamo asks every loaded module for its spec)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    modules["spacy"].load = lambda name: Language()
    modules["torchtext.legacy.datasets"].Multi30k = types.SimpleNamespace(
        splits=lambda exts, fields: tuple(
            TranslationDataset(corpus[k], fields) for k in ("train", "validation", "test")
        )
    )
    modules["torchtext.legacy.data"].Field = Field
    modules["torchtext.legacy.data"].BucketIterator = types.SimpleNamespace(
        splits=lambda datasets, batch_size, device: tuple(
            BucketIterator(d, batch_size, lib) for d in datasets
        )
    )
    modules["torchtext"].legacy = modules["torchtext.legacy"]
    modules["torchtext.legacy"].data = modules["torchtext.legacy.data"]
    modules["torchtext.legacy"].datasets = modules["torchtext.legacy.datasets"]
    return modules


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(CONVOLUTIONAL_SEQ2SEQ_SOURCE, id="5-convolutional"),
        pytest.param(TRANSFORMER_SEQ2SEQ_SOURCE, id="6-transformer"),
    ],
)
def test_legacy_torchtext_seq2seq_trains_and_translates_as_torch(source, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    corpus = synthetic_multi30k(np.random.default_rng(411), sizes=(12, 4, 4))
    initialize, records = initializer(), []
    for lib in (torch, rg):
        for name, module in legacy_modules(lib, corpus).items():
            monkeypatch.setitem(sys.modules, name, module)
        record = []
        steps = [*LEGACY_STEPS, *([FUNCTIONAL_STEP] if FUNCTIONAL_STEP[0] in source else [])]
        text = source if lib is torch else port(source, steps)
        run_source(text, lib, record=record, initialize=initialize)
        records.append(record)
    theirs, ours = records
    assert theirs[1][0] < theirs[0][0]  # it learns
    # a key bias adds one number to each row of the energies, which the softmax takes away: its
    # true gradient is zero and Adam's steps follow the rounding noise
    state = next(r for r in theirs if isinstance(r, dict))
    key_biases = [name for name in state if name.endswith("k_proj.bias")]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=key_biases)
