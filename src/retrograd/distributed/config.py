"""What a distributed context is configured with: the reduction, the timeout, the buckets."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from ..errors import DTypeError, InvalidArgumentError

__all__ = ["DistributedConfig", "ReduceOperation"]

MIB = 1 << 20
#: a bucket size no model reaches: every gradient of a dtype in one bucket
_ONE_BUCKET = 1 << 62


class ReduceOperation(enum.Enum):
    """How values from every device are combined: their sum or their mean."""

    SUM = "sum"
    MEAN = "mean"

    def __repr__(self) -> str:
        return f"ReduceOperation.{self.name}"


@dataclass(frozen=True)
class DistributedConfig:
    """Settings of a :class:`~retrograd.distributed.DistributedContext`.

    - ``all_reduce_op``: how distributed parameters' gradients are combined (``MEAN`` averages
      them, as data-parallel training wants; ``SUM`` adds them).
    - ``timeout``: seconds a device waits for its peers before giving up with
      :class:`~retrograd.DistributedError` (a peer that died, never arrived, or disagreed).
    - ``bucket_bytes``: gradients are fused into buckets of about this size, in the order they
      become final, and each bucket is all-reduced as one (25 MiB, PyTorch DDP's default);
      ``0`` all-reduces every parameter on its own.
    - ``first_bucket_bytes``: the cap of the first bucket (1 MiB, as DDP), so communication
      starts early in backward instead of waiting for 25 MiB of gradients.
    - ``last_bucket_bytes``: a bucket cannot launch before its last gradient is final, so
      whatever shares a bucket with the first layer's gradient (final last) is all-reduced
      after backward, with nothing left to hide it behind. If that bucket is more than
      twice this size (1 MiB; DDP has no such setting), its last gradients, about this many
      bytes, get a bucket of their own. ``0`` turns it off.
    - ``overlap``: whether gradients are all-reduced during backward (``True``) or all at once
      in one collective after it (``False``), which costs less when no core is free to move
      the data while backward computes. ``None`` (the default) lets the engine decide at
      start-up: the ``mpi`` engine falls back to one collective unless every machine has a
      core to spare beside its ranks and the other jobs' processes running at start-up
      (``transport/mpi.py``).

    >>> DistributedConfig(all_reduce_op=ReduceOperation.SUM, timeout=5.0).bucket_bytes
    26214400
    """

    all_reduce_op: ReduceOperation = ReduceOperation.MEAN
    timeout: float = 60.0
    bucket_bytes: int = 25 * MIB
    first_bucket_bytes: int = 1 * MIB
    last_bucket_bytes: int = 1 * MIB
    overlap: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.all_reduce_op, ReduceOperation):
            raise DTypeError(
                f"DistributedConfig: all_reduce_op must be a ReduceOperation, "
                f"got {self.all_reduce_op!r}"
            )
        if not (isinstance(self.timeout, int | float) and math.isfinite(self.timeout)) or (
            self.timeout <= 0
        ):
            raise InvalidArgumentError(
                f"DistributedConfig: timeout must be a positive number of seconds, "
                f"got {self.timeout!r}"
            )
        for name in ("bucket_bytes", "first_bucket_bytes", "last_bucket_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgumentError(
                    f"DistributedConfig: {name} must be a non-negative int, got {value!r}"
                )

        if self.overlap not in (None, True, False):
            raise InvalidArgumentError(
                f"DistributedConfig: overlap must be True, False or None, got {self.overlap!r}"
            )

    def without_overlap(self) -> DistributedConfig:
        """These settings with every gradient in one bucket, reduced after backward.

        >>> DistributedConfig().without_overlap().last_bucket_bytes
        0
        """
        return replace(
            self, overlap=False, bucket_bytes=_ONE_BUCKET, first_bucket_bytes=0, last_bucket_bytes=0
        )

    @property
    def heartbeat_interval(self) -> float:
        """How often a process tells its peers it is alive (engines across processes)."""
        return min(1.0, max(0.05, self.timeout / 6))
