"""Transports: how the members of a distributed context move buffers between them (PyTorch's
``ProcessGroup``). A transport knows nothing of gradients, buckets or backward steps.

Modules import one way, each only from those above it::

    base          Transport, Capabilities, Polled: the interface every transport implements
    pacing        Pacer: how often the sync server polls a transport (one schedule for all)
    shm           SharedReduce: a sum-all-reduce through /dev/shm, for ranks of one machine
                  that outnumber its cores (used by ``mpi`` for gradient buckets)
    local         LocalTransport: members are threads of one process (rendezvous by key)
    ranks         RankTransport: what the transports of one process per rank share (their
                  Membership, the collectives in flight, the checks a collective starts with)
    mpi           MpiTransport (mpi4py) and MpiChannel (its membership's messages)
    torch_distributed
                  TorchTransport (torch.distributed: gloo, NCCL) and StoreChannel (through the
                  launcher's key-value store)

Adding a transport (say, one over NCCL without torch):

1. Subclass :class:`~.base.Transport` (threads of one process) or :class:`~.ranks.RankTransport`
   (one process per rank). A ``RankTransport`` implements ``_start_all_reduce`` and
   ``_start_all_gather`` (start the library's non-blocking collective on buffers; return a
   handle and the result arrays the library fills), ``_complete(handle)``, ``_failure`` (an
   error of the library as a fault's reason) and ``close``; it gives its
   :class:`~retrograd.distributed.membership.Membership` a
   :class:`~retrograd.distributed.membership.Channel` (heartbeats and registrations, point to
   point) with ``membership.connect(channel)``.
2. Declare what it can do in one frozen :class:`~.base.Capabilities` value (``ordered``,
   ``recoverable``, ``agrees_once``, ``overlap_pays``, ``in_place``, ``spins``), on the class or,
   where it depends on the machine, made once at start-up.
3. Name it in ``DistributedContext`` (``context.py``: ``ENGINES`` and ``from_launcher``).

The sync server (``reducer/``) reaches a transport only through its collectives, its
``progress``, its capabilities and what it knows of its members (``missing``, ``behind``,
``member_status``), so nothing else changes.
"""
