"""Regression tests for the defects the ports of ``tests/test_real_ports_231.py`` ..
``_239.py`` exposed (video, 3-D and detection models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_type_of_the_tensor_class_casts_to_the_default_dtype_as_torch(dtype):
    # ssd.pytorch: ``self.priors.type(type(x.data))``
    values = np.array([1.5, -2.0, 3.0])
    ours = rg.tensor(values, dtype=getattr(rg, dtype))
    theirs = torch.tensor(values, dtype=getattr(torch, dtype))
    cast, expected = ours.type(type(ours.data)), theirs.type(type(theirs.data))
    assert cast.dtype == rg.float32 and expected.dtype == torch.float32
    np.testing.assert_array_equal(cast.numpy(), expected.numpy())
    assert ours.type(rg.Tensor).dtype == rg.float32


def test_type_of_the_tensor_class_follows_the_default_dtype():
    saved = rg.get_default_dtype()
    rg.set_default_dtype(rg.float64)
    try:
        assert rg.tensor([1, 2]).type(rg.Tensor).dtype == rg.float64
    finally:
        rg.set_default_dtype(saved)


def test_type_of_a_tensor_subclass_is_refused():
    x = rg.tensor([1.0])
    with pytest.raises(rg.DTypeError, match="type"):
        x.type(rg.nn.Parameter)  # torch: "invalid type: 'Parameter'"
    assert x.type(rg.Tensor).tolist() == [1.0]  # still usable
