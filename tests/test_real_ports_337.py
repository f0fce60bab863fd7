"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
the location-sensitive attention of speech recognizers and Tacotron-style synthesizers.

- Attention modules written here in the style of ESPnet's RNN attentions and ``nets_utils``: a
  ``to_device`` helper (a module's ``next(parameters()).device`` or a tensor's ``.device``); a
  padding mask with two paths, one for a Python list of lengths (``lengths.long().tolist()``,
  ``arange(...).unsqueeze(0).expand(b, n)``, ``expanded.new(lengths)`` reading the list as
  data, ``mask[index].expand_as(like)`` with ``None`` in the index tuple, a ``logging``
  warning) and one traceable for a tensor of lengths (``torch.ones(n + 1, n + 1,
  dtype=torch.bool)`` sized by a 0-d ``lengths.max()``, ``torch.clamp(lengths, max=n)
  .type(torch.long)``, an upper triangle made by a bool times a bool, ``mask[lengths -
  1][..., :n]``, ``expand(*like.transpose(1, 2).shape[:2])``); attentions that keep their
  encoder projection between calls and ``reset()`` it: a uniform one (``mask.new(list)``,
  ``.to(tensor)``), a dot one (``new_zeros``), an additive one and a location-aware one (the
  previous weights as ``1.0 - mask.to(device=..., dtype=...)`` over ``prev.new(lengths)``, a
  ``Conv2d(1, chans, (1, 2k+1), padding=(0, k), bias=False)`` over them), each scoring by
  ``e.masked_fill_(mask, -inf)`` in place before ``F.softmax(scaling * e)``; a monotonic
  constraint writing ``e[:, :i] = -inf`` under ``no_grad``; an ``LSTMCell`` decoder with each
  attention trained by Adam on ``F.mse_loss``, then a constrained decode.

Compared against torch: the masks, the losses, last weights and parameters of every decoder,
and the constrained weights. The lines a port changes: the ``import`` lines and the gradient
lines; ``torch.randn`` draws one shared stream; torch's weights are loaded into the port's.
"""

from __future__ import annotations

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

ESPNET_ATTENTION_SOURCE = r"""import logging

import torch
from torch.nn import functional as F

log = logging.getLogger("attention")


def to_device(owner, tensor):
    if isinstance(owner, torch.nn.Module):
        return tensor.to(next(owner.parameters()).device)
    if isinstance(owner, torch.Tensor):
        return tensor.to(owner.device)
    raise TypeError(f"cannot find a device on {type(owner)}")


def upper_triangle(square):
    idx = torch.arange(square.size(0), device=square.device)
    return square * (idx.unsqueeze(-1).expand(-1, square.size(0)) <= idx)


def padding_mask(lengths, like=None, axis=-1, maxlen=None):
    # True where a position lies past its sequence's length
    if axis == 0:
        raise ValueError("the batch axis cannot be the length axis")
    if isinstance(lengths, torch.Tensor) and (like is None or like.dim() in (2, 3)) and axis <= 2:
        return _mask_from_tensor(lengths, like, axis, maxlen)
    return _mask_from_list(lengths, like, axis, maxlen)


def _mask_from_list(lengths, like, axis, maxlen):
    if isinstance(lengths, list):
        log.warning("lengths given as a list: the mask cannot be traced")
    else:
        lengths = lengths.long().tolist()  # (a Python list from here on)
    batch = len(lengths)
    if maxlen is None:
        maxlen = int(max(lengths)) if like is None else like.size(axis)
    positions = torch.arange(0, maxlen, dtype=torch.int64).unsqueeze(0).expand(batch, maxlen)
    mask = positions >= positions.new(lengths).unsqueeze(-1)
    if like is None:
        return mask
    axis = axis % like.dim()
    index = tuple(slice(None) if d in (0, axis) else None for d in range(like.dim()))
    return mask[index].expand_as(like).to(like.device)


def _mask_from_tensor(lengths, like, axis, maxlen):
    device = lengths.device if like is None else like.device
    if like is not None and like.dim() == 3:
        shape = like.transpose(1, 2).shape[:2] if axis == 1 else like.shape[:2]
        lengths = lengths.unsqueeze(1).expand(*shape)
    if maxlen is None:
        maxlen = lengths.max() if like is None else like.shape[axis]
    clipped = torch.clamp(lengths, max=maxlen).type(torch.long)
    square = torch.ones(maxlen + 1, maxlen + 1, dtype=torch.bool, device=device)
    rows = upper_triangle(square)[1:, :-1]
    mask = rows[clipped - 1][..., :maxlen]
    return mask.transpose(1, 2) if like is not None and like.dim() == 3 and axis == 1 else mask


def monotonic(e, last, behind=1, ahead=3):
    if e.size(0) != 1:
        raise NotImplementedError("one utterance at a time")
    if last - behind > 0:
        e[:, : last - behind] = -float("inf")
    if last + ahead < e.size(1):
        e[:, last + ahead :] = -float("inf")
    return e


class Attention(torch.nn.Module):
    def __init__(self, dec_dim=0):
        super().__init__()
        self.dec_dim = dec_dim
        self.reset()

    def reset(self):
        self.memory = self.keys = self.mask = None

    def remember(self, enc):
        if self.keys is None:
            self.memory = enc
            self.keys = self.project(enc)

    def project(self, enc):
        return enc

    def attend(self, e, lengths, scaling, last=None):
        if self.mask is None:
            self.mask = to_device(self.memory, padding_mask(lengths))
        e.masked_fill_(self.mask, float("-inf"))
        if last is not None:
            e = monotonic(e, last)
        weights = F.softmax(e * scaling, dim=1)
        return torch.sum(self.memory * weights.unsqueeze(-1), dim=1), weights

    def query(self, enc, dec):
        if dec is None:
            return enc.new_zeros(enc.size(0), self.dec_dim)
        return dec.view(enc.size(0), self.dec_dim)


class Uniform(Attention):
    def forward(self, enc, lengths, dec, prev):
        self.remember(enc)
        if prev is None:
            keep = 1.0 - padding_mask(lengths).float()
            prev = (keep / keep.new(lengths).unsqueeze(-1)).to(self.memory)
            self.context = (self.memory * prev.unsqueeze(-1)).sum(dim=1)
        return self.context, prev


class Dot(Attention):
    def __init__(self, enc_dim, dec_dim, att_dim):
        super().__init__(dec_dim)
        self.enc_proj = torch.nn.Linear(enc_dim, att_dim)
        self.dec_proj = torch.nn.Linear(dec_dim, att_dim)

    def project(self, enc):
        return torch.tanh(self.enc_proj(enc))

    def forward(self, enc, lengths, dec, prev, scaling=2.0):
        self.remember(enc)
        q = torch.tanh(self.dec_proj(self.query(enc, dec)))
        return self.attend((self.keys * q.unsqueeze(1)).sum(dim=2), lengths, scaling)


class Additive(Attention):
    def __init__(self, enc_dim, dec_dim, att_dim):
        super().__init__(dec_dim)
        self.enc_proj = torch.nn.Linear(enc_dim, att_dim)
        self.dec_proj = torch.nn.Linear(dec_dim, att_dim, bias=False)
        self.score = torch.nn.Linear(att_dim, 1)

    def project(self, enc):
        return self.enc_proj(enc)

    def energies(self, enc, dec, prev, lengths):
        return self.keys + self.dec_proj(self.query(enc, dec)).unsqueeze(1)

    def forward(self, enc, lengths, dec, prev, scaling=2.0, last=None):
        self.remember(enc)
        e = self.score(torch.tanh(self.energies(enc, dec, prev, lengths))).squeeze(2)
        return self.attend(e, lengths, scaling, last)


class Location(Additive):
    def __init__(self, enc_dim, dec_dim, att_dim, chans, width):
        super().__init__(enc_dim, dec_dim, att_dim)
        self.conv = torch.nn.Conv2d(1, chans, (1, 2 * width + 1), padding=(0, width), bias=False)
        self.loc_proj = torch.nn.Linear(chans, att_dim, bias=False)

    def energies(self, enc, dec, prev, lengths):
        q = self.query(enc, dec)
        if prev is None:
            prev = 1.0 - padding_mask(lengths).to(device=q.device, dtype=q.dtype)
            prev = prev / prev.new(lengths).unsqueeze(-1)
        loc = self.conv(prev.view(enc.size(0), 1, 1, -1)).squeeze(2).transpose(1, 2)
        return self.loc_proj(loc) + self.keys + self.dec_proj(q).unsqueeze(1)
"""

ESPNET_ATTENTION_DRIVER = r"""
lens = torch.tensor([5, 3, 2])
record.append(padding_mask(lens).int().numpy())
record.append(padding_mask([5, 3, 2]).int().numpy())
record.append(padding_mask(lens, torch.zeros(3, 2, 5)).int().numpy())
record.append(padding_mask(lens, torch.zeros(3, 5, 2), 1).int().numpy())
record.append(padding_mask([5, 3, 2], torch.zeros(3, 5, 5), 1).int().numpy())
record.append(padding_mask(lens, maxlen=7).int().numpy())

enc = torch.randn(3, 5, 6) * (~padding_mask(lens)).unsqueeze(-1)
goal = torch.randn(3, 3, 4)
for att in (Location(6, 8, 5, 3, 1), Additive(6, 8, 5), Dot(6, 8, 5), Uniform()):
    cell, out_proj = torch.nn.LSTMCell(6 + 4, 8), torch.nn.Linear(8 + 6, 4)
    for module in (att, cell, out_proj):
        initialize(module)
    trained = [*att.parameters(), *cell.parameters(), *out_proj.parameters()]
    optimizer = torch.optim.Adam(trained, lr=1e-2)
    for step in range(2):
        att.reset()
        h, c = torch.zeros(3, 8), torch.zeros(3, 8)
        fed, weights, loss = torch.zeros(3, 4), None, 0.0
        for t in range(goal.size(1)):
            ctx, weights = att(enc, [5, 3, 2], h, weights)
            h, c = cell(torch.cat([ctx, fed], dim=1), (h, c))
            loss = loss + F.mse_loss(out_proj(torch.cat([h, ctx], dim=1)), goal[:, t])
            fed = goal[:, t]  # teacher forcing
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(weights.detach().numpy())
    record.append(params_of(att, cell, out_proj))

# one utterance decoded under the monotonic constraint
location = Location(6, 8, 5, 3, 1)
initialize(location)
with torch.no_grad():
    weights, focus = None, 0
    for t in range(4):
        _, weights = location(enc[:1], [5], torch.randn(1, 8), weights, last=focus)
        focus = int(weights.argmax(dim=-1)[0])
        record.append(weights.numpy())
"""

ESPNET_ATTENTION_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("        optimizer.zero_grad()\n", ""),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_espnet_attentions_train_an_lstm_decoder_and_decode_as_torch(capsys):
    """The padding masks (traceable and list paths, with a reference tensor on either
    axis, with ``maxlen``), two steps of a decoder with each attention (losses, last
    weights, parameters), and four constrained steps of location-aware attention."""
    (theirs, ours), _ = runs_with_draws(
        ESPNET_ATTENTION_SOURCE + ESPNET_ATTENTION_DRIVER, ESPNET_ATTENTION_STEPS, capsys,
        33701, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[0].tolist()[1] == [0, 0, 0, 1, 1]
    # the score's bias adds one constant to every energy, which the softmax takes away: its
    # true gradient is zero and Adam steps it by rounding noise
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=("0.score.bias",))
