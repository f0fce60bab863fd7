"""``ExponentialFamily``: the base torch gives distributions of the form
``p(x; theta) = exp(<t(x), theta> - F(theta) + k(x))``, whose entropy (and the KL divergence
between two members of one family) follows from the log normalizer ``F`` by differentiation
(a Bregman divergence), with this library's autodiff in place of torch's."""

from __future__ import annotations

from typing import Any

from .distribution import Distribution

__all__ = ["ExponentialFamily"]


def log_normalizer_gradients(d: ExponentialFamily) -> tuple[list[Any], Any, list[Any]]:
    """Fresh leaves for ``d``'s natural parameters (detached, as torch's), the log normalizer
    at them, and its gradients in them, kept in the graph (``create_graph``)."""
    params = [p.detach().requires_grad_() for p in d._natural_params]
    log_normalizer = d._log_normalizer(*params)
    grads = log_normalizer.sum().backward(retain_graph=True, create_graph=True)
    return params, log_normalizer, [p.grad(grads) for p in params]


class ExponentialFamily(Distribution):
    """A subclass gives ``_natural_params`` (a tuple of tensors), ``_log_normalizer(*params)``
    and ``_mean_carrier_measure`` (``E[k(x)]``); ``entropy`` then needs nothing else."""

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        raise NotImplementedError(f"{type(self).__name__}._natural_params is not implemented")

    def _log_normalizer(self, *natural_params: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}._log_normalizer is not implemented")

    @property
    def _mean_carrier_measure(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}._mean_carrier_measure is not implemented")

    def entropy(self) -> Any:
        """``F(theta) - <theta, grad F(theta)> - E[k(x)]`` at detached natural parameters, as
        torch's (so not differentiable in ``d``'s own parameters; families override it with
        their closed forms)."""
        params, log_normalizer, gradients = log_normalizer_gradients(self)
        result = log_normalizer - self._mean_carrier_measure
        for param, gradient in zip(params, gradients, strict=True):
            result = result - (param * gradient).reshape(self.batch_shape + (-1,)).sum(-1)
        return result
