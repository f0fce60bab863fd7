"""retrograd's einops backend: einops' operations on :class:`retrograd.Tensor`, through the
tensor API (so on either inner backend, with gradients).

Running this module defines :class:`RetrogradBackend`, a subclass of einops' ``AbstractBackend``,
which is all einops needs to find it (``einops._backends.get_backend`` walks the subclasses
whose ``framework_name`` is imported). :mod:`retrograd.einops` runs it when einops is imported.
Each method is what einops' torch backend does, in retrograd's names (torch's).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from einops._backends import AbstractBackend

from ..tensor import Tensor, arange, cat, from_numpy, stack
from ..tensor.functions import einsum


class RetrogradBackend(AbstractBackend):
    """einops' backend for retrograd tensors (``framework_name`` ``"retrograd"``)."""

    framework_name = "retrograd"

    def is_appropriate_type(self, tensor: Any) -> bool:
        return isinstance(tensor, Tensor)

    def from_numpy(self, x: np.ndarray) -> Tensor:
        variable = from_numpy(x)
        if self.is_float_type(variable):
            # as einops' torch backend: its tests differentiate what they made from NumPy
            variable.requires_grad_(True)
        return variable

    def to_numpy(self, x: Tensor) -> np.ndarray:
        return x.detach().cpu().numpy()

    def arange(self, start: int, stop: int) -> Tensor:
        return arange(start, stop)

    def shape(self, x: Tensor) -> tuple[int, ...]:
        return tuple(x.shape)

    def reshape(self, x: Tensor, shape: Sequence[int]) -> Tensor:
        return x.reshape(tuple(shape))

    def transpose(self, x: Tensor, axes: Sequence[int]) -> Tensor:
        return x.permute(tuple(axes))

    def reduce(self, x: Tensor, operation: str, reduced_axes: Sequence[int]) -> Tensor:
        dims = tuple(reduced_axes)
        if operation == "min":
            return x.amin(dim=dims)
        if operation == "max":
            return x.amax(dim=dims)
        if operation == "sum":
            return x.sum(dim=dims)
        if operation == "mean":
            return x.mean(dim=dims)
        if operation in ("any", "all", "prod"):
            # torch's forms reduce one dimension a call: the last first, so the others keep
            # their positions
            for dim in sorted(dims, reverse=True):
                x = getattr(x, operation)(dim=dim)
            return x
        raise NotImplementedError(f"Unknown reduction {operation}")

    def stack_on_zeroth_dimension(self, tensors: list) -> Tensor:
        return stack(tensors)

    def add_axis(self, x: Tensor, new_position: int) -> Tensor:
        return x.unsqueeze(new_position)

    def add_axes(self, x: Tensor, n_axes: int, pos2len: dict[int, int]) -> Tensor:
        sizes = [-1] * n_axes
        for position, length in pos2len.items():
            x = x.unsqueeze(position)
            sizes[position] = length
        return x.expand(sizes)  # (one sequence, as einops' torch backend: never expand())

    def tile(self, x: Tensor, repeats: Sequence[int]) -> Tensor:
        return x.repeat(tuple(repeats))

    def concat(self, tensors: list, axis: int) -> Tensor:
        return cat(tensors, dim=axis)

    def is_float_type(self, x: Tensor) -> bool:
        return bool(x.is_floating_point())

    def layers(self) -> ModuleType:
        from . import layers

        return layers

    def einsum(self, pattern: str, *x: Tensor) -> Tensor:
        return einsum(pattern, *x)
