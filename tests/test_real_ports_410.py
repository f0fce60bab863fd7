"""Real-port tests (the harness: ``tests/real_ports.py``): three sequence-to-sequence
translators written here in the style of bentrevett/pytorch-seq2seq's first three notebooks (as
rewritten for ``datasets`` and ``torchtext`` 0.17; ``tests/test_real_ports_29.py`` has the
legacy fourth), each run as notebook cells: the data cells, the model cells, then shared
training, evaluation and translation cells. Nothing is copied from the notebooks.

- an LSTM translator: a two-layer ``nn.LSTM`` encoder whose ``(h, c)`` start a two-layer
  ``nn.LSTM`` decoder fed one token at a time (``token.unsqueeze(0)``, ``y.squeeze(0)``),
  ``nn.init.uniform_(p.data, -0.08, 0.08)`` over ``named_parameters()`` by ``model.apply``;
- a GRU translator with a fixed context: the encoder's last state concatenated to every decoder
  input and to the output layer's input (``torch.cat((x, context), dim=2)``,
  ``torch.cat((x.squeeze(0), h.squeeze(0), context.squeeze(0)), dim=1)``),
  ``nn.init.normal_(p.data, mean=0, std=0.01)``;
- an attention translator: a bidirectional ``nn.GRU`` encoder joined by
  ``torch.tanh(self.bridge(torch.cat((h[-2, :, :], h[-1, :, :]), dim=1)))``, additive attention
  (``query.unsqueeze(1).repeat(1, length, 1)``, ``permute(1, 0, 2)``,
  ``self.score(e).squeeze(2)``, ``torch.softmax(..., dim=1)``, ``torch.bmm(a, keys)``),
  ``assert (y == h_next).all()``, ``nn.init.constant_`` of the biases, and the translation
  writing each step's weights into ``weights[i] = attended``;

each with the notebooks' kind of data pipeline (``pad_sequence(..., padding_value=PAD_ID)`` in a
``collate_fn`` of ``torch.utils.data.DataLoader``), a ``Seq2Seq`` writing each step's logits
into ``torch.zeros(steps, batch, vocab).to(self.device)`` row by row (``logits[t] = out``) with
teacher forcing by ``random.random() < forcing`` against ``out.argmax(1)``,
``nn.CrossEntropyLoss(ignore_index=PAD_ID)`` over ``logits[1:].view(-1, vocab)``,
``clip_grad_norm_``, Adam, the best model kept by ``torch.save(model.state_dict(), ...)`` and
reloaded by ``torch.load`` for the test loss, and greedy translation
(``torch.LongTensor(ids).unsqueeze(-1)``, ``logits.argmax(-1).item()``) of a test sentence and of
a sentence of unknown words.

What stands in: ``datasets``, ``spacy``, ``torchtext`` and ``tqdm`` are stand-in modules (the
programs import them as written) serving a small synthetic German-English corpus with the
interfaces the notebooks use (``load_dataset``, ``Dataset.map(fn, fn_kwargs=...)`` and
``with_format(type="torch", ...)``, ``nlp.tokenizer``, ``build_vocab_from_iterator`` with
``min_freq`` and ``specials``, ``set_default_index``, ``lookup_indices``/``lookup_tokens``);
``tests/test_real_ports_411.py`` and ``_415.py`` use the corpus and the tokenizer too. Small
sizes, dropout 0 (each library draws its own masks), the training loader not shuffled (each
library shuffles by its own generator), ``initialize(model)`` after ``model.apply(init_weights)``
(the port starts from torch's draws). The port changes the import lines naming ``torch`` and the
gradient lines.
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

DATA_CELLS = """
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import datasets
import spacy
import torchtext
import tqdm

# The data cells: a German-to-English corpus tokenized by spaCy, vocabularies by torchtext, and
# time-major padded batches ([length, batch]) from a DataLoader.
SEED = 410
random.seed(SEED)
np.random.seed(SEED)
torch.manual_seed(SEED)
torch.backends.cudnn.deterministic = True  # (a no-op on CPU)

SOS, EOS, UNK, PAD = "<sos>", "<eos>", "<unk>", "<pad>"
LANGS = ("de", "en")
corpus = datasets.load_dataset("bentrevett/multi30k")
nlp = {"de": spacy.load("de_core_news_sm"), "en": spacy.load("en_core_web_sm")}


def add_tokens(example, nlp, max_length):
    out = {}
    for lang in LANGS:
        words = [tok.text.lower() for tok in nlp[lang].tokenizer(example[lang])]
        out[lang + "_tokens"] = [SOS, *words[:max_length], EOS]
    return out


settings = {"nlp": nlp, "max_length": 64}
corpus = {name: split.map(add_tokens, fn_kwargs=settings) for name, split in corpus.items()}

vocab = {}
for lang in LANGS:
    vocab[lang] = torchtext.vocab.build_vocab_from_iterator(
        corpus["train"][lang + "_tokens"], min_freq=2, specials=[UNK, PAD, SOS, EOS]
    )
    vocab[lang].set_default_index(vocab[lang][UNK])
assert vocab["de"][PAD] == vocab["en"][PAD]
PAD_ID = vocab["en"][PAD]


def add_ids(example, vocab):
    return {lang + "_ids": vocab[lang].lookup_indices(example[lang + "_tokens"]) for lang in LANGS}


for name in list(corpus):
    corpus[name] = corpus[name].map(add_ids, fn_kwargs={"vocab": vocab})
    corpus[name] = corpus[name].with_format(
        type="torch", columns=["de_ids", "en_ids"], output_all_columns=True
    )


def pad_batch(examples):
    # pad_sequence stacks along a new dim 1: each column is one sentence
    return {
        key: nn.utils.rnn.pad_sequence([ex[key] for ex in examples], padding_value=PAD_ID)
        for key in ("de_ids", "en_ids")
    }


loaders = {
    name: torch.utils.data.DataLoader(split, batch_size=4, collate_fn=pad_batch, shuffle=False)
    for name, split in corpus.items()
}
device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
"""

SEQ2SEQ_CELLS = """

# Every encoder returns the decoder's starting state; every decoder takes one token per sentence
# and a state, and returns (logits, state, attention weights or None).
class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder, on):
        super().__init__()
        self.encoder, self.decoder, self.device = encoder, decoder, on

    def forward(self, src, trg, forcing):
        steps, batch = trg.shape
        logits = torch.zeros(steps, batch, self.decoder.output_dim).to(self.device)
        state = self.encoder(src)
        token = trg[0, :]  # <sos> for every sentence
        for t in range(1, steps):
            out, state, _ = self.decoder(token, state)
            logits[t] = out
            # teacher forcing: the true previous word, or the model's own guess
            token = trg[t] if random.random() < forcing else out.argmax(1)
        return logits


def trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad is True)


def train_epoch(model, loader, optimizer, criterion, clip, forcing):
    model.train()
    total = 0.0
    for batch in loader:
        src, trg = batch["de_ids"].to(device), batch["en_ids"].to(device)
        optimizer.zero_grad()
        logits = model(src, trg, forcing)  # [trg length, batch, vocab]; row 0 stays zero
        loss = criterion(logits[1:].view(-1, logits.shape[-1]), trg[1:].view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def evaluate(model, loader, criterion):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for batch in loader:
            src, trg = batch["de_ids"].to(device), batch["en_ids"].to(device)
            logits = model(src, trg, 0)  # no teacher forcing
            total += criterion(logits[1:].view(-1, logits.shape[-1]), trg[1:].view(-1)).item()
    return total / len(loader)


def translate(sentence, model, max_length=12):
    model.eval()
    with torch.no_grad():
        if isinstance(sentence, str):
            sentence = [tok.text for tok in nlp["de"].tokenizer(sentence)]
        words = [w.lower() for w in sentence]
        src_ids = vocab["de"].lookup_indices([SOS, *words, EOS])
        state = model.encoder(torch.LongTensor(src_ids).unsqueeze(-1).to(device))
        out_ids = vocab["en"].lookup_indices([SOS])
        weights = torch.zeros(max_length, 1, len(src_ids))
        for i in range(max_length):
            last = torch.LongTensor([out_ids[-1]]).to(device)
            logits, state, attended = model.decoder(last, state)
            if attended is not None:
                weights[i] = attended
            out_ids.append(logits.argmax(-1).item())
            if out_ids[-1] == vocab["en"][EOS]:
                break
    return vocab["en"].lookup_tokens(out_ids), weights[: len(out_ids) - 1]


model = Seq2Seq(encoder, decoder, on=device).to(device)
model.apply(init_weights)
initialize(model)
print(f"{trainable(model):,} trainable parameters")
optimizer = optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.CrossEntropyLoss(ignore_index=PAD_ID)

best = float("inf")
for epoch in tqdm.tqdm(range(2)):
    train_loss = train_epoch(model, loaders["train"], optimizer, criterion, clip=1.0, forcing=0.5)
    valid_loss = evaluate(model, loaders["validation"], criterion)
    if valid_loss < best:  # keep the best weights on disk
        best = valid_loss
        torch.save(model.state_dict(), CHECKPOINT)
    print(f"epoch {epoch}: train {train_loss:.3f} (ppl {np.exp(train_loss):.2f})", end=", ")
    print(f"valid {valid_loss:.3f}")
    record.append([train_loss, valid_loss])  # per epoch

model.load_state_dict(torch.load(CHECKPOINT))
record.append(evaluate(model, loaders["test"], criterion))
for sentence in (corpus["test"][0]["de"], "Eine Katze schläft unter dem Tisch."):
    words, weights = translate(sentence, model)
    record.append(words)
    record.append(weights.numpy())
record.append({name: t.detach().numpy() for name, t in model.state_dict().items()})
"""

LSTM_CELLS = """
# 1: a stacked LSTM reads the source; its final (hidden, cell) start an LSTM decoder


class Encoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, hid_dim, layers, dropout):
        super().__init__()
        self.hid_dim, self.layers = hid_dim, layers
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.LSTM(emb_dim, hid_dim, layers, dropout=dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, src):  # [src length, batch]
        _, (h, c) = self.rnn(self.drop(self.embed(src)))
        return h, c  # each [layers, batch, hid]


class Decoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, hid_dim, layers, dropout):
        super().__init__()
        self.output_dim, self.hid_dim, self.layers = vocab_size, hid_dim, layers
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.LSTM(emb_dim, hid_dim, layers, dropout=dropout)
        self.out = nn.Linear(hid_dim, vocab_size)
        self.drop = nn.Dropout(dropout)

    def forward(self, token, state):  # token: [batch]
        x = self.drop(self.embed(token.unsqueeze(0)))  # [1, batch, emb]
        y, state = self.rnn(x, state)
        return self.out(y.squeeze(0)), state, None


encoder = Encoder(len(vocab["de"]), 8, 12, 2, 0.0)
decoder = Decoder(len(vocab["en"]), 8, 12, 2, 0.0)
assert encoder.hid_dim == decoder.hid_dim and encoder.layers == decoder.layers


def init_weights(m):
    for _, p in m.named_parameters():
        nn.init.uniform_(p.data, -0.08, 0.08)


CHECKPOINT = "lstm-seq2seq.pt"
"""

GRU_CONTEXT_CELLS = """
# 2: a GRU's last state is a fixed context, fed to every decoder step and to the output layer


class Encoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, hid_dim, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.GRU(emb_dim, hid_dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, src):
        _, h = self.rnn(self.drop(self.embed(src)))
        return h, h  # (the running state, the context), each [1, batch, hid]


class Decoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, hid_dim, dropout):
        super().__init__()
        self.output_dim = vocab_size
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.GRU(emb_dim + hid_dim, hid_dim)
        self.out = nn.Linear(emb_dim + 2 * hid_dim, vocab_size)
        self.drop = nn.Dropout(dropout)

    def forward(self, token, state):
        h, context = state
        x = self.drop(self.embed(token.unsqueeze(0)))
        _, h = self.rnn(torch.cat((x, context), dim=2), h)
        joined = torch.cat((x.squeeze(0), h.squeeze(0), context.squeeze(0)), dim=1)
        return self.out(joined), (h, context), None


encoder = Encoder(len(vocab["de"]), 8, 12, 0.0)
decoder = Decoder(len(vocab["en"]), 8, 12, 0.0)


def init_weights(m):
    for _, p in m.named_parameters():
        nn.init.normal_(p.data, mean=0, std=0.01)


CHECKPOINT = "gru-context-seq2seq.pt"
"""

ATTENTION_CELLS = """
# 3: a bidirectional GRU encoder and additive (Bahdanau) attention over its states at each step


class Encoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, enc_hid, dec_hid, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.GRU(emb_dim, enc_hid, bidirectional=True)
        self.bridge = nn.Linear(2 * enc_hid, dec_hid)
        self.drop = nn.Dropout(dropout)

    def forward(self, src):
        keys, h = self.rnn(self.drop(self.embed(src)))  # keys: [src length, batch, 2 * enc_hid]
        # h[-2] and h[-1]: the final forward and backward states, joined into the decoder's start
        start = torch.tanh(self.bridge(torch.cat((h[-2, :, :], h[-1, :, :]), dim=1)))
        return start, keys


class Attention(nn.Module):
    def __init__(self, enc_hid, dec_hid):
        super().__init__()
        self.energy = nn.Linear(2 * enc_hid + dec_hid, dec_hid)
        self.score = nn.Linear(dec_hid, 1, bias=False)

    def forward(self, query, keys):  # query [batch, dec_hid]
        q = query.unsqueeze(1).repeat(1, keys.shape[0], 1)  # [batch, src length, dec_hid]
        e = torch.tanh(self.energy(torch.cat((q, keys.permute(1, 0, 2)), dim=2)))
        return torch.softmax(self.score(e).squeeze(2), dim=1)  # [batch, src length]


class Decoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, enc_hid, dec_hid, dropout, attention):
        super().__init__()
        self.output_dim, self.attention = vocab_size, attention
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.GRU(2 * enc_hid + emb_dim, dec_hid)
        self.out = nn.Linear(2 * enc_hid + dec_hid + emb_dim, vocab_size)
        self.drop = nn.Dropout(dropout)

    def forward(self, token, state):
        h, keys = state
        x = self.drop(self.embed(token.unsqueeze(0)))  # [1, batch, emb]
        a = self.attention(h, keys).unsqueeze(1)  # [batch, 1, src length]
        read = torch.bmm(a, keys.permute(1, 0, 2)).permute(1, 0, 2)  # [1, batch, 2 * enc_hid]
        y, h_next = self.rnn(torch.cat((x, read), dim=2), h.unsqueeze(0))
        assert (y == h_next).all()  # one step of one layer: the output is the new state
        logits = self.out(torch.cat((y.squeeze(0), read.squeeze(0), x.squeeze(0)), dim=1))
        return logits, (h_next.squeeze(0), keys), a.squeeze(1)


encoder = Encoder(len(vocab["de"]), 8, 10, 12, 0.0)
decoder = Decoder(len(vocab["en"]), 8, 10, 12, 0.0, Attention(10, 12))


def init_weights(m):
    for name, p in m.named_parameters():
        if "weight" in name:
            nn.init.normal_(p.data, mean=0, std=0.01)
        else:
            nn.init.constant_(p.data, 0)


CHECKPOINT = "attention-seq2seq.pt"
"""

SEQ2SEQ_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=clip)\n"
        "        optimizer.step(grads)\n",
    ),
]

# -- the stand-ins for the notebooks' data libraries -----------------------------------------------

GERMAN_TO_ENGLISH = {
    "ein": "a", "eine": "a", "mann": "man", "frau": "woman", "hund": "dog", "kind": "child",
    "sitzt": "sits", "läuft": "runs", "spielt": "plays", "im": "in the", "park": "park",
    "auf": "on", "der": "the", "straße": "street",
}  # fmt: skip


def synthetic_multi30k(
    rng: np.random.Generator, sizes: tuple[int, int, int] = (8, 4, 4)
) -> dict[str, list[dict[str, str]]]:
    """Pairs of "German" and "English" sentences, each word translated by the table above, in
    Multi30k's form (capitalised, a final full stop): ``sizes`` of the train, validation and
    test splits."""

    def pair() -> dict[str, str]:
        words = [str(w) for w in rng.choice(list(GERMAN_TO_ENGLISH), int(rng.integers(2, 6)))]
        english = " ".join(GERMAN_TO_ENGLISH[w] for w in words)
        return {"de": " ".join(words).capitalize() + ".", "en": english.capitalize() + "."}

    return {
        split: [pair() for _ in range(n)]
        for split, n in zip(("train", "validation", "test"), sizes)
    }


class Token:
    def __init__(self, text: str):
        self.text = text


class Language:
    """``spacy.load(...)``'s tokenizer: words split on spaces, the full stop its own token."""

    def tokenizer(self, text: str) -> list[Token]:
        return [Token(t) for t in text.replace(".", " .").split()]

    __call__ = tokenizer


class Vocab:
    """torchtext's ``Vocab``: the specials first, then the tokens by falling frequency (ties in
    alphabetical order), those seen fewer than ``min_freq`` times left out."""

    def __init__(self, itos: list[str]):
        self.itos, self.stoi, self.default = itos, {t: i for i, t in enumerate(itos)}, None

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        if token not in self.stoi and self.default is None:
            raise RuntimeError(f"Token {token} not found and default index is not set")
        return self.stoi.get(token, self.default)

    def set_default_index(self, index: int) -> None:
        self.default = index

    def get_itos(self) -> list[str]:
        return list(self.itos)

    def get_stoi(self) -> dict[str, int]:
        return dict(self.stoi)

    def lookup_indices(self, tokens: list[str]) -> list[int]:
        return [self[t] for t in tokens]

    def lookup_tokens(self, indices: list[int]) -> list[str]:
        return [self.itos[i] for i in indices]


def build_vocab_from_iterator(iterator, min_freq: int = 1, specials=()) -> Vocab:
    counts = collections.Counter(token for tokens in iterator for token in tokens)
    ordered = sorted(counts.items(), key=lambda item: item[0])
    ordered.sort(key=lambda item: item[1], reverse=True)
    words = [t for t, n in ordered if n >= min_freq and t not in specials]
    return Vocab([*specials, *words])


class Dataset:
    """A ``datasets.Dataset``: rows of a split, ``map`` adding the columns a function returns,
    ``with_format(type="torch")`` giving those columns as int64 tensors of ``lib``."""

    def __init__(self, rows: list[dict], lib=None, columns=()):
        self.rows, self.lib, self.columns = rows, lib, tuple(columns)

    def map(self, function, fn_kwargs=None) -> Dataset:
        rows = [{**row, **function(row, **(fn_kwargs or {}))} for row in self.rows]
        return Dataset(rows, self.lib, self.columns)

    def with_format(self, type: str, columns=(), output_all_columns: bool = False) -> Dataset:  # noqa: A002 (datasets' name)
        assert type == "torch" and output_all_columns
        return Dataset(self.rows, self.lib, columns)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        if isinstance(key, str):
            return [row[key] for row in self.rows]
        row = self.rows[key]
        return {
            k: self.lib.tensor(v, dtype=self.lib.int64) if k in self.columns else v
            for k, v in row.items()
        }


def stand_in_modules(lib, corpus) -> dict[str, types.ModuleType]:
    modules = {
        name: types.ModuleType(name)
        for name in ("spacy", "datasets", "torchtext", "tqdm", "evaluate")
    }
    for name, module in modules.items():  # (torch's dynamo asks every loaded module for its spec)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    modules["spacy"].load = lambda name: Language()
    modules["datasets"].load_dataset = lambda name: {k: Dataset(v, lib) for k, v in corpus.items()}
    modules["torchtext"].vocab = types.SimpleNamespace(
        build_vocab_from_iterator=build_vocab_from_iterator
    )
    modules["tqdm"].tqdm = lambda iterable: iterable
    return modules


def run_notebook(cells: str, monkeypatch, tmp_path):
    """The records of the notebook under torch and of its port."""
    monkeypatch.chdir(tmp_path)
    corpus = synthetic_multi30k(np.random.default_rng(410))
    initialize, records = initializer(), []
    source = DATA_CELLS + cells + SEQ2SEQ_CELLS
    for lib in (torch, rg):
        for name, module in stand_in_modules(lib, corpus).items():
            monkeypatch.setitem(sys.modules, name, module)
        record = []
        text = source if lib is torch else port(source, SEQ2SEQ_STEPS)
        run_source(text, lib, record=record, initialize=initialize)
        records.append(record)
    return records


@pytest.mark.parametrize(
    "cells",
    [
        pytest.param(LSTM_CELLS, id="1-lstm"),
        pytest.param(GRU_CONTEXT_CELLS, id="2-gru-context"),
        pytest.param(ATTENTION_CELLS, id="3-attention"),
    ],
)
def test_seq2seq_tutorial_style_models_train_and_translate_as_torch(cells, monkeypatch, tmp_path):
    theirs, ours = run_notebook(cells, monkeypatch, tmp_path)
    assert theirs[1][0] < theirs[0][0]  # it learns
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
