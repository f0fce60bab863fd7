"""PyTorch DDP scripts as real code writes them, run with in-process ranks (the ``local``
engine: each rank a thread that calls ``init_process_group(rank=r, world_size=n, store=ctx)``,
as torch's threaded process groups do in its tests), checked against torch: the sampler's
shards, the full-batch gradient DDP's average must equal, the c10d collectives' results,
``no_sync`` accumulation, parameters unused in a step, ``SyncBatchNorm`` and ZeRO.

Every rank thread is joined with a deadline and every context has a short timeout, so a
collective some rank never joins fails the test instead of hanging it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.distributed as dist
from retrograd import nn
from retrograd.distributed.algorithms.join import Join
from retrograd.distributed.optim import ZeroRedundancyOptimizer
from retrograd.errors import DistributedError, InvalidArgumentError
from retrograd.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 (as scripts write it)
from retrograd.utils.data import DataLoader, DistributedSampler, TensorDataset

JOIN_SECONDS = 30.0


def run_ranks(n: int, script, timeout: float = 5.0) -> list:
    """``script(rank)`` on ``n`` thread ranks of one local context, each inside its own
    ``init_process_group``; the results in rank order (a rank's exception re-raised)."""
    devices = [rg.Device("cpu", i) for i in range(n)]
    config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=timeout)
    results: list = [None] * n
    with dist.DistributedContext(devices, config) as ctx:

        def run(rank: int) -> None:
            try:
                dist.init_process_group("gloo", rank=rank, world_size=n, store=ctx)
                try:
                    results[rank] = script(rank)
                finally:
                    dist.destroy_process_group()
            except BaseException as error:  # handed back to the test
                results[rank] = error

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + JOIN_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive(), "a rank thread hung"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


# -- DistributedSampler: torch's shards exactly ---------------------------------------------------


@pytest.mark.parametrize("size", [10, 11, 16])
@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_shards_are_torchs(size, replicas, drop_last):
    from torch.utils.data.distributed import DistributedSampler as TorchSampler

    dataset = list(range(size))
    for shuffle in (True, False):
        for seed in (0, 7):
            for rank in range(replicas):
                ours = DistributedSampler(dataset, replicas, rank, shuffle, seed, drop_last)
                theirs = TorchSampler(dataset, replicas, rank, shuffle, seed, drop_last)
                assert len(ours) == len(theirs)
                for epoch in (0, 1, 5):
                    ours.set_epoch(epoch)
                    theirs.set_epoch(epoch)
                    assert list(ours) == list(theirs), (shuffle, seed, rank, epoch)


# -- a training script: DDP + DistributedSampler equals full-batch training ------------------------

FEATURES = _data(0, 16, 3)
TARGETS = _data(1, 16, 1)


def test_ddp_script_trains_as_full_batch_training_in_torch():
    """Two ranks, a shuffled sampler with set_epoch, SGD on the averaged gradients: the same
    parameters as one torch process stepping on the union of the ranks' batches."""

    def script(rank):
        assert dist.is_available() and dist.is_initialized()
        assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (rank, 2, "gloo")
        rg.manual_seed(rank)  # replicas start apart: DDP broadcasts rank 0's parameters
        model = DDP(nn.Linear(3, 1).double(), find_unused_parameters=False)
        start = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        optimizer = rg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        dataset = TensorDataset(rg.tensor(FEATURES), rg.tensor(TARGETS))
        sampler = DistributedSampler(dataset, shuffle=True, seed=3)
        total = rg.zeros(1, dtype="float64")
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in DataLoader(dataset, batch_size=4, sampler=sampler):
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.step(loss.backward())
                total += loss.detach()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        dist.barrier()
        saved = None
        if dist.get_rank() == 0:  # saved on rank 0 only, as real scripts do
            saved = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        return start, saved, total.item(), model.module.weight.numpy().copy()

    (start, saved, total, weight0), (start1, none, total1, weight1) = run_ranks(2, script)
    assert none is None
    np.testing.assert_array_equal(start["weight"], start1["weight"])
    np.testing.assert_array_equal(weight0, weight1)

    from torch.utils.data.distributed import DistributedSampler as TorchSampler

    reference = torch.nn.Linear(3, 1).double()
    reference.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    samplers = [TorchSampler(range(16), 2, r, shuffle=True, seed=3) for r in range(2)]
    losses = 0.0
    for epoch in range(2):
        shards = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
        for step in range(2):
            rows = [i for shard in shards for i in shard[4 * step : 4 * step + 4]]
            optimizer.zero_grad()
            prediction = reference(torch.tensor(FEATURES[rows]))
            loss = torch.nn.functional.mse_loss(prediction, torch.tensor(TARGETS[rows]))
            loss.backward()
            optimizer.step()
            # each rank's loss is the mean over its half; their sum is twice the full mean's
            losses += sum(
                torch.nn.functional.mse_loss(
                    prediction[4 * r : 4 * r + 4].detach(), torch.tensor(TARGETS[rows[4 * r :]][:4])
                ).item()
                for r in range(2)
            )
    for key, value in reference.state_dict().items():
        np.testing.assert_allclose(saved[key], value.numpy(), rtol=1e-10, atol=1e-12)
    assert total == pytest.approx(losses, rel=1e-10) and total1 == total


def test_cpu_named_without_an_index_in_a_rank_is_that_ranks():
    """``device = torch.device("cpu"); model.to(device); x.to(device)``, as CPU scripts write
    it: in rank 1 that is rank 1's device, so its gradients are averaged with rank 0's (it
    moved them to rank 0's device, whose collectives rank 0 already makes)."""

    def script(rank):
        device = rg.device("cpu")
        rg.manual_seed(0)
        model = DDP(nn.Linear(2, 1).double().to(device))
        x = rg.tensor([[1.0, 2.0]], dtype="float64").to("cpu") * (rank + 1)
        grads = model(x.to(device=rg.device("cpu"))).sum().backward()
        return str(device), str(model.module.weight.device), model.module.weight.grad(grads)

    for rank, (device, placed, grad) in enumerate(run_ranks(2, script, timeout=2.0)):
        assert device == placed == str(rg.device("cpu", rank))
        np.testing.assert_allclose(grad.numpy(), [[1.5, 3.0]], rtol=1e-12)  # (x + 2x) / 2


def test_checkpoint_saved_on_rank_0_loads_on_every_rank_with_a_map_location_dict(tmp_path):
    """The DDP tutorial's checkpoint: rank 0 saves ``model.module.state_dict()``, a barrier,
    every rank loads it with ``map_location={"cpu:0": f"cpu:{rank}"}``."""
    path = tmp_path / "checkpoint.pt"

    def script(rank):
        rg.manual_seed(rank)
        model = DDP(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)))
        if dist.get_rank() == 0:
            saved = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
            rg.save(model.module.state_dict(), path)
        dist.barrier()
        with rg.no_grad():  # a replica's own values, to be overwritten by the checkpoint
            model.module[0].weight.add_(float(rank))
        model.module.load_state_dict(rg.load(path, map_location={"cpu:0": f"cpu:{rank}"}))
        loaded = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        return (saved if rank == 0 else None), loaded, str(model.module[0].weight.device)

    (saved, loaded0, device0), (_, loaded1, device1) = run_ranks(2, script)
    assert (device0, device1) == ("cpu", "cpu:1")  # (device 0 prints as torch's "cpu")
    for key, value in saved.items():
        np.testing.assert_array_equal(loaded0[key], value)
        np.testing.assert_array_equal(loaded1[key], value)
    with pytest.raises(InvalidArgumentError, match="several target devices"):
        rg.load(path, map_location={"cuda:0": "cuda:1", "cuda:1": "cuda:2"})


# -- torch's c10d collectives, on metric tensors and objects ---------------------------------------


def test_collectives_and_object_collectives_give_torchs_results():
    values = [np.array([1.5, -2.0, 4.0]), np.array([-0.5, 3.0, 4.0]), np.array([2.0, 0.25, -1.0])]
    flags = [np.array([0b1100, 7]), np.array([0b1010, 1]), np.array([0b0110, 2])]

    def script(rank):
        out = {}
        world = dist.new_group(ranks=[0, 1, 2])
        with pytest.raises(InvalidArgumentError, match="subgroups are not supported"):
            dist.new_group(ranks=[0, 1])
        for name in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
            t = rg.tensor(values[rank])
            assert dist.all_reduce(t, op=getattr(dist.ReduceOp, name), group=world) is None
            out[name] = t.numpy().copy()
        for name in ("BAND", "BOR", "BXOR"):
            t = rg.tensor(flags[rank], dtype="int64")
            dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
            out[name] = t.numpy().copy()
        t = rg.tensor(values[rank])
        dist.reduce(t, dst=1, op=dist.ReduceOp.MAX)
        out["reduce"] = t.numpy().copy()
        t = rg.tensor(values[rank])
        dist.broadcast(t, src=2)
        out["broadcast"] = t.numpy().copy()
        listed = [rg.zeros(3, dtype="float64") for _ in range(3)]
        dist.all_gather(listed, rg.tensor(values[rank]))
        out["all_gather"] = [t.numpy().copy() for t in listed]
        flat = rg.zeros(9, dtype="float64")
        dist.all_gather_into_tensor(flat, rg.tensor(values[rank]))
        out["all_gather_into_tensor"] = flat.numpy().copy()
        with pytest.raises(rg.ShapeError, match=r"all_gather_into_tensor.*needs \[9\]"):
            dist.all_gather_into_tensor(rg.zeros(8, dtype="float64"), rg.tensor(values[rank]))
        gathered = [rg.zeros(3, dtype="float64") for _ in range(3)] if rank == 0 else None
        dist.gather(rg.tensor(values[rank]), gathered, dst=0)
        out["gather"] = None if gathered is None else [t.numpy().copy() for t in gathered]
        t = rg.zeros(3, dtype="float64")
        parts = [rg.tensor(v * 10) for v in values] if rank == 1 else None
        dist.scatter(t, parts, src=1)
        out["scatter"] = t.numpy().copy()
        objects = [None, None, None]
        dist.all_gather_object(objects, {"rank": rank, "tag": "x" * (rank * 5)})
        out["all_gather_object"] = objects
        shared = [f"config-{rank}", rank * 1.5] if rank == 0 else [None, None]
        dist.broadcast_object_list(shared, src=0)
        out["broadcast_object_list"] = shared
        collected = [None] * 3 if rank == 2 else None
        dist.gather_object((rank, [rank] * rank), collected, dst=2)
        out["gather_object"] = collected
        received = [None]
        sent = [{"for": r} for r in range(3)] if rank == 0 else None
        dist.scatter_object_list(received, sent, src=0)
        out["scatter_object_list"] = received[0]
        return out

    results = run_ranks(3, script)
    stacked = np.stack(values)
    expected = {
        "SUM": stacked.sum(0),
        "AVG": stacked.mean(0),
        "MAX": stacked.max(0),
        "MIN": stacked.min(0),
        "PRODUCT": stacked.prod(0),
        "BAND": np.bitwise_and.reduce(np.stack(flags)),
        "BOR": np.bitwise_or.reduce(np.stack(flags)),
        "BXOR": np.bitwise_xor.reduce(np.stack(flags)),
    }
    for rank, out in enumerate(results):
        for name, value in expected.items():
            np.testing.assert_allclose(out[name], value, rtol=1e-12, err_msg=name)
        np.testing.assert_array_equal(out["reduce"], stacked.max(0) if rank == 1 else values[rank])
        np.testing.assert_array_equal(out["broadcast"], values[2])
        np.testing.assert_array_equal(np.stack(out["all_gather"]), stacked)
        np.testing.assert_array_equal(out["all_gather_into_tensor"], stacked.reshape(-1))
        if rank == 0:
            np.testing.assert_array_equal(np.stack(out["gather"]), stacked)
        np.testing.assert_array_equal(out["scatter"], values[rank] * 10)
        assert out["all_gather_object"] == [{"rank": r, "tag": "x" * (r * 5)} for r in range(3)]
        assert out["broadcast_object_list"] == ["config-0", 0.0]
        assert out["gather_object"] == ([(r, [r] * r) for r in range(3)] if rank == 2 else None)
        assert out["scatter_object_list"] == {"for": rank}


# -- gradient accumulation with no_sync ------------------------------------------------------------


def test_no_sync_accumulation_gives_the_full_batch_gradient():
    """torch's idiom: the first micro-batches under ``no_sync``, the last one synced; the
    gradients it returns are the all-reduced sum, as torch's ``.grad`` then."""
    micro = [[_data(10 + 2 * r + k, 2, 3) for k in range(3)] for r in range(2)]

    def script(rank):
        rg.manual_seed(0)
        model = DDP(nn.Linear(3, 2).double())
        accumulate = 3
        for k in range(accumulate):
            x = rg.tensor(micro[rank][k])
            if k < accumulate - 1:
                with model.no_sync():
                    grads = (model(x).square().sum() / accumulate).backward()
            else:
                grads = (model(x).square().sum() / accumulate).backward()
        start = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        return start, [p.grad(grads).numpy().copy() for p in model.parameters()]

    (start, grads0), (_, grads1) = run_ranks(2, script)
    reference = torch.nn.Linear(3, 2).double()
    reference.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
    for r in range(2):
        for k in range(3):
            # DDP averages over 2 ranks: each rank's loss counts 1/2 in the full batch's
            (reference(torch.tensor(micro[r][k])).square().sum() / 3 / 2).backward()
    for ours0, ours1, theirs in zip(grads0, grads1, reference.parameters()):
        np.testing.assert_allclose(ours0, theirs.grad.numpy(), rtol=1e-12)
        np.testing.assert_array_equal(ours0, ours1)


def test_gradients_left_in_no_sync_do_not_leak_into_the_next_job():
    x = _data(15, 2, 3)

    def leave_some(rank):
        model = DDP(nn.Linear(3, 2).double())
        with model.no_sync():
            model(rg.tensor(x)).sum().backward()

    def synced_step(rank):
        rg.manual_seed(0)
        model = DDP(nn.Linear(3, 2).double())
        return model.module.weight.grad(model(rg.tensor(x)).sum().backward()).numpy().copy()

    run_ranks(2, leave_some)
    for grad in run_ranks(2, synced_step):  # d(sum(x W^T))/dW: x's column sums, each row
        np.testing.assert_allclose(grad, np.tile(x.sum(0), (2, 1)), rtol=1e-12)


# -- parameters some ranks do not use --------------------------------------------------------------


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(3, 2)
        self.head = nn.Linear(2, 2)
        self.never = nn.Linear(2, 2)  # in the model, in no step's graph

    def forward(self, x, use_head):
        y = self.trunk(x)
        return self.head(y) if use_head else y


def test_find_unused_parameters_averages_with_zeros_and_skips_the_never_used():
    xs = [_data(20 + r, 4, 3) for r in range(2)]

    def script(rank):
        rg.manual_seed(0)
        model = DDP(_Branchy().double(), find_unused_parameters=True)
        optimizer = rg.optim.Adam(model.parameters(), lr=0.01)
        start = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        grads = model(rg.tensor(xs[rank]), use_head=rank == 0).sum().backward()
        found = {name: p.grad(grads) for name, p in model.module.named_parameters()}
        optimizer.step(grads)
        after = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        return start, {k: None if g is None else g.numpy().copy() for k, g in found.items()}, after

    results = run_ranks(2, script)
    start = results[0][0]
    reference = _torch_branchy(start)
    optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
    for r in range(2):  # the average of the ranks' losses
        y = reference["trunk"](torch.tensor(xs[r]))
        (((reference["head"](y) if r == 0 else y).sum()) / 2).backward()
    optimizer.step()
    for _, grads, after in results:
        for name, p in reference.named_parameters():
            key = name.replace("trunk.", "trunk.").replace("head.", "head.")
            if p.grad is None:
                assert grads[key] is None, key  # torch leaves a never-used .grad None
            else:
                np.testing.assert_allclose(grads[key], p.grad.numpy(), rtol=1e-12)
        for name, value in reference.state_dict().items():
            np.testing.assert_allclose(after[name], value.numpy(), rtol=1e-10, atol=1e-12)


def _torch_branchy(state):
    model = torch.nn.ModuleDict(
        {
            "trunk": torch.nn.Linear(3, 2),
            "head": torch.nn.Linear(2, 2),
            "never": torch.nn.Linear(2, 2),
        }
    ).double()
    model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    return model


def test_a_rank_skipping_a_parameter_without_find_unused_says_what_to_do():
    def script(rank):
        model = DDP(_Branchy())
        with pytest.raises(DistributedError, match="find_unused_parameters=True"):
            model(rg.ones((2, 3)), use_head=rank == 0).sum().backward()
        return True

    assert run_ranks(2, script) == [True, True]


# -- SyncBatchNorm and BatchNorm buffers -----------------------------------------------------------


def test_sync_batchnorm_converted_in_a_ddp_model_is_full_batch_batchnorm():
    xs = [_data(30 + r, 3, 2) for r in range(2)]

    def script(rank):
        rg.manual_seed(rank)
        model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
        model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model.double()), broadcast_buffers=True)
        start = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        optimizer = rg.optim.SGD(model.parameters(), lr=0.5)
        optimizer.step(model(rg.tensor(xs[rank])).square().mean().backward())
        return start, {k: v.numpy().copy() for k, v in model.module.state_dict().items()}

    (start, after0), (_, after1) = run_ranks(2, script)
    reference = torch.nn.Sequential(
        torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 1)
    ).double()
    reference.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    reference(torch.tensor(np.concatenate(xs))).square().mean().backward()
    optimizer.step()
    for key, value in reference.state_dict().items():
        np.testing.assert_allclose(after0[key], value.numpy(), rtol=1e-10, atol=1e-12, err_msg=key)
        np.testing.assert_array_equal(after0[key], after1[key])


# -- ZeRO: consolidate_state_dict on rank 0 -------------------------------------------------------


def test_zero_consolidated_state_is_the_wrapped_optimizers():
    xs = [_data(40 + r, 4, 3) for r in range(2)]

    def script(rank):
        rg.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double())
        start = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        optimizer = ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=rg.optim.Adam, parameters_as_bucket_view=True,
            lr=0.01,
        )  # fmt: skip
        for _ in range(2):
            optimizer.step(model(rg.tensor(xs[rank])).square().mean().backward())
        optimizer.consolidate_state_dict(to=0)
        state = optimizer.state_dict() if rank == 0 else None
        return start, state, {k: v.numpy().copy() for k, v in model.module.state_dict().items()}

    (start, state, after), (_, _, after1) = run_ranks(2, script)
    reference = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)
    ).double()
    reference.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
    optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
    for _ in range(2):
        optimizer.zero_grad()
        reference(torch.tensor(np.concatenate(xs))).square().mean().backward()
        optimizer.step()
    for key, value in reference.state_dict().items():
        np.testing.assert_allclose(after[key], value.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(after[key], after1[key])
    theirs = optimizer.state_dict()["state"]
    assert sorted(state["state"]) == sorted(theirs)
    for index, entry in theirs.items():
        np.testing.assert_allclose(
            np.asarray(state["state"][index]["exp_avg_sq"]), entry["exp_avg_sq"].numpy(),
            rtol=1e-9, atol=1e-15,
        )  # fmt: skip


# -- misuse: clear errors, nothing hangs -----------------------------------------------------------


def test_thread_rank_misuse_is_refused_clearly():
    devices = [rg.Device("cpu", i) for i in range(2)]
    config = dist.DistributedConfig(timeout=2.0)
    with dist.DistributedContext(devices, config) as ctx:
        with pytest.raises(InvalidArgumentError, match="world_size 3 differs"):
            dist.init_process_group("gloo", rank=0, world_size=3, store=ctx)
        with pytest.raises(InvalidArgumentError, match="rank 5 is not a rank"):
            dist.init_process_group("gloo", rank=5, world_size=2, store=ctx)
    assert not dist.is_initialized()
    with pytest.raises(InvalidArgumentError, match="SGD is not joinable"):
        Join([rg.optim.SGD([rg.ones(1, requires_grad=True)], lr=0.1)])


def test_a_rank_that_stops_early_fails_the_others_within_the_timeout():
    """Uneven inputs without Join: the rank with one more batch gets DistributedError within
    the context's timeout, not a hang."""

    def script(rank):
        model = DDP(nn.Linear(2, 1))
        for _ in range(2 if rank == 0 else 1):
            model(rg.ones((1, 2))).sum().backward()
        return "done"

    with pytest.raises(
        DistributedError, match=r"timed out after 1 s: cpu:1 never registered.*\.join\(\)"
    ):
        run_ranks(2, script, timeout=1.0)


# -- BatchNorm buffers: rank 0's broadcast before every forward ------------------------------------


def test_batchnorm_buffers_are_broadcast_from_rank_0_before_every_forward():
    """torch's ``broadcast_buffers=True``: each forward starts from rank 0's running
    statistics, so after a step each rank holds rank 0's previous ones updated by its own
    batch (not its own history)."""
    xs = [[_data(50 + 2 * r + k, 4, 2) for k in range(2)] for r in range(2)]

    def script(rank):
        rg.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).double())
        start = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        optimizer = rg.optim.SGD(model.parameters(), lr=0.1)
        for k in range(2):
            optimizer.step(model(rg.tensor(xs[rank][k])).square().mean().backward())
        return start, {k: v.numpy().copy() for k, v in model.module.state_dict().items()}

    (start, _), *_ = results = run_ranks(2, script)
    replicas = []
    for _ in range(2):
        replica = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3)).double()
        replica.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
        replicas.append(replica)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in replicas]
    for k in range(2):
        for name, buffer in replicas[0].named_buffers():  # DDP's broadcast before forward
            dict(replicas[1].named_buffers())[name].copy_(buffer)
        losses = [replicas[r](torch.tensor(xs[r][k])).square().mean() for r in range(2)]
        (sum(losses) / 2).backward()
        for mine, other in zip(replicas[0].parameters(), replicas[1].parameters()):
            mine.grad = other.grad = mine.grad + other.grad  # the all-reduced average
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    for (_, after), replica in zip(results, replicas):
        for key, value in replica.state_dict().items():
            np.testing.assert_allclose(
                after[key], value.numpy(), rtol=1e-10, atol=1e-12, err_msg=key
            )


# -- uneven inputs: join() -------------------------------------------------------------------------


@pytest.mark.parametrize("joined", ["method", "Join"])
def test_join_with_uneven_inputs_averages_over_every_rank_as_torchs(joined):
    """Rank 0 has three batches, rank 1 one: under ``join()`` the finished rank shadows the
    others' all-reduces with zeros (gradients divided by the initial world size, torch's
    default), and every rank ends with the same parameters."""
    batches = [[_data(60 + k, 2, 3) for k in range(3)], [_data(70, 2, 3)]]

    def script(rank):
        rg.manual_seed(0)
        model = DDP(nn.Linear(3, 2).double())
        start = {k: v.numpy().copy() for k, v in model.module.state_dict().items()}
        optimizer = rg.optim.SGD(model.parameters(), lr=0.1)
        with model.join() if joined == "method" else Join([model]):
            for batch in batches[rank]:
                optimizer.step(model(rg.tensor(batch)).square().sum().backward())
        return start, {k: v.numpy().copy() for k, v in model.module.state_dict().items()}

    (start, after0), (_, after1) = run_ranks(2, script)
    reference = torch.nn.Linear(3, 2).double()
    reference.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for k in range(3):
        optimizer.zero_grad()
        active = [b[k] for b in batches if k < len(b)]
        (sum(reference(torch.tensor(x)).square().sum() for x in active) / 2).backward()
        optimizer.step()
    for key, value in reference.state_dict().items():
        np.testing.assert_allclose(after0[key], value.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(after0[key], after1[key])


def test_join_throw_on_early_termination_raises_on_every_rank():
    def script(rank):
        model = DDP(nn.Linear(2, 1))
        with (
            pytest.raises(DistributedError, match="exhausted its inputs"),
            model.join(throw_on_early_termination=True),
        ):
            for _ in range(3 if rank == 0 else 1):
                model(rg.ones((1, 2))).sum().backward()
        with model.join(throw_on_early_termination=True):  # even inputs: no error
            for _ in range(2):
                model(rg.ones((1, 2))).sum().backward()
        return True

    assert run_ranks(2, script) == [True, True]
