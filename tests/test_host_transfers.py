"""A training step copies nothing to the host: on a device backend each copy (``to_numpy``, or
``any``, which answers with a host bool) stalls until the device has caught up.

The suite's inner backend (``tests/backends.py``: NumPy or torch), made to count those
calls, under ``rg.Autodiff``, runs a real step: an embedding, dropout and a linear layer,
cross-entropy with and without ``ignore_index``, backward, global-norm clipping, Adam and SGD.
``check_index_range`` is not a transfer: a device backend checks asynchronously (as CUDA's
device-side asserts do).
"""

from __future__ import annotations

import traceback

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from backends import inner_backend
from retrograd import nn, optim

#: Functions of the tensor API that still validate indices on the host (``select`` and
#: ``gather`` call them); being moved onto the backend with the split of ``tensor.py``.
KNOWN_HOST_CHECKS = {"_index_tensor", "first_out_of_range"}


class CountingBackend(type(inner_backend())):
    """Records each host transfer with the function names on its call stack."""

    def __init__(self):
        super().__init__()
        self.transfers: list[set[str]] = []
        self.range_checks = 0

    def _transfer(self) -> None:
        self.transfers.append({frame.name for frame in traceback.extract_stack()})

    def to_numpy(self, x):
        self._transfer()
        return super().to_numpy(x)

    def any(self, x):
        self._transfer()
        return super().any(x)

    def check_index_range(self, indices, size, message, ignore=None):
        self.range_checks += 1
        super().check_index_range(indices, size, message, ignore)

    def own(self) -> list[set[str]]:
        """The transfers not made by the tensor API's known host-side index checks."""
        return [stack for stack in self.transfers if not stack & KNOWN_HOST_CHECKS]


class Tagger(nn.Module):
    """Per-token class scores: embedding, dropout, linear."""

    def __init__(self, backend):
        super().__init__()
        self.embedding = nn.Embedding(11, 6, padding_idx=0, backend=backend, dtype="float64")
        self.dropout = nn.Dropout(0.25)
        self.head = nn.Linear(6, 5, backend=backend, dtype="float64")

    def forward(self, tokens):
        return self.head(self.dropout(self.embedding(tokens)))


def run_steps(plan: str = "adam adam sgd sgd"):
    """Train a model on a counting backend, one step per optimizer named in ``plan`` (two of
    each: the second step reads the first one's moments or momentum). Transfers are counted
    from a clean slate: building the model reads its initial values, once."""
    counting = CountingBackend()
    backend = rg.Autodiff(counting)
    model = Tagger(backend)
    optimizers = {"adam": optim.Adam(model, lr=1e-2), "sgd": optim.SGD(model, lr=0.1, momentum=0.9)}
    rng = np.random.default_rng(0)
    tokens = rg.tensor(rng.integers(0, 11, (4, 7)), dtype="int64", backend=backend)
    labels = rng.integers(0, 5, (4, 7))
    labels[0, :3] = -100  # PyTorch's default ignore_index
    targets = rg.tensor(labels, dtype="int64", backend=backend)
    other = rg.tensor(rng.integers(0, 5, (4, 7)), dtype="int64", backend=backend)

    def step(optimizer):
        logits = model(tokens)  # [4, 7, 5]
        scores = logits.permute((0, 2, 1))  # classes second: [4, 5, 7]
        loss = (
            F.cross_entropy(scores, targets)
            + F.cross_entropy(
                logits.reshape((-1, 5)), other.reshape((-1,)), ignore_index=3, label_smoothing=0.1
            )
            + F.cross_entropy(scores, other, reduction="sum") * 0.01
        )
        grads = loss.backward()
        norm = optim.clip_grad_norm(grads, model, max_norm=0.5, as_tensor=True)
        optimizer.step(grads)
        return loss, norm

    counting.transfers.clear()
    out = [step(optimizers[name]) for name in plan.split()]
    return counting, out


def test_nn_and_optim_make_no_host_transfer_of_their_own():
    counting, _ = run_steps()
    assert counting.own() == [], counting.own()
    # The indices were checked on the backend, five times a step: F.embedding's and the three
    # cross-entropies' own checks, and the tensor API's gather that the label-smoothed one
    # calls (the others record one nll_loss op, whose gather reads the indices they checked;
    # the embedding's row selections, of indices it checked, check them no more).
    assert counting.range_checks == 4 * 5


def test_a_training_step_makes_no_host_transfer():
    counting, _ = run_steps()
    assert len(counting.transfers) == 0


def test_the_counter_sees_host_reads():
    counting, [(loss, norm)] = run_steps("adam")
    counting.transfers.clear()
    assert np.isfinite(loss.item())
    assert len(counting.transfers) == 1
    assert norm.shape == () and norm.dtype == "float64" and float(norm) > 0.0
    assert len(counting.transfers) == 2


def test_clip_grad_norm_reads_nothing_unless_a_float_is_asked_for():
    counting = CountingBackend()
    backend = rg.Autodiff(counting)
    leaves = [
        rg.tensor(np.full(shape, 2.0), backend=backend).require_grad()
        for shape in [(3, 4), (5,), (2, 2)]
    ]
    grads = sum((leaf * leaf).sum() for leaf in leaves).backward()
    counting.transfers.clear()
    tensor_norm = optim.clip_grad_norm(grads, leaves, max_norm=1.0)  # torch's: a 0-d tensor
    assert isinstance(tensor_norm, rg.Tensor) and len(counting.transfers) == 0
    norm = optim.clip_grad_norm(grads, leaves, max_norm=1.0, as_tensor=False)
    assert isinstance(norm, float) and norm == pytest.approx(1.0, rel=1e-5)
    assert len(counting.transfers) == 1
    assert float(tensor_norm) == pytest.approx(4.0 * np.sqrt(21.0))
