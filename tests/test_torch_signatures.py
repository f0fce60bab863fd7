"""Every nn module and nn.functional function that retrograd shares with torch 2.13 takes
torch's parameter names (so keyword calls port), and the norm layers' ``bias=False`` trains as
torch's does."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812

#: torch parameters left out, each for a reason: deprecated aliases and internals
MODULE_EXCEPTIONS = {
    "RNNCellBase": {"num_chunks"},  # a base class's internal
}
FUNCTION_EXCEPTIONS = {
    "l1_loss": {"weight"},
    # the *_with_indices forms: torch's own helpers behind return_indices=True
    **{
        f"{kind}_pool{d}d_with_indices": {"input", "return_indices"}
        for kind in ("max", "adaptive_max")
        for d in (1, 2, 3)
    },
}


def _names(callable_):
    return set(inspect.signature(callable_).parameters) - {"args", "kwargs"}


def _shared_modules():
    for name in dir(torch.nn):
        theirs = getattr(torch.nn, name)
        if inspect.isclass(theirs) and issubclass(theirs, torch.nn.Module) and hasattr(rg.nn, name):
            yield name


def test_module_constructors_take_torchs_keywords():
    missing = {}
    for name in _shared_modules():
        ours = getattr(rg.nn, name)
        if {"args", "kwargs"} & set(inspect.signature(ours).parameters):
            continue
        gap = _names(getattr(torch.nn, name)) - _names(ours) - MODULE_EXCEPTIONS.get(name, set())
        if gap:
            missing[name] = sorted(gap)
    assert missing == {}


def test_functions_take_torchs_keywords():
    missing = {}
    for name in dir(torch.nn.functional):
        theirs = getattr(torch.nn.functional, name)
        if name.startswith("_") or not callable(theirs) or not hasattr(F, name):
            continue
        try:
            wanted = _names(theirs)
        except (TypeError, ValueError):  # a builtin without a signature
            continue
        if {"args", "kwargs"} & set(inspect.signature(getattr(F, name)).parameters):
            continue
        gap = wanted - _names(getattr(F, name)) - FUNCTION_EXCEPTIONS.get(name, set())
        if gap:
            missing[name] = sorted(gap)
    assert missing == {}


def test_input_as_a_keyword():
    x, y = rg.randn(3, 5), rg.tensor([0, 1, 4])
    assert F.cross_entropy(input=x, target=y).item() == F.cross_entropy(x, y).item()
    np.testing.assert_array_equal(F.relu(input=x).numpy(), F.relu(x).numpy())
    with pytest.raises(rg.errors.DTypeError, match="relu: got the input twice"):
        F.relu(x, input=x)


@pytest.mark.parametrize(
    "name, args",
    [
        ("BatchNorm2d", (4,)),
        ("GroupNorm", (2, 4)),
        ("InstanceNorm2d", (4,)),
        ("LazyBatchNorm2d", ()),
    ],
)
def test_norm_layers_without_bias_train_as_torchs(name, args):
    options = {"affine": True} if "Instance" in name else {}
    ours = getattr(rg.nn, name)(*args, bias=False, dtype="float64", **options)
    theirs = getattr(torch.nn, name)(*args, bias=False, dtype=torch.float64, **options)
    x = np.random.default_rng(0).standard_normal((3, 4, 5, 5))
    out, expected = ours(rg.tensor(x)), theirs(torch.tensor(x))
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    assert ours.bias is None and theirs.bias is None
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    grads = (out * out).sum().backward()
    (expected * expected).sum().backward()
    np.testing.assert_allclose(
        ours.weight.grad(grads).numpy(), theirs.weight.grad.numpy(), rtol=1e-10
    )
