# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch meta-learning by torch.func ported to retrograd (the harness:
``tests/real_ports.py``).

- functorch's MAML on Omniglot by transforms (pytorch/pytorch ``functorch/examples/
  maml_omniglot/maml-omniglot-transforms.py``, ``loss_for_task``, ``train`` and ``test`` as
  written): ``vmap(functools.partial(loss_for_task, net, n_inner_iter))`` over the tasks of a
  batch, each task taking ``grad(compute_loss)(new_params, buffers, x_spt, y_spt)`` of a
  ``functional_call(net, (new_params, buffers), x)`` (a dict of parameters and a dict of
  buffers) five times, a dict comprehension ``{k: new_params[k] - g * 1e-1 for k, g, in
  grads.items()}``, the query loss and ``(qry_logits.argmax(dim=1) == y_qry).sum() /
  querysz`` returned batched; ``qry_losses.sum().backward()`` through the vmapped inner
  gradients (second order) and Adam; ``test`` adapting each task by ``torch.autograd.grad(
  spt_loss, new_params.values())`` (a ``dict_values``) and ``torch.cat`` of the per-task losses
  and accuracies. The net is ``main``'s ``nn.Sequential`` (``BatchNorm2d(affine=True,
  track_running_stats=False)``, ``ReLU(inplace=True)``, ``MaxPool2d``, ``Flatten``) with 8
  channels in place of 64; the Omniglot loader is replaced by synthetic 5-way tasks with the
  same ``x_train``/``x_test``/``batchsz``/``next(mode)`` interface; ``plot`` is left out.

torch's run maps ``loss_for_task`` over the tasks one by one (a stand-in ``vmap`` that stacks
the results): torch 2.13's own ``vmap`` of this second-order loss returns wrong
meta-gradients for every parameter below a training-mode batch norm (up to 1e-2 off in float64
where the task loop, retrograd's ``vmap`` and central finite differences agree to 1e-9; the
conv biases' true meta-gradient is 0, torch's vmap gives 1e-3). The conv biases feed a batch
norm, which cancels them: their gradients are rounding noise under Adam and are not compared.
"""

import numpy as np
import pytest
import torch
from tests.real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401  (a fixture)
    initializer,
    port,
    ported_imports,
    run_source,
)

import retrograd as rg

MAML_SOURCE = """
import argparse
import functools
import time

import numpy as np

import torch
import torch.nn.functional as F
import torch.optim as optim
from torch import nn
from torch.func import functional_call, grad, vmap


# Trains a model for n_inner_iter using the support and returns a loss
# using the query.
def loss_for_task(net, n_inner_iter, x_spt, y_spt, x_qry, y_qry):
    params = dict(net.named_parameters())
    buffers = dict(net.named_buffers())
    querysz = x_qry.size(0)

    def compute_loss(new_params, buffers, x, y):
        logits = functional_call(net, (new_params, buffers), x)
        loss = F.cross_entropy(logits, y)
        return loss

    new_params = params
    for _ in range(n_inner_iter):
        grads = grad(compute_loss)(new_params, buffers, x_spt, y_spt)
        new_params = {k: new_params[k] - g * 1e-1 for k, g, in grads.items()}

    # The final set of adapted parameters will induce some
    # final loss and accuracy on the query dataset.
    # These will be used to update the model's meta-parameters.
    qry_logits = functional_call(net, (new_params, buffers), x_qry)
    qry_loss = F.cross_entropy(qry_logits, y_qry)
    qry_acc = (qry_logits.argmax(dim=1) == y_qry).sum() / querysz

    return qry_loss, qry_acc


def train(db, net, device, meta_opt, epoch, log):
    dict(net.named_parameters())
    dict(net.named_buffers())
    n_train_iter = db.x_train.shape[0] // db.batchsz

    for batch_idx in range(n_train_iter):
        start_time = time.time()
        # Sample a batch of support and query images and labels.
        x_spt, y_spt, x_qry, y_qry = db.next()

        task_num, setsz, c_, h, w = x_spt.size()

        n_inner_iter = 5
        meta_opt.zero_grad()

        # In parallel, trains one model per task. There is a support (x, y)
        # for each task and a query (x, y) for each task.
        compute_loss_for_task = functools.partial(loss_for_task, net, n_inner_iter)
        qry_losses, qry_accs = vmap(compute_loss_for_task)(x_spt, y_spt, x_qry, y_qry)

        # Compute the maml loss by summing together the returned losses.
        qry_losses.sum().backward()

        meta_opt.step()
        qry_losses = qry_losses.detach().sum() / task_num
        qry_accs = 100.0 * qry_accs.sum() / task_num
        i = epoch + float(batch_idx) / n_train_iter
        iter_time = time.time() - start_time
        if batch_idx % 4 == 0:
            print(
                f"[Epoch {i:.2f}] Train Loss: {qry_losses:.2f} | Acc: {qry_accs:.2f} | Time: {iter_time:.2f}"
            )

        log.append(
            {
                "epoch": i,
                "loss": qry_losses,
                "acc": qry_accs,
                "mode": "train",
                "time": time.time(),
            }
        )


def test(db, net, device, epoch, log):
    # Crucially in our testing procedure here, we do *not* fine-tune
    # the model during testing for simplicity.
    # Most research papers using MAML for this task do an extra
    # stage of fine-tuning here that should be added if you are
    # adapting this code for research.
    params = dict(net.named_parameters())
    buffers = dict(net.named_buffers())
    n_test_iter = db.x_test.shape[0] // db.batchsz

    qry_losses = []
    qry_accs = []

    for batch_idx in range(n_test_iter):
        x_spt, y_spt, x_qry, y_qry = db.next("test")
        task_num, setsz, c_, h, w = x_spt.size()

        # TODO: Maybe pull this out into a separate module so it
        # doesn't have to be duplicated between `train` and `test`?
        n_inner_iter = 5

        for i in range(task_num):
            new_params = params
            for _ in range(n_inner_iter):
                spt_logits = functional_call(net, (new_params, buffers), x_spt[i])
                spt_loss = F.cross_entropy(spt_logits, y_spt[i])
                grads = torch.autograd.grad(spt_loss, new_params.values())
                new_params = {
                    k: new_params[k] - g * 1e-1 for k, g, in zip(new_params, grads)
                }

            # The query loss and acc induced by these parameters.
            qry_logits = functional_call(net, (new_params, buffers), x_qry[i]).detach()
            qry_loss = F.cross_entropy(qry_logits, y_qry[i], reduction="none")
            qry_losses.append(qry_loss.detach())
            qry_accs.append((qry_logits.argmax(dim=1) == y_qry[i]).detach())

    qry_losses = torch.cat(qry_losses).mean().item()
    qry_accs = 100.0 * torch.cat(qry_accs).float().mean().item()
    print(f"[Epoch {epoch+1:.2f}] Test Loss: {qry_losses:.2f} | Acc: {qry_accs:.2f}")
    log.append(
        {
            "epoch": epoch + 1,
            "loss": qry_losses,
            "acc": qry_accs,
            "mode": "test",
            "time": time.time(),
        }
    )
"""

# main() as written, but for two blocks of 8 channels over 10x10 images, one epoch, no plot
MAIN_SOURCE = """
torch.manual_seed(1)
np.random.seed(1)
device = "cpu"
db = make_db(torch)

# Create a vanilla PyTorch neural network.
inplace_relu = True
net = nn.Sequential(
    nn.Conv2d(1, 8, 3),
    nn.BatchNorm2d(8, affine=True, track_running_stats=False),
    nn.ReLU(inplace=inplace_relu),
    nn.MaxPool2d(2, 2),
    nn.Conv2d(8, 8, 3),
    nn.BatchNorm2d(8, affine=True, track_running_stats=False),
    nn.ReLU(inplace=inplace_relu),
    nn.MaxPool2d(2, 2),
    nn.Flatten(),
    nn.Linear(8, n_way),
).to(device)
initialize(net)

net.train()

# We will use Adam to (meta-)optimize the initial parameters
# to be adapted.
meta_opt = optim.Adam(net.parameters(), lr=1e-3)

log = []
for epoch in range(1):
    train(db, net, device, meta_opt, epoch, log)
    test(db, net, device, epoch, log)
    record([{k: v for k, v in entry.items() if k != "time"} for entry in log])
    record({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
"""

STEPS = [
    ("        meta_opt.zero_grad()\n", ""),
    (
        "        qry_losses.sum().backward()\n\n        meta_opt.step()",
        "        grads = qry_losses.sum().backward()\n\n        meta_opt.step(grads)",
    ),
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
]


class SyntheticNShot:
    """OmniglotNShot's interface (``x_train``, ``x_test``, ``batchsz``, ``next(mode)`` giving
    ``[b, setsz, 1, 10, 10]`` images and ``[b, setsz]`` labels as tensors) over synthetic
    classes: a fixed template each, images the template plus noise."""

    def __init__(self, lib, batchsz=2, n_way=5, k_shot=1, k_query=2):
        self.lib, self.rng = lib, np.random.default_rng(462)
        self.templates = self.rng.normal(size=(14, 1, 10, 10))
        self.x_train = np.zeros((2 * batchsz, 1))  # (only their lengths are read)
        self.x_test = np.zeros((batchsz, 1))
        self.batchsz, self.n_way, self.k_shot, self.k_query = batchsz, n_way, k_shot, k_query

    def _set(self, classes, shots):
        labels = np.repeat(np.arange(self.n_way), shots)
        self.rng.shuffle(labels)
        noise = self.rng.normal(scale=0.5, size=(len(labels), 1, 10, 10))
        return self.templates[classes[labels]] + noise, labels

    def next(self, mode="train"):
        pool = np.arange(0, 9) if mode == "train" else np.arange(9, 14)
        parts = [[], [], [], []]
        for _ in range(self.batchsz):
            classes = self.rng.choice(pool, self.n_way, replace=False)
            for part, value in zip(
                parts, (*self._set(classes, self.k_shot), *self._set(classes, self.k_query))
            ):
                part.append(value)
        x_spt, y_spt, x_qry, y_qry = (np.stack(p) for p in parts)
        lib = self.lib
        return (
            lib.tensor(x_spt, dtype=lib.float32),
            lib.tensor(y_spt),
            lib.tensor(x_qry, dtype=lib.float32),
            lib.tensor(y_qry),
        )


def vmap_by_loop(func):
    """torch's ``vmap(func)`` computed task by task (``func`` returns a tuple of tensors)."""

    def mapped(*args):
        outs = [func(*(a[i] for a in args)) for i in range(args[0].shape[0])]
        return tuple(torch.stack(o) for o in zip(*outs))

    return mapped


@pytest.mark.usefixtures("global_streams_restored")
def test_functorch_maml_omniglot_by_vmap_of_grad_trains_as_torch(capsys):
    torch.manual_seed(0)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        source = MAML_SOURCE + MAIN_SOURCE
        shared = {}
        if lib is rg:
            source = ported_imports(port(source, STEPS))
        else:
            source = port(source, [(", grad, vmap\n", ", grad\n")])
            shared["vmap"] = vmap_by_loop
        run_source(
            source,
            lib,
            **shared,
            record=record.append,
            initialize=initialize,
            make_db=SyntheticNShot,
            n_way=5,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    strip = [[line.split(" | Time")[0] for line in log.splitlines()] for log in logs]
    assert strip[0] == strip[1]
    for mine, reference in zip(ours, theirs):
        if isinstance(reference, list):
            assert [e["mode"] for e in mine] == [e["mode"] for e in reference]
            for e, r in zip(mine, reference):
                np.testing.assert_allclose(
                    [float(e[k]) for k in ("epoch", "loss", "acc")],
                    [float(r[k]) for k in ("epoch", "loss", "acc")],
                    rtol=1e-4,
                    atol=1e-5,
                )
    assert_records_agree(ours[1::2], theirs[1::2], rtol=2e-4, atol=2e-5, skip=("0.bias", "4.bias"))
