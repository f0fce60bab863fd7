"""The :class:`Distribution` base: shapes and the sampling entry points."""

from __future__ import annotations

from typing import Any

__all__ = ["Distribution"]


class Distribution:
    """A batch of distributions of ``batch_shape``, each over events of ``event_shape``."""

    has_rsample = False

    def __init__(self, batch_shape: tuple[int, ...] = (), event_shape: tuple[int, ...] = (),
                 validate_args: Any = None) -> None:  # fmt: skip
        self.batch_shape = tuple(batch_shape)
        self.event_shape = tuple(event_shape)

    def _extended_shape(self, sample_shape: Any = ()) -> tuple[int, ...]:
        return tuple(sample_shape) + self.batch_shape + self.event_shape

    def sample(self, sample_shape: Any = ()) -> Any:
        raise NotImplementedError

    def rsample(self, sample_shape: Any = ()) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no reparameterized sample")

    def log_prob(self, value: Any) -> Any:
        raise NotImplementedError

    def entropy(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_shape={list(self.batch_shape)})"
