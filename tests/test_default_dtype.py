"""``rg.set_default_dtype``: torch's process-wide default float dtype, against torch under
``torch.set_default_dtype`` (creation functions, Python-float promotion, nn modules' parameters
and buffers, distributions, optimizers), and scientific code written as torch's (models and
tensors built without a dtype after ``set_default_dtype(float64)``) trained step for step with
torch to float64 rounding."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch
from retrograd import nn, optim
from retrograd.nn import functional as F  # noqa: N812 (torch's idiom)


@pytest.fixture
def float64_default():
    """float64 the default of both libraries for the test; float32 again afterwards, whatever
    happens (the setting is process-wide in both)."""
    rg.set_default_dtype(rg.float64)
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        rg.set_default_dtype(rg.float32)
        torch.set_default_dtype(torch.float32)


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# -- the setting -----------------------------------------------------------------------------------
def test_the_default_is_float32_and_follows_set_default_dtype():
    assert rg.get_default_dtype() == rg.float32
    try:
        for name in ("float64", "float32", "float16", "bfloat16"):
            rg.set_default_dtype(name)
            assert rg.get_default_dtype() == name
        rg.set_default_dtype(torch.float64)  # torch's dtype objects are read too
        assert rg.get_default_dtype() is rg.float64
        assert rg.get_default_dtype().is_floating_point
    finally:
        rg.set_default_dtype(rg.float32)
    assert rg.get_default_dtype() == "float32"


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_a_non_float_default_is_refused_as_torch_refuses_it(dtype):
    with pytest.raises(TypeError):
        torch.set_default_dtype(getattr(torch, dtype))
    assert torch.get_default_dtype() == torch.float32
    with pytest.raises(rg.DTypeError, match=rf"set_default_dtype: .*floating-point.*{dtype}"):
        rg.set_default_dtype(getattr(rg, dtype))
    assert rg.get_default_dtype() == "float32"  # unchanged by the refused call
    with pytest.raises(rg.DTypeError, match="set_default_dtype"):
        rg.set_default_dtype("complex64")


# -- creation, against torch -----------------------------------------------------------------------
#: (what is made, retrograd's call, torch's call), each run with module ``m`` (rg or torch)
CREATIONS = {
    "tensor(float)": lambda m: m.tensor(1.5),
    "tensor(list of floats)": lambda m: m.tensor([[1.0, 2.0], [3.0, 4.5]]),
    "tensor(mixed list)": lambda m: m.tensor([1, 2.5]),
    "tensor([])": lambda m: m.tensor([]),
    "tensor(ints)": lambda m: m.tensor([1, 2]),
    "tensor(bools)": lambda m: m.tensor([True]),
    "tensor(np float64)": lambda m: m.tensor(np.array([1.0, 2.0])),
    "tensor(np float32)": lambda m: m.tensor(np.array([1.0], np.float32)),
    "from_numpy(float32)": lambda m: m.from_numpy(np.ones(2, np.float32)),
    "as_tensor(float64)": lambda m: m.as_tensor(np.ones(2)),
    "as_tensor(list)": lambda m: m.as_tensor([0.5]),
    "zeros": lambda m: m.zeros(2, 3),
    "ones": lambda m: m.ones((2,)),
    "empty": lambda m: m.empty(2),
    "full(float)": lambda m: m.full((2,), 1.5),
    "full(int)": lambda m: m.full((2,), 3),
    "full(bool)": lambda m: m.full((2,), True),
    "rand": lambda m: m.rand(2, 2),
    "randn": lambda m: m.randn(3),
    "randint": lambda m: m.randint(0, 5, (3,)),
    "normal": lambda m: m.normal(0.0, 1.0, (2,)),
    "arange(ints)": lambda m: m.arange(5),
    "arange(float)": lambda m: m.arange(0, 1, 0.25),
    "arange(float end)": lambda m: m.arange(2.0),
    "linspace": lambda m: m.linspace(0, 1, 5),
    "logspace": lambda m: m.logspace(0, 2, 3),
    "eye": lambda m: m.eye(3),
    "scalar_tensor": lambda m: m.scalar_tensor(2),
    "hann_window": lambda m: m.hann_window(4),
    "zeros_like(float32)": lambda m: m.zeros_like(m.ones(2, dtype=m.float32)),
    "ones_like(int)": lambda m: m.ones_like(m.tensor([1, 2])),
    "rand_like(float32)": lambda m: m.rand_like(m.ones(2, dtype=m.float32)),
    "full_like(float32)": lambda m: m.full_like(m.ones(2, dtype=m.float32), 0.5),
    "explicit float32": lambda m: m.zeros(2, dtype=m.float32),
    "explicit float32 tensor": lambda m: m.tensor([1.0], dtype=m.float32),
}


@pytest.mark.parametrize("case", sorted(CREATIONS))
def test_creation_dtypes_match_torch_under_a_float64_default(case, float64_default):
    made, expected = CREATIONS[case](rg), CREATIONS[case](torch)
    assert made.dtype == _name(expected.dtype), case


# NumPy 2 warns that torch's __array__ takes no copy= when the NumPy backend reads a torch tensor
@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")
def test_a_torch_tensor_keeps_its_dtype_whatever_the_default(float64_default):
    assert rg.tensor(torch.ones(2, dtype=torch.float32)).dtype == "float32"
    assert rg.tensor(torch.ones(2, dtype=torch.float64)).dtype == "float64"
    assert rg.tensor(torch.tensor([1, 2], dtype=torch.int32)).dtype == "int32"
    assert rg.tensor(torch.tensor([1, 2], dtype=torch.int16)).dtype == "int16"
    assert rg.tensor(torch.tensor([True])).dtype == "bool"
    assert rg.tensor(torch.ones(2, dtype=torch.float32), dtype=rg.float64).dtype == "float64"


def test_creation_under_the_float32_default_is_unchanged():
    for case, make in CREATIONS.items():
        assert make(rg).dtype == _name(make(torch).dtype), case


def test_values_made_under_a_float64_default_are_float64_exactly(float64_default):
    np.testing.assert_array_equal(rg.tensor([0.1, 1 / 3]).numpy(), [0.1, 1 / 3])
    assert rg.tensor(0.1).item() == 0.1  # not float32's 0.10000000149...
    # float32 values would be ~1e-8 away (torch's linspace puts 5.6e-17 at the middle
    # point where retrograd's has 0, under any dtype: not compared exactly here)
    for ours, theirs in [
        (rg.linspace(-1, 1, 7), torch.linspace(-1, 1, 7)),
        (rg.arange(0, 1, 0.1), torch.arange(0, 1, 0.1)),
        (rg.rand(3).mul(0) + 1 / 3, torch.full((3,), 1 / 3)),
    ]:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-15)
    assert rg.finfo().eps == torch.finfo().eps == 2.0**-52


# -- promotion of Python floats and float ops on int tensors ---------------------------------------
#: (case, the operation on module ``m``)
PROMOTIONS = {
    "int tensor * float": lambda m: m.tensor([1, 2]) * 2.5,
    "float * int tensor": lambda m: 0.5 * m.tensor([1, 2]),
    "int tensor / int": lambda m: m.tensor([1, 2]) / 2,
    "int tensor / int tensor": lambda m: m.tensor([1, 2]) / m.tensor([3, 4]),
    "bool tensor + float": lambda m: m.tensor([True]) + 1.5,
    "int tensor sqrt": lambda m: m.tensor([4, 9]).sqrt(),
    "int tensor exp": lambda m: m.exp(m.tensor([0, 1])),
    "int tensor sigmoid": lambda m: m.sigmoid(m.tensor([0, 1])),
    "int tensor logsumexp": lambda m: m.logsumexp(m.tensor([0, 1]), 0),
    "int tensor atan2": lambda m: m.atan2(m.tensor([1]), m.tensor([2])),
    "float32 tensor * float": lambda m: m.ones(2, dtype=m.float32) * 2.5,
    "float32 tensor / int": lambda m: m.ones(2, dtype=m.float32) / 3,
    "int tensor + float64 0-d": lambda m: m.tensor([1]) + m.tensor(2.0, dtype=m.float64),
    "float32 tensor + float64 0-d": lambda m: m.ones(2, dtype=m.float32) + m.tensor(2.0),
    "where(floats)": lambda m: m.where(m.tensor([True, False]), 1.0, 0.0),
    ".float() stays float32": lambda m: m.tensor([1, 2]).float() * 0 + 1.5,
}


@pytest.mark.parametrize("case", sorted(PROMOTIONS))
def test_python_float_promotion_matches_torch_under_a_float64_default(case, float64_default):
    ours, theirs = PROMOTIONS[case](rg), PROMOTIONS[case](torch)
    assert ours.dtype == _name(theirs.dtype), case
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-15, atol=0)


def test_result_type_follows_the_default(float64_default):
    for a, b in [(2.5, 1), (1, 2.5), (rg.tensor([1]), 2.5)]:
        ta = torch.tensor([1]) if isinstance(a, rg.Tensor) else a
        assert rg.result_type(a, b) == _name(torch.result_type(ta, b))
    assert rg.result_type(2.5, 1) == "float64"
    assert rg.promote_types(rg.bfloat16, rg.float16) == "float32"  # torch's, any default


# -- nn modules, optimizers, distributions ---------------------------------------------------------
#: nn layers as torch writes them (constructor arguments shared by both libraries)
MODULES = {
    "Linear": lambda n: n.Linear(3, 4),
    "Bilinear": lambda n: n.Bilinear(2, 3, 4),
    "Conv1d": lambda n: n.Conv1d(2, 3, 3),
    "Conv2d": lambda n: n.Conv2d(2, 3, 3),
    "ConvTranspose2d": lambda n: n.ConvTranspose2d(2, 3, 3),
    "BatchNorm1d": lambda n: n.BatchNorm1d(3),
    "BatchNorm2d": lambda n: n.BatchNorm2d(3),
    "LayerNorm": lambda n: n.LayerNorm(3),
    "GroupNorm": lambda n: n.GroupNorm(1, 3),
    "InstanceNorm2d": lambda n: n.InstanceNorm2d(3, affine=True, track_running_stats=True),
    "Embedding": lambda n: n.Embedding(5, 3),
    "EmbeddingBag": lambda n: n.EmbeddingBag(5, 3),
    "RNN": lambda n: n.RNN(3, 4),
    "LSTM": lambda n: n.LSTM(3, 4, num_layers=2),
    "GRU": lambda n: n.GRU(3, 4, bidirectional=True),
    "LSTMCell": lambda n: n.LSTMCell(3, 4),
    "MultiheadAttention": lambda n: n.MultiheadAttention(4, 2),
    "TransformerEncoderLayer": lambda n: n.TransformerEncoderLayer(4, 2, 8),
    "PReLU": lambda n: n.PReLU(),
}


def _state_dtypes(module) -> dict[str, str]:
    named = list(module.named_parameters()) + list(module.named_buffers())
    return {name: _name(t.dtype) for name, t in named}


@pytest.mark.parametrize("case", sorted(MODULES))
def test_module_parameters_and_buffers_take_the_default_as_torch(case, float64_default):
    ours, theirs = _state_dtypes(MODULES[case](nn)), _state_dtypes(MODULES[case](torch.nn))
    assert ours == theirs
    assert "float64" in ours.values()


ARGUMENT_LISTS = [(), (4,), (4, 4), (4, 4, 3), (2, 4), (4, 2, 8)]
#: Arguments tried first where the first list above that builds is far bigger than a check of
#: dtypes needs: ``nn.Transformer()`` is the 512-wide model of 6 + 6 layers, 44 million float64
#: parameters in each library (2.3 of this test's 2.9 s of CPU). Two layers of each stack keep
#: the nesting of its layer lists.
_SMALL = {
    "Transformer": [
        ((), {"d_model": 4, "nhead": 2, "num_encoder_layers": 2, "num_decoder_layers": 2,
              "dim_feedforward": 8}),
    ]
}  # fmt: skip


def test_every_shared_nn_module_made_under_a_float64_default_has_torchs_state_dtypes(
    float64_default,
):
    """Each module class of both ``rg.nn`` and ``torch.nn``, made with the first of a few
    argument lists both accept: the same parameters and buffers, in the same dtypes."""
    made = 0
    for name in sorted(dir(nn)):
        cls = getattr(nn, name)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            continue
        if not hasattr(torch.nn, name):
            continue
        for args, kwargs in [*_SMALL.get(name, []), *((a, {}) for a in ARGUMENT_LISTS)]:
            try:
                with warnings.catch_warnings():  # torch's advice on some constructions
                    warnings.simplefilter("ignore")
                    ours, theirs = cls(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
            except Exception:  # not an argument list of this class: the next one
                continue
            assert _state_dtypes(ours) == _state_dtypes(theirs), (name, args)
            made += 1
            break
    assert made >= 140  # 152 when written: the check covers the layers, not a few


def test_lazy_modules_and_masks_take_the_default(float64_default):
    lazy = nn.LazyLinear(2)
    assert lazy(rg.ones(3, 4)).dtype == "float64"
    assert lazy.weight.dtype == torch.nn.LazyLinear(2)(torch.ones(3, 4)).dtype.__str__()[6:]
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    assert mask.dtype == _name(torch.nn.Transformer.generate_square_subsequent_mask(3).dtype)


def test_a_model_made_under_a_default_keeps_its_dtype_when_the_default_changes():
    rg.set_default_dtype(rg.float64)
    try:
        model = nn.Linear(2, 2)
    finally:
        rg.set_default_dtype(rg.float32)
    assert model.weight.dtype == "float64"
    assert model(rg.tensor(np.ones((1, 2)))).dtype == "float64"
    assert nn.Linear(2, 2).weight.dtype == "float32"


def test_distributions_of_python_numbers_take_the_default(float64_default):
    ours_lib, theirs_lib = rg.distributions, torch.distributions
    for make in (
        lambda d: d.Normal(0.0, 1.0),
        lambda d: d.Uniform(0.0, 2.0),
        lambda d: d.Exponential(1.5),
        lambda d: d.Laplace(0.0, 1.0),
        lambda d: d.Gamma(2.0, 1.0),
    ):
        ours, theirs = make(ours_lib), make(theirs_lib)
        sample = ours.sample((3,))
        assert sample.dtype == _name(theirs.sample((3,)).dtype)
        assert ours.log_prob(sample).dtype == "float64"
        np.testing.assert_allclose(
            ours.log_prob(sample).numpy(),
            theirs.log_prob(torch.from_numpy(sample.numpy())).numpy(),
            rtol=1e-13,
        )


OPTIMIZERS = {
    "SGD": {"lr": 0.1, "momentum": 0.9, "nesterov": True},
    "Adam": {"lr": 0.1},
    "AdamW": {"lr": 0.1},
    "NAdam": {"lr": 0.1, "decoupled_weight_decay": True, "weight_decay": 0.1},
    "RAdam": {"lr": 0.1},
    "Adamax": {"lr": 0.1},
    "Adagrad": {"lr": 0.1},
    "Adadelta": {"lr": 1.0},
    "RMSprop": {"lr": 0.01, "centered": True, "momentum": 0.5},
    "Rprop": {"lr": 0.1},
    "ASGD": {"lr": 0.1, "t0": 1},
    "Adafactor": {"lr": 0.1},
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_step_as_torchs_under_a_float64_default(name, float64_default):
    """Parameters from Python floats, so float64 only by the default. torch keeps NAdam's
    ``mu_product`` in its scalar dtype, float64 under this default: so does retrograd (kept in
    float32, it moves these steps by ~1e-9)."""
    values = [0.3, -1.2, 2.0]
    ours, theirs = rg.tensor(values).require_grad(), torch.tensor(values, requires_grad=True)
    ours_opt = getattr(optim, name)([ours], **OPTIMIZERS[name])
    theirs_opt = getattr(torch.optim, name)([theirs], **OPTIMIZERS[name])
    for _ in range(6):
        ours_opt.step((ours * ours).sin().sum().backward())
        theirs_opt.zero_grad()
        (theirs * theirs).sin().sum().backward()
        theirs_opt.step()
    assert ours.dtype == "float64"
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-14, atol=1e-15)


# -- scientific code as torch's: training under a float64 default ----------------------------------
def _train(make, inputs, targets, loss_name, optimizer, steps=4):
    """``make(nn)`` built and trained in both libraries from torch's initial weights; the losses
    and final weights of each step compared to float64 rounding."""
    torch.manual_seed(0)
    theirs = make(torch.nn)
    ours = make(nn)
    assert all(p.dtype == "float64" for p in ours.parameters())  # made without a dtype
    ours.load_state_dict(theirs.state_dict())
    assert all(p.dtype == "float64" for p in ours.parameters())
    ours_opt = getattr(optim, optimizer)(ours.parameters(), lr=0.05)
    theirs_opt = getattr(torch.optim, optimizer)(theirs.parameters(), lr=0.05)
    x, y = rg.tensor(inputs), rg.tensor(targets)  # Python lists of floats
    tx, ty = torch.tensor(inputs), torch.tensor(targets)
    for _ in range(steps):
        loss = getattr(F, loss_name)(ours(x), y)
        assert loss.dtype == "float64"
        grads = loss.backward()
        ours_opt.step(grads)
        theirs_opt.zero_grad()
        expected = getattr(torch.nn.functional, loss_name)(theirs(tx), ty)
        expected.backward()
        theirs_opt.step()
        assert loss.item() == pytest.approx(expected.item(), rel=1e-12, abs=1e-14)
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(
            ours.state_dict()[name], value.numpy(), rtol=1e-12, atol=1e-14, err_msg=name
        )


def test_an_mlp_trains_as_torchs_under_a_float64_default(float64_default):
    """A PINN-style regression: tanh MLP, inputs and targets from Python floats, MSE, Adam."""

    def make(n):
        return n.Sequential(n.Linear(1, 16), n.Tanh(), n.Linear(16, 16), n.Tanh(), n.Linear(16, 1))

    xs = [[i / 10.0] for i in range(-10, 11)]
    ys = [[math.sin(math.pi * x[0])] for x in xs]
    _train(make, xs, ys, "mse_loss", "Adam")


def test_a_small_cnn_trains_as_torchs_under_a_float64_default(float64_default):
    """Conv, batch norm (running statistics checked too), pooling and a linear head; SGD."""

    def make(n):
        return n.Sequential(
            n.Conv2d(1, 4, 3, padding=1),
            n.BatchNorm2d(4),
            n.ReLU(),
            n.MaxPool2d(2),
            n.Flatten(),
            n.Linear(4 * 3 * 3, 3),
        )

    rng = np.random.default_rng(0)
    images = rng.standard_normal((5, 1, 6, 6)).tolist()
    labels = [0, 2, 1, 1, 0]
    _train(make, images, labels, "cross_entropy", "SGD")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_default_where_the_backend_has_half_tensors(dtype):
    """torch allows a half default; so does retrograd: rg.TorchBackend makes half tensors, and
    the NumPy backend, which has none, says so at the first tensor made."""
    cases = [
        lambda m: m.tensor([1.0, 2.5]),
        lambda m: m.zeros(2),
        lambda m: m.tensor([1, 3]) / 2,
        lambda m: m.arange(0.0, 1.0, 0.25),
        lambda m: m.nn.Linear(2, 2).weight,
    ]
    rg.set_default_dtype(dtype)
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        for make in cases:
            if on_torch():
                ours, theirs = make(rg), make(torch)
                assert ours.dtype == dtype == _name(theirs.dtype)
                if ours.ndim == 1 and ours.shape[0] <= 4:
                    assert ours.float().tolist() == theirs.float().tolist()
            else:
                with pytest.raises(rg.DTypeError, match=f"{dtype}.*NumpyBackend"):
                    make(rg)
    finally:
        rg.set_default_dtype(rg.float32)
        torch.set_default_dtype(torch.float32)


def test_a_pinn_residual_with_second_derivatives_matches_torch(float64_default):
    """torch's PINN idiom: collocation points from ``linspace(..., requires_grad)``, u'' by
    ``autograd.grad(create_graph=True)``, the residual's gradients for the weights."""
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ours = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
    ours.load_state_dict(theirs.state_dict())  # cast into our parameters' dtype, as torch's
    assert {p.dtype for p in ours.parameters()} == {"float64"}
    results = []
    for m, net in ((rg, ours), (torch, theirs)):
        x = m.linspace(0, 1, 11).reshape(-1, 1).requires_grad_()
        u = net(x)
        du = m.autograd.grad(u.sum(), x, create_graph=True)[0]
        d2u = m.autograd.grad(du.sum(), x, create_graph=True)[0]
        loss = ((d2u + math.pi**2 * m.sin(math.pi * x)) ** 2).mean() + (u[0] ** 2).sum()
        grads = m.autograd.grad(loss, list(net.parameters()))
        results.append((loss, grads))
    (loss, grads), (expected, expected_grads) = results
    assert loss.dtype == "float64"
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    for g, e in zip(grads, expected_grads, strict=True):
        assert g.dtype == "float64"
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-11, atol=1e-13)
