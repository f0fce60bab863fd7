"""torch's ``torch.autograd.profiler``: the same recorder as :mod:`retrograd.profiler`
(``profile(enabled=True, record_shapes=False, ...)``, ``record_function``)."""

from ..profiler import EventList, FunctionEvent, profile, record_function

__all__ = ["EventList", "FunctionEvent", "profile", "record_function"]
