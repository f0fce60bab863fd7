"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of PyTorch's TensorBoard recipe and of the examples in ``torch.utils.tensorboard``'s
documentation, run under torch and ported, from the same weights and draws.

It fits a noisy line with ``nn.Linear``/``MSELoss``/``SGD`` on ``torch.arange`` with a float
step, ``.view(-1, 1)`` and ``torch.randn(x.size())``, logging each 0-d loss tensor as it is
with ``SummaryWriter(log_dir).add_scalar`` (then ``flush``/``close``), and writes the other
summaries to a second writer: ``add_scalars`` of NumPy curves (one run per curve, under
``<log_dir>/extras/waves_<name>``), ``add_histogram`` of a shifting ``np.random.random``,
``add_pr_curve`` of random labels and scores, ``add_text`` and ``add_scalar`` of
``torch.tensor(1.25)``. Both runs' event files are read back with TensorBoard's own
``EventAccumulator`` and compared: the losses to float tolerance, the tags, steps, histogram
counts and the PR-curve tensor equal. The writers log under a temporary directory; the lines
the port changes are the imports and the gradient lines (``grads = loss.backward()``,
``sgd.step(grads)``).
"""

from __future__ import annotations

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from real_ports import (
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

TENSORBOARD_SOURCE = """
import numpy as np
import torch
from torch.utils import tensorboard

# a noisy line, y = 3x - 2, logged while SGD fits it
inputs = torch.arange(-2, 2, 0.25).view(-1, 1)
targets = 3 * inputs - 2 + 0.05 * torch.randn(inputs.size())

net = torch.nn.Linear(1, 1)
initialize(net)
mse = torch.nn.MSELoss()
sgd = torch.optim.SGD(net.parameters(), lr=0.05)

logger = tensorboard.SummaryWriter(log_dir)
for step in range(8):
    loss = mse(net(inputs), targets)
    logger.add_scalar("fit/mse", loss, step)  # the 0-d tensor itself, not loss.item()
    sgd.zero_grad()
    loss.backward()
    sgd.step()
logger.flush()
logger.close()

# every other kind of summary, in a run of its own
board = tensorboard.SummaryWriter(log_dir + "/extras")
for k in range(30):
    angle = k / 4
    curves = {"sin": np.sin(angle), "kcos": k * np.cos(angle), "tan": np.tan(angle)}
    board.add_scalars("waves", curves, k)
for k in range(5):
    board.add_histogram("drift", 2 * np.random.random(500) + k, k)
truth = np.random.randint(2, size=64)
scores = np.random.rand(64)
board.add_pr_curve("pr", truth, scores, 0)
board.add_text("notes", "a line fitted by SGD", 0)
board.add_scalar("constant", torch.tensor(1.25), 0)
board.close()
"""

STEPS = [
    (
        "import torch\nfrom torch.utils import tensorboard\n",
        "import retrograd as torch\nfrom retrograd.utils import tensorboard\n",
    ),
    (
        "    loss.backward()\n    sgd.step()\n",
        "    grads = loss.backward()\n    sgd.step(grads)\n",
    ),
]


def read_run(path):
    events = EventAccumulator(
        str(path), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}
    )
    events.Reload()
    return events


def test_tensorboard_fit_and_summaries_read_back_as_torchs(tmp_path, capsys):
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
    their_loss = [(e.step, e.value) for e in theirs.Scalars("fit/mse")]
    our_loss = [(e.step, e.value) for e in ours.Scalars("fit/mse")]
    assert [s for s, _ in our_loss] == [s for s, _ in their_loss] == list(range(8))
    np.testing.assert_allclose([v for _, v in our_loss], [v for _, v in their_loss], rtol=1e-5)
    assert their_loss[-1][1] < their_loss[0][1]  # the regression trains

    # add_scalars writes one run per curve, under <log_dir>/extras/waves_<name>
    for curve in ("sin", "kcos", "tan"):
        their_run = read_run(dirs["torch"] / "extras" / f"waves_{curve}")
        our_run = read_run(dirs["retrograd"] / "extras" / f"waves_{curve}")
        theirs_values = [(e.step, e.value) for e in their_run.Scalars("waves")]
        ours_values = [(e.step, e.value) for e in our_run.Scalars("waves")]
        assert [s for s, _ in ours_values] == [s for s, _ in theirs_values] == list(range(30))
        np.testing.assert_allclose(
            [v for _, v in ours_values], [v for _, v in theirs_values], rtol=1e-6
        )
    their_extras = read_run(dirs["torch"] / "extras")
    our_extras = read_run(dirs["retrograd"] / "extras")
    assert sorted(our_extras.Tags()["histograms"]) == sorted(their_extras.Tags()["histograms"])
    our_histograms, their_histograms = (
        our_extras.Histograms("drift"),
        their_extras.Histograms("drift"),
    )
    assert len(our_histograms) == len(their_histograms) == 5
    for mine, reference in zip(our_histograms, their_histograms):
        assert mine.step == reference.step
        assert mine.histogram_value.num == reference.histogram_value.num == 500
        np.testing.assert_allclose(
            mine.histogram_value.sum, reference.histogram_value.sum, rtol=1e-6
        )
        np.testing.assert_allclose(
            [mine.histogram_value.min, mine.histogram_value.max],
            [reference.histogram_value.min, reference.histogram_value.max],
        )
    assert sorted(our_extras.Tags()["tensors"]) == sorted(their_extras.Tags()["tensors"])
    (their_pr,), (our_pr,) = their_extras.Tensors("pr"), our_extras.Tensors("pr")
    from tensorboard.util import tensor_util

    np.testing.assert_allclose(
        tensor_util.make_ndarray(our_pr.tensor_proto),
        tensor_util.make_ndarray(their_pr.tensor_proto),
        rtol=1e-6,
    )
    (mine,), (reference,) = our_extras.Scalars("constant"), their_extras.Scalars("constant")
    assert mine.value == reference.value == 1.25
