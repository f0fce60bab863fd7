"""Real ports, round 74 (the harness: ``tests/real_ports.py``): mixture-of-softmaxes language
models, a program written here in the style of the MoS reference code built on AWD-LSTM (Yang
et al. 2018, "Breaking the Softmax Bottleneck": a stack of LSTMs with locked and embedding
dropout, a head that mixes several softmaxes over the vocabulary by a learned prior, weights
tied between the embedding and the decoder, activation and temporal activation regularisers,
variable-length BPTT, SGD switched to averaged SGD), trained on a synthetic Markov-chain corpus,
run under torch and, ported, under retrograd from the same weights and draws, every record
compared.

It reaches:

- the data: a corpus drawn by ``np.random`` from a transition matrix, ``torch.LongTensor`` of a
  list, ``batchify`` by ``data.size(0) // bsz``, ``narrow(0, 0, nbatch * bsz)``,
  ``view(bsz, -1).t().contiguous()``; ``get_batch`` slicing ``source[i:i + seq_len]`` and the
  targets ``source[i + 1:i + 1 + seq_len].view(-1)``; a sequence length drawn by
  ``np.random.random()`` and ``max(5, int(np.random.normal(bptt, 2)))``, the learning rate
  scaled by ``seq_len / bptt`` through ``optimizer.param_groups[0]["lr"]`` and put back;
- the model: ``nn.Embedding`` with embedding dropout (a row mask by ``torch.rand(V, 1) < 1 -
  p``, ``expand_as(weight)``, ``/ (1 - p)``, ``F.embedding`` with ``padding_idx=-1`` when unset
  and ``max_norm=None``), ``LockedDropout`` (one mask of ``torch.rand(1, B, H)`` per sequence
  over time, ``requires_grad=False``), an ``nn.ModuleList`` of single-layer ``nn.LSTM`` of
  different sizes, hidden states of ``weight.new_zeros(1, bsz, nhid)`` pairs through
  ``next(self.parameters())``, ``repackage_hidden`` detaching nested tuples recursively; the
  MoS head ``nn.Sequential(nn.Linear(nhid, n_experts * ninp), nn.Tanh())`` and
  ``nn.Linear(nhid, n_experts, bias=False)`` prior, ``self.decoder.weight =
  self.encoder.weight`` tying, ``F.softmax(logit.view(-1, ntoken), -1).view(-1, n_experts,
  ntoken)``, the mixture ``(prob * prior.unsqueeze(2).expand_as(prob)).sum(1)``, ``torch.log
  (prob.add_(1e-8))`` in place, and the same log-probabilities by ``torch.logsumexp`` of
  ``F.log_softmax`` terms (a ``return_prob`` switch);
- the loss: ``nn.functional.nll_loss`` of ``log_prob.view(-1, ntoken)``, AR ``alpha *
  dropped_rnn_hs[-1].pow(2).mean()`` and TAR ``beta * (rnn_hs[-1][1:] - rnn_hs[-1][:-1])
  .pow(2).mean()`` over lists of per-layer outputs;
- training: ``optim.SGD(weight_decay=)`` and ``clip_grad_norm_``, switched to ``optim.ASGD(t0=0,
  lambd=0.)`` after a plateau check (``'t0' in optimizer.param_groups[0]``); evaluation under
  ``torch.no_grad()`` with ``model.eval()`` and the averaged weights swapped in through
  ``optimizer.state[prm]["ax"]`` and ``prm.data`` assignment (and restored after), a loss
  summed as ``len(data) * loss.item()``, ``math.exp`` perplexity; the checkpoint through
  ``torch.save([model, criterion, optimizer])``-style ``state_dict`` dicts to a buffer and
  ``load_state_dict`` into a fresh model, evaluated again.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
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

MOS_SOURCE = """import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def embedded_dropout(embed, words, dropout=0.1, scale=None):
    if dropout:
        mask = (torch.rand(embed.weight.size(0), 1) < 1 - dropout).to(embed.weight.dtype)
        mask = mask.expand_as(embed.weight) / (1 - dropout)
        masked_embed_weight = mask * embed.weight
    else:
        masked_embed_weight = embed.weight
    if scale:
        masked_embed_weight = scale.expand_as(masked_embed_weight) * masked_embed_weight
    padding_idx = embed.padding_idx
    if padding_idx is None:
        padding_idx = -1
    return F.embedding(words, masked_embed_weight, padding_idx, embed.max_norm,
                       embed.norm_type, embed.scale_grad_by_freq, embed.sparse)


class LockedDropout(nn.Module):
    def forward(self, x, dropout=0.5):
        if not self.training or not dropout:
            return x
        m = (torch.rand(1, x.size(1), x.size(2)) < 1 - dropout).to(x.dtype)
        mask = m.requires_grad_(False) / (1 - dropout)
        mask = mask.expand_as(x)
        return mask * x


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nhidlast, nlayers, dropout=0.5, dropouth=0.5,
                 dropouti=0.5, dropoute=0.1, dropoutl=0.5, n_experts=3):
        super().__init__()
        self.lockdrop = LockedDropout()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnns = [nn.LSTM(ninp if l == 0 else nhid, nhid if l != nlayers - 1 else nhidlast,
                             1) for l in range(nlayers)]
        self.rnns = torch.nn.ModuleList(self.rnns)
        self.prior = nn.Linear(nhidlast, n_experts, bias=False)
        self.latent = nn.Sequential(nn.Linear(nhidlast, n_experts * ninp), nn.Tanh())
        self.decoder = nn.Linear(ninp, ntoken)
        self.decoder.weight = self.encoder.weight
        self.ninp, self.nhid, self.nhidlast = ninp, nhid, nhidlast
        self.nlayers = nlayers
        self.dropout, self.dropouti, self.dropouth = dropout, dropouti, dropouth
        self.dropoute, self.dropoutl = dropoute, dropoutl
        self.n_experts = n_experts
        self.ntoken = ntoken

    def forward(self, input, hidden, return_h=False, return_prob=False):
        batch_size = input.size(1)
        emb = embedded_dropout(self.encoder, input,
                               dropout=self.dropoute if self.training else 0)
        emb = self.lockdrop(emb, self.dropouti)
        raw_output = emb
        new_hidden, raw_outputs, outputs = [], [], []
        for l, rnn in enumerate(self.rnns):
            raw_output, new_h = rnn(raw_output, hidden[l])
            new_hidden.append(new_h)
            raw_outputs.append(raw_output)
            if l != self.nlayers - 1:
                raw_output = self.lockdrop(raw_output, self.dropouth)
                outputs.append(raw_output)
        hidden = new_hidden
        output = self.lockdrop(raw_output, self.dropout)
        outputs.append(output)

        latent = self.latent(output)
        latent = self.lockdrop(latent, self.dropoutl)
        logit = self.decoder(latent.view(-1, self.ninp))
        prior_logit = self.prior(output).contiguous().view(-1, self.n_experts)
        if return_prob == "logsumexp":
            log_prob = F.log_softmax(logit.view(-1, self.ntoken), -1)
            log_prob = log_prob.view(-1, self.n_experts, self.ntoken)
            log_prior = F.log_softmax(prior_logit, -1).unsqueeze(2)
            model_output = torch.logsumexp(log_prob + log_prior, dim=1)
        else:
            prior = nn.functional.softmax(prior_logit, -1)
            prob = nn.functional.softmax(logit.view(-1, self.ntoken), -1)
            prob = prob.view(-1, self.n_experts, self.ntoken)
            prob = (prob * prior.unsqueeze(2).expand_as(prob)).sum(1)
            if return_prob:
                model_output = prob
            else:
                log_prob = torch.log(prob.add_(1e-8))
                model_output = log_prob
        model_output = model_output.view(-1, batch_size, self.ntoken)
        if return_h:
            return model_output, hidden, raw_outputs, outputs
        return model_output, hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return [(weight.new_zeros(1, bsz, self.nhid if l != self.nlayers - 1 else self.nhidlast),
                 weight.new_zeros(1, bsz, self.nhid if l != self.nlayers - 1 else self.nhidlast))
                for l in range(self.nlayers)]


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h) if isinstance(h, tuple) else [
        repackage_hidden(v) for v in h]


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data


def get_batch(source, i, seq_len):
    seq_len = min(seq_len, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].contiguous().view(-1)
    return data, target


def make_corpus(n_tokens, vocab):
    transition = np.random.dirichlet(np.full(vocab, 0.3), size=vocab)
    tokens, state = [], 0
    for _ in range(n_tokens):
        state = int(np.random.choice(vocab, p=transition[state]))
        tokens.append(state)
    return torch.LongTensor(tokens)


NTOKEN, BSZ, EVAL_BSZ, BPTT = 24, 4, 2, 6
ALPHA, BETA = 2.0, 1.0
train_data = batchify(make_corpus(200, NTOKEN), BSZ)
val_data = batchify(make_corpus(60, NTOKEN), EVAL_BSZ)
record.append([list(train_data.shape), train_data[:3].tolist()])

model = RNNModel(NTOKEN, 8, 10, 8, 2, dropout=0.3, dropouth=0.2, dropouti=0.2, dropoute=0.1,
                 dropoutl=0.2, n_experts=N_EXPERTS)
initialize(model)
record.append(model.decoder.weight is model.encoder.weight)
lr = 2.0
optimizer = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=1.2e-6)


def evaluate(data_source, batch_size, return_prob=False):
    model.eval()
    total_loss = 0
    hidden = model.init_hidden(batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, BPTT):
            data, targets = get_batch(data_source, i, BPTT)
            log_prob, hidden = model(data, hidden, return_prob=return_prob)
            loss = nn.functional.nll_loss(log_prob.view(-1, log_prob.size(2)), targets)
            total_loss += len(data) * loss.item()
            hidden = repackage_hidden(hidden)
    return total_loss / len(data_source)


def train(epoch):
    total_loss = 0
    hidden = model.init_hidden(BSZ)
    batch, i = 0, 0
    while i < train_data.size(0) - 1 - 1 and batch < 4:
        bptt = BPTT if np.random.random() < 0.95 else BPTT / 2.
        seq_len = max(5, int(np.random.normal(bptt, 2)))
        lr2 = optimizer.param_groups[0]["lr"]
        optimizer.param_groups[0]["lr"] = lr2 * seq_len / BPTT
        model.train()
        data, targets = get_batch(train_data, i, seq_len)
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        log_prob, hidden, rnn_hs, dropped_rnn_hs = model(data, hidden, return_h=True,
                                                         return_prob=RETURN_PROB)
        raw_loss = nn.functional.nll_loss(log_prob.view(-1, log_prob.size(2)), targets)
        loss = raw_loss
        loss = loss + sum(ALPHA * dropped_rnn_h.pow(2).mean()
                          for dropped_rnn_h in dropped_rnn_hs[-1:])
        loss = loss + sum(BETA * (rnn_h[1:] - rnn_h[:-1]).pow(2).mean()
                          for rnn_h in rnn_hs[-1:])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        optimizer.param_groups[0]["lr"] = lr2
        total_loss += raw_loss.item()
        record.append([raw_loss.item(), loss.item(), float(norm), seq_len])
        batch += 1
        i += seq_len
    record.append(params_of(model))
    return total_loss / batch


best_val_loss = []
for epoch in range(1, 4):
    train_loss = train(epoch)
    if "t0" in optimizer.param_groups[0]:
        tmp = {}
        for prm in model.parameters():
            tmp[prm] = prm.data.clone()
            prm.data = optimizer.state[prm]["ax"].clone()
        val_loss2 = evaluate(val_data, EVAL_BSZ)
        record.append([val_loss2, math.exp(val_loss2)])
        for prm in model.parameters():
            prm.data = tmp[prm].clone()
    else:
        val_loss = evaluate(val_data, EVAL_BSZ, return_prob=RETURN_PROB)
        record.append([val_loss, math.exp(val_loss)])
        if epoch == 2 or (len(best_val_loss) > 1 and val_loss > min(best_val_loss[:-1])):
            optimizer = torch.optim.ASGD(model.parameters(), lr=lr, t0=0, lambd=0.,
                                         weight_decay=1.2e-6)
        best_val_loss.append(val_loss)
    print("| end of epoch {:3d} | train loss {:5.2f} |".format(epoch, train_loss))

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
model = RNNModel(NTOKEN, 8, 10, 8, 2, dropout=0.3, dropouth=0.2, dropouti=0.2, dropoute=0.1,
                 dropoutl=0.2, n_experts=N_EXPERTS)
model.load_state_dict(checkpoint["model"])
record.append([evaluate(val_data, EVAL_BSZ), evaluate(val_data, EVAL_BSZ, "logsumexp"),
               len(checkpoint["optimizer"]["state"])])
model.eval()
with torch.no_grad():
    prob, _ = model(val_data[:4], model.init_hidden(EVAL_BSZ), return_prob=True)
    record.append(prob.numpy().copy())
    record.append(prob.sum(-1).numpy().copy())
"""

MOS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.25)\n"
        "        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(("n_experts", "return_prob"), [(3, False), (2, "logsumexp")])
def test_mixture_of_softmaxes_lm_as_torch(capsys, n_experts, return_prob):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        MOS_SOURCE,
        MOS_STEPS,
        capsys,
        7403,
        initialize=initializer(),
        params_of=params_of,
        N_EXPERTS=n_experts,
        RETURN_PROB=return_prob,
    )
    assert their_log == our_log and their_log.count("\n") == 3
    assert theirs[1] is True
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
