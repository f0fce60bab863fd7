"""Printing against torch's: ``str``/``repr`` of tensors (torch's ``_tensor_str`` rules:
which dtypes are named, empty and 0-d tensors, summarization, the print options, nan/inf, -0.,
complex, narrow integers, half precision on the torch inner backend), of leaves requiring grad
and results in the graph, parameters, sizes, dtypes and devices.

The expected text is torch's own, with ``torch.`` read as ``retrograd.`` (retrograd's dtypes
and ``Size`` print under its name, as a ported log compares them). A result in the graph names
its backward node as torch's does (``grad_fn=<MulBackward0>``) for the common ops only, so
those compare with the name left out.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch


def _torch_text(text: str) -> str:
    return text.replace("torch.", "retrograd.")


def _both(make):
    return make(rg), make(torch)


def _values(lib, seed, shape, dtype="float32", scale=1.0):
    array = np.random.default_rng(seed).standard_normal(shape) * scale
    return lib.tensor(array.astype(dtype))


CASES = {
    "floats": lambda lib: lib.tensor([1.0, 2.0]),
    "ints": lambda lib: lib.tensor([1, 2]),
    "bools": lambda lib: lib.tensor([True, False]),
    "float64": lambda lib: lib.tensor([1.0], dtype=lib.float64),
    "float64 fractions": lambda lib: lib.tensor([1 / 3, -2 / 7], dtype=lib.float64),
    "fractions": lambda lib: lib.tensor([1 / 3, 2.5, -7.125]),
    "0-d float": lambda lib: lib.tensor(3.0),
    "0-d fraction": lambda lib: lib.tensor(-0.5),
    "0-d int": lambda lib: lib.tensor(7),
    "0-d bool": lambda lib: lib.tensor(True),
    "0-d float64": lambda lib: lib.tensor(2.5, dtype=lib.float64),
    "0-d int32": lambda lib: lib.tensor(3, dtype=lib.int32),
    "empty float": lambda lib: lib.tensor([]),
    "empty 0x3": lambda lib: lib.zeros(0, 3),
    "empty int": lambda lib: lib.zeros(0, dtype=lib.int64),
    "empty 2x0 int": lambda lib: lib.zeros(2, 0, dtype=lib.int64),
    "empty bool": lambda lib: lib.zeros(0, dtype=lib.bool),
    "empty float64": lambda lib: lib.zeros(0, 2, dtype=lib.float64),
    "empty complex": lambda lib: lib.zeros(0, dtype=lib.complex64),
    "int8": lambda lib: lib.tensor([127, -128, 0], dtype=lib.int8),
    "int16": lambda lib: lib.tensor([[32767, -5]], dtype=lib.int16),
    "int32": lambda lib: lib.tensor([2**31 - 1, -5], dtype=lib.int32),
    "uint8": lambda lib: lib.tensor([250, 3], dtype=lib.uint8),
    "big ints": lambda lib: lib.tensor([2**40, -3, 12]),
    "matrix": lambda lib: lib.arange(12.0).reshape(3, 4),
    "3-d": lambda lib: lib.arange(24).reshape(2, 3, 4),
    "4-d": lambda lib: lib.arange(16.0).reshape(2, 2, 2, 2) / 3,
    "nan inf": lambda lib: lib.tensor([float("nan"), float("inf"), -float("inf"), 1.0]),
    "nan inf fractions": lambda lib: lib.tensor([float("nan"), float("inf"), 0.25]),
    "all nan": lambda lib: lib.tensor([float("nan"), float("nan")]),
    "zeros": lambda lib: lib.zeros(2, 3),
    "negative zero": lambda lib: lib.tensor([-0.0, 0.0, 1.0]),
    "negative zero alone": lambda lib: lib.tensor([-0.0]),
    "0-d negative zero": lambda lib: lib.tensor(-0.0),
    "scientific small": lambda lib: lib.tensor([1e-5, 1.0]),
    "scientific large": lambda lib: lib.tensor([1e9, 1.0]),
    "scientific range": lambda lib: lib.tensor([0.001, 2.0, 3.0]),
    "integral large": lambda lib: lib.tensor([1e8, 2.0]),
    "random": lambda lib: _values(lib, 0, (4, 5)),
    "random float64": lambda lib: _values(lib, 1, (3, 3), "float64"),
    "random wide": lambda lib: _values(lib, 2, (2, 30), scale=100.0),
    "long vector wraps": lambda lib: lib.arange(60.0) / 7,
    "long int vector wraps": lambda lib: lib.arange(100),
    "complex": lambda lib: lib.tensor([1 + 2j, -3.5 - 0.5j]),
    "complex 0-d": lambda lib: lib.tensor(1 - 2j),
    "complex negative zero": lambda lib: lib.tensor([complex(1.0, -0.0)]),
    "complex128": lambda lib: lib.tensor([1 + 2j], dtype=lib.complex128),
    "complex matrix": lambda lib: lib.tensor([[1 + 1j, 2.5 - 1e-3j], [0j, -1j]]),
    "summarized vector": lambda lib: lib.arange(2000),
    "summarized floats": lambda lib: lib.arange(2000.0) / 3,
    "summarized matrix": lambda lib: lib.arange(3000.0).reshape(30, 100),
    "summarized 3-d": lambda lib: lib.arange(4000).reshape(10, 20, 20),
    "summarized complex": lambda lib: lib.arange(2000.0).reshape(40, 50) * (1 + 1j),
    "summarized bools": lambda lib: lib.arange(1500).reshape(30, 50) % 3 == 0,
    "summarized int8": lambda lib: (lib.arange(1200) % 100).to(lib.int8),
}


@pytest.mark.parametrize("name", list(CASES))
def test_tensors_print_as_torch(name):
    ours, theirs = _both(CASES[name])
    assert repr(ours) == _torch_text(repr(theirs))
    assert str(ours) == _torch_text(str(theirs))


def test_the_default_dtype_decides_which_float_dtype_is_named():
    before = rg.get_default_dtype()
    try:
        for lib in (rg, torch):
            lib.set_default_dtype(lib.float64)
        for make in (
            lambda lib: lib.tensor([1.5, 2.0]),
            lambda lib: lib.tensor([1.5], dtype=lib.float32),
            lambda lib: lib.tensor([1 + 1j]),
            lambda lib: lib.tensor([1 + 1j], dtype=lib.complex64),
            lambda lib: lib.zeros(0, dtype=lib.float32),
            lambda lib: lib.zeros(0),
        ):
            ours, theirs = _both(make)
            assert repr(ours) == _torch_text(repr(theirs))
    finally:
        rg.set_default_dtype(before)
        torch.set_default_dtype(torch.float32)


OPTIONS = [
    {"precision": 2},
    {"precision": 6},
    {"precision": 0},
    {"threshold": 5},
    {"threshold": 5, "edgeitems": 1},
    {"threshold": 5, "edgeitems": 0},
    {"linewidth": 30},
    {"linewidth": 200},
    {"sci_mode": True},
    {"sci_mode": False},
    {"profile": "short"},
    {"profile": "full"},
    {"profile": "short", "precision": 5},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) for o in OPTIONS])
def test_print_options_apply_as_torch(options):
    makes = [
        CASES["fractions"],
        CASES["random"],
        CASES["long vector wraps"],
        CASES["summarized matrix"],
        CASES["scientific small"],
        CASES["complex matrix"],
        CASES["3-d"],
        lambda lib: lib.arange(10),
        lambda lib: lib.arange(20.0).reshape(4, 5) / 3,
    ]
    try:
        rg.set_printoptions(**options)
        torch.set_printoptions(**options)
        assert rg.get_printoptions() == torch._tensor_str.get_printoptions()
        for make in makes:
            ours, theirs = _both(make)
            assert repr(ours) == _torch_text(repr(theirs)), options
    finally:
        rg.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert rg.get_printoptions() == torch._tensor_str.get_printoptions()


def test_a_call_that_names_no_sci_mode_resets_it_as_torch():
    try:
        for lib in (rg, torch):
            lib.set_printoptions(sci_mode=True)
            lib.set_printoptions(precision=3)
        assert rg.get_printoptions() == torch._tensor_str.get_printoptions()
        assert rg.get_printoptions()["sci_mode"] is None
        assert repr(rg.tensor([0.5, 2.0])) == "tensor([0.500, 2.000])"
    finally:
        rg.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def test_an_unknown_profile_is_refused_and_changes_nothing():
    with pytest.raises(rg.InvalidArgumentError, match="set_printoptions: profile"):
        rg.set_printoptions(profile="long", precision=1)
    assert rg.get_printoptions() == torch._tensor_str.get_printoptions()


def _node_unnamed(text: str) -> str:
    """``text`` with its backward node's name left out: the names differ in length, and so
    may whether the suffix wraps to a line of its own."""
    return re.sub(r",\s*grad_fn=<\w+>", ", grad_fn=<node>", _torch_text(text))


GRAPH_CASES = {
    "leaf": lambda lib: lib.tensor([1.0, 2.0], requires_grad=True),
    "0-d leaf": lambda lib: lib.tensor(2.0, requires_grad=True),
    "float64 leaf": lambda lib: lib.tensor([0.5], dtype=lib.float64, requires_grad=True),
    "requires_grad_": lambda lib: lib.zeros(2, 2).requires_grad_(),
    "product": lambda lib: lib.tensor([1.0, 2.0], requires_grad=True) * 2,
    "sum": lambda lib: (lib.tensor([1.0, 2.0], requires_grad=True) ** 2).sum(),
    "float64 result": lambda lib: lib.ones(2, 3, dtype=lib.float64, requires_grad=True).exp(),
    "matmul": lambda lib: lib.ones(2, 3, requires_grad=True) @ lib.ones(3, 2),
    "detached": lambda lib: (lib.ones(2, requires_grad=True) * 3).detach(),
    "empty leaf": lambda lib: lib.zeros(0, 2, requires_grad=True),
    "big result": lambda lib: lib.ones(40, 40, requires_grad=True) + 1,
    "wide result wraps suffix": lambda lib: (
        lib.arange(1.0, 11.0, dtype=lib.float64).requires_grad_() / 3
    ),
}


@pytest.mark.parametrize("name", list(GRAPH_CASES))
def test_graph_tensors_print_as_torch(name):
    ours, theirs = _both(GRAPH_CASES[name])
    assert (ours.grad_fn is None) == (theirs.grad_fn is None)
    assert _node_unnamed(repr(ours)) == _node_unnamed(repr(theirs))
    if ours.grad_fn is not None:
        assert f"grad_fn=<{ours.grad_fn}>)" in repr(ours)


def test_a_result_names_its_backward_node():
    x = rg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    assert repr(y) == "tensor([1., 4.], grad_fn=<MulBackward0>)"  # torch's text
    assert ", tracked" not in repr(y)
    with rg.no_grad():
        assert repr(x * 2) == "tensor([2., 4.])"


def test_parameters_print_as_torch():
    for make in (
        lambda lib: lib.nn.Parameter(lib.ones(2, 3)),
        lambda lib: lib.nn.Parameter(lib.tensor([0.5, -1.25]), requires_grad=False),
        lambda lib: lib.nn.Parameter(lib.zeros(0)),
    ):
        ours, theirs = _both(make)
        assert repr(ours) == _torch_text(repr(theirs))
        assert str(ours) == _torch_text(str(theirs))
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2)
    ours = rg.nn.Linear(3, 2)
    with rg.no_grad():
        ours.weight.copy_(rg.tensor(theirs.weight.detach().numpy()))
        ours.bias.copy_(rg.tensor(theirs.bias.detach().numpy()))
    assert repr(ours.weight) == _torch_text(repr(theirs.weight))
    assert str(list(ours.parameters())) == _torch_text(str(list(theirs.parameters())))


def test_sizes_print_as_torch():
    for shape in [(6, 3, 5, 5), (), (0,), (2,)]:
        ours, theirs = rg.zeros(shape), torch.zeros(shape)
        for pair in [
            (ours.size(), theirs.size()),
            (ours.shape, theirs.shape),
            (ours.shape[1:], theirs.shape[1:]),
            (rg.Size(shape), torch.Size(shape)),
        ]:
            assert repr(pair[0]) == _torch_text(repr(pair[1]))
            assert str(pair[0]) == _torch_text(str(pair[1]))
            assert f"{pair[0]}" == _torch_text(f"{pair[1]}")
    assert repr(rg.zeros(2, 3).size() + (4,)) == "retrograd.Size([2, 3, 4])"
    assert rg.zeros(2, 3).shape == (2, 3)  # still the tuple it is


def test_dtypes_print_by_name_and_repr_under_the_module():
    for name in ["float32", "float64", "int64", "int32", "int8", "uint8", "bool", "complex64"]:
        ours, theirs = getattr(rg, name), getattr(torch, name)
        assert repr(ours) == _torch_text(repr(theirs))
        # ``str`` is the bare name: an rg dtype is that string (``rg.float32 == "float32"``)
        assert str(ours) == str(theirs).removeprefix("torch.") == name
    assert repr(rg.tensor([1.0]).dtype) == "retrograd.float32"


def test_devices_print_as_torchs():
    # the first CPU device prints as torch's "cpu" (the data-parallel engine's others with
    # their index: cpu:1, ...); a CPU tensor's repr names no device, as torch's
    t = rg.ones(2)
    assert str(t.device) == "cpu" and t.device.type == "cpu"
    assert str(rg.device("cpu", 1)) == "cpu:1"
    assert repr(t) == repr(torch.ones(2))
    assert repr(rg.zeros(2, 3, device="meta")) == _torch_text(
        repr(torch.zeros(2, 3, device="meta"))
    )
    assert repr(rg.zeros(2, dtype=rg.int32, device="meta")) == _torch_text(
        repr(torch.zeros(2, dtype=torch.int32, device="meta"))
    )


def test_containers_of_tensors_print_as_torch():
    def make(lib):
        return {"a": [lib.tensor([1.0, 2.5]), (lib.tensor(3), lib.zeros(0, 2))]}

    ours, theirs = _both(make)
    assert str(ours) == _torch_text(str(theirs))
    assert f"{rg.tensor(0.25):.3f}" == f"{torch.tensor(0.25):.3f}"


@pytest.mark.skipif(not on_torch(), reason="half precision lives on the torch inner backend")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_prints_as_torch(dtype):
    for make in (
        lambda lib: lib.tensor([1 / 3, 2.0, -5.5], dtype=getattr(lib, dtype)),
        lambda lib: lib.tensor(0.1, dtype=getattr(lib, dtype)),
        lambda lib: (lib.arange(2000.0) / 7).to(getattr(lib, dtype)),
        lambda lib: lib.tensor([1e-5, 100.0, math.inf], dtype=getattr(lib, dtype)),
        lambda lib: lib.zeros(0, dtype=getattr(lib, dtype)),
        lambda lib: lib.ones(2, dtype=getattr(lib, dtype), requires_grad=True),
    ):
        ours, theirs = _both(make)
        assert repr(ours) == _torch_text(repr(theirs))


def test_random_tensors_print_as_torch():
    # shapes up to 4x4x4 (empty ones too), magnitudes from 1e-6 to 1e9, integral floats,
    # ints, complex values and nan: the notation, widths and line breaks as torch's, the
    # dtype suffix wrapping where torch's does
    rng = np.random.default_rng(20261205)
    for _ in range(400):
        shape = tuple(int(n) for n in rng.integers(0, 5, rng.integers(0, 4)))
        kind = rng.integers(0, 5)
        values = rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 10)
        dtypes = [None, "float64"]
        if kind == 1:
            values = np.round(values)
        elif kind == 2:
            values, dtypes = (values % 100).astype(np.int64), [None, "int32", "int8"]
        elif kind == 3:
            values, dtypes = values + 1j * rng.standard_normal(shape), [None]
        elif kind == 4 and values.size:
            values.flat[0] = np.nan
        for dtype in dtypes:
            ours, theirs = _both(
                lambda lib, values=values, dtype=dtype: lib.tensor(
                    values, dtype=dtype and getattr(lib, dtype)
                )
            )
            assert repr(ours) == _torch_text(repr(theirs)), (shape, dtype)


SPARSE_CASES = {
    "float64": lambda lib: lib.tensor([[0.0, 2.0], [3.5, 0.0]], dtype=lib.float64).to_sparse(),
    "empty": lambda lib: lib.zeros(2, 3).to_sparse(),
    "ints": lambda lib: lib.tensor([[0, 2], [3, 0]]).to_sparse(),
    "wide": lambda lib: lib.arange(40.0).reshape(2, 20).to_sparse(),
    "made": lambda lib: lib.sparse_coo_tensor([[0, 1, 1]], [1.0, 2.0, 3.0], (4,)),
}


@pytest.mark.parametrize("name", list(SPARSE_CASES))
def test_sparse_tensors_print_as_torch(name):
    ours, theirs = _both(SPARSE_CASES[name])
    assert repr(ours) == _torch_text(repr(theirs))


def test_buffers_and_subclasses_print_as_torch():
    ours, theirs = _both(lambda lib: lib.nn.Buffer(lib.tensor([1.0, 2.5])))
    assert repr(ours) == _torch_text(repr(theirs))  # torch's Buffer is a plain tensor

    class Marked(rg.Tensor):
        pass

    class TorchMarked(torch.Tensor):
        pass

    ours = rg.tensor([1.0, 2.0]).as_subclass(Marked)
    theirs = torch.tensor([1.0, 2.0]).as_subclass(TorchMarked)
    assert repr(ours) == repr(theirs).replace("TorchMarked", "Marked") == "Marked([1., 2.])"
