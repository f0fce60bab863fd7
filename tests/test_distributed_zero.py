"""``ZeroRedundancyOptimizer`` with the ``local`` engine (2 and 3 devices as threads): the
checks of ``tests/zero_cases.py`` (training equal to the wrapped optimizer on the full batch,
state per rank, consolidation, resuming), which the MPI scripts run across processes too;
plus resuming on another number of ranks and the owners' policy.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from distributed_cases import Checks
from retrograd import distributed as dist
from test_distributed_local import devices_of, on_devices, values
from zero_cases import (
    OPTIMIZERS,
    batch,
    groups,
    make_model,
    resume_in_one_process_check,
    train,
    zero_training_checks,
)

MEAN = dist.ReduceOperation.MEAN


def on_context(n, work):
    devices = devices_of(n)
    with dist.DistributedContext(devices, dist.DistributedConfig(MEAN, timeout=30.0)):
        return values(on_devices(devices, lambda rank, device: work(devices, rank), join=120.0))


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_zero_trains_as_the_wrapped_optimizer_on_the_full_batch(name, n):
    def work(devices, rank):
        checks = Checks()
        outcome = zero_training_checks(devices, rank, checks, name)
        return checks, outcome

    results = on_context(n, work)
    for rank, (checks, _) in enumerate(results):
        assert checks.failures == [], f"rank {rank}: {checks.failures}"
    counts = {checks.count for checks, _ in results}
    assert len(counts) == 1 and counts.pop() > 20  # (SGD's state: its buffer, no step count)
    # every rank's share adds up to the whole state
    assert sum(o["state_bytes"] for _, o in results) == results[0][1]["total_bytes"]
    checks = Checks()
    resume_in_one_process_check(results[0][1]["full"], name, checks, rg.Device("cpu", 0), n)
    assert checks.failures == [] and checks.count > 5


def test_a_state_consolidated_on_two_ranks_resumes_on_three():
    name = "AdamW"
    cls, defaults = OPTIMIZERS[name]

    def first(devices, rank):
        xs, ys = batch(3)
        model = make_model(devices[rank]).set_distributed()
        opt = dist.ZeroRedundancyOptimizer(groups(model), cls, **defaults)
        train(
            model, opt, xs[rank * 6 : rank * 6 + 6], ys[rank * 6 : rank * 6 + 6], devices[rank], 3
        )
        opt.consolidate_state_dict(to=0)
        return opt.state_dict(), dict(model.state_dict())

    saved, weights = on_context(2, first)[0]

    def second(devices, rank):
        xs, ys = batch(3)
        model = make_model(devices[rank])
        model.load_state_dict(weights)
        model.set_distributed()
        opt = dist.ZeroRedundancyOptimizer(groups(model), cls, **defaults)
        opt.load_state_dict(saved)
        train(
            model,
            opt,
            xs[rank * 4 : (rank + 1) * 4],
            ys[rank * 4 : (rank + 1) * 4],
            devices[rank],
            3,
            first=3,
        )
        return {k: p.numpy() for k, p in model.named_parameters()}

    # 12 rows: 6 per rank on two ranks, then 4 per rank on three
    resumed = on_context(3, second)
    reference = make_model(rg.Device("cpu", 0))
    plain = cls(groups(reference), **defaults)
    xs, ys = batch(3)
    train(reference, plain, xs, ys, rg.Device("cpu", 0), 6)
    for rank in range(3):
        for key, p in reference.named_parameters():
            np.testing.assert_allclose(resumed[rank][key], p.numpy(), rtol=1e-7, atol=1e-10)


def test_owners_balance_bytes_and_keep_a_tied_parameter_whole():
    model = make_model(rg.Device("cpu", 0))
    params = list(model.parameters())
    assert len(params) == 7  # the tied weight is listed once
    sizes = [p.numel() * 8 for p in params]
    for n in (1, 2, 3, 4, 8):
        owners = dist.assign_owners(sizes, n)
        loads = [sum(s for s, o in zip(sizes, owners) if o == r) for r in range(n)]
        assert max(loads) <= sum(sizes) / n + max(sizes)


def test_zero_needs_a_running_context_and_one_device():
    model = make_model(rg.Device("cpu", 0))
    with pytest.raises(rg.DistributedError, match="no running DistributedContext"):
        dist.ZeroRedundancyOptimizer(model, rg.optim.SGD, lr=0.1)
