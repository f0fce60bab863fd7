"""torch's process-group functions in one process (``world_size`` 1, no launcher): a DDP script
runs unchanged, the collectives are the identity in torch's in-place form, and misuse gets
torch's messages from the error hierarchy. Two ranks under torchrun:
``tests/test_distributed_torch.py::test_a_torch_style_ddp_script_runs_as_written``."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.distributed as dist
from retrograd.errors import DistributedError, InvalidArgumentError
from retrograd.nn.parallel import DistributedDataParallel
from retrograd.utils.data import DataLoader, DistributedSampler, TensorDataset


@pytest.fixture
def process_group():
    dist.init_process_group("gloo")
    yield
    dist.destroy_process_group()


def test_state_before_and_after(process_group):
    assert dist.is_available() and dist.is_initialized()
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "gloo")
    with pytest.raises(DistributedError, match="initialize the default process group twice"):
        dist.init_process_group("gloo")


def test_uninitialized_is_torchs_error():
    assert not dist.is_initialized()
    with pytest.raises(DistributedError, match="has not been initialized"):
        dist.get_rank()
    with pytest.raises(DistributedError, match="has not been initialized"):
        dist.all_reduce(rg.ones(2))
    with pytest.raises(InvalidArgumentError, match="backend must be"):
        dist.init_process_group("ucc")
    assert not dist.is_initialized()


def test_collectives_in_torchs_form_are_in_place(process_group):
    x = rg.tensor([1.0, -2.0])
    assert dist.all_reduce(x, op=dist.ReduceOp.SUM) is None
    assert x.tolist() == [1.0, -2.0]
    work = dist.all_reduce(x, dist.ReduceOp.AVG, async_op=True)
    assert work.wait() and work.is_completed()
    gathered = [rg.zeros(2)]
    dist.all_gather(gathered, x * 3)
    assert gathered[0].tolist() == [3.0, -6.0]
    dist.broadcast(x, src=0)
    dist.reduce(x, dst=0)
    dist.barrier()
    dist.all_reduce(x, op=dist.ReduceOp.MAX)  # one rank: its own values (three: the
    # elementwise max, tests/test_distributed_breadth_1.py)
    with pytest.raises(InvalidArgumentError, match="all_reduce: op 'MEDIAN' is not a ReduceOp"):
        dist.all_reduce(x, op="MEDIAN")
    with pytest.raises(InvalidArgumentError, match="tensor_list has 2 tensors for 1 ranks"):
        dist.all_gather([rg.zeros(2), rg.zeros(2)], x)
    assert x.tolist() == [1.0, -2.0]


def test_in_place_collectives_on_parameters_and_computed_values(process_group):
    """``dist.broadcast(p.data, 0)`` writes through to the parameter, which stays a leaf;
    ``loss.detach()`` of a computed loss takes the result alone (torch's idiom for logging)."""
    layer = rg.nn.Linear(2, 1)
    dist.broadcast(layer.weight.data, 0)
    assert layer.weight.requires_grad and layer.weight.is_leaf
    loss = (rg.ones(2, requires_grad=True) * 2).sum()
    logged = loss.detach()
    dist.all_reduce(logged, op=dist.ReduceOp.AVG)
    assert logged.item() == 4.0 and not logged.requires_grad
    assert loss.backward() is not None  # the graph is untouched


def test_a_ddp_loop_trains_as_without_it(process_group):
    rng = np.random.default_rng(0)
    data = TensorDataset(
        rg.tensor(rng.standard_normal((12, 3))), rg.tensor(rng.standard_normal((12, 1)))
    )

    def train(wrap, sampler):
        rg.manual_seed(0)
        model = wrap(rg.nn.Linear(3, 1).double())
        optimizer = rg.optim.SGD(model.parameters(), lr=0.1)
        for x, y in DataLoader(data, batch_size=4, sampler=sampler):
            optimizer.step(rg.nn.functional.mse_loss(model(x), y).backward())
        return [p.detach().numpy() for p in model.parameters()]

    sampler = DistributedSampler(data, shuffle=False)  # rank and replicas from the group
    assert (sampler.num_replicas, sampler.rank) == (1, 0)
    ours = train(DistributedDataParallel, sampler)
    plain = train(lambda m: m, None)
    for a, b in zip(ours, plain, strict=True):
        np.testing.assert_array_equal(a, b)


def test_destroy_allows_a_new_group():
    dist.init_process_group(backend="gloo", init_method="env://", world_size=1, rank=0)
    dist.destroy_process_group()
    dist.destroy_process_group()  # idempotent
    dist.init_process_group()
    assert dist.get_world_size() == 1
    dist.destroy_process_group()
    with pytest.raises(InvalidArgumentError, match="give num_replicas and rank"):
        DistributedSampler(list(range(4)))
