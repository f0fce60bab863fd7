"""torch's ``torch.utils.benchmark.op_fuzzers``: ready-made fuzzers for common benchmarks."""

from . import binary

__all__ = ["binary"]
