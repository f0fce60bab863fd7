"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- an E(n)-equivariant graph network written here in the style of vgsatorras/egnn, on four
  complete 4-node graphs, trained three Adam steps: segment sums and means by
  ``values.new_full(...)`` and ``scatter_add_`` of an expanded index, ``x[src] - x[dst]``,
  ``add_module("layer_%d" % i, ...)`` read back through ``self._modules``,
  ``xavier_uniform_(gain=0.001)``, one activation module shared by every layer,
  ``torch.LongTensor`` edge lists; plain and with attention gates, normalized coordinates and
  tanh; the equivariance under a rotation from ``torch.linalg.qr`` and a translation checked
  in both runs.
- a Tacotron 2-like text-to-spectrogram model written here in the style of NVIDIA/tacotron2
  (small hyper-parameters): ``nn.init.calculate_gain`` gains, the length mask by
  ``torch.arange(0, n, out=torch.LongTensor(n))``, location-sensitive attention
  (``energy.data.masked_fill_(mask, -inf)``, ``torch.bmm``), an always-on dropout prenet, a
  conv + ``BatchNorm1d`` postnet, the encoder through ``pack_padded_sequence`` of NumPy lengths,
  a bidirectional ``LSTM`` with ``flatten_parameters()`` and ``pad_packed_sequence``, teacher-
  forced ``LSTMCell`` steps with ``autograd.Variable(memory.data.new(B, n).zero_())`` states and
  ``weights_cum += weights``, inference until the gate fires, ``parse_batch``/``parse_output``,
  targets marked ``requires_grad = False``, a collate by ``torch.sort(..., descending=True)``
  with ``torch.LongTensor(len(batch), n)`` of a 0-d tensor and ``pairs[order[i]]``, and a loop
  with ``group['lr'] = ...`` and ``clip_grad_norm_``. Dropout rates are 0 (the masks are each
  library's own draws), and training runs with ``mask_padding=False``: with it,
  ``outputs[0].data.masked_fill_`` writes into the tensor the postnet's first convolution
  saved for its backward, and torch's weight gradient uses the masked values (a torch bug, see
  the CHANGELOG); the masked forward is compared after training.
- wav2vec 2.0-like pieces written here in the style of facebookresearch/fairseq: float32
  ``GroupNorm``/``LayerNorm`` subclasses by ``F.group_norm``/``F.layer_norm`` and
  ``type_as``, a transpose-last module, right trimming after an even kernel, a codebook
  quantizer (codes by ``x.new_zeros(*x.shape).scatter_(-1, k.view(-1, 1), 1.0)`` under
  ``torch.no_grad()``, code and probability perplexities, targets, the temperature schedule), a
  conv feature extractor in both modes (``kaiming_normal_``) and a grouped positional
  convolution under ``nn.utils.weight_norm(conv, name="weight", dim=2)``, joined into a small
  model trained by Adam on cosine logits, a diversity loss and a features penalty. The
  quantizer runs in eval mode (its Gumbel noise in training is each library's own draw).
- Performer-style linear attention written here in the style of lucidrains/performer-pytorch:
  positive random features, ReLU features, orthogonal random rows by ``torch.linalg.qr`` of
  ``torch.randn`` blocks, global and chunked causal linear attention (the ``ImportError``
  fallback, with its message), a ``@torch.no_grad()`` redraw by ``copy_`` into a buffer, a
  redraw counter buffer compared, ``zero_()``-ed and ``+= 1``-ed, ``v.masked_fill_(~mask, 0.)``
  on a view; softmax, causal, generalized and no-projection kernels in a small tagger trained
  by Adam with redraws every 2 steps; einops' ``repeat``/``rearrange`` on our tensors.
- DDPG written here in the style of sfujim/TD3, on a point pushed in the plane (no gym here):
  a NumPy replay buffer sampled into ``torch.FloatTensor``, ``copy.deepcopy`` targets, soft
  updates by ``tp.data.copy_(tau * p.data + (1 - tau) * tp.data)``, the policy's loss through
  the critic, ``.cpu().data.numpy().flatten()`` actions, NumPy exploration noise (one seeded
  stream in both runs), and ``torch.save``/``torch.load`` of the models' and optimizers' state
  dicts. Retrograd's optimizer ``state_dict`` holds NumPy copies (by design), read by
  ``np.array`` in the record line.

The lines changed: the gradient lines (``grads = loss.backward()``, ``clip_grad_norm_(grads,
...)``, ``optimizer.step(grads)``) and the ``import`` lines naming ``torch``.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

# -- EGNN -----------------------------------------------------------------------------------------
EGNN_SOURCE = """
from torch import nn
import torch


def segment_sum(values, segment, n_segments):
    out = values.new_full((n_segments, values.size(1)), 0)
    return out.scatter_add_(0, segment.unsqueeze(-1).expand(-1, values.size(1)), values)


def segment_mean(values, segment, n_segments):
    index = segment.unsqueeze(-1).expand(-1, values.size(1))
    total = values.new_full((n_segments, values.size(1)), 0).scatter_add_(0, index, values)
    ones = torch.ones_like(values)
    count = values.new_full((n_segments, values.size(1)), 0).scatter_add_(0, index, ones)
    return total / count.clamp(min=1)


class EquivariantLayer(nn.Module):
    # messages from invariant features (h_i, h_j, |x_i - x_j|^2, edge data); coordinates move
    # along x_i - x_j scaled by a learned scalar per edge, so rotations commute with the layer
    def __init__(self, width, edge_width, act, gate=False, unit=False, bounded=False):
        super().__init__()
        self.gate, self.unit, self.bounded = gate, unit, bounded
        n_in = 2 * width + 1 + edge_width
        self.message = nn.Sequential(nn.Linear(n_in, width), act, nn.Linear(width, width), act)
        self.update = nn.Sequential(nn.Linear(2 * width, width), act, nn.Linear(width, width))
        last = nn.Linear(width, 1, bias=False)
        torch.nn.init.xavier_uniform_(last.weight, gain=0.001)
        shift = [nn.Linear(width, width), act, last] + ([nn.Tanh()] if bounded else [])
        self.shift = nn.Sequential(*shift)
        if gate:
            self.attend = nn.Sequential(nn.Linear(width, 1), nn.Sigmoid())

    def forward(self, h, x, edges, edge_data):
        src, dst = edges
        diff = x[src] - x[dst]
        dist2 = (diff ** 2).sum(1, keepdim=True)
        if self.unit:
            diff = diff / (dist2.sqrt().detach() + 1.0)
        m = self.message(torch.cat([h[src], h[dst], dist2, edge_data], dim=1))
        if self.gate:
            m = m * self.attend(m)
        moved = diff * self.shift(m)
        x = x + segment_mean(moved, src, x.size(0))
        h = h + self.update(torch.cat([h, segment_sum(m, src, h.size(0))], dim=1))
        return h, x


class EquivariantNet(nn.Module):
    def __init__(self, n_in, width, n_out, edge_width, depth=3, act_fn=nn.SiLU(), attention=False,
                 normalize=False, tanh=False):
        super().__init__()
        self.depth = depth
        self.embed_in = nn.Linear(n_in, width)
        self.embed_out = nn.Linear(width, n_out)
        for i in range(depth):  # (one activation module shared by every layer)
            layer = EquivariantLayer(width, edge_width, act_fn, attention, normalize, tanh)
            self.add_module("layer_%d" % i, layer)

    def forward(self, h, x, edges, edge_data):
        h = self.embed_in(h)
        for i in range(self.depth):
            h, x = self._modules["layer_%d" % i](h, x, edges, edge_data)
        return self.embed_out(h), x


def complete_graphs(n, copies):
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    src = torch.LongTensor([i + n * c for c in range(copies) for i, _ in pairs])
    dst = torch.LongTensor([j + n * c for c in range(copies) for _, j in pairs])
    return [src, dst], torch.ones(len(pairs) * copies, 1)


graphs, nodes = 4, 4
h = torch.ones(graphs * nodes, 1)
x = torch.randn(graphs * nodes, 3)
edges, edge_data = complete_graphs(nodes, graphs)
net = EquivariantNet(n_in=1, width=16, n_out=1, edge_width=1, **options)
initialize(net)
h_out, x_out = net(h, x, edges, edge_data)
record.extend([h_out.detach().numpy().copy(), x_out.detach().numpy().copy()])
rotation, _ = torch.linalg.qr(torch.randn(3, 3))
shift = torch.randn(1, 3)
h_moved, x_moved = net(h, x @ rotation + shift, edges, edge_data)
record.append(float((h_moved - h_out).abs().max() < 1e-4))
record.append(float((x_moved - (x_out @ rotation + shift)).abs().max() < 1e-4))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
centers = x.view(graphs, nodes, 3).mean(1, keepdim=True).expand(-1, nodes, -1).reshape(-1, 3)
for step in range(3):
    opt.zero_grad()
    h_out, x_out = net(h, x, edges, edge_data)
    loss = ((x_out - centers) ** 2).mean() + 0.1 * h_out.pow(2).mean()
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append(params_of(net))
"""

EGNN_STEPS = [
    (
        "from torch import nn\nimport torch\n",
        "from retrograd import nn\nimport retrograd as torch\n",
    ),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


@pytest.mark.parametrize(
    "options",
    [{}, {"attention": True, "normalize": True, "tanh": True, "act_fn": "relu"}],
    ids=["plain", "attention-normalize-tanh"],
)
def test_egnn_trains_as_torch(capsys, options):
    def make_options(lib):
        return {k: (lib.nn.ReLU() if v == "relu" else v) for k, v in options.items()}

    records, _ = runs_with_draws(
        EGNN_SOURCE,
        EGNN_STEPS,
        capsys,
        seed=70,
        initialize=initializer(),
        params_of=params_of,
        make_options=make_options,
    )
    ours, theirs = records[1], records[0]
    assert theirs[2] == theirs[3] == 1.0  # equivariant, in torch's run and ours
    assert ours[2] == ours[3] == 1.0
    assert theirs[-2] < theirs[4]
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)


# -- Tacotron 2 -----------------------------------------------------------------------------------
TACOTRON_SOURCE = """
import torch
from torch import autograd, nn

F = nn.functional


class Dense(nn.Module):
    def __init__(self, n_in, n_out, bias=True, gain='linear'):
        super().__init__()
        self.layer = nn.Linear(n_in, n_out, bias=bias)
        nn.init.xavier_uniform_(self.layer.weight, gain=nn.init.calculate_gain(gain))

    def forward(self, x):
        return self.layer(x)


class Conv(nn.Module):
    def __init__(self, n_in, n_out, kernel=1, bias=True, gain='linear'):
        super().__init__()
        self.conv = nn.Conv1d(n_in, n_out, kernel, padding=(kernel - 1) // 2, bias=bias)
        nn.init.xavier_uniform_(self.conv.weight, gain=nn.init.calculate_gain(gain))

    def forward(self, x):
        return self.conv(x)


def length_mask(lengths):
    longest = int(torch.max(lengths).item())
    steps = torch.arange(0, longest, out=torch.LongTensor(longest))
    return (steps < lengths.unsqueeze(1)).bool()


class LocationAttention(nn.Module):
    # additive attention whose query also sees where it attended so far (a 1-D conv of the
    # previous and the cumulative weights)
    def __init__(self, query_dim, memory_dim, dim, n_filters, kernel):
        super().__init__()
        self.query = Dense(query_dim, dim, bias=False, gain='tanh')
        self.memory = Dense(memory_dim, dim, bias=False, gain='tanh')
        self.where = Conv(2, n_filters, kernel, bias=False)
        self.where_dense = Dense(n_filters, dim, bias=False, gain='tanh')
        self.v = Dense(dim, 1, bias=False)

    def forward(self, query, memory, keys, both_weights, mask):
        where = self.where_dense(self.where(both_weights).transpose(1, 2))
        energy = self.v(torch.tanh(self.query(query.unsqueeze(1)) + where + keys)).squeeze(-1)
        if mask is not None:
            energy.data.masked_fill_(mask, -float("inf"))
        weights = F.softmax(energy, dim=1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


class Prenet(nn.Module):
    def __init__(self, n_in, sizes):
        super().__init__()
        dims = [n_in] + sizes[:-1]
        self.layers = nn.ModuleList([Dense(a, b, bias=False) for a, b in zip(dims, sizes)])

    def forward(self, x):
        for layer in self.layers:
            x = F.dropout(F.relu(layer(x)), p=dropout_p, training=True)  # (on at inference too)
        return x


def conv_stack(dims, kernel, last_linear=False):
    blocks = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        gain = 'linear' if last_linear and i == len(dims) - 2 else 'tanh' if last_linear else 'relu'
        blocks.append(nn.Sequential(Conv(a, b, kernel, gain=gain), nn.BatchNorm1d(b)))
    return nn.ModuleList(blocks)


class Postnet(nn.Module):
    def __init__(self, hp):
        super().__init__()
        dims = [hp.n_mels] + [hp.post_dim] * (hp.post_convs - 1) + [hp.n_mels]
        self.convs = conv_stack(dims, hp.post_kernel, last_linear=True)

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = conv(x)
            last = i == len(self.convs) - 1
            x = F.dropout(x if last else torch.tanh(x), dropout_p, self.training)
        return x


class Encoder(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.convs = conv_stack([hp.embed_dim] * (hp.enc_convs + 1), hp.enc_kernel)
        half = hp.embed_dim // 2
        self.lstm = nn.LSTM(hp.embed_dim, half, 1, batch_first=True, bidirectional=True)

    def convolve(self, x):
        for conv in self.convs:
            x = F.dropout(F.relu(conv(x)), p=dropout_p, training=self.training)
        return x.transpose(1, 2)

    def forward(self, x, lengths):
        x = self.convolve(x)
        lengths = lengths.cpu().numpy()  # (packing takes host lengths)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        self.lstm.flatten_parameters()  # (a no-op off CUDA)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        return out

    def inference(self, x):
        out, _ = self.lstm(self.convolve(x))
        return out


class Decoder(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.hp = hp
        self.prenet = Prenet(hp.n_mels, [hp.prenet_dim, hp.prenet_dim])
        self.attention_rnn = nn.LSTMCell(hp.prenet_dim + hp.embed_dim, hp.rnn_dim)
        self.attention = LocationAttention(hp.rnn_dim, hp.embed_dim, hp.attn_dim, 4, 5)
        self.decoder_rnn = nn.LSTMCell(hp.rnn_dim + hp.embed_dim, hp.rnn_dim, 1)
        self.to_mel = Dense(hp.rnn_dim + hp.embed_dim, hp.n_mels)
        self.to_gate = Dense(hp.rnn_dim + hp.embed_dim, 1, bias=True, gain='sigmoid')

    def begin(self, memory, mask):
        b, t = memory.size(0), memory.size(1)
        zeros = lambda n: autograd.Variable(memory.data.new(b, n).zero_())
        self.att_h, self.att_c = zeros(self.hp.rnn_dim), zeros(self.hp.rnn_dim)
        self.dec_h, self.dec_c = zeros(self.hp.rnn_dim), zeros(self.hp.rnn_dim)
        self.weights, self.weights_cum = zeros(t), zeros(t)
        self.context = zeros(self.hp.embed_dim)
        self.memory, self.keys, self.mask = memory, self.attention.memory(memory), mask

    def step(self, frame):
        state = (self.att_h, self.att_c)
        self.att_h, self.att_c = self.attention_rnn(torch.cat((frame, self.context), -1), state)
        both = torch.cat((self.weights.unsqueeze(1), self.weights_cum.unsqueeze(1)), dim=1)
        looked = self.attention(self.att_h, self.memory, self.keys, both, self.mask)
        self.context, self.weights = looked
        self.weights_cum += self.weights
        state = (self.dec_h, self.dec_c)
        self.dec_h, self.dec_c = self.decoder_rnn(torch.cat((self.att_h, self.context), -1), state)
        out = torch.cat((self.dec_h, self.context), dim=1)
        return self.to_mel(out), self.to_gate(out), self.weights

    def forward(self, memory, targets, memory_lengths):
        go = autograd.Variable(memory.data.new(memory.size(0), self.hp.n_mels).zero_()).unsqueeze(0)
        frames = torch.cat((go, targets.permute(2, 0, 1)), dim=0)  # teacher forcing
        frames = self.prenet(frames)
        self.begin(memory, ~length_mask(memory_lengths))
        mels, gates, alignments = [], [], []
        while len(mels) < frames.size(0) - 1:
            mel, gate, weights = self.step(frames[len(mels)])
            mels += [mel.squeeze(1)]
            gates += [gate.squeeze(1)]
            alignments += [weights]
        return self.gather(mels, gates, alignments)

    def gather(self, mels, gates, alignments):
        mels = torch.stack(mels).transpose(0, 1).contiguous().transpose(1, 2)
        gates = torch.stack(gates).transpose(0, 1).contiguous()
        return mels, gates, torch.stack(alignments).transpose(0, 1)

    def inference(self, memory):
        frame = autograd.Variable(memory.data.new(memory.size(0), self.hp.n_mels).zero_())
        self.begin(memory, None)
        mels, gates, alignments = [], [], []
        while True:
            mel, gate, weights = self.step(self.prenet(frame))
            mels += [mel.squeeze(1)]
            gates += [gate]
            alignments += [weights]
            if torch.sigmoid(gate.data) > self.hp.gate_threshold or len(mels) == self.hp.max_steps:
                break
            frame = mel
        return self.gather(mels, gates, alignments)


class Speller(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.hp = hp
        self.mask_padding = hp.mask_padding
        self.embedding = nn.Embedding(hp.n_symbols, hp.embed_dim)
        self.embedding.weight.data.uniform_(-0.3, 0.3)
        self.encoder, self.decoder, self.postnet = Encoder(hp), Decoder(hp), Postnet(hp)

    def parse_batch(self, batch):
        text, text_lengths, mels, gates, mel_lengths = batch
        text, mels, gates = text.long(), mels.float(), gates.float()
        longest = torch.max(text_lengths.data).item()
        return (text, text_lengths, mels, longest, mel_lengths), (mels, gates)

    def parse_output(self, outputs, lengths=None):
        if self.mask_padding and lengths is not None:
            mask = ~length_mask(lengths)
            mask = mask.expand(self.hp.n_mels, mask.size(0), mask.size(1)).permute(1, 0, 2)
            for mel in outputs[:2]:
                mel.data.masked_fill_(mask, 0.0)
            outputs[2].data.masked_fill_(mask[:, 0, :], 1e3)  # a gate that surely fires
        return outputs

    def forward(self, inputs):
        text, text_lengths, mels, _, mel_lengths = inputs
        memory = self.encoder(self.embedding(text).transpose(1, 2), text_lengths)
        mel, gate, alignments = self.decoder(memory, mels, text_lengths)
        return self.parse_output([mel, mel + self.postnet(mel), gate, alignments], mel_lengths)

    def inference(self, text):
        memory = self.encoder.inference(self.embedding(text).transpose(1, 2))
        mel, gate, alignments = self.decoder.inference(memory)
        return self.parse_output([mel, mel + self.postnet(mel), gate, alignments])


class SpellerLoss(nn.Module):
    def forward(self, outputs, targets):
        mels, gates = targets
        mels.requires_grad = False  # (targets: no gradient wanted)
        gates.requires_grad = False
        mel, post, gate, _ = outputs
        mse = nn.MSELoss()
        bce = nn.BCEWithLogitsLoss()
        return mse(mel, mels) + mse(post, mels) + bce(gate.view(-1, 1), gates.view(-1, 1))


def collate(pairs):
    # longest text first (packing wants it), everything right-padded with zeros
    lengths = torch.LongTensor([len(p[0]) for p in pairs])
    text_lengths, order = torch.sort(lengths, dim=0, descending=True)
    text = torch.LongTensor(len(pairs), text_lengths[0])
    text.zero_()
    n_mels = pairs[0][1].size(0)
    frames = max(p[1].size(1) for p in pairs)
    mels = torch.FloatTensor(len(pairs), n_mels, frames)
    mels.zero_()
    gates = torch.FloatTensor(len(pairs), frames)
    gates.zero_()
    mel_lengths = torch.LongTensor(len(pairs))
    for i in range(len(order)):
        chars, mel = pairs[order[i]]
        text[i, :chars.size(0)] = chars
        mels[i, :, :mel.size(1)] = mel
        gates[i, mel.size(1) - 1:] = 1
        mel_lengths[i] = mel.size(1)
    return text, text_lengths, mels, gates, mel_lengths


class HParams:
    n_symbols, embed_dim, enc_convs, enc_kernel = 16, 12, 2, 3
    n_mels, prenet_dim, rnn_dim, attn_dim = 6, 8, 16, 8
    post_dim, post_convs, post_kernel = 8, 3, 3
    max_steps, gate_threshold = 5, 0.5
    mask_padding = False  # (masking: after training, see the test)
    lr, weight_decay, clip = 1e-3, 1e-6, 1.0


hp = HParams()
model = Speller(hp)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
criterion = SpellerLoss()
batch = collate([(torch.LongTensor(t), torch.FloatTensor(m)) for t, m in examples])
model.train()
for it in range(2):
    for group in optimizer.param_groups:
        group['lr'] = hp.lr
    model.zero_grad()
    inputs, targets = model.parse_batch(batch)
    outputs = model(inputs)
    loss = criterion(outputs, targets)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), hp.clip)
    optimizer.step()
    record.append(loss.item())
    record.append(float(norm))
    record.append(outputs[3].detach().numpy().copy())
record.append(params_of(model))  # (after training)
model.eval()
with torch.no_grad():
    model.mask_padding = True
    record.extend(t.numpy().copy() for t in model(inputs))
    _, mel_post, _, alignments = model.inference(batch[0][:1])
record.extend([mel_post.numpy().copy(), alignments.numpy().copy()])
"""

TACOTRON_STEPS = [
    (
        "import torch\nfrom torch import autograd, nn\n",
        "import retrograd as torch\nfrom torch import autograd, nn\n",
    ),
    (
        "    loss.backward()\n"
        "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), hp.clip)\n"
        "    optimizer.step()",
        "    grads = loss.backward()\n"
        "    norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), hp.clip)\n"
        "    optimizer.step(grads)",
    ),
]


def test_tacotron2_trains_as_torch(capsys):
    rng = np.random.default_rng(71)
    examples = [
        (rng.integers(1, 16, n).tolist(), rng.standard_normal((6, t)).astype(np.float32).tolist())
        for n, t in [(4, 3), (6, 5), (3, 4)]
    ]
    records, logs = runs_with_draws(
        TACOTRON_SOURCE,
        TACOTRON_STEPS,
        capsys,
        seed=71,
        initialize=initializer(),
        params_of=params_of,
        examples=examples,
        dropout_p=0.0,
    )
    ours, theirs = records[1], records[0]
    assert logs[0] == logs[1]
    # the biases of the convolutions before a BatchNorm have a true gradient of zero: Adam's
    # steps on them follow the rounding noise
    before_norm = [
        f"0.{part}.convs.{i}.0.conv.bias" for part in ("encoder", "postnet") for i in range(3)
    ]
    assert_records_agree(ours[:7], theirs[:7], rtol=2e-5, atol=2e-6, skip=before_norm)
    # in evaluation those biases (up to 2 steps of lr 1e-3 apart) are no longer taken out: the
    # running means have absorbed part of them, and what is left reaches the outputs
    assert_records_agree(ours[7:], theirs[7:], rtol=0, atol=3e-3)


# -- wav2vec 2.0 ----------------------------------------------------------------------------------
WAV2VEC_SOURCE = """
import math

import torch
import torch.nn as nn

F = nn.functional


class FloatGroupNorm(nn.GroupNorm):
    # normalizes in float32 whatever the input's dtype, then casts back
    def forward(self, x):
        w = self.weight.float() if self.weight is not None else None
        b = self.bias.float() if self.bias is not None else None
        return F.group_norm(x.float(), self.num_groups, w, b, self.eps).type_as(x)


class FloatLayerNorm(nn.LayerNorm):
    def forward(self, x):
        w = self.weight.float() if self.weight is not None else None
        b = self.bias.float() if self.bias is not None else None
        return F.layer_norm(x.float(), self.normalized_shape, w, b, self.eps).type_as(x)


class SwapLast(nn.Module):
    def forward(self, x):
        return x.transpose(-2, -1)


class TrimRight(nn.Module):
    # an even kernel with padding k // 2 makes one frame too many
    def __init__(self, kernel):
        super().__init__()
        self.extra = 1 if kernel % 2 == 0 else 0

    def forward(self, x):
        return x[:, :, : -self.extra] if self.extra else x


class CodebookQuantizer(nn.Module):
    # each frame picks one code per group; eval mode takes the argmax (training would take a
    # straight-through Gumbel sample)
    def __init__(self, dim, n_codes, groups, code_dim, temps):
        super().__init__()
        self.n_codes, self.groups = n_codes, groups
        self.codes = nn.Parameter(torch.FloatTensor(1, groups * n_codes, code_dim // groups))
        nn.init.uniform_(self.codes)
        self.logits = nn.Linear(dim, groups * n_codes)
        nn.init.normal_(self.logits.weight, mean=0, std=1)
        nn.init.zeros_(self.logits.bias)
        self.hot, self.cold, self.decay = temps
        self.temp = self.hot

    def set_num_updates(self, n):
        self.temp = max(self.hot * self.decay ** n, self.cold)

    def forward(self, x):
        b, t, d = x.shape
        scores = self.logits(x.reshape(-1, d)).view(b * t * self.groups, -1)
        out = {"n_codes": self.n_codes * self.groups, "temp": self.temp}
        with torch.no_grad():
            _, best = scores.max(-1)
            onehot = scores.new_zeros(*scores.shape).scatter_(-1, best.view(-1, 1), 1.0)
            onehot = onehot.view(b * t, self.groups, -1)
            used = torch.mean(onehot.float(), dim=0)
            entropy = -torch.sum(used * torch.log(used + 1e-7), dim=-1)
            out["code_perplexity"] = torch.exp(entropy).sum()
        soft = torch.softmax(scores.view(b * t, self.groups, -1).float(), dim=-1).mean(dim=0)
        out["prob_perplexity"] = torch.exp(-torch.sum(soft * torch.log(soft + 1e-7), dim=-1)).sum()
        picked = onehot if not self.training else F.gumbel_softmax(scores, tau=self.temp, hard=True)
        picked = picked.reshape(b * t, -1)
        chosen = picked.view(-1, self.n_codes).argmax(dim=-1)
        out["targets"] = chosen.view(b, t, self.groups).detach()
        mixed = picked.unsqueeze(-1) * self.codes
        mixed = mixed.view(b * t, self.groups, self.n_codes, -1).sum(-2)
        out["x"] = mixed.view(b, t, -1)
        return out


def feature_convs(spec, mode):
    layers, c_in = nn.ModuleList(), 1
    for i, (c_out, k, stride) in enumerate(spec):
        conv = nn.Conv1d(c_in, c_out, k, stride=stride, bias=False)
        nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
        if mode == "layer_norm":
            norm = [SwapLast(), FloatLayerNorm(c_out, elementwise_affine=True), SwapLast()]
        elif i == 0:
            norm = [FloatGroupNorm(c_out, c_out, affine=True)]
        else:
            norm = []
        layers.append(nn.Sequential(conv, nn.Dropout(p=0.0), *norm, nn.GELU()))
        c_in = c_out
    return layers


def positional_conv(width, k, groups):
    conv = nn.Conv1d(width, width, kernel_size=k, padding=k // 2, groups=groups)
    nn.init.normal_(conv.weight, mean=0, std=math.sqrt(4 / (k * width)))
    nn.init.constant_(conv.bias, 0)
    conv = nn.utils.weight_norm(conv, name="weight", dim=2)
    return nn.Sequential(conv, TrimRight(k), nn.GELU())


class TinyWav2Vec(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.convs = feature_convs([(12, 10, 5), (12, 3, 2), (12, 3, 2)], mode)
        self.norm = nn.LayerNorm(12)
        self.proj = nn.Linear(12, 16)
        self.pos = positional_conv(16, 4, 4)
        self.enc_norm = nn.LayerNorm(16)
        temps = (2, 0.5, 0.99)
        self.quantizer = CodebookQuantizer(12, n_codes=6, groups=2, code_dim=8, temps=temps)
        self.head = nn.Linear(16, 8)

    def forward(self, wav):
        feats = wav.unsqueeze(1)
        for block in self.convs:
            feats = block(feats)
        penalty = feats.float().pow(2).mean()
        feats = self.norm(feats.transpose(1, 2))
        x = self.proj(feats)
        x = self.enc_norm(x + self.pos(x.transpose(1, 2)).transpose(1, 2))
        q = self.quantizer(feats.clone())
        sim = torch.cosine_similarity(self.head(x).float(), q["x"].float(), dim=-1)
        return sim.type_as(x) / 0.1, penalty, q


model = TinyWav2Vec(mode)
initialize(model)
model.train()
model.quantizer.eval()  # (the Gumbel noise would be each library's own draw)
optimizer = torch.optim.Adam(
    model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01
)
for n in range(3):
    model.quantizer.set_num_updates(n)
    optimizer.zero_grad()
    sim, penalty, q = model(wav)
    diversity = (q["n_codes"] - q["prob_perplexity"]) / q["n_codes"]
    loss = -sim.mean() + 0.1 * diversity + 10 * penalty
    loss.backward()
    optimizer.step()
    perplexities = [q["code_perplexity"].item(), q["prob_perplexity"].item()]
    record.append([loss.item(), *perplexities, q["temp"]])
    record.append(q["targets"].numpy())
record.append(params_of(model))  # (after training)
record.append(sorted(model.state_dict().keys()))
"""

WAV2VEC_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize("mode", ["default", "layer_norm"])
def test_wav2vec2_pieces_train_as_torch(capsys, mode):
    wav = np.random.default_rng(72).standard_normal((2, 300)).astype(np.float32)
    records, _ = runs_with_draws(
        WAV2VEC_SOURCE,
        WAV2VEC_STEPS,
        capsys,
        seed=72,
        initialize=initializer(),
        params_of=params_of,
        mode=mode,
        make_wav=lambda lib: lib.tensor(wav),
    )
    ours, theirs = records[1], records[0]
    assert "pos.0.weight_g" in theirs[-1] and "pos.0.weight_v" in theirs[-1]
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)


# -- Performer ------------------------------------------------------------------------------------
PERFORMER_SOURCE = """
import math
import torch
from torch import nn
from einops import repeat, rearrange
from functools import partial

F = nn.functional


def random_features(data, *, proj, is_query, eps=1e-4):
    # positive random features of exp(q . k): exp(w . x - |x|^2 / 2), stabilised by a max
    b, h = data.shape[:2]
    scale = data.shape[-1] ** -0.25
    w = repeat(proj, 'm d -> b h m d', b=b, h=h).type_as(data)
    dots = torch.einsum('...nd,...md->...nm', scale * data, w)
    half_norm = (torch.sum(data ** 2, dim=-1) / 2.0 * scale ** 2).unsqueeze(dim=-1)
    top = torch.amax(dots, dim=-1 if is_query else (-1, -2), keepdim=True)
    feats = torch.exp(dots - half_norm - top.detach()) + eps
    return (proj.shape[0] ** -0.5 * feats).type_as(data)


def relu_features(data, *, proj, fn=nn.ReLU(), eps=1e-3):
    scale = data.shape[-1] ** -0.25
    if proj is None:
        return fn(scale * data) + eps
    w = repeat(proj, 'm d -> b h m d', b=data.shape[0], h=data.shape[1]).type_as(data)
    return (fn(torch.einsum('...nd,...md->...nm', scale * data, w)) + eps).type_as(data)


def orthogonal_rows(n_rows, n_cols):
    # stacked orthogonal blocks (QR of Gaussian squares), rows rescaled to Gaussian norms
    blocks = []
    for _ in range(math.ceil(n_rows / n_cols)):
        q, _ = torch.linalg.qr(torch.randn((n_cols, n_cols)), mode='reduced')
        blocks.append(q.t())
    stacked = torch.cat(blocks)[:n_rows]
    return torch.diag(torch.randn((n_rows, n_cols)).norm(dim=1)) @ stacked


def global_linear_attention(q, k, v):
    norm = 1.0 / torch.einsum('...nd,...d->...n', q, k.sum(dim=-2).type_as(q))
    summary = torch.einsum('...nd,...ne->...de', k, v)
    return torch.einsum('...de,...nd,...n->...ne', summary, q, norm)


def causal_linear_attention(q, k, v, chunk=4, eps=1e-6):
    # prefix sums, a chunk at a time, carrying the last row of each into the next
    k_run, kv_run, outs = 0, 0, []
    for qc, kc, vc in zip(*(t.chunk(chunk, dim=-2) for t in (q, k, v))):
        k_sum = k_run + kc.cumsum(dim=-2)
        kv_sum = kv_run + torch.einsum('...nd,...ne->...nde', kc, vc).cumsum(dim=-3)
        norm = 1.0 / torch.einsum('...nd,...nd->...n', qc, k_sum.type_as(qc) + eps)
        outs.append(torch.einsum('...nde,...nd,...n->...ne', kv_sum, qc, norm))
        k_run, kv_run = k_sum[:, :, -1:], kv_sum[:, :, -1:]
    return torch.cat(outs, dim=-2)


class LinearAttentionKernel(nn.Module):
    def __init__(self, dim_head, n_features, causal=False, generalized_attention=False,
                 no_projection=False):
        super().__init__()
        self.draw = partial(orthogonal_rows, n_features, dim_head)
        self.register_buffer('proj', self.draw())
        self.causal, self.generalized = causal, generalized_attention
        self.no_proj = no_projection
        if causal:
            try:
                import fast_transformers.causal_product.causal_product_cuda  # noqa: F401
                raise AssertionError('the CUDA kernel is not expected here')
            except ImportError:
                print('no CUDA causal product: using the chunked prefix sums')

    @torch.no_grad()
    def redraw(self):
        self.proj.copy_(self.draw())

    def forward(self, q, k, v):
        if self.no_proj:
            q = q.softmax(dim=-1)
            k = torch.exp(k) if self.causal else k.softmax(dim=-2)
        elif self.generalized:
            q, k = (relu_features(t, proj=self.proj) for t in (q, k))
        else:
            q = random_features(q, proj=self.proj, is_query=True)
            k = random_features(k, proj=self.proj, is_query=False)
        return (causal_linear_attention if self.causal else global_linear_attention)(q, k, v)


class Redrawer(nn.Module):
    # counts training calls in a buffer; every `every` calls, new random features everywhere
    def __init__(self, model, every):
        super().__init__()
        self.model, self.every = model, every
        self.register_buffer('since', torch.tensor(0))

    def tick(self):
        if not self.training:
            return
        if self.since >= self.every:
            for m in self.model.modules():
                if isinstance(m, LinearAttentionKernel):
                    m.redraw()
            self.since.zero_()
            return
        self.since += 1


class MaskedLinearSelfAttention(nn.Module):
    def __init__(self, dim, heads, dim_head, n_features, **kernel):
        super().__init__()
        self.heads = heads
        self.kernel = LinearAttentionKernel(dim_head, n_features, **kernel)
        self.qkv = nn.ModuleList([nn.Linear(dim, heads * dim_head, bias=False) for _ in range(3)])
        self.out = nn.Linear(heads * dim_head, dim)

    def forward(self, tokens, mask=None):
        q, k, v = (rearrange(f(tokens), 'b n (h d) -> b h n d', h=self.heads) for f in self.qkv)
        v = v[:, :]  # (a view: the masking below writes through it)
        if mask is not None:
            v.masked_fill_(~mask[:, None, :, None], 0.)
        return self.out(rearrange(self.kernel(q, k, v), 'b h n d -> b n (h d)'))


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(12)
        self.attn = MaskedLinearSelfAttention(12, heads=2, dim_head=6, n_features=8, **options)
        self.head = nn.Linear(12, 3)

    def forward(self, tokens, mask=None):
        return self.head(tokens + self.attn(self.norm(tokens), mask=mask))


torch.manual_seed(0)
tagger = Tagger()
initialize(tagger)
redrawer = Redrawer(tagger, every=2)
optimizer = torch.optim.Adam(tagger.parameters(), lr=1e-3)
record.append(tagger.attn.kernel.proj.numpy().copy())
for step in range(4):
    redrawer.tick()
    optimizer.zero_grad()
    loss = F.cross_entropy(tagger(x, mask=mask).reshape(-1, 3), y.reshape(-1))
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(int(redrawer.since))
record.append(tagger.attn.kernel.proj.numpy().copy())
record.append(params_of(tagger))
"""

PERFORMER_STEPS = [
    ("import math\nimport torch\n", "import math\nimport retrograd as torch\n"),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize(
    "options",
    [{}, {"causal": True}, {"generalized_attention": True}, {"no_projection": True}],
    ids=["softmax", "causal", "generalized", "no-projection"],
)
def test_performer_attention_trains_as_torch(capsys, options):
    rng = np.random.default_rng(73)
    x = rng.standard_normal((2, 8, 12)).astype(np.float32)
    y = rng.integers(0, 3, (2, 8))
    mask = np.ones((2, 8), bool)
    mask[1, 6:] = False
    records, logs = runs_with_draws(
        PERFORMER_SOURCE,
        PERFORMER_STEPS,
        capsys,
        seed=73,
        initialize=initializer(),
        params_of=params_of,
        options=options,
        make_x=lambda lib: lib.tensor(x),
        make_y=lambda lib: lib.tensor(y),
        make_mask=lambda lib: lib.tensor(mask),
    )
    ours, theirs = records[1], records[0]
    assert logs[0] == logs[1]
    assert [theirs[i] for i in (2, 4, 6, 8)] == [1, 2, 0, 1]  # the redraw counter
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- DDPG -----------------------------------------------------------------------------------------
DDPG_SOURCE = """
import copy

import numpy as np
import torch
import torch.nn as nn

F = nn.functional

device = torch.device("cpu" if not torch.cuda.is_available() else "cuda")


class Memory:
    # a ring buffer of transitions in NumPy, sampled into float tensors
    def __init__(self, s_dim, a_dim, capacity=256):
        self.capacity, self.next, self.full = capacity, 0, 0
        self.s, self.a = np.zeros((capacity, s_dim)), np.zeros((capacity, a_dim))
        self.s2 = np.zeros((capacity, s_dim))
        self.r, self.live = np.zeros((capacity, 1)), np.zeros((capacity, 1))

    def push(self, s, a, s2, r, done):
        i = self.next
        self.s[i], self.a[i], self.s2[i], self.r[i], self.live[i] = s, a, s2, r, 1.0 - done
        self.next = (i + 1) % self.capacity
        self.full = min(self.full + 1, self.capacity)

    def batch(self, n):
        idx = np.random.randint(0, self.full, size=n)
        arrays = (self.s, self.a, self.s2, self.r, self.live)
        return tuple(torch.FloatTensor(arr[idx]).to(device) for arr in arrays)


class Policy(nn.Module):
    def __init__(self, s_dim, a_dim, limit):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(s_dim, 32), nn.ReLU(), nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, a_dim)
        )
        self.limit = limit

    def forward(self, s):
        return self.limit * torch.tanh(self.net(s))


class QNet(nn.Module):
    def __init__(self, s_dim, a_dim):
        super().__init__()
        self.embed = nn.Linear(s_dim, 32)
        self.mix = nn.Linear(32 + a_dim, 24)
        self.value = nn.Linear(24, 1)

    def forward(self, s, a):
        h = F.relu(self.embed(s))
        return self.value(F.relu(self.mix(torch.cat([h, a], 1))))


def soften(target, source, tau):
    for tp, p in zip(target.parameters(), source.parameters()):
        tp.data.copy_(tau * p.data + (1 - tau) * tp.data)


class Agent:
    def __init__(self, s_dim, a_dim, limit, gamma=0.99, tau=0.005):
        self.pi = Policy(s_dim, a_dim, limit).to(device)
        initialize(self.pi)
        self.pi_slow = copy.deepcopy(self.pi)
        self.pi_opt = torch.optim.Adam(self.pi.parameters(), lr=1e-4)
        self.q = QNet(s_dim, a_dim).to(device)
        initialize(self.q)
        self.q_slow = copy.deepcopy(self.q)
        self.q_opt = torch.optim.Adam(self.q.parameters(), weight_decay=1e-2)
        self.gamma, self.tau = gamma, tau

    def act(self, s):
        return self.pi(torch.FloatTensor(s.reshape(1, -1)).to(device)).cpu().data.numpy().flatten()

    def learn(self, memory, n=16):
        s, a, s2, r, live = memory.batch(n)
        target = r + (live * self.gamma * self.q_slow(s2, self.pi_slow(s2))).detach()
        q_loss = F.mse_loss(self.q(s, a), target)
        self.q_opt.zero_grad()
        q_loss.backward()
        self.q_opt.step()
        pi_loss = -self.q(s, self.pi(s)).mean()
        self.pi_opt.zero_grad()
        pi_loss.backward()
        self.pi_opt.step()
        soften(self.q_slow, self.q, self.tau)
        soften(self.pi_slow, self.pi, self.tau)
        record.append([q_loss.item(), pi_loss.item()])

    def save(self, prefix):
        for name in ("pi", "q"):
            torch.save(getattr(self, name).state_dict(), prefix + "_" + name)
            torch.save(getattr(self, name + "_opt").state_dict(), prefix + "_" + name + "_opt")

    def load(self, prefix):
        for name in ("pi", "q"):
            getattr(self, name).load_state_dict(torch.load(prefix + "_" + name))
            getattr(self, name + "_opt").load_state_dict(torch.load(prefix + "_" + name + "_opt"))
            setattr(self, name + "_slow", copy.deepcopy(getattr(self, name)))


class Puck:
    # a point pushed in the plane toward the origin; reward: minus the squared distance
    horizon = 6

    def reset(self):
        self.t, self.pos = 0, np.random.uniform(-1, 1, size=2)
        return self.pos.copy()

    def step(self, push):
        self.t += 1
        self.pos = self.pos + 0.2 * push
        return self.pos.copy(), -float((self.pos ** 2).sum()), self.t >= self.horizon


env = Puck()
agent = Agent(2, 2, 1.0)
memory = Memory(2, 2)
s, ret, steps, episodes = env.reset(), 0.0, 0, 0
for t in range(18):
    steps += 1
    if t < 6:
        a = np.random.uniform(-1.0, 1.0, size=2)  # warm-up: random pushes
    else:
        a = (agent.act(np.array(s)) + np.random.normal(0, 0.1, size=2)).clip(-1.0, 1.0)
    s2, r, done = env.step(a)
    memory.push(s, a, s2, r, float(done) if steps < env.horizon else 0.0)
    s, ret = s2, ret + r
    if t >= 6:
        agent.learn(memory)
    if done:
        print(f"step {t + 1}: episode {episodes + 1} return {ret:.3f}")
        s, ret, steps, episodes = env.reset(), 0.0, 0, episodes + 1
agent.save(prefix)
restored = Agent(2, 2, 1.0)
restored.load(prefix)
record.append(params_of(agent.pi, agent.q, agent.pi_slow, agent.q_slow))
record.append(params_of(restored.pi_slow, restored.q_slow))
record.append(np.array(restored.q_opt.state_dict()["state"][0]["exp_avg_sq"]))  # (ours: NumPy)
"""

DDPG_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        q_loss.backward()\n        self.q_opt.step()",
        "        grads = q_loss.backward()\n        self.q_opt.step(grads)",
    ),
    (
        "        pi_loss.backward()\n        self.pi_opt.step()",
        "        grads = pi_loss.backward()\n        self.pi_opt.step(grads)",
    ),
]


def test_ddpg_trains_as_torch(capsys, tmp_path):
    weights = initializer()
    records, logs = runs_with_draws(
        DDPG_SOURCE,
        DDPG_STEPS,
        capsys,
        seed=74,
        params_of=params_of,
        make_initialize=lambda lib: weights,
        make_prefix=lambda lib: str(tmp_path / lib.__name__),
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("episode") == 3
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)
