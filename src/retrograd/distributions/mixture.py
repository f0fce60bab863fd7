"""``MixtureSameFamily(mixture_distribution, component_distribution)``: a mixture whose
components are the rightmost batch dimension of one distribution (torch's; Gaussian mixture
models, mixture density networks)."""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import InvalidArgumentError, ShapeError
from . import constraints
from .categorical import Categorical
from .distribution import Distribution
from .utils import as_value

__all__ = ["MixtureSameFamily"]


class MixtureSameFamily(Distribution):
    """Weights ``mixture_distribution`` (a :class:`Categorical` over ``K``) and components
    ``component_distribution`` of batch shape ``(..., K)``."""

    arg_constraints: ClassVar[dict[str, Any]] = {}
    has_rsample = False

    def __init__(self, mixture_distribution: Categorical, component_distribution: Distribution,
                 validate_args: Any = None) -> None:  # fmt: skip
        if not isinstance(mixture_distribution, Categorical):
            raise InvalidArgumentError(
                "MixtureSameFamily: the mixture distribution must be a Categorical, got "
                f"{type(mixture_distribution).__name__}"
            )
        if not isinstance(component_distribution, Distribution):
            raise InvalidArgumentError(
                "MixtureSameFamily: the component distribution must be a Distribution, got "
                f"{type(component_distribution).__name__}"
            )
        mix_batch = mixture_distribution.batch_shape
        comp_batch = component_distribution.batch_shape
        k = mixture_distribution.logits.shape[-1]
        if not comp_batch or comp_batch[-1] != k:
            raise ShapeError(
                f"MixtureSameFamily: the mixture has {k} components but the component "
                f"distribution's batch shape is {comp_batch}; its last dimension must be {k}"
            )
        batch = comp_batch[:-1]
        if len(mix_batch) > len(batch) or any(
            m not in (1, c) for m, c in zip(reversed(mix_batch), reversed(batch))
        ):
            raise ShapeError(
                f"MixtureSameFamily: the mixture's batch shape {mix_batch} is not compatible "
                f"with the components' {batch}"
            )
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        self._num_component = k
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(batch, component_distribution.event_shape, validate_args=validate_args)

    @property
    def mixture_distribution(self) -> Categorical:
        return self._mixture_distribution

    @property
    def component_distribution(self) -> Distribution:
        return self._component_distribution

    @constraints.dependent_property
    def support(self) -> Any:  # type: ignore[override]
        return constraints.MixtureSameFamilyConstraint(self._component_distribution.support)

    def expand(self, batch_shape: Any, _instance: Any = None) -> MixtureSameFamily:
        batch_shape = tuple(batch_shape)
        component = self._component_distribution.expand(batch_shape + (self._num_component,))
        mixture = self._mixture_distribution.expand(batch_shape)
        return MixtureSameFamily(mixture, component, validate_args=False)

    def _pad_weights(self, weights: Any) -> Any:
        """Mixture weights ``(..., K)`` with one trailing 1 per event dimension."""
        return weights.reshape(tuple(weights.shape) + (1,) * self._event_ndims)

    @property
    def mean(self) -> Any:
        probs = self._pad_weights(self._mixture_distribution.probs)
        return (probs * self._component_distribution.mean).sum(-1 - self._event_ndims)

    @property
    def variance(self) -> Any:
        probs = self._pad_weights(self._mixture_distribution.probs)
        dim = -1 - self._event_ndims
        mean_cond_var = (probs * self._component_distribution.variance).sum(dim)
        centered = self._component_distribution.mean - self.mean.unsqueeze(dim)
        var_cond_mean = (probs * centered.pow(2)).sum(dim)
        return mean_cond_var + var_cond_mean

    def _pad(self, value: Any) -> Any:
        return value.unsqueeze(-1 - self._event_ndims)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self._mixture_distribution.logits)
        log_prob_x = self._component_distribution.log_prob(self._pad(value))
        log_mix = self._mixture_distribution.logits
        return (log_prob_x + log_mix).logsumexp(-1)

    def cdf(self, value: Any) -> Any:
        value = as_value(value, self._mixture_distribution.logits)
        cdf_x = self._component_distribution.cdf(self._pad(value))
        return (cdf_x * self._mixture_distribution.probs).sum(-1)

    def sample(self, sample_shape: Any = ()) -> Any:
        from ..autodiff import no_grad

        sample_shape = tuple(sample_shape)
        with no_grad():
            which = self._mixture_distribution.sample(sample_shape)  # sample + mix batch
            draws = self._component_distribution.sample(sample_shape)  # + batch, K, event
            k_dim = len(sample_shape) + len(self.batch_shape)
            which = which.expand(sample_shape + self.batch_shape)
            index = which.reshape(tuple(which.shape) + (1,) * (1 + self._event_ndims))
            index = index.expand(
                sample_shape + self.batch_shape + (1,) + tuple(draws.shape[k_dim + 1 :])
            )
            return draws.gather(k_dim, index).squeeze(k_dim)

    def __repr__(self) -> str:
        return (
            f"MixtureSameFamily(\n  {self._mixture_distribution!r},\n"
            f"  {self._component_distribution!r})"
        )
