"""Regression tests for the defects the real ports 48-49 found that have no better home (each
expected value from torch; the others sit in ``test_linalg_extra.py``, ``test_optim_in_place.py``
and ``test_fft.py``)."""

from __future__ import annotations

import inspect

import pytest
import torch

import retrograd as rg

#: torch's activation modules that take ``inplace``
INPLACE = sorted(
    name
    for name, cls in vars(torch.nn).items()
    if inspect.isclass(cls)
    and issubclass(cls, torch.nn.Module)
    and "inplace" in inspect.signature(cls.__init__).parameters
)


@pytest.mark.parametrize("inplace", [True, False, None])
@pytest.mark.parametrize("name", INPLACE)
def test_activations_print_inplace_as_torch_prints_it(name, inplace):
    # print(self) of Deep Sets' D (test_real_ports_49): torch's ELU(inplace=True) shows
    # "inplace=True", as do ReLU, LeakyReLU, SiLU...; Hardswish and Hardsigmoid do not
    kwargs = {} if inplace is None else {"inplace": inplace}
    if name == "Threshold":
        kwargs.update(threshold=0.1, value=2.0)
    assert repr(getattr(rg.nn, name)(**kwargs)) == repr(getattr(torch.nn, name)(**kwargs))


def test_the_list_covers_the_common_ones():
    assert {"ReLU", "ELU", "LeakyReLU", "SiLU", "Hardswish", "Dropout"} <= set(INPLACE)
