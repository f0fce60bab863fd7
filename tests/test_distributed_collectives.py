"""The differentiable collectives (``all_gather``, ``reduce_scatter``, ``broadcast``,
``all_reduce``) with the ``local`` engine, 2 and 3 devices as threads of this process: the
checks of ``tests/collective_cases.py`` (forward values and gradients computed by hand,
composition, errors), which the MPI and torchrun scripts run across processes too; plus what
only threads can show cheaply (a device that never joins, the headers' verdicts).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import retrograd as rg
from collective_cases import composition_checks, error_checks, forward_and_gradient_checks
from distributed_cases import Checks
from retrograd import distributed as dist
from retrograd.distributed.calls import Call, check_headers, header
from test_distributed_local import devices_of, on_devices, values

TIMEOUT = 20.0


def run_checks(n, cases, config=None):
    devices = devices_of(n)
    config = config or dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=TIMEOUT)

    def work(rank, device):
        checks = Checks()
        cases(devices, rank, checks)
        return checks

    with dist.DistributedContext(devices, config):
        tallies = values(on_devices(devices, work, join=60.0))
    for rank, checks in enumerate(tallies):
        assert checks.failures == [], f"rank {rank}: {checks.failures}"
    return [checks.count for checks in tallies]


@pytest.mark.parametrize("n", [2, 3])
def test_forward_values_and_gradients_equal_the_duals_by_hand(n):
    counts = run_checks(n, forward_and_gradient_checks)
    # all_gather 3 dims x 2; reduce_scatter 2 ops x (2 dims at n=2, 1 at n=3) x 2;
    # broadcast n sources x 2; all_reduce 2 ops x 2
    assert counts == [6 + (8 if n == 2 else 4) + 2 * n + 4] * n


@pytest.mark.parametrize("n", [2, 3])
def test_composition_second_order_and_a_collective_inside_a_synced_model(n):
    assert run_checks(n, composition_checks) == [5] * n


@pytest.mark.parametrize("n", [2, 3])
def test_bad_calls_fail_every_device_at_once_and_the_context_keeps_working(n):
    counts = run_checks(n, lambda devices, rank, checks: error_checks(devices, rank, checks, 5.0))
    assert counts == [10] * n


def test_a_device_that_never_joins_a_gather_fails_the_others_within_the_timeout():
    devices = devices_of(3)
    timeout = 1.5

    def work(rank, device):
        if rank == 1:
            return None
        started = time.monotonic()
        try:
            dist.all_gather(rg.tensor([1.0], device=device), devices).resolve()
        except rg.DistributedError as error:
            return str(error), time.monotonic() - started
        return "no error", 0.0

    with dist.DistributedContext(devices, dist.DistributedConfig(timeout=timeout)):
        results = values(on_devices(devices, work))
    for rank in (0, 2):
        message, elapsed = results[rank]
        assert "cpu:1 never joined it" in message and "all_gather" in message, message
        assert elapsed < timeout + 1.0


def test_collectives_run_on_non_autodiff_tensors_and_a_subgroup():
    devices = devices_of(3)
    pair = devices[:2]

    def work(rank, device):
        backend = rg.NumpyBackend()
        x = rg.tensor(np.full((2,), float(rank)), backend=backend, device=device)
        if rank == 2:
            return None
        gathered = dist.all_gather(x, pair).resolve()
        assert not gathered.backend.is_autodiff
        return gathered.numpy()

    with dist.DistributedContext(devices, dist.DistributedConfig(timeout=TIMEOUT)):
        results = values(on_devices(devices, work))
    np.testing.assert_array_equal(results[0], [0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(results[1], results[0])


def test_devices_in_another_order_gather_in_that_order_and_must_agree():
    devices = devices_of(2)
    reverse = devices[::-1]

    def work(rank, device):
        x = rg.tensor([float(rank)], device=device)
        gathered = dist.all_gather(x, reverse).resolve().numpy()
        slice_ = dist.reduce_scatter(
            rg.tensor([1.0, 2.0], device=device), dist.ReduceOperation.SUM, reverse
        ).resolve()
        try:
            dist.all_gather(x, devices if rank == 0 else reverse).resolve()
        except rg.DistributedError as error:
            return gathered, slice_.numpy(), str(error)
        return gathered, slice_.numpy(), None

    with dist.DistributedContext(devices, dist.DistributedConfig(timeout=TIMEOUT)):
        results = values(on_devices(devices, work))
    for rank, (gathered, slice_, error) in enumerate(results):
        np.testing.assert_array_equal(gathered, [1.0, 0.0])
        # device 1 is first in ``reverse``: it keeps slice 0
        np.testing.assert_array_equal(slice_, [2.0] if rank == 1 else [4.0])
        assert error is not None and "different collectives" in error


def test_the_verdict_on_headers_names_every_member():
    d = tuple(devices_of(2))
    call = Call("reduce_scatter", dist.ReduceOperation.SUM, d, dim=0)
    rows = np.stack(
        [
            header(call, (0, 1), "float32", (4, 2), False),
            header(call, (0, 1), "float64", (4, 2), False),
        ]
    )
    message = check_headers(call, rows, ["rank 0", "rank 1"])
    assert message == (
        "reduce_scatter (SUM, dim=0) over cpu, cpu:1: the tensors differ in dtype "
        "(rank 0: float32, rank 1: float64)"
    )
    deep = (1,) * 9 + (5,)
    same = header(call, (0, 1), "float32", deep, False)
    other = header(call, (0, 1), "float32", (1,) * 9 + (6,), False)
    assert "differ in shape" in check_headers(call, np.stack([same, other]), ["a", "b"])
