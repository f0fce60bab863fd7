"""Fixes found by round 94 of the real ports (``tests/test_real_ports_ports94.py``).

``F.ctc_loss`` with padded ``[N, S]`` targets read every entry of a row, also those past its
target length: a row padded with a value outside ``[0, C)`` (``-100``, the vocabulary size) was
refused with an ``IndexOutOfRangeError`` from the gather of the log-probabilities, where torch
reads only the first ``target_lengths[n]`` labels of row ``n``. And a negative label within
the length (``-1``) was taken as class ``C - 1`` (NumPy's and torch's wrap-around of a gather
index), where torch's kernel reads outside its log-probabilities: now refused, naming the
sequence and the label.

``torch.func.vmap`` rebuilt a tuple of its inputs or outputs by calling the tuple's type on a
generator: a namedtuple (a user's ``Batch(x, y)``, or what ``max(dim, keepdim=True)`` and
``sort`` return) failed with ``TypeError: max.__new__() missing 1 required positional argument:
'indices'`` where torch's pytree rebuilds it, field by field.
"""

from __future__ import annotations

import collections

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


Batch = collections.namedtuple("Batch", "x y")


def _vmapped_namedtuples(lib):
    values = np.arange(12.0).reshape(4, 3) % 5
    x = lib.tensor(values)
    mapped_in = lib.func.vmap(lambda b: b.x * b.y.sum())(Batch(x, x + 1))
    mapped_out = lib.func.vmap(lambda row: Batch(row * 2, row.sum()))(x)
    largest = lib.func.vmap(lambda row: lib.max(row, -1, keepdim=True))(x)
    ordered = lib.func.vmap(lambda row: row.sort(descending=True))(x)
    aux = lib.func.vmap(lib.func.grad(lambda r: ((r**2).sum(), r.max(0)), has_aux=True))(x)[1]
    return [mapped_in, mapped_out, largest, ordered, aux]


def test_vmap_takes_and_returns_namedtuples_as_torch():
    expected, got = _vmapped_namedtuples(torch), _vmapped_namedtuples(rg)
    np.testing.assert_allclose(got[0].numpy(), expected[0].numpy())
    assert type(got[1]) is Batch
    fields = [("x", "y")] + [("values", "indices")] * 3  # (torch's return types are structseqs)
    for mine, theirs, names in zip(got[1:], expected[1:], fields):
        assert mine._fields == names and len(theirs) == 2
        for field in names:
            mine_value, their_value = getattr(mine, field), getattr(theirs, field)
            np.testing.assert_array_equal(mine_value.numpy(), their_value.numpy())
