"""Regression tests for the defects the real ports 43-47 found (each expected value from
torch)."""

from __future__ import annotations

import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize(
    "make",
    [
        lambda nn: nn.LayerNorm(4),
        lambda nn: nn.LayerNorm([2, 4], eps=1e-6, bias=False),
        lambda nn: nn.LayerNorm(4, elementwise_affine=False),
        lambda nn: nn.Dropout(0.1),
        lambda nn: nn.Dropout(p=0.3, inplace=True),
        lambda nn: nn.Dropout2d(0.2),
        lambda nn: nn.AlphaDropout(0.2),
    ],
)
def test_layer_norm_and_dropout_print_as_torch_prints_them(make):
    # print(model) of the Swin Transformer (test_real_ports_45): torch's LayerNorm shows
    # elementwise_affine and bias, its dropouts inplace
    assert repr(make(rg.nn)) == repr(make(torch.nn))


def test_a_module_with_an_extra_repr_and_children_prints_as_torch_prints_it():
    # Swin's BasicLayer and WindowAttention (test_real_ports_45): the extra_repr goes on its
    # own line above the children, and a multi-line one line by line
    def build(nn):
        class Layer(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(2, 3)
                self.blocks = nn.ModuleList([nn.Identity()])

            def extra_repr(self):
                return "dim=2, depth=1"

        class Two(nn.Module):
            def extra_repr(self):
                return "first\nsecond"

        outer = nn.Sequential(Layer(), Two())
        return outer

    assert repr(build(rg.nn)) == repr(build(torch.nn))


def test_a_module_list_prints_runs_of_alike_modules_once_as_torch_does():
    # Swin's second stage (test_real_ports_45): two unshifted blocks print as "(0-1): 2 x"
    def build(nn):
        return nn.ModuleList(
            [nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.ReLU(), nn.ReLU()]
        )

    assert repr(build(rg.nn)) == repr(build(torch.nn))
    assert repr(rg.nn.ModuleList()) == repr(torch.nn.ModuleList())
    assert repr(rg.nn.Sequential(rg.nn.ModuleList([rg.nn.ReLU()] * 2))) == repr(
        torch.nn.Sequential(torch.nn.ModuleList([torch.nn.ReLU()] * 2))
    )
