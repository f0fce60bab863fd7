"""Regression tests for the defects the LLM fine-tuning ports of ``test_real_ports_241..249``
exposed (expected values are torch's own, the library's name aside)."""

from __future__ import annotations

import torch

import retrograd as rg


def _as_torch_names(text: str) -> str:
    return text.replace("retrograd.", "torch.")


def test_parameter_dict_repr_names_each_entry_by_type_name_as_torch():
    # torch's ParameterDict prints torch.typename(p) (FloatTensor, DoubleTensor), its
    # ParameterList the dtype: peft's DoRA layers print a ParameterDict of magnitudes
    def make(lib):
        entries = {"a": lib.ones(2, 3, dtype=lib.float64), "b": lib.ones(2)}
        return lib.nn.ParameterDict(entries), lib.nn.ParameterList(list(entries.values()))

    (their_dict, their_list), (our_dict, our_list) = make(torch), make(rg)
    assert _as_torch_names(repr(our_dict)) == repr(their_dict)
    assert _as_torch_names(repr(our_list)) == repr(their_list)
    one = {"default": 0}
    their_one = torch.nn.ParameterDict({k: torch.ones(4) for k in one})
    our_one = rg.nn.ParameterDict({k: rg.ones(4) for k in one})
    assert _as_torch_names(repr(our_one)) == repr(their_one)
