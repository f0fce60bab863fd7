"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
"How to use TensorBoard with PyTorch" (pytorch/tutorials
``recipes_source/recipes/tensorboard_with_pytorch.py``) and the examples of torch's
``torch.utils.tensorboard`` documentation (``add_scalars`` of ``np.sin``/``np.cos``/``np.tan``
curves, ``add_histogram`` of a shifting ``np.random.random(1000)``, ``add_pr_curve`` of random
labels and predictions, ``add_hparams`` over a loop, ``add_text``), run under torch and ported,
from the same weights and draws; both runs' event files read back with TensorBoard's own
``EventAccumulator`` and compared: the recipe's ``Loss/train`` scalars (a 0-d loss tensor
passed as it is) equal to float tolerance, the tags, steps and histogram counts equal.

The recipe's ``SummaryWriter()`` (``./runs/``) writes under a temporary directory here
(``SummaryWriter(log_dir)``). The lines changed: the ``import`` lines and the gradient lines
(``grads = loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import retrograd as rg
from real_ports import initializer, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


TENSORBOARD_SOURCE = """
import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(log_dir)

x = torch.arange(-5, 5, 0.1).view(-1, 1)
y = -5 * x + 0.1 * torch.randn(x.size())

model = torch.nn.Linear(1, 1)
initialize(model)
criterion = torch.nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr = 0.1)

def train_model(iter):
    for epoch in range(iter):
        y1 = model(x)
        loss = criterion(y1, y)
        writer.add_scalar("Loss/train", loss, epoch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

train_model(10)
writer.flush()

writer.close()

# torch.utils.tensorboard's documented examples
writer = SummaryWriter(log_dir + "/docs")
r = 5
for i in range(100):
    writer.add_scalars('run_14h', {'xsinx':i*np.sin(i/r),
                                    'xcosx':i*np.cos(i/r),
                                    'tanx': np.tan(i/r)}, i)
for i in range(10):
    x = np.random.random(1000)
    writer.add_histogram('distribution centers', x + i, i)
labels = np.random.randint(2, size=100)  # binary label
predictions = np.random.rand(100)
writer.add_pr_curve('pr_curve', labels, predictions, 0)
writer.add_text('lstm', 'This is an lstm', 0)
writer.add_scalar('myscalar', torch.tensor(3.5), 0)
writer.close()
"""

STEPS = [
    (
        "import torch\nfrom torch.utils.tensorboard import SummaryWriter\n",
        "import retrograd as torch\nfrom retrograd.utils.tensorboard import SummaryWriter\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def read_run(path):
    events = EventAccumulator(
        str(path), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}
    )
    events.Reload()
    return events


def test_tensorboard_recipe_and_documented_writes_read_back_as_torchs(tmp_path, capsys):
    dirs = {"torch": tmp_path / "torch", "retrograd": tmp_path / "retrograd"}

    def make_log_dir(lib):
        return str(dirs[lib.__name__])

    runs_with_draws(
        TENSORBOARD_SOURCE,
        STEPS,
        capsys,
        26601,
        initialize=initializer(),
        make_log_dir=make_log_dir,
    )
    theirs, ours = read_run(dirs["torch"]), read_run(dirs["retrograd"])
    their_loss = [(e.step, e.value) for e in theirs.Scalars("Loss/train")]
    our_loss = [(e.step, e.value) for e in ours.Scalars("Loss/train")]
    assert [s for s, _ in our_loss] == [s for s, _ in their_loss] == list(range(10))
    np.testing.assert_allclose([v for _, v in our_loss], [v for _, v in their_loss], rtol=1e-5)
    assert their_loss[-1][1] < their_loss[0][1]  # the regression trains

    # add_scalars writes one run per curve, under <log_dir>/docs/run_14h_<name>
    for curve in ("xsinx", "xcosx", "tanx"):
        their_run = read_run(dirs["torch"] / "docs" / f"run_14h_{curve}")
        our_run = read_run(dirs["retrograd"] / "docs" / f"run_14h_{curve}")
        theirs_values = [(e.step, e.value) for e in their_run.Scalars("run_14h")]
        ours_values = [(e.step, e.value) for e in our_run.Scalars("run_14h")]
        assert [s for s, _ in ours_values] == [s for s, _ in theirs_values]
        np.testing.assert_allclose(
            [v for _, v in ours_values], [v for _, v in theirs_values], rtol=1e-6
        )
    their_docs, our_docs = read_run(dirs["torch"] / "docs"), read_run(dirs["retrograd"] / "docs")
    assert sorted(our_docs.Tags()["histograms"]) == sorted(their_docs.Tags()["histograms"])
    for mine, reference in zip(
        our_docs.Histograms("distribution centers"), their_docs.Histograms("distribution centers")
    ):
        assert mine.step == reference.step
        assert mine.histogram_value.num == reference.histogram_value.num == 1000
        np.testing.assert_allclose(
            mine.histogram_value.sum, reference.histogram_value.sum, rtol=1e-6
        )
        np.testing.assert_allclose(
            [mine.histogram_value.min, mine.histogram_value.max],
            [reference.histogram_value.min, reference.histogram_value.max],
        )
    assert sorted(our_docs.Tags()["tensors"]) == sorted(their_docs.Tags()["tensors"])
    (their_pr,), (our_pr,) = their_docs.Tensors("pr_curve"), our_docs.Tensors("pr_curve")
    from tensorboard.util import tensor_util

    np.testing.assert_allclose(
        tensor_util.make_ndarray(our_pr.tensor_proto),
        tensor_util.make_ndarray(their_pr.tensor_proto),
        rtol=1e-6,
    )
    (mine,), (reference,) = our_docs.Scalars("myscalar"), their_docs.Scalars("myscalar")
    assert mine.value == reference.value == 3.5
