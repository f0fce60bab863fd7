"""The word language model of the official PyTorch examples (``word_language_model``:
``model.py``'s ``RNNModel``, ``PositionalEncoding`` and ``TransformerModel``, ``main.py``'s
``batchify``, ``get_batch``, ``repackage_hidden`` and training step), written once against a
library namespace: :func:`build` takes ``torch``, ``nn`` and ``F`` and returns the classes, so
the same text runs on PyTorch (``build(torch, torch.nn, torch.nn.functional)``) and on
retrograd (``build(rg, rg.nn, rg.nn.functional)``): a port that changes only imports.

Written here from the example's calls (the examples are BSD-licensed): every PyTorch call of
the two files is kept as it is; comments and docstrings are ours. The one allowed change is
the gradient lines of the training step: ``main.py`` runs ``loss.backward()``,
``clip_grad_norm_(model.parameters(), clip)`` and ``p.data.add_(p.grad, alpha=-lr)``; a
retrograd step takes the gradients as the value ``backward()`` returns
(:func:`retrograd_gradient_step`).
"""

from __future__ import annotations

import math


def build(torch, nn, F):  # noqa: N803  (the libraries' own names)
    """``(RNNModel, PositionalEncoding, TransformerModel)`` of ``model.py`` in ``torch``'s
    namespace."""

    class RNNModel(nn.Module):
        """An embedding, a recurrent stack (LSTM, GRU, RNN_TANH or RNN_RELU) and a decoder to
        the vocabulary, optionally tied to the embedding."""

        def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            if rnn_type in ["LSTM", "GRU"]:
                self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
            else:
                try:
                    nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
                except KeyError as e:
                    raise ValueError(f"unknown rnn_type {rnn_type!r}") from e
                self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            if tie_weights:
                if nhid != ninp:
                    raise ValueError("When using the tied flag, nhid must be equal to emsize")
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

        def forward(self, input, hidden):  # noqa: A002
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output)
            decoded = decoded.view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if self.rnn_type == "LSTM":
                return (
                    weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid),
                )
            return weight.new_zeros(self.nlayers, bsz, self.nhid)

    class PositionalEncoding(nn.Module):
        """Adds sines and cosines of the position (``d_model`` frequencies), then dropout."""

        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            pe = torch.zeros(max_len, d_model)
            position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(
                torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
            )
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            pe = pe.unsqueeze(0).transpose(0, 1)
            self.register_buffer("pe", pe)

        def forward(self, x):
            x = x + self.pe[: x.size(0), :]
            return self.dropout(x)

    class TransformerModel(nn.Transformer):
        """``nn.Transformer``'s encoder over embedded, position-encoded tokens, a causal mask,
        and a decoder to the vocabulary (the transformer's own decoder stack is replaced)."""

        def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
            super().__init__(
                d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers
            )
            self.model_type = "Transformer"
            self.src_mask = None
            self.pos_encoder = PositionalEncoding(ninp, dropout)
            self.input_emb = nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = nn.Linear(ninp, ntoken)
            self.init_weights()

        def _generate_square_subsequent_mask(self, sz):
            mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
            return (
                mask.float()
                .masked_fill(mask == 0, float("-inf"))
                .masked_fill(mask == 1, float(0.0))  # noqa: UP018  (the example's text)
            )

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

    return RNNModel, PositionalEncoding, TransformerModel


# -- main.py ---------------------------------------------------------------------------------------
def batchify(data, bsz):
    """The token stream as ``bsz`` columns (the remainder cut off)."""
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h, tensor_type):
    """The hidden state cut from the graph that made it."""
    if isinstance(h, tensor_type):
        return h.detach()
    return tuple(repackage_hidden(v, tensor_type) for v in h)


def train(torch, model, criterion, train_data, ntokens, args, gradient_step, batches):
    """``main.py``'s ``train()`` for ``batches`` batches: the losses. ``gradient_step(loss)``
    is the library's gradient lines (backward, clipping, SGD)."""
    model.train()
    losses = []
    if args.model != "Transformer":
        hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        if batch == batches:
            break
        data, targets = get_batch(train_data, i, args.bptt)
        model.zero_grad()
        if args.model == "Transformer":
            output = model(data)
            output = output.view(-1, ntokens)
        else:
            hidden = repackage_hidden(hidden, torch.Tensor)
            output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        gradient_step(loss)
        losses.append(loss.item())
    return losses


def torch_gradient_step(torch, model, args, lr):
    """``main.py``'s gradient lines."""

    def step(loss):
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)

    return step


def retrograd_gradient_step(rg, model, args, lr):
    """The same lines with the gradients as a value: ``clip_grad_norm_`` on it, and each
    parameter given ``p - lr * grad`` (``set_parameter``, the update outside the graph)."""

    def step(loss):
        grads = loss.backward()
        rg.nn.utils.clip_grad_norm_(grads, model.parameters(), args.clip)
        for name, p in list(model.named_parameters()):
            model.set_parameter(name, p - lr * p.grad(grads))

    return step
