"""Real ports, round 80 (the harness: ``tests/real_ports.py``): a message-passing neural
network for molecular property regression, a program written here in the style of Gilmer et
al.'s MPNN as the plain-torch reimplementations write it (PyG's ``examples/qm9_nn_conv.py``
without PyG: an edge network ``NNConv``, a GRU update, a ``Set2Set`` readout), on random
molecule-like graphs batched into one disjoint graph; three configurations (messages summed by
``index_add_`` and averaged by degree, max-pooled by ``scatter_reduce``, weighted by an edge
softmax), each run under torch and, ported, under retrograd from the same weights and draws,
every record compared.

It reaches:

- the data: graphs of ``torch.randint`` sizes, node features one-hot by ``F.one_hot(...,
  num_classes=).float()``, random bonds made undirected by ``torch.cat([src, dst])``/``[dst,
  src]`` and deduplicated by ``torch.unique(..., dim=1, return_inverse=True)``, each bond's
  features ``torch.randn(...).repeat(2, 1)`` merged over duplicates by ``scatter_reduce_(0,
  inverse.unsqueeze(-1).expand(-1, d), ..., reduce="max", include_self=False)`` (torch_scatter's
  spelling, which torch's forward takes for ``amax``), a target from a fixed random function of
  the graph; a ``collate`` batching graphs by offsetting
  ``edge_index`` with a running node count, a ``batch`` vector from ``torch.full`` per graph
  ``torch.cat``-ed, the target standardised by ``mean``/``std``;
- the edge network: ``nn.Sequential(nn.Linear, nn.ReLU, nn.Linear)`` giving a
  ``(in, out)`` matrix per edge ``.view(-1, in, out)``, messages ``torch.bmm(x[src]
  .unsqueeze(1), weight).squeeze(1)``; aggregation by ``torch.zeros(...).index_add_(0, dst,
  messages)`` over a degree ``.clamp(min=1)``, by ``scatter_reduce(0, index, src,
  reduce="amax", include_self=False)`` over ``dst.unsqueeze(-1).expand_as(messages)``, or by
  an edge softmax (scores through ``F.leaky_relu(..., 0.2)``, the per-node maximum by
  ``scatter_reduce`` with ``include_self=False`` gathered back, ``exp``, sums by
  ``index_add_``), a root weight ``nn.Linear(..., bias=False)`` and a bias ``nn.Parameter``;
- the update: ``nn.GRU`` over a length-1 sequence ``out.unsqueeze(0)`` with the hidden state
  carried ``h`` through two steps, ``squeeze(0)``;
- the readout ``Set2Set``: ``nn.LSTM(2 * dim, dim, num_layers=1)`` stepped ``processing_steps``
  times from ``x.new_zeros((batch_size, 2 * dim))``, attention ``(x * q[batch]).sum(dim=-1,
  keepdim=True)``, a segment softmax (``scatter_reduce`` ``amax`` ``include_self=False``,
  ``index_add_``), ``r = torch.zeros(...).index_add_(0, batch, a * x)``, ``torch.cat([q, r],
  dim=-1)``;
- training: ``F.l1_loss`` (``mse_loss`` logged), ``Adam``, ``ReduceLROnPlateau(mode="min",
  factor=0.7, patience=0, min_lr=1e-5)`` stepped on the validation error; evaluation under
  ``torch.no_grad()`` with the error de-standardised by ``* std``, ``torch.save``/``torch.load``
  of the ``state_dict`` through a buffer into a fresh model.

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

MPNN_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_ATOM_TYPES, EDGE_DIM, DIM = 4, 3, 8


# -- the data ------------------------------------------------------------------------------------
def random_molecule():
    n = int(torch.randint(3, 7, (1,)).item())
    atoms = torch.randint(0, NUM_ATOM_TYPES, (n,))
    x = F.one_hot(atoms, num_classes=NUM_ATOM_TYPES).float()
    chain = torch.arange(n - 1)
    extra = torch.randint(0, n, (2, 2))
    src = torch.cat([chain, extra[0]])
    dst = torch.cat([chain + 1, extra[1]])
    keep = src != dst
    src, dst = src[keep], dst[keep]
    both = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    bond_attr = torch.randn(src.shape[0], EDGE_DIM).repeat(2, 1)
    # a bond drawn twice keeps the larger of its features (torch_scatter's reduce="max")
    edge_index, inverse = torch.unique(both, dim=1, return_inverse=True)
    edge_attr = torch.zeros(edge_index.shape[1], EDGE_DIM).scatter_reduce_(
        0, inverse.unsqueeze(-1).expand(-1, EDGE_DIM), bond_attr, reduce="max", include_self=False)
    y = (x[:, 0].sum() - 0.5 * x[:, 1].sum() + 0.3 * edge_attr[:, 0].mean()
         + 0.1 * edge_index.shape[1])
    return {"x": x, "edge_index": edge_index, "edge_attr": edge_attr, "y": y.reshape(1)}


def collate(graphs):
    xs, edges, attrs, ys, batch = [], [], [], [], []
    offset = 0
    for i, g in enumerate(graphs):
        xs.append(g["x"])
        edges.append(g["edge_index"] + offset)
        attrs.append(g["edge_attr"])
        ys.append(g["y"])
        batch.append(torch.full((g["x"].shape[0],), i, dtype=torch.long))
        offset += g["x"].shape[0]
    return (torch.cat(xs), torch.cat(edges, dim=1), torch.cat(attrs), torch.cat(batch),
            torch.cat(ys))


# -- the layers ----------------------------------------------------------------------------------
def segment_softmax(scores, index, num_segments):
    expanded = index.unsqueeze(-1).expand_as(scores)
    maxima = torch.zeros(num_segments, scores.shape[1], dtype=scores.dtype).scatter_reduce(
        0, expanded, scores, reduce="amax", include_self=False)
    exp = (scores - maxima[index]).exp()
    sums = torch.zeros(num_segments, scores.shape[1], dtype=scores.dtype).index_add_(0, index, exp)
    return exp / sums[index]


class NNConv(nn.Module):
    def __init__(self, in_channels, out_channels, edge_net, aggr="mean"):
        super().__init__()
        self.in_channels, self.out_channels, self.aggr = in_channels, out_channels, aggr
        self.edge_net = edge_net
        self.root = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        if aggr == "attention":
            self.att = nn.Parameter(torch.randn(out_channels) * 0.3)

    def forward(self, x, edge_index, edge_attr):
        src, dst = edge_index
        weight = self.edge_net(edge_attr).view(-1, self.in_channels, self.out_channels)
        messages = torch.bmm(x[src].unsqueeze(1), weight).squeeze(1)
        n = x.shape[0]
        if self.aggr == "mean":
            summed = torch.zeros(n, self.out_channels).index_add_(0, dst, messages)
            degree = torch.zeros(n).index_add_(0, dst, torch.ones(dst.shape[0]))
            aggregated = summed / degree.clamp(min=1).unsqueeze(-1)
        elif self.aggr == "max":
            index = dst.unsqueeze(-1).expand_as(messages)
            aggregated = torch.zeros(n, self.out_channels).scatter_reduce(
                0, index, messages, reduce="amax", include_self=False)
        else:
            scores = F.leaky_relu((messages * self.att).sum(dim=-1, keepdim=True), 0.2)
            alpha = segment_softmax(scores, dst, n)
            aggregated = torch.zeros(n, self.out_channels).index_add_(0, dst, alpha * messages)
        return aggregated + self.root(x) + self.bias


class Set2Set(nn.Module):
    def __init__(self, in_channels, processing_steps):
        super().__init__()
        self.in_channels = in_channels
        self.processing_steps = processing_steps
        self.lstm = nn.LSTM(2 * in_channels, in_channels, num_layers=1)

    def forward(self, x, batch, batch_size):
        h = (x.new_zeros((1, batch_size, self.in_channels)),
             x.new_zeros((1, batch_size, self.in_channels)))
        q_star = x.new_zeros((batch_size, 2 * self.in_channels))
        for _ in range(self.processing_steps):
            q, h = self.lstm(q_star.unsqueeze(0), h)
            q = q.view(batch_size, self.in_channels)
            e = (x * q[batch]).sum(dim=-1, keepdim=True)
            a = segment_softmax(e, batch, batch_size)
            r = torch.zeros(batch_size, self.in_channels).index_add_(0, batch, a * x)
            q_star = torch.cat([q, r], dim=-1)
        return q_star


class MPNN(nn.Module):
    def __init__(self, aggr):
        super().__init__()
        self.lin0 = nn.Linear(NUM_ATOM_TYPES, DIM)
        edge_net = nn.Sequential(nn.Linear(EDGE_DIM, 16), nn.ReLU(), nn.Linear(16, DIM * DIM))
        self.conv = NNConv(DIM, DIM, edge_net, aggr=aggr)
        self.gru = nn.GRU(DIM, DIM)
        self.set2set = Set2Set(DIM, processing_steps=2)
        self.lin1 = nn.Linear(2 * DIM, DIM)
        self.lin2 = nn.Linear(DIM, 1)

    def forward(self, x, edge_index, edge_attr, batch, batch_size):
        out = F.relu(self.lin0(x))
        h = out.unsqueeze(0)
        for _ in range(2):
            m = F.relu(self.conv(out, edge_index, edge_attr))
            out, h = self.gru(m.unsqueeze(0), h)
            out = out.squeeze(0)
        out = self.set2set(out, batch, batch_size)
        out = F.relu(self.lin1(out))
        return self.lin2(out).view(-1)


# -- training ------------------------------------------------------------------------------------
graphs = [random_molecule() for _ in range(18)]
train_graphs, val_graphs = graphs[:12], graphs[12:]
all_y = torch.cat([g["y"] for g in train_graphs])
mean, std = all_y.mean(), all_y.std()
record.append([mean.item(), std.item()])

model = MPNN(AGGR)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.7,
                                                       patience=0, min_lr=1e-5)


def evaluate(model, graphs):
    model.eval()
    with torch.no_grad():
        x, edge_index, edge_attr, batch, y = collate(graphs)
        pred = model(x, edge_index, edge_attr, batch, len(graphs))
        return (pred * std + mean - y).abs().mean().item()


for epoch in range(2):
    model.train()
    for start in range(0, len(train_graphs), 6):
        chunk = train_graphs[start:start + 6]
        x, edge_index, edge_attr, batch, y = collate(chunk)
        optimizer.zero_grad()
        pred = model(x, edge_index, edge_attr, batch, len(chunk))
        loss = F.l1_loss(pred, (y - mean) / std)
        loss.backward()
        optimizer.step()
        record.append([loss.item(), F.mse_loss(pred, (y - mean) / std).item()])
    val_error = evaluate(model, val_graphs)
    scheduler.step(val_error)
    record.append([val_error, optimizer.param_groups[0]["lr"]])
    record.append(params_of(model))
    print(f"epoch {epoch} val MAE {val_error:.4f}")

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = MPNN(AGGR)
restored.load_state_dict(torch.load(buffer))
record.append([evaluate(restored, val_graphs)])
with torch.no_grad():
    x, edge_index, edge_attr, batch, y = collate(val_graphs)
    record.append(restored(x, edge_index, edge_attr, batch, len(val_graphs)).numpy().copy())
"""

MPNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("aggr", ["mean", "max", "attention"])
def test_mpnn_with_edge_network_gru_and_set2set_as_torch(capsys, aggr):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        MPNN_SOURCE,
        MPNN_STEPS,
        capsys,
        8002,
        initialize=initializer(),
        params_of=params_of,
        AGGR=aggr,
    )
    assert len(theirs) == 1 + 2 * 4 + 2
    assert their_log == our_log and their_log.count("\n") == 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
