"""torch's ``utils.data``, ``save``/``load``, ``distributions`` and ``autograd`` names against
torch: batches, samplers and collation; checkpoints that round-trip without pickle (and
refuse what they cannot store); log-probabilities, entropies and KL divergences;
``autograd.grad`` and ``Variable``."""

from __future__ import annotations

import functools
import io
import operator
import pickle
from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn
from retrograd.utils import data as rdata
from surface_testing import same_gradients, same_values

RNG = np.random.default_rng(17)


# -- utils.data ----------------------------------------------------------------------------------
class Squares(rdata.Dataset):
    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int):
        return {"x": np.full(2, float(i)), "i": i, "name": f"n{i}", "pair": (float(i), i)}


class TorchSquares(torch.utils.data.Dataset):
    __len__ = Squares.__len__
    __getitem__ = Squares.__getitem__


def _same_batch(ours, theirs) -> None:
    if isinstance(theirs, torch.Tensor):
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for key in theirs:
            _same_batch(ours[key], theirs[key])
    elif isinstance(theirs, list | tuple):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same_batch(a, b)
    else:
        assert ours == theirs


@pytest.mark.parametrize("batch_size, drop_last", [(3, False), (3, True), (1, False), (7, False)])
def test_sequential_batches_and_collation_match_torch(batch_size, drop_last):
    ours = rdata.DataLoader(Squares(), batch_size=batch_size, drop_last=drop_last, num_workers=2)
    theirs = torch.utils.data.DataLoader(TorchSquares(), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    batches = list(ours)
    assert len(batches) == len(theirs)
    for mine, reference in zip(batches, theirs):
        _same_batch(mine, reference)


def test_collate_forms_match_torch():
    point = namedtuple("point", ["x", "y"])
    samples = [
        [np.array([1, 2]), np.array([3, 4])],  # (int32 arrays: rg has int64 only)
        [np.float32(2.5), np.float32(1.5)],
        [True, False],
        [point(1.0, 2), point(3.0, 4)],
        [(rg.tensor([1.0, 2.0]), 1), (rg.tensor([3.0, 4.0]), 0)],
    ]
    torch_samples = [
        samples[0],
        samples[1],
        samples[2],
        samples[3],
        [(torch.tensor([1.0, 2.0]), 1), (torch.tensor([3.0, 4.0]), 0)],
    ]
    for ours, theirs in zip(samples, torch_samples):
        mine = rdata.default_collate(ours)
        reference = torch.utils.data.default_collate(theirs)
        if isinstance(reference, torch.Tensor):
            _same_batch(mine, reference)
        else:
            assert type(mine).__name__ == type(reference).__name__
            for a, b in zip(mine, reference):
                _same_batch(a, b)


def test_unbatched_samples_are_converted_as_torch():
    """``batch_size=None`` sends each sample through ``default_convert``: NumPy arrays and
    scalars become tensors inside dicts, tuples (as lists) and named tuples."""
    point = namedtuple("point", ["x", "y"])
    samples = [
        {"x": np.arange(3.0), "y": np.int64(2), "name": "a"},
        (np.ones(2, dtype=np.float32), 1.5),
        point(np.zeros(2), "b"),
        np.array(["s", "t"]),
    ]
    for sample in samples:
        mine = rdata.default_convert(sample)
        reference = torch.utils.data.default_convert(sample)
        assert type(mine).__name__ == type(reference).__name__
        pairs = (
            [(mine[k], reference[k]) for k in reference]
            if isinstance(reference, dict)
            else list(zip(mine, reference))
            if isinstance(reference, list | tuple)
            else [(mine, reference)]
        )
        for a, b in pairs:
            if isinstance(b, torch.Tensor):
                _same_batch(a, b)
            else:
                assert np.array_equal(np.asarray(a), np.asarray(b))

    class Samples(rdata.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return {"x": np.full(2, i, dtype=np.float32)}

    first = next(iter(rdata.DataLoader(Samples(), batch_size=None)))
    assert isinstance(first["x"], rg.Tensor) and first["x"].dtype == "float32"


def test_shuffling_draws_each_sample_once_per_epoch_and_follows_the_seed():
    data = rdata.TensorDataset(rg.arange(10).float(), rg.arange(10))
    rg.manual_seed(4)
    first = [y.tolist() for _, y in rdata.DataLoader(data, batch_size=4, shuffle=True)]
    rg.manual_seed(4)
    again = [y.tolist() for _, y in rdata.DataLoader(data, batch_size=4, shuffle=True)]
    assert first == again and sorted(functools.reduce(operator.iadd, first, [])) == list(range(10))
    assert [len(b) for b in first] == [4, 4, 2]
    with pytest.raises(rg.InvalidArgumentError, match="mutually exclusive"):
        rdata.DataLoader(data, sampler=rdata.SequentialSampler(data), shuffle=True)


def test_datasets_samplers_and_splits():
    data = rdata.TensorDataset(rg.arange(6), rg.arange(6) * 10)
    both = data + rdata.TensorDataset(rg.arange(3), rg.arange(3))
    assert len(both) == 9 and both[7][0].item() == 1 and both[-1][1].item() == 2
    subset = rdata.Subset(data, [5, 1])
    assert len(subset) == 2 and subset[0][1].item() == 50
    rg.manual_seed(0)
    parts = rdata.random_split(data, [0.5, 0.5])
    assert [len(p) for p in parts] == [3, 3]
    assert sorted(parts[0].indices + parts[1].indices) == list(range(6))
    torch_parts = torch.utils.data.random_split(range(7), [0.3, 0.3, 0.4])
    assert [len(p) for p in rdata.random_split(list(range(7)), [0.3, 0.3, 0.4])] == [
        len(p) for p in torch_parts
    ]
    batches = list(rdata.BatchSampler(rdata.SequentialSampler(range(5)), 2, drop_last=False))
    assert batches == list(
        torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(5)), 2, False)
    )
    drawn = list(rdata.RandomSampler(range(5), replacement=True, num_samples=20))
    assert len(drawn) == 20 and set(drawn) <= set(range(5))
    assert sorted(rdata.SubsetRandomSampler([3, 8, 9])) == [3, 8, 9]
    weighted = list(rdata.WeightedRandomSampler([0.0, 1.0, 0.0], 5))
    assert weighted == [1] * 5
    assert rdata.get_worker_info() is None
    assert rg.utils.data.dataloader.DataLoader is rdata.DataLoader


def test_iterable_datasets_batch_as_torch_s():
    class Stream(rdata.IterableDataset):
        def __iter__(self):
            return iter(range(5))

    class TorchStream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(5))

    ours = [b.tolist() for b in rdata.DataLoader(Stream(), batch_size=2)]
    theirs = [b.tolist() for b in torch.utils.data.DataLoader(TorchStream(), batch_size=2)]
    assert ours == theirs


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_shares_the_indices_as_torch_s(shuffle, drop_last):
    data = list(range(11))
    shares = []
    for rank in range(3):
        ours = rdata.DistributedSampler(data, 3, rank, shuffle=shuffle, drop_last=drop_last)
        theirs = torch.utils.data.distributed.DistributedSampler(
            data, 3, rank, shuffle=shuffle, drop_last=drop_last
        )
        assert len(ours) == len(theirs)
        if not shuffle:
            assert list(ours) == list(theirs)
        shares.append(list(ours))
    flat = functools.reduce(operator.iadd, shares, [])
    assert len(flat) == 3 * len(shares[0]) and set(flat) <= set(data)
    if not drop_last:
        assert set(flat) == set(data)
    sampler = rdata.DistributedSampler(data, 3, 0, shuffle=True)
    sampler.set_epoch(1)
    assert list(sampler) != shares[0] or not shuffle
    with pytest.raises(rg.InvalidArgumentError, match="num_replicas and rank"):
        rdata.DistributedSampler(data)


# -- save and load -------------------------------------------------------------------------------
def test_checkpoints_round_trip_without_pickle(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    optimizer = rg.optim.Adam(model.parameters(), lr=0.1)
    grads = model(rg.randn(5, 3)).sum().backward()
    optimizer.step(grads)
    tied = rg.tensor([1.0, 2.0], dtype=rg.float64)
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": 3,
        "best": float("inf"),
        "history": [0.5, 0.25],
        "shape": (2, 3),
        "names": OrderedDict([("a", 1), ("b", None)]),
        "keys": {0: "zero", (1, "x"): True},
        "a": tied,
        "b": tied,
        "dtype": rg.float64,
        "device": rg.device("cpu"),
    }
    path = tmp_path / "ckpt.pt"
    rg.save(checkpoint, path)
    loaded = rg.load(path, map_location="cpu", weights_only=True)
    assert loaded["epoch"] == 3 and loaded["best"] == float("inf")
    assert loaded["history"] == [0.5, 0.25] and loaded["shape"] == (2, 3)
    assert isinstance(loaded["names"], OrderedDict) and loaded["keys"][(1, "x")] is True
    assert loaded["a"] is loaded["b"] and loaded["a"].dtype == rg.float64
    assert loaded["dtype"] == rg.float64 and loaded["device"] == rg.device("cpu")
    fresh = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    fresh.load_state_dict(loaded["model"])
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[name], value)
    restored = rg.optim.Adam(fresh.parameters(), lr=0.1)
    restored.load_state_dict(loaded["optimizer"])
    assert restored.state_dict()["state"][0]["step"] == 1
    buffer = io.BytesIO()
    rg.save(model.state_dict(), buffer)
    buffer.seek(0)
    assert list(rg.load(buffer)) == list(model.state_dict())


def test_save_refuses_what_it_cannot_store_and_load_refuses_pickles(tmp_path):
    with pytest.raises(rg.DTypeError, match=r"function at the saved object\['f'\]"):
        rg.save({"f": lambda: 1}, tmp_path / "x.pt")
    (tmp_path / "pickle.pt").write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    with pytest.raises(rg.InvalidArgumentError, match="never read here"):
        rg.load(tmp_path / "pickle.pt")  # a pickle of no torch file (torch's are read)


def test_whole_modules_and_namespaces_save_as_torch_pickles_them_and_load_by_its_rule(tmp_path):
    """``torch.save(model, path)`` and ``{"args": args}`` checkpoints: pickled entries, which a
    default (``weights_only=True``) load refuses by name and ``weights_only=False`` or an
    allow-list reads back, as in torch."""
    import argparse

    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).double()
    path = tmp_path / "model.pt"
    rg.save({"model": model, "args": argparse.Namespace(lr=0.1), "step": 3}, path)
    their_path = tmp_path / "torch.pt"
    torch.save({"args": argparse.Namespace(lr=0.1)}, their_path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        torch.load(their_path)
    with pytest.raises(
        rg.InvalidArgumentError,
        match=r"retrograd\.nn\.modules\.container\.Sequential is not allowed.*weights_only=False",
    ):
        rg.load(path)
    unsafe = rg.serialization.get_unsafe_globals_in_checkpoint(path)
    assert "argparse.Namespace" in unsafe and "retrograd.nn.modules.container.Sequential" in unsafe
    loaded = rg.load(path, weights_only=False)
    assert loaded["step"] == 3 and loaded["args"].lr == 0.1
    x = rg.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(loaded["model"](x).detach().numpy(), model(x).detach().numpy())
    assert loaded["model"][0].weight.is_require_grad()
    grads = loaded["model"](x).sum().backward()
    assert loaded["model"][0].weight.grad(grads).shape == (2, 3)
    only_args = tmp_path / "args.pt"
    rg.save({"args": argparse.Namespace(lr=0.1)}, only_args)
    with rg.serialization.safe_globals([argparse.Namespace]):
        assert rg.serialization.get_unsafe_globals_in_checkpoint(only_args) == []
        assert rg.load(only_args)["args"] == argparse.Namespace(lr=0.1)
    with pytest.raises(rg.InvalidArgumentError, match=r"argparse\.Namespace"):
        rg.load(only_args)


def test_a_whole_module_loads_under_the_allow_list_torch_needs(tmp_path):
    """``generate.py``'s ``with torch.serialization.safe_globals([RNNModel, ...]):
    torch.load(f)``: a pickled module needs only its modules' classes allowed, as torch's (its
    tensors are the file's arrays, parameters rebuilt as ``Parameter``s); tied and frozen
    parameters, buffers and a Transformer's causal-mask cache come back as they were."""

    def build(lib):
        class Tied(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = lib.nn.Embedding(5, 4)
                self.encoder = lib.nn.TransformerEncoder(
                    lib.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0), 1
                )
                self.norm = lib.nn.BatchNorm1d(4)
                self.out = lib.nn.Linear(4, 5)
                self.out.weight = self.embed.weight
                self.norm.bias.requires_grad_(False)

        return Tied

    classes = {}
    for lib in (torch, rg):
        made = build(lib)
        made.__qualname__ = made.__name__ = "Tied"
        made.__module__ = __name__
        classes[lib.__name__] = made
    model = classes["retrograd"]().double()
    path = tmp_path / "model.pt"
    globals()["Tied"] = classes["retrograd"]  # where the pickle finds the class
    try:
        rg.save(model, path)
        theirs = classes["torch"]().double()
        globals()["Tied"] = classes["torch"]
        torch.save(theirs, tmp_path / "torch.pt")
        names = torch.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "torch.pt")
        globals()["Tied"] = classes["retrograd"]
        ours = rg.serialization.get_unsafe_globals_in_checkpoint(path)
        # the same classes and functions (retrograd's relu lives in nn.functional.activation)
        assert sorted(n.rsplit(".", 1)[1] for n in ours) == sorted(
            n.rsplit(".", 1)[1] for n in names
        )
        with rg.serialization.safe_globals([classes["retrograd"]] + [
            rg.nn.Embedding, rg.nn.TransformerEncoder, rg.nn.TransformerEncoderLayer,
            rg.nn.BatchNorm1d, rg.nn.Linear, rg.nn.LayerNorm, rg.nn.Dropout, rg.nn.ModuleList,
            rg.nn.MultiheadAttention, rg.nn.modules.linear.NonDynamicallyQuantizableLinear,
            rg.nn.functional.relu,
        ]):  # fmt: skip
            loaded = rg.load(path)
    finally:
        globals().pop("Tied", None)
    assert type(loaded.out.weight) is rg.nn.Parameter and loaded.out.weight is loaded.embed.weight
    assert not loaded.norm.bias.requires_grad and loaded.norm.weight.requires_grad
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(loaded.state_dict()[name]), np.asarray(value))
    x = rg.tensor(np.random.default_rng(0).standard_normal((3, 2, 4)))
    mask = rg.nn.Transformer.generate_square_subsequent_mask(3, dtype=rg.float64)
    np.testing.assert_allclose(
        loaded.encoder(x, mask=mask).numpy(), model.encoder(x, mask=mask).numpy(), rtol=1e-12
    )
    grads = loaded.encoder(x, mask=mask).sum().backward()
    assert loaded.encoder.layers[0].linear1.weight.grad(grads).shape == (8, 4)


def test_tensors_requiring_grad_load_as_leaves():
    buffer = io.BytesIO()
    rg.save([rg.tensor([1.0]).require_grad(), rg.tensor([2])], buffer)
    buffer.seek(0)
    leaf, ints = rg.load(buffer)
    assert leaf.is_require_grad() and ints.dtype == rg.long


# -- distributions -------------------------------------------------------------------------------
def test_categorical_matches_torch():
    logits = RNG.standard_normal((3, 5))
    value = np.array([0, 4, 2])

    def log_prob(lib, z):
        return lib.distributions.Categorical(logits=z).log_prob(lib.tensor(value))

    same_gradients(log_prob, [logits])
    same_gradients(lambda lib, z: lib.distributions.Categorical(logits=z).entropy(), [logits])
    same_gradients(
        lambda lib, z: lib.distributions.categorical.Categorical(probs=z.softmax(-1)).log_prob(
            lib.tensor(value)
        ),
        [logits],
    )
    same_gradients(
        lambda lib, a, b: lib.distributions.kl_divergence(
            lib.distributions.Categorical(logits=a), lib.distributions.Categorical(logits=b)
        ),
        [logits, RNG.standard_normal((3, 5))],
    )
    same_values(
        lambda lib, z: (
            lib.distributions.Categorical(logits=z).probs,
            lib.distributions.Categorical(logits=z).logits,
        ),
        [logits],
    )
    rg.manual_seed(0)
    d = rg.distributions.Categorical(probs=rg.tensor([0.1, 0.0, 0.9], dtype=rg.float64))
    draws = d.sample((2000,))
    assert draws.shape == (2000,) and draws.dtype == rg.long
    counts = np.bincount(draws.numpy(), minlength=3) / 2000
    assert counts[1] == 0 and abs(counts[2] - 0.9) < 0.03
    assert d.sample().shape == () and rg.distributions.Categorical(logits=rg.zeros(4, 3)).sample(
        (5,)
    ).shape == (5, 4)


def test_normal_and_bernoulli_match_torch():
    loc, scale, value = RNG.standard_normal(4), RNG.uniform(0.5, 2.0, 4), RNG.standard_normal(4)
    same_gradients(
        lambda lib, m, s: (
            lib.distributions.Normal(m, s).log_prob(lib.tensor(value))
            + lib.distributions.normal.Normal(m, s).entropy()
        ),
        [loc, scale],
    )
    same_gradients(
        lambda lib, m, s: lib.distributions.Normal(m, s).cdf(lib.tensor(value)), [loc, scale]
    )
    same_gradients(
        lambda lib, a, b, c, d: lib.distributions.kl_divergence(
            lib.distributions.Normal(a, b), lib.distributions.Normal(c, d)
        ),
        [loc, scale, value, scale[::-1].copy()],
    )
    same_gradients(
        lambda lib, z: (
            lib.distributions.Bernoulli(logits=z).log_prob(
                z * 0.0 + lib.tensor([1.0, 0.0, 1.0, 0.0])
            )
            + lib.distributions.Bernoulli(logits=z).entropy()
        ),
        [value * 3],
    )
    rg.manual_seed(1)
    m = rg.tensor(loc).require_grad()
    sample = rg.distributions.Normal(m, 2.0).rsample((3000,))
    assert sample.shape == (3000, 4) and abs(float(sample.mean()) - loc.mean()) < 0.1
    grads = sample.sum().backward()
    assert m.grad(grads).tolist() == [3000.0] * 4
    assert not rg.distributions.Normal(m, 2.0).sample().requires_grad


# -- autograd --------------------------------------------------------------------------------------
def test_autograd_grad_as_torch_s_with_a_gradient_penalty():
    a = RNG.standard_normal((4, 3))
    w0 = RNG.standard_normal((3, 1))
    results = {}
    for lib in (rg, torch):
        w = lib.tensor(w0)
        w = lib.autograd.Variable(w, requires_grad=True)
        x = lib.autograd.Variable(lib.tensor(a), requires_grad=True)
        out = (x @ w).tanh()
        (g,) = lib.autograd.grad(out, x, grad_outputs=lib.ones_like(out), create_graph=True)
        penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
        if lib is rg:
            grads = penalty.backward()
            results[lib] = (g.detach().numpy(), w.grad(grads).numpy())
        else:
            penalty.backward()
            results[lib] = (g.detach().numpy(), w.grad.numpy())
    for ours, theirs in zip(results[rg], results[torch]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    x = rg.tensor([1.0, 2.0]).require_grad()
    y = rg.tensor([3.0]).require_grad()
    with pytest.raises(rg.AutodiffError, match="allow_unused"):
        rg.autograd.grad((x * x).sum(), [x, y])
    gx, gy = rg.autograd.grad((x * x).sum(), [x, y], allow_unused=True)
    assert gx.tolist() == [2.0, 4.0] and gy is None
    assert rg.autograd.Variable(x) is x


def test_inference_mode_records_nothing():
    x = rg.tensor([1.0]).require_grad()
    with rg.inference_mode():
        assert not (x * 2).requires_grad
    with rg.inference_mode(False):
        assert (x * 2).requires_grad

    @rg.inference_mode()
    def evaluate():
        return x * 2

    assert not evaluate().requires_grad


def test_size_and_testing_as_torch_s():
    assert rg.Size([2, 3]) == torch.Size([2, 3]) == (2, 3)
    assert rg.Size((2, 3, 4)).numel() == torch.Size((2, 3, 4)).numel() == 24
    for lib in (rg, torch):
        lib.testing.assert_close(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0 + 1e-6]))
        with pytest.raises(AssertionError, match="not close"):
            lib.testing.assert_close(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.1]))
        with pytest.raises(AssertionError, match="dtype"):
            lib.testing.assert_close(lib.tensor([1.0]), lib.tensor([1.0], dtype=lib.float64))
        with pytest.raises(AssertionError):
            lib.testing.assert_close(lib.tensor([1, 2]), lib.tensor([1, 3]))


def test_a_generator_not_retrograds_is_refused_not_ignored():
    """torch's generator is another algorithm's stream: refused. ``rg.Generator`` is taken
    (tests/test_surface_runtime.py)."""
    generator = torch.Generator().manual_seed(0)
    for call in (
        lambda: rg.randn(2, generator=generator),
        lambda: rg.randperm(3, generator=generator),
        lambda: rg.zeros(2).uniform_(generator=generator),
        lambda: rdata.DataLoader([1, 2], shuffle=True, generator=generator),
        lambda: rdata.random_split([1, 2], [1, 1], generator=generator),
        lambda: rdata.WeightedRandomSampler([0.5, 0.5], 2, generator=generator),
        lambda: rg.multinomial(rg.ones(2), 1, generator=generator),
    ):
        with pytest.raises(rg.DTypeError, match=r"must be an rg\.Generator"):
            call()
