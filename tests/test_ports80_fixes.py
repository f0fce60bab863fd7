"""Regression tests for the defects the round-80 real ports (``tests/test_real_ports_80*.py``)
reached, each against torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import KernelArgumentError


def _scatter_reduced(lib, reduce, include_self, tracked):
    """``scatter_reduce`` out of place, in place and as a function of a base and a source with
    ties, with ``reduce``; ``tracked``: the base and the source require gradients."""
    rng = np.random.default_rng(80)
    base = lib.tensor(rng.standard_normal((3, 2)), dtype=lib.float32, requires_grad=tracked)
    src = lib.tensor(rng.standard_normal((5, 2)), dtype=lib.float32, requires_grad=tracked)
    src = src * lib.tensor([[1.0, 0.0]] * 5)  # (ties in the second column)
    index = lib.tensor([[0, 0], [2, 2], [0, 2], [2, 0], [0, 0]])
    return [
        base.scatter_reduce(0, index, src, reduce, include_self=include_self),
        (base * 1.0).scatter_reduce_(0, index, src, reduce, include_self=include_self),
        lib.scatter_reduce(base, 0, index, src, reduce=reduce, include_self=include_self),
    ]


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_scatter_reduce_takes_max_and_min_forward_as_torch_does(reduce, include_self):
    # torch's parser of scatter_reduce's reduction (ATen's get_reduction_enum) reads "max" as
    # "amax" and "min" as "amin"; code ported from torch_scatter writes them
    # (``final_weights.scatter_reduce_(0, inverse, w, reduce="max", include_self=False)``)
    for tracked in (False, True):
        ours = _scatter_reduced(rg, reduce, include_self, tracked)
        theirs = _scatter_reduced(torch, reduce, include_self, tracked)
        for mine, reference in zip(ours, theirs):
            np.testing.assert_array_equal(mine.detach().numpy(), reference.detach().numpy())
    with rg.no_grad():
        ours = _scatter_reduced(rg, reduce, include_self, True)
    for mine, reference in zip(ours, theirs):
        np.testing.assert_array_equal(mine.numpy(), reference.detach().numpy())


@pytest.mark.parametrize("form", [0, 1, 2], ids=["method", "in_place", "function"])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_scatter_reduce_max_and_min_refuse_a_backward_as_torch_does(reduce, form):
    with pytest.raises(RuntimeError, match="Expected 'reduce' to be one of"):
        _scatter_reduced(torch, reduce, False, True)[form].sum().backward()
    out = _scatter_reduced(rg, reduce, False, True)[form]
    with pytest.raises(KernelArgumentError, match=f"scatter_reduce.*reduce='{reduce}'"):
        out.sum().backward()
    # the spelling torch's backward takes differentiates
    out = _scatter_reduced(rg, "a" + reduce, False, True)[form]
    assert out.sum().backward() is not None


def test_index_reduce_still_refuses_max_as_torch_does():
    with pytest.raises(RuntimeError, match="amax"):
        torch.zeros(3).index_reduce(0, torch.tensor([0]), torch.ones(1), "max")
    with pytest.raises(rg.InvalidArgumentError, match=r"index_reduce.*'amax'.*'max'"):
        rg.zeros(3).index_reduce(0, rg.tensor([0]), rg.ones(1), "max")


def _pair(lib):
    return [lib.tensor([1.0, -2.0]), lib.tensor([[3.0]])]


@pytest.mark.parametrize(
    "name, args",
    [("_foreach_mul", (2.0,)), ("_foreach_sqrt", ()), ("_foreach_norm", ()),
     ("_foreach_lerp", ("pair", 0.25)), ("_foreach_addcmul", ("pair", "pair")),
     ("_foreach_maximum", (0.5,))],
)  # fmt: skip
def test_foreach_out_of_place_forms_return_a_tuple_as_torch_s(name, args):
    # an EMA or optimizer written for torch adds to the result as a tuple
    # (``torch._foreach_norm(grads) + (norm,)``), which a list refuses
    def called(lib):
        given = [_pair(lib) if a == "pair" else a for a in args]
        return getattr(lib, name)(_pair(lib), *given)

    ours, theirs = called(rg), called(torch)
    assert type(theirs) is tuple and type(ours) is tuple
    for mine, reference in zip(ours + (rg.ones(1),), theirs + (torch.ones(1),)):
        np.testing.assert_array_equal(mine.numpy(), reference.numpy())
    assert type(rg._foreach_pow(2.0, _pair(rg))) is type(torch._foreach_pow(2.0, _pair(torch)))


def test_foreach_in_place_forms_return_the_tuple_given_as_torch_s():
    ours, theirs = tuple(_pair(rg)), tuple(_pair(torch))
    assert torch._foreach_mul_(theirs, 2.0) is theirs
    assert rg._foreach_mul_(ours, 2.0) is ours
    assert torch._foreach_zero_(theirs) is theirs and rg._foreach_zero_(ours) is ours
    assert torch._foreach_copy_(theirs, _pair(torch)) is theirs
    assert rg._foreach_copy_(ours, _pair(rg)) is ours
    assert ours[0].tolist() == theirs[0].tolist() == [1.0, -2.0]
