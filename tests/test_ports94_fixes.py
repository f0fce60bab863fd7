"""Fixes found by round 94 of the real ports (``tests/test_real_ports_ports94.py``).

``F.ctc_loss`` with padded ``[N, S]`` targets read every entry of a row, also those past its
target length: a row padded with a value outside ``[0, C)`` (``-100``, the vocabulary size) was
refused with an ``IndexOutOfRangeError`` from the gather of the log-probabilities, where torch
reads only the first ``target_lengths[n]`` labels of row ``n``. And a negative label within
the length (``-1``) was taken as class ``C - 1`` (NumPy's and torch's wrap-around of a gather
index), where torch's kernel reads outside its log-probabilities: now refused, naming the
sequence and the label.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _log_probs(steps=6, batch=3, classes=5):
    return np.random.default_rng(94).standard_normal((steps, batch, classes))


@pytest.mark.parametrize("pad", [-100, 5, 9])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_ctc_loss_reads_padded_targets_only_up_to_their_lengths_as_torch(pad, reduction):
    logits = _log_probs()
    targets = [[1, 2, pad], [3, 3, 3], [2, pad, pad]]
    lengths, label_lengths = [6, 6, 5], [2, 3, 1]
    theirs = torch.tensor(logits, requires_grad=True)
    expected = torch.nn.functional.ctc_loss(
        theirs.log_softmax(-1), torch.tensor(targets), lengths, label_lengths, reduction=reduction
    )
    weights = np.linspace(1.0, 2.0, expected.numel()).reshape(tuple(expected.shape))
    (expected * torch.tensor(weights)).sum().backward()
    ours = rg.tensor(logits, requires_grad=True)
    got = rg.nn.CTCLoss(reduction=reduction)(
        ours.log_softmax(-1), rg.tensor(targets), rg.tensor(lengths), rg.tensor(label_lengths)
    )
    grads = (got * rg.tensor(weights)).sum().backward()
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("label", [-1, -6, 5])
def test_ctc_loss_refuses_a_label_out_of_range_within_its_length(label):
    # torch's CPU kernel reads outside the log-probabilities here (its result is whatever
    # memory lies there), so the expectation is the hierarchy's error, not torch's value
    log_probs = rg.tensor(_log_probs()).log_softmax(-1)
    targets = rg.tensor([[1, 2], [3, label], [2, 0]])
    message = rf"ctc_loss: target label {label} of sequence 1 \(at 1, .*\) .* for 5 classes"
    with pytest.raises(rg.IndexOutOfRangeError, match=message):
        rg.nn.functional.ctc_loss(log_probs, targets, [6, 6, 5], [2, 2, 1])
    concatenated = rg.tensor([1, 2, 3, label, 2])
    with pytest.raises(rg.IndexOutOfRangeError, match=message):
        rg.nn.functional.ctc_loss(log_probs, concatenated, [6, 6, 5], [2, 2, 1])
    # and the inputs stay usable: the same call with the label in range runs
    fixed = rg.tensor([[1, 2], [3, 4], [2, 0]])
    assert np.isfinite(rg.nn.functional.ctc_loss(log_probs, fixed, [6, 6, 5], [2, 2, 1]).item())
