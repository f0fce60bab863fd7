"""Real ports, round 69 (the harness: ``tests/real_ports.py``): deep neural decision forests, a
program written here in the style of the public PyTorch ports of Kontschieder et al.'s
"Deep Neural Decision Forests" (a feature layer feeding soft trees whose split nodes are
sigmoids of randomly chosen features, leaf class distributions updated by the paper's
fixed-point rule under ``no_grad`` between gradient epochs), on synthetic tabular data,
against torch's run of the same program from the same weights and draws.

- the trees: a feature-choice matrix built by ``np.random.choice`` without replacement and kept
  by ``register_buffer`` as a one-hot ``torch.from_numpy(...).float()``; the split decisions
  ``torch.sigmoid(torch.mm(feats, self.feature_mask))``, ``d.unsqueeze(2)`` concatenated with
  ``1 - d`` on a new last axis; the routing probabilities ``mu`` grown depth by depth by
  ``mu.view(batch, -1, 1).repeat(1, 1, 2)`` times a slice ``decision[:, begin:end, :]`` of the
  decisions, reshaped back with ``.view(batch, n_leaf)``; the leaves' class distributions a
  ``nn.Parameter(..., requires_grad=False)`` filled by ``torch.rand`` and normalised by
  ``F.softmax``;
- the forest: ``nn.ModuleList`` of trees, ``torch.stack(..., dim=2).sum(dim=2) / n_tree``,
  the loss ``F.nll_loss(torch.log(p))``;
- the leaf update: one-hot targets by ``torch.zeros(...).scatter_(1, y.view(-1, 1), 1.)``,
  ``torch.einsum("bc,lc,bl->lc", ...)`` over batches accumulated in place (``+=``) with
  ``torch.where(prob > 0, ..., ...)`` guarding a division, then ``new_pi / new_pi.sum(1,
  keepdim=True)`` copied into the parameter's ``.data`` by ``copy_``;
- training: ``optim.Adam`` over only the parameters with ``requires_grad`` (``filter``),
  ``weight_decay``, ``lr_scheduler.StepLR``, ``clip_grad_value_`` (a value clip), mini-batches
  by ``torch.split`` of a permutation made by ``np.random.permutation``;
- evaluation under ``torch.no_grad()`` with ``model.eval()``: ``argmax``, ``(pred ==
  y).float().mean()``, the routing entropy by ``torch.special.entr``; a checkpoint of the
  ``state_dict`` (buffers included) saved to a buffer and loaded into a fresh forest.

The lines changed for the port: the ``import`` lines and the gradient lines (``backward()``
returns the gradients, ``clip_grad_value_`` and ``step`` take them).
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

NDF_SOURCE = """
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureLayer(nn.Sequential):
    def __init__(self, n_in, n_hidden, dropout):
        super(FeatureLayer, self).__init__()
        self.add_module("linear1", nn.Linear(n_in, n_hidden))
        self.add_module("relu1", nn.ReLU())
        self.add_module("drop1", nn.Dropout(dropout))
        self.add_module("linear2", nn.Linear(n_hidden, n_hidden))
        self.add_module("tanh2", nn.Tanh())

    def get_out_feature_size(self):
        return self.linear2.out_features


class Tree(nn.Module):
    def __init__(self, depth, n_in_feature, used_feature_rate, n_class):
        super(Tree, self).__init__()
        self.depth = depth
        self.n_leaf = 2**depth
        self.n_class = n_class
        n_used_feature = int(n_in_feature * used_feature_rate)
        onehot = np.eye(n_in_feature)
        using_idx = np.random.choice(np.arange(n_in_feature), n_used_feature, replace=False)
        self.register_buffer("feature_mask", torch.from_numpy(onehot[using_idx].T).float())
        self.pi = nn.Parameter(torch.rand(self.n_leaf, n_class), requires_grad=False)
        self.pi.data = F.softmax(self.pi.data * 4.0, dim=-1)
        self.decision = nn.Sequential(nn.Linear(n_used_feature, self.n_leaf), nn.Sigmoid())

    def forward(self, x):
        feats = torch.mm(x, self.feature_mask)
        d = self.decision(feats)  # (batch, n_leaf): the first n_leaf - 1 are split nodes
        d = torch.unsqueeze(d, dim=2)
        decision = torch.cat((d, 1 - d), dim=2)
        batch = x.size(0)
        mu = x.new_ones(batch, 1, 1)
        begin, end = 1, 2
        for n_layer in range(self.depth):
            mu = mu.view(batch, -1, 1).repeat(1, 1, 2)
            layer = decision[:, begin:end, :]
            mu = mu * layer
            begin = end
            end = begin + 2 ** (n_layer + 1)
        return mu.view(batch, self.n_leaf)

    def get_pi(self):
        return self.pi

    def cal_prob(self, mu, pi):
        return torch.mm(mu, pi)

    def update_pi(self, new_pi):
        self.pi.data.copy_(new_pi)


class Forest(nn.Module):
    def __init__(self, n_tree, depth, n_in, used_feature_rate, n_class):
        super(Forest, self).__init__()
        self.trees = nn.ModuleList(
            [Tree(depth, n_in, used_feature_rate, n_class) for _ in range(n_tree)]
        )
        self.n_tree = n_tree

    def forward(self, x):
        probs = []
        for tree in self.trees:
            mu = tree(x)
            probs.append(tree.cal_prob(mu, tree.get_pi()).unsqueeze(2))
        probs = torch.cat(probs, dim=2)
        return torch.sum(probs, dim=2) / self.n_tree


class NeuralDecisionForest(nn.Module):
    def __init__(self, feature_layer, forest):
        super(NeuralDecisionForest, self).__init__()
        self.feature_layer = feature_layer
        self.forest = forest

    def forward(self, x):
        return self.forest(self.feature_layer(x))


def make_data(n, n_in, n_class):
    centers = np.random.randn(n_class, n_in) * 1.5
    y = np.random.randint(0, n_class, size=n)
    x = centers[y] + np.random.randn(n, n_in)
    return torch.from_numpy(x).float(), torch.from_numpy(y).long()


def update_leaves(model, x, y, n_class, batch_size):
    # the fixed-point update of each tree's leaf distributions (Kontschieder et al., eq. 11)
    model.eval()
    with torch.no_grad():
        feats = model.feature_layer(x)
        target = torch.zeros(x.size(0), n_class).scatter_(1, y.view(-1, 1), 1.0)
        for tree in model.forest.trees:
            pi = tree.get_pi()
            new_pi = torch.zeros_like(pi)
            for f, t in zip(torch.split(feats, batch_size), torch.split(target, batch_size)):
                mu = tree(f)
                prob = tree.cal_prob(mu, pi)
                safe = torch.where(prob > 0, prob, torch.ones_like(prob))
                new_pi += torch.einsum("bc,lc,bl->lc", t / safe, pi, mu)
            tree.update_pi(new_pi / new_pi.sum(1, keepdim=True))
    model.train()


n_in, n_class, n_hidden = 6, 3, 12
x_train, y_train = make_data(96, n_in, n_class)
x_test, y_test = make_data(48, n_in, n_class)

feature_layer = FeatureLayer(n_in, n_hidden, dropout=0.0)
forest = Forest(n_tree=3, depth=3, n_in=feature_layer.get_out_feature_size(),
                used_feature_rate=0.5, n_class=n_class)
model = NeuralDecisionForest(feature_layer, forest)
initialize(model)
record.append([p.requires_grad for p in model.parameters()].count(False))
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.Adam(params, lr=0.01, weight_decay=1e-5)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

batch_size = 32
for epoch in range(4):
    update_leaves(model, x_train, y_train, n_class, batch_size)
    record.append(model.forest.trees[0].pi.detach().numpy().copy())
    perm = torch.from_numpy(np.random.permutation(x_train.size(0)))
    losses = []
    for idx in torch.split(perm, batch_size):
        data, target = x_train[idx], y_train[idx]
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(torch.log(output), target)
        loss.backward()
        torch.nn.utils.clip_grad_value_(params, 0.5)
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    record.append(losses)
    print("epoch {} loss {:.4f} lr {:.5f}".format(epoch, np.mean(losses),
                                                  scheduler.get_last_lr()[0]))

record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = NeuralDecisionForest(FeatureLayer(n_in, n_hidden, dropout=0.0),
                                Forest(3, 3, n_hidden, 0.5, n_class))
restored.load_state_dict(torch.load(buffer))
restored.eval()
with torch.no_grad():
    probs = restored(x_test)
    pred = probs.argmax(dim=1)
    accuracy = (pred == y_test).float().mean().item()
    mu = restored.forest.trees[1](restored.feature_layer(x_test))
    entropy = torch.special.entr(mu).sum(dim=1).mean().item()
    record.append([accuracy, entropy, probs.sum(dim=1).sub(1).abs().max().item() < 1e-5])
    record.append(probs.numpy().copy())
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 restored.state_dict().values()))
    record.append(same)
"""

NDF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_value_(params, 0.5)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_value_(grads, params, 0.5)\n"
        "        optimizer.step(grads)\n",
    ),
]


def test_neural_decision_forest_trains_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        NDF_SOURCE, NDF_STEPS, capsys, 6901, initialize=initializer()
    )
    assert len(theirs) == 2 + 4 * 2 + 1 + 3
    assert theirs[0] == 3  # the three trees' leaf distributions are not trained by Adam
    assert theirs[-1] is True and theirs[-3][2] is True
    assert their_log == our_log and their_log.count("\n") == 4
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
