"""Device kinds no backend here computes on (``mps``, ``xpu``, ``xla``, ...) are refused, as
torch's CPU build refuses them; they were labelled with the device while the data stayed on
the CPU, so a program that asked for one ran where torch's stops. ``meta`` stays a label (a
model built under ``with rg.device("meta")`` before ``to_empty``), and ``cpu`` works."""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from retrograd import nn

ABSENT = ["mps", "xpu", "xla", "hip", "ipu", "maia", "ve", "vulkan"]


@pytest.mark.parametrize("kind", ABSENT)
def test_moving_to_an_absent_device_is_refused_as_torch_refuses_it(kind):
    with pytest.raises((RuntimeError, AssertionError, NotImplementedError)):
        torch.ones(2).to(kind)
    x = rg.tensor([1.0, 2.0])
    with pytest.raises(rg.DeviceUnavailableError, match=rf"to: .*{kind}.*not linked"):
        x.to(kind)
    assert x.device.kind == "cpu" and x.tolist() == [1.0, 2.0]  # (left usable)
    assert (x * 2).tolist() == [2.0, 4.0]


@pytest.mark.parametrize("kind", ABSENT)
def test_making_a_tensor_on_an_absent_device_is_refused(kind):
    with pytest.raises((RuntimeError, AssertionError, NotImplementedError)):
        torch.ones(2, device=kind)
    with pytest.raises(rg.DeviceUnavailableError, match=rf"ones: .*{kind}"):
        rg.ones(2, device=kind)
    with pytest.raises(rg.DeviceUnavailableError, match=kind):
        rg.tensor([1.0], device=kind)
    with pytest.raises(rg.DeviceUnavailableError, match=kind):
        rg.zeros_like(rg.ones(2), device=kind)


def test_a_module_moved_to_an_absent_device_is_refused_and_stays_where_it_was():
    model = nn.Linear(3, 2)
    with pytest.raises(rg.DeviceUnavailableError, match="mps"):
        model.to("mps")
    assert model.weight.device.kind == "cpu"
    assert model(rg.ones(1, 3)).shape == (1, 2)


def test_a_device_block_of_an_absent_kind_is_refused_where_meta_and_cpu_are_not():
    with pytest.raises(rg.DeviceUnavailableError, match="xpu"), rg.device("xpu"):
        pass
    assert rg.device("mps").type == "mps"  # (naming the device is no placement: torch's too)
    with rg.device("meta"):
        assert rg.ones(2).device.type == "meta"
    assert rg.ones(2).to("meta").device.type == "meta"
    assert rg.ones(2, device="cpu").device.type == "cpu"
