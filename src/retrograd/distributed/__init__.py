"""Distributed data parallel: gradient sync during backward and a differentiable all-reduce.

>>> from retrograd import distributed as dist
>>> config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=60.0)

Each device's thread (engine ``"local"``) or each ``mpiexec`` rank (engine ``"mpi"``) marks
its copy of a parameter with ``w.set_distributed(param_id)``; inside a running
:class:`DistributedContext`, ``loss.backward()`` all-reduces those gradients while the rest of
backward runs and returns them reduced. See ``docs/distributed.md``.
"""

from ..errors import DistributedError
from .collective import CollectiveTensor, all_reduce
from .config import DistributedConfig, ReduceOperation
from .context import DistributedContext
from .params import ParamId

__all__ = [
    "CollectiveTensor",
    "DistributedConfig",
    "DistributedContext",
    "DistributedError",
    "ParamId",
    "ReduceOperation",
    "all_reduce",
]
