"""Leftovers closed against torch 2.13 (round 23): ``y.data = t`` of another dtype or shape on
a tensor computed in the graph, jacfwd/hessian's randomness, ``device("cpu:0")``,
``expand()`` without sizes, ``Module.to(float)`` of complex parameters. Every expected
behaviour is torch's, probed side by side."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg


def _grad(lib, x, out):
    """x's gradient after ``out.backward()``, torch's way or retrograd's (a Gradients value)."""
    if lib is torch:
        out.backward()
        return x.grad.numpy()
    return x.grad(out.backward()).numpy()


# -- (1) y.data = t on a tensor computed in the graph --------------------------------------------
@pytest.mark.parametrize("lib", [torch, rg])
def test_data_set_to_another_dtype_keeps_the_graph_as_torch(lib):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.data = lib.tensor([1.0, 2.0, 4.0], dtype=lib.float64)
    assert y.dtype == lib.float64 and y.requires_grad and not y.is_leaf
    # y's grad_fn stays the node that made it, with its inputs
    assert y.grad_fn.name() == "MulBackward0"
    edges = [f[0] and f[0].name() for f in y.grad_fn.next_functions]
    assert edges == ["torch::autograd::AccumulateGrad", None]  # (x, and the number 2)
    out = (y * 3).sum()
    assert out.dtype == lib.float64 and out.requires_grad
    np.testing.assert_array_equal(out.detach().numpy(), 21.0)
    # the gradient reaches x cast back to its float32, through y's old grad_fn (x * 2)
    g = _grad(lib, x, out)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [6.0, 6.0, 6.0])


@pytest.mark.parametrize("lib", [torch, rg])
def test_data_set_to_a_shape_the_old_expands_to_sums_the_gradient_as_torch(lib):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.data = lib.ones(2, 3)
    assert tuple(y.shape) == (2, 3) and y.requires_grad and y.grad_fn.name() == "MulBackward0"
    np.testing.assert_array_equal(_grad(lib, x, (y * 3).sum()), [12.0, 12.0, 12.0])


@pytest.mark.parametrize("lib", [torch, rg])
@pytest.mark.parametrize(("shape", "total"), [((2,), 30.0), ((), 15.0)])
def test_data_set_to_an_incompatible_shape_fails_at_backward_as_torch(lib, shape, total):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.data = lib.full(shape, 5.0)
    out = (y * 3).sum()  # the forward goes on with the new values
    np.testing.assert_array_equal(out.detach().numpy(), total)
    got = re.escape(str(list(shape)))
    with pytest.raises(
        RuntimeError, match=rf"invalid gradient at index 0 - got {got} but expected"
    ):
        out.backward()


# -- (2) jacfwd's randomness: a draw per column ("different") or one for all ("same") ------------
def _random_jacobians(lib, randomness):
    """Jacobians whose column c (input element c) is the draw the c-th tangent saw."""
    lib.manual_seed(0)
    x, y = lib.ones(5), lib.ones(2)
    uniform = lib.func.jacfwd(lambda x: x.sum() * lib.rand_like(lib.ones(4)), randomness=randomness)
    dropped = lib.func.jacfwd(
        lambda x: lib.nn.functional.dropout(x.sum() * lib.ones(40), 0.5, training=True),
        randomness=randomness,
    )
    two = lib.func.jacfwd(  # two arguments: the columns run across both
        lambda x, y: (x.sum() + y.sum()) * lib.rand_like(lib.ones(3)),
        argnums=(0, 1),
        randomness=randomness,
    )
    jx, jy = two(x, y)
    return [uniform(x).numpy(), dropped(x).numpy(), np.concatenate([jx.numpy(), jy.numpy()], 1)]


@pytest.mark.parametrize("lib", [torch, rg])
def test_jacfwd_randomness_different_draws_per_column_as_torch(lib):
    for jac in _random_jacobians(lib, "different"):
        columns = jac.T
        assert all(not np.array_equal(columns[0], c) for c in columns[1:]), jac
    # (the draws themselves: uniform in [0, 1), dropout's kept elements scaled by 2)
    uniform, dropped, _ = _random_jacobians(lib, "different")
    assert ((uniform >= 0) & (uniform < 1)).all() and set(np.unique(dropped)) <= {0.0, 2.0}


@pytest.mark.parametrize("lib", [torch, rg])
def test_jacfwd_randomness_same_draws_once_for_every_column_as_torch(lib):
    for jac in _random_jacobians(lib, "same"):
        columns = jac.T
        assert all(np.array_equal(columns[0], c) for c in columns[1:]), jac


@pytest.mark.parametrize("lib", [torch, rg])
def test_jacfwd_randomness_different_keeps_aux_and_plain_values_as_torch(lib):
    def f(x):
        return x * x, {"value": x.sum()}

    jac, aux = lib.func.jacfwd(f, has_aux=True, randomness="different")(lib.tensor([1.0, 2.0]))
    np.testing.assert_array_equal(jac.numpy(), [[2.0, 0.0], [0.0, 4.0]])
    assert aux["value"].item() == 3.0 and not aux["value"].requires_grad


# -- (4) expand() with no sizes --------------------------------------------------------------------
@pytest.mark.parametrize("lib", [torch, rg])
def test_expand_without_sizes_is_a_type_error_as_torch(lib):
    for t in (lib.tensor(2.0), lib.ones(2)):
        with pytest.raises(TypeError, match=r"expand\(\) missing 1 required positional arguments"):
            t.expand()
        with pytest.raises(TypeError, match="missing"):
            t.expand(*[])
    # the empty shape given as one sequence is a 0-d tensor's own shape, as in torch
    for spelled in ((), [], lib.Size([])):
        assert lib.tensor(2.0).expand(spelled).item() == 2.0
    assert lib.tensor(2.0).expand(size=()).item() == 2.0


def test_einops_repeat_of_a_0d_tensor_as_torch():
    einops = pytest.importorskip("einops")
    for pattern, sizes in ((" -> n k", {"n": 3, "k": 2}), (" -> ()", {}), (" -> ", {})):
        expected = einops.repeat(torch.tensor(2.0), pattern, **sizes)
        got = einops.repeat(rg.tensor(2.0), pattern, **sizes)
        assert tuple(got.shape) == tuple(expected.shape)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


# -- (5) complex parameters under Module.to(float32) and Module.float() ---------------------------
_COMPLEX_MODULE = """
import sys, warnings
lib = __import__(sys.argv[1])
warnings.simplefilter("always")

def module():
    m = lib.nn.Linear(2, 2)
    m.weight = lib.nn.Parameter(lib.ones(2, 2, dtype=lib.complex64) * (1 + 2j))
    m.register_buffer("state", lib.ones(2, dtype=lib.complex64))
    return m

with warnings.catch_warnings(record=True) as first:
    warnings.simplefilter("always")
    kept = module().float()  # complex ones stay: only floating point tensors are cast
    kept.double()
    cast = module().to(lib.float32)
with warnings.catch_warnings(record=True) as again:
    warnings.simplefilter("always")
    module().to(lib.float32)
    lib.ones(2, dtype=lib.complex64).to(lib.float32)
print(str(kept.weight.dtype).split(".")[-1], str(kept.state.dtype).split(".")[-1],
      str(kept.bias.dtype).split(".")[-1])
print(str(cast.weight.dtype).split(".")[-1], str(cast.state.dtype).split(".")[-1],
      cast.weight.detach()[0, 0].item())
print([(w.category.__name__, str(w.message).split(" (Triggered")[0]) for w in first])
print(len(again))
"""


def _complex_module_run_in_torch():
    """The program's printed lines on torch, in a process of its own: torch warns once per
    process (and this one may have warned already)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _COMPLEX_MODULE, "torch"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.splitlines()


def test_module_casts_of_complex_parameters_as_torch(monkeypatch, capsys):
    from retrograd.tensor import core

    expected = [
        "complex64 complex64 float64",
        "float32 float32 1.0",
        "[('UserWarning', 'Casting complex values to real discards the imaginary part')]",
        "0",  # (torch's TORCH_WARN_ONCE: not again in the process)
    ]
    assert _complex_module_run_in_torch() == expected
    # retrograd's in this process, as if it had not warned yet
    monkeypatch.setattr(core, "_COMPLEX_TO_REAL_WARNED", [False])
    monkeypatch.setattr("sys.argv", ["-c", "retrograd"])
    capsys.readouterr()
    with warnings.catch_warnings():  # (the program sets its filter for the process)
        exec(_COMPLEX_MODULE, {"__name__": "complex_module"})
    assert capsys.readouterr().out.splitlines() == expected
