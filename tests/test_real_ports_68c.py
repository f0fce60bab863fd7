"""Real ports, round 68 (the harness: ``tests/real_ports.py``): Hopfield networks, a program
written here in the style of ml-jku/hopfield-layers (the classical binary network, the modern
continuous one's retrieval and energy, and a ``HopfieldPooling`` layer trained on a
multiple-instance task of padded bags), against torch's run of the same program from the same
weights and draws.

- the classical network: ``+-1`` patterns from ``torch.randint(0, 2, ...) * 2 - 1`` as float,
  Hebbian weights ``X.t() @ X / n`` with ``fill_diagonal_(0)``, corruption by a boolean mask of
  ``torch.rand(...) < p`` and ``torch.where``, asynchronous updates ``s[i] = torch.sign(W[i] @
  s)`` in a fixed order, its energy ``-0.5 * s @ W @ s``;
- the modern network: the update ``xi = X.t() @ torch.softmax(beta * X @ xi, dim=0)`` on
  several queries at once, the energy ``-torch.logsumexp(beta * X @ xi, dim=0) / beta + 0.5 *
  (xi * xi).sum(0)`` (its monotone decrease checked), retrieval by ``argmax`` of the overlaps;
- the layer: ``nn.LayerNorm`` of stored and state patterns, multi-head projections reshaped
  by ``view(...).transpose(1, 2)``, association by ``torch.einsum('bhsd,bhnd->bhsn', ...)``
  repeated for ``update_steps_max`` steps, the padding mask broadcast by ``mask[:, None, None,
  :]`` into ``masked_fill(..., float('-inf'))``, the learned state pattern an
  ``nn.Parameter`` initialised by ``nn.init.normal_`` and ``expand``-ed over the batch;
- the data: bags of variable size padded by ``nn.utils.rnn.pad_sequence(..., batch_first=True)``
  with the mask ``torch.arange(n)[None, :] >= lengths[:, None]``, labels by ``any`` over a
  masked instance criterion; ``BCEWithLogitsLoss(pos_weight=...)``, ``AdamW``,
  ``CosineAnnealingLR``, ``clip_grad_norm_``;
- evaluation under ``torch.no_grad()``: accuracy and a rank AUC by ``argsort`` of ``argsort``,
  the attention of the pooling read back (``return_association``), the ``state_dict`` round
  trip through ``copy.deepcopy`` and ``load_state_dict`` (its ``missing_keys``), the bag
  scores invariant under a permutation of the instances (``index_select``).

And a second program, sparse modern Hopfield retrieval: ``sparsemax`` written as such code
writes it (``torch.sort(..., descending=True)``, ``cumsum``, a support mask against
``torch.arange(...).view(shape)``, the threshold by ``gather(dim, k_z - 1)`` and
``clamp(min=0)``) against ``softmax`` retrieval at two inverse temperatures, and a lookup
layer of learned stored patterns and values (``F.normalize``) trained through the sparse
association with label smoothing by ``torch.zeros(...).scatter_(1, y[:, None], 1.0)``,
``SGD`` with momentum and ``OneCycleLR``; evaluated under ``no_grad`` by ``topk``, memory usage
by ``index_add_`` and ``index_put_(..., accumulate=True)``, after a ``torch.save`` round trip.

The lines changed for the port: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

HOPFIELD_SOURCE = """
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

# -- the classical binary network ---------------------------------------------------------------
n_patterns, n_units = 3, 32
X = (torch.randint(0, 2, (n_patterns, n_units)) * 2 - 1).float()
W = X.t() @ X / n_units
W.fill_diagonal_(0)


def binary_energy(s):
    return (-0.5 * s @ W @ s).item()


flip = torch.rand(n_units) < 0.2
s = torch.where(flip, -X[1], X[1])
energies = [binary_energy(s)]
for sweep in range(3):
    for i in range(n_units):
        h = W[i] @ s
        if h != 0:
            s[i] = torch.sign(h)
    energies.append(binary_energy(s))
record.append(energies)
descending = all(a >= b for a, b in zip(energies, energies[1:]))
record.append([int(flip.sum()), int((s == X[1]).sum()), descending])

# -- the modern continuous network ------------------------------------------------------------
beta = 4.0
patterns = F.normalize(torch.randn(6, 16), dim=1) * 2.0


def modern_energy(xi):
    lse = torch.logsumexp(beta * patterns @ xi, dim=0) / beta
    return -lse + 0.5 * (xi * xi).sum(dim=0)


queries = patterns[[0, 3, 5]].t().clone()
queries[8:] = 0.0
queries = queries + 0.3 * torch.randn(16, 3)
xi = queries
trace = [modern_energy(xi)]
for step in range(3):
    xi = patterns.t() @ torch.softmax(beta * patterns @ xi, dim=0)
    trace.append(modern_energy(xi))
trace = torch.stack(trace)
record.append(trace.numpy().copy())
record.append((trace[1:] <= trace[:-1] + 1e-5).all().item())
record.append((patterns @ xi).argmax(dim=0).tolist())


# -- the Hopfield layer and its pooling -------------------------------------------------------
class Hopfield(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, num_heads=2, scaling=None,
                 update_steps_max=2):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.scaling = scaling if scaling is not None else 1.0 / math.sqrt(self.head_dim)
        self.update_steps_max = update_steps_max
        self.norm_stored = nn.LayerNorm(input_size)
        self.norm_state = nn.LayerNorm(input_size)
        self.q_proj = nn.Linear(input_size, hidden_size)
        self.k_proj = nn.Linear(input_size, hidden_size)
        self.v_proj = nn.Linear(input_size, hidden_size, bias=False)
        self.out_proj = nn.Linear(hidden_size, output_size)

    def _heads(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, stored, state, stored_pattern_padding_mask=None, return_association=False):
        stored = self.norm_stored(stored)
        state = self.norm_state(state)
        keys = self._heads(self.k_proj(stored))
        values = self._heads(self.v_proj(stored))
        xi = self._heads(self.q_proj(state))
        for _ in range(self.update_steps_max):
            logits = torch.einsum('bhsd,bhnd->bhsn', xi, keys) * self.scaling
            if stored_pattern_padding_mask is not None:
                logits = logits.masked_fill(stored_pattern_padding_mask[:, None, None, :],
                                            float('-inf'))
            association = torch.softmax(logits, dim=-1)
            xi = torch.einsum('bhsn,bhnd->bhsd', association, keys)
        out = torch.einsum('bhsn,bhnd->bhsd', association, values)
        b, h, s, d = out.shape
        out = self.out_proj(out.transpose(1, 2).reshape(b, s, h * d))
        if return_association:
            return out, association
        return out


class HopfieldPooling(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, quantity=1, **kwargs):
        super().__init__()
        self.hopfield = Hopfield(input_size, hidden_size, output_size, **kwargs)
        self.pooling_weights = nn.Parameter(torch.empty(1, quantity, input_size))
        nn.init.normal_(self.pooling_weights, mean=0.0, std=0.02)

    def forward(self, x, mask=None, return_association=False):
        state = self.pooling_weights.expand(x.size(0), -1, -1)
        out = self.hopfield(x, state, stored_pattern_padding_mask=mask,
                            return_association=return_association)
        if return_association:
            return out[0].flatten(start_dim=1), out[1]
        return out.flatten(start_dim=1)


class BagClassifier(nn.Module):
    def __init__(self, in_features, width=16):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(in_features, width), nn.ReLU(inplace=True))
        self.pool = HopfieldPooling(width, 8, width, quantity=2, num_heads=2)
        self.head = nn.Linear(2 * width, 1)

    def forward(self, bags, mask):
        return self.head(self.pool(self.embed(bags), mask=mask)).squeeze(-1)


def make_bags(n_bags, max_len, in_features):
    sizes = torch.randint(2, max_len + 1, (n_bags,))
    bags = [torch.randn(int(k), in_features) for k in sizes]
    bags = nn.utils.rnn.pad_sequence(bags, batch_first=True)
    lengths = sizes
    mask = torch.arange(bags.size(1))[None, :] >= lengths[:, None]
    positive = (bags[..., 0] > 1.2) & ~mask
    labels = positive.any(dim=1).float()
    return bags, mask, labels


def rank_auc(scores, labels):
    ranks = scores.argsort().argsort().float() + 1
    n_pos = labels.sum()
    n_neg = labels.numel() - n_pos
    return ((ranks * labels).sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


model = BagClassifier(4)
initialize(model)
train = [make_bags(12, 6, 4) for _ in range(3)]
pos_frac = torch.cat([labels for _, _, labels in train]).mean()
criterion = nn.BCEWithLogitsLoss(pos_weight=(1 - pos_frac) / pos_frac)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=5, eta_min=1e-3)
for epoch in range(5):
    model.train()
    total = 0.0
    for bags, mask, labels in train:
        logits = model(bags, mask)
        loss = criterion(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        total += loss.item()
    scheduler.step()
    record.append([total / len(train), scheduler.get_last_lr()[0]])
    print(f"epoch {epoch} loss {total / len(train):.4f}")

record.append(params_of(model))

restored = BagClassifier(4)
result = restored.load_state_dict(copy.deepcopy(model.state_dict()))
restored.eval()
bags, mask, labels = make_bags(16, 6, 4)
with torch.no_grad():
    logits = restored(bags, mask)
    accuracy = ((logits > 0).float() == labels).float().mean().item()
    record.append(list(result.missing_keys) + list(result.unexpected_keys))
    record.append([accuracy, rank_auc(logits, labels).item()])
    record.append(logits.numpy().copy())
    _, association = restored.pool(restored.embed(bags), mask=mask, return_association=True)
    record.append(association.numpy().copy())
    record.append([association.shape == (16, 2, 2, bags.size(1)),
                   bool((association.masked_select(mask[:, None, None, :].expand_as(association))
                         == 0).all())])
    perm = torch.tensor([3, 1, 0, 2, 4, 5])[: bags.size(1)]
    shuffled = restored(bags.index_select(1, perm), mask.index_select(1, perm))
    record.append((shuffled - logits).abs().max().item() < 1e-5)
"""

HOPFIELD_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=5.0)\n"
        "        optimizer.step(grads)\n",
    ),
]


def test_hopfield_networks_and_pooling_train_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        HOPFIELD_SOURCE, HOPFIELD_STEPS, capsys, 6802, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 5 + 5 + 1 + 6
    assert theirs[1][2] is True and theirs[3] is True  # both energies never increase
    assert theirs[-2] == [True, True] and theirs[-1] is True and theirs[-6] == []
    assert their_log == our_log and their_log.count("\n") == 5
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


SPARSE_SOURCE = """
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


def sparsemax(z, dim=-1):
    # Martins and Astudillo's projection onto the simplex: sort, cumulative sums, threshold
    z_sorted, _ = torch.sort(z, dim=dim, descending=True)
    cumsum = z_sorted.cumsum(dim) - 1
    shape = [1] * z.dim()
    shape[dim] = -1
    k = torch.arange(1, z.size(dim) + 1, dtype=z.dtype).view(shape)
    support = k * z_sorted > cumsum
    k_z = support.sum(dim=dim, keepdim=True)
    tau = cumsum.gather(dim, k_z - 1) / k_z.to(z.dtype)
    return torch.clamp(z - tau, min=0)


# sparse and dense retrieval of stored patterns from noisy queries
memories = F.normalize(torch.randn(8, 16), dim=-1)
queries = memories[torch.tensor([0, 2, 2, 5, 7])] + 0.25 * torch.randn(5, 16)
for beta in (2.0, 8.0):
    scores = beta * queries @ memories.t()
    dense = torch.softmax(scores, dim=-1)
    sparse = sparsemax(scores)
    record.append([(sparse > 0).sum(dim=-1).tolist(), (dense > 1e-3).sum(dim=-1).tolist()])
    record.append(sparse.numpy().copy())
    record.append([torch.allclose(sparse.sum(-1), torch.ones(5)),
                   (sparse @ memories - memories[[0, 2, 2, 5, 7]]).norm(dim=-1).max().item()
                   <= (dense @ memories - memories[[0, 2, 2, 5, 7]]).norm(dim=-1).max().item()])


class SparseHopfieldLayer(nn.Module):
    # a lookup layer: learned stored patterns, learned values per pattern, a sparse association
    def __init__(self, in_features, n_memories, n_classes, beta=4.0, sparse=True):
        super().__init__()
        self.query = nn.Linear(in_features, in_features, bias=False)
        self.stored = nn.Parameter(torch.randn(n_memories, in_features) * 0.5)
        self.values = nn.Parameter(torch.zeros(n_memories, n_classes))
        self.beta = beta
        self.sparse = sparse

    def association(self, x):
        q = F.normalize(self.query(x), dim=-1)
        keys = F.normalize(self.stored, dim=-1)
        scores = self.beta * q @ keys.t()
        return sparsemax(scores) if self.sparse else scores.softmax(dim=-1)

    def forward(self, x):
        return self.association(x) @ self.values


n_classes, dim = 4, 12
prototypes = torch.randn(n_classes, dim)


def make_batch(n):
    labels = torch.randint(0, n_classes, (n,))
    return prototypes[labels] + 0.6 * torch.randn(n, dim), labels


model = SparseHopfieldLayer(dim, 10, n_classes)
initialize(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=8)
smoothing = 0.1
for step in range(8):
    x, y = make_batch(16)
    target = torch.zeros(16, n_classes).scatter_(1, y[:, None], 1.0)
    target = target * (1 - smoothing) + smoothing / n_classes
    logits = model(x)
    loss = -(target * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), scheduler.get_last_lr()[0]])

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = SparseHopfieldLayer(dim, 10, n_classes)
restored.load_state_dict(torch.load(buffer))
x, y = make_batch(24)
with torch.no_grad():
    assoc = restored.association(x)
    accuracy = (restored(x).argmax(dim=-1) == y).float().mean().item()
    top, idx = assoc.topk(2, dim=-1)
    nearest = restored.stored[idx[:, 0]]
    record.append([accuracy, (assoc > 0).sum(dim=-1).float().mean().item()])
    record.append(top.numpy().copy())
    record.append(nearest.numpy().copy())
    # how often each memory is the nearest, overall and per class
    usage = torch.zeros(10).index_add_(0, idx[:, 0], torch.ones(24))
    per_class = torch.zeros(10, n_classes).index_put_((idx[:, 0], y), torch.ones(24),
                                                      accumulate=True)
    record.append([usage.tolist(), per_class.sum(dim=1).tolist()])
    record.append(per_class.numpy().copy())
"""

SPARSE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_sparse_hopfield_retrieval_and_lookup_layer_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        SPARSE_SOURCE, SPARSE_STEPS, capsys, 6805, initialize=initializer()
    )
    assert len(theirs) == 6 + 8 + 5
    assert theirs[-2][0] == theirs[-2][1] and sum(theirs[-2][0]) == 24
    assert theirs[2][0] is True and theirs[5][0] is True  # sparsemax sums to one
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
