"""einops' layers as ``rg.nn`` modules: ``Rearrange``, ``Reduce`` and ``EinMix``, what
``einops.layers.torch`` gives torch (also importable as ``einops.layers.retrograd``).

Each is einops' own mixin (its pattern parsing, checks, errors, ``repr`` and pickling) over
:class:`retrograd.nn.Module`; the forward is einops' ``_apply_recipe`` through
:class:`retrograd.einops.backend.RetrogradBackend`, so the layers take any retrograd tensor and
differentiate through it. ``EinMix``'s ``weight``/``bias`` are parameters drawn as torch's
(uniform in ``±bound``, from ``rg.seed``'s stream) under torch's names.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from einops.layers import RearrangeMixin, ReduceMixin
from einops.layers._einmix import _EinmixMixin

from ..nn import Module, Parameter
from ..tensor import Tensor, tensor, zeros
from ..tensor.functions import einsum

__all__ = ["EinMix", "Rearrange", "Reduce", "from_torch_layer"]


class Rearrange(RearrangeMixin, Module):
    """``einops.rearrange`` with its pattern and axis lengths fixed, as a module."""

    def forward(self, input: Tensor) -> Tensor:
        return self._apply_recipe(input)


class Reduce(ReduceMixin, Module):
    """``einops.reduce`` with its pattern, reduction and axis lengths fixed, as a module."""

    def forward(self, input: Tensor) -> Tensor:
        return self._apply_recipe(input)


class EinMix(_EinmixMixin, Module):
    """einsum of the input with a learned weight (and bias), with einops' rearrangements
    before and after: einops' ``EinMix``."""

    def _create_parameters(
        self, weight_shape: list, weight_bound: float, bias_shape: list | None, bias_bound: float
    ) -> None:
        self.weight = Parameter(zeros(weight_shape).uniform_(-weight_bound, weight_bound))
        if bias_shape is not None:
            self.bias = Parameter(zeros(bias_shape).uniform_(-bias_bound, bias_bound))
        else:
            self.bias = None

    def _create_rearrange_layers(
        self,
        pre_reshape_pattern: str | None,
        pre_reshape_lengths: dict | None,
        post_reshape_pattern: str | None,
        post_reshape_lengths: dict | None,
    ) -> None:
        self.pre_rearrange = None
        if pre_reshape_pattern is not None:
            self.pre_rearrange = Rearrange(pre_reshape_pattern, **cast(dict, pre_reshape_lengths))
        self.post_rearrange = None
        if post_reshape_pattern is not None:
            self.post_rearrange = Rearrange(
                post_reshape_pattern, **cast(dict, post_reshape_lengths)
            )

    def forward(self, input: Any) -> Tensor:
        if self.pre_rearrange is not None:
            input = self.pre_rearrange(input)
        result = einsum(self.einsum_pattern, input, self.weight)
        if self.bias is not None:
            result = result + self.bias
        if self.post_rearrange is not None:
            result = self.post_rearrange(result)
        return result


def from_torch_layer(layer: Any) -> Module | None:
    """retrograd's layer for one of ``einops.layers.torch`` (a ``torch.nn.Module``): the same
    pattern, reduction and axis lengths, ``EinMix``'s weights copied, the same training mode;
    ``None`` for a class of that module that is not a layer."""
    name = type(layer).__name__
    if name == "Rearrange":
        converted: Module = Rearrange(layer.pattern, **layer.axes_lengths)
    elif name == "Reduce":
        converted = Reduce(layer.pattern, layer.reduction, **layer.axes_lengths)
    elif name == "EinMix":
        converted = EinMix(
            layer.pattern, layer.weight_shape, layer.bias_shape, **layer.axes_lengths
        )
        converted.load_state_dict(
            {
                key: tensor(np.asarray(value.detach().cpu()))
                for key, value in layer.state_dict().items()
            }
        )
    else:
        return None
    return converted.train(layer.training)
