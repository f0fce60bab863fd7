"""torch's ``torch.distributed.fsdp``: its option types, which mean the same in one process
(``ShardingStrategy``, ``MixedPrecision``, ``CPUOffload``, ``StateDictType``... with torch's
values and fields), so that configuration code imports and builds them; the wrappers
themselves (``FullyShardedDataParallel``, ``fully_shard``) are refused by name, pointing at
retrograd's data parallel (every rank holds the whole model; ``ZeroRedundancyOptimizer``
shards the optimizer state)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from .._refusals import refusing_class, refusing_function

__all__ = [
    "BackwardPrefetch",
    "CPUOffload",
    "CPUOffloadPolicy",
    "FSDPModule",
    "FullOptimStateDictConfig",
    "FullStateDictConfig",
    "FullyShardedDataParallel",
    "LocalStateDictConfig",
    "MixedPrecision",
    "MixedPrecisionPolicy",
    "OffloadPolicy",
    "ShardedStateDictConfig",
    "ShardingStrategy",
    "StateDictType",
    "fully_shard",
]


class ShardingStrategy(enum.Enum):
    FULL_SHARD = 1
    SHARD_GRAD_OP = 2
    NO_SHARD = 3
    HYBRID_SHARD = 4
    _HYBRID_SHARD_ZERO2 = 5


class BackwardPrefetch(enum.Enum):
    BACKWARD_PRE = 1
    BACKWARD_POST = 2


class StateDictType(enum.Enum):
    FULL_STATE_DICT = 1
    LOCAL_STATE_DICT = 2
    SHARDED_STATE_DICT = 3


@dataclass
class MixedPrecision:
    param_dtype: Any = None
    reduce_dtype: Any = None
    buffer_dtype: Any = None
    keep_low_precision_grads: bool = False
    cast_forward_inputs: bool = False
    cast_root_forward_inputs: bool = True
    _module_classes_to_ignore: Any = ()


@dataclass
class CPUOffload:
    offload_params: bool = False


@dataclass
class StateDictConfig:
    offload_to_cpu: bool = False


@dataclass
class FullStateDictConfig(StateDictConfig):
    rank0_only: bool = False


@dataclass
class LocalStateDictConfig(StateDictConfig):
    pass


@dataclass
class ShardedStateDictConfig(StateDictConfig):
    _use_dtensor: bool = False


@dataclass
class OptimStateDictConfig:
    offload_to_cpu: bool = True


@dataclass
class FullOptimStateDictConfig(OptimStateDictConfig):
    rank0_only: bool = False


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    param_dtype: Any = None
    reduce_dtype: Any = None
    output_dtype: Any = None
    cast_forward_inputs: bool = True


@dataclass
class OffloadPolicy:
    pass


@dataclass
class CPUOffloadPolicy(OffloadPolicy):
    pin_memory: bool = True


FullyShardedDataParallel = refusing_class("distributed.fsdp.FullyShardedDataParallel")
FSDPModule = refusing_class("distributed.fsdp.FSDPModule")
fully_shard = refusing_function("distributed.fsdp.fully_shard")
