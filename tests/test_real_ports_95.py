"""Real ports, continued (the harness: ``tests/real_ports.py``): forecasting and tabular
networks written here in the style of public projects, each trained a few steps against
torch's run of the same program from the same weights and draws.

- a temporal fusion forecaster written in the style of jdb78/pytorch-forecasting's Temporal
  Fusion Transformer: a linear-interpolation resize by ``F.interpolate(x.unsqueeze(1), size,
  mode="linear", align_corners=True)`` (on 2-d and, folded, on 3-d inputs) with a trainable
  ``mask`` gate, a GLU (``F.glu``), resize-and-norm, add-and-norm and gated add-and-norm
  blocks, gated residual networks with a context and initialisation loops over
  ``named_parameters()`` (``zeros_``, ``xavier_uniform_``, ``kaiming_normal_(w, a=0,
  mode="fan_in", nonlinearity="leaky_relu")``), variable selection with ``nn.ModuleDict``s of
  scalers and per-variable networks and the one-variable fast path, scaled attention with
  ``torch.as_tensor(key.size(-1), dtype=scores.dtype).sqrt()``, ``masked_fill`` and ``bmm``,
  and multi-head attention sharing one value projection (``torch.stack`` and ``torch.mean``
  over heads); static contexts by ``context[:, None].expand(-1, steps, -1)``, the attention
  mask from ``torch.arange`` of a 0-d ``lengths.max()`` and a padding mask, static
  enrichment, LSTM encoder/decoder started from the static context by ``.expand(layers, -1,
  -1)``, gated skips and attention over the forecast steps; a pinball (quantile) loss by
  ``torch.max``; trained by Adam.
- a dense encoder-decoder forecaster written in the style of unit8co/darts' TiDE: residual
  MLP blocks, past and future covariate projections, ``x[:, :, None if self.n_future == 0 else
  -self.n_future :]``, the flattened encoder input, ``decoded.view(x.shape[0], horizon, -1)``,
  the lookback skip by ``transpose(1, 2)`` and ``skip.reshape_as(...)``; a reversible
  per-series norm with ``torch.var(x, dim=axes, keepdim=True, unbiased=False)`` over a tuple
  of dims, ``.detach()``ed statistics kept as attributes and an ``inverse`` by
  ``t.view(t.shape + (1,))``; a ``functools.wraps`` decorator writing the normalised targets
  back into the input batch by ``past[:, :, : self.n_targets] = self.norm(...)``; a dropout
  subclass overriding ``train`` without calling ``super``; trained by Adam on the MSE, then
  predicted in eval mode.
- a row-and-column attention model for tables written in the style of somepago/saint: an MLP
  viewing a 1-d input as a column, per-column MLP heads, residual and pre-norm wrappers, a
  GEGLU feed-forward, attention by ``einsum`` and einops ``rearrange`` (its lines as in the
  library's own usage), column attention followed by intersample attention over ``'b n d ->
  1 b (n d)'``; column offsets from ``F.pad(torch.tensor(list(cardinalities)), (1, 0),
  value=special_tokens).cumsum(dim=-1)[:-1]`` and mask offsets from ``F.pad(torch.Tensor(n)
  .fill_(2).type(torch.int8), (1, 0), value=0)`` as buffers; each continuous embedding written
  into ``torch.empty(rows, columns, dim)`` and the masked embeddings by ``cat_enc[mask == 0] =
  masked[mask == 0]``; CutMix by ``np.random.choice`` and ``torch.from_numpy`` and mixup;
  contrastive and denoising pre-training losses with two projection heads, then a supervised
  step on ``reps[:, 0, :]``, both by AdamW. ``torch.randperm`` draws from one seeded stream in
  both runs.

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns
the gradients, ``step`` takes them).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

IMPORTS = (
    "\nimport torch\nfrom torch import nn, optim\nfrom torch.nn import functional as F\n",
    "\nimport retrograd as torch\nfrom retrograd import nn, optim\n"
    "from retrograd.nn import functional as F\n",
)


# -- a temporal fusion forecaster, in pytorch-forecasting's style -------------------------------
TFT_SOURCE = '''
import types
from typing import Dict, Optional

import torch
from torch import nn, optim
from torch.nn import functional as F


class Stretch(nn.Module):
    """Resize the last axis by linear interpolation, every leading position independently;
    optionally scaled by a learned per-feature gate in (0, 2)."""

    def __init__(self, size: int, gated: bool = False):
        super().__init__()
        self.size, self.gated = size, gated
        if gated:
            self.mask = nn.Parameter(torch.zeros(size, dtype=torch.float32))

    def resize(self, rows):
        out = F.interpolate(rows.unsqueeze(1), self.size, mode="linear", align_corners=True)
        out = out.squeeze(1)
        if self.gated:
            out = out * torch.sigmoid(self.mask.unsqueeze(0)) * 2.0
        return out

    def forward(self, x):
        if x.dim() <= 2:
            return self.resize(x)
        # fold batch and time together, resize, unfold (batch first)
        flat = self.resize(x.contiguous().view(-1, x.size(-1)))
        return flat.contiguous().view(x.size(0), -1, flat.size(-1))


class GLU(nn.Module):
    def __init__(self, size: int, out: Optional[int] = None, dropout: Optional[float] = None):
        super().__init__()
        self.drop = nn.Dropout(dropout) if dropout is not None else None
        self.proj = nn.Linear(size, 2 * (out or size))
        for key, w in self.named_parameters():
            if key.endswith("bias"):
                nn.init.zeros_(w)
            else:
                nn.init.xavier_uniform_(w)

    def forward(self, x):
        if self.drop is not None:
            x = self.drop(x)
        return F.glu(self.proj(x), dim=-1)


class ResizeNorm(nn.Module):
    """LayerNorm of x, first resized to `out` features and scaled by a learned gate."""

    def __init__(self, size: int, out: Optional[int] = None):
        super().__init__()
        out = out or size
        self.resize = Stretch(out, gated=True) if out != size else None
        self.mask = nn.Parameter(torch.zeros(out, dtype=torch.float))
        self.norm = nn.LayerNorm(out)

    def forward(self, x):
        if self.resize is not None:
            x = self.resize(x)
        return self.norm(x * torch.sigmoid(self.mask) * 2.0)


class SkipNorm(nn.Module):
    """LayerNorm(x + skip), the skip resized to x's width when they differ."""

    def __init__(self, size: int, skip: Optional[int] = None, gated: bool = True):
        super().__init__()
        skip = skip or size
        self.resize = Stretch(size) if skip != size else None
        self.mask = nn.Parameter(torch.zeros(size, dtype=torch.float)) if gated else None
        self.norm = nn.LayerNorm(size)

    def forward(self, x, skip):
        if self.resize is not None:
            skip = self.resize(skip)
        if self.mask is not None:
            skip = skip * torch.sigmoid(self.mask) * 2.0
        return self.norm(x + skip)


class GatedSkipNorm(nn.Module):
    def __init__(self, size, out=None, skip=None, dropout=None, gated=False):
        super().__init__()
        out = out or size
        self.glu = GLU(size, out, dropout=dropout)
        self.add = SkipNorm(out, skip=skip or out, gated=gated)

    def forward(self, x, skip):
        return self.add(self.glu(x), skip)


class GRN(nn.Module):
    """Gated residual network: ELU MLP, optional additive context, GLU gate, skip and norm."""

    def __init__(self, size, hidden, out, dropout=0.1, context=None):
        super().__init__()
        self.resize_skip = ResizeNorm(size, out) if size != out else None
        self.fc1 = nn.Linear(size, hidden)
        self.ctx = nn.Linear(context, hidden, bias=False) if context is not None else None
        self.fc2 = nn.Linear(hidden, hidden)
        for key, w in self.named_parameters():
            if "bias" in key:
                nn.init.zeros_(w)
            elif key.startswith("fc"):
                nn.init.kaiming_normal_(w, a=0, mode="fan_in", nonlinearity="leaky_relu")
            elif key.startswith("ctx"):
                nn.init.xavier_uniform_(w)
        self.gate = GatedSkipNorm(hidden, out=out, skip=out, dropout=dropout)

    def forward(self, x, context=None):
        skip = x if self.resize_skip is None else self.resize_skip(x)
        h = self.fc1(x)
        if context is not None:
            h = h + self.ctx(context)
        h = self.fc2(F.elu(h))
        return self.gate(h, skip)


class VariableSelection(nn.Module):
    """Each scalar input scaled up by its own Linear and encoded by its own GRN; a softmax over
    the variables, from a GRN of all of them (and the context), mixes the encodings."""

    def __init__(self, sizes: Dict[str, int], hidden: int, dropout=0.1, context=None):
        super().__init__()
        self.sizes = sizes
        n = len(sizes)
        if n > 1:
            total = sum(sizes.values())
            self.weigher = GRN(total, min(hidden, n), n, dropout, context=context)
        self.encoders, self.scalers = nn.ModuleDict(), nn.ModuleDict()
        for name, size in sizes.items():
            self.scalers[name] = nn.Linear(1, size)
            self.encoders[name] = GRN(size, min(size, hidden), hidden, dropout)

    def forward(self, x: Dict[str, torch.Tensor], context=None):
        if len(self.sizes) == 1:
            # a single variable: nothing to select, only its encoding
            (name,) = self.sizes
            out = self.encoders[name](self.scalers[name](x[name]))
            if out.ndim == 3:
                weights = torch.ones(out.size(0), out.size(1), 1, 1, device=out.device)
            else:
                weights = torch.ones(out.size(0), 1, 1, device=out.device)
            return out, weights
        scaled = [self.scalers[name](x[name]) for name in self.sizes]
        encoded = torch.stack([self.encoders[n](s) for n, s in zip(self.sizes, scaled)], dim=-1)
        weights = torch.softmax(self.weigher(torch.cat(scaled, dim=-1), context), dim=-1)
        weights = weights.unsqueeze(-2)
        return (encoded * weights).sum(dim=-1), weights


class ScaledAttention(nn.Module):
    def forward(self, query, key, value, mask=None):
        scores = torch.bmm(query, key.permute(0, 2, 1))
        root = torch.as_tensor(key.size(-1), dtype=scores.dtype, device=scores.device).sqrt()
        scores = scores / root
        if mask is not None:
            scores = scores.masked_fill(mask, -1e9)
        weights = torch.softmax(scores, dim=2)
        return torch.bmm(weights, value), weights


class SharedValueAttention(nn.Module):
    """Heads with their own queries and keys but one value projection, averaged: the
    averaged weights can be read as one attention pattern."""

    def __init__(self, heads: int, width: int, dropout: float = 0.0):
        super().__init__()
        d = width // heads
        self.heads = heads
        self.drop = nn.Dropout(p=dropout)
        self.value = nn.Linear(width, d)
        self.queries = nn.ModuleList([nn.Linear(width, d) for _ in range(heads)])
        self.keys = nn.ModuleList([nn.Linear(width, d) for _ in range(heads)])
        self.attend = ScaledAttention()
        self.out = nn.Linear(d, width, bias=False)
        for key, w in self.named_parameters():
            (nn.init.zeros_ if "bias" in key else nn.init.xavier_uniform_)(w)

    def forward(self, query, key, value, mask=None):
        values = self.value(value)
        outs, maps = [], []
        for i in range(self.heads):
            out, weights = self.attend(self.queries[i](query), self.keys[i](key), values, mask)
            outs.append(self.drop(out))
            maps.append(weights)
        mixed = torch.mean(torch.stack(outs, dim=2), dim=2)
        return self.drop(self.out(mixed)), torch.stack(maps, dim=2)


def padding_mask(size, lengths):
    # True at the padded steps: at or past each sequence's length
    steps = torch.arange(size, device=lengths.device)
    return steps.unsqueeze(0) >= lengths.unsqueeze(-1)


def quantile_loss(pred, target, quantiles):
    # the pinball loss of each quantile, doubled (the median's is then the absolute error)
    errors = target.unsqueeze(-1) - pred
    q = torch.tensor(quantiles)
    return 2 * torch.max((q - 1) * errors, q * errors)


class FusionForecaster(nn.Module):
    STATIC = ["store_size", "region_level", "price_tier"]
    PAST = ["sales", "visits", "holiday"]
    FUTURE = ["holiday"]

    def __init__(self, hidden=8, layers=1, heads=2, quantiles=3, scaled=4, dropout=0.0):
        super().__init__()
        self.hp = types.SimpleNamespace(hidden=hidden, layers=layers, causal=True)
        H = hidden
        self.static_select = VariableSelection({n: scaled for n in self.STATIC}, H, dropout)
        self.past_select = VariableSelection({n: scaled for n in self.PAST}, H, dropout, context=H)
        self.future_select = VariableSelection(
            {n: scaled for n in self.FUTURE}, H, dropout, context=H
        )
        # four readings of the static embedding: selection context, the LSTM's h0 and c0,
        # and the enrichment context
        self.static_to_select = GRN(H, H, H, dropout)
        self.static_to_h0 = GRN(H, H, H, dropout)
        self.static_to_c0 = GRN(H, H, H, dropout)
        self.static_to_enrich = GRN(H, H, H, dropout)
        self.encoder = nn.LSTM(input_size=H, hidden_size=H, num_layers=layers, batch_first=True)
        self.decoder = nn.LSTM(input_size=H, hidden_size=H, num_layers=layers, batch_first=True)
        # one gate and norm shared by the encoder's and the decoder's outputs
        self.lstm_gate = GLU(H, dropout=dropout)
        self.lstm_norm = SkipNorm(H, gated=False)
        self.enrich = GRN(H, H, H, dropout, context=H)
        self.attention = SharedValueAttention(heads, H, dropout)
        self.attn_gate = GatedSkipNorm(H, dropout=dropout)
        self.feed_forward = GRN(H, H, H, dropout)
        self.final_gate = GatedSkipNorm(H, dropout=None)
        self.head = nn.Linear(H, quantiles)

    @staticmethod
    def over_time(context, steps):
        return context[:, None].expand(-1, steps, -1)

    def attention_mask(self, past_lengths, future_lengths):
        horizon = future_lengths.max()  # a 0-d tensor
        seen = torch.arange(horizon)
        at = torch.arange(0, horizon)[:, None]
        # a forecast step attends to neither itself nor later steps
        future = (seen >= at).unsqueeze(0).expand(past_lengths.size(0), -1, -1)
        past = padding_mask(past_lengths.max(), past_lengths).unsqueeze(1).expand(-1, horizon, -1)
        return torch.cat((past, future), dim=2)

    def forward(self, batch):
        past_lengths, future_lengths = batch["past_lengths"], batch["future_lengths"]
        series = torch.cat([batch["past"], batch["future"]], dim=1)
        steps, n_past = series.size(1), int(past_lengths.max())
        columns = {name: series[..., i].unsqueeze(-1) for i, name in enumerate(self.PAST)}
        statics = {n: batch["static"][:, i].unsqueeze(-1) for i, n in enumerate(self.STATIC)}

        static, static_weights = self.static_select(statics)
        select_ctx = self.over_time(self.static_to_select(static), steps)
        past, past_weights = self.past_select(
            {n: columns[n][:, :n_past] for n in self.PAST}, select_ctx[:, :n_past]
        )
        future, future_weights = self.future_select(
            {n: columns[n][:, n_past:] for n in self.FUTURE}, select_ctx[:, n_past:]
        )

        h0 = self.static_to_h0(static).expand(self.hp.layers, -1, -1)
        c0 = self.static_to_c0(static).expand(self.hp.layers, -1, -1)
        past_out, state = self.encoder(past, (h0, c0))
        future_out, _ = self.decoder(future, state)
        local = torch.cat(
            [
                self.lstm_norm(self.lstm_gate(past_out), past),
                self.lstm_norm(self.lstm_gate(future_out), future),
            ],
            dim=1,
        )

        enriched = self.enrich(local, self.over_time(self.static_to_enrich(static), steps))
        queries = enriched[:, n_past:]
        attended, attn = self.attention(
            query=queries, key=enriched, value=enriched,
            mask=self.attention_mask(past_lengths, future_lengths),
        )
        out = self.feed_forward(self.attn_gate(attended, queries))
        out = self.final_gate(out, local[:, n_past:])
        return {
            "prediction": self.head(out),
            "past_attention": attn[..., :n_past],
            "static_weights": static_weights,
            "past_weights": past_weights,
            "future_weights": future_weights,
        }


model = FusionForecaster()
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=1e-2)
for batch in batches:
    inputs = {name: torch.tensor(value) for name, value in batch.items() if name != "target"}
    out = model(inputs)
    loss = quantile_loss(out["prediction"], torch.tensor(batch["target"]), [0.1, 0.5, 0.9]).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    for key in ("past_attention", "static_weights", "past_weights", "future_weights"):
        record.append(out[key].detach().numpy())
record += [params_of(model)]
'''

TFT_STEPS = [
    IMPORTS,
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_temporal_fusion_forecaster_trains_as_torch(capsys):
    rng = np.random.default_rng(9501)
    batches = []
    for past_lengths in ([5, 5, 5], [5, 4, 3]):
        batches.append(
            {
                "past": rng.standard_normal((3, 5, 3)).astype(np.float32),
                "future": rng.standard_normal((3, 3, 3)).astype(np.float32),
                "static": rng.standard_normal((3, 3)).astype(np.float32),
                "past_lengths": np.array(past_lengths),
                "future_lengths": np.array([3, 3, 3]),
                "target": rng.standard_normal((3, 3)).astype(np.float32),
            }
        )
    (theirs, ours), _ = runs_with_draws(
        TFT_SOURCE,
        TFT_STEPS,
        capsys,
        9501,
        batches=batches,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 2 * 5 + 1
    # the padded past steps of the second batch get no attention
    assert np.all(theirs[6][1, :, :, 4] == 0) and np.all(theirs[6][2, :, :, 3:] == 0)
    # the keys' biases add one constant to each query's scores, which the softmax ignores: their
    # true gradient is zero, so Adam's steps on them follow the rounding noise
    key_biases = [f"0.attention.keys.{i}.bias" for i in range(2)]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=key_biases)


# -- a dense time-series encoder-decoder, in darts' TiDE style ----------------------------------
TIDE_SOURCE = """
from functools import wraps
from typing import Optional

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch import Tensor


class AlwaysOnDropout(nn.Dropout):
    \"\"\"Dropout that a train() call switches on for good: eval() leaves it as it is (sampling
    at prediction time), since train is overridden without super().\"\"\"

    active: bool = False

    def train(self, mode=True):
        if mode:
            self.active = True

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.active, self.inplace)


class ReversibleNorm(nn.Module):
    \"\"\"Per-series standardisation over every axis but batch and feature, with an affine
    part; inverse() maps outputs (with a trailing samples axis) back to the raw scale.\"\"\"

    def __init__(self, features: int, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x: Tensor):
        axes = tuple(range(1, x.ndim - 1))
        self.center = torch.mean(x, dim=axes, keepdim=True).detach()
        spread = torch.var(x, dim=axes, keepdim=True, unbiased=False)
        self.scale = torch.sqrt(spread + self.eps).detach()
        return (x - self.center) / self.scale * self.weight + self.bias

    def inverse(self, y: Tensor):
        def col(t):
            return t.view(t.shape + (1,))

        y = (y - col(self.bias)) / (col(self.weight) + self.eps**2)
        return y * col(self.scale) + col(self.center)


def normalized_targets(forward):
    \"\"\"Standardise the target columns of the past input in place before forward, and map
    the forecast back after it.\"\"\"

    @wraps(forward)
    def wrapper(self, inputs, *rest):
        if self.norm is None:
            return forward(self, inputs, *rest)
        past = inputs[0]
        past[:, :, : self.n_targets] = self.norm(past[:, :, : self.n_targets])
        return self.norm.inverse(forward(self, (past, *inputs[1:]), *rest))

    return wrapper


class DenseResidual(nn.Module):
    def __init__(self, d_in: int, d_out: int, hidden: int, dropout: float, layer_norm: bool):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out), AlwaysOnDropout(dropout)
        )
        self.shortcut = nn.Linear(d_in, d_out)
        self.norm = nn.LayerNorm(d_out) if layer_norm else None

    def forward(self, x):
        y = self.mlp(x) + self.shortcut(x)
        return y if self.norm is None else self.norm(y)


class DenseForecaster(nn.Module):
    def __init__(self, *, n_inputs, n_targets, n_future, n_static, samples, hidden,
                 decoder_width, temporal_hidden, past_proj, future_proj, encoders=1,
                 decoders=1, layer_norm=True, dropout=0.0, lookback=6, horizon=3,
                 reversible=True):
        super().__init__()
        self.lookback, self.horizon, self.samples = lookback, horizon, samples
        self.n_targets, self.n_future = n_targets, n_future
        self.n_past = n_inputs - n_targets - n_future
        self.norm = ReversibleNorm(n_targets) if reversible else None

        def block(d_in, d_out, width=hidden):
            return DenseResidual(d_in, d_out, width, dropout, layer_norm)

        # covariates projected per step to a few features (or fed raw when the width is 0)
        self.past_proj = block(self.n_past, past_proj) if self.n_past and past_proj else None
        self.future_proj = block(n_future, future_proj) if n_future and future_proj else None
        past_width = past_proj or self.n_past
        future_width = (future_proj or n_future) if n_future else 0
        flat = lookback * (n_targets + past_width) + (lookback + horizon) * future_width
        self.encoder_stack = nn.Sequential(
            block(flat + n_static, hidden), *[block(hidden, hidden) for _ in range(encoders - 1)]
        )
        self.decoder_stack = nn.Sequential(
            *[block(hidden, hidden) for _ in range(decoders - 1)],
            block(hidden, decoder_width * horizon * samples),
        )
        self.temporal = block(decoder_width * samples + future_width, n_targets * samples,
                              width=temporal_hidden)
        self.lookback_skip = nn.Linear(lookback, horizon * samples)

    @normalized_targets
    def forward(self, inputs):
        past, future, static = inputs
        targets = past[:, :, : self.n_targets]
        future_cov = None
        if self.n_future:
            # the future covariates' history sits in the last columns of the past input
            known = past[:, :, None if self.n_future == 0 else -self.n_future :]
            future_cov = torch.cat([known, future], dim=1)
            if self.future_proj is not None:
                future_cov = self.future_proj(future_cov)
        past_cov = None
        if self.n_past:
            past_cov = past[:, :, self.n_targets : self.n_targets + self.n_past]
            if self.past_proj is not None:
                past_cov = self.past_proj(past_cov)
        parts = [targets, past_cov, future_cov, static]
        code = torch.cat([p.flatten(start_dim=1) for p in parts if p is not None], dim=1)
        decoded = self.decoder_stack(self.encoder_stack(code))
        decoded = decoded.view(past.shape[0], self.horizon, -1)
        if future_cov is not None:
            decoded = torch.cat([decoded, future_cov[:, -self.horizon :, :]], dim=2)
        out = self.temporal(decoded)
        # a linear map over the lookback window, per target: time moved to the last axis
        skip = self.lookback_skip(targets.transpose(1, 2)).transpose(1, 2)
        out = out + skip.reshape_as(out)
        return out.view(-1, self.horizon, self.n_targets, self.samples)


# three targets, one past covariate, two future covariates, one static covariate
model = DenseForecaster(
    n_inputs=6, n_targets=3, n_future=2, n_static=1, samples=1, hidden=16, decoder_width=4,
    temporal_hidden=8, past_proj=3, future_proj=3, encoders=2, decoders=2,
)
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=0.001)
mse = nn.MSELoss()
for past, future, static, truth in batches:
    model.train()
    past_in = torch.tensor(past)
    forecast = model((past_in, torch.tensor(future), torch.tensor(static)))
    loss = mse(forecast[..., 0], torch.tensor(truth))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    # the input now holds the standardised targets (written in place), with no graph
    record.extend([loss.item(), past_in.detach().numpy(), past_in.requires_grad])
record += [params_of(model)]
model.eval()
record.append(model.encoder_stack[0].mlp[3].active)
with torch.no_grad():
    first = tuple(torch.tensor(a) for a in batches[0][:3])
    record.append(model(first).numpy())
"""

TIDE_STEPS = [
    (
        "\nimport torch\nfrom torch import nn, optim\nfrom torch.nn import functional as F\n"
        "from torch import Tensor\n",
        "\nimport retrograd as torch\nfrom retrograd import nn, optim\n"
        "from retrograd.nn import functional as F\n"
        "from retrograd import Tensor\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_dense_forecaster_with_reversible_norm_trains_as_torch(capsys):
    rng = np.random.default_rng(9502)
    batches = [
        (
            rng.standard_normal((4, 6, 6)).astype(np.float32) * 3 + 1,
            rng.standard_normal((4, 3, 2)).astype(np.float32),
            rng.standard_normal((4, 1)).astype(np.float32),
            rng.standard_normal((4, 3, 3)).astype(np.float32),
        )
        for _ in range(3)
    ]
    (theirs, ours), _ = runs_with_draws(
        TIDE_SOURCE,
        TIDE_STEPS,
        capsys,
        9502,
        batches=batches,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 3 * 3 + 3
    assert theirs[-2] is True
    # the targets written back standardised: each series' first columns have mean ~0 (the
    # affine part is still near its start after three small steps)
    assert abs(theirs[1][:, :, :3].mean()) < 1e-2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- row and column attention for tables, in somepago/saint's style -----------------------------
SAINT_SOURCE = """
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch import einsum
import numpy as np
from einops import rearrange


class TinyMLP(nn.Module):
    # sizes (d_in, hidden, d_out); a 1-d input is taken as one column
    def __init__(self, sizes):
        super().__init__()
        d_in, hidden, d_out = sizes
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))

    def forward(self, x):
        if len(x.shape) == 1:
            x = x.view(x.size(0), -1)
        return self.net(x)


class PerColumnMLP(nn.Module):
    # one TinyMLP per column of a (batch, columns, dim) input; a list of outputs
    def __init__(self, dim, n_columns, out_sizes):
        super().__init__()
        self.heads = nn.ModuleList(
            [TinyMLP([dim, 5 * dim, out_sizes[i]]) for i in range(n_columns)]
        )

    def forward(self, x):
        return [head(x[:, i, :]) for i, head in enumerate(self.heads)]


class AddInput(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


class NormFirst(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm, self.fn = nn.LayerNorm(dim), fn

    def forward(self, x):
        return self.fn(self.norm(x))


class GatedGELU(nn.Module):
    def forward(self, x):
        values, gates = x.chunk(2, dim=-1)
        return values * F.gelu(gates)


def feed_forward(dim, mult=4, dropout=0.0):
    return nn.Sequential(
        nn.Linear(dim, 2 * mult * dim), GatedGELU(), nn.Dropout(dropout), nn.Linear(mult * dim, dim)
    )


class MultiHead(nn.Module):
    def __init__(self, dim, heads=8, head_dim=16):
        super().__init__()
        self.heads, self.scale = heads, head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * heads * head_dim, bias=False)
        self.out = nn.Linear(heads * head_dim, dim)

    def forward(self, x):
        q, k, v = [
            rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in self.qkv(x).chunk(3, dim=-1)
        ]
        scores = einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        mixed = einsum("b h i j, b h j d -> b h i d", scores.softmax(dim=-1), v)
        return self.out(rearrange(mixed, "b h n d -> b n (h d)"))


def sublayer(dim, fn):
    return NormFirst(dim, AddInput(fn))


class ColumnRowEncoder(nn.Module):
    \"\"\"Attention across a row's columns, then across the rows of the batch: each row's
    columns flattened into one token of a single sequence.\"\"\"

    def __init__(self, dim, n_columns, depth, heads, head_dim, row_head_dim=16):
        super().__init__()
        wide = dim * n_columns
        self.layers = nn.ModuleList([
            nn.ModuleList([
                sublayer(dim, MultiHead(dim, heads=heads, head_dim=head_dim)),
                sublayer(dim, feed_forward(dim)),
                sublayer(wide, MultiHead(wide, heads=heads, head_dim=row_head_dim)),
                sublayer(wide, feed_forward(wide)),
            ])
            for _ in range(depth)
        ])

    def forward(self, categorical, continuous=None):
        x = categorical if continuous is None else torch.cat((categorical, continuous), dim=1)
        n = x.shape[1]
        for column_attn, column_ff, row_attn, row_ff in self.layers:
            x = column_ff(column_attn(x))
            x = rearrange(x, "b n d -> 1 b (n d)")
            x = row_ff(row_attn(x))
            x = rearrange(x, "1 b (n d) -> b n d", n=n)
        return x


class TableModel(nn.Module):
    def __init__(self, *, cardinalities, n_continuous, dim, depth, heads, head_dim=16,
                 special_tokens=0, n_classes=2, cont_hidden=16, head_hidden=32):
        super().__init__()
        self.n_categorical, self.n_continuous, self.dim = len(cardinalities), n_continuous, dim
        vocab = sum(cardinalities) + special_tokens
        # where each column's ids start in the shared embedding table
        starts = F.pad(torch.tensor(list(cardinalities)), (1, 0), value=special_tokens)
        self.register_buffer("column_starts", starts.cumsum(dim=-1)[:-1])
        # two mask embeddings per column (masked / kept): offsets 0, 2, 4, ... kept as int8
        for kind, count in (("categorical", self.n_categorical), ("continuous", n_continuous)):
            twos = torch.Tensor(count).fill_(2).type(torch.int8)
            offsets = F.pad(twos, (1, 0), value=0).cumsum(dim=-1)[:-1]
            self.register_buffer(f"{kind}_mask_offsets", offsets)
        self.embeds = nn.Embedding(vocab, dim)
        self.cont_embeds = nn.ModuleList(
            [TinyMLP([1, cont_hidden, dim]) for _ in range(n_continuous)]
        )
        self.categorical_mask_embeds = nn.Embedding(2 * self.n_categorical, dim)
        self.continuous_mask_embeds = nn.Embedding(2 * n_continuous, dim)
        n_columns = self.n_categorical + n_continuous
        self.encoder = ColumnRowEncoder(dim, n_columns, depth, heads, head_dim)
        # denoising heads per column, a classifier, and two contrastive projections
        self.categorical_heads = PerColumnMLP(dim, self.n_categorical, cardinalities)
        self.continuous_heads = PerColumnMLP(dim, n_continuous, np.ones(n_continuous).astype(int))
        self.classifier = TinyMLP([dim, head_hidden, n_classes])
        wide = dim * n_columns
        self.project_a = TinyMLP([wide, 6 * wide // 5, wide // 2])
        self.project_b = TinyMLP([wide, 6 * wide // 5, wide // 2])

    def forward(self, categorical_enc, continuous_enc):
        x = self.encoder(categorical_enc, continuous_enc)
        return (self.categorical_heads(x[:, : self.n_categorical, :]),
                self.continuous_heads(x[:, self.n_categorical :, :]))


def embed(model, categorical, continuous, categorical_mask, continuous_mask):
    \"\"\"Token embeddings of every cell; a masked cell (mask 0) gets its column's mask
    embedding instead.\"\"\"
    categorical = categorical + model.column_starts.type_as(categorical)
    cat_enc = model.embeds(categorical)
    rows, columns = continuous.shape
    cont_enc = torch.empty(rows, columns, model.dim)
    for j in range(model.n_continuous):
        cont_enc[:, j, :] = model.cont_embeds[j](continuous[:, j])
    cat_masked = model.categorical_mask_embeds(
        categorical_mask + model.categorical_mask_offsets.type_as(categorical_mask))
    cont_masked = model.continuous_mask_embeds(
        continuous_mask + model.continuous_mask_offsets.type_as(continuous_mask))
    cat_enc[categorical_mask == 0] = cat_masked[categorical_mask == 0]
    cont_enc[continuous_mask == 0] = cont_masked[continuous_mask == 0]
    return cat_enc, cont_enc


def cutmix(categorical, continuous, p_swap):
    # each cell replaced, with probability p_swap, by the same cell of another row
    order = torch.randperm(categorical.size()[0])
    keep_cat = torch.from_numpy(np.random.choice(2, categorical.shape, p=[p_swap, 1 - p_swap]))
    keep_cont = torch.from_numpy(np.random.choice(2, continuous.shape, p=[p_swap, 1 - p_swap]))
    donor_cat, donor_cont = categorical[order, :], continuous[order, :]
    mixed_cat, mixed_cont = categorical.clone().detach(), continuous.clone().detach()
    mixed_cat[keep_cat == 0] = donor_cat[keep_cat == 0]
    mixed_cont[keep_cont == 0] = donor_cont[keep_cont == 0]
    return mixed_cat, mixed_cont


def mixup(a, b, lam):
    order = torch.randperm(a.size()[0])
    return lam * a + (1 - lam) * a[order, :], lam * b + (1 - lam) * b[order, :]


cardinalities = [1, 3, 4]  # column 0 is the constant [CLS] column
model = TableModel(cardinalities=tuple(cardinalities), n_continuous=2, dim=4, depth=1, heads=2)
initialize(model)
buffers = dict(model.named_buffers())
record.append([f"{name}: {str(b.dtype).removeprefix('torch.')}" for name, b in buffers.items()])
record.append({name: b.numpy() for name, b in buffers.items()})

# self-supervised pre-training: a contrastive loss between a clean and a corrupted view, and
# a denoising loss reconstructing the cells from the corrupted view
optimizer = optim.AdamW(model.parameters(), lr=1e-4)
xent, mse = nn.CrossEntropyLoss(), nn.MSELoss()
temperature = 0.7
for cat, cont, label, cat_mask, cont_mask in data:
    cat, cont = torch.tensor(cat), torch.tensor(cont)
    cat_mask, cont_mask = torch.tensor(cat_mask), torch.tensor(cont_mask)
    optimizer.zero_grad()
    noisy_cat, noisy_cont = cutmix(cat, cont, p_swap=0.1)
    view_cat, view_cont = embed(model, noisy_cat, noisy_cont, cat_mask, cont_mask)
    view_cat, view_cont = mixup(view_cat, view_cont, lam=0.3)
    clean_cat, clean_cont = embed(model, cat, cont, cat_mask, cont_mask)

    z1 = model.encoder(clean_cat, clean_cont)
    z2 = model.encoder(view_cat, view_cont)
    z1 = model.project_a((z1 / z1.norm(dim=-1, keepdim=True)).flatten(1, 2))
    z2 = model.project_b((z2 / z2.norm(dim=-1, keepdim=True)).flatten(1, 2))
    same = torch.arange(z1.size(0))
    logits = z1 @ z2.t() / temperature
    contrastive = (xent(logits, same) + xent(z2 @ z1.t() / temperature, same)) / 2

    cat_out, cont_out = model(view_cat, view_cont)
    denoise = 10 * mse(torch.cat(cont_out, dim=1), cont)
    for j in range(1, cat.shape[-1]):  # the [CLS] column is not reconstructed
        denoise = denoise + xent(cat_out[j], cat[:, j])
    loss = 0.5 * contrastive + denoise
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record += [params_of(model)]

# supervised fine-tuning on the [CLS] column's representation
optimizer = optim.AdamW(model.parameters(), lr=1e-4)
for cat, cont, label, cat_mask, cont_mask in data:
    cat, cont, label = torch.tensor(cat), torch.tensor(cont), torch.tensor(label)
    cat_mask, cont_mask = torch.tensor(cat_mask), torch.tensor(cont_mask)
    optimizer.zero_grad()
    reps = model.encoder(*embed(model, cat, cont, cat_mask, cont_mask))
    loss = xent(model.classifier(reps[:, 0, :]), label.squeeze())
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record += [params_of(model)]
"""

SAINT_STEPS = [
    (
        "\nimport torch\nfrom torch import nn, optim\nfrom torch.nn import functional as F\n"
        "from torch import einsum\n",
        "\nimport retrograd as torch\nfrom retrograd import nn, optim\n"
        "from retrograd.nn import functional as F\n"
        "from retrograd import einsum\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def _randperm_from(seed):
    """``make_randperm``: each library's ``randperm`` drawing from one stream seeded by
    ``seed`` (the same permutations in both runs)."""

    def make(lib):
        rng = np.random.default_rng(seed)

        def randperm(n, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        lib.randperm = randperm
        return randperm

    return make


def test_table_transformer_pretrains_and_trains_as_torch(capsys):
    rng = np.random.default_rng(9503)
    data = []
    for _ in range(2):
        x_categ = np.stack(
            [np.zeros(5, np.int64), rng.integers(0, 3, 5), rng.integers(0, 4, 5)], axis=1
        )
        cat_mask = np.ones((5, 3), np.int64)
        cat_mask[rng.integers(0, 5), rng.integers(1, 3)] = 0
        con_mask = (rng.uniform(size=(5, 2)) > 0.2).astype(np.int64)
        x_cont = rng.standard_normal((5, 2)).astype(np.float32)
        data.append((x_categ, x_cont, rng.integers(0, 2, (5, 1)), cat_mask, con_mask))
    saved = torch.randperm, rg.randperm
    try:
        (theirs, ours), _ = runs_with_draws(
            SAINT_SOURCE,
            SAINT_STEPS,
            capsys,
            9503,
            data=data,
            initialize=initializer(),
            params_of=params_of,
            make_randperm=_randperm_from(9503),
        )
    finally:
        torch.randperm, rg.randperm = saved
    assert len(theirs) == 2 + 2 + 1 + 2 + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
