"""Distributed data parallel: gradient sync during backward and a differentiable all-reduce.

>>> from retrograd import distributed as dist
>>> config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=60.0)

Each device's thread (engine ``"local"``), each ``mpiexec`` rank (engine ``"mpi"``) or each
``torchrun`` rank (engine ``"torch"``: gloo, NCCL) marks
its copy of a parameter with ``w.set_distributed(param_id)``; inside a running
:class:`DistributedContext`, ``loss.backward()`` all-reduces those gradients while the rest of
backward runs and returns them reduced. See ``docs/distributed.md``.

Modules import one way, each only from those above it (none imports the package itself)::

    config, cache, buffers             settings, bounded caches, buffers (ParamId: autodiff)
    cost                               the α–β cost model of a step (pure; imports none of these)
    shm                                an all-reduce through shared memory (imports none of these)
    engine                             the collective interface, Pending; member states
    buckets                            bucket plans (pure)
    registration                       the registration format, the members' agreement (pure)
    rounds                             ParamSlot, DeviceStep (+ the server's StepSync), Round
    diagnosis                          what a timeout says
    server                             SyncServer: rounds and its thread
    registry                           running contexts by device; the hook's install
    collective                         the differentiable all_reduce, CollectiveTensor
    sync                               the backward hook (GradientSyncHook, BackwardSync)
    local, mpi, torch_engine           the engines
    context                            DistributedContext, ENGINES
    launch                             mpiexec, torchrun (imports nothing of the package)
"""

from ..autodiff.params import ParamId
from ..errors import DistributedError
from .collective import CollectiveTensor, all_reduce
from .config import DistributedConfig, ReduceOperation
from .context import ENGINES, DistributedContext

__all__ = [
    "ENGINES",
    "CollectiveTensor",
    "DistributedConfig",
    "DistributedContext",
    "DistributedError",
    "ParamId",
    "ReduceOperation",
    "all_reduce",
]
