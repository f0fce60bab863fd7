# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
keon/seq2seq as written (``model.py``, ``utils.py``, ``train.py``): a two-layer bidirectional
``nn.GRU`` encoder whose directions are summed (``outputs[:, :, :self.hidden_size] +
outputs[:, :, self.hidden_size:]``), attention by ``hidden.repeat(timestep, 1, 1).transpose(0,
1)``, ``F.relu(self.attn(torch.cat([hidden, encoder_outputs], 2)))`` and ``torch.bmm(v,
energy)`` against ``self.v = nn.Parameter(torch.rand(hidden_size))`` refilled by
``self.v.data.uniform_(-stdv, stdv)``, a decoder with ``nn.Dropout(dropout, inplace=True)`` and
``attn_weights.bmm(encoder_outputs.transpose(0, 1))``, ``F.log_softmax`` outputs written into
``Variable(torch.zeros(max_len, batch_size, vocab_size))`` row by row, the encoder state cut by
``hidden[:self.decoder.n_layers]``, teacher forcing against ``output.data.max(1)[1]`` wrapped in
``Variable(...)``, and ``train.py``'s ``F.nll_loss(output[1:].view(-1, vocab_size),
trg[1:].contiguous().view(-1), ignore_index=pad)``, ``clip_grad_norm_`` imported from
``torch.nn.utils``, ``loss.data.item()``, evaluation under ``torch.no_grad()``, argparse's
single-dash options from ``sys.argv`` and the best model saved under ``./.save``.

What stands in: the script is CUDA-only (``assert torch.cuda.is_available()``, ``.cuda()`` on
every tensor and the model); both runs get ``cuda.is_available()`` answering ``True`` and
``.cuda()`` returning its receiver, as a CPU stands in for the GPU. ``torchtext.data``'s
``Field`` (``include_lengths=True``, so ``batch.src`` is ``(tokens, lengths)``), ``BucketIterator``
(batches in order), ``torchtext.datasets.Multi30k`` and ``spacy`` are stand-in modules serving
the synthetic corpus of ``tests/test_real_ports_410.py``. Changed: ``main``'s sizes (hidden 12,
embedding 8) and dropout (0: each library draws its own masks), ``initialize(seq2seq)`` (the
port starts from torch's weights) and ``record.append`` lines. The port changes the import lines
naming ``torch`` and the gradient lines.
"""

from __future__ import annotations

import collections
import importlib.machinery
import random
import sys
import types

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source
from test_real_ports_410 import Language, synthetic_multi30k

KEON_SEQ2SEQ_SOURCE = """
# -- model.py ---------------------------------------------------------------------------------------
import math
import torch
import random
from torch import nn
from torch.autograd import Variable
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, input_size, embed_size, hidden_size,
                 n_layers=1, dropout=0.5):
        super(Encoder, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.embed_size = embed_size
        self.embed = nn.Embedding(input_size, embed_size)
        self.gru = nn.GRU(embed_size, hidden_size, n_layers,
                          dropout=dropout, bidirectional=True)

    def forward(self, src, hidden=None):
        embedded = self.embed(src)
        outputs, hidden = self.gru(embedded, hidden)
        # sum bidirectional outputs
        outputs = (outputs[:, :, :self.hidden_size] +
                   outputs[:, :, self.hidden_size:])
        return outputs, hidden


class Attention(nn.Module):
    def __init__(self, hidden_size):
        super(Attention, self).__init__()
        self.hidden_size = hidden_size
        self.attn = nn.Linear(self.hidden_size * 2, hidden_size)
        self.v = nn.Parameter(torch.rand(hidden_size))
        stdv = 1. / math.sqrt(self.v.size(0))
        self.v.data.uniform_(-stdv, stdv)

    def forward(self, hidden, encoder_outputs):
        timestep = encoder_outputs.size(0)
        h = hidden.repeat(timestep, 1, 1).transpose(0, 1)
        encoder_outputs = encoder_outputs.transpose(0, 1)  # [B*T*H]
        attn_energies = self.score(h, encoder_outputs)
        return F.softmax(attn_energies, dim=1).unsqueeze(1)

    def score(self, hidden, encoder_outputs):
        # [B*T*2H]->[B*T*H]
        energy = F.relu(self.attn(torch.cat([hidden, encoder_outputs], 2)))
        energy = energy.transpose(1, 2)  # [B*H*T]
        v = self.v.repeat(encoder_outputs.size(0), 1).unsqueeze(1)  # [B*1*H]
        energy = torch.bmm(v, energy)  # [B*1*T]
        return energy.squeeze(1)  # [B*T]


class Decoder(nn.Module):
    def __init__(self, embed_size, hidden_size, output_size,
                 n_layers=1, dropout=0.2):
        super(Decoder, self).__init__()
        self.embed_size = embed_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers

        self.embed = nn.Embedding(output_size, embed_size)
        self.dropout = nn.Dropout(dropout, inplace=True)
        self.attention = Attention(hidden_size)
        self.gru = nn.GRU(hidden_size + embed_size, hidden_size,
                          n_layers, dropout=dropout)
        self.out = nn.Linear(hidden_size * 2, output_size)

    def forward(self, input, last_hidden, encoder_outputs):
        # Get the embedding of the current input word (last output word)
        embedded = self.embed(input).unsqueeze(0)  # (1,B,N)
        embedded = self.dropout(embedded)
        # Calculate attention weights and apply to encoder outputs
        attn_weights = self.attention(last_hidden[-1], encoder_outputs)
        context = attn_weights.bmm(encoder_outputs.transpose(0, 1))  # (B,1,N)
        context = context.transpose(0, 1)  # (1,B,N)
        # Combine embedded input word and attended context, run through RNN
        rnn_input = torch.cat([embedded, context], 2)
        output, hidden = self.gru(rnn_input, last_hidden)
        output = output.squeeze(0)  # (1,B,N) -> (B,N)
        context = context.squeeze(0)
        output = self.out(torch.cat([output, context], 1))
        output = F.log_softmax(output, dim=1)
        return output, hidden, attn_weights


class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder):
        super(Seq2Seq, self).__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, src, trg, teacher_forcing_ratio=0.5):
        batch_size = src.size(1)
        max_len = trg.size(0)
        vocab_size = self.decoder.output_size
        outputs = Variable(torch.zeros(max_len, batch_size, vocab_size)).cuda()

        encoder_output, hidden = self.encoder(src)
        hidden = hidden[:self.decoder.n_layers]
        output = Variable(trg.data[0, :])  # sos
        for t in range(1, max_len):
            output, hidden, attn_weights = self.decoder(
                    output, hidden, encoder_output)
            outputs[t] = output
            is_teacher = random.random() < teacher_forcing_ratio
            top1 = output.data.max(1)[1]
            output = Variable(trg.data[t] if is_teacher else top1).cuda()
        return outputs

# -- utils.py ---------------------------------------------------------------------------------------
import re
import spacy
from torchtext.data import Field, BucketIterator
from torchtext.datasets import Multi30k


def load_dataset(batch_size):
    spacy_de = spacy.load('de')
    spacy_en = spacy.load('en')
    url = re.compile('(<url>.*</url>)')

    def tokenize_de(text):
        return [tok.text for tok in spacy_de.tokenizer(url.sub('@URL@', text))]

    def tokenize_en(text):
        return [tok.text for tok in spacy_en.tokenizer(url.sub('@URL@', text))]

    DE = Field(tokenize=tokenize_de, include_lengths=True,
               init_token='<sos>', eos_token='<eos>')
    EN = Field(tokenize=tokenize_en, include_lengths=True,
               init_token='<sos>', eos_token='<eos>')
    train, val, test = Multi30k.splits(exts=('.de', '.en'), fields=(DE, EN))
    DE.build_vocab(train.src, min_freq=2)
    EN.build_vocab(train.trg, max_size=10000)
    train_iter, val_iter, test_iter = BucketIterator.splits(
            (train, val, test), batch_size=batch_size, repeat=False)
    return train_iter, val_iter, test_iter, DE, EN

# -- train.py ---------------------------------------------------------------------------------------
import os
import math
import argparse
import torch
from torch import optim
from torch.autograd import Variable
from torch.nn.utils import clip_grad_norm_
from torch.nn import functional as F


def parse_arguments():
    p = argparse.ArgumentParser(description='Hyperparams')
    p.add_argument('-epochs', type=int, default=100,
                   help='number of epochs for train')
    p.add_argument('-batch_size', type=int, default=32,
                   help='number of epochs for train')
    p.add_argument('-lr', type=float, default=0.0001,
                   help='initial learning rate')
    p.add_argument('-grad_clip', type=float, default=10.0,
                   help='in case of gradient explosion')
    return p.parse_args()


def evaluate(model, val_iter, vocab_size, DE, EN):
    with torch.no_grad():
        model.eval()
        pad = EN.vocab.stoi['<pad>']
        total_loss = 0
        for b, batch in enumerate(val_iter):
            src, len_src = batch.src
            trg, len_trg = batch.trg
            src = src.data.cuda()
            trg = trg.data.cuda()
            output = model(src, trg, teacher_forcing_ratio=0.0)
            loss = F.nll_loss(output[1:].view(-1, vocab_size),
                                   trg[1:].contiguous().view(-1),
                                   ignore_index=pad)
            total_loss += loss.data.item()
        return total_loss / len(val_iter)


def train(e, model, optimizer, train_iter, vocab_size, grad_clip, DE, EN):
    model.train()
    total_loss = 0
    pad = EN.vocab.stoi['<pad>']
    for b, batch in enumerate(train_iter):
        src, len_src = batch.src
        trg, len_trg = batch.trg
        src, trg = src.cuda(), trg.cuda()
        optimizer.zero_grad()
        output = model(src, trg)
        loss = F.nll_loss(output[1:].view(-1, vocab_size),
                               trg[1:].contiguous().view(-1),
                               ignore_index=pad)
        loss.backward()
        clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        total_loss += loss.data.item()
        record.append(loss.item())

        if b % 100 == 0 and b != 0:
            total_loss = total_loss / 100
            print("[%d][loss:%5.2f][pp:%5.2f]" %
                  (b, total_loss, math.exp(total_loss)))
            total_loss = 0


def main():
    args = parse_arguments()
    hidden_size = 12
    embed_size = 8
    assert torch.cuda.is_available()

    print("[!] preparing dataset...")
    train_iter, val_iter, test_iter, DE, EN = load_dataset(args.batch_size)
    de_size, en_size = len(DE.vocab), len(EN.vocab)
    print("[TRAIN]:%d (dataset:%d)\\t[TEST]:%d (dataset:%d)"
          % (len(train_iter), len(train_iter.dataset),
             len(test_iter), len(test_iter.dataset)))
    print("[DE_vocab]:%d [en_vocab]:%d" % (de_size, en_size))

    print("[!] Instantiating models...")
    encoder = Encoder(de_size, embed_size, hidden_size,
                      n_layers=2, dropout=0.0)
    decoder = Decoder(embed_size, hidden_size, en_size,
                      n_layers=1, dropout=0.0)
    seq2seq = Seq2Seq(encoder, decoder).cuda()
    initialize(seq2seq)
    optimizer = optim.Adam(seq2seq.parameters(), lr=args.lr)
    print(seq2seq)

    best_val_loss = None
    for e in range(1, args.epochs+1):
        train(e, seq2seq, optimizer, train_iter,
              en_size, args.grad_clip, DE, EN)
        val_loss = evaluate(seq2seq, val_iter, en_size, DE, EN)
        record.append(val_loss)
        print("[Epoch:%d] val_loss:%5.3f | val_pp:%5.2fS"
              % (e, val_loss, math.exp(val_loss)))

        # Save the model if the validation loss is the best we've seen so far.
        if not best_val_loss or val_loss < best_val_loss:
            print("[!] saving model...")
            if not os.path.isdir(".save"):
                os.makedirs(".save")
            torch.save(seq2seq.state_dict(), './.save/seq2seq_%d.pt' % (e))
            best_val_loss = val_loss
    test_loss = evaluate(seq2seq, test_iter, en_size, DE, EN)
    print("[TEST] loss:%5.2f" % test_loss)
    record.append(test_loss)
    record.append({k: v.detach().numpy() for k, v in seq2seq.state_dict().items()})


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        print("[STOP]", e)
"""

KEON_SEQ2SEQ_STEPS = [
    (
        "import torch\nimport random\nfrom torch import nn\n",
        "import retrograd as torch\nimport random\nfrom retrograd import nn\n",
    ),
    (
        "import argparse\nimport torch\nfrom torch import optim\n",
        "import argparse\nimport retrograd as torch\nfrom retrograd import optim\n",
    ),
    (
        "        loss.backward()\n        clip_grad_norm_(model.parameters(), grad_clip)\n        optimizer.step()\n",
        "        grads = loss.backward()\n        clip_grad_norm_(grads, model.parameters(), grad_clip)\n        optimizer.step(grads)\n",
    ),
]

# -- the stand-ins for torchtext 0.4's Field, BucketIterator and Multi30k -------------------------


class Vocab:
    """torchtext's ``Vocab``: ``<unk>``, ``<pad>`` and the field's tokens first, then the
    tokens by falling frequency (ties alphabetical), at most ``max_size`` of them, those seen
    fewer than ``min_freq`` times left out; unknown tokens look up ``<unk>``."""

    def __init__(self, counts, specials, min_freq, max_size):
        ordered = sorted(counts.items(), key=lambda item: item[0])
        ordered.sort(key=lambda item: item[1], reverse=True)
        words = [t for t, n in ordered if n >= min_freq and t not in specials]
        self.itos = specials + words[:max_size]
        self.stoi = collections.defaultdict(lambda: 0, {t: i for i, t in enumerate(self.itos)})

    def __len__(self):
        return len(self.itos)


class Field:
    def __init__(self, tokenize, include_lengths=False, init_token=None, eos_token=None):
        self.tokenize, self.include_lengths = tokenize, include_lengths
        self.init_token, self.eos_token = init_token, eos_token

    def build_vocab(self, token_lists, min_freq=1, max_size=None):
        counts = collections.Counter(t for tokens in token_lists for t in tokens)
        specials = ["<unk>", "<pad>", self.init_token, self.eos_token]
        self.vocab = Vocab(counts, specials, min_freq, max_size)

    def process(self, batch, lib):
        framed = [[self.init_token, *tokens, self.eos_token] for tokens in batch]
        longest = max(map(len, framed))
        ids = [[self.vocab.stoi[t] for t in f] + [1] * (longest - len(f)) for f in framed]
        tokens = lib.tensor(ids, dtype=lib.int64).t().contiguous()
        lengths = lib.tensor([len(f) for f in framed], dtype=lib.int64)
        return (tokens, lengths) if self.include_lengths else tokens


class TranslationDataset:
    def __init__(self, pairs, fields):
        self.fields = fields
        self.examples = [(fields[0].tokenize(p["de"]), fields[1].tokenize(p["en"])) for p in pairs]

    def __len__(self):
        return len(self.examples)

    @property
    def src(self):
        return (src for src, _ in self.examples)

    @property
    def trg(self):
        return (trg for _, trg in self.examples)


class BucketIterator:
    def __init__(self, dataset, batch_size, lib):
        self.dataset, self.batch_size, self.lib = dataset, batch_size, lib

    def __len__(self):
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self):
        src_field, trg_field = self.dataset.fields
        for start in range(0, len(self.dataset), self.batch_size):
            chunk = self.dataset.examples[start : start + self.batch_size]
            yield types.SimpleNamespace(
                src=src_field.process([s for s, _ in chunk], self.lib),
                trg=trg_field.process([t for _, t in chunk], self.lib),
            )


def stand_in_modules(lib, corpus):
    names = ("spacy", "torchtext", "torchtext.data", "torchtext.datasets")
    modules = {name: types.ModuleType(name) for name in names}
    for name, module in modules.items():  # (torch's dynamo asks every loaded module for its spec)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    modules["spacy"].load = lambda name: Language()
    modules["torchtext.data"].Field = Field
    modules["torchtext.data"].BucketIterator = types.SimpleNamespace(
        splits=lambda datasets, batch_size, repeat: tuple(
            BucketIterator(d, batch_size, lib) for d in datasets
        )
    )
    modules["torchtext.datasets"].Multi30k = types.SimpleNamespace(
        splits=lambda exts, fields: tuple(
            TranslationDataset(corpus[k], fields) for k in ("train", "validation", "test")
        )
    )
    modules["torchtext"].data, modules["torchtext"].datasets = (
        modules["torchtext.data"],
        modules["torchtext.datasets"],
    )
    return modules


def test_keon_seq2seq_trains_with_attention_and_teacher_forcing_as_torch(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    corpus = synthetic_multi30k(np.random.default_rng(415), sizes=(12, 4, 4))
    monkeypatch.setattr(
        sys, "argv", ["train.py", "-epochs", "2", "-batch_size", "4", "-lr", "0.001"]
    )
    initialize, records = initializer(), []
    torch.manual_seed(415)  # torch's run draws the initial weights
    np.random.seed(415)
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            for name, module in stand_in_modules(lib, corpus).items():
                patch.setitem(sys.modules, name, module)
            patch.setattr(lib.cuda, "is_available", lambda: True)
            patch.setattr(lib.Tensor, "cuda", lambda self, *args, **kwargs: self)
            patch.setattr(lib.nn.Module, "cuda", lambda self, *args, **kwargs: self)
            record = []
            ported = port(KEON_SEQ2SEQ_SOURCE, KEON_SEQ2SEQ_STEPS).replace(
                "from torch.", "from retrograd."
            )
            random.seed(415)
            with SharedDraws(lib, 415):
                run_source(
                    KEON_SEQ2SEQ_SOURCE if lib is torch else ported,
                    lib,
                    record=record,
                    initialize=initialize,
                    __name__="__main__",
                )
        records.append(record)
        capsys.readouterr()
    theirs, ours = records
    assert (
        len(theirs) == 2 * (3 + 1) + 2 and theirs[7] < theirs[3]
    )  # it learns: the validation loss falls
    # unit 0 of the attention's energy is active at every step: its part from the decoder state
    # (and its bias) adds one number to all of a row's energies, which the softmax takes away,
    # so the true gradient of those weights is zero and Adam's steps follow the rounding noise
    noise = {
        "decoder.attention.attn.weight": slice(0, 1),
        "decoder.attention.attn.bias": slice(0, 1),
    }
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, noise=noise)
