"""torch's ``torch.distributed.optim``: ``ZeroRedundancyOptimizer`` where torch scripts import
it from (it lives in :mod:`retrograd.distributed.zero`)."""

from ..zero import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
