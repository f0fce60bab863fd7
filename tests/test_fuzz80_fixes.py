"""Regression tests for the defects round 80's random data parallel programs found
(``tests/test_random_80.py``), each against what torch 2.13's ``DistributedDataParallel`` does."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn
from retrograd.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 (as scripts write it)
from test_random_80 import _raise_any, run_ranks

torch = pytest.importorskip("torch")


def test_a_frozen_parameter_stays_frozen_under_ddp():
    """torch's DDP leaves a parameter with ``requires_grad=False`` out of its reducer: it gets
    no gradient and the optimizer does not move it. Marking it for all-reduce had made it
    require grad, so it was trained."""

    def script(rank):
        model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2)).double()
        model[0].weight.requires_grad_(False)
        ddp = DDP(model)  # (rank 0's values on every rank)
        before = model[0].weight.numpy().copy()
        optimizer = rg.optim.SGD(ddp.parameters(), lr=0.5)
        grads = ddp(rg.ones((2, 3), dtype="float64") * (rank + 1)).sum().backward()
        optimizer.step(grads)
        frozen = model[0].weight
        return frozen.requires_grad, frozen.grad(grads), before, frozen.numpy().copy()

    for requires_grad, grad, before, after in _raise_any(run_ranks(2, script)):
        assert requires_grad is False and grad is None
        np.testing.assert_array_equal(after, before)


def _bn_script(sync_option, value):
    def script(rank):
        rg.manual_seed(0)
        model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).double()
        with rg.no_grad():  # each replica's own statistics before DDP
            model[1].running_mean.fill_(float(rank))
            model[1].num_batches_tracked.fill_(rank + 5)
        DDP(model, **{sync_option: value})
        return model[1].running_mean.numpy().copy(), int(model[1].num_batches_tracked.item())

    return script


@pytest.mark.parametrize(
    ("option", "value", "synced"),
    [
        ("broadcast_buffers", True, True),
        ("broadcast_buffers", False, False),
        # torch 2.13: the new name's False still syncs at construction (its FutureWarning)
        ("forward_sync_buffers", False, True),
        ("forward_sync_buffers", True, True),
    ],
)
def test_buffers_synced_at_construction_as_torchs(option, value, synced):
    """Every buffer, the int64 ``num_batches_tracked`` too, is rank 0's after construction
    where torch's ``_sync_module_states`` broadcasts them; ``forward_sync_buffers=False`` had
    synced none and the int64 count was never synced."""
    for rank, (mean, count) in enumerate(_raise_any(run_ranks(3, _bn_script(option, value)))):
        source = 0 if synced else rank
        np.testing.assert_array_equal(mean, np.full(3, float(source)))
        assert count == source + 5, (rank, count)


class _Stage(nn.Module):
    def __init__(self, width, out):
        super().__init__()
        self.used = nn.Linear(2, width)
        self.unused = nn.Linear(width, out)  # in no step's graph

    def forward(self, x):
        return self.used(x)


def test_two_find_unused_models_with_the_same_names_do_not_mix():
    """Two ``find_unused_parameters=True`` models whose parameters share names (a GAN's two
    models; a model rebuilt from a checkpoint while the old one lives): each backward
    registers its own model's unused parameters only. It had registered whichever model's
    came first by name, so the devices disagreed on the shapes (a DistributedError) or the
    other model's parameters were reduced."""

    def script(rank):
        rg.manual_seed(0)
        shapes = []
        for _ in range(3):
            first = DDP(_Stage(3, 2).double(), find_unused_parameters=True)
            second = DDP(_Stage(4, 1).double(), find_unused_parameters=True)
            x = rg.ones((2, 2), dtype="float64") * (rank + 1)
            for model in (second, first):
                grads = model(x).sum().backward()
                shapes.append([None if p.grad(grads) is None else tuple(p.grad(grads).shape)
                               for p in model.parameters()])  # fmt: skip
        return shapes

    for shapes in _raise_any(run_ranks(2, script)):
        assert shapes == [[(4, 2), (4,), None, None], [(3, 2), (3,), None, None]] * 3


def test_torch_form_all_reduce_of_bools_and_integer_averages_as_torchs():
    """torch 2.13's gloo ``all_reduce`` of a bool tensor with SUM gives the ranks' OR
    (measured: ``[T, F, T, F]`` and ``[T, T, F, F]`` give ``[T, T, T, F]``; the "did any rank
    stop" flag of training loops); AVG of a bool or integer tensor raises torch's
    ``RuntimeError`` ("result type Float can't be cast to the desired output type Long").
    retrograd refused the bool SUM and raised a plain ``DTypeError`` (a ``TypeError``) for
    the AVG."""
    import retrograd.distributed as dist

    flags = [[True, False, True, False], [True, True, False, False]]

    def script(rank):
        done = rg.tensor(flags[rank])
        dist.all_reduce(done)  # SUM, torch's default
        refused = []
        for dtype in ("int64", "bool"):
            with pytest.raises(RuntimeError, match="can't be cast") as caught:
                dist.all_reduce(rg.tensor([1, 0], dtype=dtype), op=dist.ReduceOp.AVG)
            refused.append(isinstance(caught.value, rg.DTypeError))
        return str(done.dtype), done.tolist(), refused

    for dtype, value, refused in _raise_any(run_ranks(2, script)):
        assert dtype.endswith("bool") and value == [True, True, True, False]
        assert refused == [True, True]


def test_construction_broadcast_keeps_rank_0s_negative_zero():
    """torch's construction sync is a broadcast: rank 0's ``-0.0`` arrives as ``-0.0``. It was
    an all-reduce of rank 0's values with the others' zeros, and ``-0.0 + 0.0`` is ``0.0``."""

    def script(rank):
        model = nn.Linear(1, 1, bias=False).double()
        model.load_state_dict({"weight": np.array([[-0.0 if rank == 0 else 1.0]])})
        DDP(model)
        return model.weight.numpy().copy()

    for weight in _raise_any(run_ranks(2, script)):
        assert weight[0, 0] == 0.0 and np.signbit(weight[0, 0])
