"""Regression tests for the defects found while porting the generative models of
``tests/test_real_ports_370.py`` .. ``_374.py``: ``torch.binomial`` of 0-d tensors, as
lucidrains/vector-quantize-pytorch's ``sample_multinomial`` draws a count per rank."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(51)
    rg.manual_seed(51)
    np.random.seed(51)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("prob", [0.0, 1.0])
def test_binomial_of_0d_tensors_is_a_0d_tensor_of_counts_dtype_as_torch(dtype, prob):
    # prob 0 or 1 makes the draw certain, so torch's value is the expected one
    theirs = torch.binomial(
        torch.tensor(7.0, dtype=getattr(torch, dtype)),
        torch.tensor(prob, dtype=getattr(torch, dtype)),
    )
    ours = rg.binomial(rg.tensor(7.0, dtype=dtype), rg.tensor(prob, dtype=dtype))
    assert tuple(ours.shape) == tuple(theirs.shape) == ()
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1] == dtype
    assert ours.item() == theirs.item()


def test_binomial_draws_a_probability_past_one_by_rounding_as_one_as_torch():
    count, prob = np.float32(5.0), np.nextafter(np.float32(1.0), np.float32(2.0))
    theirs = torch.binomial(torch.tensor(count), torch.tensor(prob))
    ours = rg.binomial(rg.tensor(count), rg.tensor(prob))
    assert ours.item() == theirs.item() == 5.0
    below = rg.binomial(rg.tensor(count), rg.tensor(np.float32(-1e-8)))
    assert below.item() == 0.0


def test_binomial_still_refuses_a_probability_out_of_range_naming_the_op():
    with pytest.raises(rg.InvalidArgumentError, match="binomial: prob must lie in"):
        rg.binomial(rg.tensor(5.0), rg.tensor(1.5))
    # the tensors stay usable
    assert rg.binomial(rg.tensor(5.0), rg.tensor(1.0)).item() == 5.0


SAMPLE_MULTINOMIAL = """
def sample_multinomial(total_count, probs):
    device = probs.device
    probs = probs.cpu()

    total_count = probs.new_full((), total_count)
    remainder = probs.new_ones(())
    sample = torch.empty_like(probs, dtype = torch.long)

    for i, p in enumerate(probs):
        s = torch.binomial(total_count, p / remainder)
        sample[i] = s
        total_count -= s
        remainder -= p

    return sample.to(device)
"""


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_vector_quantize_sample_multinomial_splits_the_whole_count(lib):
    # lucidrains/vector-quantize-pytorch's sample_multinomial (vector_quantize_pytorch.py) as
    # written: the last share is p / remainder, 1 up to rounding, so every count is drawn
    names = {"torch": lib}
    exec(SAMPLE_MULTINOMIAL, names)
    probs = lib.tensor([0.1, 0.2, 0.3, 0.4]) / lib.tensor([0.1, 0.2, 0.3, 0.4]).sum()
    sample = names["sample_multinomial"](12, probs)
    assert str(sample.dtype).endswith("int64")
    assert tuple(sample.shape) == (4,)
    assert int(sample.sum()) == 12 and int(sample.min()) >= 0
