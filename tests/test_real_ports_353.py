# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the BiGRU-CRF tagger of threelittlemonkeys/lstm-crf-pytorch as written (``crf.py``,
``rnn_crf.py``, ``rnn_encoder.py``, ``embedding.py``'s ``embed`` with its ``lookup`` and ``cnn``
embedders, ``utils.py``'s tensor aliases and ``log_sum_exp``; ``parameters.py`` with small sizes),
trained a few batches the way ``train.py`` trains it and decoded by Viterbi, against torch's run of
the same code from the same weights and batches.

What it exercises: the legacy constructors ``torch.FloatTensor(n).fill_(0.)`` and an empty
``torch.LongTensor()`` grown by ``torch.cat((bptr, _bptr.unsqueeze(1)), 1)`` (a 1-d empty tensor
joined to 2-d ones, which torch skips), the CRF score's per-example ``_h[y0]`` and
``trans[x]`` with ``x`` a tuple of two 0-d index tensors, ``y0.gather(0, mask.sum(0).long()
.unsqueeze(0))`` and ``self.trans[EOS_IDX, last_tag]``, the forward algorithm's masked
``log_sum_exp`` (``torch.max(x, -1)[0]``), ``self.trans.data[...] = -10000`` on a
``Parameter``, ``self.zero_grad()`` inside ``forward``, ``getattr(nn, "GRU")`` two layers
bidirectional over ``pack_padded_sequence(x, lens, enforce_sorted = False)`` with ``lens`` an
int32 tensor and the initial state, ``pad_packed_sequence``, the in-place ``h *=
mask.unsqueeze(2)``, the char CNN (``nn.Conv2d`` over ``(i, dim)`` kernels, ``F.max_pool1d(k,
k.size(2))``) concatenated with the word lookup by ``type(h) == torch.Tensor``; Viterbi with
``_score.max(2)``, ``_score += _h``, and back-tracking in Python with 0-d tensors as list indices
and ``mask[:, b].sum().int()`` as a slice bound.

Two lines differ from the repository: ``utils.py``'s ``randn = lambda *x: torch.randn(*x).cuda()
if CUDA else torch.randn`` (and ``zeros`` alike), which without CUDA return the function rather
than a tensor (the conditional binds inside the lambda), call it: ``... else torch.randn(*x)``.
The data loader and the vocabulary files are a seeded batch built as ``dataloader.to_tensor``
builds them (``LongTensor(bw)`` then ``transpose_(0, 1)``, characters framed by SOS/EOS);
``embedding.py``'s unused ``rnn`` and ``sae`` embedders and the checkpoint and evaluation code
are left out. ``initialize(...)`` gives the port torch's initial weights. The lines changed: the
``import`` lines and the gradient lines (``grads = loss.backward()``, ``optim.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

CRF_TAGGER_SOURCE = """
# -- parameters.py (small sizes) -----------------------------------------------------------------
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

UNIT = "word" # unit of tokenization (char, char+space, word, sent)
TASK = None # task (None, word-classification, word-segmentation, sentence-segmentation)
RNN_TYPE = "GRU" # LSTM or GRU
NUM_DIRS = 2 # unidirectional: 1, bidirectional: 2
NUM_LAYERS = 2
BATCH_SIZE = 4
HRE = (UNIT == "sent") # hierarchical recurrent encoding
EMBED = {"cnn": 6, "lookup": 10} # embeddings (lookup, cnn, rnn, sae)
HIDDEN_SIZE = 12
DROPOUT = 0.0
LEARNING_RATE = 1e-2
EVAL_EVERY = 10
SAVE_EVERY = 10

PAD, PAD_IDX = "<PAD>", 0 # padding
SOS, SOS_IDX = "<SOS>", 1 # start of sequence
EOS, EOS_IDX = "<EOS>", 2 # end of sequence
UNK, UNK_IDX = "<UNK>", 3 # unknown token

CUDA = torch.cuda.is_available()
torch.manual_seed(0) # for reproducibility

# -- utils.py ------------------------------------------------------------------------------------
Tensor = torch.cuda.FloatTensor if CUDA else torch.FloatTensor
LongTensor = torch.cuda.LongTensor if CUDA else torch.LongTensor
randn = lambda *x: torch.randn(*x).cuda() if CUDA else torch.randn(*x)
zeros = lambda *x: torch.zeros(*x).cuda() if CUDA else torch.zeros(*x)

def log_sum_exp(x):

    m = torch.max(x, -1)[0]

    return m + (x - m.unsqueeze(-1)).exp().sum(-1).log()

# -- embedding.py --------------------------------------------------------------------------------
class embed(nn.Module):

    def __init__(self, ls, cti, wti, batch_first = False, hre = False):

        super().__init__()
        self.dim = sum(ls.values())
        self.batch_first = batch_first

        # architecture
        self.char_embed = None
        self.word_embed = None
        self.sent_embed = None

        for model, dim in ls.items():
            assert model in ("lookup", "cnn", "rnn", "sae")
            if model in ("cnn", "rnn"):
                self.char_embed = getattr(self, model)(len(cti), dim)
            if model in ("lookup", "sae"):
                self.word_embed = getattr(self, model)(len(wti), dim)

        if hre:
            self.sent_embed = self.rnn(self.dim, self.dim, hre = True)

        self = self.cuda() if CUDA else self

    def forward(self, b, xc, xw):

        hc, hw = None, None

        if self.char_embed:
            hc = self.char_embed(xc) # [Ls, B * Ld, Lw] -> [Ls, B * Ld, Hc]
        if self.word_embed:
            hw = self.word_embed(xw) # [Ls, B * Ld] -> [Ls, B * Ld, Hw]

        h = torch.cat([h for h in [hc, hw] if type(h) == torch.Tensor], 2)

        if self.sent_embed:
            if self.batch_first:
                h.transpose_(0, 1)
            h = self.sent_embed(h) # [Lw, B * Ld, H] -> [1, B * Ld, H]
            h = h.view(b, -1, h.size(2)) # [B, Ld, H]
            if not self.batch_first:
                h.transpose_(0, 1)

        return h

    class lookup(nn.Module):

        def __init__(self, vocab_size, embed_size):

            super().__init__()
            self.embed = nn.Embedding(vocab_size, embed_size, padding_idx = PAD_IDX)

        def forward(self, x):

            return self.embed(x) # [Ls, B * Ld, H]

    class cnn(nn.Module):

        def __init__(self, vocab_size, embed_size):

            super().__init__()
            dim = 50
            num_featmaps = 50 # feature maps generated by each kernel
            kernel_sizes = [3]

            # architecture
            self.embed = nn.Embedding(vocab_size, dim, padding_idx = PAD_IDX)
            self.conv = nn.ModuleList([nn.Conv2d(
                in_channels = 1, # Ci
                out_channels = num_featmaps, # Co
                kernel_size = (i, dim) # height, width
            ) for i in kernel_sizes]) # num_kernels (K)
            self.dropout = nn.Dropout(DROPOUT)
            self.fc = nn.Linear(len(kernel_sizes) * num_featmaps, embed_size)

        def forward(self, x):

            b = x.size(1) # B' = B * Ld
            x = x.reshape(-1, x.size(2)) # [B' * Ls, Lw]
            x = self.embed(x).unsqueeze(1) # [B' * Ls, Ci = 1, Lw, dim]
            h = [conv(x) for conv in self.conv] # [B' * Ls, Co, Lw, 1] * K
            h = [F.relu(k).squeeze(3) for k in h] # [B' * Ls, Co, Lw] * K
            h = [F.max_pool1d(k, k.size(2)).squeeze(2) for k in h] # [B' * Ls, Co] * K
            h = torch.cat(h, 1) # [B' * Ls, Co * K]
            h = self.dropout(h)
            h = self.fc(h) # fully connected layer [B' * Ls, H]
            h = h.view(-1, b, h.size(1)) # [Ls, B', H]

            return h

# -- rnn_encoder.py ------------------------------------------------------------------------------
class rnn_encoder(nn.Module):

    def __init__(self, cti, wti, num_tags):

        super().__init__()

        # architecture
        self.embed = embed(EMBED, cti, wti, hre = HRE)
        self.rnn = getattr(nn, RNN_TYPE)(
            input_size = self.embed.dim,
            hidden_size = HIDDEN_SIZE // NUM_DIRS,
            num_layers = NUM_LAYERS,
            bias = True,
            dropout = DROPOUT,
            bidirectional = (NUM_DIRS == 2)
        )
        self.out = nn.Linear(HIDDEN_SIZE, num_tags) # RNN output to tag

    def init_state(self, b): # initialize RNN states

        n = NUM_LAYERS * NUM_DIRS
        h = HIDDEN_SIZE // NUM_DIRS
        hs = zeros(n, b, h) # hidden state
        if RNN_TYPE == "GRU":
            return hs
        cs = zeros(n, b, h) # LSTM cell state
        return (hs, cs)

    def forward(self, xc, xw, mask):

        b = mask.size(1)
        s = self.init_state(b)
        lens = mask.sum(0).int().cpu()

        x = self.embed(b, xc, xw)
        x = nn.utils.rnn.pack_padded_sequence(x, lens, enforce_sorted = False)
        h, _ = self.rnn(x, s)
        h, _ = nn.utils.rnn.pad_packed_sequence(h)
        h = self.out(h)
        h *= mask.unsqueeze(2)

        return h

# -- crf.py --------------------------------------------------------------------------------------
class crf(nn.Module):

    def __init__(self, num_tags):

        super().__init__()
        self.num_tags = num_tags

        # transition scores from j to i
        self.trans = nn.Parameter(randn(num_tags, num_tags))
        self.trans.data[SOS_IDX, :] = -10000 # no transition to SOS
        self.trans.data[:, EOS_IDX] = -10000 # no transition from EOS except to PAD
        self.trans.data[:, PAD_IDX] = -10000 # no transition from PAD except to PAD
        self.trans.data[PAD_IDX, :] = -10000 # no transition to PAD except from EOS
        self.trans.data[PAD_IDX, EOS_IDX] = 0
        self.trans.data[PAD_IDX, PAD_IDX] = 0

    def score(self, h, y0, mask):

        S = Tensor(h.size(1)).fill_(0.)
        h = h.unsqueeze(3) # [L, B, C, 1]
        trans = self.trans.unsqueeze(2) # [C, C, 1]

        for t, (_h, _mask) in enumerate(zip(h, mask)):
            _emit = torch.cat([_h[y0] for _h, y0 in zip(_h, y0[t + 1])])
            _trans = torch.cat([trans[x] for x in zip(y0[t + 1], y0[t])])
            S += (_emit + _trans) * _mask

        last_tag = y0.gather(0, mask.sum(0).long().unsqueeze(0)).squeeze(0)
        S += self.trans[EOS_IDX, last_tag]

        return S

    def partition(self, h, mask):

        Z = Tensor(h.size(1), self.num_tags).fill_(-10000)
        Z[:, SOS_IDX] = 0.
        trans = self.trans.unsqueeze(0) # [1, C, C]

        for _h, _mask in zip(h, mask): # forward algorithm
            _mask = _mask.unsqueeze(1)
            _emit = _h.unsqueeze(2) # [B, C, 1]
            _Z = Z.unsqueeze(1) + _emit + trans # [B, 1, C] -> [B, C, C]
            _Z = log_sum_exp(_Z) # [B, C, C] -> [B, C]
            Z = _Z * _mask + Z * (1 - _mask)

        Z = log_sum_exp(Z + self.trans[EOS_IDX])

        return Z # partition function

    def forward(self, h, y0, mask): # for training

        S = self.score(h, y0, mask)
        Z = self.partition(h, mask)
        loss = torch.mean(Z - S) # NLL loss

        return loss

    def decode(self, h, mask): # Viterbi decoding

        bptr = LongTensor()
        score = Tensor(h.size(1), self.num_tags).fill_(-10000)
        score[:, SOS_IDX] = 0.
        for _h, _mask in zip(h, mask):
            _mask = _mask.unsqueeze(1)
            _score = score.unsqueeze(1) + self.trans # [B, 1, C] -> [B, C, C]
            _score, _bptr = _score.max(2) # best previous scores and tags
            _score += _h # add emission scores
            bptr = torch.cat((bptr, _bptr.unsqueeze(1)), 1)
            score = _score * _mask + score * (1 - _mask)
        score += self.trans[EOS_IDX]
        best_score, best_tag = torch.max(score, 1)

        # back-tracking
        bptr = bptr.tolist()
        best_path = [[i] for i in best_tag.tolist()]
        for b in range(h.size(1)):
            i = best_tag[b]
            j = mask[:, b].sum().int()
            for _bptr in reversed(bptr[b][:j]):
                i = _bptr[i]
                best_path[b].append(i)
            best_path[b].pop()
            best_path[b].reverse()

        return best_path

# -- rnn_crf.py ----------------------------------------------------------------------------------
class rnn_crf(nn.Module):

    def __init__(self, cti, wti, num_tags):

        super().__init__()
        self.rnn = rnn_encoder(cti, wti, num_tags)
        self.crf = crf(num_tags)
        if CUDA: self = self.cuda()

    def forward(self, xc, xw, y0): # for training

        self.zero_grad()
        mask = y0[1:].gt(PAD_IDX).float()

        h = self.rnn(xc, xw, mask)
        loss = self.crf(h, y0, mask)

        return loss

    def decode(self, xc, xw, lens): # for inference

        if HRE:
            mask = [[i > j for j in range(lens[0])] for i in lens]
            mask = Tensor(mask).transpose(0, 1)
        else:
            mask = xw.gt(PAD_IDX).float()

        h = self.rnn(xc, xw, mask)
        y = self.crf.decode(h, mask)

        return y

# -- dataloader.to_tensor's layout, then train.py's loop -------------------------------------------
def to_tensor(bc, bw, sos = False):
    p, s, e = [PAD_IDX], [SOS_IDX], [EOS_IDX]
    sl = max(map(len, bw)) # sentence length (Ls)
    bw = [s * sos + x + p * (sl - len(x)) for x in bw]
    bw = LongTensor(bw) # [B * Ld, Ls]
    bw.transpose_(0, 1)
    if bc:
        wl = max(max(map(len, x)) for x in bc) # word length (Lw)
        bc = [[s + x + e + p * (wl - len(x)) for x in x] for x in bc]
        bc = [x + [p * (wl + 2)] * (sl - len(x)) for x in bc]
        bc = LongTensor(bc) # [B * Ld, Ls, Lw]
        bc.transpose_(0, 1)
    return bc, bw

batch = []
for sentences in data:
    xc, xw = to_tensor([s[0] for s in sentences], [s[1] for s in sentences])
    _, y0 = to_tensor(None, [s[2] for s in sentences], sos = True)
    batch.append((xc, xw, y0))

model = rnn_crf(cti, wti, num_tags)
initialize(model)
optim = torch.optim.Adam(model.parameters(), lr = LEARNING_RATE)

for ei in range(1, 3):
    loss_sum = 0
    for xc, xw, y0 in batch:

        loss = model(xc, xw, y0) # forward pass and compute loss
        loss.backward() # compute gradients
        optim.step() # update parameters
        loss_sum += loss.item()
        record.append(loss.item())
    loss_sum /= len(batch)
    print("epoch = %d, loss = %f" % (ei, loss_sum))

record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
model.eval()
with torch.no_grad():
    for xc, xw, y0 in batch:
        lens = xw.gt(PAD_IDX).sum(0).tolist()
        record.append([[int(tag) for tag in path] for path in model.decode(xc, xw, lens)])
"""

CRF_TAGGER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward() # compute gradients\n        optim.step() # update parameters\n",
        "        grads = loss.backward() # compute gradients\n        optim.step(grads) # update parameters\n",
    ),
]


def tagged_batches(rng: np.random.Generator, count: int, batch_size: int = 4):
    """Sentences of (character ids per word, word ids, tag ids): tags 4.. follow the word ids
    (a word's tag is a function of it) so that the tagger has something to learn."""
    batches = []
    for _ in range(count):
        sentences = []
        for _ in range(batch_size):
            length = int(rng.integers(2, 6))
            words = rng.integers(4, 12, length).tolist()
            chars = [rng.integers(4, 9, int(rng.integers(1, 4))).tolist() for _ in words]
            tags = [4 + word % 3 for word in words]
            sentences.append((chars, words, tags))
        batches.append(sentences)
    return batches


def test_lstm_crf_pytorch_tagger_trains_and_viterbi_decodes_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    data = tagged_batches(np.random.default_rng(353), 3)
    cti, wti = list(range(9)), list(range(12))
    for lib in (torch, rg):
        record = []
        text = CRF_TAGGER_SOURCE if lib is torch else port(CRF_TAGGER_SOURCE, CRF_TAGGER_STEPS)
        run_source(
            text, lib, record=record, initialize=initialize, data=data, cti=cti, wti=wti, num_tags=7
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(logs[0].splitlines()) == 2
    assert theirs[0] > theirs[5]  # it learns
    # the reverse direction's first recurrent row has a weight whose first gradient is rounding
    # noise (3e-9 against a largest of 1.3e-2), which Adam's first step divides by its own size
    assert_records_agree(
        ours, theirs, rtol=1e-4, atol=1e-5, noise={"rnn.rnn.weight_hh_l0_reverse": slice(0, 1)}
    )
    np.testing.assert_allclose(
        [float(line.split("loss = ")[1]) for line in logs[1].splitlines()],
        [float(line.split("loss = ")[1]) for line in logs[0].splitlines()],
        rtol=1e-5,
    )
