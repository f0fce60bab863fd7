"""Real ports, round 75 (the harness: ``tests/real_ports.py``): extractive question answering,
a program written here in the style of the PyTorch reimplementations of BiDAF (Seo et al.:
word and character-CNN embeddings through a highway network, a contextual bidirectional RNN
over packed sequences, the attention flow layer's context-to-query and query-to-context
attention, a modeling and an output RNN, start and end logits over the context), trained
with Adadelta and an exponential moving average of the weights, decoded into answer spans as
SQuAD scripts decode them and scored by exact match and token F1; two configurations
(``lstm``, ``gru``), each run under torch and, ported, under retrograd from the same weights
and draws, every record compared.

It reaches:

- the data: padded contexts and questions from ``torch.randint``, padding set by a boolean
  index ``context[torch.arange(c_max).unsqueeze(0) >= c_len.unsqueeze(1)] = PAD`` and by
  ``masked_fill_`` in place, ``torch.minimum`` of answer starts, an integer-pair assignment
  ``context[torch.arange(batch), start] = question[:, 0]``, an unanswerable example labelled
  ``-100``; characters spelled from word ids by broadcasting against ``torch.arange``, an
  ``[..., 3]`` ellipsis assignment from ``torch.where``;
- the embeddings: ``nn.Embedding(padding_idx=...)`` of words and characters, the character
  CNN (``view(-1, WORD_LEN, dim).transpose(1, 2)``, ``nn.Conv1d``, ``max(dim=2)[0]``), a
  two-layer highway network (``nn.ModuleList`` pairs, a sigmoid gate);
- the encoders: ``nn.LSTM``/``nn.GRU(batch_first=True, bidirectional=True)`` over
  ``pack_padded_sequence(..., enforce_sorted=False)`` and ``pad_packed_sequence(...,
  total_length=...)``, one contextual RNN shared by the context and the question;
- attention flow: the trilinear similarity from ``select(1, i)`` columns, ``expand`` and
  ``permute`` of two projections, ``masked_fill(~mask, -1e30)``, ``F.softmax`` and
  ``torch.bmm`` for context-to-query attention, ``torch.max(s, dim=2)[0]`` for query-to-context
  attention, ``squeeze(1).unsqueeze(1).expand(-1, c_len, -1)``, the four-way ``torch.cat``;
  start and end logits ``masked_fill`` with ``float("-inf")``;
- training: ``nn.CrossEntropyLoss`` over logits with ``-inf`` entries and an ignored target,
  ``Adadelta(lr=0.5, weight_decay=...)``, ``LambdaLR``, the weights' EMA updated under
  ``torch.no_grad()`` by ``mul_(mu).add_(...)`` on clones of ``param.data``, swapped in for
  evaluation by ``param.data.copy_`` and back afterwards;
- decoding under ``torch.no_grad()``: the outer sum of start and end log-probabilities
  (``[:, :, None] + [:, None, :]``), a ``torch.ones(L, L).triu().tril(k).bool()`` band mask,
  ``view(B, -1).max(dim=1)``, ``torch.div(..., rounding_mode="floor")`` and ``%`` back to
  positions; DrQA's unbounded decoder by ``torch.cummax`` values and indices and ``gather``;
  ``F.cross_entropy(ignore_index=-100, reduction="sum")``; exact match and F1 from
  ``.tolist()`` slices; a ``copy.deepcopy`` of the EMA ``state_dict``, a checkpoint of
  ``{"ema", "model", "optimizer"}`` through ``torch.save``/``torch.load``, Adadelta's
  ``square_avg`` state and a restored model's span distributions recorded.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
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

QA_SOURCE = """import copy
import io
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

PAD, UNK = 0, 1
VOCAB, CHARS, WORD_LEN = 24, 12, 4


def chars_of(word_ids):
    # each word spelled by a few characters (a deterministic stand-in for a char vocabulary);
    # padding words spell nothing
    base = word_ids.unsqueeze(-1) * 3 + torch.arange(WORD_LEN)
    chars = base % (CHARS - 1) + 1
    chars[..., 3] = torch.where(word_ids % 2 == 0, torch.zeros_like(word_ids), chars[..., 3])
    return chars.masked_fill(word_ids.unsqueeze(-1) == PAD, 0)


def make_batch(batch, c_max=10, q_max=4):
    c_len = torch.randint(6, c_max + 1, (batch,))
    q_len = torch.randint(2, q_max + 1, (batch,))
    context = torch.randint(2, VOCAB, (batch, c_max))
    question = torch.randint(2, VOCAB, (batch, q_max))
    context[torch.arange(c_max).unsqueeze(0) >= c_len.unsqueeze(1)] = PAD
    question.masked_fill_(torch.arange(q_max)[None, :] >= q_len[:, None], PAD)
    start = torch.randint(0, 4, (batch,))
    start = torch.minimum(start, c_len - 2)
    end = start + torch.randint(0, 2, (batch,))
    # the answer's first word is the question's first word: something to learn
    context[torch.arange(batch), start] = question[:, 0]
    start[-1] = -100  # an unanswerable example, ignored by the loss
    end[-1] = -100
    return context, question, c_len, start, end


class Highway(nn.Module):
    def __init__(self, size, layers=2):
        super().__init__()
        self.linear = nn.ModuleList([nn.Linear(size, size) for _ in range(layers)])
        self.gate = nn.ModuleList([nn.Linear(size, size) for _ in range(layers)])

    def forward(self, x):
        for linear, gate in zip(self.linear, self.gate):
            g = torch.sigmoid(gate(x))
            x = g * F.relu(linear(x)) + (1 - g) * x
        return x


class BiDAF(nn.Module):
    def __init__(self, rnn="lstm", word_dim=8, char_dim=4, char_channels=6, hidden=6):
        super().__init__()
        self.word_emb = nn.Embedding(VOCAB, word_dim, padding_idx=PAD)
        self.char_emb = nn.Embedding(CHARS, char_dim, padding_idx=0)
        self.char_conv = nn.Conv1d(char_dim, char_channels, kernel_size=2)
        self.highway = Highway(word_dim + char_channels)
        cell = nn.LSTM if rnn == "lstm" else nn.GRU
        self.context_rnn = cell(word_dim + char_channels, hidden, batch_first=True,
                                bidirectional=True)
        self.att_weight_c = nn.Linear(2 * hidden, 1)
        self.att_weight_q = nn.Linear(2 * hidden, 1)
        self.att_weight_cq = nn.Linear(2 * hidden, 1)
        self.modeling_rnn = cell(8 * hidden, hidden, batch_first=True, bidirectional=True)
        self.output_rnn = cell(2 * hidden, hidden, batch_first=True, bidirectional=True)
        self.p1_weight_g = nn.Linear(8 * hidden, 1)
        self.p1_weight_m = nn.Linear(2 * hidden, 1)
        self.p2_weight_g = nn.Linear(8 * hidden, 1)
        self.p2_weight_m = nn.Linear(2 * hidden, 1)
        self.dropout = nn.Dropout(p=0.0)

    def char_emb_layer(self, words):
        batch, seq_len = words.shape
        x = self.char_emb(chars_of(words))  # (batch, seq_len, word_len, char_dim)
        x = x.view(-1, WORD_LEN, x.size(-1)).transpose(1, 2)
        x = self.char_conv(x).max(dim=2)[0]
        return x.view(batch, seq_len, -1)

    def encode(self, rnn, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        return out

    def att_flow(self, c, q, c_mask, q_mask):
        c_len, q_len = c.size(1), q.size(1)
        cq = []
        for i in range(q_len):
            qi = q.select(1, i).unsqueeze(1)
            cq.append(self.att_weight_cq(c * qi).squeeze(-1))
        cq = torch.stack(cq, dim=-1)
        s = (self.att_weight_c(c).expand(-1, -1, q_len)
             + self.att_weight_q(q).permute(0, 2, 1).expand(-1, c_len, -1) + cq)
        s = s.masked_fill(~q_mask.unsqueeze(1), -1e30)
        a = F.softmax(s, dim=2)
        c2q_att = torch.bmm(a, q)
        b_logits = torch.max(s, dim=2)[0].masked_fill(~c_mask, -1e30)
        b = F.softmax(b_logits, dim=1).unsqueeze(1)
        q2c_att = torch.bmm(b, c).squeeze(1).unsqueeze(1).expand(-1, c_len, -1)
        return torch.cat([c, c2q_att, c * c2q_att, c * q2c_att], dim=-1), a

    def forward(self, context, question, c_len):
        c_mask, q_mask = context != PAD, question != PAD
        q_len = q_mask.sum(dim=1)
        c = self.highway(torch.cat([self.word_emb(context), self.char_emb_layer(context)], -1))
        q = self.highway(torch.cat([self.word_emb(question), self.char_emb_layer(question)], -1))
        c = self.encode(self.context_rnn, c, c_len)
        q = self.encode(self.context_rnn, q, q_len)
        g, attention = self.att_flow(c, q, c_mask, q_mask)
        m = self.encode(self.modeling_rnn, self.dropout(g), c_len)
        p1 = (self.p1_weight_g(g) + self.p1_weight_m(m)).squeeze(-1)
        m2 = self.encode(self.output_rnn, m, c_len)
        p2 = (self.p2_weight_g(g) + self.p2_weight_m(m2)).squeeze(-1)
        p1 = p1.masked_fill(~c_mask, float("-inf"))
        p2 = p2.masked_fill(~c_mask, float("-inf"))
        return p1, p2, attention


def best_span(p1, p2, max_len=3):
    log_p = F.log_softmax(p1, dim=1)[:, :, None] + F.log_softmax(p2, dim=1)[:, None, :]
    c_len = p1.size(1)
    allowed = torch.ones(c_len, c_len).triu().tril(max_len - 1).bool()
    log_p = log_p.masked_fill(~allowed, float("-inf"))
    score, flat = log_p.view(p1.size(0), -1).max(dim=1)
    s_idx = torch.div(flat, c_len, rounding_mode="floor")
    e_idx = flat % c_len
    return s_idx, e_idx, score


def best_span_unbounded(p1, p2):
    # DrQA's decoder without a length limit: the best start up to each end by a running max
    log_p1, log_p2 = F.log_softmax(p1, dim=1), F.log_softmax(p2, dim=1)
    best_start, start_at = torch.cummax(log_p1, dim=1)
    score, e_idx = (best_start + log_p2).max(dim=1)
    s_idx = start_at.gather(1, e_idx.unsqueeze(1)).squeeze(1)
    return s_idx, e_idx, score


def f1_score(prediction, truth):
    common = Counter(prediction) & Counter(truth)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction), same / len(truth)
    return 2 * precision * recall / (precision + recall)


class EMA:
    def __init__(self, mu):
        self.mu, self.shadow = mu, {}

    def register(self, name, val):
        self.shadow[name] = val.clone()

    def update(self, name, x):
        assert name in self.shadow
        self.shadow[name].mul_(self.mu).add_((1.0 - self.mu) * x)


context, question, c_len, start, end = make_batch(6)
val = make_batch(4)

model = BiDAF(rnn=RNN)
initialize(model)
ema = EMA(0.9)
for name, param in model.named_parameters():
    if param.requires_grad:
        ema.register(name, param.data)
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0 / (1.0 + 0.2 * epoch))
criterion = nn.CrossEntropyLoss()

for step in range(4):
    model.train()
    p1, p2, _ = model(context, question, c_len)
    loss = criterion(p1, start) + criterion(p2, end)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.requires_grad:
                ema.update(name, param.data)
    record.append([loss.item(), scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("step {} loss {:.4f}".format(step, loss.item()))

backup_params = EMA(0)
for name, param in model.named_parameters():
    if param.requires_grad:
        backup_params.register(name, param.data)
        param.data.copy_(ema.shadow[name])

model.eval()
with torch.no_grad():
    v_context, v_question, v_len, v_start, v_end = val
    p1, p2, attention = model(v_context, v_question, v_len)
    record.append(attention.numpy().copy())
    val_loss = F.cross_entropy(p1, v_start, ignore_index=-100, reduction="sum")
    s_idx, e_idx, score = best_span(p1, p2)
    record.append([val_loss.item()] + score.tolist())
    record.append([s_idx.tolist(), e_idx.tolist()])
    u_start, u_end, u_score = best_span_unbounded(p1, p2)
    record.append([u_start.tolist(), u_end.tolist()])
    record.append(u_score.numpy().copy())
    exact, f1 = 0.0, 0.0
    for i in range(v_context.size(0) - 1):
        predicted = v_context[i, s_idx[i]:e_idx[i] + 1].tolist()
        truth = v_context[i, v_start[i]:v_end[i] + 1].tolist()
        exact += float(predicted == truth)
        f1 += f1_score([str(w) for w in predicted], [str(w) for w in truth])
    record.append([exact, f1])

state = copy.deepcopy(model.state_dict())
for name, param in model.named_parameters():
    if param.requires_grad:
        param.data.copy_(backup_params.shadow[name])

buffer = io.BytesIO()
torch.save({"ema": state, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
           buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = BiDAF(rnn=RNN)
restored.load_state_dict(checkpoint["ema"])
restored.eval()
with torch.no_grad():
    r1, r2, _ = restored(v_context, v_question, v_len)
    record.append(torch.stack([F.softmax(r1, -1), F.softmax(r2, -1)], dim=1).numpy().copy())
    record.append(checkpoint["optimizer"]["state"][0]["square_avg"].numpy().copy())
"""

QA_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n"
        "from retrograd.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("rnn", ["lstm", "gru"])
def test_bidaf_question_answering_as_torch(capsys, rnn):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        QA_SOURCE,
        QA_STEPS,
        capsys,
        7503,
        initialize=initializer(),
        params_of=params_of,
        RNN=rnn,
    )
    assert len(theirs) == 2 * 4 + 8
    assert theirs[6][0] < theirs[0][0]  # training lowered the loss
    assert their_log == our_log and their_log.count("\n") == 4
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
