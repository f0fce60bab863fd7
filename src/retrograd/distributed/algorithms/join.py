"""torch's ``Join`` (``torch.distributed.algorithms.join``): training with a different number
of batches on each rank. ``with Join([ddp_model]): ...`` is ``with ddp_model.join(): ...``:
a rank whose inputs ran out shadows the others' collectives until every rank is out (see
``DistributedDataParallel.join``). A joinable is anything with that ``join`` method; torch's
other joinable, ``ZeroRedundancyOptimizer``, is refused here, saying so."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from ...errors import InvalidArgumentError

__all__ = ["Join"]


class Join:
    """torch's ``Join(joinables, enable=True, throw_on_early_termination=False, **kwargs)``;
    ``kwargs`` go to each joinable's ``join`` (``divide_by_initial_world_size``)."""

    def __init__(self, joinables: Any, enable: bool = True,
                 throw_on_early_termination: bool = False, **kwargs: Any) -> None:  # fmt: skip
        joinables = list(joinables)
        if not joinables:
            raise InvalidArgumentError("Join: the list of joinables must not be empty")
        for joinable in joinables:
            if not callable(getattr(joinable, "join", None)):
                raise InvalidArgumentError(
                    f"Join: {type(joinable).__name__} is not joinable here; only "
                    "DistributedDataParallel models shadow their collectives for joined ranks"
                )
        self._joinables = joinables
        self._settings = dict(kwargs, enable=enable,
                              throw_on_early_termination=throw_on_early_termination)  # fmt: skip
        self._stack: ExitStack | None = None

    def __enter__(self) -> Join:
        stack = ExitStack()
        for joinable in self._joinables:
            stack.enter_context(joinable.join(**self._settings))
        self._stack = stack
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        stack, self._stack = self._stack, None
        return stack.__exit__(*exc) if stack is not None else None
