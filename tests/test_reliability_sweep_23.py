"""Round 23 of the reliability sweep: the surface a training script leans on around the
engine, as a demanding user meets it. ``load_state_dict`` (``strict=False`` reports, shapes
that differ, buffers that are not persistent, a ``Parameter`` set over a buffer),
``nn.Module``'s bookkeeping (``named_modules`` with a module twice, ``apply``,
``requires_grad_``, hook handles, a deep copy of a module with hooks), ``DataLoader`` corners
(``batch_size=None``, ``drop_last`` with fewer samples than a batch, a sampler whose length is
wrong, batches of dicts, named tuples and nested lists), optimizers (groups with their own
options, a group added later and its saved state, a duplicate parameter, ``lr`` as a tensor),
state values of one weight saved by ``rg.save``, and the ``retrograd`` command's help.

torch is the reference throughout: the same calls on torch's objects give the expected keys,
batches and numbers. The defects found are fixed and kept by
``test_reliability_regressions_23.py``; what is here passed, and stays so.

The command runs by its ``main()`` in this process (:func:`cli_here.run_main`)."""

from __future__ import annotations

import collections
import copy
import io

import numpy as np
import pytest
import torch

import retrograd as rg
from cli_here import run_main
from retrograd import nn, optim
from retrograd.utils.data import DataLoader, Dataset, Sampler, TensorDataset


def same_linear(in_features: int, out_features: int) -> tuple[nn.Linear, torch.nn.Linear]:
    """A retrograd ``Linear`` and a torch one holding the same (seeded) values."""
    torch.manual_seed(0)
    reference = torch.nn.Linear(in_features, out_features)
    model = nn.Linear(in_features, out_features)
    model.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    return model, reference


# == load_state_dict =============================================================================
def test_a_non_strict_load_reports_the_keys_torchs_does():
    ours = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    expected = theirs.load_state_dict(
        {"0.weight": torch.ones(2, 2), "extra": torch.ones(1)}, strict=False
    )
    got = ours.load_state_dict({"0.weight": rg.ones(2, 2), "extra": rg.ones(1)}, strict=False)
    assert got.missing_keys == expected.missing_keys
    assert got.unexpected_keys == expected.unexpected_keys
    assert ours[0].weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("strict", [True, False])
def test_a_shape_that_differs_names_the_key_and_changes_nothing(strict):
    # torch refuses a size mismatch under strict=False too (it then has loaded the others)
    with pytest.raises(RuntimeError, match=r"size mismatch for 1\.weight"):
        torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)).load_state_dict(
            {"1.weight": torch.zeros(3)}, strict=strict
        )
    rg.seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    before = {k: np.array(v) for k, v in model.state_dict().items()}
    state = {k: rg.full(tuple(v.shape), 7.0) for k, v in model.state_dict().items()}
    state["1.weight"] = rg.zeros(3)
    with pytest.raises(rg.ShapeError, match=r"'1\.weight' has shape \[2\], the state has \[3\]"):
        model.load_state_dict(state, strict=strict)
    assert all(np.array_equal(before[k], np.array(v)) for k, v in model.state_dict().items())
    assert model(rg.ones(2, 2)).shape == (2, 2)  # usable after the error


def test_buffers_and_a_parameter_set_over_a_buffer_are_kept_as_torch_keeps_them():
    def build(module, lib, parameter):
        module.register_buffer("kept", lib.zeros(2))
        module.register_buffer("scratch", lib.ones(2), persistent=False)
        module.register_buffer("nothing", None)
        module.scratch = parameter  # a Parameter over a (non-persistent) buffer's name
        module.register_buffer("again", lib.ones(1), persistent=False)
        module.register_buffer("again", lib.ones(1))  # registered again, persistent now
        return (
            sorted(module.state_dict()),
            [n for n, _ in module.named_parameters()],
            [n for n, _ in module.named_buffers()],
        )

    expected = build(torch.nn.Module(), torch, torch.nn.Parameter(torch.ones(2)))
    assert build(nn.Module(), rg, nn.Parameter(rg.ones(2))) == expected


def test_named_modules_with_a_module_twice_lists_it_as_torch_does():
    def names(lib):
        shared = lib.nn.Linear(1, 1)
        outer = lib.nn.Sequential(shared, lib.nn.ReLU(), shared)
        return (
            [n for n, _ in outer.named_modules()],
            [n for n, _ in outer.named_modules(remove_duplicate=False)],
            [n for n, _ in outer.named_modules(prefix="p")],
            [n for n, _ in outer.named_parameters()],
            len(list(outer.parameters())),
        )

    assert names(rg) == names(torch)


def test_apply_and_requires_grad_return_the_module_and_reach_every_parameter():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    seen = []
    assert model.apply(lambda m: seen.append(type(m).__name__)) is model
    assert seen == ["Linear", "Linear", "Sequential"]  # children first, as torch's apply
    assert model.requires_grad_(False) is model
    assert [p.requires_grad for p in model.parameters()] == [False] * 4
    assert [p.requires_grad for p in model.requires_grad_().parameters()] == [True] * 4


def test_hook_handles_and_a_deep_copy_of_a_module_with_hooks():
    rg.seed(0)
    model = nn.Linear(2, 2)
    calls = []
    handle = model.register_forward_hook(lambda module, args, out: calls.append(module))
    twin = copy.deepcopy(model)
    twin(rg.ones(1, 2))
    assert calls == [twin]  # the copy has its own hook, called with the copy (as torch's)
    handle.remove()
    handle.remove()  # a second remove is nothing, as torch's
    model(rg.ones(1, 2))
    twin(rg.ones(1, 2))
    assert calls == [twin, twin]  # removed from the original only
    with model.register_forward_pre_hook(lambda module, args: (args[0] * 0,)):
        assert model(rg.ones(1, 2)).tolist() == [model.bias.tolist()]
    assert model(rg.ones(1, 2)).tolist() != [model.bias.tolist()]  # gone with the block


# == DataLoader ==================================================================================
def batches(loader) -> list:
    return [
        [part.tolist() for part in batch] if isinstance(batch, list) else batch.tolist()
        for batch in loader
    ]


def test_dataloader_corners_batch_as_torchs():
    values = np.arange(5.0, dtype=np.float32)
    ours, theirs = (
        TensorDataset(rg.tensor(values)),
        torch.utils.data.TensorDataset(torch.tensor(values)),
    )

    class WrongLength(Sampler):
        def __init__(self, *_):
            pass

        def __iter__(self):
            return iter([3, 1, 4])

        def __len__(self):  # claims more than it yields
            return 7

    class TorchWrongLength(torch.utils.data.Sampler):
        __init__, __iter__, __len__ = (
            WrongLength.__init__,
            WrongLength.__iter__,
            WrongLength.__len__,
        )

    cases = [
        ({"batch_size": None}, {"batch_size": None}),
        ({"batch_size": 8, "drop_last": True}, {"batch_size": 8, "drop_last": True}),
        ({"batch_size": 2, "sampler": WrongLength()}, {"sampler": TorchWrongLength()}),
    ]
    for ours_options, theirs_options in cases:
        mine = DataLoader(ours, **ours_options)
        reference = torch.utils.data.DataLoader(theirs, **{**ours_options, **theirs_options})
        assert len(mine) == len(reference), ours_options
        assert batches(mine) == batches(reference), ours_options


def test_batches_of_dicts_named_tuples_and_nested_lists_collate_as_torchs():
    pair = collections.namedtuple("Pair", "x y")

    def sample(lib, i):
        return {
            "x": lib.ones(2) * i,
            "n": [lib.tensor(float(i)), (i, "s")],
            "p": pair(lib.ones(1) * i, float(i)),
        }

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return (type(value).__name__, [plain(v) for v in value])
        if isinstance(value, list | tuple):
            return (type(value).__name__, [plain(v) for v in value])
        if hasattr(value, "tolist"):
            return (str(value.dtype).rpartition(".")[2], value.tolist())
        return value

    class Ours(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return sample(rg, i)

    class Theirs(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return sample(torch, i)

    mine = next(iter(DataLoader(Ours(), batch_size=3)))
    reference = next(iter(torch.utils.data.DataLoader(Theirs(), batch_size=3)))
    assert plain(mine) == plain(reference)


def test_dataloader_takes_a_start_method_or_context_this_machine_has():
    for context in ["spawn", torch.multiprocessing.get_context("spawn")]:
        loader = DataLoader([1, 2], num_workers=1, multiprocessing_context=context)
        assert [batch.tolist() for batch in loader] == [[1], [2]]


# == optimizers ==================================================================================
X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def steps(model, optimizer, reference, reference_optimizer, count: int = 3, between=None):
    for i in range(count):
        optimizer.step((model(rg.tensor(X)) ** 2).sum().backward())
        reference_optimizer.zero_grad()
        (reference(torch.tensor(X)) ** 2).sum().backward()
        reference_optimizer.step()
        if between is not None and i == 0:
            between()
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name, options",
    [("SGD", {"momentum": 0.9, "weight_decay": 0.1}), ("Adam", {"betas": (0.5, 0.9)})],
)
def test_groups_with_their_own_options_step_as_torchs(name, options):
    model, reference = same_linear(3, 2)
    optimizer = getattr(optim, name)(
        [{"params": [model.weight], **options}, {"params": [model.bias]}], lr=0.05
    )
    reference_optimizer = getattr(torch.optim, name)(
        [{"params": [reference.weight], **options}, {"params": [reference.bias]}], lr=0.05
    )
    steps(model, optimizer, reference, reference_optimizer)


def test_a_group_added_later_steps_and_saves_as_torchs():
    model, reference = same_linear(3, 2)
    optimizer = optim.Adam([model.weight], lr=0.05)
    reference_optimizer = torch.optim.Adam([reference.weight], lr=0.05)

    def add_bias():
        optimizer.add_param_group({"params": [model.bias], "lr": 0.2})
        reference_optimizer.add_param_group({"params": [reference.bias], "lr": 0.2})

    steps(model, optimizer, reference, reference_optimizer, between=add_bias)
    buffer = io.BytesIO()
    rg.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    saved, expected = rg.load(buffer), reference_optimizer.state_dict()
    assert [g["params"] for g in saved["param_groups"]] == [[0], [1]]
    assert [g["lr"] for g in saved["param_groups"]] == [g["lr"] for g in expected["param_groups"]]
    assert [s["step"] for s in saved["state"].values()] == [
        int(s["step"]) for s in expected["state"].values()
    ]
    resumed = optim.Adam([{"params": [model.weight]}, {"params": [model.bias]}], lr=0.05)
    resumed.load_state_dict(saved)
    assert [g["lr"] for g in resumed.param_groups] == [0.05, 0.2]
    with pytest.raises(rg.InvalidArgumentError, match=r"saved groups have \[1, 1\] parameters"):
        optim.Adam([model.weight], lr=0.05).load_state_dict(saved)


def test_a_duplicate_group_is_refused_and_leaves_the_optimizer_usable():
    model, reference = same_linear(3, 2)
    optimizer = optim.SGD([model.weight, model.bias], lr=0.05)
    reference_optimizer = torch.optim.SGD([reference.weight, reference.bias], lr=0.05)
    with pytest.raises(ValueError, match="more than one"):  # torch's ValueError, too
        reference_optimizer.add_param_group({"params": [reference.bias]})
    with pytest.raises(rg.InvalidArgumentError, match="more than one group"):
        optimizer.add_param_group({"params": [model.bias]})
    assert len(optimizer.param_groups) == 1
    steps(model, optimizer, reference, reference_optimizer)


def test_lr_as_a_tensor_steps_as_torchs():
    model, reference = same_linear(3, 2)
    optimizer = optim.Adam(model.parameters(), lr=rg.tensor(0.1))
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=torch.tensor(0.1))
    steps(model, optimizer, reference, reference_optimizer)


# == rg.save of a module's state values ==========================================================
def test_state_values_of_one_weight_that_differ_are_each_saved():
    # a tied weight's state values are saved once while they agree; one changed is its own
    model = nn.Module()
    model.emb = nn.Embedding(4, 3)
    model.head = nn.Linear(3, 4, bias=False)
    model.head.weight = model.emb.weight
    state = model.state_dict()
    changed = state["head.weight"].copy()  # a copy of the value (the value itself is live)
    changed[0, 0] += 1.0
    state["head.weight"] = changed
    buffer = io.BytesIO()
    rg.save(state, buffer)
    buffer.seek(0)
    loaded = rg.load(buffer)
    assert loaded["emb.weight"] is not loaded["head.weight"]
    difference = loaded["head.weight"].numpy() - loaded["emb.weight"].numpy()
    np.testing.assert_allclose(difference[0, 0], 1.0, rtol=1e-6)
    assert not difference.ravel()[1:].any()


# == the command's help ==========================================================================
def test_help_of_each_command_and_an_unknown_command():
    for command in ["train", "sample", "graph", "bench", "warmup"]:
        completed = run_main(command, "--help")
        assert completed.returncode == 0 and completed.stderr == ""
        assert completed.stdout.startswith(f"usage: retrograd {command}")
    completed = run_main("help", "train")
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retrograd: argument COMMAND: invalid choice")
