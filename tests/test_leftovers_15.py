"""torch-semantics gaps closed by leftovers15, each checked against torch 2.13: optimizers'
``state["step"]`` a 0-d float tensor, ``p1.data = p2`` sharing storage, random ops refused
inside ``vmap(randomness="error")``, ``out=`` of torch.fft / torch.special / the linalg norms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import optim
from retrograd.func import vmap

_OPTIMIZERS = ["Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
               "ASGD", "Rprop", "Adafactor"]  # fmt: skip


def _stepped(library, name, start, steps):
    p = library.nn.Parameter(library.tensor(start))
    opt = getattr(library.optim, name)([p], lr=0.05)
    for _ in range(steps):
        loss = (p * p * library.tensor([1.0, 2.0, 3.0])).sum()
        if library is torch:
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            opt.step(loss.backward())
    return p, opt


@pytest.mark.parametrize("name", _OPTIMIZERS)
def test_step_is_a_0d_float32_tensor_as_torchs(name):
    start = [0.5, -1.0, 2.0]
    tp, topt = _stepped(torch, name, start, 3)
    rp, ropt = _stepped(rg, name, start, 3)
    torch_step, step = topt.state[tp]["step"], ropt.state[rp]["step"]
    assert isinstance(step, rg.Tensor) and step.shape == () and str(step.dtype) == "float32"
    assert str(torch_step.dtype) == "torch.float32" and torch_step.shape == ()
    assert step.item() == torch_step.item() == 3.0
    assert int(step) == int(torch_step) == 3
    # (the bits themselves: tests/test_optim_bits.py)
    np.testing.assert_allclose(rp.detach().numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_sgd_keeps_no_step_as_torchs():
    tp, topt = _stepped(torch, "SGD", [1.0, 2.0, 3.0], 1)
    rp, ropt = _stepped(rg, "SGD", [1.0, 2.0, 3.0], 1)
    assert "step" not in topt.state[tp] and rp not in ropt.state


@pytest.mark.parametrize("name", ["Adam", "NAdam", "Rprop"])
def test_torch_made_state_dict_loads_and_steps_on(name):
    """A torch state dict (its step a tensor) loads; the step goes on from it, bit for bit."""
    start = [0.5, -1.0, 2.0]
    tp, topt = _stepped(torch, name, start, 2)
    rp = rg.nn.Parameter(rg.tensor(tp.detach().numpy()))
    ropt = getattr(optim, name)([rp], lr=0.05)
    ropt.load_state_dict(topt.state_dict())
    loaded = ropt.state[rp]["step"]
    assert isinstance(loaded, rg.Tensor) and str(loaded.dtype) == "float32" and int(loaded) == 2
    loss = (tp * tp * torch.tensor([1.0, 2.0, 3.0])).sum()
    topt.zero_grad()
    loss.backward()
    topt.step()
    ropt.step((rp * rp * rg.tensor([1.0, 2.0, 3.0])).sum().backward())
    assert ropt.state[rp]["step"].item() == topt.state[tp]["step"].item() == 3.0
    np.testing.assert_allclose(rp.detach().numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_state_dict_round_trip_keeps_the_step():
    rp, ropt = _stepped(rg, "Adam", [0.5, -1.0, 2.0], 4)
    saved = ropt.state_dict()
    assert float(saved["state"][0]["step"]) == 4.0
    again = optim.Adam([rp], lr=0.05)
    again.load_state_dict(saved)
    assert again.state[rp]["step"].item() == 4.0


def test_an_int_step_of_an_older_dict_loads_as_torchs_tensor():
    rp, ropt = _stepped(rg, "Adam", [0.5, -1.0, 2.0], 1)
    saved = ropt.state_dict()
    saved["state"][0]["step"] = 7
    ropt.load_state_dict(saved)
    step = ropt.state[rp]["step"]
    assert isinstance(step, rg.Tensor) and str(step.dtype) == "float32" and step.item() == 7.0


def test_step_follows_a_float64_default_dtype_as_torchs():
    before, torch_before = rg.get_default_dtype(), torch.get_default_dtype()
    try:
        rg.set_default_dtype(rg.float64)
        torch.set_default_dtype(torch.float64)
        tp, topt = _stepped(torch, "Adam", [1.0, 2.0, 3.0], 1)
        rp, ropt = _stepped(rg, "Adam", [1.0, 2.0, 3.0], 1)
        assert str(topt.state[tp]["step"].dtype) == "torch.float64"
        assert str(ropt.state[rp]["step"].dtype) == "float64"
    finally:
        rg.set_default_dtype(before)
        torch.set_default_dtype(torch_before)


def test_lbfgs_counts_stay_ints_as_torchs():
    start = [0.5, -1.0, 2.0]
    tp = torch.nn.Parameter(torch.tensor(start))
    topt = torch.optim.LBFGS([tp], max_iter=3)

    def closure():
        topt.zero_grad()
        loss = (tp * tp).sum()
        loss.backward()
        return loss

    topt.step(closure)
    rp = rg.nn.Parameter(rg.tensor(start))
    ropt = optim.LBFGS([rp], max_iter=3)
    ropt.step(lambda: (rp * rp).sum())
    for key in ("n_iter", "func_evals"):
        assert type(ropt.state[rp][key]) is type(topt.state[tp][key]) is int
        assert ropt.state[rp][key] == topt.state[tp][key]


# -- p.data = other ------------------------------------------------------------------------------
def test_data_set_to_a_parameter_shares_its_storage_as_torchs():
    for library in (torch, rg):
        p1 = library.nn.Parameter(library.zeros(3))
        p2 = library.nn.Parameter(library.ones(3))
        p1.data = p2
        with library.no_grad():
            p2.add_(1.0)
        assert p1.tolist() == [2.0, 2.0, 2.0], library
        with library.no_grad():
            p1.add_(1.0)
        assert p2.tolist() == [3.0, 3.0, 3.0], library
        assert p1.requires_grad and p2.requires_grad


def test_a_step_of_the_shared_parameter_shows_in_both():
    results = []
    for library in (torch, rg):
        p1 = library.nn.Parameter(library.zeros(2))
        p2 = library.nn.Parameter(library.tensor([1.0, -2.0]))
        p1.data = p2
        opt = library.optim.SGD([p2], lr=0.5)
        loss = (p2 * p2).sum()
        if library is torch:
            loss.backward()
            opt.step()
        else:
            opt.step(loss.backward())
        results.append((p1.tolist(), p2.tolist()))
    assert results[0] == results[1]


def test_gradients_of_a_parameter_shared_by_data_are_its_own():
    p1 = rg.nn.Parameter(rg.zeros(3))
    p2 = rg.nn.Parameter(rg.ones(3))
    p1.data = p2
    grads = (p2 * rg.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert p2.grad(grads).tolist() == [1.0, 2.0, 3.0]


def test_data_of_an_int_tensor_refused_for_a_parameter_as_torchs():
    with pytest.raises(RuntimeError, match="floating point or complex"):
        torch.nn.Parameter(torch.zeros(2)).data = torch.zeros(2, dtype=torch.int64)
    p = rg.nn.Parameter(rg.zeros(2))
    with pytest.raises(rg.DTypeError, match="floating point or complex"):
        p.data = rg.zeros(2, dtype=rg.int64)
    assert str(p.dtype) == "float32" and p.requires_grad  # left as it was
    plain = rg.zeros(2)
    plain.data = rg.zeros(2, dtype=rg.int64)  # no grad: torch takes it
    assert str(plain.dtype) == "int64"


# -- vmap's randomness ---------------------------------------------------------------------------
_RANDOM_FUNCTIONS = {
    "randn": lambda lib: lambda x: x + lib.randn(2),
    "dropout": lambda lib: lambda x: lib.nn.functional.dropout(x, 0.5),
    "rand_like": lambda lib: lambda x: x * lib.rand_like(x),
    "bernoulli": lambda lib: lambda x: lib.bernoulli(x.sigmoid()),
    "normal_": lambda lib: lambda x: lib.empty(2).normal_() + x,
    "randperm": lambda lib: lambda x: x[lib.randperm(2)],
    "generator": lambda lib: lambda x: x + lib.randn(2, generator=lib.Generator()),
}


@pytest.mark.parametrize("name", sorted(_RANDOM_FUNCTIONS))
def test_random_op_in_vmap_refused_by_default_as_torchs(name):
    message = "called random operation while in randomness error mode"
    with pytest.raises(RuntimeError, match=message):
        torch.func.vmap(_RANDOM_FUNCTIONS[name](torch))(torch.ones(3, 2))
    with pytest.raises(rg.AutodiffError, match=message):
        vmap(_RANDOM_FUNCTIONS[name](rg))(rg.ones(3, 2))
    rg.randn(2)  # the refusal ends with the vmap


def test_vmap_randomness_same_and_different_as_torchs():
    x = rg.zeros(3, 2)
    rg.manual_seed(0)
    same = vmap(lambda x: x + rg.randn(2), randomness="same")(x)
    rg.manual_seed(0)
    first = rg.randn(2)
    np.testing.assert_array_equal(same.numpy(), np.stack([first.numpy()] * 3))
    rg.manual_seed(0)
    different = vmap(lambda x: x + rg.randn(2), randomness="different")(x)
    assert not np.array_equal(different[0].numpy(), different[1].numpy())
    # torch's too: "same" rows equal, "different" rows not
    torch.manual_seed(0)
    t_same = torch.func.vmap(lambda x: x + torch.randn(2), randomness="same")(torch.zeros(3, 2))
    assert torch.equal(t_same[0], t_same[1])


def test_vmap_without_random_ops_unchanged():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert vmap(lambda row: row * 2)(x).tolist() == [[2.0, 4.0], [6.0, 8.0]]


# -- out= ----------------------------------------------------------------------------------------
_OUT_CASES = {
    "fft.fft": (lambda lib, o: lib.fft.fft(lib.tensor([1.0, 2.0, 0.5, -1.0]), out=o), "complex64"),
    "fft.rfft": (
        lambda lib, o: lib.fft.rfft(lib.tensor([1.0, 2.0, 0.5, -1.0]), out=o),
        "complex64",
    ),
    "fft.ifft2": (
        lambda lib, o: lib.fft.ifft2(lib.tensor([[1.0, 2.0], [0.5, -1.0]]), out=o),
        "complex64",
    ),
    "fft.irfft": (lambda lib, o: lib.fft.irfft(lib.tensor([1.0, 2.0, 0.5]), out=o), "float32"),
    "linalg.vector_norm": (
        lambda lib, o: lib.linalg.vector_norm(lib.tensor([3.0, 4.0]), out=o),
        "float32",
    ),
    "linalg.matrix_norm": (
        lambda lib, o: lib.linalg.matrix_norm(lib.tensor([[3.0, 4.0], [1.0, 2.0]]), out=o),
        "float32",
    ),
    "linalg.norm": (
        lambda lib, o: lib.linalg.norm(lib.tensor([[3.0, 4.0], [1.0, 2.0]]), out=o),
        "float32",
    ),
    "special.polygamma": (
        lambda lib, o: lib.special.polygamma(1, lib.tensor([0.5, 2.0]), out=o),
        "float32",
    ),
    "special.multigammaln": (
        lambda lib, o: lib.special.multigammaln(lib.tensor([2.5, 3.0]), 2, out=o),
        "float32",
    ),
    "special.round": (
        lambda lib, o: lib.special.round(lib.tensor([0.5, 2.26]), decimals=1, out=o),
        "float32",
    ),
    "special.bessel_j0": (
        lambda lib, o: lib.special.bessel_j0(lib.tensor([0.5, 2.0]), out=o),
        "float32",
    ),
    "special.xlog1py": (
        lambda lib, o: lib.special.xlog1py(lib.tensor([0.5, 2.0]), lib.tensor([1.0, 3.0]), out=o),
        "float32",
    ),
}


@pytest.mark.parametrize("name", sorted(_OUT_CASES))
def test_out_written_as_torchs(name):
    call, dtype = _OUT_CASES[name]
    torch_out = torch.empty(0, dtype=getattr(torch, dtype))
    returned = call(torch, torch_out)
    assert returned is torch_out
    out = rg.empty(0, dtype=getattr(rg, dtype))
    assert call(rg, out) is out
    assert tuple(out.shape) == tuple(torch_out.shape)
    np.testing.assert_allclose(out.numpy(), torch_out.numpy(), rtol=1e-6, atol=1e-6)


def test_fft_out_of_a_real_dtype_refused_as_torchs():
    with pytest.raises(RuntimeError):
        torch.fft.fft(torch.ones(4), out=torch.empty(4))
    with pytest.raises(rg.DTypeError, match=r"fft\.fft"):
        rg.fft.fft(rg.ones(4), out=rg.empty(4))


def test_norm_out_of_another_dtype_refused_as_torchs():
    with pytest.raises(RuntimeError):
        torch.linalg.vector_norm(torch.ones(4), out=torch.empty((), dtype=torch.float64))
    with pytest.raises(rg.DTypeError, match="vector_norm"):
        rg.linalg.vector_norm(rg.ones(4), out=rg.empty((), dtype=rg.float64))


def test_out_of_a_result_needing_grad_refused_as_torchs():
    x = rg.ones(4, requires_grad=True)
    with pytest.raises(rg.AutodiffError, match="out="):
        rg.fft.fft(x, out=rg.empty(4, dtype=rg.complex64))


# -- vmap's host reads ---------------------------------------------------------------------------
_READS = {
    "item": (lambda x: x.sum() * x.sum().item(), "calling .item()"),
    "float": (lambda x: x * float(x[0]), "calling .item()"),
    "int": (lambda x: x * int(x.sum() > 0), "calling .item()"),
    "control flow": (lambda x: x if x.sum() > 0 else -x, "data-dependent control flow"),
}


@pytest.mark.parametrize("name", sorted(_READS))
def test_reading_a_mapped_value_in_vmap_refused_as_torchs(name):
    function, message = _READS[name]
    with pytest.raises(RuntimeError, match=message):
        torch.func.vmap(function)(torch.randn(3, 2))
    with pytest.raises(rg.AutodiffError, match=message):
        vmap(function)(rg.randn(3, 2))


def test_reading_an_unmapped_value_in_vmap_allowed_as_torchs():
    scale = rg.tensor(2.0)
    x = [[1.0, 2.0], [3.0, 4.0]]
    expected = torch.func.vmap(lambda row: row * torch.tensor(2.0).item())(torch.tensor(x))
    got = vmap(lambda row: row * scale.item())(rg.tensor(x))
    assert got.tolist() == expected.tolist()


def test_vmap_results_read_as_any_tensor():
    out = vmap(lambda row: row * 2)(rg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert type(out) is rg.Tensor and out.sum().item() == 20.0 and bool(out[0, 0] == 2.0)


def test_ops_that_check_their_values_run_inside_vmap():
    """retrograd's own ops read values to check them (bernoulli's probabilities, a loss's
    targets): inside vmap they run, as torch's do."""
    x = rg.tensor([[0.2, 0.9], [0.5, 0.1]])
    drawn = vmap(lambda p: rg.bernoulli(p), randomness="different")(x)
    assert drawn.shape == (2, 2)
    target = rg.tensor([1, 0])
    losses = vmap(lambda row, t: rg.nn.functional.cross_entropy(row[None], t[None]))(x, target)
    expected = torch.func.vmap(
        lambda row, t: torch.nn.functional.cross_entropy(row[None], t[None])
    )(torch.tensor(x.tolist()), torch.tensor([1, 0]))
    np.testing.assert_allclose(losses.numpy(), expected.numpy(), rtol=1e-6)


def test_per_sample_gradients_in_vmap_unchanged():
    w = rg.tensor([0.5, -1.0])
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0], [0.5, 0.5]])

    def loss(weights, row):
        return ((row * weights).sum() - 1.0) ** 2

    got = vmap(rg.func.grad(loss), in_dims=(None, 0))(w, x)
    tw, tx = torch.tensor([0.5, -1.0]), torch.tensor(x.tolist())
    expected = torch.func.vmap(
        torch.func.grad(lambda weights, row: ((row * weights).sum() - 1.0) ** 2),
        in_dims=(None, 0),
    )(tw, tx)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)


# -- Python sequences as operands ----------------------------------------------------------------
_SEQUENCE_OPERANDS = {
    "t + list": lambda lib: lib.ones(2) + [1.0, 2.0],
    "list + t": lambda lib: [1.0, 2.0] + lib.ones(2),
    "t * tuple": lambda lib: lib.ones(2) * (1.0, 2.0),
    "add(t, list)": lambda lib: lib.add(lib.ones(2), [1.0, 2.0]),
    "t.sub(list)": lambda lib: lib.ones(2).sub([1.0, 2.0]),
    "t.mul_(list)": lambda lib: lib.ones(2).mul_([1.0, 2.0]),
    "t < list": lambda lib: lib.ones(2) < [1.0, 2.0],
}


@pytest.mark.parametrize("name", sorted(_SEQUENCE_OPERANDS))
def test_a_python_sequence_operand_refused_as_torchs(name):
    with pytest.raises(TypeError):
        _SEQUENCE_OPERANDS[name](torch)
    with pytest.raises(rg.DTypeError, match=r"Python (list|tuple)"):
        _SEQUENCE_OPERANDS[name](rg)


def test_equality_with_a_python_sequence_is_pythons_as_torchs():
    assert (torch.ones(2) == [1.0, 1.0]) is False and (torch.ones(2) != [1.0, 1.0]) is True
    assert (rg.ones(2) == [1.0, 1.0]) is False and (rg.ones(2) != [1.0, 1.0]) is True


def test_numpy_arrays_and_numbers_still_operands_as_torchs():
    expected = (torch.ones(2) + np.array([1.0, 2.0], dtype=np.float32)).tolist()
    assert (rg.ones(2) + np.array([1.0, 2.0], dtype=np.float32)).tolist() == expected
    assert (rg.ones(2) * 3).tolist() == (torch.ones(2) * 3).tolist()
