"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a pointer-generator summariser, trained a few batches against torch's run of the same code from
the same weights and batches.

- A program written here in the style of atulkum/pointer_summarizer's model and training step:
  a bidirectional ``nn.LSTM`` over ``pack_padded_sequence(embedded, lengths, batch_first=True)``
  with NumPy lengths, ``pad_packed_sequence`` of the packed encoder output at every decoder
  step, ``lstm._all_weights`` walked by name (``.data.uniform_``, ``.data[a:b].fill_``),
  ``weight.data.normal_(std=...)``, the decoder's embedding tied to the encoder's by assigning
  the ``Parameter`` (so the optimizer's list names it twice and ``load_state_dict`` must keep
  the tie), attention renormalised by the padding mask, ``F.tanh``/``F.sigmoid``, the copy gate
  ``p_gen`` mixing the vocabulary distribution with the attention one through
  ``torch.cat([generate, oov_zeros], 1).scatter_add(1, extended_ids, attention)`` into the
  extended vocabulary, teacher forcing, ``torch.gather(...).squeeze()`` of the gold
  probabilities, the masked per-step losses stacked and divided by the target lengths, the
  deprecated ``clip_grad_norm`` per module, ``optim.Adagrad(...,
  initial_accumulator_value=...)``, ``autograd.Variable(torch.from_numpy(a[order]).long())`` with
  ``np.argsort(lens)[::-1]``.

The batches are seeded NumPy arrays laid out as the repository's batcher lays them out (article
words outside the vocabulary numbered past it). Compared against torch: the losses, the weights
after training and the tie. ``initialize(...)`` gives the port torch's initial weights. The
lines a port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import types

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

config = types.SimpleNamespace(
    vocab_size=17,
    emb_dim=8,
    hidden_dim=6,
    max_dec_steps=5,
    pointer_gen=True,
    is_coverage=False,
    eps=1e-12,
    max_grad_norm=2.0,
    lr=0.15,
    adagrad_init_acc=0.1,
    rand_unif_init_mag=0.02,
    trunc_norm_init_std=1e-4,
    batch_size=3,
)


def make_batch(rng: np.random.Generator) -> types.SimpleNamespace:
    """One batch as ``data_util.batcher.Batch`` lays it out: padded id arrays, lengths, masks;
    article words outside the vocabulary get ids ``vocab_size + i`` in the extended ids."""
    batch_size, max_enc, max_dec = config.batch_size, 7, 5
    enc_lens = rng.integers(3, max_enc + 1, batch_size).astype(np.int32)
    dec_lens = rng.integers(2, max_dec + 1, batch_size).astype(np.int32)
    enc_batch = np.zeros((batch_size, max_enc), dtype=np.int32)
    enc_extend = np.zeros((batch_size, max_enc), dtype=np.int32)
    enc_mask = np.zeros((batch_size, max_enc), dtype=np.float32)
    dec_batch = np.zeros((batch_size, max_dec), dtype=np.int32)
    target_batch = np.zeros((batch_size, max_dec), dtype=np.int32)
    dec_mask = np.zeros((batch_size, max_dec), dtype=np.float32)
    max_art_oovs = 2
    for i in range(batch_size):
        ids = rng.integers(4, config.vocab_size, enc_lens[i])
        extended = ids.copy()
        oov = rng.random(enc_lens[i]) < 0.3  # UNK (id 0) in the vocabulary ids
        extended[oov] = config.vocab_size + rng.integers(0, max_art_oovs, oov.sum())
        ids[oov] = 0
        enc_batch[i, : enc_lens[i]] = ids
        enc_extend[i, : enc_lens[i]] = extended
        enc_mask[i, : enc_lens[i]] = 1
        # the summary copies words of the article (OOVs included) after START (id 2)
        summary = extended[rng.integers(0, enc_lens[i], dec_lens[i])]
        dec_batch[i, 0] = 2
        dec_batch[i, 1 : dec_lens[i]] = np.where(summary[:-1] >= config.vocab_size, 0, summary[:-1])
        target_batch[i, : dec_lens[i]] = summary
        dec_mask[i, : dec_lens[i]] = 1
    return types.SimpleNamespace(
        enc_batch=enc_batch,
        enc_lens=enc_lens,
        enc_padding_mask=enc_mask,
        enc_batch_extend_vocab=enc_extend,
        max_art_oovs=max_art_oovs,
        dec_batch=dec_batch,
        dec_padding_mask=dec_mask,
        dec_lens=dec_lens,
        target_batch=target_batch,
    )


POINTER_GENERATOR_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch import autograd, optim
from torch.nn import functional as F
from torch.nn.utils import clip_grad_norm, rnn

H, E = config.hidden_dim, config.emb_dim


def lstm_init(lstm):
    # small uniform weights; each bias zero but for a forget gate of one
    for layer in lstm._all_weights:
        for name in layer:
            tensor = getattr(lstm, name)
            if name.startswith("weight_"):
                tensor.data.uniform_(-config.rand_unif_init_mag, config.rand_unif_init_mag)
            elif name.startswith("bias_"):
                quarter = tensor.size(0) // 4
                tensor.data.fill_(0.0)
                tensor.data[quarter : 2 * quarter].fill_(1.0)


def normal_init(module):
    module.weight.data.normal_(std=config.trunc_norm_init_std)
    if getattr(module, "bias", None) is not None:
        module.bias.data.normal_(std=config.trunc_norm_init_std)


class ArticleEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, E)
        normal_init(self.embed)
        self.rnn = nn.LSTM(E, H, num_layers=1, batch_first=True, bidirectional=True)
        lstm_init(self.rnn)
        # the two directions' final states squeezed into the decoder's
        self.bridge_h, self.bridge_c = nn.Linear(2 * H, H), nn.Linear(2 * H, H)
        normal_init(self.bridge_h)
        normal_init(self.bridge_c)

    def forward(self, ids, lengths):  # lengths sorted longest first
        packed = rnn.pack_padded_sequence(self.embed(ids), lengths, batch_first=True)
        memory, (h, c) = self.rnn(packed)
        h = F.relu(self.bridge_h(h.view(-1, 2 * H))).unsqueeze(0)
        c = F.relu(self.bridge_c(c.view(-1, 2 * H))).unsqueeze(0)
        return memory, (h, c)


class CopyAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.keys = nn.Linear(2 * H, 2 * H, bias=False)
        self.query = nn.Linear(2 * H, 2 * H)
        self.score = nn.Linear(2 * H, 1, bias=False)

    def forward(self, state, memory, mask):
        states, _ = rnn.pad_packed_sequence(memory, batch_first=True)
        b, steps, width = list(states.size())
        flat = states.contiguous().view(-1, width)
        q = self.query(state).unsqueeze(1).expand(b, steps, width).contiguous().view(-1, width)
        scores = self.score(F.tanh(self.keys(flat) + q)).view(-1, steps)
        weights = F.softmax(scores, dim=1) * mask
        weights = weights / weights.sum(1, keepdim=True)  # renormalised over the real words
        context = torch.bmm(weights.unsqueeze(1), flat.view(-1, steps, width)).view(-1, 2 * H)
        return context, weights


class SummaryDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.attend = CopyAttention()
        self.embed = nn.Embedding(config.vocab_size, E)
        self.mix_input = nn.Linear(2 * H + E, E)
        self.rnn = nn.LSTM(E, H, num_layers=1, batch_first=True)
        lstm_init(self.rnn)
        self.gate = nn.Linear(4 * H + E, 1)
        self.hidden = nn.Linear(3 * H, H)
        self.vocab = nn.Linear(H, config.vocab_size)
        normal_init(self.vocab)

    def forward(self, word, state, memory, mask, context, oov_zeros, extended_ids):
        x = self.mix_input(torch.cat((context, self.embed(word)), 1))
        out, state = self.rnn(x.unsqueeze(1), state)
        summary = torch.cat((state[0].view(-1, H), state[1].view(-1, H)), 1)
        context, attention = self.attend(summary, memory, mask)
        p_gen = F.sigmoid(self.gate(torch.cat((context, summary, x), 1)))
        hidden = F.relu(self.hidden(torch.cat((out.view(-1, H), context), 1)))
        generate = p_gen * F.softmax(self.vocab(hidden), dim=1)
        if oov_zeros is not None:  # room for this batch's article-only words
            generate = torch.cat([generate, oov_zeros], 1)
        return generate.scatter_add(1, extended_ids, (1 - p_gen) * attention), state, context


encoder, decoder = ArticleEncoder(), SummaryDecoder()
decoder.embed.weight = encoder.embed.weight  # one vocabulary embedding for both
for module in (encoder, decoder):
    initialize(module)
parameters = list(encoder.parameters()) + list(decoder.parameters())
optimizer = optim.Adagrad(
    parameters, lr=config.lr, initial_accumulator_value=config.adagrad_init_acc
)


def as_ids(array, order):
    return autograd.Variable(torch.from_numpy(array[order]).long())


def train_step(batch):
    order = np.argsort(batch.enc_lens)[::-1]
    article, extended = as_ids(batch.enc_batch, order), as_ids(batch.enc_batch_extend_vocab, order)
    mask = autograd.Variable(torch.from_numpy(batch.enc_padding_mask[order])).float()
    oov_zeros = autograd.Variable(torch.zeros((config.batch_size, batch.max_art_oovs)))
    inputs, targets = as_ids(batch.dec_batch, order), as_ids(batch.target_batch, order)
    target_mask = autograd.Variable(torch.from_numpy(batch.dec_padding_mask[order])).float()
    target_lens = batch.dec_lens[order]

    optimizer.zero_grad()
    memory, state = encoder(article, batch.enc_lens[order])
    context = autograd.Variable(torch.zeros((config.batch_size, 2 * H)))
    per_step = []
    for t in range(min(np.max(target_lens), config.max_dec_steps)):
        step_input = (inputs[:, t], state, memory, mask, context, oov_zeros, extended)
        dist, state, context = decoder(*step_input)
        gold = torch.gather(dist, 1, targets[:, t].unsqueeze(1)).squeeze()
        per_step.append(-torch.log(gold + config.eps) * target_mask[:, t])
    lengths = autograd.Variable(torch.from_numpy(target_lens)).float()
    loss = torch.mean(torch.sum(torch.stack(per_step, 1), 1) / lengths)
    loss.backward()
    for module in (encoder, decoder):
        clip_grad_norm(module.parameters(), config.max_grad_norm)
    optimizer.step()
    return loss.item()


record.append([train_step(batch) for batch in batches])
for module in (encoder, decoder):
    record.append({name: t.detach().numpy() for name, t in module.state_dict().items()})
record.append(bool(decoder.embed.weight is encoder.embed.weight))
"""

POINTER_GENERATOR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch import autograd, optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "from retrograd import autograd, optim\n",
    ),
    (
        "    loss.backward()\n"
        "    for module in (encoder, decoder):\n"
        "        clip_grad_norm(module.parameters(), config.max_grad_norm)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    for module in (encoder, decoder):\n"
        "        clip_grad_norm(grads, module.parameters(), config.max_grad_norm)\n"
        "    optimizer.step(grads)\n",
    ),
]


def test_pointer_generator_trains_with_copy_attention_as_torch():
    initialize, records = initializer(), []
    rng = np.random.default_rng(350)
    batches = [make_batch(rng) for _ in range(4)]
    for lib in (torch, rg):
        record = []
        text = (
            POINTER_GENERATOR_SOURCE
            if lib is torch
            else port(POINTER_GENERATOR_SOURCE, POINTER_GENERATOR_STEPS).replace(
                "from torch.", "from retrograd."
            )
        )
        run_source(text, lib, record=record, initialize=initialize, config=config, batches=batches)
        records.append(record)
    theirs, ours = records
    assert theirs[-1] is True
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
