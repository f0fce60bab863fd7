# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
four more notebooks of Ben Trevett's tutorials, torchtext's fields and iterators replaced by
lists of index tensors (the models, the training and evaluation loops and the inference helpers
as written, dropout at 0 so that both runs draw nothing):

- "4 - Packed Padded Sequences, Masking, Inference and BLEU" (github.com/bentrevett/
  pytorch-seq2seq): a bidirectional ``nn.GRU`` encoder over ``pack_padded_sequence(embedded,
  src_len.to('cpu'))`` and ``pad_packed_sequence``, ``torch.cat((hidden[-2,:,:],
  hidden[-1,:,:]), dim = 1)``, Bahdanau attention (``hidden.unsqueeze(1).repeat(1, src_len,
  1)``, ``self.v(energy).squeeze(2)``, ``attention.masked_fill(mask == 0, -1e10)``), the mask
  ``(src != self.src_pad_idx).permute(1, 0)``, ``torch.bmm`` of the weights, ``assert (output
  == hidden).all()``, teacher forcing by ``random.random() < teacher_forcing_ratio`` and
  ``output.argmax(1)``, ``outputs[t] = output`` into ``torch.zeros(...).to(self.device)``,
  ``init_weights`` by parameter name on ``param.data``, ``CrossEntropyLoss(ignore_index =
  TRG_PAD_IDX)`` of ``output[1:].view(-1, output_dim)``, ``clip_grad_norm_``, and
  ``translate_sentence`` (``torch.LongTensor(src_indexes).unsqueeze(1)``, ``attentions[i] =
  attention`` into a ``torch.zeros(max_len, 1, len(src_indexes))``, ``.argmax(1).item()``);
- "3 - Faster Sentiment Analysis" (bentrevett/pytorch-sentiment-analysis): FastText with
  ``generate_bigrams``, ``nn.Embedding(padding_idx=pad_idx)``, ``F.avg_pool2d(embedded,
  (embedded.shape[1], 1))`` of a 3-d (unbatched) input, ``BCEWithLogitsLoss``,
  ``binary_accuracy`` by ``torch.round(torch.sigmoid(preds))``, the pretrained vectors copied
  in by ``weight.data.copy_`` and rows zeroed by ``weight.data[UNK_IDX] =
  torch.zeros(EMBEDDING_DIM)``;
- "4 - Convolutional Sentiment Analysis": ``nn.Conv2d(in_channels = 1, out_channels =
  n_filters, kernel_size = (fs, embedding_dim))`` in an ``nn.ModuleList``, ``squeeze(3)``,
  ``F.max_pool1d(conv, conv.shape[2]).squeeze(2)``, and the ``CNN1d`` variant of
  ``nn.Conv1d`` over ``embedded.permute(0, 2, 1)``; ``predict_sentiment`` padding short
  sentences to ``min_len``;
- "5 - Multi-class Sentiment Analysis": the CNN with ``CrossEntropyLoss`` and
  ``categorical_accuracy`` (``preds.argmax(1, keepdim = True)``, ``top_pred.eq(
  y.view_as(top_pred)).sum()``, ``correct.float() / y.shape[0]``).
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

class Encoder(nn.Module):
    def __init__(self, input_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout):
        super().__init__()

        self.embedding = nn.Embedding(input_dim, emb_dim)

        self.rnn = nn.GRU(emb_dim, enc_hid_dim, bidirectional = True)

        self.fc = nn.Linear(enc_hid_dim * 2, dec_hid_dim)

        self.dropout = nn.Dropout(dropout)

    def forward(self, src, src_len):

        #src = [src len, batch size]
        #src_len = [batch size]

        embedded = self.dropout(self.embedding(src))

        #embedded = [src len, batch size, emb dim]

        #need to explicitly put lengths on cpu!
        packed_embedded = nn.utils.rnn.pack_padded_sequence(embedded, src_len.to('cpu'))

        packed_outputs, hidden = self.rnn(packed_embedded)

        #packed_outputs is a packed sequence containing all hidden states
        #hidden is now from the final non-padded element in the batch

        outputs, _ = nn.utils.rnn.pad_packed_sequence(packed_outputs)

        #outputs is now a non-packed sequence, all hidden states obtained
        #  when the input is a pad token are all zeros

        hidden = torch.tanh(self.fc(torch.cat((hidden[-2,:,:], hidden[-1,:,:]), dim = 1)))

        return outputs, hidden


class Attention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim):
        super().__init__()

        self.attn = nn.Linear((enc_hid_dim * 2) + dec_hid_dim, dec_hid_dim)
        self.v = nn.Linear(dec_hid_dim, 1, bias = False)

    def forward(self, hidden, encoder_outputs, mask):

        #hidden = [batch size, dec hid dim]
        #encoder_outputs = [src len, batch size, enc hid dim * 2]

        batch_size = encoder_outputs.shape[1]
        src_len = encoder_outputs.shape[0]

        #repeat decoder hidden state src_len times
        hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)

        encoder_outputs = encoder_outputs.permute(1, 0, 2)

        energy = torch.tanh(self.attn(torch.cat((hidden, encoder_outputs), dim = 2)))

        attention = self.v(energy).squeeze(2)

        attention = attention.masked_fill(mask == 0, -1e10)

        return F.softmax(attention, dim = 1)


class Decoder(nn.Module):
    def __init__(self, output_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout, attention):
        super().__init__()

        self.output_dim = output_dim
        self.attention = attention

        self.embedding = nn.Embedding(output_dim, emb_dim)

        self.rnn = nn.GRU((enc_hid_dim * 2) + emb_dim, dec_hid_dim)

        self.fc_out = nn.Linear((enc_hid_dim * 2) + dec_hid_dim + emb_dim, output_dim)

        self.dropout = nn.Dropout(dropout)

    def forward(self, input, hidden, encoder_outputs, mask):

        input = input.unsqueeze(0)

        embedded = self.dropout(self.embedding(input))

        a = self.attention(hidden, encoder_outputs, mask)

        a = a.unsqueeze(1)

        encoder_outputs = encoder_outputs.permute(1, 0, 2)

        weighted = torch.bmm(a, encoder_outputs)

        weighted = weighted.permute(1, 0, 2)

        rnn_input = torch.cat((embedded, weighted), dim = 2)

        output, hidden = self.rnn(rnn_input, hidden.unsqueeze(0))

        assert (output == hidden).all()

        embedded = embedded.squeeze(0)
        output = output.squeeze(0)
        weighted = weighted.squeeze(0)

        prediction = self.fc_out(torch.cat((output, weighted, embedded), dim = 1))

        return prediction, hidden.squeeze(0), a.squeeze(1)


class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder, src_pad_idx, device):
        super().__init__()

        self.encoder = encoder
        self.decoder = decoder
        self.src_pad_idx = src_pad_idx
        self.device = device

    def create_mask(self, src):
        mask = (src != self.src_pad_idx).permute(1, 0)
        return mask

    def forward(self, src, src_len, trg, teacher_forcing_ratio = 0.5):

        batch_size = src.shape[1]
        trg_len = trg.shape[0]
        trg_vocab_size = self.decoder.output_dim

        #tensor to store decoder outputs
        outputs = torch.zeros(trg_len, batch_size, trg_vocab_size).to(self.device)

        #encoder_outputs is all hidden states of the input sequence, back and forwards
        #hidden is the final forward and backward hidden states, passed through a linear layer
        encoder_outputs, hidden = self.encoder(src, src_len)

        #first input to the decoder is the <sos> tokens
        input = trg[0,:]

        mask = self.create_mask(src)

        for t in range(1, trg_len):

            output, hidden, _ = self.decoder(input, hidden, encoder_outputs, mask)

            outputs[t] = output

            teacher_force = random.random() < teacher_forcing_ratio

            top1 = output.argmax(1)

            input = trg[t] if teacher_force else top1

        return outputs


def init_weights(m):
    for name, param in m.named_parameters():
        if 'weight' in name:
            nn.init.normal_(param.data, mean=0, std=0.01)
        else:
            nn.init.constant_(param.data, 0)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train(model, iterator, optimizer, criterion, clip):

    model.train()

    epoch_loss = 0

    for i, batch in enumerate(iterator):

        src, src_len = batch.src
        trg = batch.trg

        optimizer.zero_grad()

        output = model(src, src_len, trg)

        output_dim = output.shape[-1]

        output = output[1:].view(-1, output_dim)
        trg = trg[1:].view(-1)

        loss = criterion(output, trg)

        loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)

        optimizer.step()

        epoch_loss += loss.item()

    return epoch_loss / len(iterator)


def evaluate(model, iterator, criterion):

    model.eval()

    epoch_loss = 0

    with torch.no_grad():

        for i, batch in enumerate(iterator):

            src, src_len = batch.src
            trg = batch.trg

            output = model(src, src_len, trg, 0) #turn off teacher forcing

            output_dim = output.shape[-1]

            output = output[1:].view(-1, output_dim)
            trg = trg[1:].view(-1)

            loss = criterion(output, trg)

            epoch_loss += loss.item()

    return epoch_loss / len(iterator)


def translate_sentence(src_indexes, sos_idx, eos_idx, model, device, max_len = 50):

    model.eval()

    src_tensor = torch.LongTensor(src_indexes).unsqueeze(1).to(device)

    src_len = torch.LongTensor([len(src_indexes)])

    with torch.no_grad():
        encoder_outputs, hidden = model.encoder(src_tensor, src_len)

    mask = model.create_mask(src_tensor)

    trg_indexes = [sos_idx]

    attentions = torch.zeros(max_len, 1, len(src_indexes)).to(device)

    for i in range(max_len):

        trg_tensor = torch.LongTensor([trg_indexes[-1]]).to(device)

        with torch.no_grad():
            output, hidden, attention = model.decoder(trg_tensor, hidden, encoder_outputs, mask)

        attentions[i] = attention

        pred_token = output.argmax(1).item()

        trg_indexes.append(pred_token)

        if pred_token == eos_idx:
            break

    return trg_indexes[1:], attentions[:len(trg_indexes)-1]


def main(batches, valid, INPUT_DIM, OUTPUT_DIM, SRC_PAD_IDX, TRG_PAD_IDX, device, N_EPOCHS=2):
    ENC_EMB_DIM = 8
    DEC_EMB_DIM = 8
    ENC_HID_DIM = 12
    DEC_HID_DIM = 12
    ENC_DROPOUT = 0.0
    DEC_DROPOUT = 0.0

    attn = Attention(ENC_HID_DIM, DEC_HID_DIM)
    enc = Encoder(INPUT_DIM, ENC_EMB_DIM, ENC_HID_DIM, DEC_HID_DIM, ENC_DROPOUT)
    dec = Decoder(OUTPUT_DIM, DEC_EMB_DIM, ENC_HID_DIM, DEC_HID_DIM, DEC_DROPOUT, attn)

    model = Seq2Seq(enc, dec, SRC_PAD_IDX, device).to(device)
    model.apply(init_weights)
    records = [count_parameters(model)]

    optimizer = optim.Adam(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss(ignore_index = TRG_PAD_IDX)
    CLIP = 1

    for epoch in range(N_EPOCHS):
        train_loss = train(model, batches, optimizer, criterion, CLIP)
        valid_loss = evaluate(model, valid, criterion)
        records.append([train_loss, valid_loss, math.exp(valid_loss)])
    return model, records
"""

SEQ2SEQ_STEP = [
    (
        "        loss.backward()\n\n        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n\n        optimizer.step()",
        "        grads = loss.backward()\n\n        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), clip)\n\n        optimizer.step(grads)",
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
    source = SEQ2SEQ_SOURCE.replace(
        "    model.apply(init_weights)\n",
        "    model.apply(init_weights)\n    if start is not None:\n        model.load_state_dict(start)\n",
    ).replace("device, N_EPOCHS=2):", "device, N_EPOCHS=2, start=None):")
    theirs, ours = both(source, SEQ2SEQ_STEP)
    records, start = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        rng = np.random.default_rng(29)
        batches = _seq2seq_batches(lib, rng, 4)
        valid = _seq2seq_batches(lib, rng, 2)
        if start is None:
            torch.manual_seed(0)
            reference = names["Seq2Seq"](
                names["Encoder"](10, 8, 12, 12, 0.0),
                names["Decoder"](10, 8, 12, 12, 0.0, names["Attention"](12, 12)),
                1,
                "cpu",
            )
            reference.apply(names["init_weights"])
            for p in reference.parameters():  # spread the weights: std 0.01 learns slowly
                p.data.mul_(30.0)
            start = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
        random.seed(0)
        model, record = names["main"](
            batches, valid, 10, 10, 1, 1, "cpu", start={k: lib.tensor(v) for k, v in start.items()}
        )
        tokens, attentions = names["translate_sentence"](
            [2, 5, 7, 6, 3], 2, 3, model, "cpu", max_len=8
        )
        record.extend([tokens, attentions.numpy()])
        record.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


SENTIMENT_SOURCE = """
def generate_bigrams(x):
    n_grams = set(zip(*[x[i:] for i in range(2)]))
    for n_gram in n_grams:
        x.append(' '.join(n_gram))
    return x


class FastText(nn.Module):
    def __init__(self, vocab_size, embedding_dim, output_dim, pad_idx):

        super().__init__()

        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_idx)

        self.fc = nn.Linear(embedding_dim, output_dim)

    def forward(self, text):

        #text = [sent len, batch size]

        embedded = self.embedding(text)

        #embedded = [sent len, batch size, emb dim]

        embedded = embedded.permute(1, 0, 2)

        #embedded = [batch size, sent len, emb dim]

        pooled = F.avg_pool2d(embedded, (embedded.shape[1], 1)).squeeze(1)

        #pooled = [batch size, embedding_dim]

        return self.fc(pooled)


class CNN(nn.Module):
    def __init__(self, vocab_size, embedding_dim, n_filters, filter_sizes, output_dim,
                 dropout, pad_idx):

        super().__init__()

        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx = pad_idx)

        self.convs = nn.ModuleList([
                                    nn.Conv2d(in_channels = 1,
                                              out_channels = n_filters,
                                              kernel_size = (fs, embedding_dim))
                                    for fs in filter_sizes
                                    ])

        self.fc = nn.Linear(len(filter_sizes) * n_filters, output_dim)

        self.dropout = nn.Dropout(dropout)

    def forward(self, text):

        #text = [batch size, sent len]

        embedded = self.embedding(text)

        #embedded = [batch size, sent len, emb dim]

        embedded = embedded.unsqueeze(1)

        #embedded = [batch size, 1, sent len, emb dim]

        conved = [F.relu(conv(embedded)).squeeze(3) for conv in self.convs]

        #conved_n = [batch size, n_filters, sent len - filter_sizes[n] + 1]

        pooled = [F.max_pool1d(conv, conv.shape[2]).squeeze(2) for conv in conved]

        #pooled_n = [batch size, n_filters]

        cat = self.dropout(torch.cat(pooled, dim = 1))

        #cat = [batch size, n_filters * len(filter_sizes)]

        return self.fc(cat)


class CNN1d(nn.Module):
    def __init__(self, vocab_size, embedding_dim, n_filters, filter_sizes, output_dim,
                 dropout, pad_idx):

        super().__init__()

        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx = pad_idx)

        self.convs = nn.ModuleList([
                                    nn.Conv1d(in_channels = embedding_dim,
                                              out_channels = n_filters,
                                              kernel_size = fs)
                                    for fs in filter_sizes
                                    ])

        self.fc = nn.Linear(len(filter_sizes) * n_filters, output_dim)

        self.dropout = nn.Dropout(dropout)

    def forward(self, text):

        #text = [batch size, sent len]

        embedded = self.embedding(text)

        #embedded = [batch size, sent len, emb dim]

        embedded = embedded.permute(0, 2, 1)

        #embedded = [batch size, emb dim, sent len]

        conved = [F.relu(conv(embedded)) for conv in self.convs]

        #conved_n = [batch size, n_filters, sent len - filter_sizes[n] + 1]

        pooled = [F.max_pool1d(conv, conv.shape[2]).squeeze(2) for conv in conved]

        #pooled_n = [batch size, n_filters]

        cat = self.dropout(torch.cat(pooled, dim = 1))

        #cat = [batch size, n_filters * len(filter_sizes)]

        return self.fc(cat)


def binary_accuracy(preds, y):
    \"\"\"
    Returns accuracy per batch, i.e. if you get 8/10 right, this returns 0.8, NOT 8
    \"\"\"

    #round predictions to the closest integer
    rounded_preds = torch.round(torch.sigmoid(preds))
    correct = (rounded_preds == y).float() #convert into float for division
    acc = correct.sum() / len(correct)
    return acc


def categorical_accuracy(preds, y):
    \"\"\"
    Returns accuracy per batch, i.e. if you get 8/10 right, this returns 0.8, NOT 8
    \"\"\"
    top_pred = preds.argmax(1, keepdim = True)
    correct = top_pred.eq(y.view_as(top_pred)).sum()
    acc = correct.float() / y.shape[0]
    return acc


def train(model, iterator, optimizer, criterion, accuracy):

    epoch_loss = 0
    epoch_acc = 0

    model.train()

    for batch in iterator:

        optimizer.zero_grad()

        predictions = model(batch.text).squeeze(1)

        loss = criterion(predictions, batch.label)

        acc = accuracy(predictions, batch.label)

        loss.backward()

        optimizer.step()

        epoch_loss += loss.item()
        epoch_acc += acc.item()

    return epoch_loss / len(iterator), epoch_acc / len(iterator)


def predict_sentiment(model, indexed, pad_idx, min_len = 5):
    model.eval()
    if len(indexed) < min_len:
        indexed += [pad_idx] * (min_len - len(indexed))
    tensor = torch.LongTensor(indexed)
    tensor = tensor.unsqueeze(0)
    prediction = torch.sigmoid(model(tensor))
    return prediction.item()


# "3 - Faster Sentiment Analysis"'s own predict_sentiment (FastText reads [sent len, batch size])
def predict_sentiment_fasttext(model, indexed):
    model.eval()
    tensor = torch.LongTensor(indexed)
    tensor = tensor.unsqueeze(1)
    prediction = torch.sigmoid(model(tensor))
    return prediction.item()


def main(model, batches, pretrained_embeddings, UNK_IDX, PAD_IDX, EMBEDDING_DIM, criterion, accuracy):
    model.embedding.weight.data.copy_(pretrained_embeddings)

    model.embedding.weight.data[UNK_IDX] = torch.zeros(EMBEDDING_DIM)
    model.embedding.weight.data[PAD_IDX] = torch.zeros(EMBEDDING_DIM)

    optimizer = optim.Adam(model.parameters())

    records = []
    for epoch in range(2):
        records.append(list(train(model, batches, optimizer, criterion, accuracy)))
    return records
"""

SENTIMENT_STEP = [
    (
        "        loss.backward()\n\n        optimizer.step()",
        "        grads = loss.backward()\n\n        optimizer.step(grads)",
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
            model = names["FastText"](20, 6, 1, 1)
        else:
            cls = names["CNN1d" if model_name == "CNN1d" else "CNN"]
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
                record.append(names["predict_sentiment_fasttext"](model, sentence + [5, 11]))
            else:
                record.append(names["predict_sentiment"](model, sentence, 1))
        record.append(sorted(names["generate_bigrams"](["this", "film", "is"])))
        record.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def nn_of(lib):
    return lib.nn
