"""``one_hot`` of an empty tensor with a num_classes of 0 or below: torch refuses ("Can not
infer total number of classes from empty tensor"); the torch backend raised torch's bare
RuntimeError from ``arange(0, -5)`` and the NumPy backend returned a ``[3, 0, 0]`` tensor
(found by the public-surface sweep of ``test_reliability_sweep``)."""

from __future__ import annotations

import pytest
import torch

import retrograd as rg

EMPTY = (3, 0)


@pytest.mark.parametrize("num_classes", [-5, -2, -1, 0])
def test_an_empty_tensor_with_no_positive_class_count_is_refused_as_torch(num_classes):
    with pytest.raises(RuntimeError, match="Can not infer"):
        torch.nn.functional.one_hot(torch.zeros(EMPTY, dtype=torch.int64), num_classes)
    with pytest.raises(rg.InvalidArgumentError, match="one_hot: cannot infer num_classes"):
        rg.zeros(EMPTY, dtype=rg.int64).one_hot(num_classes)


@pytest.mark.parametrize("num_classes", [1, 3])
def test_an_empty_tensor_with_a_class_count_has_torchs_shape(num_classes):
    theirs = torch.nn.functional.one_hot(torch.zeros(EMPTY, dtype=torch.int64), num_classes)
    ours = rg.nn.functional.one_hot(rg.zeros(EMPTY, dtype=rg.int64), num_classes)
    assert ours.shape == tuple(theirs.shape) and ours.dtype == rg.int64


def test_a_class_count_below_the_classes_is_refused_as_torch():
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        torch.nn.functional.one_hot(torch.tensor([1, 2]), -5)
    with pytest.raises(rg.IndexOutOfRangeError):
        rg.tensor([1, 2]).one_hot(-5)
