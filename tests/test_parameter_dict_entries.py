"""``nn.ParameterDict`` holds any value, as torch's does since 1.12: a tensor becomes a
``Parameter``, a module a sub-module, anything else (an int, ``None``, a string) is kept under
its key, listed, looked up and printed, never trained. Each program runs on torch and on
retrograd and every observation is compared."""

from __future__ import annotations

import copy

import pytest
import torch

import retrograd as rg


def _observe(lib):
    seen = []
    table = lib.nn.ParameterDict({"b": lib.ones(2), "a": 1, "c": None, "m": lib.nn.Linear(2, 2)})
    seen.append(list(table.keys()))
    seen.append([name for name, _ in table.named_parameters()])
    seen.append(list(table.state_dict()))
    seen.append((table["a"], table["c"], type(table["m"]).__name__, len(table), "a" in table))
    table["a"] = lib.zeros(3)  # a plain entry becomes a parameter
    seen.append([name for name, _ in table.named_parameters()])
    try:
        table["b"] = 5  # a parameter's key takes only a tensor or None
        seen.append("assigned")
    except TypeError:
        seen.append("TypeError")
    seen.append([(key, type(value).__name__) for key, value in table.items()])
    table["b"] = None
    seen.append([(key, type(value).__name__) for key, value in table.items()])
    del table["m"]
    seen.append((list(table), [name for name, _ in table.named_modules()]))
    seen.append(list(copy.deepcopy(table)))
    seen.append((table.pop("c"), list(table), table.get("c", "absent")))
    table.update([("z", "text"), ("y", lib.ones(1))])
    seen.append([(key, type(value).__name__) for key, value in table.items()])
    seen.append(table.setdefault("n", 7))
    seen.append([(key, type(value).__name__) for key, value in table.copy().items()])
    seen.append(table.popitem()[0])
    seen.append(list(reversed(table)))
    table.clear()
    seen.append((len(table), list(table.named_parameters())))
    return seen


def test_entries_of_every_kind_behave_as_torchs():
    theirs, ours = _observe(torch), _observe(rg)
    assert ours == theirs


def test_plain_entries_are_printed_and_never_trained():
    table = rg.nn.ParameterDict({"scale": 0.5, "w": rg.ones(2)})
    assert repr(table).splitlines()[1:-1] == [
        "    (scale): Object of type: float",
        "    (w): Parameter containing: [retrograd.FloatTensor of size 2]",
    ]
    optimizer = rg.optim.SGD(table.parameters(), lr=0.1)
    assert len(optimizer.param_groups[0]["params"]) == 1


def test_a_key_named_as_a_method_shadows_nothing():
    # torch's setattr would put ``keys`` over the method (its next ``keys()`` call fails);
    # a plain entry is kept apart here. (A parameter under a method's name is refused by
    # register_parameter, as by torch's.)
    table = rg.nn.ParameterDict([("keys", 3), ("w", rg.ones(1))])
    assert list(table.keys()) == ["keys", "w"]
    assert table["keys"] == 3
    table.update({"items": None})
    assert [key for key, _ in table.items()] == ["keys", "w", "items"]


def test_a_bad_update_adds_nothing():
    table = rg.nn.ParameterDict([("w", rg.ones(1)), ("k", 1)])
    with pytest.raises(rg.DTypeError, match="'w'"):  # a parameter's key: a tensor or None
        table.update([("n", 2), ("k", rg.ones(2)), ("w", "not a tensor")])
    assert [(key, type(value).__name__) for key, value in table.items()] == [
        ("w", "Parameter"),
        ("k", "int"),
    ]


def test_the_keys_are_those_put_in_through_the_dictionary():
    # torch's ``_keys``: an entry removed behind the dictionary's back (``del
    # pd._parameters[key]``) keeps its key, whose lookup then fails; one registered behind
    # it (``register_parameter``) is trained and saved but is no key (this test asserted the
    # opposite, which torch never did, until helper nnsem94 compared it)
    def observe(lib):
        table = lib.nn.ParameterDict({"w": lib.ones(1), "v": lib.ones(1)})
        del table._parameters["w"]
        seen = [list(table), len(table), "w" in table]
        with pytest.raises(AttributeError):
            table["w"]
        table.register_parameter("u", lib.nn.Parameter(lib.zeros(1)))
        seen.append((list(table), [name for name, _ in table.named_parameters()]))
        return seen

    assert observe(rg) == observe(torch)
