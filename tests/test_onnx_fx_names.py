"""``torch.onnx`` and ``torch.fx`` names that model code carries: what they answer in eager
code is torch's; exporting and tracing are refused by name (``rg.onnx`` and ``rg.fx`` were
missing: ``torch.onnx.is_in_onnx_export()`` in a forward, or ``torch.fx.wrap`` at a layer
module's top, stopped a port with an ``AttributeError``)."""

from __future__ import annotations

import pytest
import torch

import retrograd as rg


def test_is_in_onnx_export_answers_as_torch_outside_an_export():
    assert rg.onnx.is_in_onnx_export() is torch.onnx.is_in_onnx_export() is False


def test_a_forward_that_branches_on_the_export_runs_its_eager_branch():
    class Head(rg.nn.Module):
        def forward(self, x):
            if rg.onnx.is_in_onnx_export():
                return x
            return x.sigmoid()

    assert Head()(rg.tensor([0.0])).tolist() == [0.5]


@pytest.mark.parametrize("name", ["export", "dynamo_export"])
def test_exporting_is_refused_by_name(name):
    with pytest.raises(rg.InvalidArgumentError, match=f"onnx.{name}: retrograd writes no ONNX"):
        getattr(rg.onnx, name)(rg.nn.Linear(2, 2), rg.ones(1, 2), "model.onnx")


def test_fx_wrap_returns_what_it_is_given_at_a_module_s_top_level_as_torch_s():
    source = "def rounded(x):\n    return x.round()\nwrapped = lib.fx.wrap(rounded)\n"
    source += "named = lib.fx.wrap('len')\n"
    for lib in (torch, rg):
        module = {"lib": lib}
        exec(compile(source, "<layers>", "exec"), module)
        assert module["wrapped"] is module["rounded"] and module["named"] == "len"
    with pytest.raises(NotImplementedError, match="top level of a module"):
        torch.fx.wrap("len")
    with pytest.raises(rg.InvalidArgumentError, match="top level of a module"):
        rg.fx.wrap("len")


def test_tracing_is_refused_and_no_eager_module_is_a_graph_module():
    with pytest.raises(rg.InvalidArgumentError, match=r"fx\.symbolic_trace: retrograd does not"):
        rg.fx.symbolic_trace(rg.nn.Linear(2, 2))
    for name in ("GraphModule", "Graph", "Tracer"):
        with pytest.raises(rg.InvalidArgumentError, match=f"fx.{name}"):
            getattr(rg.fx, name)()
    assert not isinstance(rg.nn.Linear(2, 2), rg.fx.GraphModule)
    assert not isinstance(torch.nn.Linear(2, 2), torch.fx.GraphModule)
