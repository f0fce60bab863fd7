"""More official PyTorch examples (github.com/pytorch/examples at 77f55b9, BSD-3-Clause)
ported as in ``test_example_ports.py``: the script's text as torch runs it, the port made from
it by changing only the gradient lines (:func:`port`), both run in float64 from torch's
weights and the same random draws, agreeing to 1e-9 at every step.

- ``mnist_rnn/main.py``: ``nn.LSTM(batch_first=True)``, ``BatchNorm1d`` on ``[N, C]``,
  ``Dropout2d`` on a 2-d input (torch's deprecated element-wise behaviour), ``output[:, -1, :]``,
  Adadelta, StepLR;
"""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from test_example_ports import namespaces, port, state_of
from test_example_ports_2 import assert_records_agree


class Masks:
    """One seeded stream of dropout keep-masks for both libraries. retrograd draws its own
    masks (``rng.random(shape) < 1 - p``) from the generator ``rg.manual_seed`` seeds, so the
    port runs the library's dropout itself; torch's dropout functions are replaced by the same
    draw over the mask shape torch documents (``x.shape`` for ``dropout``, ``[N, C, 1, ...]``
    for ``dropout2d``, which ``feature_dropout`` gives any input of 2 or more dimensions)."""

    def __init__(self, seed: int):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        if lib is rg:
            rg.manual_seed(self.seed)
            return
        rng = np.random.default_rng(self.seed)
        functional = torch.nn.functional

        def masked(x, p, shape):
            keep = rng.random(shape) < 1.0 - p
            return x * (torch.tensor(keep).to(x.dtype) * (1.0 / (1.0 - p)))

        def dropout(x, p=0.5, training=True, inplace=False):
            if not training or p == 0.0:
                return x
            return masked(x, p, tuple(x.shape))

        def dropout2d(x, p=0.5, training=True, inplace=False):
            if not training or p == 0.0:
                return x
            return masked(x, p, tuple(x.shape[:2]) + (1,) * (x.ndim - 2))

        monkeypatch.setattr(functional, "dropout", dropout)
        monkeypatch.setattr(functional, "dropout2d", dropout2d)


def run_both(run, source, replacements, **kwargs):
    """``run(lib, source, torch_state)`` on torch, then on the port from torch's weights;
    both runs' records must agree."""
    torch.manual_seed(0)
    initial, theirs = run(torch, source, None, **kwargs)
    start, ours = run(rg, port(source, replacements), initial, **kwargs)
    for name, value in initial.items():
        np.testing.assert_array_equal(start[name], value)
    assert_records_agree(ours, theirs)
    return ours


# -- mnist_rnn/main.py -----------------------------------------------------------------------------
MNIST_RNN_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        # Shape of input is (batch_size,1, 28, 28)
        # converting shape of input to (batch_size, 28, 28)
        # as required by RNN when batch_first is set True
        input = input.reshape(-1, 28, 28)
        output, hidden = self.rnn(input)

        # RNN output shape is (seq_len, batch, input_size)
        # Get last output of RNN
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        output = F.log_softmax(output, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        record(loss.item(), model)
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                       100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(args, model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()
            if args.dry_run:
                break

    test_loss /= len(test_loader.dataset)
    record([test_loss, correct], None)

    print('\\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))

# -- (the harness: the model made, float64, torch's weights) --
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(args, model, device, test_loader)
        scheduler.step()
        record(scheduler.get_last_lr(), None)
"""

MNIST_RNN_PORT = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def split_at_harness(source: str, first_loop_line: str) -> tuple[str, str, str]:
    """The definitions, the lines making the model (dedented out of ``main``), the rest."""
    definitions, rest = source.split(
        "# -- (the harness: the model made, float64, torch's weights) --\n"
    )
    make, loop = rest.split(first_loop_line)
    dedent = lambda text: "\n".join(line[4:] for line in text.splitlines())  # noqa: E731
    return definitions, dedent(make), dedent(first_loop_line + loop)


def _run_mnist_rnn(lib, source, torch_state, monkeypatch):
    batch = 4
    rng = np.random.default_rng(3)
    images = (rng.uniform(0.0, 1.0, (3 * batch, 1, 28, 28)) - 0.1307) / 0.3081
    labels = rng.integers(0, 10, 3 * batch)
    data_module = lib.utils.data

    def loader(rows):
        dataset = data_module.TensorDataset(lib.tensor(images[rows]), lib.tensor(labels[rows]))
        return data_module.DataLoader(dataset, batch_size=batch)

    records: list = []
    ours, theirs = namespaces(
        args=types.SimpleNamespace(lr=1.0, gamma=0.7, epochs=2, log_interval=1, dry_run=False),
        train_loader=loader(slice(0, 2 * batch)),
        test_loader=loader(slice(2 * batch, 3 * batch)),
        device=lib.device("cpu"),
        StepLR=lib.optim.lr_scheduler.StepLR,
        record=lambda value, model: records.append(
            (value, None if model is None else state_of(model))
        ),
    )
    namespace = ours if lib is rg else theirs
    definitions, make, loop = split_at_harness(source, "    scheduler = ")
    exec(compile(definitions + make, "mnist_rnn_main.py", "exec"), namespace)
    model = namespace["model"].double()
    if torch_state is not None:
        model.load_state_dict(torch_state)
    initial = state_of(model)
    Masks(29).patch(monkeypatch, lib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation of dropout2d on 2-d inputs
        exec(compile(loop, "mnist_rnn_main.py", "exec"), namespace)
    return initial, records


def test_the_mnist_rnn_example_ports_changing_only_the_gradient_lines(monkeypatch):
    ours = run_both(_run_mnist_rnn, MNIST_RNN_SOURCE, MNIST_RNN_PORT, monkeypatch=monkeypatch)
    assert len(ours) == 2 * (2 + 1 + 1)  # per epoch: 2 steps, a test, the lr
    assert ours[3][0] == pytest.approx([0.7])
