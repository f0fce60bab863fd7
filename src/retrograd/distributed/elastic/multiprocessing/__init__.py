"""torch's ``torch.distributed.elastic.multiprocessing``: :mod:`.errors` (a worker's error
written where ``torchrun`` reads it). Starting worker processes is ``torchrun``'s (or
``mpiexec``'s) part, not retrograd's."""

from . import errors

__all__ = ["errors"]
