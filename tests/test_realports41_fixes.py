"""Regression tests for the defects the LLM fine-tuning ports of ``test_real_ports_241..249``
exposed (expected values are torch's own, the library's name aside)."""

from __future__ import annotations

import pytest
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


def _entries(params) -> list:
    return [
        (key, None if value is None else value.detach().numpy().tolist())
        for key, value in params.items()
    ]


def test_parameter_dict_has_torchs_dict_methods():
    # peft and hand-written adapters treat a ParameterDict as a dict: get, setdefault,
    # popitem, clear, copy, fromkeys, |, |=, reversed (retrograd had none of them)
    results = []
    for lib in (torch, rg):
        made = lib.nn.ParameterDict({"b": lib.ones(2), "a": lib.zeros(1)})
        other = lib.nn.ParameterDict([("c", lib.full((1,), 3.0)), ("a", lib.full((1,), 7.0))])
        record = [
            made.get("a").detach().numpy().tolist(),
            made.get("missing"),
            made.get("missing", 5),
            made.setdefault("a", lib.ones(3)).detach().numpy().tolist(),
            made.setdefault("d", lib.full((2,), 4.0)).detach().numpy().tolist(),
            list(reversed(made)),
            _entries(made | other),
            _entries(other | made),
            list(made.fromkeys(["x", "y"]).keys()),
        ]
        duplicate = made.copy()
        record.append(duplicate["b"] is made["b"])  # the same parameters, not copies
        key, value = made.popitem()
        record += [key, value.detach().numpy().tolist(), list(made)]
        made |= other
        record.append(_entries(made))
        made.clear()
        record += [len(made), list(duplicate), len(list(duplicate.parameters()))]
        listed = lib.nn.ParameterList([lib.ones(1)])
        listed += [lib.zeros(2)]
        record.append([p.shape[0] for p in listed])
        results.append(record)
    ours, theirs = results[1], results[0]
    assert ours == theirs


def test_parameter_dict_popitem_of_an_empty_dict_is_a_key_error():
    with pytest.raises(KeyError):
        torch.nn.ParameterDict().popitem()  # torch's behaviour, which retrograd keeps
    emptied = rg.nn.ParameterDict({"a": rg.ones(1)})
    emptied.popitem()
    with pytest.raises(KeyError, match="empty"):
        emptied.popitem()
    emptied["b"] = rg.ones(2)  # still usable
    assert list(emptied) == ["b"]


def test_parameter_dict_fromkeys_of_keys_that_do_not_iterate_names_the_op():
    with pytest.raises(TypeError):
        torch.nn.ParameterDict().fromkeys(3)
    with pytest.raises(rg.DTypeError, match=r"ParameterDict\.fromkeys"):
        rg.nn.ParameterDict().fromkeys(3)
