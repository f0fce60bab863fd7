"""Defects the ports of ``tests/test_real_ports_410.py`` .. ``_413.py`` and the probes beside them
found in retrograd: ``pad_sequence`` of sequences of different dtypes promoted them where torch
writes every sequence into a tensor made like the first one (its dtype wins), and its errors for
a 0-d sequence, a non-tensor sequence and mismatched trailing sizes leaked internal messages or
named no shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize(
    "first, second",
    [
        (np.int64, np.float32),
        (np.float32, np.int64),
        (np.float32, np.float64),
        (np.bool_, np.int64),
    ],
)
def test_pad_sequence_takes_the_dtype_of_the_first_sequence_as_torch(first, second):
    a, b = np.array([1, 0, 3]).astype(first), np.array([1.5, 2.25]).astype(second)
    ours = rg.nn.utils.rnn.pad_sequence([rg.tensor(a), rg.tensor(b)], padding_value=-1)
    theirs = torch.nn.utils.rnn.pad_sequence([torch.tensor(a), torch.tensor(b)], padding_value=-1)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_pad_sequence_differentiates_through_the_cast_to_the_first_dtype_as_torch():
    rng = np.random.default_rng(55)
    a, b = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((2, 2))
    weights = rng.standard_normal((2, 3, 2))
    grads = []
    for lib in (torch, rg):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        out = lib.nn.utils.rnn.pad_sequence([x, y], batch_first=True, padding_side="left")
        loss = (out * lib.tensor(weights, dtype=lib.float32)).sum()
        if lib is torch:
            loss.backward()
            grads.append([x.grad.numpy(), y.grad.numpy(), str(y.grad.dtype)])
        else:
            found = loss.backward()
            gx, gy = x.grad(found), y.grad(found)
            grads.append([np.asarray(gx), np.asarray(gy), str(np.asarray(gy).dtype)])
    (tx, ty, tdtype), (ox, oy, odtype) = grads
    np.testing.assert_allclose(ox, tx, rtol=1e-6)
    np.testing.assert_allclose(oy, ty, rtol=1e-6)
    assert tdtype.endswith("float64") and odtype.endswith("float64")


@pytest.mark.parametrize(
    "sequences, error, words",
    [
        (lambda: [rg.tensor(1.0), rg.tensor(2.0)], rg.ShapeError, ["sequence 0", "0-d"]),
        (lambda: [[1, 2], [3]], rg.DTypeError, ["sequence 0", "list"]),
        (lambda: [rg.ones(2, 3), rg.ones(1, 2)], rg.ShapeError, ["[2, 3]", "[1, 2]"]),
        (lambda: [], rg.InvalidArgumentError, ["empty"]),
    ],
)
def test_pad_sequence_errors_name_the_sequence_at_fault(sequences, error, words):
    given = sequences()
    with pytest.raises(error) as raised:
        rg.nn.utils.rnn.pad_sequence(given)
    message = str(raised.value)
    assert message.startswith("pad_sequence:") and all(w in message for w in words), message
    if given and isinstance(given[0], rg.Tensor):  # the inputs stay usable
        assert [s.tolist() for s in given] == [s.tolist() for s in sequences()]
