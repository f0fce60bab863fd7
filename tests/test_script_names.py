"""Names real PyTorch scripts call (``import retrograd as torch``), each checked against what
torch 2.13's CPU build answers for the same call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import InvalidArgumentError

NO_CUDA = not torch.cuda.is_available()

# -- rg.cuda without a device ----------------------------------------------------------------


@pytest.mark.skipif(not NO_CUDA, reason="torch's CPU-build answers are compared")
@pytest.mark.parametrize(
    "name, args",
    [
        ("manual_seed", (3,)),
        ("manual_seed_all", (3,)),
        ("seed", ()),
        ("seed_all", ()),
        ("empty_cache", ()),
        ("memory_allocated", ()),
        ("max_memory_allocated", ()),
        ("memory_reserved", ()),
        ("max_memory_reserved", ()),
        ("memory_allocated", (0,)),
    ],
)
def test_cuda_calls_answer_as_torch_cpu_build(name: str, args: tuple) -> None:
    expected = getattr(torch.cuda, name)(*args)
    assert getattr(rg.cuda, name)(*args) == expected
    assert expected in (None, 0)


@pytest.mark.skipif(not NO_CUDA, reason="torch's CPU-build answers are compared")
@pytest.mark.parametrize(
    "name", ["synchronize", "ipc_collect", "reset_peak_memory_stats", "initial_seed"]
)
def test_cuda_calls_needing_a_device_raise_as_torch_cpu_build(name: str) -> None:
    with pytest.raises((AssertionError, AttributeError, RuntimeError)):
        getattr(torch.cuda, name)()
    with pytest.raises(InvalidArgumentError, match=f"cuda.{name}: no CUDA device"):
        getattr(rg.cuda, name)()


# -- the process-wide stream's state: torch.get_rng_state / torch.random ----------------------


def test_rng_state_round_trip_repeats_draws_as_torch(tmp_path) -> None:
    for lib in (torch, rg):
        lib.manual_seed(11)
        lib.rand(4)
        state = lib.get_rng_state()
        first = (lib.randn(3).tolist(), lib.rand(2).tolist(), lib.randperm(6).tolist())
        lib.manual_seed(12)
        lib.set_rng_state(state)
        again = (lib.randn(3).tolist(), lib.rand(2).tolist(), lib.randperm(6).tolist())
        assert again == first
        assert lib.initial_seed() == 11
    # checkpoint resume: the state survives rg.save / rg.load
    rg.manual_seed(3)
    rg.save({"rng": rg.get_rng_state()}, tmp_path / "ckpt.pt")
    expected = rg.randn(5).tolist()
    rg.manual_seed(4)
    rg.set_rng_state(rg.load(tmp_path / "ckpt.pt")["rng"])
    assert rg.randn(5).tolist() == expected
    assert rg.initial_seed() == 3


def test_set_rng_state_rejects_what_get_rng_state_did_not_give() -> None:
    # a state of another dtype is a TypeError, as torch's ("RNG state must be a ByteTensor")
    with pytest.raises(rg.DTypeError, match="set_rng_state: expected the int64 tensor"):
        rg.set_rng_state(rg.zeros(5))
    with pytest.raises(rg.DTypeError, match="set_rng_state"):  # torch's uint8 state
        rg.set_rng_state(rg.tensor(torch.get_rng_state().numpy()))
    with pytest.raises(InvalidArgumentError, match="set_rng_state"):  # int64, of another length
        rg.set_rng_state(rg.zeros(5, dtype=rg.int64))


def test_random_namespace_names_as_torch_random() -> None:
    assert rg.random((2, 3)).shape == (2, 3)  # still the API's function
    assert rg.random((2,), "normal").dtype == "float32"
    for lib in (torch, rg):
        lib.random.manual_seed(21)
        assert lib.random.initial_seed() == 21
        state = lib.random.get_rng_state()
        before = lib.rand(3).tolist()
        lib.random.set_rng_state(state)
        with lib.random.fork_rng():
            assert lib.rand(3).tolist() == before
            lib.rand(7)
        assert lib.rand(3).tolist() == before  # fork_rng put the stream back
        with lib.random.fork_rng(enabled=False):
            lib.rand(1)
        assert lib.rand(3).tolist() != before
        fresh = lib.random.seed()
        assert isinstance(fresh, int) and lib.random.initial_seed() == fresh


# -- nn.Buffer --------------------------------------------------------------------------------


def _buffered(lib):
    class Stats(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = lib.nn.Linear(2, 2)
            self.mean = lib.nn.Buffer(lib.ones(2))
            self.scratch = lib.nn.Buffer(lib.zeros(3), persistent=False)
            self.plain = lib.zeros(1)  # a bare tensor stays an attribute

    return Stats()


def test_buffer_assignment_registers_as_torch() -> None:
    ours, theirs = _buffered(rg), _buffered(torch)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert "plain" not in dict(ours.named_buffers())
    assert type(ours.mean) is rg.Tensor and ours.mean.tolist() == [1.0, 1.0]
    for module, lib in ((ours, rg), (theirs, torch)):  # re-assigning keeps the registration
        module.mean = lib.nn.Buffer(lib.full((3,), 2.0))
        module.scratch = lib.nn.Buffer(lib.ones(1))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.mean.tolist() == theirs.mean.tolist()
    assert ours.to("float64").mean.dtype == "float64"


def test_buffer_is_a_new_leaf_as_torch() -> None:
    for lib in (rg, torch):
        buf = lib.nn.Buffer(lib.ones(2, requires_grad=True) * 3)
        assert buf.requires_grad and buf.is_leaf and buf.persistent
        assert buf.tolist() == [3.0, 3.0]
        assert not lib.nn.Buffer(lib.ones(2)).requires_grad
    assert not rg.nn.Buffer([1.0], persistent=False).persistent


# -- utils.data.ChainDataset, StackDataset ----------------------------------------------------


def _stream(lib, values):
    class Stream(lib.utils.data.IterableDataset):
        def __iter__(self):
            return iter(values)

        def __len__(self) -> int:
            return len(values)

    return Stream()


def test_chain_dataset_as_torch() -> None:
    for lib in (rg, torch):
        data = lib.utils.data
        chain = data.ChainDataset([_stream(lib, [1, 2]), _stream(lib, [3]), _stream(lib, [])])
        assert list(chain) == [1, 2, 3] and len(chain) == 3
        assert isinstance(chain, data.IterableDataset)
        assert list(_stream(lib, [5]) + _stream(lib, [6])) == [5, 6]
    bad = rg.utils.data.ChainDataset([_stream(rg, [1]), rg.utils.data.TensorDataset(rg.ones(2))])
    with pytest.raises(InvalidArgumentError, match="ChainDataset only supports IterableDataset"):
        list(bad)


def test_stack_dataset_tuple_and_dict_forms_as_torch() -> None:
    images, labels = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], [7, 8, 9]
    for lib in (rg, torch):
        data = lib.utils.data
        pairs = data.StackDataset(data.TensorDataset(lib.tensor(images)), labels)
        assert len(pairs) == 3
        (x,), y = pairs[1]
        assert x.tolist() == [2.0, 3.0] and y == 8
        named = data.StackDataset(image=lib.tensor(images), label=labels)
        assert set(named[2]) == {"image", "label"} and named[2]["label"] == 9
        batches = list(data.DataLoader(named, batch_size=2))
        assert [b["label"].tolist() for b in batches] == [[7, 8], [9]]
        assert batches[0]["image"].tolist() == images[:2]
        for bad_args, bad_kwargs in (((labels,), {"b": labels}), ((), {}), ((labels, [1]), {})):
            with pytest.raises(ValueError):
                data.StackDataset(*bad_args, **bad_kwargs)


# -- func.functional_call -----------------------------------------------------------------------


def _net(lib):
    class Net(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = lib.nn.Linear(3, 4)
            self.norm = lib.nn.BatchNorm1d(4)
            self.head = lib.nn.Linear(4, 3, bias=False)
            self.register_buffer("shift", lib.ones(3))

        def forward(self, x, scale=1.0):
            h = self.norm(self.emb(x).tanh())
            return (self.head(h) + self.shift) * scale

    return Net()


def _same_start(ours, theirs) -> None:
    for name, p in theirs.named_parameters():
        ours.get_parameter(name).data = rg.tensor(p.detach().numpy().copy())


@pytest.mark.parametrize("form", ["rg.func", "nn.utils.stateless"])
def test_functional_call_gradients_match_torch(form: str) -> None:
    torch.manual_seed(0)
    theirs, ours = _net(torch), _net(rg)
    _same_start(ours, theirs)
    ours.train(), theirs.train()
    values = {
        n: torch.randn(p.shape, dtype=torch.float64).float() for n, p in theirs.named_parameters()
    }
    x = torch.randn(5, 3)
    t_params = {n: v.clone().requires_grad_(True) for n, v in values.items()}
    t_out = torch.func.functional_call(
        theirs, (t_params, {"shift": torch.full((3,), 2.0)}), (x,), {"scale": 0.5}
    )
    t_grads = torch.autograd.grad((t_out**2).sum(), list(t_params.values()))
    call = rg.func.functional_call if form == "rg.func" else rg.nn.utils.stateless.functional_call
    r_params = {n: rg.tensor(v.numpy(), requires_grad=True) for n, v in values.items()}
    before = {n: p.tolist() for n, p in ours.named_parameters()}
    r_out = call(
        ours, (r_params, {"shift": rg.full((3,), 2.0)}), (rg.tensor(x.numpy()),), {"scale": 0.5}
    )
    r_grads = rg.autograd.grad((r_out**2).sum(), list(r_params.values()))
    assert np.allclose(r_out.detach().numpy(), t_out.detach().numpy(), atol=1e-5)
    for rg_g, t_g in zip(r_grads, t_grads, strict=True):
        assert np.allclose(rg_g.numpy(), t_g.numpy(), atol=1e-4)
    # the module's own tensors are back (values and objects), its running stats updated once
    assert {n: p.tolist() for n, p in ours.named_parameters()} == before
    assert ours.shift.tolist() == [1.0, 1.0, 1.0]
    assert np.allclose(ours.norm.running_mean.numpy(), theirs.norm.running_mean.numpy(), atol=1e-5)


def test_functional_call_ties_strict_and_restores_on_error() -> None:
    for lib in (rg, torch):
        tied = lib.nn.Sequential(lib.nn.Linear(2, 2, bias=False), lib.nn.Linear(2, 2, bias=False))
        tied[1].weight = tied[0].weight
        x = lib.ones(1, 2)
        out = lib.func.functional_call(tied, {"0.weight": 2 * lib.eye(2)}, x)
        assert out.tolist() == [[4.0, 4.0]]  # both layers saw the given weight
        out = lib.func.functional_call(tied, {"0.weight": 2 * lib.eye(2)}, x, tie_weights=False)
        assert out.tolist() != [[4.0, 4.0]]
        with pytest.raises(RuntimeError, match=r"(?i)missing"):
            lib.func.functional_call(
                tied, {"0.weight": lib.eye(2)}, x, strict=True, tie_weights=False
            )
        with pytest.raises(ValueError, match="multiple dictionaries"):
            lib.func.functional_call(tied, ({"0.weight": lib.eye(2)}, {"0.weight": lib.eye(2)}), x)
        original = tied[0].weight
        with pytest.raises((RuntimeError, ValueError)):
            lib.func.functional_call(tied, {"0.weight": lib.ones(3, 3)}, x)
        assert tied[0].weight is original and tied[1].weight is original


# -- adaptive_max_pool3d ------------------------------------------------------------------------


@pytest.mark.parametrize("output_size", [(2, 3, 2), (1, None, 3), 2])
def test_adaptive_max_pool3d_matches_torch(output_size) -> None:
    x = torch.randn(2, 2, 5, 4, 5, dtype=torch.float64)
    want, want_idx = torch.nn.functional.adaptive_max_pool3d_with_indices(x, output_size)
    ours = rg.tensor(x.numpy(), requires_grad=True)
    got, idx = rg.nn.functional.adaptive_max_pool3d_with_indices(ours, output_size)
    assert np.allclose(got.detach().numpy(), want.numpy())
    assert idx.dtype == "int64" and (idx.numpy() == want_idx.numpy()).all()
    weights = torch.randn(want.shape, dtype=torch.float64)
    x.requires_grad_(True)
    (want_grad,) = torch.autograd.grad(
        (torch.nn.functional.adaptive_max_pool3d(x, output_size) * weights).sum(), [x]
    )
    (grad,) = rg.autograd.grad((got * rg.tensor(weights.numpy())).sum(), [ours])
    assert np.allclose(grad.numpy(), want_grad.numpy())
    module = rg.nn.AdaptiveMaxPool3d(output_size, return_indices=True)
    assert module(rg.tensor(x.detach().numpy()[0]))[1].tolist() == want_idx[0].tolist()


def test_adaptive_max_pool3d_finite_differences() -> None:
    x = rg.tensor(
        np.random.default_rng(0).standard_normal((1, 2, 3, 4, 3)),
        dtype="float64",
        requires_grad=True,
    )
    assert rg.autograd.gradcheck(lambda a: rg.nn.functional.adaptive_max_pool3d(a, (2, 2, 2)), (x,))
