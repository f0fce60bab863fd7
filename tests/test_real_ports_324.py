"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a program written here in the style of yahoo's weighted field-aware factorization machine (FFM
over weighted multi-value fields, bags padded per row and closed by end-of-bag offsets).

Surface: ``nn.Parameter(torch.empty(...), requires_grad=not frozen)`` with ``nn.init.normal_``;
``F.embedding`` scaled by ``weights.unsqueeze(2)``; ``F.pad(x, [0, 0, 1, 0, 0, 0]).cumsum(dim=1)``
and ``F.pad(ends, [1, 0, 0, 0], value=-1) + 1`` on int64; gathering with three broadcast index
tensors ``x[rows, bounds, cols]``; ``torch.tril_indices(n, n, -1)`` unpacked into two registered
buffers; ``uniform_``/``zeros_`` under ``torch.no_grad()``; ``x[rows[:, None], a, b]`` and
``.sum(dim=[-1, -2])``; ``squeeze().sum(dim=1)``; ``view``; ``BCEWithLogitsLoss`` and ``SGD`` with
momentum (not an adaptive optimizer: unused field blocks get gradients of rounding size out of the
prefix-sum differences, which Adagrad or Adam would scale to full steps); then the last batch's
bags against ``F.embedding_bag(..., mode="sum", per_sample_weights=...)`` with start offsets
built by ``zeros_like``, ``cat``, ``cumsum``, ``repeat_interleave`` and a ``~mask`` selection.

The lines changed: the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

FFM_SOURCE = """
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class PaddedBagSum(nn.Module):
    \"\"\"Weighted sums of embeddings over bags: rows are padded, bags close at ``ends``.\"\"\"

    def __init__(self, vocab, dim, frozen=False):
        super().__init__()
        self.table = nn.Parameter(torch.empty((vocab, dim)), requires_grad=not frozen)
        nn.init.normal_(self.table)

    def forward(self, ids, weights, ends):
        scaled = F.embedding(ids, self.table) * weights.unsqueeze(2)
        # prefix sums behind a zero row: a bag's sum is prefix[end + 1] - prefix[start]
        prefix = F.pad(scaled, [0, 0, 1, 0, 0, 0]).cumsum(dim=1)
        bounds = F.pad(ends, [1, 0, 0, 0], value=-1) + 1
        rows = torch.arange(prefix.shape[0]).reshape(-1, 1, 1)
        cols = torch.arange(prefix.shape[2])
        upper = prefix[rows, bounds[:, 1:].unsqueeze(-1), cols]
        lower = prefix[rows, bounds[:, :-1].unsqueeze(-1), cols]
        return upper - lower


class FieldAwareFM(nn.Module):
    def __init__(self, vocab, n_fields, block):
        super().__init__()
        self.n_fields, self.block = n_fields, block
        left, right = torch.tril_indices(n_fields, n_fields, -1)
        self.register_buffer("left", left)
        self.register_buffer("right", right)
        self.latent = PaddedBagSum(vocab, n_fields * block)
        self.linear = PaddedBagSum(vocab, 1)
        self.offset = nn.Parameter(torch.tensor(0.0))
        with torch.no_grad():
            nn.init.uniform_(self.latent.table, 0, 1.0 / math.sqrt(block))
            nn.init.zeros_(self.linear.table)

    def forward(self, ids, weights, ends, fields):
        n = ids.shape[0]
        latent = self.latent(ids, weights, ends).view(n, self.n_fields, self.n_fields, self.block)
        a, b = fields[:, self.left], fields[:, self.right]
        rows = torch.arange(n)
        # field a's vector towards field b times field b's vector towards field a
        pairs = (latent[rows[:, None], a, b] * latent[rows[:, None], b, a]).sum(dim=[-1, -2])
        return pairs + self.linear(ids, weights, ends).squeeze().sum(dim=1) + self.offset


model = FieldAwareFM(vocab=30, n_fields=3, block=4)
initialize(model)
opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
bce = torch.nn.BCEWithLogitsLoss()
for ids, weights, ends, fields, clicked in batches:
    ids, weights, ends, fields = (torch.tensor(a) for a in (ids, weights, ends, fields))
    logits = model(ids, weights, ends, fields)
    loss = bce(logits, torch.tensor(clicked))
    opt.zero_grad()
    loss.backward()
    opt.step()
    record += [loss.item(), params_of(model), logits.detach().numpy()]

# the last batch again through F.embedding_bag: padding dropped, bags given by flat starts
width = ids.shape[1]
valid = torch.arange(width)[None, :] <= ends[:, -1:]
starts = torch.cat([torch.zeros_like(ends[:, :1]), ends[:, :-1] + 1], dim=1)
padding = (~valid).sum(dim=1)
dropped_before = torch.cumsum(padding, dim=0) - padding
flat_starts = (starts + torch.arange(ids.shape[0])[:, None] * width).reshape(-1)
flat_starts = flat_starts - dropped_before.repeat_interleave(3)
with torch.no_grad():
    reference = F.embedding_bag(ids[valid], model.latent.table, flat_starts, mode="sum",
                                per_sample_weights=weights[valid])
    record.append(reference.numpy())
    record.append(model.latent(ids, weights, ends).reshape(-1, 12).numpy())
"""

FFM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    opt.step()\n",
        "    grads = loss.backward()\n    opt.step(grads)\n",
    ),
]


def drawn_batches(seed: int, n_batches: int = 3, batch_size: int = 8, width: int = 9):
    """Rows of three weighted multi-value fields in a drawn order: indices and weights padded
    to ``width`` (index 0, weight 0), inclusive end-of-bag offsets, the field of each bag."""
    rng = np.random.default_rng(seed)
    preference = rng.standard_normal(30)
    batches = []
    for _ in range(n_batches):
        indices = np.zeros((batch_size, width), np.int64)
        weights = np.zeros((batch_size, width), np.float32)
        offsets = np.zeros((batch_size, 3), np.int64)
        fields = np.zeros((batch_size, 3), np.int64)
        labels = np.zeros(batch_size, np.float32)
        for row in range(batch_size):
            end = 0
            for m, field in enumerate(rng.permutation(3)):
                size = rng.integers(1, 4)
                indices[row, end : end + size] = 10 * field + rng.choice(10, size, replace=False)
                weights[row, end : end + size] = rng.uniform(0.2, 1.0, size)
                end += size
                offsets[row, m], fields[row, m] = end - 1, field
            labels[row] = float(preference[indices[row, :end]] @ weights[row, :end] > 0)
        batches.append((indices, weights, offsets, fields, labels))
    return batches


def test_weighted_ffm_trains_as_torch(capsys):
    (theirs, ours), logs = runs_with_draws(
        FFM_SOURCE, FFM_STEPS, capsys, 3240,
        batches=drawn_batches(324), initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1] == ""
    np.testing.assert_allclose(
        theirs[-1], theirs[-2], rtol=1e-5, atol=1e-6
    )  # torch agrees with itself
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
