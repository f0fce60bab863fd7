"""Real ports, continued (the harness: ``tests/real_ports.py``): lottery-ticket iterative
magnitude pruning with weight rewinding, a program written here in the style of
rahulvigneswaran/Lottery-Ticket-Hypothesis-in-Pytorch (a small fully connected classifier on
synthetic rows, three pruning rounds), run under torch and ported, from the same weights.

The surface it exercises: ``global`` rebinding of the model and the mask list;
``param.data.cpu().numpy()``; ``np.percentile(abs(alive), q)`` of ``w[np.nonzero(w)]``;
``param.data = torch.from_numpy(w * mask).to(param.device)`` replacing a parameter's values
under an optimizer; ``param.data = start[name]`` rewinding from a
``copy.deepcopy(model.state_dict())``; ``p.grad.data = torch.from_numpy(g).to(device)``
replacing a gradient before ``optimizer.step()`` (pruned weights frozen); ``torch.device("cuda"
if torch.cuda.is_available() else "cpu")``; ``nn.ReLU(inplace=True)`` in an ``nn.Sequential``
after ``torch.flatten(x, 1)``; ``Adam(weight_decay=...)``; ``F.nll_loss(..., reduction="sum")``
on logits; ``output.data.max(1, keepdim=True)[1]`` and ``pred.eq(target.data.view_as(pred))``;
an f-string table of nonzeros with NumPy shapes (the printed logs must be equal).

Regressions guarded: assigning ``.data`` of a parameter (and of its gradient) from a NumPy
array keeps the optimizer's parameter and dtype; ``state_dict`` deep copies rewinding values.
The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``;
``p.grad`` read from ``grads``; ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

LOTTERY_SOURCE = """
import copy
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

device = torch.device("cpu" if not torch.cuda.is_available() else "cuda")


class Dense(nn.Module):
    def __init__(self, n_in=16, n_out=4):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(n_in, 20), nn.ReLU(inplace=True), nn.Linear(20, n_out)
        )

    def forward(self, x):
        return self.layers(torch.flatten(x, 1))


def sparsity_table(net):
    kept = size = 0
    for name, p in net.named_parameters():
        w = p.data.cpu().numpy()
        alive, count = np.count_nonzero(w), w.size
        kept, size = kept + alive, size + count
        print(f"{name:16}|{alive:5} of {count:5} alive ({alive / count:7.2%}) shape {w.shape}")
    print(f"total {kept}/{size}: {size / kept:.2f}x smaller")
    return round(100 * kept / size, 1)


def fit(net, batches, opt, loss_fn):
    net.train()
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        # a pruned weight gets no gradient, so Adam never revives it
        for name, p in net.named_parameters():
            if name.endswith("weight"):
                g = p.grad.data.cpu().numpy()
                g = np.where(np.abs(p.data.cpu().numpy()) < 1e-7, 0, g)
                p.grad.data = torch.from_numpy(g).to(device)
        opt.step()
    return loss.item()


def accuracy(net, batches):
    net.eval()
    hits, nll = 0, 0.0
    with torch.no_grad():
        for x, y in batches:
            out = net(x.to(device))
            nll += F.nll_loss(out, y, reduction="sum").item()
            guess = out.data.max(1, keepdim=True)[1]
            hits += guess.eq(y.data.view_as(guess)).sum().item()
    return [100.0 * hits / len(batches.dataset), nll]


def prune(q):
    # drop the q% smallest surviving weights of each layer
    global masks
    layer = 0
    for name, param in net.named_parameters():
        if name.endswith("weight"):
            w = param.data.cpu().numpy()
            cut = np.percentile(abs(w[np.nonzero(w)]), q)
            masks[layer] = np.where(abs(w) < cut, 0, masks[layer])
            param.data = torch.from_numpy(w * masks[layer]).to(param.device)
            layer += 1


def rewind(start):
    # surviving weights back to their first values, biases too
    layer = 0
    for name, param in net.named_parameters():
        if name.endswith("bias"):
            param.data = start[name]
            continue
        first = start[name].cpu().numpy()
        param.data = torch.from_numpy(masks[layer] * first).to(param.device)
        layer += 1


class Batches(list):
    @property
    def dataset(self):  # one entry per row, as a DataLoader's dataset
        return [row for x, _ in self for row in x]


train_set = Batches((torch.tensor(x), torch.tensor(y)) for x, y in train_rows)
test_set = Batches((torch.tensor(x), torch.tensor(y)) for x, y in test_rows)

net = Dense()
initialize(net)
start = copy.deepcopy(net.state_dict())
masks = [np.ones_like(p.data.cpu().numpy()) for n, p in net.named_parameters() if "weight" in n]
for level in range(3):
    if level:
        prune(30)
        rewind(start)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-4)
    print(f"round {level}")
    record.append(sparsity_table(net))
    for epoch in range(3):
        if epoch % 2 == 0:
            record.append(accuracy(net, test_set))
        record.append(fit(net, train_set, opt, nn.CrossEntropyLoss()))
    record.append(params_of(net))
    record.append({str(i): m.copy() for i, m in enumerate(masks)})
"""

LOTTERY_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("g = p.grad.data.cpu()", "g = p.grad(grads).data.cpu()"),
    (
        "                p.grad.data = torch.from_numpy",
        "                p.grad(grads).data = torch.from_numpy",
    ),
    (
        "        opt.step()\n    return loss.item()",
        "        opt.step(grads)\n    return loss.item()",
    ),
]


def test_lottery_ticket_prunes_by_magnitude_and_rewinds_as_torch(capsys):
    rng = np.random.default_rng(25401)
    centres = rng.standard_normal((4, 16)) * 1.5

    def rows(n):
        out = []
        for _ in range(n):
            labels = rng.integers(0, 4, 8)
            out.append(
                ((centres[labels] + rng.standard_normal((8, 16))).astype(np.float32), labels)
            )
        return out

    train_rows, test_rows = rows(3), rows(2)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        LOTTERY_SOURCE, LOTTERY_STEPS, capsys, 25401, train_rows=train_rows,
        test_rows=test_rows, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert our_log == their_log
    # each round pruned 30% of the surviving weights (the sparsity opens each round's 8 records)
    assert theirs[0] == 100.0 > theirs[8] > theirs[16]
    assert "round 2" in their_log
