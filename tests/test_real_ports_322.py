"""A program written here in the style of the distribution heads of Hugging Face transformers'
time-series models (``time_series_utils.py``) and the way those models drive them, run under
torch and, ported, under retrograd from the same weights (the harness: ``tests/real_ports.py``):
probabilistic forecasting heads.

- a ``TransformedDistribution`` subclass over ``[AffineTransform(loc, scale, event_dim)]``
  whose ``mean``/``variance``/``stddev`` properties read ``self.base_dist``; a projection of
  an ``nn.ModuleList`` of ``nn.Linear`` heads followed by a lambda-layer domain map; heads
  with class-level argument sizes, ``Independent(..., 1)`` for multivariate outputs,
  ``event_shape``/``event_dim`` properties; Student-t and normal heads (``squareplus``,
  ``clamp_min(torch.finfo(dtype).eps)``) and a negative binomial head
  (``total_count``/``logits``, scaled by the in-place ``logits += scale.log()``);
- driven as the models drive them: a mean-abs scaler (``loc`` the window's mean), an
  ``nn.LSTM(batch_first=True)`` over the scaled past, the projection, ``-distr.log_prob(
  future).mean()`` under ``Adam``; then the predictive ``mean``, ``stddev``, ``log_prob``,
  ``batch_shape`` and ``event_shape``.

The port changes the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``).
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the runs seed every stream)
    initializer,
    params_of,
    runs_with_draws,
)

HEADS_SOURCE = """
import torch
from torch import nn
from torch.distributions import (
    AffineTransform, Independent, NegativeBinomial, Normal, StudentT, TransformedDistribution,
)


class Rescaled(TransformedDistribution):
    # base distribution in scaled units, moved back by loc + scale * x
    def __init__(self, base, loc=None, scale=None, event_dim=0):
        self.loc = loc if loc is not None else 0.0
        self.scale = scale if scale is not None else 1.0
        shift = AffineTransform(loc=self.loc, scale=self.scale, event_dim=event_dim)
        super().__init__(base, [shift])

    @property
    def mean(self):
        return self.loc + self.scale * self.base_dist.mean

    @property
    def variance(self):
        return self.scale**2 * self.base_dist.variance

    @property
    def stddev(self):
        return self.variance.sqrt()


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class Projection(nn.Module):
    def __init__(self, width, sizes, to_domain):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(width, size) for size in sizes.values())
        self.to_domain = to_domain

    def forward(self, h):
        return self.to_domain(*[head(h) for head in self.heads])


def squareplus(x):
    return 0.5 * (x + torch.sqrt(torch.square(x) + 4.0))


class Head:
    sizes: dict
    family: type

    def __init__(self, dim=1):
        self.dim = dim
        self.sizes = {name: dim * n for name, n in type(self).sizes.items()}

    @property
    def event_shape(self):
        return (self.dim,) if self.dim > 1 else ()

    @property
    def event_dim(self):
        return len(self.event_shape)

    def projection(self, width):
        return Projection(width, self.sizes, Lambda(self.to_domain))

    def base(self, args):
        d = self.family(*args)
        return Independent(d, 1) if self.dim > 1 else d

    def distribution(self, args, loc=None, scale=None):
        d = self.base(args)
        if scale is None and loc is None:
            return d
        return Rescaled(d, loc=loc, scale=scale, event_dim=self.event_dim)


def positive(x):
    return squareplus(x).clamp_min(torch.finfo(x.dtype).eps)


class StudentTHead(Head):
    sizes = {"df": 1, "loc": 1, "scale": 1}
    family = StudentT

    @classmethod
    def to_domain(cls, df, loc, scale):
        return (2.0 + squareplus(df)).squeeze(-1), loc.squeeze(-1), positive(scale).squeeze(-1)


class NormalHead(Head):
    sizes = {"loc": 1, "scale": 1}
    family = Normal

    @classmethod
    def to_domain(cls, loc, scale):
        return loc.squeeze(-1), positive(scale).squeeze(-1)


class CountHead(Head):
    # counts stay integers: scale the logits instead of an affine map
    sizes = {"total_count": 1, "logits": 1}
    family = NegativeBinomial

    @classmethod
    def to_domain(cls, total_count, logits):
        return squareplus(total_count).squeeze(-1), logits.squeeze(-1)

    def base(self, args):
        count, logits = args
        d = NegativeBinomial(total_count=count, logits=logits)
        return Independent(d, 1) if self.dim > 1 else d

    def distribution(self, args, loc=None, scale=None):
        count, logits = args
        if scale is not None:
            logits += scale.log()
        return self.base((count, logits))


head = {"student_t": StudentTHead, "normal": NormalHead, "counts": CountHead}[kind](dim=dim)
rnn = nn.LSTM(dim, 10, batch_first=True)
proj = head.projection(10)
initialize(rnn)
initialize(proj)
adam = torch.optim.Adam([*rnn.parameters(), *proj.parameters()], lr=1e-2)
series = torch.tensor(series_values)  # [batch, time + 1, dim]
past, future = series[:, :-1], series[:, 1:]
scale = past.abs().mean(dim=1, keepdim=True).clamp_min(1e-5)
loc = None if kind == "counts" else past.mean(dim=1, keepdim=True)
scaled_past = past / scale
if dim == 1:  # univariate: no event axis
    future = future.squeeze(-1)
    scale = scale.squeeze(-1)
    loc = None if loc is None else loc.squeeze(-1)


def predictive():
    hidden, _ = rnn(scaled_past)
    return head.distribution(proj(hidden), loc=loc, scale=scale)


for step in range(3):
    nll = -predictive().log_prob(future).mean()
    adam.zero_grad()
    nll.backward()
    adam.step()
    record.append(nll.item())
record.append(params_of(rnn, proj))
with torch.no_grad():
    forecast = predictive()
    record += [forecast.mean.numpy(), forecast.stddev.numpy(), forecast.log_prob(future).numpy()]
    record.append([list(forecast.batch_shape), list(forecast.event_shape), head.event_dim])
"""

HEADS_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "    nll.backward()\n    adam.step()\n",
        "    grads = nll.backward()\n    adam.step(grads)\n",
    ),
]


def drawn_values(kind: str, dim: int, seed: int) -> np.ndarray:
    """Five series of 11 steps: counts for the negative binomial, else seasonal reals."""
    rng = np.random.default_rng(seed)
    t = np.arange(11)[None, :, None]
    level = 4.0 + 1.5 * np.cos(2 * np.pi * t / 5 + rng.uniform(0, 6, (5, 1, dim)))
    if kind == "counts":
        return rng.poisson(level * rng.uniform(0.5, 2.0, (5, 1, dim))).astype(np.float32)
    return (level + 0.25 * rng.standard_t(3, (5, 11, dim))).astype(np.float32)


@pytest.mark.usefixtures("global_streams_restored")
@pytest.mark.parametrize("kind, dim", [("student_t", 1), ("normal", 2), ("counts", 1)])
def test_distribution_heads_train_as_torch(capsys, kind, dim):
    (theirs, ours), logs = runs_with_draws(
        HEADS_SOURCE, HEADS_STEPS, capsys, 322,
        kind=kind, dim=dim, series_values=drawn_values(kind, dim, 322),
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1] == ""
    assert theirs[-1] == [[5, 10], [dim] if dim > 1 else [], dim - 1]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
