"""Programs written here in the style of Ben Trevett's seq2seq and sentiment-analysis tutorial
notebooks (bentrevett/pytorch-seq2seq, bentrevett/pytorch-sentiment-analysis), run under torch
and, ported, under retrograd from the same weights (the harness: ``tests/real_ports.py``);
torchtext's fields and iterators are lists of index tensors, dropout is 0 so that neither run
draws:

- a packed, attentive translator: a bidirectional ``nn.GRU`` encoder over
  ``pack_padded_sequence(embedded, lengths.to("cpu"))`` and ``pad_packed_sequence``,
  ``torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)``, additive attention
  (``hidden.unsqueeze(1).repeat(1, src_len, 1)``, ``self.v(energy).squeeze(2)``,
  ``scores.masked_fill(mask == 0, -1e10)``), the mask ``(src != pad).permute(1, 0)``,
  ``torch.bmm`` of the weights, ``assert (output == hidden).all()``, teacher forcing by
  ``random.random() < ratio`` and ``output.argmax(1)``, ``outputs[t] = output`` into
  ``torch.zeros(...).to(self.device)``, initialisation by parameter name on ``param.data``,
  ``CrossEntropyLoss(ignore_index=pad)`` of ``output[1:].view(-1, output_dim)``,
  ``clip_grad_norm_``, and greedy translation (``torch.LongTensor(ids).unsqueeze(1)``,
  ``attentions[i] = attention`` into a ``torch.zeros(max_len, 1, len(ids))``,
  ``.argmax(1).item()``);
- sentiment classifiers: a FastText-style bag with bigrams appended, ``nn.Embedding(...,
  padding_idx=pad)``, ``F.avg_pool2d(embedded, (embedded.shape[1], 1))`` of a 3-d (unbatched)
  input; ``nn.Conv2d(in_channels=1, out_channels=n, kernel_size=(fs, emb))`` in an
  ``nn.ModuleList``, ``squeeze(3)``, ``F.max_pool1d(c, c.shape[2]).squeeze(2)``, and an
  ``nn.Conv1d`` variant over ``embedded.permute(0, 2, 1)``; ``BCEWithLogitsLoss`` with
  ``torch.round(torch.sigmoid(preds))`` accuracy, or ``CrossEntropyLoss`` with
  ``preds.argmax(1, keepdim=True)``, ``top.eq(y.view_as(top)).sum()`` and ``correct.float() /
  y.shape[0]``; pretrained vectors copied in by ``weight.data.copy_`` and rows zeroed by
  ``weight.data[idx] = torch.zeros(dim)``; prediction padding short sentences to a minimum
  length.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

SEQ2SEQ_SOURCE = """
import random


class BiEncoder(nn.Module):
    def __init__(self, vocab, emb, enc_hid, dec_hid, dropout):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(emb, enc_hid, bidirectional=True)
        self.bridge = nn.Linear(2 * enc_hid, dec_hid)
        self.drop = nn.Dropout(dropout)

    def forward(self, src, lengths):
        # lengths must live on the CPU for packing
        embedded = self.drop(self.embedding(src))
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths.to("cpu"))
        packed_out, hidden = self.rnn(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(packed_out)  # zeros past each length
        both_ends = torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)
        return states, torch.tanh(self.bridge(both_ends))


class AdditiveAttention(nn.Module):
    def __init__(self, enc_hid, dec_hid):
        super().__init__()
        self.mix = nn.Linear(2 * enc_hid + dec_hid, dec_hid)
        self.v = nn.Linear(dec_hid, 1, bias=False)

    def forward(self, hidden, states, mask):
        src_len = states.shape[0]
        query = hidden.unsqueeze(1).repeat(1, src_len, 1)
        energy = torch.tanh(self.mix(torch.cat((query, states.permute(1, 0, 2)), dim=2)))
        scores = self.v(energy).squeeze(2).masked_fill(mask == 0, -1e10)
        return F.softmax(scores, dim=1)


class AttnDecoder(nn.Module):
    def __init__(self, vocab, emb, enc_hid, dec_hid, dropout, attention):
        super().__init__()
        self.output_dim, self.attention = vocab, attention
        self.embedding = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(2 * enc_hid + emb, dec_hid)
        self.out = nn.Linear(2 * enc_hid + dec_hid + emb, vocab)
        self.drop = nn.Dropout(dropout)

    def forward(self, token, hidden, states, mask):
        embedded = self.drop(self.embedding(token.unsqueeze(0)))
        weights = self.attention(hidden, states, mask).unsqueeze(1)
        context = torch.bmm(weights, states.permute(1, 0, 2)).permute(1, 0, 2)
        output, hidden = self.rnn(torch.cat((embedded, context), dim=2), hidden.unsqueeze(0))
        assert (output == hidden).all()  # one step, one layer
        features = torch.cat((output.squeeze(0), context.squeeze(0), embedded.squeeze(0)), dim=1)
        return self.out(features), hidden.squeeze(0), weights.squeeze(1)


class Translator(nn.Module):
    def __init__(self, encoder, decoder, pad, device):
        super().__init__()
        self.encoder, self.decoder, self.pad, self.device = encoder, decoder, pad, device

    def make_mask(self, src):
        return (src != self.pad).permute(1, 0)

    def forward(self, src, lengths, trg, forcing=0.5):
        steps, batch = trg.shape[0], src.shape[1]
        outputs = torch.zeros(steps, batch, self.decoder.output_dim).to(self.device)
        states, hidden = self.encoder(src, lengths)
        mask, token = self.make_mask(src), trg[0, :]
        for t in range(1, steps):
            output, hidden, _ = self.decoder(token, hidden, states, mask)
            outputs[t] = output
            token = trg[t] if random.random() < forcing else output.argmax(1)
        return outputs


def small_normal_init(module):
    for name, param in module.named_parameters():
        if "weight" in name:
            nn.init.normal_(param.data, std=0.01)
        else:
            nn.init.constant_(param.data, 0.0)


def flat_loss(criterion, output, trg):
    return criterion(output[1:].view(-1, output.shape[-1]), trg[1:].view(-1))


def fit_epoch(model, batches, optimizer, criterion, clip):
    model.train()
    total = 0.0
    for batch in batches:
        (src, lengths), trg = batch.src, batch.trg
        optimizer.zero_grad()
        loss = flat_loss(criterion, model(src, lengths, trg), trg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        optimizer.step()
        total += loss.item()
    return total / len(batches)


def score(model, batches, criterion):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for batch in batches:
            (src, lengths), trg = batch.src, batch.trg
            output = model(src, lengths, trg, 0)  # no teacher forcing
            total += flat_loss(criterion, output, trg).item()
    return total / len(batches)


def translate(ids, sos, eos, model, device, max_len=20):
    model.eval()
    src = torch.LongTensor(ids).unsqueeze(1).to(device)
    with torch.no_grad():
        states, hidden = model.encoder(src, torch.LongTensor([len(ids)]))
    mask, out_ids = model.make_mask(src), [sos]
    attentions = torch.zeros(max_len, 1, len(ids)).to(device)
    for i in range(max_len):
        last = torch.LongTensor([out_ids[-1]]).to(device)
        with torch.no_grad():
            output, hidden, attention = model.decoder(last, hidden, states, mask)
        attentions[i] = attention
        out_ids.append(output.argmax(1).item())
        if out_ids[-1] == eos:
            break
    return out_ids[1:], attentions[: len(out_ids) - 1]


def main(batches, valid, src_vocab, trg_vocab, src_pad, trg_pad, device, epochs=2, start=None):
    attention = AdditiveAttention(10, 10)
    decoder = AttnDecoder(trg_vocab, 6, 10, 10, 0.0, attention)
    model = Translator(BiEncoder(src_vocab, 6, 10, 10, 0.0), decoder, src_pad, device).to(device)
    model.apply(small_normal_init)
    if start is not None:
        model.load_state_dict(start)
    log = [sum(p.numel() for p in model.parameters() if p.requires_grad)]
    adam = optim.Adam(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss(ignore_index=trg_pad)
    for epoch in range(epochs):
        train_loss = fit_epoch(model, batches, adam, criterion, 1.0)
        valid_loss = score(model, valid, criterion)
        log.append([train_loss, valid_loss, math.exp(valid_loss)])
    return model, log
"""

SEQ2SEQ_STEP = [
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)\n"
        "        optimizer.step()",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=clip)\n"
        "        optimizer.step(grads)",
    ),
]


class Batch:
    def __init__(self, src, src_len, trg):
        self.src = (src, src_len)
        self.trg = trg


def _seq2seq_batches(lib, rng, n, pad=1, sos=2, eos=3):
    batches = []
    for _ in range(n):
        lengths = sorted(rng.integers(2, 6, 3), reverse=True)  # packed: longest first
        src = np.full((max(lengths) + 2, 3), pad)
        trg = np.full((max(lengths) + 3, 3), pad)
        for b, n_tok in enumerate(lengths):
            tokens = rng.integers(4, 10, n_tok)
            src[: n_tok + 2, b] = [sos, *tokens, eos]
            trg[: n_tok + 3, b] = [sos, *((tokens % 5) + 4), 4, eos]  # a learnable mapping
        src_len = lib.tensor([n + 2 for n in lengths], dtype=lib.int64)
        batches.append(
            Batch(lib.tensor(src, dtype=lib.int64), src_len, lib.tensor(trg, dtype=lib.int64))
        )
    return batches


def test_seq2seq_training_from_the_same_weights_matches_torch():
    theirs, ours = both(SEQ2SEQ_SOURCE, SEQ2SEQ_STEP)
    records, start = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        rng = np.random.default_rng(29)
        batches = _seq2seq_batches(lib, rng, 4)
        valid = _seq2seq_batches(lib, rng, 2)
        if start is None:
            torch.manual_seed(0)
            reference = names["Translator"](
                names["BiEncoder"](10, 6, 10, 10, 0.0),
                names["AttnDecoder"](10, 6, 10, 10, 0.0, names["AdditiveAttention"](10, 10)),
                1,
                "cpu",
            )
            reference.apply(names["small_normal_init"])
            for p in reference.parameters():  # spread the weights: std 0.01 learns slowly
                p.data.mul_(30.0)
            start = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
        random.seed(0)
        model, record = names["main"](
            batches, valid, 10, 10, 1, 1, "cpu", start={k: lib.tensor(v) for k, v in start.items()}
        )
        tokens, attentions = names["translate"]([2, 5, 7, 6, 3], 2, 3, model, "cpu", max_len=8)
        record.extend([tokens, attentions.numpy()])
        record.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


SENTIMENT_SOURCE = """
def with_bigrams(words):
    pairs = {a + " " + b for a, b in zip(words, words[1:])}
    return words + sorted(pairs)


class BagOfNgrams(nn.Module):
    def __init__(self, vocab, dim, out, pad):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim, padding_idx=pad)
        self.fc = nn.Linear(dim, out)

    def forward(self, text):  # text: [len, batch]
        embedded = self.embedding(text).permute(1, 0, 2)
        return self.fc(F.avg_pool2d(embedded, (embedded.shape[1], 1)).squeeze(1))


class Conv2dText(nn.Module):
    def __init__(self, vocab, dim, filters, widths, out, dropout, pad):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim, padding_idx=pad)
        self.convs = nn.ModuleList(
            [nn.Conv2d(in_channels=1, out_channels=filters, kernel_size=(w, dim)) for w in widths])
        self.fc = nn.Linear(len(widths) * filters, out)
        self.drop = nn.Dropout(dropout)

    def forward(self, text):  # text: [batch, len]
        x = self.embedding(text).unsqueeze(1)
        maps = [F.relu(conv(x)).squeeze(3) for conv in self.convs]
        pooled = [F.max_pool1d(m, m.shape[2]).squeeze(2) for m in maps]
        return self.fc(self.drop(torch.cat(pooled, dim=1)))


class Conv1dText(nn.Module):
    def __init__(self, vocab, dim, filters, widths, out, dropout, pad):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim, padding_idx=pad)
        self.convs = nn.ModuleList(
            [nn.Conv1d(in_channels=dim, out_channels=filters, kernel_size=w) for w in widths])
        self.fc = nn.Linear(len(widths) * filters, out)
        self.drop = nn.Dropout(dropout)

    def forward(self, text):
        x = self.embedding(text).permute(0, 2, 1)  # channels are the embedding
        maps = [F.relu(conv(x)) for conv in self.convs]
        pooled = [F.max_pool1d(m, m.shape[2]).squeeze(2) for m in maps]
        return self.fc(self.drop(torch.cat(pooled, dim=1)))


def binary_accuracy(logits, y):
    hits = (torch.round(torch.sigmoid(logits)) == y).float()
    return hits.sum() / len(hits)


def categorical_accuracy(logits, y):
    top = logits.argmax(1, keepdim=True)
    return top.eq(y.view_as(top)).sum().float() / y.shape[0]


def one_epoch(model, batches, optimizer, criterion, accuracy):
    model.train()
    loss_sum = acc_sum = 0.0
    for batch in batches:
        optimizer.zero_grad()
        logits = model(batch.text).squeeze(1)
        loss = criterion(logits, batch.label)
        acc = accuracy(logits, batch.label)
        loss.backward()
        optimizer.step()
        loss_sum, acc_sum = loss_sum + loss.item(), acc_sum + acc.item()
    return loss_sum / len(batches), acc_sum / len(batches)


def predict(model, ids, pad, min_len=4, batch_first=True):
    model.eval()
    if len(ids) < min_len:  # the widest filter needs this many tokens
        ids = ids + [pad] * (min_len - len(ids))
    x = torch.LongTensor(ids)
    x = x.unsqueeze(0) if batch_first else x.unsqueeze(1)
    return torch.sigmoid(model(x)).item()


def main(model, batches, vectors, unk, pad, dim, criterion, accuracy):
    table = model.embedding.weight.data
    table.copy_(vectors)
    for idx in (unk, pad):
        table[idx] = torch.zeros(dim)
    adam = optim.Adam(model.parameters())
    return [list(one_epoch(model, batches, adam, criterion, accuracy)) for _ in range(2)]
"""

SENTIMENT_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


class Example:
    def __init__(self, text, label):
        self.text, self.label = text, label


@pytest.mark.parametrize("model_name", ["FastText", "CNN", "CNN1d", "CNN-multiclass"])
def test_sentiment_models_train_and_predict_as_torch(model_name):
    theirs, ours = both(SENTIMENT_SOURCE, SENTIMENT_STEP)
    multiclass = model_name == "CNN-multiclass"
    rng = np.random.default_rng(290)
    data = [
        (rng.integers(0, 20, (4, 7)), rng.integers(0, 3 if multiclass else 2, 4)) for _ in range(3)
    ]
    vectors = rng.standard_normal((20, 6))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        if model_name == "FastText":
            model = names["BagOfNgrams"](20, 6, 1, 1)
        else:
            cls = names["Conv1dText" if model_name == "CNN1d" else "Conv2dText"]
            model = cls(20, 6, 4, [2, 3], 3 if multiclass else 1, 0.0, 1)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        label_dtype = lib.int64 if multiclass else lib.float32
        batches = [
            # FastText reads [sent len, batch size], the CNNs [batch size, sent len]
            Example(
                lib.tensor(text.T if model_name == "FastText" else text),
                lib.tensor(y, dtype=label_dtype),
            )
            for text, y in data
        ]
        criterion = nn_of(lib).CrossEntropyLoss() if multiclass else nn_of(lib).BCEWithLogitsLoss()
        accuracy = names["categorical_accuracy" if multiclass else "binary_accuracy"]
        record = names["main"](
            model, batches, lib.tensor(vectors, dtype=lib.float32), 0, 1, 6, criterion, accuracy
        )
        if not multiclass:
            sentence = [4, 7]
            if model_name == "FastText":
                record.append(names["predict"](model, sentence + [5, 11], 1, batch_first=False))
            else:
                record.append(names["predict"](model, sentence, 1))
        record.append(names["with_bigrams"](["a", "quiet", "film"]))
        record.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def nn_of(lib):
    return lib.nn
