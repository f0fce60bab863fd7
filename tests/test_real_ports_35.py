# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the word-level language model of pytorch/examples (``word_language_model/data.py``,
  ``model.py`` and ``main.py``), on a small corpus written to disk: ``Dictionary``/``Corpus``
  reading ``train.txt`` line by line into ``torch.tensor(ids).type(torch.int64)`` and
  ``torch.cat(idss)``; ``batchify`` by ``data.narrow(0, 0, nbatch * bsz)`` and
  ``data.view(bsz, -1).t().contiguous()``; ``RNNModel`` building its recurrent layer by
  ``getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)`` (or ``nn.RNN(...,
  nonlinearity=)``), the tied ``self.decoder.weight = self.encoder.weight``,
  ``nn.init.uniform_``/``zeros_``, ``init_hidden`` by ``next(self.parameters()).new_zeros``;
  ``TransformerModel`` deriving from ``nn.Transformer`` (``super().__init__(d_model=...,
  nhead=..., dim_feedforward=..., num_encoder_layers=...)``, its ``decoder`` replaced by an
  ``nn.Linear``, only ``self.encoder`` called, with ``mask=``), the causal mask by
  ``(torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)`` and two ``masked_fill``s of a
  ``.float()`` mask, ``src.device`` and ``.to(device)``, ``PositionalEncoding``'s buffer;
  ``main.py``'s loop: ``repackage_hidden`` on ``isinstance(h, torch.Tensor)`` over LSTM state
  tuples, ``get_batch``, ``model.zero_grad()``, ``torch.nn.utils.clip_grad_norm_`` and the
  hand-written SGD ``p.data.add_(p.grad, alpha=-lr)``, ``evaluate`` under ``torch.no_grad()``
  summing ``len(data) * criterion(output, targets).item()``, the learning rate divided by 4
  when the validation loss does not improve, the best model kept by ``torch.save(model, f)``
  into an open file and read back by ``torch.load(f, weights_only=False)`` (a pickled
  module of classes defined by the script) followed by ``model.rnn.flatten_parameters()``.

The only lines changed are the gradient lines (``grads = loss.backward()``,
``clip_grad_norm_(grads, ...)`` and ``p.grad(grads)``). The recurrent runs use ``dropout=0``;
``nn.Transformer``'s own dropout (0.1, which ``TransformerModel`` does not pass on) is set to
0 on its ``nn.Dropout`` modules (and ``MultiheadAttention.dropout``) after construction, in both runs, since the two libraries draw
different masks.
"""

from __future__ import annotations

import math
import re
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

WLM_SOURCE = """
import os
import time


# data.py
class Dictionary(object):
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus(object):
    def __init__(self, path):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, 'train.txt'))
        self.valid = self.tokenize(os.path.join(path, 'valid.txt'))
        self.test = self.tokenize(os.path.join(path, 'test.txt'))

    def tokenize(self, path):
        \"\"\"Tokenizes a text file.\"\"\"
        assert os.path.exists(path)
        # Add words to the dictionary
        with open(path, 'r', encoding="utf8") as f:
            for line in f:
                words = line.split() + ['<eos>']
                for word in words:
                    self.dictionary.add_word(word)

        # Tokenize file content
        with open(path, 'r', encoding="utf8") as f:
            idss = []
            for line in f:
                words = line.split() + ['<eos>']
                ids = []
                for word in words:
                    ids.append(self.dictionary.word2idx[word])
                idss.append(torch.tensor(ids).type(torch.int64))
            ids = torch.cat(idss)

        return ids


# model.py
class RNNModel(nn.Module):
    \"\"\"Container module with an encoder, a recurrent module, and a decoder.\"\"\"

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            except KeyError as e:
                raise ValueError( \"\"\"An invalid option for `--model` was supplied,
                                 options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']\"\"\") from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        # Optionally tie weights
        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    \"\"\"Container module with an encoder, a recurrent or transformer module, and a decoder.\"\"\"

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
        self.model_type = 'Transformer'
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)

        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
        mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
        return mask

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None

        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


# main.py
device = torch.device("cpu")
corpus = Corpus(args.data)

def batchify(data, bsz):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)

eval_batch_size = 2
train_data = batchify(corpus.train, args.batch_size)
val_data = batchify(corpus.valid, eval_batch_size)
test_data = batchify(corpus.test, eval_batch_size)

ntokens = len(corpus.dictionary)
if args.model == 'Transformer':
    model = TransformerModel(ntokens, args.emsize, args.nhead, args.nhid, args.nlayers, args.dropout).to(device)
else:
    model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied).to(device)

initialize(model)  # the test's: the same weights in both runs
criterion = nn.NLLLoss()

def repackage_hidden(h):
    \"\"\"Wraps hidden states in new Tensors, to detach them from their history.\"\"\"

    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    data = source[i:i+seq_len]
    target = source[i+1:i+1+seq_len].view(-1)
    return data, target


def evaluate(data_source):
    # Turn on evaluation mode which disables dropout.
    model.eval()
    total_loss = 0.
    ntokens = len(corpus.dictionary)
    if args.model != 'Transformer':
        hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i)
            if args.model == 'Transformer':
                output = model(data)
                output = output.view(-1, ntokens)
            else:
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    # Turn on training mode which enables dropout.
    model.train()
    total_loss = 0.
    start_time = time.time()
    ntokens = len(corpus.dictionary)
    if args.model != 'Transformer':
        hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        # If we didn't, the model would try backpropagating all the way to start of the dataset.
        model.zero_grad()
        if args.model == 'Transformer':
            output = model(data)
            output = output.view(-1, ntokens)
        else:
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)

        total_loss += loss.item()
        losses.append(loss.item())

        if batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss / args.log_interval
            elapsed = time.time() - start_time
            print('| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | '
                    'loss {:5.2f} | ppl {:8.2f}'.format(
                epoch, batch, len(train_data) // args.bptt, lr,
                elapsed * 1000 / args.log_interval, cur_loss, math.exp(cur_loss)))
            total_loss = 0
            start_time = time.time()


# Loop over epochs.
lr = args.lr
best_val_loss = None
losses, val_losses, lrs = [], [], []

for epoch in range(1, args.epochs+1):
    epoch_start_time = time.time()
    train()
    val_loss = evaluate(val_data)
    val_losses.append(val_loss)
    lrs.append(lr)
    # Save the model if the validation loss is the best we've seen so far.
    if not best_val_loss or val_loss < best_val_loss:
        with open(args.save, 'wb') as f:
            torch.save(model, f)
        best_val_loss = val_loss
    else:
        # Anneal the learning rate if no improvement has been seen in the validation dataset.
        lr /= 4.0

# Load the best saved model.
with open(args.save, 'rb') as f:
    model = torch.load(f, weights_only=False)
    # after load the rnn params are not a continuous chunk of memory
    # this makes them a continuous chunk, and will speed up forward pass
    # Currently, only rnn model supports flatten_parameters function.
    if args.model in ['RNN_TANH', 'RNN_RELU', 'LSTM', 'GRU']:
        model.rnn.flatten_parameters()

# Run on test data.
test_loss = evaluate(test_data)
"""

WLM_STEP = [
    (
        "        loss.backward()\n\n        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.\n        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)",
        "        grads = loss.backward()\n\n        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.\n        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), args.clip)",
    ),
    ("p.data.add_(p.grad, alpha=-lr)", "p.data.add_(p.grad(grads), alpha=-lr)"),
]

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ate", "my", "hat", "while", "bird"]


def _write_corpus(path):
    rng = np.random.default_rng(35)
    for name, lines in (("train.txt", 14), ("valid.txt", 4), ("test.txt", 4)):
        text = "\n".join(" ".join(rng.choice(WORDS, rng.integers(3, 8))) for _ in range(lines))
        (path / name).write_text(text + "\n", encoding="utf8")


def _run(lib, source, name, args, initialize, monkeypatch):
    """``source`` executed as the module ``name`` (``torch.save(model)`` pickles its classes by
    module and name)."""
    module = types.ModuleType(name)
    module.__dict__.update(
        torch=lib,
        nn=lib.nn,
        optim=lib.optim,
        F=lib.nn.functional,
        math=math,
        np=np,
        args=args,
        initialize=initialize,
    )
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module.__dict__


@pytest.mark.parametrize(
    "model, tied",
    [("LSTM", True), ("GRU", False), ("RNN_TANH", False), ("Transformer", False)],
)
def test_word_language_model_matches_torch(tmp_path, monkeypatch, capsys, model, tied):
    _write_corpus(tmp_path)
    state = {}

    def initialize(net):
        for m in net.modules():
            if type(m).__name__ == "Dropout":  # nn.Transformer's own 0.1 (see the docstring)
                m.p = 0.0
            if type(m).__name__ == "MultiheadAttention":
                m.dropout = 0.0
        if not state:
            state.update({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
        else:
            net.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

    records = []
    for lib, source in ((torch, WLM_SOURCE), (rg, port(WLM_SOURCE, WLM_STEP))):
        torch.manual_seed(0)
        monkeypatch.setattr(lib, "_wlm_dtype", lib.get_default_dtype(), raising=False)
        lib.set_default_dtype(lib.float64)
        args = SimpleNamespace(
            data=str(tmp_path),
            model=model,
            emsize=8,
            nhid=8 if tied else 12,
            nlayers=2,
            nhead=2,
            lr=20.0 if model != "Transformer" else 2.0,
            clip=0.25,
            epochs=3,
            batch_size=3,
            bptt=5,
            dropout=0.0,
            tied=tied,
            log_interval=2,
            save=str(tmp_path / f"model_{lib.__name__}.pt"),
        )
        names = _run(lib, source, f"wlm_port_{lib.__name__}", args, initialize, monkeypatch)
        assert type(names["model"]).__module__ == f"wlm_port_{lib.__name__}"
        lib.set_default_dtype(lib._wlm_dtype)
        records.append(
            [
                names["losses"],
                names["val_losses"],
                names["lrs"],
                names["test_loss"],
                re.sub(r"ms/batch +[0-9.]+", "", capsys.readouterr().out),
                {n: p.detach().numpy().copy() for n, p in names["model"].named_parameters()},
            ]
        )
        if tied:
            assert names["model"].decoder.weight is names["model"].encoder.weight
    assert records[0][4].count("| epoch   3 |") == 2  # the log lines (timings left out) agree too
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-10)
