"""Bad input to ``retrograd.distributed`` raises the library's error classes: each a
``RetrogradError`` and also the built-in exception a Python user would catch for it."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import distributed as dist
from retrograd.distributed import cost, launch

SUM = dist.ReduceOperation.SUM


def devices_of(n: int) -> list[rg.Device]:
    return [rg.Device("cpu", i) for i in range(n)]


def raised(call) -> BaseException:
    with pytest.raises(rg.RetrogradError) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    "call",
    [
        lambda: dist.DistributedConfig(all_reduce_op="sum"),
        lambda: dist.DistributedConfig(all_reduce_op=None),
        lambda: dist.DistributedContext(devices_of(2), config={"timeout": 5.0}),
        lambda: dist.all_reduce(rg.tensor([1.0]), "sum", devices_of(1)),
        lambda: dist.all_reduce(np.ones(2), SUM, devices_of(1)),
        lambda: dist.ParamId(1.5),
        lambda: dist.ParamId(-1),
        lambda: dist.ParamId(True),
    ],
    ids=[
        "op-str",
        "op-none",
        "config-dict",
        "all_reduce-op",
        "all_reduce-array",
        "param-float",
        "param-negative",
        "param-bool",
    ],
)
def test_a_wrong_type_is_a_dtype_error(call):
    error = raised(call)
    assert isinstance(error, rg.DTypeError)
    assert isinstance(error, TypeError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: dist.DistributedConfig(timeout=0),
        lambda: dist.DistributedConfig(timeout=float("nan")),
        lambda: dist.DistributedConfig(bucket_bytes=-1),
        lambda: dist.DistributedConfig(first_bucket_bytes=1.5),
        lambda: dist.DistributedConfig(overlap="auto"),
        lambda: cost.predict_step(0, 0.01, 1e6, alpha=1e-6, beta=1e-9),
        lambda: cost.all_reduce_seconds(1e6, 8, alpha=1e-6, beta=1e-9, algorithm="star"),
        lambda: dist.DistributedContext(devices_of(2), engine="nccl"),
        lambda: dist.DistributedContext.from_launcher(engine="local"),
        lambda: launch.mpiexec_command(0, ["train.py"], mpiexec="mpiexec"),
        lambda: launch.mpiexec_command(2, ["train.py"], mpiexec="mpiexec", rank_env=[{}]),
    ],
    ids=[
        "timeout-zero",
        "timeout-nan",
        "bucket-negative",
        "first-bucket-float",
        "overlap-not-bool",
        "cost-no-ranks",
        "cost-algorithm",
        "engine-unknown",
        "launcher-engine",
        "ranks-zero",
        "rank-env-count",
    ],
)
def test_a_bad_value_is_an_invalid_argument_error(call):
    error = raised(call)
    assert isinstance(error, rg.InvalidArgumentError)
    assert isinstance(error, ValueError)


def test_the_messages_name_the_argument():
    assert "all_reduce_op must be a ReduceOperation" in str(
        raised(lambda: dist.DistributedConfig(all_reduce_op="mean"))
    )
    assert "op must be a ReduceOperation" in str(
        raised(lambda: dist.all_reduce(rg.tensor([1.0]), "sum", devices_of(1)))
    )
    assert "engine must be one of ('local', 'mpi', 'torch')" in str(
        raised(lambda: dist.DistributedContext(devices_of(1), engine="gloo"))
    )


def test_misuse_of_a_context_is_a_distributed_error():
    devices = devices_of(2)
    for call in (
        lambda: dist.DistributedContext([]),
        lambda: dist.DistributedContext([devices[0], devices[0]]),
        lambda: dist.DistributedContext(devices, engine="mpi"),
        lambda: dist.DistributedContext(devices, engine="torch"),
        lambda: dist.all_reduce(rg.tensor([1.0], device=devices[0]), SUM, devices),
    ):
        error = raised(call)
        assert isinstance(error, rg.DistributedError)
        assert isinstance(error, RuntimeError)
    context = dist.DistributedContext(devices, dist.DistributedConfig(timeout=5.0))
    context.start()
    context.close()
    with pytest.raises(rg.DistributedError, match="cannot start a closed context"):
        context.start()


def test_the_engine_names_are_defined_once():
    from retrograd.app import trainer
    from retrograd.distributed import context

    assert dist.ENGINES == ("local", "mpi", "torch")
    assert trainer.ENGINES is context.ENGINES is dist.ENGINES
