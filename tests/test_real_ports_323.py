# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a DeepAR forecaster of counts with a negative-binomial likelihood.

- a ``DeepAR`` module as its author wrote it (``from torch import nn, lgamma, log, log1p``,
  ``from torch.distributions import NegativeBinomial``): a batch-first two-layer ``nn.LSTM``
  whose forget-gate biases are set through ``self.lstm._all_weights`` and
  ``bias.data[start:end].fill_(b)``; the scale ``nu = 1 + x[..., 0].max(dim=1,
  keepdim=True).values.unsqueeze(-1)`` applied by an item assignment into ``x.clone()``;
  ``F.softplus`` heads for the mean and the dispersion, rescaled by ``nu`` and
  ``torch.sqrt(nu)``; the loss ``-NegativeBinomial(total_count=1.0/alpha, probs=1.0 -
  1.0/(1.0+alpha*mu)).log_prob(z).mean()``; ``forward_with_activations``;
- trained one step ahead on lagged counts and two calendar covariates (``torch.stack`` of
  ``sin``/``cos``, ``expand``, ``torch.cat``) with ``Adam`` and ``nn.utils.clip_grad_norm_``;
  then the distribution's ``mean`` and ``variance``, which must be ``mu`` and
  ``mu * (1 + alpha * mu)``. (Its ``sample`` unpacks three values from the two ``forward``
  returns, so fails in torch as written; it is not run.)

The lines changed: the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

DEEPAR_SOURCE = '''
import torch
import torch.nn.functional as F
from torch import nn, lgamma, log, log1p
from torch.distributions import NegativeBinomial

class DeepAR(nn.Module):

    def __init__(
        self,
        input_size: int,
        hidden_size: int = 40,
        num_layers: int = 3,
        dropout_rate: float = 0.1,
        likelihood: str = "negbin",
        init_lstm_forget_bias: float = 1.0,
        scaled: bool = True,
    ):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.likelihood = likelihood
        self.dropout_rate = dropout_rate
        self.scaled = scaled

        self.lstm = nn.LSTM(
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            dropout=dropout_rate,
            batch_first=True
        )

        self._init_lstm_forget_bias(init_lstm_forget_bias)

        if likelihood == "negbin":
            self.proj_mu = nn.Linear(hidden_size, 1)
            self.proj_alpha = nn.Linear(hidden_size, 1)
        else:
            raise ValueError("likelihood must be negbin")

    def _init_lstm_forget_bias(self, b):
        for names in self.lstm._all_weights:
            for name in filter(lambda n: "bias" in n, names):
                bias = getattr(self.lstm, name)
                n = bias.size(0)
                start, end = n // 4, n // 2
                bias.data[start:end].fill_(b)

    def forward(self, x, targets=None):
        """
        Forward pass.
        Args:
           x: tensor of shape (batch_size, seq_length, input_size)
           targets: tensor of shape (batch_size, seq_length)
        Returns:
           dist_params: dictionary of distribution parameters
           loss: loss of the forward pass
        """

        #nu = 1.0 + x[..., 0].mean(dim=1, keepdim=True).unsqueeze(-1) # (batch, 1, 1)
        x_scaled = x.clone() if self.scaled else x
        if self.scaled:
            nu = 1.0 + x[..., 0].max(dim=1, keepdim=True).values.unsqueeze(-1) # (batch, 1, 1)
            x_scaled[..., 0] = x_scaled[..., 0] / nu.squeeze(-1)

        # lstm: (batch_size, seq_length, input_size) -> (batch_size, seq_length, hidden_size)
        out, (hidden, cell) = self.lstm(x_scaled)

        raw_mu = F.softplus(self.proj_mu(out)) # (batch_size, seq_length)
        raw_alpha = F.softplus(self.proj_alpha(out)) # (batch_size, seq_length)

        if self.scaled:
            mu = nu * raw_mu
            alpha = raw_alpha / torch.sqrt(nu)
        else:
            mu = raw_mu
            alpha = raw_alpha

        return mu, alpha

    def forward_with_activations(self, x, targets=None):
        out, (hidden, cell) = self.lstm(x)

        if self.likelihood == "negbin":
            raw_mu = F.softplus(self.proj_mu(out)) # (batch_size, seq_length)
            raw_alpha = F.softplus(self.proj_alpha(out)) # (batch_size, seq_length)

            #mu = nu * raw_mu
            #alpha = raw_alpha / torch.sqrt(nu)
            mu = raw_mu
            alpha = raw_alpha

            loss = None
            if targets is not None:
                loss = self._negbin_nll(targets, mu, alpha)

            return mu, alpha, loss, out
        else:
            raise ValueError("Unexpected likelihood in forward pass.")


    def _negbin_nll(self, z, mu, alpha):
        """
        Negative log likelihood of negative binomial.
        Args:
            z, mu, alpha: shape (batch_size, seq_length)
        """
        return (
            -NegativeBinomial(total_count=1.0/alpha, probs=1.0 - 1.0/(1.0+alpha*mu)).log_prob(z).mean()
        )
        #ll = lgamma(z + 1.0 / alpha) - lgamma(z+1) - lgamma(1.0 / alpha) - 1.0/alpha * log1p(alpha*mu + 1e-8) + z*(log(alpha*mu) - log1p(alpha*mu + 1e-8))
        #return -torch.mean(ll)

    def sample(self, x, n_samples=200, last_only=False):
        """
        Generate forecasts by sampling from the predictive distribution.

        Args:
            x: input tensor of shape (batch_size, seq_length, input_size)
            n_samples: number of forecast samples to draw

        Returns:
            samples: tensor of shape (n_samples, batch_size, seq_length)
        """
        self.eval()
        with torch.no_grad():
            mu, alpha, _ = self.forward(x)
            if last_only:
                mu_last, alpha_last = mu[:,-1], alpha[:,-1]
                r = 1.0/alpha_last
                p = 1.0-1.0/(1.0+alpha_last*mu_last)
                dist = NegativeBinomial(total_count=r, probs=p)
                samples = dist.sample((n_samples,)) # (n_samples, batch, seq, 1)
                return samples
            else:
                r = 1.0/alpha
                p = 1.0-1.0/(1.0+alpha*mu)

                dist = NegativeBinomial(total_count=r, probs=p)
                samples = dist.sample((n_samples,)) # (n_samples, batch, seq, 1)
                return samples.squeeze(-1) # (n_samples, batch, seq)

# training on lagged counts with two calendar covariates (one-step-ahead, teacher forced)
model = DeepAR(input_size=3, hidden_size=16, num_layers=2, dropout_rate=0.0)
record.append(model.lstm.bias_hh_l1.detach()[16:32].clone().numpy())  # the forget gates' bias: 1.0
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
counts = torch.tensor(count_values)  # (batch, seq_length + 1)
t = torch.arange(counts.shape[1] - 1, dtype=torch.float32)
calendar = torch.stack([torch.sin(2 * math.pi * t / 7), torch.cos(2 * math.pi * t / 7)], dim=-1)
x = torch.cat([counts[:, :-1, None], calendar.expand(counts.shape[0], -1, -1)], dim=-1)
z = counts[:, 1:, None]
model.train()
for step in range(5):
    mu, alpha = model(x)
    loss = model._negbin_nll(z, mu, alpha)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    record.append(loss.item())
record.append(params_of(model))
mu, alpha, loss, out = model.forward_with_activations(x, targets=z)
record.append([loss.item(), out.shape[-1]])
model.eval()
with torch.no_grad():
    mu, alpha = model(x)
    dist = NegativeBinomial(total_count=1.0 / alpha, probs=1.0 - 1.0 / (1.0 + alpha * mu))
    record.append(dist.mean.squeeze(-1).numpy())
    record.append(dist.variance.squeeze(-1).numpy())
    record.append((mu * (1 + alpha * mu)).squeeze(-1).numpy())
'''

DEEPAR_STEPS = [
    (
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn, lgamma, log, log1p\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\nfrom retrograd import nn, lgamma, log, log1p\n",
    ),
    (
        "    loss.backward()\n    nn.utils.clip_grad_norm_(model.parameters(), 10.0)\n    optimizer.step()\n",
        "    grads = loss.backward()\n    nn.utils.clip_grad_norm_(grads, model.parameters(), 10.0)\n    optimizer.step(grads)\n",
    ),
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
    np.testing.assert_allclose(theirs[-2], theirs[-1], rtol=1e-4)  # the variance
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
