"""Distributed data parallel: gradient sync during backward and differentiable collectives.

>>> from retrograd import distributed as dist
>>> config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=60.0)

Each device's thread (engine ``"local"``), each ``mpiexec`` rank (engine ``"mpi"``) or each
``torchrun`` rank (engine ``"torch"``: gloo, NCCL) marks
its copy of a parameter with ``w.set_distributed(param_id)``; inside a running
:class:`DistributedContext`, ``loss.backward()`` all-reduces those gradients while the rest of
backward runs and returns them reduced. See ``docs/distributed.md``.

The package follows PyTorch's split: ``transport/`` moves buffers between the members
(PyTorch's ``ProcessGroup``), ``membership`` tracks the members of a job across processes,
``reducer/`` syncs gradients during backward (PyTorch's ``Reducer`` and its comm hooks).
Modules import one way, each only from those above it (none imports the package itself)::

    config, cache, buffers, pending    settings, bounded caches, buffers, handles in flight
    cost                               the α–β cost model of a step (pure)
    launch                             mpiexec, torchrun (imports nothing of the package)
    membership                         heartbeats, member status, registration exchanges,
                                       the broken state, exit (processes, one rank each)
    transport/                         local, mpi, torch.distributed, shared memory
    calls                              a user collective's call, header and agreement (pure)
    registry                           running contexts by device; the hook's install
    collective                         the differentiable collectives, CollectiveTensor
    reducer/                           buckets, registrations, rounds, comm hooks, the fast
                                       path, the sync server, the backward hook
    context                            DistributedContext, ENGINES
    process_group                      torch's c10d functions over a default context;
                                       the collectives in retrograd's and torch's forms
    zero                               ZeroRedundancyOptimizer (optimizer state sharded)
    algorithms/                        torch's Join (uneven inputs), over a model's join()
    optim/                             torch's import path of ZeroRedundancyOptimizer
"""

from ..autodiff.params import ParamId
from ..errors import DistributedError
from .collective import CollectiveTensor
from .config import DistributedConfig, ReduceOperation
from .context import ENGINES, DistributedContext
from .process_group import (
    ReduceOp,
    Work,
    all_gather,
    all_gather_into_tensor,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_object_list,
    destroy_process_group,
    gather,
    gather_object,
    get_backend,
    get_default_backend_for_device,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    is_available,
    is_initialized,
    new_group,
    reduce,
    reduce_scatter,
    scatter,
    scatter_object_list,
)
from .zero import ZeroRedundancyOptimizer, assign_owners, optimizer_state_bytes

__all__ = [
    "ENGINES",
    "CollectiveTensor",
    "DistributedConfig",
    "DistributedContext",
    "DistributedError",
    "ParamId",
    "ReduceOp",
    "ReduceOperation",
    "Work",
    "ZeroRedundancyOptimizer",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "assign_owners",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "destroy_process_group",
    "gather",
    "gather_object",
    "get_backend",
    "get_default_backend_for_device",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "is_available",
    "is_initialized",
    "new_group",
    "optimizer_state_bytes",
    "reduce",
    "reduce_scatter",
    "scatter",
    "scatter_object_list",
]
