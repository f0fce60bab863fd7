# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
probabilistic forecasting heads.

- huggingface/transformers' ``src/transformers/time_series_utils.py`` as written (the
  distribution heads of its time-series transformers): ``AffineTransformed``, a
  ``TransformedDistribution`` subclass over ``[AffineTransform(loc, scale, event_dim)]`` whose
  ``mean``/``variance``/``stddev`` properties read ``self.base_dist``; ``ParameterProjection``
  (an ``nn.ModuleList`` of ``nn.Linear`` heads and a ``LambdaLayer`` domain map);
  ``DistributionOutput`` with ``Independent(..., 1)`` for multivariate outputs;
  ``StudentTOutput``/``NormalOutput`` (``squareplus``, ``clamp_min(torch.finfo(dtype).eps)``)
  and ``NegativeBinomialOutput`` (``total_count``/``logits``, scaled by the in-place
  ``logits += scale.log()``);
- driven as the library's models drive them: a mean-abs scaler (``loc`` the window's mean), an
  ``nn.LSTM`` over the scaled past, the projection, ``-distr.log_prob(future).mean()`` under
  ``Adam``; then the predictive ``mean``, ``stddev`` and ``log_prob``, and the shapes.

The lines changed: the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``).
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

HEADS_SOURCE = '''
from typing import Callable, Optional

import torch
from torch import nn
from torch.distributions import (AffineTransform, Distribution, Independent,
                                 NegativeBinomial, Normal, StudentT,
                                 TransformedDistribution)


class AffineTransformed(TransformedDistribution):
    def __init__(
        self, base_distribution: Distribution, loc=None, scale=None, event_dim=0
    ):
        self.scale = 1.0 if scale is None else scale
        self.loc = 0.0 if loc is None else loc

        super().__init__(
            base_distribution,
            [AffineTransform(loc=self.loc, scale=self.scale, event_dim=event_dim)],
        )

    @property
    def mean(self):
        """
        Returns the mean of the distribution.
        """
        return self.base_dist.mean * self.scale + self.loc

    @property
    def variance(self):
        """
        Returns the variance of the distribution.
        """
        return self.base_dist.variance * self.scale**2

    @property
    def stddev(self):
        """
        Returns the standard deviation of the distribution.
        """
        return self.variance.sqrt()


class ParameterProjection(nn.Module):
    def __init__(
        self,
        in_features: int,
        args_dim: dict[str, int],
        domain_map: Callable[..., tuple[torch.Tensor]],
        **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.args_dim = args_dim
        self.proj = nn.ModuleList(
            [nn.Linear(in_features, dim) for dim in args_dim.values()]
        )
        self.domain_map = domain_map

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        params_unbounded = [proj(x) for proj in self.proj]

        return self.domain_map(*params_unbounded)


class LambdaLayer(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x, *args):
        return self.function(x, *args)


class DistributionOutput:
    distribution_class: type
    in_features: int
    args_dim: dict[str, int]

    def __init__(self, dim: int = 1) -> None:
        self.dim = dim
        self.args_dim = {k: dim * self.args_dim[k] for k in self.args_dim}

    def _base_distribution(self, distr_args):
        if self.dim == 1:
            return self.distribution_class(*distr_args)
        else:
            return Independent(self.distribution_class(*distr_args), 1)

    def distribution(
        self,
        distr_args,
        loc: Optional[torch.Tensor] = None,
        scale: Optional[torch.Tensor] = None,
    ) -> Distribution:
        distr = self._base_distribution(distr_args)
        if loc is None and scale is None:
            return distr
        else:
            return AffineTransformed(
                distr, loc=loc, scale=scale, event_dim=self.event_dim
            )

    @property
    def event_shape(self) -> tuple:
        r"""
        Shape of each individual event contemplated by the distributions that this object constructs.
        """
        return () if self.dim == 1 else (self.dim,)

    @property
    def event_dim(self) -> int:
        r"""
        Number of event dimensions, i.e., length of the `event_shape` tuple, of the distributions that this object
        constructs.
        """
        return len(self.event_shape)

    @property
    def value_in_support(self) -> float:
        r"""
        A float that will have a valid numeric value when computing the log-loss of the corresponding distribution. By
        default 0.0. This value will be used when padding data series.
        """
        return 0.0

    def get_parameter_projection(self, in_features: int) -> nn.Module:
        r"""
        Return the parameter projection layer that maps the input to the appropriate parameters of the distribution.
        """
        return ParameterProjection(
            in_features=in_features,
            args_dim=self.args_dim,
            domain_map=LambdaLayer(self.domain_map),
        )

    def domain_map(self, *args: torch.Tensor):
        r"""
        Converts arguments to the right shape and domain. The domain depends on the type of distribution, while the
        correct shape is obtained by reshaping the trailing axis in such a way that the returned tensors define a
        distribution of the right event_shape.
        """
        raise NotImplementedError()

    @staticmethod
    def squareplus(x: torch.Tensor) -> torch.Tensor:
        r"""
        Helper to map inputs to the positive orthant by applying the square-plus operation. Reference:
        https://twitter.com/jon_barron/status/1387167648669048833
        """
        return (x + torch.sqrt(torch.square(x) + 4.0)) / 2.0


class StudentTOutput(DistributionOutput):
    """
    Student-T distribution output class.
    """

    args_dim: dict[str, int] = {"df": 1, "loc": 1, "scale": 1}
    distribution_class: type = StudentT

    @classmethod
    def domain_map(cls, df: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor):
        scale = cls.squareplus(scale).clamp_min(torch.finfo(scale.dtype).eps)
        df = 2.0 + cls.squareplus(df)
        return df.squeeze(-1), loc.squeeze(-1), scale.squeeze(-1)


class NormalOutput(DistributionOutput):
    """
    Normal distribution output class.
    """

    args_dim: dict[str, int] = {"loc": 1, "scale": 1}
    distribution_class: type = Normal

    @classmethod
    def domain_map(cls, loc: torch.Tensor, scale: torch.Tensor):
        scale = cls.squareplus(scale).clamp_min(torch.finfo(scale.dtype).eps)
        return loc.squeeze(-1), scale.squeeze(-1)


class NegativeBinomialOutput(DistributionOutput):
    """
    Negative Binomial distribution output class.
    """

    args_dim: dict[str, int] = {"total_count": 1, "logits": 1}
    distribution_class: type = NegativeBinomial

    @classmethod
    def domain_map(cls, total_count: torch.Tensor, logits: torch.Tensor):
        total_count = cls.squareplus(total_count)
        return total_count.squeeze(-1), logits.squeeze(-1)

    def _base_distribution(self, distr_args) -> Distribution:
        total_count, logits = distr_args
        if self.dim == 1:
            return self.distribution_class(total_count=total_count, logits=logits)
        else:
            return Independent(
                self.distribution_class(total_count=total_count, logits=logits), 1
            )

    # Overwrites the parent class method. We cannot scale using the affine
    # transformation since negative binomial should return integers. Instead
    # we scale the parameters.
    def distribution(
        self,
        distr_args,
        loc: Optional[torch.Tensor] = None,
        scale: Optional[torch.Tensor] = None,
    ) -> Distribution:
        total_count, logits = distr_args

        if scale is not None:
            # See scaling property of Gamma.
            logits += scale.log()

        return self._base_distribution((total_count, logits))


# a small autoregressive forecaster trained on the head's negative log-likelihood, as the
# time-series transformers of the library use these heads: a mean-abs scaler, an LSTM over
# the scaled past, the projection, the (affine-transformed) distribution of the next values
OUTPUTS = {"student_t": StudentTOutput, "normal": NormalOutput, "negative_binomial": NegativeBinomialOutput}
distribution_output = OUTPUTS[head](dim=dim)
lstm = nn.LSTM(dim, 16, batch_first=True)
param_proj = distribution_output.get_parameter_projection(16)
initialize(lstm)
initialize(param_proj)
optimizer = torch.optim.Adam(list(lstm.parameters()) + list(param_proj.parameters()), lr=1e-2)
values = torch.tensor(series_values)  # [batch, time + 1, dim]
past, future = values[:, :-1], values[:, 1:]
scale = past.abs().mean(dim=1, keepdim=True).clamp_min(1e-5)  # [batch, 1, dim]
loc = past.mean(dim=1, keepdim=True) if head != "negative_binomial" else None
if dim == 1:
    future, scale = future.squeeze(-1), scale.squeeze(-1)
    loc = loc.squeeze(-1) if loc is not None else None
for step in range(4):
    out, _ = lstm(past / (scale if dim > 1 else scale.unsqueeze(-1)))
    distr = distribution_output.distribution(param_proj(out), loc=loc, scale=scale)
    loss = -distr.log_prob(future).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(lstm, param_proj))
with torch.no_grad():
    distr = distribution_output.distribution(param_proj(lstm(past / (scale if dim > 1 else scale.unsqueeze(-1)))[0]), loc=loc, scale=scale)
    record.append(distr.mean.numpy())
    record.append(distr.stddev.numpy())
    record.append(distr.log_prob(future).numpy())
    record.append([list(distr.batch_shape), list(distr.event_shape), distribution_output.event_dim, distribution_output.value_in_support])
'''

HEADS_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def drawn_values(head: str, dim: int, seed: int) -> np.ndarray:
    """Six series of 13 steps: counts for the negative binomial, else seasonal reals."""
    rng = np.random.default_rng(seed)
    t = np.arange(13)[None, :, None]
    level = 3.0 + 2.0 * np.sin(2 * np.pi * t / 6 + rng.uniform(0, 6, (6, 1, dim)))
    if head == "negative_binomial":
        return rng.poisson(level * rng.uniform(0.5, 3.0, (6, 1, dim))).astype(np.float32)
    return (level + 0.3 * rng.standard_t(4, (6, 13, dim))).astype(np.float32)


@pytest.mark.parametrize("head, dim", [("student_t", 1), ("normal", 2), ("negative_binomial", 1)])
def test_distribution_heads_train_as_torch(capsys, head, dim):
    (theirs, ours), logs = runs_with_draws(
        HEADS_SOURCE, HEADS_STEPS, capsys, 3220,
        head=head, dim=dim, series_values=drawn_values(head, dim, 322),
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1] == ""
    assert theirs[-1] == [[6, 12], [dim] if dim > 1 else [], dim - 1, 0.0]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
