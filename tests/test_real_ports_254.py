# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
lottery-ticket iterative magnitude pruning with weight rewinding as
rahulvigneswaran/Lottery-Ticket-Hypothesis-in-Pytorch writes it (``main.py``'s
``prune_by_percentile``, ``make_mask``, ``original_initialization``, ``train`` freezing pruned
weights by zeroing their gradients in NumPy, ``test``; ``utils.py``'s ``print_nonzeros``;
``archs/mnist/fc1.py``), three pruning rounds, against torch's run of the same code from the
same weights. Cut down: a 16-24-12-4 ``fc1`` on synthetic rows; the ``weight_init`` draws
replaced by torch's weights loaded into both; ``.to(device)`` kept.

What it exercises: ``global`` model and mask rebinding; ``param.data.cpu().numpy()``;
``np.percentile(abs(alive), percent)`` of ``tensor[np.nonzero(tensor)]``;
``param.data = torch.from_numpy(tensor * new_mask).to(weight_dev)`` replacing a parameter's
values under an optimizer; ``param.data = initial_state_dict[name]`` (the rewind, from a
``copy.deepcopy(model.state_dict())``); ``p.grad.data = torch.from_numpy(grad_tensor)``
replacing a gradient before ``optimizer.step()`` (the author's ``tensor < EPS`` freezes the
negative weights too: kept as written); ``F.nll_loss(..., reduction='sum')`` on logits;
``pred.eq(target.data.view_as(pred))``; the f-string table of nonzeros (printed logs equal).

The lines changed: the ``import`` lines and the gradient lines (``grads =
train_loss.backward()``; ``p.grad`` read from ``grads``; ``optimizer.step(grads)``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


LOTTERY_SOURCE = """
import copy
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class fc1(nn.Module):

    def __init__(self, num_classes=4):
        super(fc1, self).__init__()
        self.classifier = nn.Sequential(
            nn.Linear(16, 24),
            nn.ReLU(inplace=True),
            nn.Linear(24, 12),
            nn.ReLU(inplace=True),
            nn.Linear(12, num_classes),
        )

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


def print_nonzeros(model):
    nonzero = total = 0
    for name, p in model.named_parameters():
        tensor = p.data.cpu().numpy()
        nz_count = np.count_nonzero(tensor)
        total_params = np.prod(tensor.shape)
        nonzero += nz_count
        total += total_params
        print(f'{name:20} | nonzeros = {nz_count:7} / {total_params:7} ({100 * nz_count / total_params:6.2f}%) | total_pruned = {total_params - nz_count :7} | shape = {tensor.shape}')
    print(f'alive: {nonzero}, pruned : {total - nonzero}, total: {total}, Compression rate : {total/nonzero:10.2f}x  ({100 * (total-nonzero) / total:6.2f}% pruned)')
    return (round((nonzero/total)*100,1))


# Function for Training
def train(model, train_loader, optimizer, criterion):
    EPS = 1e-6
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.train()
    for batch_idx, (imgs, targets) in enumerate(train_loader):
        optimizer.zero_grad()
        #imgs, targets = next(train_loader)
        imgs, targets = imgs.to(device), targets.to(device)
        output = model(imgs)
        train_loss = criterion(output, targets)
        train_loss.backward()

        # Freezing Pruned weights by making their gradients Zero
        for name, p in model.named_parameters():
            if 'weight' in name:
                tensor = p.data.cpu().numpy()
                grad_tensor = p.grad.data.cpu().numpy()
                grad_tensor = np.where(tensor < EPS, 0, grad_tensor)
                p.grad.data = torch.from_numpy(grad_tensor).to(device)
        optimizer.step()
    return train_loss.item()


# Function for Testing
def test(model, test_loader, criterion):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.data.max(1, keepdim=True)[1]  # get the index of the max log-probability
            correct += pred.eq(target.data.view_as(pred)).sum().item()
        test_loss /= len(test_loader.dataset)
        accuracy = 100. * correct / len(test_loader.dataset)
    return accuracy


# Prune by Percentile module
def prune_by_percentile(percent, resample=False, reinit=False,**kwargs):
        global step
        global mask
        global model

        # Calculate percentile value
        step = 0
        for name, param in model.named_parameters():

            # We do not prune bias term
            if 'weight' in name:
                tensor = param.data.cpu().numpy()
                alive = tensor[np.nonzero(tensor)] # flattened array of nonzero values
                percentile_value = np.percentile(abs(alive), percent)

                # Convert Tensors to numpy and calculate
                weight_dev = param.device
                new_mask = np.where(abs(tensor) < percentile_value, 0, mask[step])

                # Apply new weight and mask
                param.data = torch.from_numpy(tensor * new_mask).to(weight_dev)
                mask[step] = new_mask
                step += 1
        step = 0


# Function to make an empty mask of the same size as the model
def make_mask(model):
    global step
    global mask
    step = 0
    for name, param in model.named_parameters():
        if 'weight' in name:
            step = step + 1
    mask = [None]* step
    step = 0
    for name, param in model.named_parameters():
        if 'weight' in name:
            tensor = param.data.cpu().numpy()
            mask[step] = np.ones_like(tensor)
            step = step + 1
    step = 0


def original_initialization(mask_temp, initial_state_dict):
    global model

    step = 0
    for name, param in model.named_parameters():
        if "weight" in name:
            weight_dev = param.device
            param.data = torch.from_numpy(mask_temp[step] * initial_state_dict[name].cpu().numpy()).to(weight_dev)
            step = step + 1
        if "bias" in name:
            param.data = initial_state_dict[name]
    step = 0


class Loader(list):
    dataset = property(lambda self: [row for x, _ in self for row in x])


train_loader = Loader((torch.tensor(x), torch.tensor(y)) for x, y in train_rows)
test_loader = Loader((torch.tensor(x), torch.tensor(y)) for x, y in test_rows)
ITERATION, end_iter, valid_freq, prune_percent, lr = 3, 4, 2, 30, 1.2e-2

model = fc1()
initialize(model)

# Copying and Saving Initial State
initial_state_dict = copy.deepcopy(model.state_dict())

# Making Initial Mask
make_mask(model)

optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
criterion = nn.CrossEntropyLoss() # Default was F.nll_loss

for _ite in range(0, ITERATION):
    if not _ite == 0:
        prune_by_percentile(prune_percent, resample=False, reinit=False)
        original_initialization(mask, initial_state_dict)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
    print(f"\\n--- Pruning Level [{_ite}/{ITERATION}]: ---")

    # Print the table of Nonzeros in each layer
    comp1 = print_nonzeros(model)
    record.append(comp1)
    record.append(params_of(model))
    for iter_ in range(end_iter):
        # Frequency for Testing
        if iter_ % valid_freq == 0:
            accuracy = test(model, test_loader, criterion)
            record.append(accuracy)
        # Training
        loss = train(model, train_loader, optimizer, criterion)
        record.append(loss)
    record.append(params_of(model))
    record.append({str(i): m.copy() for i, m in enumerate(mask)})
"""

LOTTERY_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F",
    ),
    ("        train_loss.backward()\n", "        grads = train_loss.backward()\n"),
    ("grad_tensor = p.grad.data.cpu()", "grad_tensor = p.grad(grads).data.cpu()"),
    (
        "                p.grad.data = torch.from_numpy",
        "                p.grad(grads).data = torch.from_numpy",
    ),
    (
        "        optimizer.step()\n    return train_loss.item()",
        "        optimizer.step(grads)\n    return train_loss.item()",
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
    # each round pruned 30% of the surviving weights (comp1 opens each round of 10 records)
    assert theirs[0] == 100.0 > theirs[10] > theirs[20]
    assert "[2/3]" in their_log
