# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 80 (the harness: ``tests/real_ports.py``): self-supervised node
representations, a program written here in the style of CRL-Shanghaitech/GRACE (two views of a
graph by edge dropping and feature masking, a GCN encoder, a projection head, an InfoNCE over
inter- and intra-view negatives, batched or not) and of nerdslab/bgrl (an online encoder and
predictor, a target encoder kept as an exponential moving average under a cosine momentum
schedule, a cosine-similarity loss), on a stochastic-block-model graph, then evaluated by a
logistic-regression probe on the frozen embeddings; three configurations, each run under
torch and, ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the graph: class labels ``torch.arange(n) % k``, edges from ``torch.rand(n, n) < p`` with
  ``torch.where(same_class, p_in, p_out)``, ``torch.triu(..., diagonal=1)``,
  ``nonzero().t()``; PyG's utilities written out: ``to_undirected`` by ``torch.cat`` and
  ``torch.unique(..., dim=1)``, ``remove_self_loops`` by a mask, ``add_self_loops`` by
  ``torch.arange`` stacked, ``degree`` by ``torch.zeros(...).scatter_add_(0, index, ones)``;
  features ``torch.randn`` plus a class signal by ``F.one_hot``;
- the augmentations: ``dropout_adj`` keeping edges where ``torch.rand(m) >= p``, GRACE's
  ``drop_feature`` by ``torch.empty((x.size(1),), dtype=torch.float32).uniform_(0, 1) <
  drop_prob`` and ``x.clone()`` with ``x[:, drop_mask] = 0`` (``uniform_`` drawing from one
  seeded stream for both libraries);
- the encoder: a ``GCNConv`` (``nn.Linear(..., bias=False)``, the symmetric normalisation
  ``deg.pow(-0.5)`` with ``masked_fill(deg_inv_sqrt == float("inf"), 0)``, messages
  ``norm.view(-1, 1) * x[row]`` summed by ``index_add_``, a bias ``nn.Parameter``),
  ``nn.PReLU(hidden)`` activations, ``nn.ModuleList``; the projection ``F.elu`` between two
  ``nn.Linear``;
- GRACE's loss: ``F.normalize``, ``torch.mm(z1, z2.t())``, ``torch.exp(... / tau)``,
  ``refl_sim.diag()``, ``-torch.log(between.diag() / (refl.sum(1) + between.sum(1) -
  refl.diag()))``, the batched form over ``torch.arange(num_nodes)`` slices with
  ``[:, i * b:(i + 1) * b].diag()`` and ``torch.cat(losses)``, ``0.5 * (l1 + l2)``, ``mean()``;
- BGRL: the target by ``copy.deepcopy`` with ``requires_grad_(False)``, the predictor
  ``nn.Sequential(nn.Linear, nn.BatchNorm1d, nn.PReLU, nn.Linear)``, the loss ``2 - 2 *
  F.cosine_similarity(q, y.detach(), dim=-1).mean()`` both ways, the momentum ``1 - (1 -
  base) * (math.cos(math.pi * step / total) + 1) / 2`` applied under ``torch.no_grad()`` by
  ``param_k.data.mul_(mm).add_(param_q.data, alpha=1.0 - mm)`` over ``zip(...parameters())``;
- training: ``Adam(..., weight_decay=1e-5)``; the probe: the encoder's embeddings under
  ``torch.no_grad()`` ``.detach()``-ed and standardised, a ``nn.Linear`` trained by
  ``F.cross_entropy`` with ``Adam(weight_decay=)`` on a ``torch.arange(n) % 2 == 0`` mask, the
  test accuracy by ``argmax`` and ``eq``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedFills,
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

GRAPH_SSL_SOURCE = """import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_NODES, NUM_CLASSES, NUM_FEATURES, HIDDEN, OUT = 30, 3, 6, 8, 6


# -- torch_geometric.utils, written out ----------------------------------------------------------
def to_undirected(edge_index):
    row, col = edge_index
    both = torch.stack([torch.cat([row, col]), torch.cat([col, row])], dim=0)
    return torch.unique(both, dim=1)


def remove_self_loops(edge_index):
    mask = edge_index[0] != edge_index[1]
    return edge_index[:, mask]


def add_self_loops(edge_index, num_nodes):
    loop = torch.arange(num_nodes, dtype=edge_index.dtype)
    return torch.cat([edge_index, torch.stack([loop, loop])], dim=1)


def degree(index, num_nodes, dtype):
    ones = torch.ones(index.shape[0], dtype=dtype)
    return torch.zeros(num_nodes, dtype=dtype).scatter_add_(0, index, ones)


def dropout_adj(edge_index, p):
    if p == 0.0:
        return edge_index
    keep = torch.rand(edge_index.shape[1]) >= p
    return edge_index[:, keep]


def drop_feature(x, drop_prob):
    drop_mask = torch.empty((x.size(1),), dtype=torch.float32).uniform_(0, 1) < drop_prob
    x = x.clone()
    x[:, drop_mask] = 0
    return x


# -- the graph -------------------------------------------------------------------------------------
y = torch.arange(NUM_NODES) % NUM_CLASSES
same = y.unsqueeze(0) == y.unsqueeze(1)
probs = torch.where(same, torch.tensor(0.35), torch.tensor(0.04))
upper = torch.triu((torch.rand(NUM_NODES, NUM_NODES) < probs).long(), diagonal=1)
edge_index = remove_self_loops(to_undirected(upper.nonzero().t()))
x = torch.randn(NUM_NODES, NUM_FEATURES) * 0.8
x[:, :NUM_CLASSES] += F.one_hot(y, NUM_CLASSES).float()
record.append([edge_index.shape[1]])


# -- model.py ------------------------------------------------------------------------------------
class GCNConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_index):
        edge_index = add_self_loops(edge_index, x.shape[0])
        row, col = edge_index
        deg = degree(col, x.shape[0], dtype=x.dtype)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0)
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, col, norm.view(-1, 1) * h[row])
        return out + self.bias


class Encoder(nn.Module):
    def __init__(self, in_channels, out_channels, k=2):
        super().__init__()
        self.k = k
        self.conv = nn.ModuleList([GCNConv(in_channels, 2 * out_channels)]
                                  + [GCNConv(2 * out_channels, 2 * out_channels) for _ in range(1, k - 1)]
                                  + [GCNConv(2 * out_channels, out_channels)])
        self.activation = nn.ModuleList([nn.PReLU(2 * out_channels) for _ in range(k - 1)]
                                        + [nn.PReLU(out_channels)])

    def forward(self, x, edge_index):
        for i in range(self.k):
            x = self.activation[i](self.conv[i](x, edge_index))
        return x


class GRACE(nn.Module):
    def __init__(self, encoder, num_hidden, num_proj_hidden, tau=0.5):
        super().__init__()
        self.encoder = encoder
        self.tau = tau
        self.fc1 = nn.Linear(num_hidden, num_proj_hidden)
        self.fc2 = nn.Linear(num_proj_hidden, num_hidden)

    def forward(self, x, edge_index):
        return self.encoder(x, edge_index)

    def projection(self, z):
        z = F.elu(self.fc1(z))
        return self.fc2(z)

    def sim(self, z1, z2):
        z1 = F.normalize(z1)
        z2 = F.normalize(z2)
        return torch.mm(z1, z2.t())

    def semi_loss(self, z1, z2):
        f = lambda x: torch.exp(x / self.tau)
        refl_sim = f(self.sim(z1, z1))
        between_sim = f(self.sim(z1, z2))
        return -torch.log(between_sim.diag()
                          / (refl_sim.sum(1) + between_sim.sum(1) - refl_sim.diag()))

    def batched_semi_loss(self, z1, z2, batch_size):
        num_nodes = z1.size(0)
        num_batches = (num_nodes - 1) // batch_size + 1
        f = lambda x: torch.exp(x / self.tau)
        indices = torch.arange(0, num_nodes)
        losses = []
        for i in range(num_batches):
            mask = indices[i * batch_size:(i + 1) * batch_size]
            refl_sim = f(self.sim(z1[mask], z1))
            between_sim = f(self.sim(z1[mask], z2))
            losses.append(-torch.log(
                between_sim[:, i * batch_size:(i + 1) * batch_size].diag()
                / (refl_sim.sum(1) + between_sim.sum(1)
                   - refl_sim[:, i * batch_size:(i + 1) * batch_size].diag())))
        return torch.cat(losses)

    def loss(self, z1, z2, mean=True, batch_size=0):
        h1 = self.projection(z1)
        h2 = self.projection(z2)
        if batch_size == 0:
            l1 = self.semi_loss(h1, h2)
            l2 = self.semi_loss(h2, h1)
        else:
            l1 = self.batched_semi_loss(h1, h2, batch_size)
            l2 = self.batched_semi_loss(h2, h1, batch_size)
        ret = (l1 + l2) * 0.5
        return ret.mean() if mean else ret.sum()


class BGRL(nn.Module):
    def __init__(self, encoder, predictor):
        super().__init__()
        self.online_encoder = encoder
        self.predictor = predictor
        self.target_encoder = copy.deepcopy(encoder)
        self.target_encoder.requires_grad_(False)

    def trainable_parameters(self):
        return list(self.online_encoder.parameters()) + list(self.predictor.parameters())

    @torch.no_grad()
    def update_target_network(self, mm):
        for param_q, param_k in zip(self.online_encoder.parameters(),
                                    self.target_encoder.parameters()):
            param_k.data.mul_(mm).add_(param_q.data, alpha=1.0 - mm)

    def forward(self, x1, e1, x2, e2):
        online_q1 = self.predictor(self.online_encoder(x1, e1))
        online_q2 = self.predictor(self.online_encoder(x2, e2))
        with torch.no_grad():
            target_y1 = self.target_encoder(x1, e1).detach()
            target_y2 = self.target_encoder(x2, e2).detach()
        return online_q1, online_q2, target_y1, target_y2


def cosine_loss(q, y):
    return 2 - 2 * F.cosine_similarity(q, y.detach(), dim=-1).mean()


# -- train.py ------------------------------------------------------------------------------------
epochs, pe, pf = 6, (0.3, 0.4), (0.2, 0.3)
encoder = Encoder(NUM_FEATURES, OUT, k=2)
if METHOD == "bgrl":
    predictor = nn.Sequential(nn.Linear(OUT, 12), nn.BatchNorm1d(12, momentum=0.01), nn.PReLU(1),
                              nn.Linear(12, OUT))
    model = BGRL(encoder, predictor)
    initialize(model)
    optimizer = torch.optim.Adam(model.trainable_parameters(), lr=5e-3, weight_decay=1e-5)
else:
    model = GRACE(encoder, OUT, 10, tau=0.6)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=1e-5)

for epoch in range(1, epochs + 1):
    model.train()
    optimizer.zero_grad()
    edge_index_1 = dropout_adj(edge_index, p=pe[0])
    edge_index_2 = dropout_adj(edge_index, p=pe[1])
    x_1 = drop_feature(x, pf[0])
    x_2 = drop_feature(x, pf[1])
    if METHOD == "bgrl":
        q1, q2, y1, y2 = model(x_1, edge_index_1, x_2, edge_index_2)
        loss = cosine_loss(q1, y2) + cosine_loss(q2, y1)
    else:
        z1 = model(x_1, edge_index_1)
        z2 = model(x_2, edge_index_2)
        loss = model.loss(z1, z2, batch_size=12 if METHOD == "grace_batched" else 0)
    loss.backward()
    optimizer.step()
    if METHOD == "bgrl":
        mm = 1 - (1 - 0.9) * (math.cos(math.pi * epoch / epochs) + 1) / 2
        model.update_target_network(mm)
    record.append([loss.item(), edge_index_1.shape[1], edge_index_2.shape[1]])
    if epoch % 3 == 0:
        record.append(params_of(model))
        print(f"(T) | Epoch={epoch:03d}, loss={loss.item():.4f}")


# -- eval.py: a logistic-regression probe on the frozen embeddings --------------------------------
model.eval()
with torch.no_grad():
    z = (model.online_encoder if METHOD == "bgrl" else model)(x, edge_index).detach()
z = (z - z.mean(0)) / (z.std(0) + 1e-8)
train_mask = torch.arange(NUM_NODES) % 2 == 0
test_mask = ~train_mask
classifier = nn.Linear(OUT, NUM_CLASSES)
initialize(classifier)
probe_optimizer = torch.optim.Adam(classifier.parameters(), lr=0.05, weight_decay=1e-4)
for step in range(15):
    probe_optimizer.zero_grad()
    probe_loss = F.cross_entropy(classifier(z[train_mask]), y[train_mask])
    probe_loss.backward()
    probe_optimizer.step()
with torch.no_grad():
    pred = classifier(z).argmax(dim=1)
    accuracy = pred[test_mask].eq(y[test_mask]).float().mean()
record.append([probe_loss.item(), accuracy.item()])
record.append(z.numpy().copy())
"""

GRAPH_SSL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "    probe_loss.backward()\n    probe_optimizer.step()\n",
        "    grads = probe_loss.backward()\n    probe_optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("method", ["grace", "grace_batched", "bgrl"])
def test_grace_and_bgrl_graph_self_supervision_as_torch(capsys, method):
    with SharedFills(torch, 8004), SharedFills(rg, 8004):
        (theirs, ours), (their_log, our_log) = runs_with_draws(
            GRAPH_SSL_SOURCE,
            GRAPH_SSL_STEPS,
            capsys,
            8004,
            initialize=initializer(),
            params_of=params_of,
            METHOD=method,
        )
    assert len(theirs) == 1 + 6 + 2 + 2
    assert their_log == our_log and their_log.count("\n") == 2
    # the bias of the predictor's Linear before its BatchNorm has a true gradient of zero (the
    # batch mean removes it): Adam's steps on it follow the rounding noise
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=("0.predictor.0.bias",))
