"""Leftovers closed against torch 2.13: deep copies of computed tensors (the old weight_norm
hooks), register_parameter of a plain tensor, ParameterList's non-tensor entries,
Module.to(complex), share_memory, checkpoints without a folder, the vector norms' second
derivative at the zero vector, and jacfwd/hessian under randomness="error". Every expected
behaviour is torch's."""

from __future__ import annotations

import copy
import io
import warnings
import zipfile
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch

import retrograd as rg


def _quiet(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f()


# -- (1) what torch refuses ------------------------------------------------------------------------
def test_deepcopy_of_a_module_with_the_old_weight_norm_hook_is_refused_as_torch():
    rg.manual_seed(0)
    torch.manual_seed(0)
    refused = _quiet(lambda: torch.nn.utils.weight_norm(torch.nn.Linear(3, 2)))
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(refused)
    module = _quiet(lambda: rg.nn.utils.weight_norm(rg.nn.Linear(3, 2)))
    with pytest.raises(rg.AutodiffError, match=r"deepcopy: only tensors .*MulBackward0"):
        copy.deepcopy(module)
    # as in torch: fine once the weight is not in a graph, and for spectral_norm before a step
    with rg.no_grad():
        module(rg.ones((1, 3)))
    assert isinstance(copy.deepcopy(module), rg.nn.Linear)
    assert isinstance(copy.deepcopy(rg.nn.utils.spectral_norm(rg.nn.Linear(3, 2))), rg.nn.Linear)
    x = rg.tensor([1.0, 2.0]).require_grad()
    assert copy.deepcopy(x).is_leaf  # a leaf is copied
    y = x * 2.0
    with pytest.raises(rg.AutodiffError):
        copy.deepcopy({"cached": y})
    np.testing.assert_array_equal(x.grad(y.sum().backward()).numpy(), [2.0, 2.0])


def test_register_parameter_refuses_a_plain_tensor_as_torch():
    with pytest.raises(TypeError, match=r"cannot assign 'torch\.FloatTensor' object to parameter"):
        torch.nn.Linear(2, 2).register_parameter("extra", torch.zeros(2))
    layer = rg.nn.Linear(2, 2)
    with pytest.raises(rg.DTypeError, match=r"register_parameter: cannot assign .* 'extra'"):
        layer.register_parameter("extra", rg.zeros(2))
    assert "extra" not in dict(layer.named_parameters())
    layer.register_parameter("extra", rg.nn.Parameter(rg.zeros(2)))
    layer.register_parameter("absent", None)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias", "extra"]


# -- (2) what torch allows -------------------------------------------------------------------------
def test_parameter_list_keeps_non_tensor_entries_as_torch():
    for lib in (torch, rg):
        entries = lib.nn.ParameterList([lib.zeros(2), 3, "s", None])
        entries.append(lib.ones(1))
        entries.extend([4.5])
        assert [type(v).__name__ for v in entries] == [
            "Parameter", "int", "str", "NoneType", "Parameter", "float"
        ]  # fmt: skip
        assert len(entries) == 6 and entries[1] == 3 and entries[-1] == 4.5
        assert [n for n, _ in entries.named_parameters()] == ["0", "4"]
        assert list(entries.state_dict()) == ["0", "4"]
        assert "(1): Object of type: int" in repr(entries)
        entries[1] = lib.ones(3)  # a plain entry's place may take a tensor, made a Parameter
        assert [n for n, _ in entries.named_parameters()] == ["0", "4", "1"]  # (in order put)
        assert [type(v).__name__ for v in entries[1:3]] == ["Parameter", "str"]
    with pytest.raises(rg.DTypeError, match=r"ParameterList: cannot assign str as parameter '0'"):
        entries[0] = "x"  # torch's TypeError: a parameter's place takes a Parameter or None
    with pytest.raises(IndexError):
        entries[6]


def test_module_to_complex_casts_floating_parameters_and_buffers_as_torch():
    for lib in (torch, rg):
        model = lib.nn.BatchNorm1d(2)
        with pytest.warns(UserWarning):
            assert model.to(lib.complex64) is model
        got = [str(t.dtype).rpartition(".")[2] for t in (*model.parameters(), *model.buffers())]
        assert got == ["complex64"] * 4 + ["int64"]  # num_batches_tracked keeps its dtype
        assert isinstance(model.weight, lib.nn.Parameter) and model.weight.requires_grad
    linear = _quiet(lambda: rg.nn.Linear(2, 1).to(rg.complex128))
    x = rg.tensor(np.array([[1.0 + 1.0j, 2.0]]))
    assert linear(x).dtype == "complex128"
    with pytest.raises(rg.DTypeError, match=r"Module.to: only floating point or complex.*int64"):
        rg.nn.Linear(2, 1).to(rg.int64)


def test_share_memory_returns_the_module_and_refuses_only_another_process():
    model = rg.nn.Linear(2, 2)
    assert not model.weight.is_shared()
    assert model.share_memory() is model  # torch's: the module, in place
    assert model.weight.is_shared() and model.bias.is_shared()
    assert not copy.deepcopy(model).weight.is_shared()  # a copy is not shared (torch's)
    buffer = io.BytesIO()
    rg.save(model.state_dict(), buffer)  # saving is not sending to a process
    with pytest.raises(rg.InvalidArgumentError, match=r"to another process.*Hogwild"):
        ForkingPickler.dumps(model)  # what a spawned process's arguments go through
    assert ForkingPickler.dumps(rg.nn.Linear(2, 2))  # a tensor not shared is sent as a copy


# -- (3) how devices print -------------------------------------------------------------------------
def test_devices_print_as_torchs():
    assert (str(torch.device("cpu")), repr(torch.device("cpu"))) == ("cpu", "device(type='cpu')")
    assert (str(rg.device("cpu")), repr(rg.device("cpu"))) == ("cpu", "device(type='cpu')")
    assert str(rg.zeros(1).device) == str(torch.zeros(1).device) == "cpu"
    assert f"{rg.zeros(1).device}" == "cpu"
    assert repr(rg.device("cuda", 1)) == repr(torch.device("cuda", 1))
    assert str(rg.device("cuda:1")) == "cuda:1"
    assert str(rg.device("cpu", 1)) == "cpu:1"  # a logical CPU device of data parallelism
    cpu = rg.device("cpu")
    assert (cpu.type, cpu.index) == ("cpu", 0)  # (torch's index is None)
    assert rg.device(str(cpu)) == cpu and hash(rg.device("cpu", 0)) == hash(cpu)


# -- (4) a checkpoint without its folder -----------------------------------------------------------
def _flattened(path):
    """A torch checkpoint rewritten with its records at the top level (no archive folder)."""
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buffer)
    flat = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as source,
        zipfile.ZipFile(flat, "w") as target,
    ):
        for name in source.namelist():
            target.writestr(name.partition("/")[2], source.read(name))
    path.write_bytes(flat.getvalue())
    return path


def test_a_checkpoint_whose_data_pkl_is_at_the_top_level_is_refused_as_torch(tmp_path):
    path = _flattened(tmp_path / "flat.pt")
    with pytest.raises(RuntimeError, match="not in a subdirectory"):
        torch.load(path)
    with pytest.raises(rg.InvalidArgumentError, match=r"not in a subdirectory: 'data\.pkl'"):
        rg.load(path)
    good = tmp_path / "good.pt"
    torch.save({"w": torch.arange(3.0)}, good)
    np.testing.assert_array_equal(rg.load(good)["w"].numpy(), [0.0, 1.0, 2.0])


# -- (5) second derivatives of the vector norms at the zero vector ---------------------------------
NORMS = {
    "vector_norm": lambda lib, x, o: lib.linalg.vector_norm(x, dim=-1),
    "vector_norm_3": lambda lib, x, o: lib.linalg.vector_norm(x, 3, dim=-1),
    "vector_norm_1": lambda lib, x, o: lib.linalg.vector_norm(x, 1, dim=-1),
    "norm": lambda lib, x, o: x.norm(dim=-1),
    "normalize": lambda lib, x, o: lib.nn.functional.normalize(x, dim=-1) * o,
    "cosine_similarity": lambda lib, x, o: lib.nn.functional.cosine_similarity(x, o, dim=-1),
}


def _first_and_second(lib, f, x_np, other_np):
    if lib is torch:
        x = torch.tensor(x_np, requires_grad=True)
        (g,) = torch.autograd.grad(f(torch, x, torch.tensor(other_np)).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad((g * torch.tensor(other_np)).sum(), x)
        return g.detach().numpy(), h.numpy(force=True)  # (torch gives a ZeroTensor for p=1)
    x = rg.tensor(x_np).require_grad()
    (g,) = rg.autograd.grad(f(rg, x, rg.tensor(other_np)).sum(), x, create_graph=True)
    (h,) = rg.autograd.grad((g * rg.tensor(other_np)).sum(), x)
    return g.detach().numpy(), h.numpy()


@pytest.mark.parametrize("name", list(NORMS))
def test_second_derivative_of_a_norm_at_the_zero_vector_is_torchs(name):
    # a zero row, a tiny row and an ordinary one: torch's NaN only where the vector is zero
    x = np.array([[0.0, 0.0, 0.0], [1e-9, 0.0, -2e-9], [0.5, -1.0, 2.0]])
    other = np.array([[1.0, 2.0, 3.0], [1.0, -1.0, 0.5], [0.25, 1.0, -2.0]])
    want_g, want_h = _first_and_second(torch, NORMS[name], x, other)
    got_g, got_h = _first_and_second(rg, NORMS[name], x, other)
    np.testing.assert_allclose(got_g, want_g, rtol=1e-7, atol=1e-12)
    np.testing.assert_array_equal(np.isnan(got_h), np.isnan(want_h))
    np.testing.assert_allclose(
        got_h[1:], want_h[1:], rtol=1e-6, atol=1e-9 * np.abs(want_h[1:]).max()
    )


# -- (6) jacfwd and hessian under randomness="error" -----------------------------------------------
def test_jacfwd_and_hessian_refuse_a_random_draw_by_default_as_torch():
    torch.manual_seed(0)
    rg.manual_seed(0)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        torch.func.jacfwd(lambda a: a * torch.rand(3))(torch.ones(3))
    x = rg.ones(3)
    with pytest.raises(rg.AutodiffError, match=r"func.jacfwd\(randomness='error'\).*error mode"):
        rg.func.jacfwd(lambda a: a * rg.rand(3))(x)
    with pytest.raises(rg.AutodiffError, match="randomness error mode"):
        rg.func.hessian(lambda a: (rg.nn.functional.dropout(a, 0.5) ** 2).sum())(x)
    # allowed by "same" and "different", and by jacrev (whose call is outside torch's vmap)
    rg.manual_seed(1)
    jac = rg.func.jacfwd(lambda a: a * rg.rand(3), randomness="same")(x)
    rg.manual_seed(1)
    np.testing.assert_array_equal(jac.numpy(), np.diag(rg.rand(3).numpy()))
    assert rg.func.jacfwd(lambda a: a * rg.rand(3), randomness="different")(x).shape == (3, 3)
    assert rg.func.jacrev(lambda a: a * rg.rand(3))(x).shape == (3, 3)
    # a draw outside the function is not refused, and the refusal does not outlive the call
    assert rg.func.jacfwd(lambda a: a * 2.0)(rg.rand(3)).shape == (3, 3)
    assert rg.rand(2).shape == (2,)
