"""Real ports, continued (the harness: ``tests/real_ports.py``): a DeepAR-style forecaster of
counts with a negative-binomial likelihood, a program written here in the style of compact
DeepAR reimplementations.

Surface: ``from torch import lgamma, log, log1p, nn`` and ``from torch import distributions
as D``; a batch-first two-layer ``nn.LSTM`` (``dropout=``) whose forget-gate biases are set
through ``self.rnn._all_weights`` and ``bias.data[a:b].fill_(...)``; a
per-series scale ``1 + x[..., 0].max(dim=1, keepdim=True).values.unsqueeze(-1)`` applied by an
item assignment into ``x.clone()``; ``F.softplus`` heads for the mean and the dispersion,
rescaled by the scale and ``torch.sqrt`` of it; the loss ``-D.NegativeBinomial(total_count=1 /
alpha, probs=1 - 1 / (1 + alpha * mu)).log_prob(z).mean()``; a ``forward_with_activations``
returning the LSTM's outputs; one-step-ahead training on lagged counts and two calendar
covariates (``torch.stack`` of ``sin``/``cos``, ``expand(b, -1, -1)``, ``torch.cat``) with
``Adam`` and ``nn.utils.clip_grad_norm_``; then the distribution's ``mean`` and ``variance``,
which must be ``mu`` and ``mu + alpha * mu**2``, and its ``log_prob``, which must equal the
density written out with ``lgamma``/``log``/``log1p``. The port changes the imports and the
gradient lines; the weights are torch's (``initialize``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

DEEPAR_SOURCE = """
import torch
from torch import distributions as D
from torch import lgamma, log, log1p, nn
from torch.nn import functional as F


def negbin(mu, alpha):
    # mean mu, variance mu * (1 + alpha * mu)
    return D.NegativeBinomial(total_count=1.0 / alpha, probs=1.0 - 1.0 / (1.0 + alpha * mu))


def negbin_log_pmf(z, mu, alpha):
    # the same density written out with log-gamma terms
    r = 1.0 / alpha
    return (
        lgamma(z + r) - lgamma(z + 1) - lgamma(r)
        - r * log1p(alpha * mu) + z * (log(alpha * mu) - log1p(alpha * mu))
    )


class CountForecaster(nn.Module):
    def __init__(self, n_inputs, hidden=16, layers=2, dropout=0.0, forget_bias=1.0):
        super().__init__()
        self.rnn = nn.LSTM(
            input_size=n_inputs, hidden_size=hidden, num_layers=layers,
            dropout=dropout, batch_first=True,
        )
        # the gates are stacked (input, forget, cell, output): start with the forget gate open
        for layer_names in self.rnn._all_weights:
            for name in [n for n in layer_names if n.startswith("bias")]:
                b = getattr(self.rnn, name)
                quarter = b.size(0) // 4
                b.data[quarter : 2 * quarter].fill_(forget_bias)
        self.mean_head = nn.Linear(hidden, 1)
        self.shape_head = nn.Linear(hidden, 1)

    def forward(self, x):
        # divide each series' counts by 1 + their maximum so that all series look alike
        scale = 1.0 + x[..., 0].max(dim=1, keepdim=True).values.unsqueeze(-1)  # (batch, 1, 1)
        x = x.clone()
        x[..., 0] = x[..., 0] / scale.squeeze(-1)
        h, _ = self.rnn(x)
        mu = scale * F.softplus(self.mean_head(h))
        alpha = F.softplus(self.shape_head(h)) / torch.sqrt(scale)
        return mu, alpha

    def forward_with_activations(self, x, z=None):
        h, (h_last, c_last) = self.rnn(x)
        mu, alpha = F.softplus(self.mean_head(h)), F.softplus(self.shape_head(h))
        nll = None if z is None else -negbin(mu, alpha).log_prob(z).mean()
        return mu, alpha, nll, h


net = CountForecaster(3)
record.append(net.rnn.bias_ih_l1.detach()[16:32].clone().numpy())  # the forget gates: 1.0
initialize(net)
opt = torch.optim.Adam(net.parameters(), lr=1e-2)

series = torch.tensor(count_values)  # (batch, days + 1)
day = torch.arange(series.shape[1] - 1, dtype=torch.float32)
week = torch.stack([torch.sin(2 * math.pi * day / 7), torch.cos(2 * math.pi * day / 7)], dim=-1)
inputs = torch.cat([series[:, :-1, None], week.expand(series.shape[0], -1, -1)], dim=-1)
targets = series[:, 1:, None]  # one step ahead

net.train()
for step in range(4):
    mu, alpha = net(inputs)
    loss = -negbin(mu, alpha).log_prob(targets).mean()
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(net.parameters(), 10.0)
    opt.step()
    record.append(loss.item())
record.append(params_of(net))
_, _, nll, h = net.forward_with_activations(inputs, targets)
record.append([nll.item(), h.shape[-1]])

net.eval()
with torch.no_grad():
    mu, alpha = net(inputs)
    dist = negbin(mu, alpha)
    record.append(negbin_log_pmf(targets, mu, alpha).numpy())
    record.append(dist.log_prob(targets).numpy())
    for moment in (dist.mean, dist.variance, mu + alpha * mu**2):
        record.append(moment.squeeze(-1).numpy())
"""

DEEPAR_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "    loss.backward()\n    nn.utils.clip_grad_norm_(net.parameters(), 10.0)\n",
        "    grads = loss.backward()\n"
        "    nn.utils.clip_grad_norm_(grads, net.parameters(), 10.0)\n",
    ),
    ("    opt.step()\n", "    opt.step(grads)\n"),
]


def test_deepar_negative_binomial_trains_as_torch(capsys):
    rng = np.random.default_rng(323)
    weekly = 1.0 + 0.6 * np.sin(2 * np.pi * np.arange(15) / 7)
    counts = rng.poisson(weekly * rng.uniform(2.0, 20.0, (8, 1))).astype(np.float32)
    (theirs, ours), logs = runs_with_draws(
        DEEPAR_SOURCE, DEEPAR_STEPS, capsys, 3230,
        count_values=counts, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1] == ""
    np.testing.assert_array_equal(theirs[0], np.ones(16, np.float32))
    np.testing.assert_allclose(theirs[-5], theirs[-4], rtol=1e-4)  # the log-gamma form
    np.testing.assert_allclose(theirs[-2], theirs[-1], rtol=1e-4)  # the variance
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
